//! `/v1/materialized_view/{id}/{create,describe,refresh,drop}` and
//! `GET /v1/namespace/{id}/materialized_view/list`: views over one source table (see
//! `crate::views`). Creating and refreshing start a refresh job and answer 202 with its id.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::Schema;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use lance_namespace::models::{CreateTableRequest, DropTableRequest, ListTablesRequest};
use serde::Deserialize;
use serde_json::{Value, json};

use super::pipeline::extract::{JsonBody, Target, page};
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};
use crate::jobs::kinds::backfill::spec::MAX_PARALLELISM;
use crate::jobs::kinds::geneva_jobs;
use crate::jobs::kinds::refresh::{self, RefreshSpec};
use crate::views::ViewRecord;
use crate::views::definition::Definition;
use crate::views::geneva::{BOOKKEEPING_COLUMNS, is_geneva_query};

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CreateBody {
    /// The defining query (the lancedb client's field):
    /// `SELECT <* | column | expr AS name>, ... FROM [ns.]table [WHERE ...] [LIMIT n]`.
    query: Option<String>,
    /// The spec's: `query` (the only kind Lancet maintains; `udtf` and `chunker` need a
    /// UDTF runtime).
    kind: Option<String>,
    /// The spec's name for the defining query (read as SQL, like `query`).
    source_query: Option<String>,
    /// Base64 Arrow IPC schema the view's rows must have (checked against the query's).
    output_schema: Option<String>,
    /// Not supported: no UDTF runtime (a 400 when set).
    udtf_spec: Option<Value>,
    /// Not supported (a 400 when true): refresh on request.
    auto_refresh: Option<bool>,
    /// Create the view empty, without a first refresh (default true, as the spec has it).
    with_no_data: Option<bool>,
    id: Option<Vec<String>>,
    #[allow(dead_code)]
    identity: Option<Value>,
    #[allow(dead_code)]
    context: Option<HashMap<String, Value>>,
}

/// The source's id in the catalog: a bare table name is in the view's own namespace.
fn source_id(target: &Target, def: &Definition) -> ApiResult<Vec<String>> {
    if def.source.len() == 1 {
        let mut id = target.id[..target.id.len() - 1].to_vec();
        id.push(def.source[0].clone());
        Ok(id)
    } else {
        target.caller.resolve(&def.source)
    }
}

/// `geneva`: the schema of a Geneva view, whose bookkeeping columns Lancet's views do not have.
fn check_output_schema(raw: &str, schema: &Schema, geneva: bool) -> ApiResult<()> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(raw.trim())
        .map_err(|e| ApiError::invalid(format!("output_schema is not base64: {e}")))?;
    // The client's bytes: checked (every declared length) before arrow reads them.
    let mut declared = super::arrow_body::ArrowBody::decode(&bytes)
        .map_err(|e| ApiError::invalid(format!("output_schema: {}", e.message)))?
        .schema;
    if geneva {
        let kept: Vec<_> = declared
            .fields()
            .iter()
            .filter(|f| !BOOKKEEPING_COLUMNS.contains(&f.name().as_str()))
            .cloned()
            .collect();
        declared = Arc::new(Schema::new(kept));
    }
    let shape = |s: &Schema| -> Vec<(String, String)> {
        s.fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().to_string()))
            .collect()
    };
    if shape(&declared) != shape(schema) {
        return Err(ApiError::invalid(format!(
            "output_schema {:?} does not match the query's columns {:?}",
            shape(&declared),
            shape(schema)
        )));
    }
    Ok(())
}

