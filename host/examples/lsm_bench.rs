//! LSM write benchmark (issue 28). Against a real `lancet serve` (release build), on local
//! disk: 20-row upserts (10 updates of existing keys, 10 new keys) into a table of `--rows`
//! rows (20,000 and 1,000,000 by default), from 1 and 8 concurrent clients, through
//!
//! - the LSM path (a table with an LSM write spec: lance's MemWAL shard writers),
//! - the plain path (`merge_insert`: one lance commit per request),
//! - in-process lance (`MergeInsertBuilder` on the same rows, no server: the floor of the
//!   plain path; pylance runs this same Rust code),
//!
//! then the latency of queries while memtables hold 100,000 unflushed rows, and of the same
//! queries after `flush_lsm`.
//!
//! ```sh
//! cargo build --release -p lancet --bin lancet --example lsm_bench
//! $CARGO_TARGET_DIR/release/examples/lsm_bench [--secs 6] [--small 20000] [--large 1000000]
//! ```
//! The server binary is looked up beside the bench's own directory (`../lancet`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "support/rows.rs"]
mod rows;
#[path = "support/served.rs"]
mod served;
use rows::arg;
use served::{Served, client};

use arrow_array::{Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use serde_json::{Value, json};

const KEY: &str = "lsm-bench-key";

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false).with_metadata(
            [(
                "lance-schema:unenforced-primary-key".to_string(),
                "true".to_string(),
            )]
            .into(),
        ),
        Field::new("text", DataType::Utf8, true),
        Field::new("value", DataType::Float64, true),
    ]))
}

fn batch(ids: &[i64], salt: u64) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from_iter_values(
                ids.iter()
                    .map(|i| format!("event {i} from source {}", salt % 97)),
            )),
            Arc::new(Float64Array::from_iter_values(ids.iter().map(|i| {
                ((*i as u64).wrapping_mul(2654435761) ^ salt) as f64 % 1000.0 / 1000.0
            }))),
        ],
    )
    .unwrap()
}

fn ipc(b: &RecordBatch) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &b.schema()).unwrap();
    w.write(b).unwrap();
    w.finish().unwrap();
    drop(w);
    out
}

/// A client's next upsert: 10 existing keys (pseudo-random below `existing`) and 10 new ones
/// from the client's own range.
fn upsert_ids(existing: i64, client: u64, n: u64) -> Vec<i64> {
    let mut x = client.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ n.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let mut ids: Vec<i64> = (0..10)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % existing as u64) as i64
        })
        .collect();
    let fresh = 1_000_000_000 + client as i64 * 100_000_000 + n as i64 * 10;
    ids.extend(fresh..fresh + 10);
    ids.sort();
    ids.dedup();
    ids
}

