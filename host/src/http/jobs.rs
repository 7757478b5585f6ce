//! `/v1/table/{id}/backfill_column` and `/v1/jobs/{describe,list,cancel,pause,resume,
//! query_events}`. Validation and the
//! work itself live in `crate::jobs`; this layer decodes bodies and
//! scopes every job to the caller's tenant.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::pipeline::auth::Caller;
use super::pipeline::extract::{Common, JsonBody, Params, Target, page, paginate};
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};
use crate::jobs::kinds::backfill::{self, BackfillOptions};
use crate::jobs::kinds::geneva_jobs;
use crate::jobs::state::JobState;

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct BackfillBody {
    #[serde(flatten)]
    common: Common,
    #[serde(flatten)]
    options: BackfillOptions,
}

pub async fn backfill_column(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<BackfillBody>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.common.id).await?;
    let branch = target.branch(&body.common.branch);
    let tenant = target.caller.tenant();
    let geneva = geneva_jobs::is_geneva_column(&app, &location, &body.options.column).await;
    let geneva_jobs =
        geneva_jobs::find(&app, tenant, target.caller.database.as_deref(), geneva).await;
    let job_id = backfill::submit(
        &app,
        tenant,
        target.id.clone(),
        location,
        branch,
        body.options,
        geneva_jobs,
    )
    .await?;
    // 202, as the spec's generated clients expect (they deserialise no other status here).
    Ok((
        axum::http::StatusCode::ACCEPTED,
        axum::Json(json!({ "job_id": job_id })),
    )
        .into_response())
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct JobBody {
    job_id: Option<String>,
}

fn job_id(body: &JobBody) -> ApiResult<&str> {
    body.job_id
        .as_deref()
        .filter(|j| !j.is_empty())
        .ok_or_else(|| ApiError::invalid("job_id is required"))
}

pub async fn describe(
    State(app): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<JobBody>,
) -> ApiResult<Response> {
    Ok(reply(as_seen_by(
        &caller,
        app.jobs.describe(caller.tenant(), job_id(&body)?).await?,
    )))
}

pub async fn cancel(
    State(app): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<JobBody>,
) -> ApiResult<Response> {
    Ok(reply(as_seen_by(
        &caller,
        app.jobs.cancel(caller.tenant(), job_id(&body)?).await?,
    )))
}

pub async fn pause(
    State(app): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<JobBody>,
) -> ApiResult<Response> {
    Ok(reply(
        app.jobs.pause(caller.tenant(), job_id(&body)?).await?,
    ))
}

pub async fn resume(
    State(app): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<JobBody>,
) -> ApiResult<Response> {
    Ok(reply(
        app.jobs
            .resume(&app, caller.tenant(), job_id(&body)?)
            .await?,
    ))
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct EventsBody {
    job_id: Option<String>,
    /// The newest this many events (default 1000, at most 10000).
    limit: Option<u64>,
    /// SQL over the event columns, e.g. `state = 'claim_complete'`.
    filter: Option<String>,
}

/// The job's history as an Arrow IPC stream (the lancedb client reads it so).
pub async fn query_events(
    State(app): State<AppState>,
    caller: Caller,
    headers: axum::http::HeaderMap,
    JsonBody(body): JsonBody<EventsBody>,
) -> ApiResult<Response> {
    let id = job_id(&JobBody {
        job_id: body.job_id.clone(),
    })?
    .to_string();
    let limit = body.limit.map(|l| l.min(usize::MAX as u64) as usize);
    let batch = app
        .jobs
        .events(caller.tenant(), &id, body.filter.as_deref(), limit)
        .await?;
    if super::json_rows::wants_json(&headers) {
        return Ok(super::reply(super::json_rows::json_rows(
            &batch.schema(),
            &[batch],
        )?));
    }
    let out = super::arrow_body::stream_bytes(&batch)?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            super::openapi::ARROW_STREAM,
        )],
        out,
    )
        .into_response())
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
#[schemars(rename = "ListJobsBody")]
pub struct ListBody {
    limit: Option<i64>,
    page_token: Option<String>,
    /// The table, as an id list or a delimited string.
    table_id: Option<Value>,
    id: Option<Value>,
    table: Option<Value>,
    job_state: Option<String>,
    state: Option<String>,
}

