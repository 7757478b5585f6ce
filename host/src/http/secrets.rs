//! `/v1/secret/{id}/{create,alter,describe,drop}` and `/v1/namespace/{id}/secret/list`: the
//! lancedb client's secrets. `{id}` is the secret's namespace path then its name. The work is
//! `crate::functions::secrets`'; no answer ever holds a value.

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

use super::pipeline::extract::{JsonBody, Target, page, paginate};
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};
use crate::functions::names::split_id;

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ValueBody {
    /// The credential (at most 64 KiB); stored sealed, never returned.
    value: Option<String>,
}

fn value(body: &ValueBody) -> ApiResult<&str> {
    body.value
        .as_deref()
        .ok_or_else(|| ApiError::invalid("value is required"))
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmptyBody {}

pub async fn create(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<ValueBody>,
) -> ApiResult<Response> {
    store_value(&app, &target, &body, true).await
}

pub async fn alter(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<ValueBody>,
) -> ApiResult<Response> {
    store_value(&app, &target, &body, false).await
}

/// A new secret (`create`) or a new value for an existing one.
async fn store_value(
    app: &AppState,
    target: &Target,
    body: &ValueBody,
    create: bool,
) -> ApiResult<Response> {
    let (namespace, name) = split_id(&target.id)?;
    let (secrets, tenant, value) = (&app.functions.secrets, target.caller.tenant(), value(body)?);
    if create {
        secrets.create(tenant, &namespace, &name, value).await?;
    } else {
        secrets.alter(tenant, &namespace, &name, value).await?;
    }
    Ok(reply(json!({})))
}

pub async fn describe(
    State(app): State<AppState>,
    target: Target,
    JsonBody(_): JsonBody<EmptyBody>,
) -> ApiResult<Response> {
    let (namespace, name) = split_id(&target.id)?;
    let info = app
        .functions
        .secrets
        .describe(target.caller.tenant(), &namespace, &name)
        .await?;
    Ok(reply(json!(info)))
}

pub async fn drop(
    State(app): State<AppState>,
    target: Target,
    JsonBody(_): JsonBody<EmptyBody>,
) -> ApiResult<Response> {
    let (namespace, name) = split_id(&target.id)?;
    app.functions
        .secrets
        .drop(target.caller.tenant(), &namespace, &name)
        .await?;
    Ok(reply(json!({})))
}

/// `{"secrets": [{"name"}], "page_token"}`: names only, sorted, paged by `limit`/`page_token`.
pub async fn list(State(app): State<AppState>, target: Target) -> ApiResult<Response> {
    let (limit, token) = page(&target.params, None, None)?;
    let names = app
        .functions
        .secrets
        .list(target.caller.tenant(), &target.id)
        .await?;
    let (names, next) = paginate(
        names.into_iter().map(|n| (n, ())).collect(),
        limit,
        token.as_deref(),
    );
    let secrets: Vec<_> = names.into_iter().map(|(n, _)| json!({"name": n})).collect();
    Ok(reply(json!({"secrets": secrets, "page_token": next})))
}
