//! Materialized views: tables whose rows are a query over one source table, replaced by a
//! refresh (a job) rather than by writes. A view is an ordinary table in the catalog (it is
//! opened, queried and indexed like any other); what makes it a view is its definition,
//! kept in its schema metadata under [`DEFINITION_KEY`], so it travels with the table
//! (clones, renames, replicas) and needs no store of its own.

pub mod definition;
pub mod geneva;
pub mod saved;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use definition::Definition;

/// Schema metadata key of a view's [`ViewRecord`] (JSON).
pub const DEFINITION_KEY: &str = "lancet.materialized_view";
/// Schema metadata key of the source version the view's rows were last computed from.
pub const SOURCE_VERSION_KEY: &str = "lancet.materialized_view.source_version";

/// A view's columns as the source's, less what made them computed there (a virtual column's
/// UDF, a lancedb computed column's expression): in the view they hold the query's values,
/// and no backfill or insert hook may compute them again.
pub fn view_fields(fields: &arrow_schema::Fields) -> arrow_schema::Fields {
    fields
        .iter()
        .map(|f| {
            let mut metadata = f.metadata().clone();
            metadata.retain(|k, _| {
                k != crate::virtual_columns::DEFINITION_KEY && !k.starts_with("computed_column")
            });
            std::sync::Arc::new(f.as_ref().clone().with_metadata(metadata))
        })
        .collect()
}

/// What a view is, as stored with it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ViewRecord {
    pub definition: Definition,
    /// The source table's id in the tenant's catalog.
    pub source_id: Vec<String>,
    /// Minted when the view is created: a view dropped and created again under the same name
    /// is another incarnation, and a refresh meant for the old one is refused.
    pub incarnation: String,
}

impl ViewRecord {
    /// The record of a table, from its schema metadata; None for a plain table.
    pub fn of(metadata: &HashMap<String, String>) -> ApiResult<Option<ViewRecord>> {
        match metadata.get(DEFINITION_KEY) {
            None => Ok(None),
            Some(raw) => serde_json::from_str(raw).map(Some).map_err(|e| {
                ApiError::internal(format!("unreadable materialized view definition: {e}"))
            }),
        }
    }

    pub fn metadata(&self) -> ApiResult<HashMap<String, String>> {
        let raw = serde_json::to_string(self).map_err(|e| ApiError::internal(e.to_string()))?;
        Ok(HashMap::from([(DEFINITION_KEY.to_string(), raw)]))
    }

    /// The view as `materialized_view/{id}/describe` answers it (the lancedb client's shape).
    pub fn describe(&self, name: &str, metadata: &HashMap<String, String>) -> Value {
        let d = &self.definition;
        let (namespace, table) = d.source.split_at(d.source.len().saturating_sub(1));
        json!({
            "name": name,
            "query": d.query,
            "source_table": table.first(),
            "source_namespace": namespace,
            "projections": d.projections,
            "filter": d.filter,
            "limit": d.limit,
            "incarnation": self.incarnation,
            "refreshed_source_version": metadata
                .get(SOURCE_VERSION_KEY)
                .and_then(|v| v.parse::<u64>().ok()),
        })
    }
}
