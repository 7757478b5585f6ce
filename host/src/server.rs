//! Start-up and graceful shutdown.

use std::sync::Arc;
use std::time::Duration;

use lance::session::Session;
use tokio::net::TcpListener;

use crate::auth::{AuthSource, Authenticator, Role, keys::KeyRing};
use crate::config::ServeConfig;
use crate::root::RootStore;
use crate::store::Store;
use crate::tenants::Tenants;
use crate::virtual_columns::VirtualColumns;
use crate::{App, http};

pub async fn build_app(config: &ServeConfig) -> anyhow_like::Result<Arc<App>> {
    build(config, true).await
}

/// The app of a one-shot worker process (`lancet jobs run-task`, run by a Ray task): the
/// server's runtime, limits and tenants over the same root, but it creates no key (a root
/// whose servers authenticate with `LANCET_BOOTSTRAP_KEY` alone has none in its auth file)
/// and prints nothing on stdout.
pub async fn build_worker(config: &ServeConfig) -> anyhow_like::Result<Arc<App>> {
    build(config, false).await
}

async fn build(config: &ServeConfig, serving: bool) -> anyhow_like::Result<Arc<App>> {
    let root_uri = config.root_uri()?;
    let session = Arc::new(Session::default());
    let object_requests = Arc::new(crate::object_requests::Counts::default());
    let object_cache = (config.object_cache_mb > 0).then(|| {
        Arc::new(crate::object_cache::ObjectCache::new(
            config.object_cache_mb << 20,
        ))
    });
    crate::object_requests::count_requests(
        &session.store_registry(),
        object_requests.clone(),
        object_cache.clone(),
    );
    let storage_options = config.storage_options();
    let root = Arc::new(RootStore::open(&root_uri, &storage_options, &session).await?);
    // A missing bucket or bad credentials stop the start, rather than fail every request.
    root.list(crate::auth::source::AUTH_DIR).await?;
    let node_id = node_id(config);
    let (auth, tenant_settings) = authenticator(config, &root, serving).await?;
    let clusters = match &config.clusters {
        Some(path) => lancet_ray::Clusters::load(path).map_err(|e| e.to_string())?,
        None => lancet_ray::Clusters::default(),
    };
    let tenant_limits: TenantLimits = tenant_settings
        .iter()
        .filter_map(|(t, s)| Some((t.clone(), s.udf.clone()?)))
        .collect();
    let native = crate::native::NativeTier::open(config, &tenant_settings);
    if config.shared_root.is_some() {
        tracing::warn!(
            "--shared-root / LANCET_SHARED_ROOT is ignored: catalog changes by other processes \
             are always seen now"
        );
    }
    let usage = config
        .usage
        .then(|| Arc::new(lancet_hosting::usage::Usage::default()));
    let mut models = crate::models::Models::new(root.clone(), models_config(config));
    if let Some(u) = &usage {
        models = models.with_usage(u.clone());
    }
    let models = Arc::new(models);
    let mut udf = udf_config(config, &root);
    udf.embedder = Some(models.clone());
    let runtime = lancet_udf::Runtime::new(udf)?;
    if serving && runtime.python_status().is_ok() {
        // Compiling the runner takes seconds (once per machine; loading it after, ~0.1 s):
        // done now, off the request path, so the first Python UDF does not wait for it.
        let warm = runtime.clone();
        std::thread::Builder::new()
            .name("lancet-python-warm".into())
            .spawn(move || {
                if let Err(e) = warm.warm_python() {
                    tracing::warn!("python UDFs unavailable: {e}");
                }
            })?;
    }
    let read_consistency = config
        .read_consistency_interval
        .unwrap_or(if root.is_local() {
            std::time::Duration::ZERO
        } else {
            std::time::Duration::from_secs(1)
        });
    tracing::info!(
        interval = %humantime::format_duration(read_consistency),
        "read consistency interval"
    );
    let jobs = crate::jobs::JobManager::open(root.clone(), node_id.clone(), config.job_lease_ttl)
        .with_kinds(crate::jobs::kinds::all(
            config.upkeep_concurrency,
            config.job_helper_tasks,
        ));
    // A one-shot worker serves no request: nothing of its own to audit.
    let audit = (config.audit && serving).then(|| {
        crate::hosting::audit_log::AuditLog::start(
            &root_uri,
            session.clone(),
            storage_options.clone(),
            &node_id,
        )
    });
    Ok(Arc::new(App {
        tenants: Tenants::new(
            &root_uri,
            session.clone(),
            storage_options.clone(),
            node_id.clone(),
        )
        .with_read_consistency(read_consistency),
        auth,
        host_domain: config
            .host_domain
            .as_ref()
            .map(|d| d.trim_matches('.').to_ascii_lowercase())
            .filter(|d| !d.is_empty()),
        store: {
            let store = Store::new(session, config.vector_cache_mb << 20, storage_options)
                .with_read_consistency(read_consistency)
                .with_inline_local_reads(config.inline_local_reads);
            // A WAL entry on an object store is a billed, rate-limited PUT: gather longer.
            let local = !root_uri.contains("://") || root_uri.starts_with("file://");
            store.lsm.set_wal_flush_interval(
                config
                    .lsm_wal_flush_interval
                    .unwrap_or(std::time::Duration::from_millis(if local { 1 } else { 25 })),
            );
            store.lsm.set_reclaim_grace(config.lsm_reclaim_after);
            store
        },
        virtual_columns: VirtualColumns::with_tenant_limits(Arc::new(runtime), &tenant_limits)
            .with_embedder(models.clone(), config.model_max_rows)
            .with_native(native),
        functions: crate::functions::Functions::new(
            root.clone(),
            config.secret_key.as_deref(),
            config.package_index.as_deref(),
        )
        .map_err(|e| e.message)?,
        models,
        jobs,
        upkeep: crate::upkeep::Upkeep::new(config.upkeep_policy(), config.upkeep_interval),
        metrics: Default::default(),
        object_requests,
        object_cache,
        admission: http::pipeline::overload::Admission::new(http::pipeline::overload::Bounds {
            max_in_flight: config.max_in_flight,
            tenant_max_in_flight: config.tenant_max_in_flight,
            body_memory_bytes: config.max_body_memory_mb << 20,
            body_limit: config.max_body_mb << 20,
            max_running: config.max_running.unwrap_or(cores()),
            tenant_max_running: config.tenant_max_running.unwrap_or((cores() / 2).max(1)),
            max_running_alone: config.max_running_alone.unwrap_or(4 * cores()),
        }),
        metrics_token: config.metrics_token.clone().filter(|t| !t.is_empty()),
        fault_injection: std::env::var("LANCET_FAULT_INJECTION").is_ok_and(|v| v == "1"),
        vend_storage_options: config.vend_storage_options,
        console: config.console,
        access_log: config.access_log,
        hosting: crate::hosting::Hosting::new(audit, usage),
        root,
        node_id,
        clusters,
    }))
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// `--node-id`, else the host name and a random suffix (two processes on one host differ).
fn node_id(config: &ServeConfig) -> String {
    config
        .node_id
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| {
            let host = std::fs::read_to_string("/etc/hostname")
                .map(|h| h.trim().to_string())
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "node".into());
            format!("{host}-{}", &uuid::Uuid::new_v4().simple().to_string()[..6])
        })
}

