//! The registry as embedding columns reach it (`virtual_columns::embedding::Embedder`).

use futures::FutureExt;
use futures::future::BoxFuture;

use super::Models;
use crate::error::{ApiError, ApiResult};
use crate::virtual_columns::embedding::{Embedder, ModelRef};

impl Embedder for Models {
    fn resolve<'a>(&'a self, tenant: &'a str, name: &'a str) -> BoxFuture<'a, ApiResult<ModelRef>> {
        async move {
            if let Some(why) = self.unavailable() {
                return Err(ApiError::invalid(why.to_string()));
            }
            let stored = self.get(tenant, name).await?;
            Ok(ModelRef {
                name: stored.manifest.name.clone(),
                digest: stored.digest.clone(),
                dimension: stored.manifest.dimension as usize,
            })
        }
        .boxed()
    }

    fn embed_blocking(
        &self,
        tenant: &str,
        model: &ModelRef,
        texts: Vec<String>,
    ) -> ApiResult<Vec<f32>> {
        crate::root::modules::block_on(&self.runtime, async {
            let stored = self.get(tenant, &model.name).await.map_err(|e| {
                if e.status == axum::http::StatusCode::NOT_FOUND {
                    ApiError::invalid(format!(
                        "model '{}', which computes this column, was dropped",
                        model.name
                    ))
                } else {
                    e
                }
            })?;
            if stored.digest != model.digest {
                return Err(ApiError::invalid(format!(
                    "model '{}' was registered again with other files (digest {}); this column \
                     was defined with digest {}: add the column anew to use the new model",
                    model.name, stored.digest, model.digest
                )));
            }
            Ok(self.embed_with(tenant, &stored, texts).await?.into_values())
        })
    }
}

/// The columns of `tenant`'s tables (latest version of each, main branch) that model `name`
/// computes, as `table.column`: what a drop of the model must not pull from under them.
pub async fn columns_using(app: &crate::App, tenant: &str, name: &str) -> ApiResult<Vec<String>> {
    let catalog = app.tenants.catalog(tenant).await?;
    let mut users = Vec::new();
    for id in catalog.walk_tables(&[], None).await? {
        // A table dropped or unreadable meanwhile holds no column to protect.
        let Ok(location) = catalog.locate(&id).await else {
            continue;
        };
        let Ok(ds) = app.store.latest(&location, None).await else {
            continue;
        };
        for field in &ds.schema().fields {
            let uses = field
                .metadata
                .get(crate::virtual_columns::DEFINITION_KEY)
                .and_then(|t| serde_json::from_str::<crate::virtual_columns::Definition>(t).ok())
                .and_then(|d| d.model)
                .is_some_and(|m| m.name == name);
            if uses {
                users.push(format!("{}.{}", id.join("."), field.name));
            }
        }
    }
    Ok(users)
}

/// Guests' `embed` calls (`lancet_sdk::embed`), for the tenant whose UDF runs: the same
/// registry, share and limits as columns and queries.
impl lancet_udf::HostEmbed for Models {
    fn embed(
        &self,
        tenant: &str,
        model: &str,
        texts: Vec<String>,
    ) -> Result<(usize, Vec<f32>), String> {
        crate::root::modules::block_on(&self.runtime, async {
            let stored = self.get(tenant, model).await?;
            let e = self.embed_with(tenant, &stored, texts).await?;
            Ok((e.dimension(), e.into_values()))
        })
        .map_err(|e| e.message)
    }
}
