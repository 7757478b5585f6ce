//! `/v1/table/{id}/{create_index,create_scalar_index,index/list,index/{name}/stats,index/{name}/drop,
//! index/{name}/prewarm,page_cache/prewarm}`.

use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::pipeline::extract::{Common, Dialect, JsonBody, Target, page, paginate};
use super::transactions::committed;
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};
use crate::store::{At, IndexOptions};

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct CreateBody {
    #[serde(flatten)]
    common: Common,
    #[serde(flatten)]
    options: IndexOptions,
}

async fn create_with(
    app: AppState,
    target: Target,
    body: CreateBody,
    default_type: Option<&str>,
) -> ApiResult<Response> {
    target.check_body_id(&body.common.id)?;
    let mut opts = body.options;
    if opts.column.is_empty() {
        return Err(ApiError::invalid("create_index needs a 'column'"));
    }
    if opts.index_type.is_empty() {
        opts.index_type = default_type
            .ok_or_else(|| ApiError::invalid("create_index needs an 'index_type'"))?
            .to_string();
    }
    let location = target.catalog.locate(&target.id).await?;
    let branch = target.branch(&body.common.branch);
    let version = app
        .store
        .create_index(&location, branch.as_deref(), &opts)
        .await?;
    Ok(reply(committed(&target.id, branch.as_deref(), version)))
}

pub async fn create(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<CreateBody>,
) -> ApiResult<Response> {
    create_with(app, target, body, None).await
}

pub async fn create_scalar(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<CreateBody>,
) -> ApiResult<Response> {
    create_with(app, target, body, Some("BTREE")).await
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct ReadBody {
    #[serde(flatten)]
    common: Common,
    version: Option<i64>,
    limit: Option<i64>,
    page_token: Option<String>,
}

fn at(target: &Target, body: &ReadBody) -> ApiResult<At> {
    let version = match body.version {
        Some(v) => Some(v),
        None => target.params.int("version")?,
    };
    At::new(target.branch(&body.common.branch), version)
}

/// Index types the lancedb SDK can parse (it fails the whole listing on any other); an index
/// of another type is shown to it as `Unknown`, which it does parse.
const LANCEDB_TYPES: &[&str] = &[
    "IvfFlat",
    "IvfSq",
    "IvfPq",
    "IvfRq",
    "IvfHnswPq",
    "IvfHnswSq",
    "IvfHnswFlat",
    "IVF_FLAT",
    "IVF_SQ",
    "IVF_PQ",
    "IVF_RQ",
    "IVF_HNSW_PQ",
    "IVF_HNSW_SQ",
    "IVF_HNSW_FLAT",
    "BTree",
    "BTREE",
    "Bitmap",
    "BITMAP",
    "LabelList",
    "LABEL_LIST",
    "Fm",
    "FM",
    "ZoneMap",
    "ZONEMAP",
    "NGram",
    "NGRAM",
    "BloomFilter",
    "BLOOMFILTER",
    "RTree",
    "RTREE",
    "Inverted",
    "INVERTED",
    "FTS",
];

fn for_dialect(dialect: Dialect, mut entry: Value) -> Value {
    if dialect == Dialect::LanceDb
        && let Some(t) = entry["index_type"].as_str()
        && !LANCEDB_TYPES.contains(&t)
    {
        entry["index_type"] = json!("Unknown");
    }
    entry
}

pub async fn list(
    State(app): State<AppState>,
    target: Target,
    dialect: Dialect,
    JsonBody(body): JsonBody<ReadBody>,
) -> ApiResult<Response> {
    target.check_body_id(&body.common.id)?;
    let (limit, token) = page(&target.params, body.limit, body.page_token.clone())?;
    let location = target.catalog.locate(&target.id).await?;
    let at = at(&target, &body)?;
    let entries = app.store.list_indexes(&location, &at).await?;
    let (entries, next) = paginate(entries, limit, token.as_deref());
    // Rows not yet indexed are INDEXING while upkeep is on them (or will be: upkeep is on
    // for the tenant), PENDING when only an optimize request would fold them in.
    let latest = at.version.is_none();
    let upkeep_on = app.upkeep.policy_for(&app, target.caller.tenant()).enabled;
    let indexing = latest
        && (upkeep_on
            || crate::jobs::kinds::optimize::indexing(&app.jobs, &location, at.branch.as_deref()));
    let indexes: Vec<Value> = entries
        .into_iter()
        .map(|(_, mut v)| {
            if indexing && v["status"] == "PENDING" {
                v["status"] = json!("INDEXING");
            }
            for_dialect(dialect, v)
        })
        .collect();
    Ok(reply(json!({ "indexes": indexes, "page_token": next })))
}

pub async fn stats(
    State(app): State<AppState>,
    target: Target,
    dialect: Dialect,
    Path((_, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<ReadBody>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.common.id).await?;
    Ok(reply(for_dialect(
        dialect,
        app.store
            .index_stats(&location, &at(&target, &body)?, &name)
            .await?,
    )))
}

pub async fn drop(
    State(app): State<AppState>,
    target: Target,
    Path((_, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<Common>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.id).await?;
    let branch = target.branch(&body.branch);
    let version = app
        .store
        .drop_index(&location, branch.as_deref(), &name)
        .await?;
    Ok(reply(committed(&target.id, branch.as_deref(), version)))
}

/// `index/{name}/prewarm`: load the index into the server's cache before queries need it.
pub async fn prewarm_index(
    State(app): State<AppState>,
    target: Target,
    Path((_, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<ReadBody>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.common.id).await?;
    app.store
        .prewarm_index(&location, &at(&target, &body)?, &name)
        .await?;
    Ok(reply(json!({})))
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct PrewarmBody {
    #[serde(flatten)]
    read: ReadBody,
    /// The columns to read (default: all).
    columns: Option<Vec<String>>,
}

/// `page_cache/prewarm`: read columns once so their pages are in memory.
pub async fn prewarm_pages(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<PrewarmBody>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.read.common.id).await?;
    let (rows, bytes) = app
        .store
        .prewarm_columns(
            &location,
            &at(&target, &body.read)?,
            body.columns.as_deref().filter(|c| !c.is_empty()),
        )
        .await?;
    Ok(reply(json!({ "rows_read": rows, "bytes_read": bytes })))
}
