//! `/v1/table/{id}/schema_metadata/update` and `/v1/table/{id}/update_field_metadata`: the
//! table's and its fields' key-value metadata.

use std::collections::HashMap;

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

use super::pipeline::extract::{Common, JsonBody, Target};
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};

/// `schema_metadata/update`, as the REST spec has it: the body is the bare map of the new
/// schema metadata (strings), which *replaces* the table's; the answer is the bare map. The
/// branch comes from the `branch` query parameter.
pub async fn update_schema_metadata(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<HashMap<String, serde_json::Value>>,
) -> ApiResult<Response> {
    let location = app.table(&target, &None).await?;
    let branch = target.branch(&None);
    let mut metadata = HashMap::with_capacity(body.len());
    for (k, v) in body {
        match v {
            serde_json::Value::String(v) => metadata.insert(k, v),
            other => {
                return Err(ApiError::invalid(format!(
                    "schema metadata value of '{k}' must be a string, got {other}"
                )));
            }
        };
    }
    let (metadata, _version) = app
        .store
        .replace_schema_metadata(&location, branch.as_deref(), metadata)
        .await?;
    let mut response = reply(json!(metadata));
    // Clients read the answer as a map of strings: no `context` may be added to it.
    response
        .extensions_mut()
        .insert(super::pipeline::context::Verbatim);
    Ok(response)
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct FieldMetadataEntry {
    /// The field's path (`a.b` for a nested field).
    path: String,
    /// Keys to set; a null value removes the key.
    metadata: HashMap<String, Option<String>>,
    /// Replace the field's metadata instead of merging into it.
    #[serde(default)]
    replace: Option<bool>,
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct FieldMetadataBody {
    #[serde(flatten)]
    common: Common,
    updates: Vec<FieldMetadataEntry>,
}

pub async fn update_field_metadata(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<FieldMetadataBody>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.common.id).await?;
    let branch = target.branch(&body.common.branch);
    if body.updates.is_empty() {
        return Err(ApiError::invalid("updates must hold at least one field"));
    }
    let updates = body
        .updates
        .into_iter()
        .map(|u| (u.path, u.metadata, u.replace.unwrap_or(false)))
        .collect();
    let (version, fields) = app
        .store
        .update_field_metadata(&location, branch.as_deref(), updates)
        .await?;
    let transaction_id =
        super::transactions::write_transaction_id(&target.id, branch.as_deref(), version);
    Ok(reply(
        json!({ "version": version, "fields": fields, "transaction_id": transaction_id }),
    ))
}
