//! `/v1/function/{id}/{create,describe,drop}` and `/v1/namespace/{id}/function/list`: lancedb's
//! Function registry. `{id}` is the Function's namespace path then its name. Registering is a
//! `function_build` job (`crate::jobs::kinds::function_build`); the registry is
//! `crate::functions::registry`.

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::pipeline::auth::Caller;
use super::pipeline::extract::{JsonBody, Target, page};
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};
use crate::functions::StoredFunction;
use crate::functions::names::split_id;
use crate::functions::registry::Registration;
use crate::jobs::kinds::{function_build, function_drop};

/// A stored version as the client sees it: namespace paths relative to the database it
/// addressed.
fn public(caller: &Caller, f: &StoredFunction) -> Value {
    f.public(caller.database.as_deref())
}

/// Starts the build; `{"job_id"}` (the client waits on the job for the version).
pub async fn create(
    State(app): State<AppState>,
    target: Target,
    JsonBody(mut body): JsonBody<Registration>,
) -> ApiResult<Response> {
    let (namespace, name) = split_id(&target.id)?;
    // Secrets are addressed like the Function: under the caller's database.
    for b in &mut body.secret_bindings {
        if let Some(r) = &mut b.secret_ref {
            r.namespace_path = target.caller.resolve(&r.namespace_path)?;
        }
    }
    let job_id = function_build::submit(
        &app,
        target.caller.tenant(),
        target.caller.database.clone(),
        namespace,
        name,
        body,
    )
    .await?;
    Ok(reply(json!({ "job_id": job_id })))
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VersionBody {
    /// The Function version (`"1"`, `"2"`, ...).
    version: Option<String>,
}

fn version(body: &VersionBody) -> ApiResult<&str> {
    body.version
        .as_deref()
        .ok_or_else(|| ApiError::invalid("version is required"))
}

pub async fn describe(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<VersionBody>,
) -> ApiResult<Response> {
    let (namespace, name) = split_id(&target.id)?;
    let f = app
        .functions
        .registry
        .get(target.caller.tenant(), &namespace, &name, version(&body)?)
        .await?;
    Ok(reply(public(&target.caller, &f)))
}

/// `{"dropped", "job_id"}`: `dropped` is false when there was no such version; the job
/// (lancedb's `drop_function_async` waits on it) cleans up after the unbinding, which is done
/// when this answers. Columns bound to the version fail their next refresh, naming it.
pub async fn drop(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<VersionBody>,
) -> ApiResult<Response> {
    let (namespace, name) = split_id(&target.id)?;
    let dropped = app
        .functions
        .registry
        .drop(target.caller.tenant(), &namespace, &name, version(&body)?)
        .await?;
    let job_id = function_drop::submit(
        &app,
        target.caller.tenant(),
        function_drop::DropSpec {
            table_id: target.id.clone(),
            namespace_path: namespace,
            name,
            version: version(&body)?.to_string(),
            dropped,
        },
    )
    .await?;
    Ok(reply(json!({ "dropped": dropped, "job_id": job_id })))
}

/// `{"functions": [{"name", "version", "definition"}], "page_token"}`, by name then version;
/// `include_definition=false` leaves `definition` out. Paged by `limit` and `page_token`
/// (the last `name@version` of the previous page).
pub async fn list(State(app): State<AppState>, target: Target) -> ApiResult<Response> {
    let (limit, token) = page(&target.params, None, None)?;
    let definitions = target.params.bool("include_definition")?.unwrap_or(true);
    let all = app
        .functions
        .registry
        .list(target.caller.tenant(), &target.id)
        .await?;
    let key = |f: &StoredFunction| (f.name.clone(), f.version.parse::<u64>().unwrap_or(0));
    let after = token.as_deref().map(|t| {
        let (n, v) = t.rsplit_once('@').unwrap_or((t, "0"));
        (n.to_string(), v.parse::<u64>().unwrap_or(0))
    });
    let mut page: Vec<&StoredFunction> = all
        .iter()
        .filter(|f| after.as_ref().is_none_or(|a| key(f) > *a))
        .collect();
    let mut next = None;
    if let Some(l) = limit
        && page.len() > l
    {
        page.truncate(l);
        next = page.last().map(|f| format!("{}@{}", f.name, f.version));
    }
    let functions: Vec<Value> = page
        .into_iter()
        .map(|f| {
            let mut item = json!({"name": f.name, "version": f.version});
            if definitions {
                item["definition"] = public(&target.caller, f);
            }
            item
        })
        .collect();
    Ok(reply(json!({ "functions": functions, "page_token": next })))
}