/// Keys from the auth file plus `LANCET_BOOTSTRAP_KEY`. A server with no way at all to
/// authenticate creates an admin key for tenant `default` and prints it once, so a fresh data
/// directory is usable in one step.
type TenantLimits = std::collections::HashMap<String, lancet_udf::LimitsOverride>;

async fn authenticator(
    config: &ServeConfig,
    root: &Arc<RootStore>,
    create_key: bool,
) -> anyhow_like::Result<(Authenticator, crate::config::TenantTable)> {
    let source = AuthSource::of(root, config.auth_file.as_deref());
    let (file, _) = source.load().await?;
    let bootstrap = std::env::var("LANCET_BOOTSTRAP_KEY").ok();
    let bootstrap = bootstrap.as_deref().filter(|k| !k.trim().is_empty());
    let operator = std::env::var("LANCET_OPERATOR_KEY").is_ok_and(|k| !k.trim().is_empty());
    // A root run as a service (an operator key exists) gets its tenants' keys from the
    // operator, never a stray default admin key.
    let served = !file.keys.is_empty() || file.jwt.is_some() || !file.operators.is_empty();
    if create_key && !served && bootstrap.is_none() && !operator {
        // Another replica starting at the same moment may have created one: only an auth file
        // still without any way in gets a key.
        let created = source
            .update(|f| {
                if !f.keys.is_empty() || f.jwt.is_some() || !f.operators.is_empty() {
                    return Ok(None);
                }
                f.create_key("default", Role::Admin, vec![], "created by lancet serve")
                    .map(Some)
            })
            .await?;
        if let Some((key, entry)) = created {
            println!(
                "created admin API key {} for tenant 'default' (shown once; stored hashed in {}):\n  {key}",
                entry.id,
                source.describe()
            );
        }
    }
    let (file, _) = source.load().await?;
    let keys = KeyRing::open(Some(source), bootstrap).await?;
    Ok((Authenticator::new(keys, file.jwt.as_ref())?, file.tenants))
}

