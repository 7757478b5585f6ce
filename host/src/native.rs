//! The native Python tier as the server runs it: `lancet_native`'s sandbox, warm-worker pool and
//! environments, plus who may use it (tenants opted in through the auth file).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lancet_native::{Environments, Interpreter, Limits, NativeError, Pool, Sandbox};

use crate::config::{ServeConfig, TenantTable};
use crate::error::{ApiError, ApiResult};

/// What every environment holds besides a function's own requirements: the worker reads and
/// writes Arrow with pyarrow; pickled functions need cloudpickle to load.
const BASE: &[&str] = &["pyarrow", "cloudpickle"];

/// The running tier.
pub struct NativeTier {
    pool: Arc<Pool>,
    envs: Environments,
    sites: Vec<PathBuf>,
    /// Tenants opted in; replaced when the auth file's settings change.
    tenants: std::sync::RwLock<HashSet<String>>,
}

impl NativeTier {
    /// The tier `config` asks for, or `None` (off: no `--native-python`, or this machine
    /// cannot run it, which is logged).
    pub fn open(config: &ServeConfig, tenants: &TenantTable) -> Option<Arc<Self>> {
        let python = config.native_python.as_ref()?;
        match Self::try_open(config, python, tenants) {
            Ok(tier) => {
                tracing::info!(
                    python = %tier.pool.sandbox().interpreter().version,
                    "native Python tier on"
                );
                Some(Arc::new(tier))
            }
            Err(e) => {
                tracing::warn!("native Python tier off: {e}");
                None
            }
        }
    }

    fn try_open(
        config: &ServeConfig,
        python: &std::path::Path,
        tenants: &TenantTable,
    ) -> Result<Self, NativeError> {
        let interpreter = Interpreter::probe(python)?;
        let minor = interpreter.minor().to_string();
        let limits = Limits {
            memory_bytes: config.native_memory_mb << 20,
            call_timeout: Duration::from_millis(config.native_timeout_ms),
            ..Limits::default()
        };
        let sandbox = Arc::new(Sandbox::new(&config.bwrap, interpreter, limits)?);
        let installer = config
            .native_installer
            .clone()
            .unwrap_or_else(|| python.to_path_buf());
        let envs = Environments::new(
            &config.native_dir,
            &installer,
            &minor,
            config.package_index.clone(),
            BASE.iter().map(|s| s.to_string()).collect(),
        )?;
        let workers = config.native_workers.max(1);
        Ok(NativeTier {
            pool: Arc::new(Pool::new(
                sandbox,
                config.native_tenant_workers,
                workers,
                workers * 64,
            )),
            envs,
            sites: config.native_site.clone(),
            tenants: std::sync::RwLock::new(opted_in(tenants)),
        })
    }

    /// The tenants opted in from now on.
    pub fn set_tenants(&self, tenants: &TenantTable) {
        *self.tenants.write().unwrap() = opted_in(tenants);
    }

    /// Whether `tenant` has been opted in.
    pub fn allows(&self, tenant: &str) -> bool {
        self.tenants.read().unwrap().contains(tenant)
    }

    /// Refuses a tenant that has not been opted in.
    pub fn allow(&self, tenant: &str) -> ApiResult<()> {
        if self.allows(tenant) {
            return Ok(());
        }
        Err(ApiError::invalid(format!(
            "the native Python tier is not enabled for tenant '{tenant}': an operator sets \
             native_python = true in its [tenants.{tenant}] settings of the auth file"
        )))
    }

    /// The interpreter's `major.minor`.
    pub fn python_minor(&self) -> &str {
        self.pool.sandbox().interpreter().minor()
    }

    /// The interpreter's full version.
    pub fn python_version(&self) -> &str {
        &self.pool.sandbox().interpreter().version
    }

    /// The site directories of a function needing `requirements`: its environment (built
    /// now if needed; blocking: pip runs), then the operator's `--native-site` directories.
    pub fn environment(&self, requirements: &[String]) -> ApiResult<Vec<PathBuf>> {
        let mut dirs = vec![self.envs.ensure(requirements).map_err(native_error)?];
        dirs.extend(self.sites.iter().cloned());
        Ok(dirs)
    }

    /// The worker pool.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }
}

/// A native-tier failure as an API error: the user's function or input is a 400, the
/// machine's trouble a 503.
pub fn native_error(e: NativeError) -> ApiError {
    match e {
        NativeError::Unavailable(_) | NativeError::Io(_) => ApiError::unavailable(e.to_string()),
        _ => ApiError::invalid(e.to_string()),
    }
}

fn opted_in(tenants: &TenantTable) -> HashSet<String> {
    tenants
        .iter()
        .filter(|(_, s)| s.native_python)
        .map(|(t, _)| t.clone())
        .collect()
}
