//! The `lancet` command: `lancet serve` and helper subcommands.

mod cli;

use clap::{Parser, Subcommand};
use lancet::config::ServeConfig;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "lancet",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("LANCET_COMMIT"), ")"),
    about = "A server for versioned Lance tables with Wasm UDF virtual columns"
)]
struct Cli {
    /// Log lines as text or as JSON objects (one per line, with the request's span fields).
    #[arg(
        long,
        env = "LANCET_LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    log_format: lancet::config::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the REST API over a data directory or object store root.
    Serve(Box<ServeConfig>),
    /// UDF helpers.
    #[command(subcommand)]
    Udf(UdfCommand),
    /// Manage API keys in the auth file (a running server picks changes up within a second).
    Keys(KeysArgs),
    /// Background jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// The operator's API: tenants, their keys, the audit log (a client of a running server).
    Admin(cli::admin::AdminArgs),
}

#[derive(Subcommand)]
enum JobsCommand {
    /// Draw a job's progress until it ends (exit status 1 unless it ends DONE).
    Watch {
        job_id: String,
        /// The server.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        url: String,
        /// Sent as `x-api-key` and `Authorization: Bearer`.
        #[arg(long, env = "LANCET_API_KEY")]
        api_key: Option<String>,
        /// Seconds between polls (fractions allowed).
        #[arg(long, default_value_t = 0.5)]
        interval: f64,
    },
    /// Print a backfill's open tasks (rows no checkpoint covers yet), one JSON object a line.
    /// Run by the Ray driver (docs/ray.md); reads the root the server's flags name.
    Tasks {
        job_id: String,
        #[command(flatten)]
        config: Box<ServeConfig>,
    },
    /// Compute one task of a backfill and write its checkpoints under the root, with the
    /// server's runtime, sandbox and limits (the job's owner commits them). Run by a Ray task.
    RunTask {
        job_id: String,
        #[arg(long)]
        fragment: u64,
        #[arg(long)]
        start: u64,
        #[arg(long)]
        end: u64,
        /// Where this runs, for the job's events (`ray node ...`).
        #[arg(long, default_value = "a worker")]
        worker: String,
        #[command(flatten)]
        config: Box<ServeConfig>,
    },
}

#[derive(clap::Args)]
struct KeysArgs {
    /// The data root whose auth file to change.
    #[arg(
        long,
        env = "LANCET_DATA",
        default_value = "./lancet-data",
        global = true
    )]
    data: String,
    /// The auth file, if not the data root's default.
    #[arg(long, env = "LANCET_AUTH_FILE", global = true)]
    auth_file: Option<std::path::PathBuf>,
    /// Object-store options, as for `lancet serve` (repeatable key=value).
    #[arg(long = "storage-option", env = "LANCET_STORAGE_OPTIONS", value_delimiter = ',', value_parser = parse_kv, global = true)]
    storage_options: Vec<(String, String)>,
    #[command(subcommand)]
    command: KeysCommand,
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Create a key and print it (once: only its hash is stored).
    Create {
        #[arg(long, default_value = "default")]
        tenant: String,
        /// read, write or admin.
        #[arg(long, default_value = "write")]
        role: lancet::auth::Role,
        /// Limit the key to this namespace subtree (repeat for each level: --namespace a --namespace b).
        #[arg(long = "namespace")]
        namespace: Vec<String>,
        #[arg(long, default_value = "")]
        description: String,
        /// When it stops being accepted (RFC 3339); default: never.
        #[arg(long)]
        expires: Option<String>,
    },
    /// Create an operator key (reaches `/v1/admin/...` only) and print it once.
    CreateOperator {
        #[arg(long, default_value = "")]
        description: String,
    },
    /// List keys (ids, tenants, roles, state; never the keys), then operator keys.
    List,
    /// Revoke a key by id.
    Revoke { id: String },
}

