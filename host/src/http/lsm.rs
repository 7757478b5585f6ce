//! `/v1/table/{id}/{set,unset,get}_lsm_write_spec`, `flush_lsm`, `compact_lsm`,
//! `get_lsm_stats`, `close_lsm_writers`: the lancedb client's LSM calls, served on lance's
//! MemWAL (see `store::lsm`). LSM upserts are `merge_insert` (data.rs); LSM reads are every
//! query of a table with a spec (query.rs).

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

use super::pipeline::extract::{JsonBody, Target};
use super::{AppState, reply};
use crate::error::ApiResult;
use crate::jobs::kinds::optimize::{OptimizeSpec, Phase};
use crate::store::lsm::LsmWriteSpec;

/// Install an LSM write spec: lance's MemWAL index with the client's sharding. The table needs
/// an unenforced primary key in its schema.
pub async fn set_spec(
    State(app): State<AppState>,
    target: Target,
    JsonBody(spec): JsonBody<LsmWriteSpec>,
) -> ApiResult<Response> {
    let location = target.catalog.locate(&target.id).await?;
    let version = app.store.lsm_set_spec(&location, &spec).await?;
    Ok(reply(json!({ "version": version })))
}

/// `{"lsm_write_spec": {...}}`, or `null` inside when the table has none.
pub async fn get_spec(State(app): State<AppState>, target: Target) -> ApiResult<Response> {
    let location = target.catalog.locate(&target.id).await?;
    let spec = app.store.lsm_get_spec(&location).await?;
    Ok(reply(json!({ "lsm_write_spec": spec })))
}

/// Remove the spec after merging everything the LSM tiers hold into the base table.
pub async fn unset_spec(State(app): State<AppState>, target: Target) -> ApiResult<Response> {
    let location = target.catalog.locate(&target.id).await?;
    let version = app.store.lsm_unset_spec(&location).await?;
    Ok(reply(json!({ "version": version })))
}

/// Seal every shard's memtable into a flushed generation (claiming shards this node does not
/// hold first). Answered once the generations are written.
pub async fn flush(State(app): State<AppState>, target: Target) -> ApiResult<Response> {
    let location = target.catalog.locate(&target.id).await?;
    let flushed = app.store.lsm_flush(&location).await?;
    Ok(reply(json!({ "memtables_flushed": flushed })))
}

/// Start merging flushed generations into the base table (an upkeep job with the
/// `compact_lsm` phase); answered at once. `get_lsm_stats` shows the progress.
pub async fn compact(State(app): State<AppState>, target: Target) -> ApiResult<Response> {
    let location = target.catalog.locate(&target.id).await?;
    let tenant = target.caller.tenant();
    let ds = app.store.latest(&location, None).await?;
    if !app.store.lsm_enabled(&ds).await? {
        return Err(crate::error::ApiError::invalid(
            "the table has no LSM write spec: set one with set_lsm_write_spec first",
        ));
    }
    let policy = app.upkeep.policy_for(&app, tenant);
    let spec = OptimizeSpec {
        table_id: target.id.clone(),
        branch: None,
        actions: vec![Phase::CompactLsm],
        thresholds: policy.thresholds,
        retrain: false,
        merge_segments: false,
        trigger: "request".into(),
    };
    match crate::jobs::kinds::optimize::submit(&app, tenant, location, spec).await {
        Ok(job_id) => Ok(reply(json!({ "job_id": job_id }))),
        // An upkeep job is running on the table: the policy merges what it finds when it ends.
        Err(e) if e.status == axum::http::StatusCode::CONFLICT => {
            Ok(reply(json!({ "job_id": null, "detail": e.message })))
        }
        Err(e) => Err(e),
    }
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct StatsBody {
    /// Count each flushed generation's rows (opens each one).
    include_generation_rows: bool,
}

/// Per-shard LSM state: `{"lsm_stats": {"buckets": [...]}}`, or `null` inside without a spec.
pub async fn stats(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<StatsBody>,
) -> ApiResult<Response> {
    let location = target.catalog.locate(&target.id).await?;
    let compacting = crate::jobs::kinds::optimize::compacting_lsm(&app.jobs, &location);
    let stats = app
        .store
        .lsm_stats(&location, body.include_generation_rows, compacting)
        .await?;
    Ok(reply(json!({ "lsm_stats": stats })))
}

/// Close this node's shard writers of the table (their memtables are flushed first); they
/// reopen on the next write or read.
pub async fn close_writers(State(app): State<AppState>, target: Target) -> ApiResult<Response> {
    let location = target.catalog.locate(&target.id).await?;
    let closed = app.store.lsm_close_writers(&location).await?;
    Ok(reply(json!({ "closed": closed })))
}
