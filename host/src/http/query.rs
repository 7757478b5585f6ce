//! `/v1/table/{id}/{query,explain_plan,analyze_plan}`. Query results are written as Arrow IPC
//! (file format by default, stream format when `Accept` asks for it). A small answer is sent
//! whole; a large one batch by batch as lance produces it, so a large scan never sits whole in
//! memory.

use arrow_ipc::writer::{FileWriter, StreamWriter};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use lancet_hosting::usage::Measure;
use serde_json::{Value, json};

use super::pipeline::extract::{Dialect, JsonBody, Target};
use super::query_body;
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};
use crate::store::At;

const STREAM_TYPE: &str = "application/vnd.apache.arrow.stream";
const FILE_TYPE: &str = "application/vnd.apache.arrow.file";
/// Answers up to about this size are sent whole; larger ones are streamed batch by batch.
const BUFFERED_ANSWER_BYTES: usize = 1 << 20;

async fn dataset_for(
    app: &AppState,
    target: &Target,
    body: &Value,
) -> ApiResult<std::sync::Arc<lance::Dataset>> {
    let body_id: Option<Vec<String>> = body
        .get("id")
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    target.check_body_id(&body_id)?;
    let location = target.catalog.locate(&target.id).await?;
    let branch = body
        .get("branch")
        .and_then(Value::as_str)
        .map(str::to_string);
    let version = match body.get("version") {
        None | Some(Value::Null) => target.params.int("version")?,
        Some(v) => Some(
            v.as_i64()
                .ok_or_else(|| ApiError::invalid("version must be an integer"))?,
        ),
    };
    let at = At::new(target.branch(&branch), version)?;
    app.store.read(&location, &at).await
}

/// The table's location when this query reads its LSM tiers: it has an LSM write spec, the
/// query reads the latest main state, and does not say `use_lsm: false`. A `use_lsm: true`
/// the table cannot honour is a 400 naming why.
async fn lsm_location(
    app: &AppState,
    target: &Target,
    body: &Value,
    spec: &crate::store::QuerySpec,
    ds: &lance::Dataset,
) -> ApiResult<Option<String>> {
    if spec.use_lsm == Some(false) {
        return Ok(None);
    }
    let pinned = body.get("version").is_some_and(|v| !v.is_null())
        || target.params.int("version")?.is_some();
    let branched = body
        .get("branch")
        .and_then(Value::as_str)
        .or(target.params.get("branch"))
        .is_some_and(|b| !b.is_empty() && b != "main");
    // A pinned version or a branch is a state of the base table.
    let enabled = !pinned && !branched && app.store.lsm_enabled(ds).await?;
    match (enabled, spec.use_lsm) {
        (_, Some(true)) if pinned => Err(ApiError::invalid(
            "use_lsm: the MemWAL LSM scanner cannot read from a time-traveled dataset version; \
             set use_lsm(false) to read the base table at this version",
        )),
        (_, Some(true)) if branched => Err(ApiError::invalid(
            "use_lsm: a branch has no LSM tiers; set use_lsm(false) to read the branch",
        )),
        (false, Some(true)) => Err(ApiError::invalid(
            "use_lsm: the table has no LSM write spec (set one with set_lsm_write_spec)",
        )),
        (false, _) => Ok(None),
        (true, _) => Ok(Some(target.catalog.locate(&target.id).await?)),
    }
}

pub async fn query(
    State(app): State<AppState>,
    target: Target,
    headers: HeaderMap,
    JsonBody(query_body::QueryBody(mut body)): JsonBody<query_body::QueryBody>,
) -> ApiResult<Response> {
    let (spec, ds) = if body.get("query_text").is_some() {
        // The version read does not depend on the vector: a text query opens it once.
        let ds = dataset_for(&app, &target, &body).await?;
        embed_query_text(&app, &target, &ds, &mut body).await?;
        (query_body::parse(&body)?, ds)
    } else {
        let spec = query_body::parse(&body)?;
        (spec, dataset_for(&app, &target, &body).await?)
    };
    // The read wakes many times: each wake polls it directly rather than through every stage.
    super::own_task::run(answer(app, target, headers, body, spec, ds)).await
}

