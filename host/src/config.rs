//! Server settings from flags and environment variables.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct ServeConfig {
    /// Address to listen on; port 0 picks a free port (the bound address is printed first).
    #[arg(long, env = "LANCET_ADDR", default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// Root of the tables and of all server state: a local directory, or an object store URI
    /// (`s3://bucket/prefix`, `gs://...`, `az://...`).
    #[arg(long, env = "LANCET_DATA", default_value = "./lancet-data")]
    pub data: String,
    /// An object-store option (`aws_endpoint=http://...`, `aws_region=...`, ...) on top of
    /// the provider's environment variables (`AWS_ENDPOINT`, `AWS_REGION`, ...). Repeatable.
    #[arg(long = "storage-option", env = "LANCET_STORAGE_OPTIONS", value_delimiter = ',', value_parser = parse_option)]
    pub storage_options: Vec<(String, String)>,
    /// This node's name in leases and logs (default: host name and a random suffix). Replicas
    /// sharing one root must have different names.
    #[arg(long, env = "LANCET_NODE_ID")]
    pub node_id: Option<String>,
    /// Deprecated and ignored: catalog changes by other processes are now always seen (the
    /// catalog snapshot follows the `__manifest` table's changes). Accepted so existing
    /// deployments still start; a warning says so.
    #[arg(long, env = "LANCET_SHARED_ROOT", action = clap::ArgAction::Set, hide = true)]
    pub shared_root: Option<bool>,
    /// How long a job's lease lasts without renewal: a job whose node stops (killed, cut off)
    /// is taken over by another node sharing the root after at most this long (and a third
    /// of it). Renewed every third of it.
    #[arg(long, env = "LANCET_JOB_LEASE_TTL", value_parser = humantime::parse_duration, default_value = "15s")]
    pub job_lease_ttl: std::time::Duration,
    /// How stale a read may be: a read (query, count, describe, catalog lookup) trusts what
    /// this node checked within this interval and asks the store again after it; 0 checks on
    /// every request. A node always sees its own writes at once; another node's within the
    /// interval. Default: 0 on a local root (a check is a directory read), 1s on an object
    /// store (a check is a billed LIST of 10-60 ms).
    #[arg(long, env = "LANCET_READ_CONSISTENCY_INTERVAL", value_parser = humantime::parse_duration)]
    pub read_consistency_interval: Option<std::time::Duration>,
    /// The Ray clusters backfills may run on, besides this server's own nodes: a TOML file
    /// (docs/ray.md). A backfill's `cluster` names one; without this file only `default`.
    #[arg(long, env = "LANCET_CLUSTERS")]
    pub clusters: Option<PathBuf>,
    /// Keep the audit log (`<root>/_audit/log.lance`): every state-changing call, admin
    /// action and refused authentication, hash-chained per writer (docs/hosting.md). A
    /// change's answer waits until its record is stored.
    #[arg(long, env = "LANCET_AUDIT", default_value = "on", value_parser = on_off, action = clap::ArgAction::Set)]
    pub audit: bool,
    /// How often tenants with a storage quota are measured whole again (their writes are
    /// measured as they happen; this catches compaction, cleanup and backfills).
    #[arg(long, env = "LANCET_STORAGE_RESCAN", value_parser = humantime::parse_duration, default_value = "60s")]
    pub storage_rescan: std::time::Duration,
    /// Count what each tenant uses (requests, bytes, rows, UDF time, model tokens, job rows)
    /// and store it under the root (docs/hosting.md).
    #[arg(long, env = "LANCET_USAGE", default_value = "on", value_parser = on_off, action = clap::ArgAction::Set)]
    pub usage: bool,
    /// How often this node appends what each tenant used to `<root>/_usage/usage.lance`
    /// (what a killed node had not appended yet is lost).
    #[arg(long, env = "LANCET_USAGE_FLUSH", value_parser = humantime::parse_duration, default_value = "10s")]
    pub usage_flush: std::time::Duration,
    /// Tasks of backfills running on other nodes of the root that this node computes at once
    /// (it helps whenever it scans the root and finds open tasks); 0 turns helping off.
    #[arg(long, env = "LANCET_JOB_HELPER_TASKS", default_value_t = 1)]
    pub job_helper_tasks: usize,
    /// Answer `storage_options` (this server's `--storage-option`s) to describe/declare
    /// requests that ask with `vend_credentials: true`, so clients can read tables directly.
    /// Off by default: they may hold credentials.
    #[arg(long, env = "LANCET_VEND_STORAGE_OPTIONS", default_value_t = false, action = clap::ArgAction::Set)]
    pub vend_storage_options: bool,
    /// Serve SQL over Arrow Flight SQL (gRPC) on this address too (port 0 picks a free one;
    /// the second stdout line is then `flight sql listening on grpc://ADDR`). Off by default:
    /// a second port is a deployment decision.
    #[arg(long, env = "LANCET_FLIGHT_ADDR")]
    pub flight_addr: Option<std::net::SocketAddr>,
    /// Memory one SQL statement may use (DataFusion's pool: sorts, joins, aggregates), in MiB.
    #[arg(long, env = "LANCET_SQL_MEMORY_MB", default_value_t = 1024)]
    pub sql_memory_mb: usize,
    /// Wall time one SQL statement may run.
    #[arg(long, env = "LANCET_SQL_TIMEOUT", value_parser = humantime::parse_duration, default_value = "5m")]
    pub sql_timeout: std::time::Duration,
    /// Rows one SQL statement may answer.
    #[arg(long, env = "LANCET_SQL_MAX_ROWS", default_value_t = 100_000_000)]
    pub sql_max_rows: u64,
    /// Arrow bytes one SQL statement may answer, in MiB.
    #[arg(long, env = "LANCET_SQL_MAX_ANSWER_MB", default_value_t = 16384)]
    pub sql_max_answer_mb: u64,
    /// Serve the web console at `/console` (its page files are compiled into the binary; every
    /// data call it makes goes through the REST API with the user's key).
    #[arg(long, env = "LANCET_CONSOLE", default_value_t = true, action = clap::ArgAction::Set)]
    pub console: bool,
    /// Log a line per answered request (method, path, status, latency) at `info`. Off by
    /// default: with stderr a pipe (journald, a container's log driver) the line costs ~35 µs
    /// of server CPU per request (bench/RESULTS.md, session 30), and `/metrics` has the same
    /// figures. Failed requests (5xx) are logged either way.
    #[arg(long, env = "LANCET_ACCESS_LOG", default_value_t = false, action = clap::ArgAction::Set)]
    pub access_log: bool,
    /// Searches (vector, full-text) without a filter of tables on a local root read what the
    /// page cache already holds on the thread that asks (`preadv2` with `RWF_NOWAIT`) instead
    /// of handing every read to the blocking pool; a top-10 search's take costs a quarter to a third less CPU
    /// (bench/RESULTS.md, session 33). Reads that would wait for the disk go to the pool
    /// either way.
    #[arg(long, env = "LANCET_INLINE_LOCAL_READS", default_value_t = true, action = clap::ArgAction::Set)]
    pub inline_local_reads: bool,
    /// Largest accepted request body, in MiB.
    #[arg(long, env = "LANCET_MAX_BODY_MB", default_value_t = 512)]
    pub max_body_mb: usize,
    /// Time limit of one UDF call, in milliseconds of the guest's CPU time (wall time is bounded
    /// at 10 times it).
    #[arg(long, env = "LANCET_UDF_TIMEOUT_MS", default_value_t = 10_000)]
    pub udf_timeout_ms: u64,
    /// Linear-memory cap of one UDF instance, in MiB.
    #[arg(long, env = "LANCET_UDF_MEMORY_MB", default_value_t = 256)]
    pub udf_memory_mb: usize,
    /// The Python UDF runner (CPython in a Wasm component, built by
    /// `scripts/build-python-runner.sh`). Default: `$LANCET_CACHE_DIR/python/runner.wasm`
    /// (`~/.cache/lancet/python/runner.wasm`); when it is missing, Python UDFs are refused
    /// with a 400 that says so and Wasm UDFs work as ever.
    #[arg(long, env = "LANCET_PYTHON_RUNNER")]
    pub python_runner: Option<PathBuf>,
    /// ONNX Runtime's shared library (`libonnxruntime.so.1.31.x`), for embedding models.
    /// Default: `$LANCET_CACHE_DIR/models/libonnxruntime.so.1.31.1` when it is there
    /// (`bash scripts/models.sh` puts it there); without it models are refused with a 400 that
    /// says so and everything else works.
    #[arg(long, env = "LANCET_ONNXRUNTIME")]
    pub onnxruntime: Option<PathBuf>,
    /// Memory loaded embedding models may hold in all, in MiB (a model not in use is unloaded
    /// to make room; past that a load is refused with 503).
    #[arg(long, env = "LANCET_MODEL_MEMORY_MB", default_value_t = 2048)]
    pub model_memory_mb: usize,
    /// Calls one model runs at once, server-wide (each holds its own copy of the weights).
    #[arg(long, env = "LANCET_MODEL_SESSIONS", default_value_t = 1)]
    pub model_sessions: usize,
    /// Threads one model call may use (kept low so inference leaves cores to queries).
    #[arg(long, env = "LANCET_MODEL_THREADS", default_value_t = 1)]
    pub model_threads: usize,
    /// Wall-time limit of one model call, in milliseconds (ONNX Runtime stops the run).
    #[arg(long, env = "LANCET_MODEL_TIMEOUT_MS", default_value_t = 30_000)]
    pub model_timeout_ms: u64,
    /// Texts in one model call.
    #[arg(long, env = "LANCET_MODEL_MAX_ROWS", default_value_t = 1024)]
    pub model_max_rows: usize,
    /// Bytes of one text given to a model.
    #[arg(long, env = "LANCET_MODEL_MAX_TEXT_BYTES", default_value_t = 65_536)]
    pub model_max_text_bytes: usize,
    /// Model calls one tenant runs at once.
    #[arg(long, env = "LANCET_TENANT_MODEL_CONCURRENCY", default_value_t = 1)]
    pub tenant_model_concurrency: usize,
    /// Tokens one tenant may embed per second, sustained (0: no limit).
    #[arg(
        long,
        env = "LANCET_TENANT_MODEL_TOKENS_PER_SEC",
        default_value_t = 100_000
    )]
    pub tenant_model_tokens_per_sec: u64,
    /// MiB of model files one tenant may keep stored (0: no limit).
    #[arg(long, env = "LANCET_TENANT_MODEL_STORAGE_MB", default_value_t = 4096)]
    pub tenant_model_storage_mb: u64,
    /// Seconds an uploaded model file no registered model names is kept (then deleted at the
    /// tenant's next upload).
    #[arg(long, env = "LANCET_MODEL_UPLOAD_GRACE_S", default_value_t = 86_400)]
    pub model_upload_grace_s: u64,
    /// A local auth file (API keys, token issuer) instead of the data root's
    /// `_auth/auth.toml` (a file of a local root, an object under an object-store root).
    #[arg(long, env = "LANCET_AUTH_FILE")]
    pub auth_file: Option<PathBuf>,
    /// Serve `<database>.<host-domain>` host names as database `<database>` when a request
    /// names no database in a header.
    #[arg(long, env = "LANCET_HOST_DOMAIN")]
    pub host_domain: Option<String>,
    /// Largest result one UDF call may return, in MiB.
    #[arg(long, env = "LANCET_UDF_MAX_OUTPUT_MB", default_value_t = 64)]
    pub udf_max_output_mb: usize,
    /// Memory for decoded vector columns, in MiB: exact (brute-force) vector search on a
    /// column without an index reads them from memory instead of decoding the column from
    /// storage on every query. 0 turns this off.
    #[arg(long, env = "LANCET_VECTOR_CACHE_MB", default_value_t = 512)]
    pub vector_cache_mb: usize,
    /// Memory for byte ranges of immutable table files (data, deletion and index files) read
    /// from an object-store root, in MiB: a repeated read is answered from memory instead of a
    /// GET. Unused on a local root (the kernel's page cache does this). 0 turns it off.
    #[arg(long, env = "LANCET_OBJECT_CACHE_MB", default_value_t = 256)]
    pub object_cache_mb: u64,
    /// Requests served at once by the whole server; more are answered 503 with `Retry-After`.
    #[arg(long, env = "LANCET_MAX_IN_FLIGHT", default_value_t = 256)]
    pub max_in_flight: usize,
    /// Requests served at once for one tenant (`max_in_flight` under `[tenants.<name>]` in the
    /// auth file overrides it); more are answered 503 with `Retry-After`.
    #[arg(long, env = "LANCET_TENANT_MAX_IN_FLIGHT", default_value_t = 64)]
    pub tenant_max_in_flight: usize,
    /// Requests whose handlers run at once, shared fairly between tenants (admitted requests
    /// over it wait, up to 30 s; a request running longer than 1 s gives its slot back).
    /// Default: one per core.
    #[arg(long, env = "LANCET_MAX_RUNNING")]
    pub max_running: Option<usize>,
    /// Of those, the share of one tenant: beyond it a tenant only borrows slots no other
    /// tenant waits for. Default: half the cores (at least 1).
    #[arg(long, env = "LANCET_TENANT_MAX_RUNNING")]
    pub tenant_max_running: Option<usize>,
    /// Handlers one tenant runs at once while no other tenant is active (none has sent a
    /// request for 1 s); those beyond `max_running` run outside the slots, and another tenant
    /// that comes takes the next one that ends. At least `max_running`. Default: four per core.
    #[arg(long, env = "LANCET_MAX_RUNNING_ALONE")]
    pub max_running_alone: Option<usize>,
    /// Memory for request bodies being received or held by requests in flight, in MiB; a body
    /// that does not fit is answered 503 with `Retry-After`.
    #[arg(long, env = "LANCET_MAX_BODY_MEMORY_MB", default_value_t = 2048)]
    pub max_body_memory_mb: usize,
    /// Seconds a client may take to send its request headers.
    #[arg(long, env = "LANCET_HEADER_TIMEOUT_SECS", default_value_t = 30)]
    pub header_timeout_secs: u64,
    /// Seconds a request body may stall between two pieces before the request fails (408).
    #[arg(long, env = "LANCET_BODY_TIMEOUT_SECS", default_value_t = 30)]
    pub body_timeout_secs: u64,
    /// Open connections accepted at once; more are closed as soon as they are accepted.
    #[arg(long, env = "LANCET_MAX_CONNECTIONS", default_value_t = 4096)]
    pub max_connections: usize,
    /// Background table upkeep (compaction, index upkeep, version cleanup) of tables written
    /// through this server.
    #[arg(long, env = "LANCET_UPKEEP", default_value_t = true, action = clap::ArgAction::Set)]
    pub upkeep: bool,
    /// How often watched tables are checked against the upkeep policy.
    #[arg(long, env = "LANCET_UPKEEP_INTERVAL", value_parser = humantime::parse_duration, default_value = "10s")]
    pub upkeep_interval: std::time::Duration,
    /// Upkeep jobs run at once in this server (each rewrites with one thread).
    #[arg(long, env = "LANCET_UPKEEP_CONCURRENCY", default_value_t = 1)]
    pub upkeep_concurrency: usize,
    /// Compact a table once this many of its fragments hold fewer rows than the target.
    #[arg(long, env = "LANCET_UPKEEP_MIN_SMALL_FRAGMENTS", default_value_t = 16)]
    pub upkeep_min_small_fragments: usize,
    /// Compaction target: fragments with fewer live rows are merged.
    #[arg(long, env = "LANCET_UPKEEP_TARGET_ROWS_PER_FRAGMENT", default_value_t = 1 << 20)]
    pub upkeep_target_rows_per_fragment: u64,
    /// A fragment with at least this share of deleted rows is rewritten without them.
    #[arg(long, env = "LANCET_UPKEEP_DELETED_SHARE", default_value_t = 0.1)]
    pub upkeep_deleted_share: f64,
    /// Fold new rows into a table's indexes once this many are unindexed.
    #[arg(long, env = "LANCET_UPKEEP_MIN_UNINDEXED_ROWS", default_value_t = 1)]
    pub upkeep_min_unindexed_rows: u64,
    /// Retrain a vector index once rows added since its training reach this share of the
    /// rows it was trained on (below it, new rows are appended to it).
    #[arg(long, env = "LANCET_UPKEEP_RETRAIN_SHARE", default_value_t = 0.5)]
    pub upkeep_retrain_share: f64,
    /// Merge an index's segments once it has more than this many.
    #[arg(long, env = "LANCET_UPKEEP_MAX_INDEX_SEGMENTS", default_value_t = 4)]
    pub upkeep_max_index_segments: usize,
    /// Versions younger than this are kept by cleanup (tagged versions and the versions
    /// branches start from are always kept).
    #[arg(long, env = "LANCET_UPKEEP_RETENTION", value_parser = humantime::parse_duration, default_value = "1h")]
    pub upkeep_retention: std::time::Duration,
    /// A table's old versions are cleaned at most this often.
    #[arg(long, env = "LANCET_UPKEEP_CLEANUP_INTERVAL", value_parser = humantime::parse_duration, default_value = "5m")]
    pub upkeep_cleanup_interval: std::time::Duration,
    /// A table not written for this long has its small fragments merged and its index
    /// segments folded into one, below the thresholds.
    #[arg(long, env = "LANCET_UPKEEP_QUIET_AFTER", value_parser = humantime::parse_duration, default_value = "60s")]
    pub upkeep_quiet_after: std::time::Duration,
    /// LSM tables (lancedb's LSM calls): how long a shard writer gathers upserts into one
    /// write-ahead-log entry before storing it. An upsert is answered once its entry is
    /// stored, so this bounds the latency it adds; concurrent upserts share one store write.
    /// Default: 1ms on a local directory, 25ms on an object store (each entry is a PUT).
    /// A table's spec may set its own (`writer_config_defaults.max_wal_flush_interval_ms`).
    #[arg(long, env = "LANCET_LSM_WAL_FLUSH_INTERVAL", value_parser = humantime::parse_duration)]
    pub lsm_wal_flush_interval: Option<std::time::Duration>,
    /// LSM tables: merged generations are taken off their shard's manifest this long after
    /// their merge was seen, and their files (with the WAL entries they cover) deleted this
    /// long after that. Keep it well above `--read-consistency-interval` and the longest
    /// query: a reader that started before a step may still need what it removes.
    #[arg(long, env = "LANCET_LSM_RECLAIM_AFTER", value_parser = humantime::parse_duration, default_value = "10m")]
    pub lsm_reclaim_after: std::time::Duration,
    /// A bearer token that lets non-loopback clients read `/metrics` (loopback clients need
    /// none). Without it, `/metrics` answers loopback clients only.
    #[arg(long, env = "LANCET_METRICS_TOKEN")]
    pub metrics_token: Option<String>,
    /// The key secrets (`/v1/secret/...`) are encrypted under at rest: any string of at least
    /// 16 characters (e.g. `openssl rand -hex 32`), the same on every replica of a root.
    /// Without it, creating or using a secret is refused with a 400 that says so.
    #[arg(long, env = "LANCET_SECRET_KEY", hide_env_values = true)]
    pub secret_key: Option<String>,
    /// A PEP 503 ("simple") package index registered Functions' pip packages are fetched from
    /// (e.g. `https://pypi.org/simple/` or a mirror); pure-Python wheels only. Without it, a
    /// Function that asks for pip packages is refused with a 400 that says so.
    #[arg(long, env = "LANCET_PACKAGE_INDEX")]
    pub package_index: Option<String>,
    /// The CPython the native Python tier runs (e.g. `/usr/bin/python3`), each worker in a
    /// bubblewrap sandbox. Without it the tier is off; with it, only tenants whose auth-file
    /// settings say `native_python = true` may use it (see docs/native-python.md).
    #[arg(long, env = "LANCET_NATIVE_PYTHON")]
    pub native_python: Option<PathBuf>,
    /// The bubblewrap binary the native tier starts workers with.
    #[arg(long, env = "LANCET_BWRAP", default_value = "bwrap")]
    pub bwrap: PathBuf,
    /// A Python with pip that installs native functions' requirements (default: the
    /// `--native-python` itself), from `--package-index` when given.
    #[arg(long, env = "LANCET_NATIVE_INSTALLER")]
    pub native_installer: Option<PathBuf>,
    /// Where native functions' environments are built, one directory per requirement set
    /// (workers run as other uids: it must be readable by all users).
    #[arg(
        long,
        env = "LANCET_NATIVE_DIR",
        default_value = "/var/tmp/lancet-native"
    )]
    pub native_dir: PathBuf,
    /// Site directories every native worker also imports from, after its own environment
    /// (packages an operator installs once for every function, e.g. Geneva and its
    /// dependencies for Geneva's pickled UDFs); bound read-only. Colon-separated.
    #[arg(
        long = "native-site",
        env = "LANCET_NATIVE_SITE",
        value_delimiter = ':'
    )]
    pub native_site: Vec<PathBuf>,
    /// Address space of each process of a native worker, in MiB.
    #[arg(long, env = "LANCET_NATIVE_MEMORY_MB", default_value_t = 2048)]
    pub native_memory_mb: u64,
    /// Wall-time limit of one native batch, in milliseconds (the worker is killed past it).
    #[arg(long, env = "LANCET_NATIVE_TIMEOUT_MS", default_value_t = 60_000)]
    pub native_timeout_ms: u64,
    /// Native batches one tenant runs at once (each in a worker of its own); more wait.
    #[arg(long, env = "LANCET_NATIVE_TENANT_WORKERS", default_value_t = 2)]
    pub native_tenant_workers: usize,
    /// Warm native workers kept per (tenant, function).
    #[arg(long, env = "LANCET_NATIVE_WORKERS", default_value_t = 2)]
    pub native_workers: usize,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl ServeConfig {
    /// The upkeep policy the `--upkeep-*` flags describe.
    pub fn upkeep_policy(&self) -> crate::upkeep::UpkeepPolicy {
        crate::upkeep::UpkeepPolicy {
            enabled: self.upkeep,
            min_small_fragments: self.upkeep_min_small_fragments,
            min_unindexed_rows: self.upkeep_min_unindexed_rows,
            cleanup_interval: self.upkeep_cleanup_interval,
            quiet_after: self.upkeep_quiet_after,
            thresholds: crate::jobs::kinds::optimize::Thresholds {
                target_rows_per_fragment: self.upkeep_target_rows_per_fragment.max(1),
                deleted_share: self.upkeep_deleted_share.max(0.0),
                retrain_share: self.upkeep_retrain_share.max(0.0),
                max_index_segments: self.upkeep_max_index_segments.max(1),
                retention_secs: self.upkeep_retention.as_secs(),
            },
        }
    }

    /// The catalog root as a URI lance understands (local paths made absolute).
    /// The settings `lancet serve ARGS...` would run with (flags over environment over
    /// defaults); for programs that embed the server.
    pub fn from_args<I: IntoIterator<Item = T>, T: Into<std::ffi::OsString> + Clone>(
        args: I,
    ) -> Result<Self, clap::Error> {
        #[derive(clap::Parser)]
        struct Serve {
            #[command(flatten)]
            config: ServeConfig,
        }
        let argv = std::iter::once(std::ffi::OsString::from("serve"))
            .chain(args.into_iter().map(Into::into));
        <Serve as clap::Parser>::try_parse_from(argv).map(|s| s.config)
    }

    pub fn root_uri(&self) -> std::io::Result<String> {
        if self.data.contains("://") {
            return Ok(self.data.trim_end_matches('/').to_string());
        }
        let path = PathBuf::from(&self.data);
        std::fs::create_dir_all(&path)?;
        let abs = std::fs::canonicalize(&path)?;
        Ok(abs.to_string_lossy().trim_end_matches('/').to_string())
    }
}