fn table_filter(v: Option<Value>, params: &Params) -> ApiResult<Option<Vec<String>>> {
    let delimiter = params
        .get("delimiter")
        .filter(|d| !d.is_empty())
        .unwrap_or("$");
    match v {
        None | Some(Value::Null) => Ok(params
            .string("table_id")
            .map(|t| super::pipeline::extract::split_id(&t, delimiter))),
        Some(Value::String(s)) => Ok(Some(super::pipeline::extract::split_id(&s, delimiter))),
        Some(v @ Value::Array(_)) => serde_json::from_value(v)
            .map(Some)
            .map_err(|_| ApiError::invalid("table_id must be a list of strings")),
        Some(other) => Err(ApiError::invalid(format!(
            "table_id must be a list of strings, got {other}"
        ))),
    }
}

pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    JsonBody(body): JsonBody<ListBody>,
) -> ApiResult<Response> {
    let params = Params::parse(query.as_deref());
    let (limit, token) = page(&params, body.limit, body.page_token)?;
    let table = table_filter(body.table_id.or(body.id).or(body.table), &params)?
        .map(|t| caller.resolve(&t))
        .transpose()?;
    let state = match body
        .job_state
        .or(body.state)
        .or_else(|| params.string("job_state"))
        .filter(|s| !s.is_empty())
    {
        None => None,
        Some(s) => Some(JobState::parse(&s).ok_or_else(|| {
            ApiError::invalid(format!(
                "unknown job_state '{s}' (IN_PROGRESS, PAUSED, DONE, FAILED, CANCELLED)"
            ))
        })?),
    };
    let rows = app
        .jobs
        .list(caller.tenant(), table.as_deref(), state)
        .await?;
    let (rows, next) = paginate(rows, limit, token.as_deref());
    let jobs: Vec<Value> = rows
        .into_iter()
        .map(|(_, v)| as_seen_by(&caller, v))
        .collect();
    Ok(reply(json!({ "jobs": jobs, "page_token": next })))
}

/// A job description with its table id as the caller names it (without the database prefix
/// its database header added).
fn as_seen_by(caller: &Caller, mut job: Value) -> Value {
    let Some(id) = job["spec"]["table_id"].as_array().and_then(|a| {
        a.iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
    }) else {
        return job;
    };
    let seen = caller.unresolve(&id);
    job["spec"]["table_id"] = json!(seen);
    job["table"] = match job["table"] {
        Value::String(_) => json!(seen.join("$")),
        _ => json!(seen),
    };
    job
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct ErrorsBody {
    #[serde(flatten)]
    common: Common,
    /// Only the rows this backfill job recorded.
    job_id: Option<String>,
    /// Only failures computing this column.
    column: Option<String>,
    /// Most records in the answer (default 10000, at most 100000).
    limit: Option<i64>,
}

/// `table/{id}/errors`: the rows backfills of this table (and branch) set to null because
/// their UDF failed on them (`on_error: null`), newest job first.
pub async fn row_errors(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<ErrorsBody>,
) -> ApiResult<Response> {
    use crate::jobs::kinds::backfill::row_errors::{self, DEFAULT_LIMIT, ErrorsQuery, MAX_LIMIT};
    let location = app.table(&target, &body.common.id).await?;
    let branch = target.branch(&body.common.branch);
    let limit = match body.limit {
        None => DEFAULT_LIMIT,
        Some(l) if l <= 0 => {
            return Err(ApiError::invalid(format!(
                "limit must be positive, got {l}"
            )));
        }
        Some(l) => (l as u64).min(MAX_LIMIT as u64) as usize,
    };
    let query = ErrorsQuery {
        location: &location,
        branch: branch.as_deref(),
        job_id: body.job_id.as_deref().filter(|j| !j.is_empty()),
        column: body.column.as_deref().filter(|c| !c.is_empty()),
        limit,
    };
    Ok(reply(
        row_errors::list(&app.jobs, target.caller.tenant(), query).await?,
    ))
}
