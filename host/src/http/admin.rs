//! `/v1/admin/...`: the operator's API (tenants, their keys, the audit log). Only the
//! operator's credential reaches these routes (`pipeline::auth::refusal`); every call is
//! audited. The work is `hosting::lifecycle`'s; this module reads requests and shapes answers.

use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::pipeline::auth::{Caller, OperatorCaller};
use super::pipeline::extract::{JsonBody, Params};
use super::{AppState, reply};
use crate::auth::Role;
use crate::auth::keys::{NewKey, parse_time};
use crate::error::{ApiError, ApiResult};
use crate::hosting::audit_log::Filter;
use crate::hosting::lifecycle::{self, Within};

pub async fn whoami(operator: OperatorCaller) -> ApiResult<Response> {
    Ok(reply(
        json!({"operator": true, "principal": operator.principal}),
    ))
}

pub async fn list_tenants(State(app): State<AppState>, _: OperatorCaller) -> ApiResult<Response> {
    Ok(reply(json!({"tenants": lifecycle::list(&app).await?})))
}

pub async fn create_tenant(
    State(app): State<AppState>,
    _: OperatorCaller,
    Path(tenant): Path<String>,
    JsonBody(settings): JsonBody<Value>,
) -> ApiResult<Response> {
    Ok(reply(lifecycle::create(&app, &tenant, settings).await?))
}

pub async fn describe_tenant(
    State(app): State<AppState>,
    _: OperatorCaller,
    Path(tenant): Path<String>,
) -> ApiResult<Response> {
    let mut out = lifecycle::describe(&app, &tenant).await?;
    out["keys"] = json!(lifecycle::keys_with_use(&app, &tenant).await?);
    Ok(reply(out))
}

pub async fn update_tenant(
    State(app): State<AppState>,
    _: OperatorCaller,
    Path(tenant): Path<String>,
    JsonBody(patch): JsonBody<Value>,
) -> ApiResult<Response> {
    Ok(reply(lifecycle::update(&app, &tenant, patch).await?))
}

pub async fn suspend_tenant(
    State(app): State<AppState>,
    _: OperatorCaller,
    Path(tenant): Path<String>,
) -> ApiResult<Response> {
    Ok(reply(lifecycle::suspend(&app, &tenant).await?))
}

pub async fn resume_tenant(
    State(app): State<AppState>,
    _: OperatorCaller,
    Path(tenant): Path<String>,
) -> ApiResult<Response> {
    Ok(reply(lifecycle::resume(&app, &tenant).await?))
}

pub async fn delete_tenant(
    State(app): State<AppState>,
    _: OperatorCaller,
    Path(tenant): Path<String>,
) -> ApiResult<Response> {
    Ok(reply(lifecycle::delete(&app, &tenant).await?))
}

/// A key to make.
#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct KeyBody {
    /// `read`, `write` or `admin` (default `read`).
    role: Option<String>,
    /// The namespace subtree it covers (default: all of the tenant).
    namespace: Vec<String>,
    description: String,
    /// When it stops being accepted (RFC 3339).
    expires: Option<String>,
    /// Or: how long from now (`30d`, `12h`).
    expires_in: Option<String>,
}

fn new_key(tenant: &str, body: KeyBody, by: &str) -> ApiResult<NewKey> {
    let role: Role = body
        .role
        .as_deref()
        .unwrap_or("read")
        .parse()
        .map_err(ApiError::invalid)?;
    let expires = match (body.expires, body.expires_in) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid("give expires or expires_in, not both"));
        }
        (Some(at), None) => {
            parse_time(&at).map_err(ApiError::invalid)?;
            Some(at)
        }
        (None, Some(d)) => Some(in_future(&d)?),
        (None, None) => None,
    };
    Ok(NewKey {
        tenant: tenant.to_string(),
        role,
        namespace: body.namespace,
        description: body.description,
        expires,
        created_by: by.to_string(),
    })
}

fn duration(text: &str, what: &str) -> ApiResult<Duration> {
    humantime::parse_duration(text).map_err(|e| {
        ApiError::invalid(format!("{what} '{text}' is not a duration (30d, 12h): {e}"))
    })
}