fn parse_option(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("'{s}' is not key=value"))
}

impl ServeConfig {
    pub fn storage_options(&self) -> std::collections::HashMap<String, String> {
        self.storage_options.iter().cloned().collect()
    }
}

/// `[tenants.<name>]` in the auth file: settings that differ per tenant.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSettings {
    /// UDF limits replacing the server's (`timeout_ms`, `max_memory_bytes`,
    /// `max_output_bytes`, `max_rows_per_call`); memory stays within the server's pool slots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udf: Option<lancet_udf::LimitsOverride>,
    /// Requests served at once for this tenant, replacing `--tenant-max-in-flight`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<usize>,
    /// Background upkeep knobs replacing the server's `--upkeep-*` flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upkeep: Option<crate::upkeep::UpkeepOverride>,
    /// Whether this tenant may run native Python UDFs (`udf_backend: "python-native"`):
    /// off unless set (see docs/native-python.md for what that tier does and does not isolate).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub native_python: bool,
    /// What the tenant may hold and do at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<Quota>,
    /// When the tenant was suspended (RFC 3339); absent while it is active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended: Option<String>,
    /// The jobs its suspension paused, resumed with the tenant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspended_jobs: Vec<String>,
    /// When its deletion began: every request is refused while its bytes are purged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleting: Option<String>,
    /// When an operator created it (RFC 3339; empty for tenants of older auth files).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub created: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

