//! `POST /v1/table/{id}/optimize` (upkeep on request) and the hook that tells the upkeep
//! scheduler which tables are being written.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::json;

use super::pipeline::extract::{JsonBody, Target};
use super::{AppState, reply};
use crate::error::ApiResult;
use crate::jobs::kinds::optimize::{OptimizeRequest, OptimizeSpec, Phase};

/// Start an upkeep job on a table (branch): `action` is `all` (default; on a table with an LSM
/// write spec it begins with `compact_lsm`) or any of `compact_lsm`, `compact`, `index`,
/// `cleanup`; `retention_seconds` overrides the retention window. Answers
/// the job id at once; `jobs/describe` follows it.
pub async fn optimize(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<OptimizeRequest>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.id).await?;
    let branch = target.branch(&body.branch);
    let tenant = target.caller.tenant();
    let policy = app.upkeep.policy_for(&app, tenant);
    let mut actions = body.phases()?;
    let thresholds = body.thresholds(policy.thresholds)?;
    // Fail now, not in the job, when the table or branch does not exist.
    let ds = app.store.latest(&location, branch.as_deref()).await?;
    if body.wants_all()
        && branch.is_none()
        && !actions.contains(&Phase::CompactLsm)
        && app.store.lsm_enabled(&ds).await?
    {
        actions.insert(0, Phase::CompactLsm);
    }
    let spec = OptimizeSpec {
        table_id: target.id.clone(),
        branch,
        actions,
        thresholds,
        retrain: body.retrain.unwrap_or(false),
        // An explicit request leaves each index in one segment.
        merge_segments: true,
        trigger: "request".into(),
    };
    let job_id = crate::jobs::kinds::optimize::submit(&app, tenant, location, spec).await?;
    Ok(reply(json!({ "job_id": job_id, "job_type": "optimize" })))
}

/// After an acknowledged write to a table, have the upkeep scheduler watch it. Added to every
/// write route under `/v1/table/{id}/` (see `Routes::add`).
pub async fn note_writes(target: Target, request: Request, next: Next) -> Response {
    let app = request.extensions().get::<AppState>().cloned();
    let response = next.run(request).await;
    if response.status().is_success()
        && let Some(app) = app
        && let Ok(location) = target.catalog.locate(&target.id).await
    {
        app.upkeep
            .note_write(target.caller.tenant(), &target.id, &location);
    }
    response
}
