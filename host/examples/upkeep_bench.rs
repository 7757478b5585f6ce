//! Upkeep benchmark (issue 16). The same streaming workload on two real `lancet serve`
//! processes, one with background upkeep off and one with it on:
//!
//! 1. a 20k-row table with a vector index (IVF_PQ), a BTREE and a full-text index; p50/p99 of
//!    a count with a predicate, a filtered scan and a vector query;
//! 2. 600 merge_inserts of 20 rows (10 updates of existing rows, 10 new rows);
//! 3. the same queries again: right after the writes (upkeep off), and after upkeep settled
//!    (upkeep on), with the p99 of queries that ran while upkeep jobs were running;
//! 4. fragments, versions and bytes on disk, against a freshly written table of the same rows.
//!
//! ```sh
//! cargo build --release --bin lancet --example upkeep_bench
//! $CARGO_TARGET_DIR/release/examples/upkeep_bench [--rows 20000] [--writes 600] [--samples 60]
//! ```

#[path = "support/rows.rs"]
mod rows;
#[path = "support/served.rs"]
mod served;
use rows::{arg, batch, vector};
use served::{Served, client};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arrow_array::Int64Array;
use serde_json::{Value, json};

const KEY: &str = "upkeep-bench-key";

struct Bench {
    c: reqwest::Client,
    base: String,
}

impl Bench {
    async fn post(&self, path: &str, body: Value) -> Value {
        let r = self
            .c
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        assert!(status.is_success(), "{path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    async fn arrow(&self, path: &str, body: Vec<u8>) {
        let r = self
            .c
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/vnd.apache.arrow.stream")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        assert!(
            status.is_success(),
            "{path}: {status} {}",
            r.text().await.unwrap()
        );
    }

    async fn setup(&self, table: &str, rows: i64) {
        let ids: Vec<i64> = (0..rows).collect();
        self.arrow(&format!("/v1/table/{table}/create"), batch(&ids, 0))
            .await;
        for body in [
            json!({"column": "vec", "index_type": "IVF_PQ", "num_partitions": 16, "num_sub_vectors": 8, "distance_type": "l2"}),
            json!({"column": "id", "index_type": "BTREE"}),
            json!({"column": "text", "index_type": "FTS"}),
        ] {
            self.post(&format!("/v1/table/{table}/create_index"), body)
                .await;
        }
    }