fn in_future(text: &str) -> ApiResult<String> {
    let d = duration(text, "expires_in")?;
    let at = chrono::Utc::now()
        + chrono::Duration::from_std(d).map_err(|e| ApiError::invalid(e.to_string()))?;
    Ok(at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

fn made(key: String, entry: &crate::auth::KeyEntry) -> Response {
    let mut out = lifecycle::key_view(entry);
    out["key"] = json!(key);
    reply(out)
}

pub async fn list_keys(
    State(app): State<AppState>,
    _: OperatorCaller,
    Path(tenant): Path<String>,
) -> ApiResult<Response> {
    Ok(reply(
        json!({"keys": lifecycle::keys_with_use(&app, &tenant).await?}),
    ))
}

pub async fn create_key(
    State(app): State<AppState>,
    operator: OperatorCaller,
    Path(tenant): Path<String>,
    JsonBody(body): JsonBody<KeyBody>,
) -> ApiResult<Response> {
    let new = new_key(&tenant, body, &operator.principal)?;
    let (key, entry) = lifecycle::create_key(&app, new, None).await?;
    Ok(made(key, &entry))
}

/// A rotation.
#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RotateBody {
    /// How long the old key stays valid (default `1h`; `0s` ends it now).
    overlap: Option<String>,
}

fn overlap(body: &RotateBody) -> ApiResult<Duration> {
    duration(body.overlap.as_deref().unwrap_or("1h"), "overlap")
}

pub async fn rotate_key(
    State(app): State<AppState>,
    operator: OperatorCaller,
    Path(key_id): Path<String>,
    JsonBody(body): JsonBody<RotateBody>,
) -> ApiResult<Response> {
    let (key, entry) =
        lifecycle::rotate_key(&app, &key_id, None, overlap(&body)?, &operator.principal).await?;
    Ok(made(key, &entry))
}

pub async fn revoke_key(
    State(app): State<AppState>,
    _: OperatorCaller,
    Path(key_id): Path<String>,
) -> ApiResult<Response> {
    Ok(reply(lifecycle::revoke_key(&app, &key_id, None).await?))
}

/// `tenant`, `principal`, `action`, `since`, `until` (RFC 3339) and `limit` (default 100).
fn audit_filter(query: Option<&str>, tenant: Option<String>) -> ApiResult<Filter> {
    let params = Params::parse(query);
    let time = |k: &str| -> ApiResult<Option<i64>> {
        params
            .get(k)
            .filter(|v| !v.is_empty())
            .map(|v| parse_time(v).map_err(|e| ApiError::invalid(format!("{k}: {e}"))))
            .transpose()
    };
    let text = |k: &str| params.get(k).filter(|v| !v.is_empty()).map(str::to_string);
    Ok(Filter {
        tenant: tenant.or_else(|| text("tenant")),
        principal: text("principal"),
        action: text("action"),
        since_ms: time("since")?,
        until_ms: time("until")?,
        limit: params.int("limit")?.unwrap_or(100).clamp(1, 10_000) as usize,
    })
}

async fn audit_rows(app: &AppState, filter: Filter) -> ApiResult<Response> {
    let log = app
        .hosting
        .audit
        .as_ref()
        .ok_or_else(|| ApiError::invalid("this server keeps no audit log (--audit off)"))?;
    let rows = log.query(&filter).await.map_err(ApiError::internal)?;
    let records: Vec<Value> = rows
        .into_iter()
        .map(|s| {
            let mut v = serde_json::to_value(&s.record).unwrap_or_default();
            v["time"] = json!(
                chrono::DateTime::from_timestamp_millis(s.record.time_ms)
                    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            );
            v["writer"] = json!(s.writer);
            v["seq"] = json!(s.seq);
            v["hash"] = json!(s.hash);
            v
        })
        .collect();
    Ok(reply(json!({"records": records})))
}

pub async fn audit(
    State(app): State<AppState>,
    _: OperatorCaller,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    audit_rows(&app, audit_filter(query.as_deref(), None)?).await
}

pub async fn audit_verify(State(app): State<AppState>, _: OperatorCaller) -> ApiResult<Response> {
    let log = app
        .hosting
        .audit
        .as_ref()
        .ok_or_else(|| ApiError::invalid("this server keeps no audit log (--audit off)"))?;
    let report = log.verify().await.map_err(ApiError::internal)?;
    let mut out = serde_json::to_value(&report).map_err(|e| ApiError::internal(e.to_string()))?;
    out["ok"] = json!(report.ok());
    Ok(reply(out))
}

// A tenant's own: its admin manages its keys and reads its audit records.

fn within(caller: &Caller) -> Within<'_> {
    Within {
        tenant: caller.tenant(),
        role: caller.grant.role,
        scope: &caller.grant.scope,
    }
}

