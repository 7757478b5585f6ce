//! Schema evolution: add columns (SQL expressions, or all-null columns that virtual columns
//! start as), alter (rename, nullability, retype, field metadata) and drop.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use lance::dataset::{ColumnAlteration, NewColumnTransform};

use super::Store;
use crate::error::{ApiError, ApiResult};

#[derive(Debug, Clone)]
pub struct Alteration {
    pub path: String,
    pub rename: Option<String>,
    pub nullable: Option<bool>,
    pub data_type: Option<DataType>,
}

impl Store {
    pub async fn add_sql_columns(
        &self,
        location: &str,
        branch: Option<&str>,
        columns: Vec<(String, String)>,
    ) -> ApiResult<u64> {
        for (name, expression) in &columns {
            crate::sql_guard::check(expression, &format!("new_columns[{name}].expression"))?;
        }
        self.evolve(location, branch, |ds| {
            Box::pin(async move {
                ds.add_columns(NewColumnTransform::SqlExpressions(columns), None, None)
                    .await
            })
        })
        .await
    }

    /// Add columns that are null in every existing row (metadata-only in lance).
    pub async fn add_null_columns(
        &self,
        location: &str,
        branch: Option<&str>,
        fields: Vec<Field>,
    ) -> ApiResult<u64> {
        let schema = Arc::new(ArrowSchema::new(fields));
        self.evolve(location, branch, |ds| {
            Box::pin(async move {
                ds.add_columns(NewColumnTransform::AllNulls(schema), None, None)
                    .await
            })
        })
        .await
    }

    /// Set schema metadata key `key` to `merge(its current value)`, then add `fields` (null
    /// in every existing row), under one write lock. The metadata goes first: alone it is
    /// harmless, whereas columns without it would be half a declaration.
    /// Add all-null `fields`, then set the schema metadata `metadata` makes of the schema
    /// with the new fields (their field ids assigned, the current metadata in it).
    pub async fn add_null_columns_with_metadata(
        &self,
        location: &str,
        branch: Option<&str>,
        fields: Vec<Field>,
        metadata: impl FnOnce(&lance_core::datatypes::Schema) -> Result<Vec<(String, String)>, String>
        + Send
        + 'static,
    ) -> ApiResult<u64> {
        let schema = Arc::new(ArrowSchema::new(fields));
        self.evolve(location, branch, |ds| {
            Box::pin(async move {
                ds.add_columns(NewColumnTransform::AllNulls(schema), None, None)
                    .await?;
                let entries = metadata(ds.schema()).map_err(lance_core::Error::invalid_input)?;
                ds.update_schema_metadata(entries).await.map(|_| ())
            })
        })
        .await
    }

    pub async fn alter_columns(
        &self,
        location: &str,
        branch: Option<&str>,
        alterations: Vec<Alteration>,
    ) -> ApiResult<u64> {
        let alterations: Vec<ColumnAlteration> = alterations
            .into_iter()
            .map(|a| ColumnAlteration {
                path: a.path,
                rename: a.rename,
                nullable: a.nullable,
                data_type: a.data_type,
            })
            .collect();
        self.evolve(location, branch, |ds| {
            Box::pin(async move { ds.alter_columns(&alterations).await })
        })
        .await
    }

    pub async fn drop_columns(
        &self,
        location: &str,
        branch: Option<&str>,
        columns: Vec<String>,
    ) -> ApiResult<u64> {
        if columns.is_empty() {
            return Err(ApiError::invalid("columns must name at least one column"));
        }
        self.evolve(location, branch, |ds| {
            Box::pin(async move {
                let cols: Vec<&str> = columns.iter().map(String::as_str).collect();
                ds.drop_columns(&cols).await
            })
        })
        .await
    }

    /// Replace field metadata of top-level columns (used to store virtual column definitions).
    pub async fn set_field_metadata(
        &self,
        location: &str,
        branch: Option<&str>,
        updates: HashMap<String, HashMap<String, String>>,
    ) -> ApiResult<u64> {
        self.evolve(location, branch, |ds| {
            Box::pin(async move {
                let mut builder = ds.update_field_metadata();
                for (column, metadata) in updates {
                    builder = builder.update(column.as_str(), metadata)?;
                }
                builder.await.map(|_| ())
            })
        })
        .await
    }