/// Modules are stored content-addressed under the root (`_udfs/modules`). A local root is
/// the runtime's module directory itself, with compiled code in `_udfs/cache`; for an
/// object-store root both local directories are caches (under `$LANCET_CACHE_DIR`, default
/// `~/.cache/lancet`) and the modules themselves live on the store.
fn udf_config(config: &ServeConfig, root: &Arc<RootStore>) -> lancet_udf::RuntimeConfig {
    let (base, shared) = if root.is_local() {
        (std::path::PathBuf::from(root.uri()).join("_udfs"), None)
    } else {
        let modules =
            crate::root::modules::RootModules::new(root.clone(), tokio::runtime::Handle::current());
        let shared: Arc<dyn lancet_udf::SharedModules> = Arc::new(modules);
        (cache_dir(root).join("udfs"), Some(shared))
    };
    let mut udf = lancet_udf::RuntimeConfig::new(base.join("modules"), base.join("cache"));
    udf.shared = shared;
    udf.default_limits.timeout = std::time::Duration::from_millis(config.udf_timeout_ms);
    udf.default_limits.max_memory_bytes = config.udf_memory_mb * 1024 * 1024;
    udf.default_limits.max_output_bytes = config.udf_max_output_mb * 1024 * 1024;
    let python_dir = machine_cache_dir().join("python");
    udf.python = Some(lancet_udf::PythonRunnerConfig {
        component: config
            .python_runner
            .clone()
            .unwrap_or_else(|| python_dir.join("runner.wasm")),
        // Machine-wide: the runner's compiled code does not depend on the root.
        cache_dir: python_dir,
    });
    udf
}

fn models_config(config: &ServeConfig) -> crate::models::ModelsConfig {
    let default_library = machine_cache_dir().join("models/libonnxruntime.so.1.31.1");
    crate::models::ModelsConfig {
        onnxruntime: config
            .onnxruntime
            .clone()
            .or_else(|| default_library.exists().then_some(default_library)),
        memory_bytes: config.model_memory_mb << 20,
        load: lancet_models::LoadOptions {
            sessions: config.model_sessions.max(1),
            intra_threads: config.model_threads.max(1),
        },
        call: lancet_models::CallLimits {
            max_rows: config.model_max_rows.max(1),
            max_text_bytes: config.model_max_text_bytes.max(1),
            deadline: std::time::Duration::from_millis(config.model_timeout_ms.max(1)),
        },
        tenant_concurrency: config.tenant_model_concurrency.max(1),
        tenant_tokens_per_sec: config.tenant_model_tokens_per_sec,
        tenant_storage_bytes: config.tenant_model_storage_mb.saturating_mul(1 << 20),
        upload_grace: std::time::Duration::from_secs(config.model_upload_grace_s),
    }
}

/// `$LANCET_CACHE_DIR`, else `~/.cache/lancet`.
fn machine_cache_dir() -> std::path::PathBuf {
    std::env::var_os("LANCET_CACHE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("HOME")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(std::env::temp_dir)
                .join(".cache/lancet")
        })
}

/// This node's cache directory for an object-store root: `$LANCET_CACHE_DIR`, else
/// `~/.cache/lancet`, then a folder per root (so two roots never share cached modules).
fn cache_dir(root: &RootStore) -> std::path::PathBuf {
    use sha2::Digest;
    machine_cache_dir().join(&hex::encode(sha2::Sha256::digest(root.uri().as_bytes()))[..16])
}

