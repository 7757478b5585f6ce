//! `/v1/table/{id}/branches/{create,list,delete}`.

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

use super::pipeline::extract::{Common, JsonBody, Target, page, paginate};
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};
use crate::store::At;

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct BranchBody {
    #[serde(flatten)]
    common: Common,
    name: Option<String>,
    from_branch: Option<String>,
    from_version: Option<i64>,
    limit: Option<i64>,
    page_token: Option<String>,
}

impl BranchBody {
    fn name(&self) -> ApiResult<&str> {
        self.name
            .as_deref()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ApiError::invalid("a branch 'name' is required"))
    }
}

pub async fn create(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<BranchBody>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.common.id).await?;
    let from = At::new(body.from_branch.clone(), body.from_version)?;
    let name = body.name()?;
    app.store.create_branch(&location, name, &from).await?;
    // The branch's first version is its transaction (see `transactions.rs`).
    let head = app.store.latest(&location, Some(name)).await?;
    let transaction_id =
        super::transactions::write_transaction_id(&target.id, Some(name), head.version().version);
    Ok(reply(json!({ "transaction_id": transaction_id })))
}

/// Branch contents in both snake_case and lance's camelCase (the lancedb SDK parses the latter).
pub async fn list(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<BranchBody>,
) -> ApiResult<Response> {
    target.check_body_id(&body.common.id)?;
    let (limit, token) = page(&target.params, body.limit, body.page_token)?;
    let location = target.catalog.locate(&target.id).await?;
    let branches = app.store.list_branches(&location).await?;
    let (branches, next) = paginate(branches.into_iter().collect(), limit, token.as_deref());
    let branches: serde_json::Map<String, serde_json::Value> = branches
        .into_iter()
        .map(|(name, b)| {
            let entry = json!({
                "parent_branch": b.parent_branch, "parentBranch": b.parent_branch,
                "parent_version": b.parent_version, "parentVersion": b.parent_version,
                "create_at": b.create_at, "createAt": b.create_at,
                "manifest_size": b.manifest_size, "manifestSize": b.manifest_size,
                "metadata": b.metadata,
            });
            (name, entry)
        })
        .collect();
    Ok(reply(json!({ "branches": branches, "page_token": next })))
}

pub async fn delete(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<BranchBody>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.common.id).await?;
    app.store.delete_branch(&location, body.name()?).await?;
    Ok(reply(json!({})))
}
