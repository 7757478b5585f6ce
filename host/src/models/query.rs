//! Text queries: the text of a query embedded by the model of the vector column it searches,
//! the same model (same digest) that computed the column.

use crate::error::{ApiError, ApiResult};
use crate::virtual_columns::{DEFINITION_KEY, Definition};

use super::Models;

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
        let stored = self.get(tenant, &model.name).await?;
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