/// Serve until SIGINT/SIGTERM; requests in flight (writes included) finish before exit.
pub async fn serve(config: ServeConfig) -> anyhow_like::Result<()> {
    let app = build_app(&config).await?;
    // Jobs a previous process left unfinished carry on (they only need the store and runtime).
    app.jobs.resume_all(&app);
    tokio::spawn(crate::upkeep::Upkeep::run(app.clone()));
    let listener = TcpListener::bind(config.addr).await?;
    let addr = listener.local_addr()?;
    // Scripts and tests read this line to learn the port.
    println!("listening on http://{addr}");
    tracing::info!(%addr, root = %app.tenants.root(), "lancet serving");
    if let Some(flight_addr) = config.flight_addr {
        let flight = TcpListener::bind(flight_addr).await?;
        let flight_addr = flight.local_addr()?;
        println!("flight sql listening on grpc://{flight_addr}");
        tracing::info!(addr = %flight_addr, "flight sql serving");
        let limits = crate::sql::Limits {
            memory_bytes: config.sql_memory_mb << 20,
            timeout: config.sql_timeout,
            max_rows: config.sql_max_rows,
            max_bytes: config.sql_max_answer_mb << 20,
        };
        let flight_app = app.clone();
        tokio::spawn(async move {
            if let Err(e) =
                crate::flight::serve(flight_app, limits, flight, shutdown_signal()).await
            {
                tracing::error!(error = %e, "flight sql stopped");
            }
        });
    }
    tokio::spawn(refresh_keys(app.clone()));
    tokio::spawn(crate::hosting::keys_used::keep_writing(app.clone()));
    tokio::spawn(crate::hosting::usage_log::keep_flushing(
        app.clone(),
        config.usage_flush.max(Duration::from_millis(100)),
    ));
    tokio::spawn(crate::hosting::storage::rescan(
        app.clone(),
        config.storage_rescan.max(Duration::from_secs(1)),
    ));
    let app_for_jobs = app.clone();
    let service = http::service(
        app,
        config.max_body_mb * 1024 * 1024,
        Duration::from_secs(config.body_timeout_secs.max(1)),
    );
    accept_loop(listener, service, &config).await;
    app_for_jobs.jobs.hand_over(Duration::from_secs(10)).await;
    let _ = crate::hosting::keys_used::write(&app_for_jobs).await;
    crate::hosting::usage_log::flush(&app_for_jobs, &mut Default::default()).await;
    if let Some(audit) = &app_for_jobs.hosting.audit {
        audit.close().await;
    }
    tracing::info!("lancet stopped");
    Ok(())
}

/// `service` as hyper serves it on one connection from `peer`: each request carries the peer
/// (`ConnectInfo`, for loopback checks) and hyper's body as axum's.
pub fn for_connection(
    service: http::Service,
    peer: std::net::SocketAddr,
) -> impl hyper::service::Service<
    axum::http::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future: Send + 'static,
> + Send
+ 'static {
    use tower::ServiceExt;
    let service = service.map_request(
        move |mut request: axum::http::Request<hyper::body::Incoming>| {
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            request.map(axum::body::Body::new)
        },
    );
    hyper_util::service::TowerToHyperService::new(service)
}

/// Serves connections until SIGINT/SIGTERM, then lets requests in flight finish. Our own loop
/// rather than `axum::serve`, for what that lacks: a header-read timeout (a client that
/// trickles its headers cannot hold a connection forever) and a cap on open connections.
async fn accept_loop(listener: TcpListener, service: http::Service, config: &ServeConfig) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(config.header_timeout_secs.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let connections = Arc::new(tokio::sync::Semaphore::new(config.max_connections.max(1)));
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Ok(slot) = connections.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "connection limit reached; closing a new connection");
            continue;
        };
        // Query answers are streamed in several writes; without TCP_NODELAY the last small
        // write waits for the client's delayed ACK (~40 ms on Linux) on every query.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY");
        }
        let connection =
            http.serve_connection(TokioIo::new(tcp), for_connection(service.clone(), peer));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// The tenant settings the auth file has now, applied to what read them at start-up (UDF
/// limits, the native tier's opt-ins); the others are read per request.
pub fn apply_tenant_settings(app: &App) {
    let settings = app.auth.keys().all_tenant_settings();
    let limits: TenantLimits = settings
        .iter()
        .filter_map(|(t, s)| Some((t.clone(), s.udf.clone()?)))
        .collect();
    app.virtual_columns.set_tenant_limits(&limits);
    if let Some(tier) = app.virtual_columns.native_tier() {
        tier.set_tenants(&settings);
    }
}

/// `lancet keys create/revoke` rewrite the auth file; pick the change up within a second.
async fn refresh_keys(app: Arc<App>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tick.tick().await;
        match app.auth.keys().refresh().await {
            Ok(true) => {
                tracing::info!("auth file changed; keys and tenant settings reloaded");
                apply_tenant_settings(&app);
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "auth file unreadable; keeping the previous keys"),
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    tracing::info!("shutdown requested; finishing requests in flight");
}

/// A boxed error for start-up paths, where the only thing to do is report and exit.
pub mod anyhow_like {
    pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;
}