struct Rate {
    per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    failed: u64,
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// What the clients' tasks did, each answering its acknowledged latencies.
async fn rate(
    tasks: Vec<tokio::task::JoinHandle<Vec<f64>>>,
    done: &AtomicU64,
    failed: &AtomicU64,
) -> Rate {
    let started = Instant::now();
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    let took = started.elapsed().as_secs_f64();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Rate {
        per_sec: done.load(Ordering::Relaxed) as f64 / took,
        p50_ms: pct(&lat, 0.5),
        p99_ms: pct(&lat, 0.99),
        failed: failed.load(Ordering::Relaxed),
    }
}

/// Upserts from `clients` concurrent HTTP clients for `secs`.
async fn http_upserts(
    base: &str,
    table: &str,
    existing: i64,
    clients: u64,
    secs: u64,
    round: u64,
) -> Rate {
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(secs);
    let url = format!(
        "{base}/v1/table/{table}/merge_insert?on=id&when_matched_update_all=true&when_not_matched_insert_all=true"
    );
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (url, done, failed) = (url.clone(), done.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            let http = client(KEY);
            let mut lat = Vec::new();
            let mut n = 0u64;
            while Instant::now() < until {
                let body = ipc(&batch(&upsert_ids(existing, c + round * 64, n), n));
                n += 1;
                let t = Instant::now();
                let r = http
                    .post(&url)
                    .header("content-type", "application/vnd.apache.arrow.stream")
                    .body(body)
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status().is_success() => {
                        let _ = r.bytes().await;
                        lat.push(t.elapsed().as_secs_f64() * 1000.0);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(r) => {
                        let _ = r.bytes().await;
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            lat
        }));
    }
    rate(tasks, &done, &failed).await
}

/// The same upserts by lance in this process, on a dataset of its own.
async fn in_process_upserts(uri: &str, existing: i64, clients: u64, secs: u64, round: u64) -> Rate {
    use lance::dataset::write::merge_insert::{MergeInsertBuilder, WhenMatched, WhenNotMatched};
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (uri, done, failed) = (uri.to_string(), done.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut n = 0u64;
            // A long-lived writer, as a pylance process keeps its dataset open: it checks for
            // the latest version before each write (other writers commit too).
            let mut ds = lance::Dataset::open(&uri).await.unwrap();
            while Instant::now() < until {
                let rows = batch(&upsert_ids(existing, c + round * 64, n), n);
                n += 1;
                let t = Instant::now();
                ds.checkout_latest().await.unwrap();
                let mut b =
                    MergeInsertBuilder::try_new(Arc::new(ds.clone()), vec!["id".to_string()])
                        .unwrap();
                b.when_matched(WhenMatched::UpdateAll)
                    .when_not_matched(WhenNotMatched::InsertAll);
                match b.try_build().unwrap().execute_batches(vec![rows]).await {
                    Ok((next, _)) => {
                        ds = (*next).clone();
                        lat.push(t.elapsed().as_secs_f64() * 1000.0);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            lat
        }));
    }
    rate(tasks, &done, &failed).await
}

async fn post(http: &reqwest::Client, url: String, body: Value) -> Value {
    let r = http.post(url).json(&body).send().await.unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{status}: {v}");
    v
}

async fn post_rows(http: &reqwest::Client, url: String, rows: &RecordBatch) {
    let r = http
        .post(url)
        .header("content-type", "application/vnd.apache.arrow.stream")
        .body(ipc(rows))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap_or_default();
    assert!(status.is_success(), "{status}: {text}");
}

/// A table of `rows` rows through the server (and, for the in-process floor, on disk).
async fn make_table(http: &reqwest::Client, base: &str, name: &str, rows: i64) {
    let chunk = 100_000;
    let mut start = 0;
    while start < rows {
        let end = (start + chunk).min(rows);
        let ids: Vec<i64> = (start..end).collect();
        let op = if start == 0 { "create" } else { "insert" };
        post_rows(
            http,
            format!("{base}/v1/table/{name}/{op}"),
            &batch(&ids, 0),
        )
        .await;
        start = end;
    }
}

/// p50 of `n` runs of a query (ms).
async fn query_p50(http: &reqwest::Client, base: &str, table: &str, body: &Value, n: usize) -> f64 {
    let mut lat = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let r = http
            .post(format!("{base}/v1/table/{table}/query"))
            .json(body)
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success(),
            "{}",
            r.text().await.unwrap_or_default()
        );
        let _ = r.bytes().await;
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    pct(&lat, 0.5)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let secs = arg("--secs", 6) as u64;
    let sizes: Vec<i64> = [
        arg("--small", 20_000) as i64,
        arg("--large", 1_000_000) as i64,
    ]
    .into_iter()
    .filter(|n| *n > 0)
    .collect();
    // `--lsm-only 1`: the LSM path alone (for profiling the server under it).
    let lsm_only = arg("--lsm-only", 0) == 1;
    // `--buckets N`: bucket sharding of the key into N shards (default: one shard).
    let sharding = match arg("--buckets", 0) {
        0 => json!({"mode": "unsharded"}),
        n => json!({"mode": "bucket", "column": "id", "num_buckets": n}),
    };
    let bin = served::server_binary();
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start_with(
        &bin,
        dir.path().join("server").to_str().unwrap(),
        &[],
        &[("LANCET_BOOTSTRAP_KEY", KEY), ("LANCET_UPKEEP", "false")],
    );
    let base = served.base.clone();
    let http = client(KEY);
    println!("lsm_bench: {secs} s per measurement, 20-row upserts (10 updates, 10 new keys)");
    println!("| table rows | path | clients | upserts/s | p50 ms | p99 ms | failed |");
    println!("|---|---|---|---|---|---|---|");
    let mut summary = Vec::new();
    for (round, &rows) in sizes.iter().enumerate() {
        let round = round as u64;
        let (plain, lsm) = (format!("plain{rows}"), format!("lsm{rows}"));
        make_table(&http, &base, &plain, rows).await;
        make_table(&http, &base, &lsm, rows).await;
        let mut writer_config = json!({
            "max_memtable_rows": "1000000",
            // `--durable 0` answers before the WAL entry is stored (to see what the WAL costs).
            "durable_write": (arg("--durable", 1) == 1).to_string(),
        });
        // `--wal-buffer BYTES`: lance's WAL size trigger (a flush whenever that many bytes
        // arrived), to compare with the server's default.
        if let Some(bytes) = std::env::args().skip_while(|a| a != "--wal-buffer").nth(1) {
            writer_config["max_wal_buffer_size"] = json!(bytes);
        }
        post(
            &http,
            format!("{base}/v1/table/{lsm}/set_lsm_write_spec"),
            json!({"sharding": sharding, "writer_config_defaults": writer_config}),
        )
        .await;
        // The in-process floor writes a copy of the same rows, opened by lance directly.
        let local = dir.path().join(format!("local{rows}"));
        let uri = local.to_str().unwrap().to_string();
        {
            let mut start = 0;
            while start < rows {
                let end = (start + 100_000).min(rows);
                let ids: Vec<i64> = (start..end).collect();
                let b = batch(&ids, 0);
                let reader = arrow_array::RecordBatchIterator::new(vec![Ok(b.clone())], b.schema());
                let mode = if start == 0 {
                    lance::dataset::WriteMode::Create
                } else {
                    lance::dataset::WriteMode::Append
                };
                lance::Dataset::write(
                    reader,
                    &uri,
                    Some(lance::dataset::WriteParams {
                        mode,
                        ..Default::default()
                    }),
                )
                .await
                .unwrap();
                start = end;
            }
        }
        for clients in [1u64, 8] {
            let l = http_upserts(&base, &lsm, rows, clients, secs, round * 2 + clients).await;
            if lsm_only {
                println!(
                    "| {rows} | LSM | {clients} | {:.0} | {:.2} | {:.2} | {} |",
                    l.per_sec, l.p50_ms, l.p99_ms, l.failed
                );
                continue;
            }
            let p = http_upserts(&base, &plain, rows, clients, secs, round * 2 + clients).await;
            let f = in_process_upserts(&uri, rows, clients, secs, round * 2 + clients).await;
            for (name, r) in [("LSM", &l), ("plain", &p), ("in-process lance", &f)] {
                println!(
                    "| {rows} | {name} | {clients} | {:.0} | {:.2} | {:.2} | {} |",
                    r.per_sec, r.p50_ms, r.p99_ms, r.failed
                );
            }
            summary.push(format!(
                "{rows} rows, {clients} clients: LSM/plain {:.1}x, plain/in-process {:.2}x",
                l.per_sec / p.per_sec,
                p.per_sec / f.per_sec
            ));
        }
    }
    for s in &summary {
        println!("lsm_bench: {s}");
    }
    if lsm_only {
        return;
    }