pub async fn create(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<CreateBody>,
) -> ApiResult<Response> {
    target.check_body_id(&body.id)?;
    super::tables::storable(&target.id)?;
    if target.id.is_empty() {
        return Err(ApiError::invalid("a materialized view needs a name"));
    }
    match body.kind.as_deref() {
        None | Some("query") => {}
        Some(k @ ("udtf" | "chunker" | "scalar_udtf")) => {
            return Err(ApiError::invalid(format!(
                "kind '{k}': Lancet has no UDTF runtime; only 'query' views are maintained"
            )));
        }
        Some(k) => {
            return Err(ApiError::invalid(format!(
                "unknown kind '{k}': use 'query'"
            )));
        }
    }
    if body.udtf_spec.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(ApiError::invalid(
            "udtf_spec: Lancet has no UDTF runtime; only 'query' views are maintained",
        ));
    }
    if body.auto_refresh == Some(true) {
        return Err(ApiError::invalid(
            "auto_refresh: not supported; refresh a view with materialized_view/{id}/refresh",
        ));
    }
    let sql = match (&body.query, &body.source_query) {
        (Some(q), Some(s)) if q != s => {
            return Err(ApiError::invalid(
                "query and source_query name different queries",
            ));
        }
        (Some(q), _) | (None, Some(q)) => q.clone(),
        (None, None) => String::new(),
    };
    let definition = Definition::parse(&sql)?;
    let source_id = source_id(&target, &definition)?;
    let source_location = target.catalog.locate(&source_id).await?;
    let schema = app.store.view_schema(&source_location, &definition).await?;
    if let Some(raw) = &body.output_schema {
        check_output_schema(raw, &schema, is_geneva_query(&sql))?;
    }
    let record = ViewRecord {
        definition,
        source_id,
        incarnation: uuid::Uuid::new_v4().to_string(),
    };
    let schema = Arc::new(Schema::new_with_metadata(
        schema.fields().clone(),
        record.metadata()?,
    ));
    let ipc = super::arrow_body::stream_bytes(&RecordBatch::new_empty(schema.clone()))?;
    let created = {
        let _guard = target.catalog.commit_lock.lock().await?;
        let r = target
            .catalog
            .ns()
            .create_table(
                CreateTableRequest {
                    id: Some(target.id.clone()),
                    ..Default::default()
                },
                ipc.into(),
            )
            .await
            .map_err(ApiError::from)?;
        target.catalog.invalidate(&target.id);
        r
    };
    let location = created
        .location
        .ok_or_else(|| ApiError::internal("created view has no location"))?;
    app.store.forget(&location);
    let version = app.store.latest(&location, None).await?.version().version;
    // The spec's default is no first refresh (the lancedb client always says).
    let job_id = match body.with_no_data {
        None | Some(true) => None,
        Some(false) => Some(start_refresh(&app, &target, location, &record, None).await?),
    };
    let answer = json!({ "version": version, "job_id": job_id });
    // The spec's clients (`source_query`) expect 201; the lancedb client (`query`) 202 when
    // a first refresh was started.
    let status = match (&body.query, &job_id) {
        (None, _) => StatusCode::CREATED,
        (Some(_), Some(_)) => StatusCode::ACCEPTED,
        (Some(_), None) => StatusCode::OK,
    };
    Ok((status, axum::Json(answer)).into_response())
}

fn accepted(body: Value) -> Response {
    (StatusCode::ACCEPTED, axum::Json(body)).into_response()
}

async fn start_refresh(
    app: &AppState,
    target: &Target,
    location: String,
    record: &ViewRecord,
    source_version: Option<u64>,
) -> ApiResult<String> {
    // The source as the catalog has it now (it may have been dropped or replaced).
    let source_location = target.catalog.locate(&record.source_id).await?;
    let geneva = is_geneva_query(&record.definition.query);
    let spec = RefreshSpec {
        table_id: target.id.clone(),
        view_query: record.definition.query.clone(),
        source_location,
        source_version,
        geneva_jobs: geneva_jobs::find(
            app,
            target.caller.tenant(),
            target.caller.database.as_deref(),
            geneva,
        )
        .await,
    };
    refresh::submit(app, target.caller.tenant(), location, spec).await
}