    /// Replace the table's schema metadata with `metadata`; answers the new map and version.
    pub async fn replace_schema_metadata(
        &self,
        location: &str,
        branch: Option<&str>,
        metadata: HashMap<String, String>,
    ) -> ApiResult<(HashMap<String, String>, u64)> {
        let ds = self
            .evolve_to(location, branch, |ds| {
                Box::pin(async move {
                    ds.update_schema_metadata(metadata)
                        .replace()
                        .await
                        .map(|_| ())
                })
            })
            .await?;
        Ok((ds.schema().metadata.clone(), ds.version().version))
    }

    /// Field metadata updates by field path: merged into the field's metadata (a `None` value
    /// removes its key), or replacing it (`replace`). Keys under `lancet.` are the server's (virtual column definitions):
    /// they cannot be set, and a replace keeps them. Answers the new version and each
    /// updated field's metadata.
    pub async fn update_field_metadata(
        &self,
        location: &str,
        branch: Option<&str>,
        updates: Vec<(String, HashMap<String, Option<String>>, bool)>,
    ) -> ApiResult<(u64, HashMap<String, HashMap<String, String>>)> {
        for (path, metadata, _) in &updates {
            if let Some(k) = metadata.keys().find(|k| k.starts_with("lancet.")) {
                return Err(ApiError::invalid(format!(
                    "metadata key '{k}' of field '{path}': keys under 'lancet.' are reserved for the server"
                )));
            }
        }
        let paths: Vec<String> = updates.iter().map(|u| u.0.clone()).collect();
        let ds = self
            .evolve_to(location, branch, |ds| {
                Box::pin(async move {
                    let mut resolved = Vec::new();
                    for (path, metadata, replace) in updates {
                        // An unresolvable field path is TableColumnNotFound (spec 2.4), as
                        // for the other column operations; lance suggests a near name.
                        let field = ds.schema().field(&path).ok_or_else(|| {
                            lance_core::Error::FieldNotFound {
                                source: lance_core::error::FieldNotFoundError {
                                    field_name: path.clone(),
                                    candidates: ds
                                        .schema()
                                        .fields
                                        .iter()
                                        .map(|f| f.name.clone())
                                        .collect(),
                                },
                            }
                        })?;
                        let mut metadata = metadata;
                        if replace {
                            for (k, v) in &field.metadata {
                                if k.starts_with("lancet.") {
                                    metadata.insert(k.clone(), Some(v.clone()));
                                }
                            }
                        }
                        resolved.push((field.id, metadata, replace));
                    }
                    let mut builder = ds.update_field_metadata();
                    for (id, metadata, replace) in resolved {
                        builder = if replace {
                            builder.replace(id, metadata)?
                        } else {
                            builder.update(id, metadata)?
                        };
                    }
                    builder.await.map(|_| ())
                })
            })
            .await?;
        let fields = paths
            .into_iter()
            .filter_map(|p| {
                let md = ds.schema().field(&p)?.metadata.clone();
                Some((p, md))
            })
            .collect();
        Ok((ds.version().version, fields))
    }

    pub(super) async fn evolve<F>(
        &self,
        location: &str,
        branch: Option<&str>,
        op: F,
    ) -> ApiResult<u64>
    where
        F: for<'a> FnOnce(
            &'a mut lance::Dataset,
        ) -> futures::future::BoxFuture<'a, lance_core::Result<()>>,
    {
        Ok(self
            .evolve_to(location, branch, op)
            .await?
            .version()
            .version)
    }

    /// Apply `op` to the latest version under the write lock; answers the new version.
    pub(super) async fn evolve_to<F>(
        &self,
        location: &str,
        branch: Option<&str>,
        op: F,
    ) -> ApiResult<Arc<lance::Dataset>>
    where
        F: for<'a> FnOnce(
            &'a mut lance::Dataset,
        ) -> futures::future::BoxFuture<'a, lance_core::Result<()>>,
    {
        let _guard = self.write_lock(location, branch).await;
        let mut ds = (*self.latest(location, branch).await?).clone();
        op(&mut ds).await.map_err(ApiError::from)?;
        let ds = Arc::new(ds);
        self.remember(location, branch, ds.clone());
        Ok(ds)
    }
}