    // Queries while memtables hold 100,000 unflushed rows, then after flush_lsm.
    let table = format!("lsm{}", sizes[0]);
    let sizes = [sizes[0]];
    post(
        &http,
        format!("{base}/v1/table/{table}/flush_lsm"),
        json!({}),
    )
    .await;
    post(
        &http,
        format!("{base}/v1/table/{table}/compact_lsm"),
        json!({}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let start = 2_000_000_000i64;
    for chunk in 0..100 {
        let ids: Vec<i64> = (start + chunk * 1000..start + (chunk + 1) * 1000).collect();
        post_rows(
            &http,
            format!("{base}/v1/table/{table}/merge_insert?on=id&when_matched_update_all=true&when_not_matched_insert_all=true"),
            &batch(&ids, 7),
        )
        .await;
    }
    let queries = [
        (
            "point lookup",
            json!({"filter": "id = 2000050005", "k": 10}),
        ),
        (
            "filter + limit 100",
            json!({"filter": "value > 0.5", "k": 100}),
        ),
        (
            "count filter",
            json!({"filter": "value > 0.9", "columns": ["id"], "k": 1000000}),
        ),
    ];
    let mut before = Vec::new();
    for (_, q) in &queries {
        before.push(query_p50(&http, &base, &table, q, 30).await);
    }
    post(
        &http,
        format!("{base}/v1/table/{table}/flush_lsm"),
        json!({}),
    )
    .await;
    println!(
        "| query ({}-row table + 100,000 rows) | p50 ms in memtables | p50 ms after flush_lsm | ratio |",
        sizes[0]
    );
    println!("|---|---|---|---|");
    for ((name, q), b) in queries.iter().zip(before) {
        let a = query_p50(&http, &base, &table, q, 30).await;
        println!("| {name} | {b:.2} | {a:.2} | {:.2} |", b / a);
    }
    drop(served);
}