pub async fn tenant_self(State(app): State<AppState>, caller: Caller) -> ApiResult<Response> {
    let settings = app.auth.keys().tenant_settings(caller.tenant());
    Ok(reply(json!({
        "name": caller.tenant(),
        "quota": settings.as_ref().and_then(|s| s.quota.clone()),
        "storage_bytes": app.hosting.ledger.knows(caller.tenant())
            .then(|| app.hosting.ledger.measured(caller.tenant())),
    })))
}

pub async fn tenant_keys(State(app): State<AppState>, caller: Caller) -> ApiResult<Response> {
    Ok(reply(
        json!({"keys": lifecycle::keys_with_use(&app, caller.tenant()).await?}),
    ))
}

pub async fn tenant_create_key(
    State(app): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<KeyBody>,
) -> ApiResult<Response> {
    let new = new_key(caller.tenant(), body, &caller.grant.principal)?;
    let (key, entry) = lifecycle::create_key(&app, new, Some(within(&caller))).await?;
    Ok(made(key, &entry))
}

pub async fn tenant_rotate_key(
    State(app): State<AppState>,
    caller: Caller,
    Path(key_id): Path<String>,
    JsonBody(body): JsonBody<RotateBody>,
) -> ApiResult<Response> {
    let (key, entry) = lifecycle::rotate_key(
        &app,
        &key_id,
        Some(&within(&caller)),
        overlap(&body)?,
        &caller.grant.principal,
    )
    .await?;
    Ok(made(key, &entry))
}

pub async fn tenant_revoke_key(
    State(app): State<AppState>,
    caller: Caller,
    Path(key_id): Path<String>,
) -> ApiResult<Response> {
    Ok(reply(
        lifecycle::revoke_key(&app, &key_id, Some(&within(&caller))).await?,
    ))
}

pub async fn tenant_audit(
    State(app): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let filter = audit_filter(query.as_deref(), Some(caller.tenant().to_string()))?;
    audit_rows(&app, filter).await
}

// Usage: the operator's (any tenant) and a tenant's own.

/// `since`/`until` (RFC 3339) and `format`: `json` (default), `csv` or `arrow` (IPC stream).
async fn usage_answer(
    app: &AppState,
    tenant: Option<&str>,
    query: Option<&str>,
) -> ApiResult<Response> {
    use axum::response::IntoResponse;
    let params = Params::parse(query);
    let time = |k: &str| -> ApiResult<Option<i64>> {
        params
            .get(k)
            .filter(|v| !v.is_empty())
            .map(|v| parse_time(v).map_err(|e| ApiError::invalid(format!("{k}: {e}"))))
            .transpose()
    };
    let periods =
        crate::hosting::usage_log::read(app, tenant, time("since")?, time("until")?).await?;
    let content = |kind: &'static str, body: Vec<u8>| {
        ([(axum::http::header::CONTENT_TYPE, kind)], body).into_response()
    };
    match params.get("format").unwrap_or("json") {
        "json" => Ok(reply(
            json!({"usage": crate::hosting::usage_log::to_json(&periods)}),
        )),
        "csv" => Ok(content(
            "text/csv; charset=utf-8",
            crate::hosting::usage_log::to_csv(&periods).into_bytes(),
        )),
        "arrow" => {
            let batch = crate::hosting::usage_log::to_arrow(&periods)?;
            Ok(content(
                super::openapi::ARROW_STREAM,
                super::arrow_body::stream_bytes(&batch)?,
            ))
        }
        other => Err(ApiError::invalid(format!(
            "format '{other}': json, csv or arrow"
        ))),
    }
}

pub async fn usage(
    State(app): State<AppState>,
    _: OperatorCaller,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let params = Params::parse(query.as_deref());
    let tenant = params
        .get("tenant")
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    usage_answer(&app, tenant.as_deref(), query.as_deref()).await
}

pub async fn tenant_usage(
    State(app): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    usage_answer(&app, Some(caller.tenant()), query.as_deref()).await
}
