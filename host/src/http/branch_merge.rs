//! `/v1/table/{id}/branches/{diff,cherry_pick}` (the lancedb client's): what a branch changed
//! against main, and promoting the columns it added into main (see `store::branch_merge`).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::pipeline::extract::{Common, JsonBody, Target};
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct MergeBody {
    #[serde(flatten)]
    common: Common,
    /// The branch to compare with main (or pick from).
    from_branch: Option<String>,
    /// cherry_pick: only report what would happen.
    dry_run: bool,
}

impl MergeBody {
    fn source_branch(&self) -> ApiResult<&str> {
        self.from_branch
            .as_deref()
            .filter(|b| !b.is_empty() && *b != "main")
            .ok_or_else(|| ApiError::invalid("from_branch must name a branch other than main"))
    }
}

pub async fn diff(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<MergeBody>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.common.id).await?;
    let from = body.source_branch()?;
    Ok(reply(app.store.branch_diff(&location, from).await?))
}

/// 200 with the result when the pick is ready (`dry_run`) or done; 409 with the result (and
/// the spec's error fields) when the diff reports an error: the client reads both.
pub async fn cherry_pick(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<MergeBody>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.common.id).await?;
    let from = body.source_branch()?;
    let (ok, mut result) = app.store.cherry_pick(&location, from, body.dry_run).await?;
    if ok {
        return Ok(reply(result));
    }
    let reasons: Vec<String> = result["diff"]["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect();
    let error = ApiError::conflict(format!(
        "branch '{from}' cannot be picked into main: {}",
        reasons.join("; ")
    ));
    let instance = format!(
        "/v1/table/{}/branches/cherry_pick",
        target.path_id.join("$")
    );
    if let (Some(out), serde_json::Value::Object(shape)) = (
        result.as_object_mut(),
        super::errors::error_json(&error, &instance),
    ) {
        for (k, v) in shape {
            out.entry(k).or_insert(v);
        }
    }
    Ok((StatusCode::CONFLICT, Json(result)).into_response())
}