/// `lancet keys`: changes the auth file where the servers of this root read it (a local file,
/// or the object under an object-store root, changed with a conditional write).
async fn keys(args: KeysArgs) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use lancet::auth::AuthSource;
    let config = lancet::config::ServeConfig::from_args(["--data", args.data.as_str()])?;
    let session = lance::session::Session::default();
    let options = args.storage_options.into_iter().collect();
    let root = std::sync::Arc::new(
        lancet::root::RootStore::open(&config.root_uri()?, &options, &session).await?,
    );
    let source = AuthSource::of(&root, args.auth_file.as_deref());
    let place = source.describe();
    match args.command {
        KeysCommand::Create {
            tenant,
            role,
            namespace,
            description,
            expires,
        } => {
            let new = lancet::auth::keys::NewKey {
                tenant: tenant.clone(),
                role,
                namespace: namespace.clone(),
                description: description.clone(),
                expires: expires.clone(),
                created_by: "cli".into(),
            };
            let (key, entry) = source
                .update(|file| file.create_key_with(new.clone()))
                .await?;
            eprintln!(
                "created key {} (tenant {}, role {}) in {place}; it is shown once:",
                entry.id, entry.tenant, entry.role,
            );
            println!("{key}");
        }
        KeysCommand::CreateOperator { description } => {
            let (key, entry) = source
                .update(|file| Ok(file.create_operator(&description)))
                .await?;
            eprintln!(
                "created operator key {} in {place}; it reaches /v1/admin/... only and is shown once:",
                entry.id
            );
            println!("{key}");
        }
        KeysCommand::List => {
            let (file, _) = source.load().await?;
            let now = chrono::Utc::now().timestamp_millis();
            for k in &file.keys {
                let state = if k.revoked.is_some() {
                    "revoked"
                } else if k.live_at(now) {
                    "active"
                } else {
                    "expired"
                };
                println!(
                    "{}\ttenant={}\trole={}\tnamespace={}\tcreated={}\tstate={state}\t{}",
                    k.id,
                    k.tenant,
                    k.role,
                    k.namespace.join("."),
                    k.created,
                    k.description
                );
            }
            for o in &file.operators {
                println!(
                    "{}\toperator\tcreated={}\t{}",
                    o.id, o.created, o.description
                );
            }
        }
        KeysCommand::Revoke { id } => {
            let revoked = source.update(|file| Ok(file.revoke(&id))).await?;
            if !revoked {
                return Err(format!("no key with id {id} in {place}").into());
            }
            eprintln!("revoked {id}");
        }
    }
    Ok(())
}

#[derive(Subcommand)]
enum UdfCommand {
    /// Check a Wasm module and print its manifest, checksum and a `virtual_column` JSON.
    Package {
        /// The compiled module (wasm32-unknown-unknown).
        file: std::path::PathBuf,
        /// The exported entry point.
        #[arg(long)]
        entry: String,
        /// Configuration passed to the guest's init, as key=value (repeatable).
        #[arg(long = "config", value_parser = parse_kv)]
        config: Vec<(String, String)>,
    },
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("'{s}' is not key=value"))
}

fn package(
    file: &std::path::Path,
    entry: &str,
    config: Vec<(String, String)>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use base64::Engine;
    let wasm = std::fs::read(file)?;
    let packaged = lancet_udf::package(&wasm, entry, config.into_iter().collect())?;
    println!("module sha256:      {}", packaged.module_sha256);
    println!("manifest checksum:  {}", packaged.manifest_checksum);
    let vc = serde_json::json!({
        "input_columns": [],
        "udf": base64::engine::general_purpose::STANDARD.encode(&wasm),
        "udf_name": entry,
        "udf_backend": "wasm",
        "manifest": packaged.manifest_text,
        "manifest_checksum": packaged.manifest_checksum,
        "auto_backfill": false,
    });
    println!("virtual_column (fill in input_columns, and outputs for struct results):");
    println!("{}", serde_json::to_string_pretty(&vc)?);
    Ok(())
}

fn main() {
    let cli = Cli::parse();
    tracing::dispatcher::set_global_default(lancet::logging::dispatch(cli.log_format))
        .expect("the first subscriber");
    lancet::http::install_panic_hook();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // SQL planning (DataFusion, lance) recurses over expression trees on these threads;
        // with `sql_guard`'s depth bound, 16 MiB leaves a wide margin (2 MiB did not).
        .thread_stack_size(16 << 20)
        .build()
        .expect("tokio runtime");
    let result = match cli.command {
        Command::Serve(config) => runtime.block_on(lancet::server::serve(*config)),
        Command::Udf(UdfCommand::Package {
            file,
            entry,
            config,
        }) => package(&file, &entry, config),
        Command::Keys(args) => runtime.block_on(keys(args)),
        Command::Admin(args) => runtime.block_on(cli::admin::run(args)),
        Command::Jobs(JobsCommand::Watch {
            job_id,
            url,
            api_key,
            interval,
        }) => runtime
            .block_on(cli::watch::watch(
                &url,
                &job_id,
                api_key.as_deref(),
                std::time::Duration::from_secs_f64(interval.max(0.05)),
            ))
            .map(|_| ())
            .map_err(Into::into),
        Command::Jobs(JobsCommand::Tasks { job_id, config }) => {
            runtime.block_on(cli::tasks::list(&config, &job_id))
        }
        Command::Jobs(JobsCommand::RunTask {
            job_id,
            fragment,
            start,
            end,
            worker,
            config,
        }) => runtime.block_on(cli::tasks::run(
            &config,
            &job_id,
            lancet::jobs::kinds::backfill::remote::OpenTask {
                fragment,
                start,
                end,
            },
            &worker,
        )),
    };
    if let Err(e) = result {
        eprintln!("lancet: {e}");
        std::process::exit(1);
    }
}
