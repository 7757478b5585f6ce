//! Text queries: the text of a query embedded by the model of the vector column it searches,
//! the same model (same digest) that computed the column.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::{ApiError, ApiResult};
use crate::virtual_columns::{DEFINITION_KEY, Definition};

use super::{Models, StoredModel};

/// How long a record read for a text query is trusted. A record with the column's digest
/// describes exactly the model that computed the column (the digest covers its files and
/// settings), so serving from an older read never mixes models; the bound only limits how
/// long a model dropped or registered again elsewhere (another replica) keeps answering the
/// text queries of a column computed with its old files. Without it every text query reads
/// the record from the root store: one object-store GET per query.
const RECORD_TRUST: Duration = Duration::from_secs(5);

/// Records read lately for text queries, by (tenant, name).
#[derive(Default)]
pub(super) struct RecentRecords(Mutex<HashMap<(String, String), (Instant, StoredModel)>>);

impl RecentRecords {
    fn with_digest(&self, tenant: &str, name: &str, digest: &str) -> Option<StoredModel> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (read, stored) = map.get(&(tenant.to_string(), name.to_string()))?;
        (read.elapsed() < RECORD_TRUST && stored.digest == digest).then(|| stored.clone())
    }

    fn keep(&self, tenant: &str, stored: &StoredModel) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        // Bounded by the models registered; entries past their time go at the next keep.
        map.retain(|_, (read, _)| read.elapsed() < RECORD_TRUST);
        map.insert(
            (tenant.to_string(), stored.manifest.name.clone()),
            (Instant::now(), stored.clone()),
        );
    }

    pub(super) fn forget(&self, tenant: &str, name: &str) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(&(tenant.to_string(), name.to_string()));
    }
}

impl Models {
    /// The vector of `text` for searching `column` (or, when `None`, the table's one
    /// embedding column) of a table with `schema`; answers the column searched.
    pub async fn embed_query(
        &self,
        tenant: &str,
        schema: &lance_core::datatypes::Schema,
        column: Option<&str>,
        text: String,
    ) -> ApiResult<(String, Vec<f32>)> {
        let models: Vec<(String, crate::virtual_columns::embedding::ModelRef)> = schema
            .fields
            .iter()
            .filter_map(|f| {
                let def: Definition = serde_json::from_str(f.metadata.get(DEFINITION_KEY)?).ok()?;
                Some((f.name.clone(), def.model?))
            })
            .collect();
        let (column, model) = match column {
            Some(c) => models.into_iter().find(|(name, _)| name == c).ok_or_else(|| {
                ApiError::invalid(format!(
                    "query_text: column '{c}' is not an embedding column (no model computes it), \
                     so there is no model to embed the text with"
                ))
            })?,
            None => match <[_; 1]>::try_from(models) {
                Ok([one]) => one,
                Err(models) if models.is_empty() => {
                    return Err(ApiError::invalid(
                        "query_text: the table has no embedding column to search",
                    ));
                }
                Err(models) => {
                    let names: Vec<&str> = models.iter().map(|(n, _)| n.as_str()).collect();
                    return Err(ApiError::invalid(format!(
                        "query_text: the table has several embedding columns ({}); name one in \
                         vector_column",
                        names.join(", ")
                    )));
                }
            },
        };
        let stored = match self.recent.with_digest(tenant, &model.name, &model.digest) {
            Some(stored) => stored,
            None => {
                let stored = self.get(tenant, &model.name).await?;
                self.recent.keep(tenant, &stored);
                stored
            }
        };
        if stored.digest != model.digest {
            return Err(ApiError::invalid(format!(
                "query_text: model '{}' was registered again with other files since column \
                 '{column}' was computed; its vectors and the text's would not compare",
                model.name
            )));
        }
        let vector = self
            .embed_with(tenant, &stored, vec![text])
            .await?
            .into_values();
        Ok((column, vector))
    }
}
