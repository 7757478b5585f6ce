//! Model and helpers of the crash test (`crash.rs`): the tables' schemas and expected
//! states, the operations a round may run, and how the test reads the server's state back.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use base64::Engine;
use serde_json::{Value, json};

use crate::common::*;
use crate::udf::plugin;

/// id -> (op, text) of table `k`.
pub(crate) type KRows = BTreeMap<i64, (i64, String)>;

pub(crate) const K_BASE: i64 = 200;
pub(crate) const A_ROWS: i64 = 40;
pub(crate) const T_ROWS: i64 = 30;
pub(crate) const P_ROWS: i64 = 5;
/// Rows added to `j` before each backfill job (two fragments).
pub(crate) const J_ADD: i64 = 40;
pub(crate) const INDEXES: [(&str, &str, &str); 3] = [
    ("k_id", "id", "BTREE"),
    ("k_op", "op", "BITMAP"),
    ("k_text", "text", "INVERTED"),
];

pub(crate) fn k_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("op", DataType::Int64, true),
        Field::new("text", DataType::Utf8, true),
    ]))
}

pub(crate) fn k_batch(rows: &[(i64, i64, String)]) -> RecordBatch {
    RecordBatch::try_new(
        k_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.2))),
        ],
    )
    .unwrap()
}

pub(crate) fn int_column(b: &RecordBatch, name: &str) -> Vec<Option<i64>> {
    let c = b.column_by_name(name).unwrap();
    let c = c.as_any().downcast_ref::<Int64Array>().unwrap();
    (0..c.len())
        .map(|i| c.is_valid(i).then(|| c.value(i)))
        .collect()
}

/// A request that may be cut off by the kill: None when no answer came.
pub(crate) async fn try_send(r: reqwest::RequestBuilder) -> Option<(u16, Value)> {
    let r = r.send().await.ok()?;
    let status = r.status().as_u16();
    let text = r.text().await.ok()?;
    Some((
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

pub(crate) fn post_json(h: &Handle, path: &str, body: Value) -> reqwest::RequestBuilder {
    h.client.post(h.url(path)).json(&body)
}

pub(crate) fn post_arrow(h: &Handle, path: &str, batch: &RecordBatch) -> reqwest::RequestBuilder {
    h.client
        .post(h.url(path))
        .header("content-type", "application/vnd.apache.arrow.stream")
        .body(ipc_stream(batch))
}

#[derive(Debug, Clone)]
pub(crate) enum KOp {
    Insert { op: i64, ids: Vec<i64> },
    Merge { op: i64, keys: Vec<i64> },
    Update { op: i64, a: i64, b: i64 },
    Delete { a: i64, b: i64 },
    Restore { version: u64 },
    Index { which: usize },
}

impl KOp {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            KOp::Insert { .. } => "insert",
            KOp::Merge { .. } => "merge_insert",
            KOp::Update { .. } => "update",
            KOp::Delete { .. } => "delete",
            KOp::Restore { .. } => "restore",
            KOp::Index { .. } => "create_index",
        }
    }

    pub(crate) fn request(&self, h: &Handle) -> reqwest::RequestBuilder {
        match self {
            KOp::Insert { op, ids } => {
                let rows: Vec<_> = ids.iter().map(|i| (*i, *op, format!("i{op}"))).collect();
                post_arrow(h, "/v1/table/k/insert", &k_batch(&rows))
            }
            KOp::Merge { op, keys } => {
                let rows: Vec<_> = keys.iter().map(|i| (*i, *op, format!("m{op}"))).collect();
                post_arrow(
                    h,
                    "/v1/table/k/merge_insert?on=id&when_matched_update_all=true&when_not_matched_insert_all=true",
                    &k_batch(&rows),
                )
            }
            KOp::Update { op, a, b } => post_json(
                h,
                "/v1/table/k/update",
                json!({"updates": [["op", op.to_string()], ["text", format!("'u{op}'")]],
                       "predicate": format!("id >= {a} AND id < {b}")}),
            ),
            KOp::Delete { a, b } => post_json(
                h,
                "/v1/table/k/delete",
                json!({"predicate": format!("id >= {a} AND id < {b}")}),
            ),
            KOp::Restore { version } => {
                post_json(h, "/v1/table/k/restore", json!({"version": version}))
            }
            KOp::Index { which } => {
                let (name, column, kind) = INDEXES[*which];
                post_json(
                    h,
                    "/v1/table/k/create_index",
                    json!({"name": name, "column": column, "index_type": kind, "replace": true}),
                )
            }
        }
    }

    /// The rows of `k` once this operation is applied to `before`.
    pub(crate) fn after(&self, before: &KRows, snapshots: &BTreeMap<u64, KRows>) -> KRows {
        let mut rows = before.clone();
        match self {
            KOp::Insert { op, ids } => {
                for i in ids {
                    rows.insert(*i, (*op, format!("i{op}")));
                }
            }
            KOp::Merge { op, keys } => {
                for i in keys {
                    rows.insert(*i, (*op, format!("m{op}")));
                }
            }
            KOp::Update { op, a, b } => {
                for (_, v) in rows.range_mut(*a..*b) {
                    *v = (*op, format!("u{op}"));
                }
            }
            KOp::Delete { a, b } => {
                let gone: Vec<i64> = rows.range(*a..*b).map(|(k, _)| *k).collect();
                for k in gone {
                    rows.remove(&k);
                }
            }
            KOp::Restore { version } => rows = snapshots[version].clone(),
            KOp::Index { .. } => {}
        }
        rows
    }
}

#[derive(Debug, Clone)]
pub(crate) enum AOp {
    Add(i64),
    Drop(i64),
}

impl AOp {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            AOp::Add(_) => "add_columns",
            AOp::Drop(_) => "drop_columns",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct BatchOp {
    pub(crate) declares: [String; 2],
    pub(crate) deregister: Vec<String>,
    /// A new version of `p` (staged manifest path) and the oldest version to delete.
    pub(crate) version: Option<(String, u64, Option<u64>)>,
}

#[derive(Debug, Clone)]
pub(crate) enum TOp {
    Create(String),
    Drop(String),
    Rename(String, String),
}

impl TOp {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            TOp::Create(_) => "create",
            TOp::Drop(_) => "drop",
            TOp::Rename(..) => "rename",
        }
    }
}

