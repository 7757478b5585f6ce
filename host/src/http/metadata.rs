//! `/v1/table/{id}/schema_metadata/update` and `/v1/table/{id}/update_field_metadata`: the
//! table's and its fields' key-value metadata.

use std::collections::HashMap;

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

use super::extract::{Common, JsonBody, Target};
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct SchemaMetadataBody {
    #[serde(flatten)]
    common: Common,
    /// Key-value pairs merged into the table's schema metadata (null removes a key).
    metadata: Option<HashMap<String, Option<String>>>,
}

pub async fn update_schema_metadata(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<SchemaMetadataBody>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.common.id).await?;
    let branch = target.branch(&body.common.branch);
    let metadata = body
        .metadata
        .ok_or_else(|| ApiError::invalid("metadata is required (a map of strings)"))?;
    let (merged, version) = app
        .store
        .update_schema_metadata(&location, branch.as_deref(), metadata)
        .await?;
    Ok(reply(json!({ "metadata": merged, "version": version })))
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
    Ok(reply(json!({ "version": version, "fields": fields })))
}