/// Replaces `query_text` with the vector the searched column's model gives it (Lancet's own
/// field: a text search of an embedding column, embedded by the server).
async fn embed_query_text(
    app: &AppState,
    target: &Target,
    ds: &lance::Dataset,
    body: &mut Value,
) -> ApiResult<()> {
    let Some(fields) = body.as_object_mut() else {
        return Ok(()); // parse says what is wrong
    };
    let text = match fields.remove("query_text") {
        Some(Value::String(t)) => t,
        Some(Value::Null) => return Ok(()),
        Some(_) => return Err(ApiError::invalid("query_text must be a string")),
        None => return Ok(()),
    };
    if fields.get("vector").is_some_and(|v| !v.is_null()) {
        return Err(ApiError::invalid(
            "give vector or query_text, not both: query_text is embedded into the vector",
        ));
    }
    let column = match fields.get("vector_column") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(c.clone()),
        Some(_) => return Err(ApiError::invalid("vector_column must be a string")),
    };
    let (column, vector) = app
        .models
        .embed_query(target.caller.tenant(), ds.schema(), column.as_deref(), text)
        .await?;
    body["vector"] = json!(vector);
    body["vector_column"] = json!(column);
    Ok(())
}

/// The query's answer: lance's (or the LSM scanner's) batches as Arrow IPC, or JSON rows.
async fn answer(
    app: AppState,
    target: Target,
    headers: HeaderMap,
    body: Value,
    spec: crate::store::QuerySpec,
    ds: std::sync::Arc<lance::Dataset>,
) -> ApiResult<Response> {
    let mut stream = match lsm_location(&app, &target, &body, &spec, &ds).await? {
        Some(location) => {
            let read = app.store.lsm_read(&location, &spec).await?;
            crate::store::QueryStream::Plan(read.stream().await?)
        }
        None => spec.stream(&ds, &app.store).await?,
    };
    let schema = stream.schema();
    let usage = app.hosting.counters(target.caller.tenant());
    if super::json_rows::wants_json(&headers) {
        return json_answer(stream, &schema, usage.as_deref()).await;
    }
    let as_stream = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains(STREAM_TYPE));
    let content_type = HeaderValue::from_static(if as_stream { STREAM_TYPE } else { FILE_TYPE });
    let mut writer = IpcOut::new(as_stream, &schema).map_err(ApiError::from)?;
    // Most answers (top-k searches, filtered lookups) are small: encode them whole and answer
    // in one write. Only an answer that outgrows the buffer is streamed from a task, so small
    // queries pay no task, channel or chunked framing. Errors until then get a proper status;
    // later ones can only cut the body short (and are logged).
    let mut buffered = Vec::new();
    let mut size = 0;
    while size < BUFFERED_ANSWER_BYTES {
        match stream.next().await {
            Some(batch) => {
                let batch = batch.map_err(ApiError::from)?;
                if let Some(u) = &usage {
                    u.add(Measure::RowsRead, batch.num_rows() as u64);
                }
                let bytes = writer.write(&batch).map_err(ApiError::from)?;
                size += bytes.len();
                buffered.push(bytes);
            }
            None => {
                buffered.push(writer.finish().map_err(ApiError::from)?);
                let mut response = Body::from(buffered.concat()).into_response();
                response
                    .headers_mut()
                    .insert(header::CONTENT_TYPE, content_type);
                return Ok(response);
            }
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        for bytes in buffered {
            if tx.send(Ok(bytes)).await.is_err() {
                return; // client went away
            }
        }
        while let Some(batch) = stream.next().await {
            let chunk = batch.map_err(|e| e.to_string()).and_then(|b| {
                if let Some(u) = &usage {
                    u.add(Measure::RowsRead, b.num_rows() as u64);
                }
                writer.write(&b).map_err(|e| e.to_string())
            });
            match chunk {
                Ok(bytes) if bytes.is_empty() => {}
                Ok(bytes) => {
                    if tx.send(Ok(bytes)).await.is_err() {
                        return; // client went away
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "query failed while streaming");
                    let _ = tx.send(Err(std::io::Error::other(e))).await;
                    return;
                }
            }
        }
        match writer.finish() {
            Ok(bytes) => {
                let _ = tx.send(Ok(bytes)).await;
            }
            Err(e) => {
                let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
            }
        }
    });
    let body = Body::from_stream(tokio_stream_from(rx));
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, content_type);
    Ok(response)
}

