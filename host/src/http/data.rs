//! `/v1/table/{id}/{insert,merge_insert,update,delete,count_rows}`: row-level reads and writes.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use lance_namespace::ErrorCode;
use serde::Deserialize;
use serde_json::json;

use super::arrow_body::ArrowBody;
use super::pipeline::extract::{Common, JsonBody, Target};
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};
use crate::store::lsm::LsmTable;
use crate::store::{At, MergeOptions};

/// The spec's `transaction_id` of the write that made `version` (see `transactions.rs`).
fn tx(target: &Target, branch: &Option<String>, version: u64) -> String {
    super::transactions::write_transaction_id(&target.id, branch.as_deref(), version)
}

/// Writes to a table that is only declared create it (spec part 3).
pub(super) async fn is_declared_only(
    app: &AppState,
    location: &str,
    branch: Option<&str>,
) -> ApiResult<bool> {
    match app.store.latest(location, branch).await {
        Ok(_) => Ok(false),
        Err(e) if e.code == ErrorCode::TableNotFound && branch.is_none() => Ok(true),
        Err(e) => Err(e),
    }
}

pub async fn insert(
    State(app): State<AppState>,
    target: Target,
    body: ArrowBody,
) -> ApiResult<Response> {
    let location = target.catalog.locate(&target.id).await?;
    let branch = target.branch(&None);
    let overwrite = match target.params.get("mode") {
        None | Some("") => false,
        Some(m) if m.eq_ignore_ascii_case("append") => false,
        Some(m) if m.eq_ignore_ascii_case("overwrite") => true,
        Some(m) => {
            return Err(ApiError::invalid(format!(
                "unknown insert mode '{m}': use append or overwrite"
            )));
        }
    };
    if target.params.string("upload_id").is_some() {
        return super::multipart::part(&app, &target, body, overwrite).await;
    }
    if target.params.string("upload_part_id").is_some() {
        return Err(ApiError::invalid(
            "upload_part_id is only valid with upload_id",
        ));
    }
    let rows = body.num_rows();
    if let Some(table) = lsm_table(&app, &location, branch.as_deref(), None, "insert").await? {
        if overwrite {
            return Err(lsm_refusal("insert with mode=overwrite"));
        }
        // A table with a primary key holds one row per key: an add is an upsert.
        let hook = app.virtual_columns.insert_hook(target.caller.tenant());
        let done = app
            .store
            .lsm_upsert(&location, &table, body.batches, Some(&*hook))
            .await?;
        return Ok(reply(json!({
            "num_inserted_rows": done.rows, "version": done.version,
            "transaction_id": tx(&target, &branch, done.version),
        })));
    }
    let ds = if is_declared_only(&app, &location, branch.as_deref()).await? {
        app.store
            .create_at(
                &location,
                body.batches,
                body.schema,
                lance::dataset::WriteMode::Create,
            )
            .await?
    } else {
        let hook = app.virtual_columns.insert_hook(target.caller.tenant());
        app.store
            .insert(
                &location,
                branch.as_deref(),
                body.batches,
                overwrite,
                Some(&*hook),
            )
            .await?
    };
    Ok(reply(
        json!({ "num_inserted_rows": rows, "version": ds.version().version, "transaction_id": tx(&target, &branch, ds.version().version) }),
    ))
}

pub async fn merge_insert(
    State(app): State<AppState>,
    target: Target,
    body: ArrowBody,
) -> ApiResult<Response> {
    let location = target.catalog.locate(&target.id).await?;
    let branch = target.branch(&None);
    let p = &target.params;
    let on: Vec<String> = p.all("on").into_iter().filter(|o| !o.is_empty()).collect();
    if on.is_empty() {
        return Err(ApiError::invalid(
            "merge_insert needs at least one 'on' column",
        ));
    }
    let timeout = match p.get("timeout").filter(|t| !t.is_empty()) {
        Some(t) => Some(parse_duration(t)?),
        None => None,
    };
    let opts = MergeOptions {
        on,
        when_matched_update_all: p.bool("when_matched_update_all")?.unwrap_or(false),
        when_matched_update_all_filt: p.string("when_matched_update_all_filt"),
        // As upstream: inserting unmatched rows is the default unless explicitly turned off.
        when_not_matched_insert_all: p.bool("when_not_matched_insert_all")?.unwrap_or(true),
        when_not_matched_by_source_delete: p
            .bool("when_not_matched_by_source_delete")?
            .unwrap_or(false),
        when_not_matched_by_source_delete_filt: p.string("when_not_matched_by_source_delete_filt"),
        timeout,
        use_index: p.bool("use_index")?,
    };
    let use_lsm = p.bool("use_lsm")?;
    if let Some(table) =
        lsm_table(&app, &location, branch.as_deref(), use_lsm, "merge_insert").await?
    {
        return lsm_merge_insert(&app, &target, &location, body, &opts, &table).await;
    }
    if is_declared_only(&app, &location, branch.as_deref()).await? {
        let rows = body.num_rows();
        let ds = app
            .store
            .create_at(
                &location,
                body.batches,
                body.schema,
                lance::dataset::WriteMode::Create,
            )
            .await?;
        return Ok(reply(json!({
            "num_updated_rows": 0, "num_inserted_rows": rows, "num_deleted_rows": 0, "version": ds.version().version,
            "transaction_id": tx(&target, &branch, ds.version().version),
        })));
    }
    let hook = app.virtual_columns.insert_hook(target.caller.tenant());
    let counts = app
        .store
        .merge_insert(
            &location,
            branch.as_deref(),
            body.batches,
            &opts,
            Some(&*hook),
        )
        .await?;
    Ok(reply(json!({
        "num_updated_rows": counts.updated,
        "num_inserted_rows": counts.inserted,
        "num_deleted_rows": counts.deleted,
        "version": counts.version,
        "transaction_id": tx(&target, &branch, counts.version),
    })))
}

