//! Start-up and graceful shutdown.

use std::sync::Arc;

use lance::session::Session;
use tokio::net::TcpListener;

use crate::catalog::Catalog;
use crate::config::ServeConfig;
use crate::store::Store;
use crate::virtual_columns::VirtualColumns;
use crate::{App, http};

pub async fn build_app(config: &ServeConfig) -> anyhow_like::Result<Arc<App>> {
    let root = config.root_uri()?;
    let session = Arc::new(Session::default());
    let catalog = Catalog::open(&root, session.clone()).await?;
    let runtime = lancet_udf::Runtime::new(udf_config(config, &root))?;
    let jobs = crate::jobs::JobManager::open(local_dir(config, &root, "_jobs"))?;
    Ok(Arc::new(App {
        catalog,
        store: Store::new(session),
        virtual_columns: VirtualColumns::new(Arc::new(runtime)),
        jobs,
    }))
}

/// A directory of server state kept beside the tables (`<root>/<name>`), or in a local cache
/// directory when the root is an object store.
fn local_dir(config: &ServeConfig, root: &str, name: &str) -> std::path::PathBuf {
    if config.data.contains("://") {
        std::env::var_os("HOME")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(std::env::temp_dir)
            .join(".cache/lancet")
            .join(name.trim_start_matches('_'))
    } else {
        std::path::PathBuf::from(root).join(name)
    }
}

/// Modules are stored content-addressed beside the tables (`<root>/_udfs/modules`), compiled
/// code in `_udfs/cache`. For an object-store root both live in a local cache directory.
fn udf_config(config: &ServeConfig, root: &str) -> lancet_udf::RuntimeConfig {
    let base = if config.data.contains("://") {
        std::env::var_os("HOME")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(std::env::temp_dir)
            .join(".cache/lancet/udfs")
    } else {
        std::path::PathBuf::from(root).join("_udfs")
    };
    let mut udf = lancet_udf::RuntimeConfig::new(base.join("modules"), base.join("cache"));
    udf.default_limits.timeout = std::time::Duration::from_millis(config.udf_timeout_ms);
    udf.default_limits.max_memory_bytes = config.udf_memory_mb * 1024 * 1024;
    udf.default_limits.max_output_bytes = config.udf_max_output_mb * 1024 * 1024;
    udf
}

/// Serve until SIGINT/SIGTERM; requests in flight (writes included) finish before exit.
pub async fn serve(config: ServeConfig) -> anyhow_like::Result<()> {
    let app = build_app(&config).await?;
    // Jobs a previous process left unfinished carry on (they only need the store and runtime).
    app.jobs.resume_all(&app);
    let listener = TcpListener::bind(config.addr).await?;
    let addr = listener.local_addr()?;
    // Scripts and tests read this line to learn the port.
    println!("listening on http://{addr}");
    tracing::info!(%addr, root = %app.catalog.root(), "lancet serving");
    let service = http::service(app, config.max_body_mb * 1024 * 1024);
    axum::serve(listener, service)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    tracing::info!("lancet stopped");
    Ok(())
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
