//! `/v1/table/{id}/version/{create,delete}` and `/v1/table/version/batch-create`: versions
//! published and removed by a client that manages a table's versions through the namespace
//! (it stages a manifest in the table's directory, then asks for it to become a version).
//! Each is a batch of `catalog::batch`: all or nothing, across a crash too.

use axum::extract::State;
use axum::response::Response;
use lance_namespace::models::{
    BatchCreateTableVersionsRequest, BatchDeleteTableVersionsRequest, CreateTableVersionRequest,
};
use serde_json::{Value, json};

use super::batch::{commit_batch, render};
use super::pipeline::auth::Caller;
use super::pipeline::extract::{JsonBody, Target};
use super::{AppState, reply};
use crate::catalog::batch::BatchOp;
use crate::error::{ApiError, ApiResult};

fn parse<T: serde::de::DeserializeOwned>(body: Value, what: &str) -> ApiResult<T> {
    serde_json::from_value(body).map_err(|e| ApiError::invalid(format!("{what}: {e}")))
}

/// The body's `id`, if any, must agree with the path; the path's id (resolved for the caller)
/// is the one used.
fn table_id(target: &Target, body: &Value) -> ApiResult<Vec<String>> {
    let body_id: Option<Vec<String>> = body
        .get("id")
        .filter(|v| !v.is_null())
        .map(|v| serde_json::from_value(v.clone()))
        .transpose()
        .map_err(|_| ApiError::invalid("id must be a list of strings"))?;
    target.check_body_id(&body_id)?;
    Ok(target.id.clone())
}

/// `version/create`: the staged manifest at `manifest_path` becomes version `version`.
pub async fn create(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<Response> {
    let id = table_id(&target, &body)?;
    let mut request: CreateTableVersionRequest = parse(body, "version/create")?;
    request.id = Some(id);
    let results = commit_batch(
        &app,
        &target.catalog,
        vec![BatchOp::CreateTableVersion(request)],
    )
    .await
    .map_err(|f| render(f, "version/create"))?;
    Ok(reply(results[0]["create_table_version"].clone()))
}

/// `version/delete`: the versions in `ranges` ([start_version, end_version); a negative end
/// means through the latest) are removed.
pub async fn delete(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<Response> {
    let id = table_id(&target, &body)?;
    let mut request: BatchDeleteTableVersionsRequest = parse(body, "version/delete")?;
    request.id = Some(id);
    let results = commit_batch(
        &app,
        &target.catalog,
        vec![BatchOp::DeleteTableVersions(request)],
    )
    .await
    .map_err(|f| render(f, "version/delete"))?;
    Ok(reply(results[0]["delete_table_versions"].clone()))
}

/// `version/batch-create`: one new version for each entry, of one or several tables, all
/// or none.
pub async fn batch_create(
    State(app): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<Response> {
    let request: BatchCreateTableVersionsRequest = parse(body, "version/batch-create")?;
    if request.entries.is_empty() {
        return Err(ApiError::invalid("entries must not be empty"));
    }
    let mut ops = Vec::with_capacity(request.entries.len());
    for (i, e) in request.entries.into_iter().enumerate() {
        if e.id.is_empty() {
            return Err(ApiError::invalid(format!("entries[{i}] needs an 'id'")));
        }
        ops.push(BatchOp::CreateTableVersion(CreateTableVersionRequest {
            id: Some(caller.resolve(&e.id)?),
            version: e.version,
            branch: e.branch,
            manifest_path: e.manifest_path,
            manifest_size: e.manifest_size,
            e_tag: e.e_tag,
            metadata: e.metadata,
            naming_scheme: e.naming_scheme,
            ..Default::default()
        }));
    }
    let results = commit_batch(&app, &caller.catalog, ops)
        .await
        .map_err(|f| render(f, "version/batch-create"))?;
    let versions: Vec<Value> = results
        .iter()
        .map(|r| r["create_table_version"]["version"].clone())
        .collect();
    Ok(reply(json!({ "versions": versions })))
}