/// The LSM state of a table whose writes go through its LSM tiers (it has an LSM write spec
/// and the request does not say `use_lsm=false`); `None` for a plain write. `use_lsm=true` on a
/// table without a spec, and a plain write to one with a spec (it would land under rows the
/// LSM tiers shadow), are refused.
async fn lsm_table(
    app: &AppState,
    location: &str,
    branch: Option<&str>,
    use_lsm: Option<bool>,
    what: &str,
) -> ApiResult<Option<LsmTable>> {
    let table = match app.store.lsm_table(location, branch).await {
        Ok(t) => t,
        // A table that does not exist (yet: a declared one) has no spec; the write says why.
        // Any other failure is answered: a write must not take the plain path because the
        // look at the spec failed.
        Err(e) if e.code == ErrorCode::TableNotFound && use_lsm != Some(true) => None,
        Err(e) => return Err(e),
    };
    match (table, use_lsm) {
        (None, Some(true)) => Err(ApiError::invalid(format!(
            "use_lsm: the table{} has no LSM write spec (set one with set_lsm_write_spec)",
            if branch.is_some() { "'s branch" } else { "" }
        ))),
        (None, _) => Ok(None),
        (Some(_), Some(false)) => Err(lsm_refusal(what)),
        (Some(t), _) => Ok(Some(t)),
    }
}

/// Refuse a write that would bypass the LSM tiers of a table with an LSM write spec.
pub(super) async fn refuse_on_lsm_table(
    app: &AppState,
    location: &str,
    branch: Option<&str>,
    what: &str,
) -> ApiResult<()> {
    match lsm_table(app, location, branch, None, what).await? {
        Some(_) => Err(lsm_refusal(what)),
        None => Ok(()),
    }
}

/// A 400, not a 409: the lancedb client retries a 409, and this will not change by retrying.
fn lsm_refusal(what: &str) -> ApiError {
    ApiError::invalid(format!(
        "{what}: the table has an LSM write spec, and a write that bypasses its LSM tiers \
             would land under rows they still hold; write with merge_insert (an upsert on the \
             primary key) or delete, or run checkpoint_lsm and unset_lsm_write_spec first"
    ))
}

/// An upsert through the table's shard writers: `on` must be its primary key, matched rows
/// replaced and unmatched ones inserted (lance's MemWAL has no other merge).
async fn lsm_merge_insert(
    app: &AppState,
    target: &Target,
    location: &str,
    body: ArrowBody,
    opts: &MergeOptions,
    table: &LsmTable,
) -> ApiResult<Response> {
    let pk = table.primary_key();
    let mut on = opts.on.clone();
    on.sort();
    let mut key = pk.to_vec();
    key.sort();
    if on != key {
        return Err(ApiError::invalid(format!(
            "an LSM merge_insert matches on the table's primary key ({}), not on {}",
            pk.join(", "),
            opts.on.join(", ")
        )));
    }
    let refuse = |field: &str| {
        Err(ApiError::invalid(format!(
            "{field}: an LSM merge_insert is an upsert (when_matched_update_all and \
             when_not_matched_insert_all, nothing else); pass use_lsm=false after \
             unset_lsm_write_spec for other merges"
        )))
    };
    if !opts.when_matched_update_all || !opts.when_not_matched_insert_all {
        return refuse("when_matched_update_all / when_not_matched_insert_all");
    }
    if opts.when_matched_update_all_filt.is_some() {
        return refuse("when_matched_update_all_filt");
    }
    if opts.when_not_matched_by_source_delete
        || opts.when_not_matched_by_source_delete_filt.is_some()
    {
        return refuse("when_not_matched_by_source_delete");
    }
    let hook = app.virtual_columns.insert_hook(target.caller.tenant());
    let write = app
        .store
        .lsm_upsert(location, table, body.batches, Some(&*hook));
    let done = match opts.timeout {
        Some(t) => tokio::time::timeout(t, write).await.map_err(|_| {
            ApiError::unavailable(format!(
                "the LSM merge_insert did not finish within {}; an upsert is safe to send again",
                humantime::format_duration(t)
            ))
        })?,
        None => write.await,
    }?;
    // An LSM upsert reads nothing, so it cannot tell inserts from updates: `num_rows` is what
    // it wrote. The table's version is unchanged (the rows are in its WAL and memtables).
    Ok(reply(json!({
        "num_updated_rows": 0,
        "num_inserted_rows": 0,
        "num_deleted_rows": 0,
        "num_rows": done.rows,
        "num_attempts": 1,
        "version": done.version,
        "transaction_id": tx(target, &None, done.version),
    })))
}