pub(crate) struct Job {
    pub(crate) id: String,
    pub(crate) j_version: u64,
    pub(crate) selected: i64,
}

/// What the tables must hold: built from acknowledged operations and, for operations the
/// kill cut off, from what the restarted server shows (checked to be whole or nothing).
pub(crate) struct Model {
    pub(crate) k: KRows,
    pub(crate) k_version: u64,
    pub(crate) k_snapshots: BTreeMap<u64, KRows>,
    pub(crate) a_cols: BTreeSet<i64>,
    pub(crate) a_version: u64,
    pub(crate) tables: BTreeSet<String>,
    pub(crate) retry_create: Vec<String>,
    pub(crate) declared: Vec<String>,
    pub(crate) p_versions: BTreeSet<u64>,
    pub(crate) job: Option<Job>,
    pub(crate) j_rows: i64,
    pub(crate) next_op: i64,
    pub(crate) next_id: i64,
}

#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) launched: u64,
    pub(crate) acked: u64,
    pub(crate) cut_applied: u64,
    pub(crate) cut_not_applied: u64,
    pub(crate) refused: u64,
}

#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) kills: u64,
    pub(crate) ops: BTreeMap<&'static str, Tally>,
    pub(crate) intents_rolled_back: u64,
    pub(crate) intents_rolled_forward: u64,
    pub(crate) kills_during_backfill: u64,
    pub(crate) backfills_done: u64,
    /// Usual duration of each kind of operation (ms, a moving average of acknowledged ones).
    pub(crate) latency: BTreeMap<&'static str, f64>,
}

pub(crate) type Timed = tokio::task::JoinHandle<(Option<(u16, Value)>, Duration)>;

/// Sends a request, timing it.
pub(crate) async fn timed(r: reqwest::RequestBuilder) -> (Option<(u16, Value)>, Duration) {
    let t = Instant::now();
    let out = try_send(r).await;
    (out, t.elapsed())
}

impl Stats {
    /// How long after the requests went out the kill may come: 1.3 x the operation's usual
    /// duration, so most kills land while it runs.
    pub(crate) fn window_ms(&self, kind: &str) -> u64 {
        let usual = self.latency.get(kind).copied().unwrap_or(150.0);
        (usual * 1.3).max(5.0) as u64
    }

