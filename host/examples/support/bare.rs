//! The least any HTTP server over lance must do for the held read, as a service: take the
//! JSON body apart for the query, run lance on a dataset opened in this process (as the
//! in-process loop does), and answer the ids as Arrow IPC (or the count as text). No routing,
//! credential, catalog, tenant, metrics or checks. Served here (`--served-here --bare`) its
//! CPU per call bounds what any server design could reach over HTTP on this machine, so a gap
//! between it and in-process lance is HTTP's and the body's, and one between it and Lancet is
//! Lancet's.

use std::sync::Arc;

use arrow_array::{Float32Array, RecordBatch};
use futures::TryStreamExt;
use lance::Dataset;
use lance_index::scalar::FullTextSearchQuery;
use lance_io::stream::RecordBatchStream as _;
use serde_json::Value;

/// One read, as the in-process loop makes it and the bare service takes it from a body.
pub enum Query {
    Vector(Vec<f32>),
    Fts(String),
    Count(Option<String>),
}

/// What a read answered: the count, or the batches of ids.
pub enum Answer {
    Count(usize),
    Rows(arrow_schema::SchemaRef, Vec<RecordBatch>),
}

impl Answer {
    pub fn rows(&self) -> usize {
        match self {
            Answer::Count(n) => *n,
            Answer::Rows(_, batches) => batches.iter().map(|b| b.num_rows()).sum(),
        }
    }
}

/// The read on lance: k=10 nearest with nprobes 8 or a full-text match with k=10, each
/// projecting `id` only, or a count.
pub async fn run(ds: &Dataset, query: Query) -> Answer {
    let mut scan = match query {
        Query::Count(predicate) => return Answer::Count(ds.count_rows(predicate).await.unwrap()),
        Query::Vector(v) => {
            let mut scan = ds.scan();
            scan.nearest("vec", &Float32Array::from(v), 10).unwrap();
            scan.nprobes(8);
            scan
        }
        Query::Fts(word) => {
            let mut scan = ds.scan();
            scan.full_text_search(FullTextSearchQuery::new(word))
                .unwrap();
            scan.limit(Some(10), None).unwrap();
            scan
        }
    };
    scan.project(&["id"]).unwrap();
    let stream = scan.try_into_stream().await.unwrap();
    let schema = stream.schema();
    Answer::Rows(schema, stream.try_collect().await.unwrap())
}

/// The query a bench body (`Read::body`) asks for, on `path`.
fn query(path: &str, body: &Value) -> Query {
    if path.ends_with("/count_rows") {
        let predicate = body.get("predicate").and_then(Value::as_str);
        return Query::Count(predicate.map(str::to_string));
    }
    match body["vector"].as_array() {
        Some(v) if !v.is_empty() => Query::Vector(
            v.iter()
                .map(|x| x.as_f64().expect("a number") as f32)
                .collect(),
        ),
        _ => Query::Fts(
            body["full_text_query"]["string_query"]["query"]
                .as_str()
                .expect("a full-text query")
                .to_string(),
        ),
    }
}

/// A search as Lancet's query code takes it (`None` for a count).
pub fn spec(query: &Query) -> Option<lancet::store::QuerySpec> {
    use lancet::store::{Projection, QuerySpec, VectorQuery};
    let base = QuerySpec {
        k: Some(10),
        projection: Some(Projection::Names(vec!["id".into()])),
        ..Default::default()
    };
    match query {
        Query::Vector(v) => Some(QuerySpec {
            vector: Some(VectorQuery {
                vectors: vec![v.clone()],
                nprobes: Some(8),
                ..Default::default()
            }),
            ..base
        }),
        Query::Fts(word) => Some(QuerySpec {
            fts: Some(FullTextSearchQuery::new(word.clone())),
            ..base
        }),
        Query::Count(_) => None,
    }
}

/// Where the bare service gets the dataset for each read.
pub enum Source {
    /// Opened here once, as the in-process loop opens it.
    Opened(Arc<Dataset>),
    /// The latest state as Lancet's store holds it (its session, object-store wrappers and
    /// consistency check), read per request: bare plus Lancet's way of holding tables.
    Store(Arc<lancet::App>, String),
}

impl Source {
    pub async fn dataset(&self) -> Arc<Dataset> {
        match self {
            Source::Opened(ds) => ds.clone(),
            Source::Store(app, location) => {
                let latest = lancet::store::At {
                    branch: None,
                    version: None,
                };
                app.store.read(location, &latest).await.unwrap()
            }
        }
    }
}

/// The bare service on the table at `location`, opened here.
pub async fn service(location: &str) -> lancet::http::Service {
    let ds = Arc::new(Dataset::open(location).await.unwrap());
    service_on(Source::Opened(ds))
}

/// The bare service reading from `source`.
pub fn service_on(source: Source) -> lancet::http::Service {
    service_with(source, false)
}

/// The bare service reading from `source`; with `lancet_query` a search runs through
/// Lancet's query code (`QuerySpec::stream` with the store's vector cache; needs a
/// `Source::Store`) rather than lance's scanner set up here: the handler's read without the
/// request path, the catalog, the checks or the answer's framing.
pub fn service_with(source: Source, lancet_query: bool) -> lancet::http::Service {
    let source = Arc::new(source);
    tower::util::BoxCloneSyncService::new(tower::service_fn(
        move |request: axum::http::Request<axum::body::Body>| {
            let source = source.clone();
            async move {
                let ds = source.dataset().await;
                let path = request.uri().path().to_string();
                let body = axum::body::to_bytes(request.into_body(), usize::MAX)
                    .await
                    .unwrap();
                let body: Value = serde_json::from_slice(&body).unwrap();
                let query = query(&path, &body);
                let answer = match (&*source, spec(&query)) {
                    (Source::Store(app, _), Some(spec)) if lancet_query => {
                        let stream = spec.stream(&ds, &app.store).await.unwrap();
                        let schema = stream.schema();
                        Answer::Rows(schema, stream.try_collect().await.unwrap())
                    }
                    _ => run(&ds, query).await,
                };
                let bytes = match answer {
                    Answer::Count(n) => n.to_string().into_bytes(),
                    Answer::Rows(schema, batches) => ipc(&schema, &batches),
                };
                Ok::<_, std::convert::Infallible>(axum::response::Response::new(
                    axum::body::Body::from(bytes),
                ))
            }
        },
    ))
}

/// `batches` as an Arrow IPC stream.
fn ipc(schema: &arrow_schema::Schema, batches: &[RecordBatch]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut out, schema).unwrap();
    for b in batches {
        writer.write(b).unwrap();
    }
    writer.finish().unwrap();
    drop(writer);
    out
}