fn parse_duration(text: &str) -> ApiResult<Duration> {
    humantime::parse_duration(text).map_err(|e| {
        ApiError::invalid(format!(
            "timeout '{text}' is not a duration such as 30s or 5m: {e}"
        ))
    })
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct UpdateBody {
    #[serde(flatten)]
    common: Common,
    predicate: Option<String>,
    updates: Vec<Vec<String>>,
}

pub async fn update(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<UpdateBody>,
) -> ApiResult<Response> {
    target.check_body_id(&body.common.id)?;
    let mut updates = Vec::with_capacity(body.updates.len());
    for (i, pair) in body.updates.into_iter().enumerate() {
        let [col, expr]: [String; 2] = pair.try_into().map_err(|p: Vec<String>| {
            ApiError::invalid(format!(
                "updates[{i}] must be a [column, expression] pair, got {} elements",
                p.len()
            ))
        })?;
        if updates.iter().any(|(c, _): &(String, String)| *c == col) {
            return Err(ApiError::invalid(format!(
                "column '{col}' is updated more than once"
            )));
        }
        updates.push((col, expr));
    }
    let location = target.catalog.locate(&target.id).await?;
    let branch = target.branch(&body.common.branch);
    refuse_on_lsm_table(&app, &location, branch.as_deref(), "update").await?;
    let (rows, version) = app
        .store
        .update(
            &location,
            branch.as_deref(),
            &updates,
            body.predicate.as_deref(),
        )
        .await?;
    Ok(reply(
        json!({ "updated_rows": rows, "rows_updated": rows, "version": version, "transaction_id": tx(&target, &branch, version) }),
    ))
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct DeleteBody {
    #[serde(flatten)]
    common: Common,
    predicate: Option<String>,
}

pub async fn delete(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<DeleteBody>,
) -> ApiResult<Response> {
    target.check_body_id(&body.common.id)?;
    let predicate = body
        .predicate
        .ok_or_else(|| ApiError::invalid("delete needs a 'predicate'"))?;
    let location = target.catalog.locate(&target.id).await?;
    let branch = target.branch(&body.common.branch);
    if lsm_table(&app, &location, branch.as_deref(), None, "delete")
        .await?
        .is_some()
    {
        // Tombstones for the keys the predicate matches in every tier.
        let done = app.store.lsm_delete(&location, &predicate).await?;
        return Ok(reply(
            json!({ "version": done.version, "num_deleted_rows": done.rows, "transaction_id": tx(&target, &branch, done.version) }),
        ));
    }
    let (version, deleted) = app
        .store
        .delete(&location, branch.as_deref(), &predicate)
        .await?;
    Ok(reply(
        json!({ "version": version, "num_deleted_rows": deleted, "transaction_id": tx(&target, &branch, version) }),
    ))
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct CountBody {
    #[serde(flatten)]
    common: Common,
    version: Option<i64>,
    predicate: Option<String>,
}

/// Answers a bare JSON integer (spec 4.5).
pub async fn count_rows(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<CountBody>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.common.id).await?;
    let version = body.version.or(target.params.int("version")?);
    let at = At::new(target.branch(&body.common.branch), version)?;
    let ds = app.store.read(&location, &at).await?;
    let predicate = body.predicate.filter(|p| !p.trim().is_empty());
    if let Some(p) = &predicate {
        crate::sql_guard::check(p, "predicate")?;
    }
    // A table with an LSM write spec counts the rows of every tier (at its latest state).
    if at.branch.is_none() && at.version.is_none() && app.store.lsm_enabled(&ds).await? {
        let spec = crate::store::QuerySpec {
            filter: predicate,
            projection: Some(crate::store::Projection::Names(
                app.store.lsm_primary_key(&ds).await?.unwrap_or_default(),
            )),
            ..Default::default()
        };
        let count = app.store.lsm_read(&location, &spec).await?.count().await?;
        return Ok(Json(count).into_response());
    }
    let count = crate::store::count_rows(&ds, predicate).await?;
    Ok(Json(count).into_response())
}