    /// The answer of a request the kill may have cut off; learns the usual duration.
    pub(crate) async fn settle(
        &mut self,
        kind: &'static str,
        task: Option<Timed>,
    ) -> Option<(u16, Value)> {
        let (out, took) = task?.await.unwrap();
        let ms = took.as_secs_f64() * 1000.0;
        let e = self.latency.entry(kind).or_insert(ms);
        if out.is_some() {
            *e = 0.7 * *e + 0.3 * ms;
        } else {
            // Cut off: it would have taken longer than that (else the window only shrinks).
            *e = e.max(ms * 1.2);
        }
        out
    }

    /// Records an operation's fate: `applied` is what the restarted server shows.
    pub(crate) fn record(
        &mut self,
        kind: &'static str,
        outcome: &Option<(u16, Value)>,
        applied: bool,
    ) {
        let t = self.ops.entry(kind).or_default();
        t.launched += 1;
        match outcome {
            Some((200, _)) => {
                assert!(applied, "acknowledged {kind} is missing after the restart");
                t.acked += 1;
            }
            Some((status, body)) => {
                assert!(
                    *status < 500,
                    "{kind} answered {status} while the server ran: {body}"
                );
                assert!(!applied, "{kind} refused with {status} but applied: {body}");
                t.refused += 1;
            }
            None if applied => t.cut_applied += 1,
            None => t.cut_not_applied += 1,
        }
    }
}

pub(crate) fn virtual_dbl(spin: &str) -> Value {
    let wasm = plugin("misbehave");
    let config = BTreeMap::from([("spin".to_string(), spin.to_string())]);
    let packaged = lancet_udf::package(&wasm, "slow_double", config).unwrap();
    json!({
        "input_columns": ["id"],
        "udf": base64::engine::general_purpose::STANDARD.encode(&wasm),
        "udf_name": "slow_double",
        "manifest": packaged.manifest_text,
        "manifest_checksum": packaged.manifest_checksum,
        "auto_backfill": false,
    })
}

pub(crate) async fn k_rows(s: &Handle) -> KRows {
    let got = s
        .query(
            "k",
            json!({"columns": ["id", "op", "text"], "limit": 10_000_000}),
        )
        .await;
    let mut rows = KRows::new();
    for b in &got {
        let id = int_column(b, "id");
        let op = int_column(b, "op");
        let text = strings(std::slice::from_ref(b), "text");
        for i in 0..b.num_rows() {
            let prev = rows.insert(id[i].unwrap(), (op[i].unwrap(), text[i].clone().unwrap()));
            assert!(prev.is_none(), "k holds id {:?} twice", id[i]);
        }
    }
    rows
}

pub(crate) async fn exists(s: &Handle, table: &str) -> bool {
    let (st, body) = s
        .post(&format!("/v1/table/{table}/exists"), json!({}))
        .await;
    assert!(st == 200 || st == 404, "exists {table}: {st} {body}");
    st == 200
}

/// The versions a table's `_versions` directory holds (what create_table_version and
/// delete_table_versions change). Read from the files: the test stages copies of older
/// manifests, whose contents name the older version.
pub(crate) async fn versions(s: &Handle, table: &str) -> BTreeSet<u64> {
    let dir = table_dir(s, table).await.join("_versions");
    std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            let n: u64 = name.strip_suffix(".manifest")?.parse().ok()?;
            // V2 names count down from u64::MAX; V1 names are the version.
            Some(if name.len() == 29 { u64::MAX - n } else { n })
        })
        .collect()
}