    /// One query of kind `i % 3`; its latency in ms.
    async fn query(&self, table: &str, i: usize) -> f64 {
        let start = Instant::now();
        let (path, body) = match i % 3 {
            0 => (
                "count_rows",
                json!({"predicate": format!("category = {} AND id > 1000", i % 10)}),
            ),
            1 => {
                let lo = (i as i64 * 997) % 19_000;
                (
                    "query",
                    json!({"filter": format!("id >= {lo} AND id < {}", lo + 50), "k": 100, "columns": ["id", "text"]}),
                )
            }
            _ => (
                "query",
                json!({"vector": vector(i as i64, 99), "k": 10, "columns": ["id"], "nprobes": 4}),
            ),
        };
        let r = self
            .c
            .post(format!("{}/v1/table/{table}/{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
        r.bytes().await.unwrap();
        start.elapsed().as_secs_f64() * 1e3
    }

    /// p50/p99 per query kind (count, filtered scan, vector).
    async fn measure(&self, table: &str, samples: usize) -> [(f64, f64); 3] {
        let mut ms: [Vec<f64>; 3] = Default::default();
        for i in 0..samples * 3 {
            ms[i % 3].push(self.query(table, i).await);
        }
        ms.map(|mut v| {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            (percentile(&v, 0.5), percentile(&v, 0.99))
        })
    }

    /// p50/p99 per query kind for each table, their queries interleaved.
    async fn measure_interleaved(&self, tables: [&str; 3], samples: usize) -> [[(f64, f64); 3]; 3] {
        let mut ms: [[Vec<f64>; 3]; 3] = Default::default();
        for i in 0..samples * 3 {
            for (t, table) in tables.iter().enumerate() {
                ms[t][i % 3].push(self.query(table, i).await);
            }
        }
        ms.map(|per_kind| {
            per_kind.map(|mut v| {
                v.sort_by(|a, b| a.partial_cmp(b).unwrap());
                (percentile(&v, 0.5), percentile(&v, 0.99))
            })
        })
    }

    /// 600 merge_inserts of 20 rows: 10 updates of existing rows, 10 new rows.
    async fn writes(&self, table: &str, rows: i64, writes: usize) -> f64 {
        let start = Instant::now();
        for w in 0..writes as i64 {
            let mut ids: Vec<i64> = (0..10).map(|k| (w * 131 + k * 1999) % rows).collect();
            ids.sort();
            ids.dedup();
            ids.extend((0..10).map(|k| rows + w * 10 + k));
            self.arrow(
                &format!("/v1/table/{table}/merge_insert?on=id&when_matched_update_all=true&when_not_matched_insert_all=true"),
                batch(&ids, w + 1),
            )
            .await;
        }
        writes as f64 / start.elapsed().as_secs_f64()
    }

    async fn shape(&self, table: &str) -> (u64, usize, u64) {
        let d = self
            .post(&format!("/v1/table/{table}/describe"), json!({}))
            .await;
        let v = self
            .post(&format!("/v1/table/{table}/version/list"), json!({}))
            .await;
        let idx = self
            .post(&format!("/v1/table/{table}/index/list"), json!({}))
            .await;
        let unindexed = idx["indexes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["num_unindexed_rows"].as_u64().unwrap())
            .sum();
        (
            d["stats"]["num_fragments"].as_u64().unwrap(),
            v["versions"].as_array().unwrap().len(),
            unindexed,
        )
    }

    async fn upkeep_running(&self) -> bool {
        let j = self
            .post("/v1/jobs/list", json!({"job_state": "IN_PROGRESS"}))
            .await;
        !j["jobs"].as_array().unwrap().is_empty()
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn dir_bytes(path: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// The bytes of table `name` of tenant `default` (the catalog names its directory
/// `<hash>_<name>`).
fn table_bytes(root: &std::path::Path, name: &str) -> u64 {
    let tenant = root.join("tenants/default");
    let suffix = format!("_{name}");
    std::fs::read_dir(&tenant)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(&suffix))
                .map(|e| dir_bytes(&e.path()))
                .sum()
        })
        .unwrap_or(0)
}

fn print_queries(label: &str, q: &[(f64, f64); 3]) {
    println!(
        "{label:<34} count p50 {:6.2} p99 {:6.2} | scan p50 {:6.2} p99 {:6.2} | vector p50 {:6.2} p99 {:6.2} ms",
        q[0].0, q[0].1, q[1].0, q[1].1, q[2].0, q[2].1
    );
}

fn ratios(label: &str, before: &[(f64, f64); 3], after: &[(f64, f64); 3]) {
    println!(
        "{label:<34} count {:5.2}x  scan {:5.2}x  vector {:5.2}x  (p50 ratio; target <= 1.2x)",
        after[0].0 / before[0].0,
        after[1].0 / before[1].0,
        after[2].0 / before[2].0
    );
}

#[tokio::main]
async fn main() {
    // SAFETY: set before any thread of ours reads the environment.
    unsafe { std::env::set_var("LANCET_BOOTSTRAP_KEY", KEY) };
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("lancet");
    assert!(bin.exists(), "build the server first: {}", bin.display());
    let rows = arg("--rows", 20_000) as i64;
    let writes = arg("--writes", 600);
    let samples = arg("--samples", 60);
    println!("== {rows} rows, {writes} merge_inserts of 20 rows, {samples} samples per query kind");

    // Upkeep off: how the workload degrades a table nobody keeps up.
    let off_dir = tempfile::tempdir().unwrap();
    let off = Served::start(&bin, off_dir.path(), &["--upkeep", "false"]);
    let b = Bench {
        c: client(KEY),
        base: off.base.clone(),
    };
    b.setup("t", rows).await;
    b.measure("t", 5).await;
    let before_off = b.measure("t", samples).await;
    let rate = b.writes("t", rows, writes).await;
    let after_off = b.measure("t", samples).await;
    let (frags, versions, unindexed) = b.shape("t").await;
    println!("-- upkeep off");
    print_queries("before writes", &before_off);
    print_queries("after writes", &after_off);
    ratios("after / before", &before_off, &after_off);
    println!(
        "merge_insert {rate:.1}/s; {frags} fragments, {versions} versions, {unindexed} unindexed rows (all indexes), {:.1} MiB",
        table_bytes(off_dir.path(), "t") as f64 / 1048576.0
    );
    drop(off);

    // Upkeep on, with a short retention so that cleanup is seen within the run
    // (`--retention-secs 3600`: the server's default, every version of the run kept).
    // How long the end waits for the retention window to pass (not at all for a long one).
    let keep = match arg("--retention-secs", 5) {
        s if s <= 50 => Duration::from_secs(60),
        _ => Duration::ZERO,
    };
    let retention = format!("{}s", arg("--retention-secs", 5));
    let on_dir = tempfile::tempdir().unwrap();
    let on = Served::start(
        &bin,
        on_dir.path(),
        &[
            "--upkeep-interval",
            "1s",
            "--upkeep-retention",
            &retention,
            "--upkeep-cleanup-interval",
            "5s",
            "--upkeep-quiet-after",
            "3s",
        ],
    );
    let b = Arc::new(Bench {
        c: client(KEY),
        base: on.base.clone(),
    });
    b.setup("t", rows).await;
    // The same table, never written: measured beside `t` at the end, so the comparison
    // is not skewed by the machine's speed drifting during the run.
    b.setup("base", rows).await;
    b.measure("t", 5).await;
    let before = b.measure("t", samples).await;
    let writes_start = Instant::now();
    let rate = b.writes("t", rows, writes).await;
    let writes_secs = writes_start.elapsed().as_secs_f64();
    // Queries keep running while upkeep catches up; those that ran while an upkeep job was in
    // progress are counted apart.
    let settle_start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (b, stop) = (b.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut during, mut quiet) = (Vec::new(), Vec::new());
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let running = b.upkeep_running().await;
                let ms = b.query("t", i).await;
                if running && b.upkeep_running().await {
                    during.push(ms);
                } else {
                    quiet.push(ms);
                }
                i += 1;
            }
            (during, quiet)
        })
    };
    let settled = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (frags, versions, unindexed) = b.shape("t").await;
        // Settled: no job running, the quiet table compacted, every row indexed, versions
        // older than the retention cleaned (a long retention keeps them all).
        let cleaned = versions <= 4 || keep.is_zero();
        if !b.upkeep_running().await && frags <= 2 && unindexed == 0 && cleaned {
            break settle_start.elapsed().as_secs_f64();
        }
        assert!(
            settle_start.elapsed() < Duration::from_secs(600),
            "upkeep did not settle: {frags} fragments, {versions} versions, {unindexed} unindexed"
        );
    };
    stop.store(true, Ordering::Relaxed);
    let (mut during, _quiet) = sampler.await.unwrap();
    let after = b.measure("t", samples).await;
    let (frags, versions, unindexed) = b.shape("t").await;
    let jobs = b.post("/v1/jobs/list", json!({})).await;
    let jobs = jobs["jobs"].as_array().unwrap();
    let job_secs: f64 = jobs
        .iter()
        .filter_map(|j| Some((j["finish_ms"].as_i64()? - j["creation_ms"].as_i64()?) as f64 / 1e3))
        .sum();
    println!("-- upkeep on (interval 1 s, retention {retention}, quiet after 3 s)");
    print_queries("before writes", &before);
    print_queries("after upkeep settled", &after);
    ratios("after / before", &before, &after);
    during.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if !during.is_empty() {
        println!(
            "queries while upkeep ran after the writes: {} (all kinds) p50 {:.2} p99 {:.2} ms",
            during.len(),
            percentile(&during, 0.5),
            percentile(&during, 0.99)
        );
    }
    println!(
        "merge_insert {rate:.1}/s over {writes_secs:.1} s with upkeep running; settled {settled:.1} s after the last write"
    );
    println!(
        "{} upkeep jobs, {job_secs:.1} s of job time in all (each waits for its turn: concurrency 1)",
        jobs.len()
    );
    let kept = table_bytes(on_dir.path(), "t");
    // A freshly written table holding the same rows, with the same indexes.
    let all =
        b.c.post(format!("{}/v1/table/t/query", b.base))
            .json(&json!({"k": 10_000_000, "columns": ["id"]}))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
    let ids: Vec<i64> =
        arrow_ipc::reader::FileReader::try_new(std::io::Cursor::new(all.to_vec()), None)
            .map(|r| {
                r.flat_map(|b| {
                    let b = b.unwrap();
                    let col = b
                        .column(0)
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .unwrap()
                        .clone();
                    col.values().to_vec()
                })
                .collect()
            })
            .unwrap_or_default();
    b.setup_fresh(&ids).await;
    b.measure("fresh", 5).await;
    let fresh_q = b.measure("fresh", samples).await;
    print_queries("fresh table of the same rows", &fresh_q);
    ratios("after upkeep / fresh table", &fresh_q, &after);
    // Interleaved: one query on each table in turn, so all three see the same machine.
    let [base_i, t_i, fresh_i] = b.measure_interleaved(["base", "t", "fresh"], samples).await;
    println!("-- interleaved (one query per table in turn)");
    print_queries("base (the 20k rows before writes)", &base_i);
    print_queries("t after upkeep settled", &t_i);
    print_queries("fresh (t's rows written at once)", &fresh_i);
    ratios("t / base", &base_i, &t_i);
    ratios("t / fresh", &fresh_i, &t_i);
    let fresh = table_bytes(on_dir.path(), "fresh");
    println!(
        "{frags} fragments, {versions} versions, {unindexed} unindexed rows; {:.1} MiB on disk vs {:.1} MiB for a fresh table of the same {} rows ({:.2}x; target <= 2x)",
        kept as f64 / 1048576.0,
        fresh as f64 / 1048576.0,
        ids.len(),
        kept as f64 / fresh.max(1) as f64
    );
    println!("  kept by part:  {}", parts(on_dir.path(), "t"));
    println!("  fresh by part: {}", parts(on_dir.path(), "fresh"));
    // Once the versions kept for the retention window age out, the next cleanup leaves one.
    let waited = Instant::now();
    while b.shape("t").await.1 > 1 && waited.elapsed() < keep {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let kept = table_bytes(on_dir.path(), "t");
    println!(
        "after the retention window: {} versions, {:.1} MiB ({:.2}x the fresh table), {:.1} s later",
        b.shape("t").await.1,
        kept as f64 / 1048576.0,
        kept as f64 / fresh.max(1) as f64,
        waited.elapsed().as_secs_f64()
    );
}