/// `[tenants.<name>.quota]`: each limit absent = none.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// Bytes under the root: tables with their versions and indexes, model files, job
    /// checkpoints. A write that would pass it is refused (403).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_bytes: Option<u64>,
    /// Tables (declared ones included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tables: Option<u64>,
    /// Requests per second, sustained (a token bucket; 503 "Slow down" past it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<f64>,
    /// Requests at once after a quiet spell (default: one second's worth, at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<f64>,
    /// Jobs running (or paused) at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<u32>,
}

impl Quota {
    pub fn validate(&self) -> Result<(), String> {
        if let Some(r) = self.requests_per_second
            && !(r.is_finite() && r > 0.0)
        {
            return Err(format!("quota.requests_per_second must be > 0 (got {r})"));
        }
        if let Some(b) = self.burst
            && !(b.is_finite() && b >= 1.0)
        {
            return Err(format!("quota.burst must be >= 1 (got {b})"));
        }
        Ok(())
    }
}

impl TenantSettings {
    /// Whether requests of this tenant are refused, and why.
    pub fn refusal(&self, tenant: &str) -> Option<String> {
        if let Some(at) = &self.deleting {
            return Some(format!("tenant '{tenant}' is being deleted (since {at})"));
        }
        self.suspended
            .as_ref()
            .map(|at| format!("tenant '{tenant}' is suspended (since {at}); ask the operator"))
    }
}

pub type TenantTable = BTreeMap<String, TenantSettings>;

fn on_off(v: &str) -> Result<bool, String> {
    match v {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        other => Err(format!("'{other}': on or off")),
    }
}
