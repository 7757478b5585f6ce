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

    async fn evolve<F>(&self, location: &str, branch: Option<&str>, op: F) -> ApiResult<u64>
    where
        F: for<'a> FnOnce(
            &'a mut lance::Dataset,
        ) -> futures::future::BoxFuture<'a, lance_core::Result<()>>,
    {
        let _guard = self.write_lock(location, branch).await;
        let mut ds = (*self.latest(location, branch).await?).clone();
        op(&mut ds).await.map_err(ApiError::from)?;
        let version = ds.version().version;
        self.remember(location, branch, Arc::new(ds));
        Ok(version)
    }
}