/// Bytes of a table's top-level parts (data files, indexes, manifests, ...).
fn parts(root: &std::path::Path, name: &str) -> String {
    let tenant = root.join("tenants/default");
    let suffix = format!("_{name}");
    let Some(dir) = std::fs::read_dir(&tenant).ok().and_then(|entries| {
        entries
            .flatten()
            .find(|e| e.file_name().to_string_lossy().ends_with(&suffix))
    }) else {
        return String::new();
    };
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir.path())
        .into_iter()
        .flatten()
        .flatten()
    {
        let bytes = if e.path().is_dir() {
            dir_bytes(&e.path())
        } else {
            e.metadata().map_or(0, |m| m.len())
        };
        out.push(format!(
            "{} {:.2} MiB",
            e.file_name().to_string_lossy(),
            bytes as f64 / 1048576.0
        ));
    }
    out.sort();
    out.join(", ")
}

impl Bench {
    /// Table `fresh`: the same ids written at once (values as of their last write differ
    /// only in content, not in size), with the same indexes.
    async fn setup_fresh(&self, ids: &[i64]) {
        self.arrow("/v1/table/fresh/create", batch(ids, 1)).await;
        for body in [
            json!({"column": "vec", "index_type": "IVF_PQ", "num_partitions": 16, "num_sub_vectors": 8, "distance_type": "l2"}),
            json!({"column": "id", "index_type": "BTREE"}),
            json!({"column": "text", "index_type": "FTS"}),
        ] {
            self.post("/v1/table/fresh/create_index", body).await;
        }
    }
}