pub(crate) async fn index_names(s: &Handle) -> BTreeSet<String> {
    let v = s.ok("/v1/table/k/index/list", json!({})).await;
    v["indexes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["index_name"].as_str().unwrap().to_string())
        .collect()
}

/// Opens a table the way a client would: describe, count, a small query.
pub(crate) async fn opens(s: &Handle, table: &str) -> u64 {
    let d = s
        .ok(&format!("/v1/table/{table}/describe"), json!({}))
        .await;
    assert_eq!(d["is_only_declared"], false, "{table}: {d}");
    let n = s.count(table, json!({})).await;
    let rows = s.query(table, json!({"k": 3})).await;
    let got: usize = rows.iter().map(|b| b.num_rows()).sum();
    assert_eq!(got as u64, n.min(3), "{table}: a 3-row query");
    n
}

pub(crate) fn intents_dir(data: &std::path::Path) -> std::path::PathBuf {
    data.join("tenants/default/_batch_intents")
}

/// The intent records in the directory: (intents, deletion markers).
pub(crate) fn intent_files(data: &std::path::Path) -> (usize, usize) {
    let Ok(dir) = std::fs::read_dir(intents_dir(data)) else {
        return (0, 0);
    };
    let names: Vec<String> = dir
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let json = names.iter().filter(|n| n.ends_with(".json")).count();
    let marks = names.iter().filter(|n| n.ends_with(".deleting")).count();
    (json, marks)
}

/// The intents left in the directory that name `needle` (with a deletion marker or not).
/// A marker whose intent is already removed counts when `orphans` (only batch-commit's
/// deletions write markers).
pub(crate) fn intents_of(data: &std::path::Path, needle: &str, orphans: bool) -> (usize, usize) {
    let Ok(dir) = std::fs::read_dir(intents_dir(data)) else {
        return (0, 0);
    };
    let names: Vec<String> = dir
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mine = |n: &str| {
        std::fs::read_to_string(intents_dir(data).join(n)).is_ok_and(|t| t.contains(needle))
    };
    let intents = names
        .iter()
        .filter(|n| n.ends_with(".json") && mine(n))
        .count();
    let marks = names
        .iter()
        .filter_map(|n| n.strip_suffix(".deleting"))
        .filter(|i| mine(i) || (orphans && !names.iter().any(|n| n == i)))
        .count();
    (intents, marks)
}

/// The intent records' names and contents (for failure messages).
pub(crate) fn intent_dump(data: &std::path::Path) -> String {
    let Ok(dir) = std::fs::read_dir(intents_dir(data)) else {
        return String::new();
    };
    dir.map(|e| {
        let p = e.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        format!("{}: {text}\n", p.file_name().unwrap().to_string_lossy())
    })
    .collect()
}

/// The local path of a table's directory.
pub(crate) async fn table_dir(s: &Handle, table: &str) -> std::path::PathBuf {
    let d = s
        .ok(&format!("/v1/table/{table}/describe"), json!({}))
        .await;
    let loc = d["location"].as_str().unwrap();
    std::path::PathBuf::from(loc.strip_prefix("file://").unwrap_or(loc))
}

/// The manifest file of `version` of the table at `dir` (either naming scheme).
pub(crate) fn manifest_file(dir: &std::path::Path, version: u64) -> std::path::PathBuf {
    let v2 = dir
        .join("_versions")
        .join(format!("{:020}.manifest", u64::MAX - version));
    if v2.exists() {
        return v2;
    }
    dir.join("_versions").join(format!("{version}.manifest"))
}

pub(crate) async fn setup(s: &Handle) -> Model {
    let base: Vec<_> = (0..K_BASE).map(|i| (i, 0, "base".to_string())).collect();
    let (st, b) = s.post_arrow("/v1/table/k/create", &k_batch(&base)).await;
    assert_eq!(st, 200, "{b}");
    s.create_table("a", A_ROWS).await;
    s.create_table("p", P_ROWS).await;
    s.create_table("j", J_ADD).await;
    s.ok(
        "/v1/table/j/add_columns",
        json!({"new_columns": [{"name": "dbl", "virtual_column": virtual_dbl(&spin())}]}),
    )
    .await;
    let k = k_rows(s).await;
    let k_version = s.version("k").await;
    Model {
        k_snapshots: BTreeMap::from([(k_version, k.clone())]),
        k,
        k_version,
        a_cols: BTreeSet::new(),
        a_version: s.version("a").await,
        tables: BTreeSet::new(),
        retry_create: Vec::new(),
        declared: Vec::new(),
        p_versions: versions(s, "p").await,
        job: None,
        j_rows: J_ADD,
        next_op: 1,
        next_id: 1_000_000,
    }
}

/// Iterations of the UDF's busy loop per row: a job of J_ADD rows spans a few rounds.
pub(crate) fn spin() -> String {
    std::env::var("LANCET_CRASH_SPIN").unwrap_or_else(|_| "20000000".into())
}