/// The view at `target`, or a 404 (also for a plain table: it is no view).
async fn view(
    app: &AppState,
    target: &Target,
) -> ApiResult<(String, ViewRecord, HashMap<String, String>)> {
    let not_found = || {
        ApiError::new(
            lance_namespace::ErrorCode::TableNotFound,
            format!("materialized view not found: {}", target.name()),
        )
    };
    let location = target.catalog.locate(&target.id).await.map_err(|e| {
        if e.code == lance_namespace::ErrorCode::TableNotFound {
            not_found()
        } else {
            e
        }
    })?;
    let ds = app.store.latest(&location, None).await?;
    let metadata = ds.schema().metadata.clone();
    let record = ViewRecord::of(&metadata)?.ok_or_else(not_found)?;
    Ok((location, record, metadata))
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct IdBody {
    id: Option<Vec<String>>,
}

pub async fn describe(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<IdBody>,
) -> ApiResult<Response> {
    target.check_body_id(&body.id)?;
    let (_, record, metadata) = view(&app, &target).await?;
    Ok(reply(record.describe(
        target.id.last().map(String::as_str).unwrap_or_default(),
        &metadata,
    )))
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RefreshBody {
    /// Recompute every row (the only way Lancet refreshes: accepted either way).
    #[allow(dead_code)]
    full: Option<bool>,
    /// The source version to read (default: the latest when the job runs).
    source_version: Option<i64>,
    /// The spec's name for `source_version`.
    src_version: Option<i64>,
    /// Refuse (409) unless the view is still this incarnation.
    expected_incarnation: Option<String>,
    /// Worker pool: only `default`.
    cluster: Option<String>,
    /// Not supported (400 when set).
    max_rows_per_fragment: Option<i64>,
    concurrency: Option<i64>,
    intra_applier_concurrency: Option<i64>,
    source_task_size: Option<i64>,
    output_limit: Option<i64>,
    manifest: Option<String>,
    id: Option<Vec<String>>,
    #[allow(dead_code)]
    identity: Option<Value>,
    #[allow(dead_code)]
    context: Option<HashMap<String, Value>>,
}

pub async fn refresh(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<RefreshBody>,
) -> ApiResult<Response> {
    target.check_body_id(&body.id)?;
    for (name, set) in [
        (
            "max_rows_per_fragment",
            body.max_rows_per_fragment.is_some(),
        ),
        ("source_task_size", body.source_task_size.is_some()),
        ("output_limit", body.output_limit.is_some()),
        ("manifest", body.manifest.is_some()),
    ] {
        if set {
            return Err(ApiError::invalid(format!(
                "{name}: not supported for materialized view refreshes (a refresh is one scan of the source)"
            )));
        }
    }
    // Bounds on parallel workers (Geneva sends 8 and 1 by default): a query view's refresh is
    // one scan, within any bound.
    for (name, v) in [
        ("concurrency", body.concurrency),
        ("intra_applier_concurrency", body.intra_applier_concurrency),
    ] {
        if let Some(n) = v.filter(|n| !(1..=MAX_PARALLELISM).contains(n)) {
            return Err(ApiError::invalid(format!(
                "{name} must be between 1 and {MAX_PARALLELISM}, got {n}"
            )));
        }
    }
    if let Some(c) = body.cluster.as_deref().filter(|c| *c != "default") {
        // A refresh is one scan and one overwrite commit: nothing to spread over Ray tasks.
        return Err(ApiError::invalid(if app.clusters.ray(c).is_some() {
            format!(
                "cluster '{c}': a materialized view refresh runs on this server's nodes \
                 ('default'); Ray clusters run backfills"
            )
        } else {
            format!("cluster '{c}' does not exist: a refresh runs on 'default'")
        }));
    }
    let version = match (body.source_version, body.src_version) {
        (Some(a), Some(b)) if a != b => {
            return Err(ApiError::invalid(
                "source_version and src_version name different versions",
            ));
        }
        (Some(v), _) | (None, Some(v)) if v < 0 => {
            return Err(ApiError::invalid(format!(
                "source_version must be >= 0, got {v}"
            )));
        }
        (Some(v), _) | (None, Some(v)) => Some(v as u64),
        (None, None) => None,
    };
    let (location, record, _) = view(&app, &target).await?;
    if let Some(expected) = &body.expected_incarnation
        && *expected != record.incarnation
    {
        return Err(ApiError::conflict(format!(
            "the view is incarnation {}, not {expected}: it was dropped and created again",
            record.incarnation
        )));
    }
    if let Some(v) = version {
        // A missing source version is the caller's mistake now, not a failed job later.
        let source = target.catalog.locate(&record.source_id).await?;
        app.store
            .read(&source, &crate::store::At::new(None, Some(v as i64))?)
            .await?;
    }
    let job_id = start_refresh(&app, &target, location, &record, version).await?;
    Ok(accepted(json!({ "job_id": job_id })))
}

pub async fn drop(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<IdBody>,
) -> ApiResult<Response> {
    target.check_body_id(&body.id)?;
    view(&app, &target).await?;
    let request = DropTableRequest {
        id: Some(target.id.clone()),
        ..Default::default()
    };
    super::tables::drop_table(&app, &target, request).await?;
    Ok(reply(json!({})))
}

/// The views of a namespace (its tables that carry a view definition), by name.
pub async fn list(State(app): State<AppState>, target: Target) -> ApiResult<Response> {
    let (limit, token) = page(&target.params, None, None)?;
    let mut names = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let listed = target
            .catalog
            .reader()
            .list_tables(ListTablesRequest {
                id: Some(target.id.clone()),
                page_token: next.take(),
                ..Default::default()
            })
            .await
            .map_err(ApiError::from)?;
        for name in listed.tables {
            let mut id = target.id.clone();
            id.push(name.clone());
            let Ok(location) = target.catalog.locate(&id).await else {
                continue;
            };
            // A declared table has no data (and no definition) yet.
            if let Ok(ds) = app.store.latest(&location, None).await
                && ViewRecord::of(&ds.schema().metadata)?.is_some()
            {
                names.push(name);
            }
        }
        match listed.page_token.filter(|t| !t.is_empty()) {
            Some(t) => next = Some(t),
            None => break,
        }
    }
    names.sort();
    let (views, page_token) = super::pipeline::extract::paginate(
        names.into_iter().map(|n| (n.clone(), n)).collect(),
        limit,
        token.as_deref(),
    );
    let views: Vec<String> = views.into_iter().map(|(_, n)| n).collect();
    Ok(reply(json!({ "views": views, "page_token": page_token })))
}