/// The whole answer as JSON rows (see [`super::json_rows`]), up to its size bound.
async fn json_answer(
    mut stream: impl futures::Stream<Item = lance::Result<arrow_array::RecordBatch>> + Unpin,
    schema: &arrow_schema::Schema,
    usage: Option<&lancet_hosting::usage::Counters>,
) -> ApiResult<Response> {
    let (mut batches, mut size) = (Vec::new(), 0);
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(ApiError::from)?;
        size += batch.get_array_memory_size();
        if size > super::json_rows::MAX_JSON_ROWS_BYTES {
            return Err(super::json_rows::too_large());
        }
        if let Some(u) = usage {
            u.add(Measure::RowsRead, batch.num_rows() as u64);
        }
        batches.push(batch);
    }
    Ok(reply(super::json_rows::json_rows(schema, &batches)?))
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<bytes::Bytes, std::io::Error>>,
) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// An IPC writer over an in-memory buffer that is drained after every batch.
enum IpcOut {
    File(FileWriter<Vec<u8>>),
    Stream(StreamWriter<Vec<u8>>),
}

impl IpcOut {
    fn new(
        as_stream: bool,
        schema: &arrow_schema::Schema,
    ) -> Result<Self, arrow_schema::ArrowError> {
        Ok(if as_stream {
            Self::Stream(StreamWriter::try_new(Vec::new(), schema)?)
        } else {
            Self::File(FileWriter::try_new(Vec::new(), schema)?)
        })
    }

    fn write(
        &mut self,
        batch: &arrow_array::RecordBatch,
    ) -> Result<bytes::Bytes, arrow_schema::ArrowError> {
        let buf = match self {
            Self::File(w) => {
                w.write(batch)?;
                w.get_mut()
            }
            Self::Stream(w) => {
                w.write(batch)?;
                w.get_mut()
            }
        };
        Ok(bytes::Bytes::from(std::mem::take(buf)))
    }

    fn finish(mut self) -> Result<bytes::Bytes, arrow_schema::ArrowError> {
        let buf = match &mut self {
            Self::File(w) => {
                w.finish()?;
                w.get_mut()
            }
            Self::Stream(w) => {
                w.finish()?;
                w.get_mut()
            }
        };
        Ok(bytes::Bytes::from(std::mem::take(buf)))
    }
}

pub async fn explain_plan(
    State(app): State<AppState>,
    target: Target,
    dialect: Dialect,
    JsonBody(query_body::PlanBody(body)): JsonBody<query_body::PlanBody>,
) -> ApiResult<Response> {
    let spec = query_body::parse(&plan_query(&body))?;
    let verbose = body
        .get("verbose")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let ds = dataset_for(&app, &target, &body).await?;
    let plan = spec
        .scanner(&ds)?
        .explain_plan(verbose)
        .await
        .map_err(ApiError::from)?;
    Ok(plan_answer(dialect, json!({ "plan": plan }), plan))
}

pub async fn analyze_plan(
    State(app): State<AppState>,
    target: Target,
    dialect: Dialect,
    JsonBody(query_body::PlanBody(body)): JsonBody<query_body::PlanBody>,
) -> ApiResult<Response> {
    let spec = query_body::parse(&plan_query(&body))?;
    let ds = dataset_for(&app, &target, &body).await?;
    let analysis = spec
        .scanner(&ds)?
        .analyze_plan()
        .await
        .map_err(ApiError::from)?;
    Ok(plan_answer(
        dialect,
        json!({ "analysis": analysis, "plan": analysis }),
        analysis,
    ))
}

/// A plan request's query: in `query` (the spec's model), or the body itself less the plan's
/// own `verbose`.
fn plan_query(body: &Value) -> Value {
    match body.get("query") {
        Some(q) => q.clone(),
        None => {
            let mut inline = body.clone();
            if let Some(map) = inline.as_object_mut() {
                map.remove("verbose");
            }
            inline
        }
    }
}

/// The spec's clients read a plan from an object; the lancedb SDK reads the body as one JSON
/// string.
fn plan_answer(dialect: Dialect, object: Value, text: String) -> Response {
    match dialect {
        Dialect::Namespace => reply(object),
        Dialect::LanceDb => axum::Json(Value::String(text)).into_response(),
    }
}
