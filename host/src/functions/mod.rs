//! lancedb 0.40's Function registry and secrets, per tenant and namespace: `registry` keeps the
//! registered Functions' immutable versions, `secrets` the credentials they may be bound to,
//! sealed under the server's key. Both live under the data root, so every replica sees them.
//! Running a Function is the UDF runtime's (`virtual_columns::function`), building one the
//! `function_build` job's.

pub mod names;
pub mod packages;
pub mod registry;
pub mod secrets;
pub mod signature;

use std::sync::Arc;

use crate::error::ApiResult;
use crate::root::RootStore;
pub use registry::{Registry, StoredFunction};
pub use secrets::{SecretKey, Secrets};

pub struct Functions {
    pub registry: Registry,
    pub secrets: Secrets,
    /// Where pip packages come from, if anywhere.
    pub packages: Option<packages::PackageIndex>,
}

impl Functions {
    pub fn new(
        root: Arc<RootStore>,
        secret_key: Option<&str>,
        package_index: Option<&str>,
    ) -> ApiResult<Self> {
        let packages = package_index
            .filter(|u| !u.is_empty())
            .map(packages::PackageIndex::new)
            .transpose()
            .map_err(crate::error::ApiError::invalid)?;
        let key = secret_key
            .filter(|k| !k.is_empty())
            .map(SecretKey::new)
            .transpose()?;
        Ok(Self {
            registry: Registry::new(root.clone()),
            secrets: Secrets::new(root, key),
            packages,
        })
    }

    /// The `os.environ` a version of `tenant`'s runs with: its own `env`, then each bound
    /// secret's current value (a rotation reaches the next run without a new version).
    pub async fn environment(
        &self,
        tenant: &str,
        f: &StoredFunction,
    ) -> ApiResult<Vec<(String, String)>> {
        let mut env: Vec<(String, String)> =
            f.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for binding in &f.secret_bindings {
            let (variable, namespace, name) = binding.env()?;
            let value = self
                .secrets
                .reveal(tenant, namespace, name)
                .await
                .map_err(|e| {
                    crate::error::ApiError::invalid(format!(
                        "Function '{}' version {}: secret bound to {variable}: {}",
                        f.name, f.version, e.message
                    ))
                })?;
            env.push((variable.to_string(), value));
        }
        Ok(env)
    }
}
