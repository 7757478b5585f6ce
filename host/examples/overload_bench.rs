//! Overload benchmark (issue 15, point 3). Two measurements against a real `lancet serve`:
//!
//! 1. **Tenant isolation**: a quiet tenant's request latency (p50/p99 of count_rows and a
//!    filtered query, one at a time) alone, then while another tenant floods the server from
//!    many connections (counts with a scanning predicate: costly for the server, cheap for the
//!    bench's own CPU; each retrying a refused request after 50 ms, as a client honouring
//!    `Retry-After` loosely would). Prints the p99 ratio and what the flood got (served, 503).
//! 2. **Body memory**: many clients sending large bodies at once, with and without the
//!    body-memory budget; prints the server's peak RSS and the answers.
//!
//! ```sh
//! cargo build --release --bin lancet --example overload_bench
//! $CARGO_TARGET_DIR/release/examples/overload_bench [--requests 400] [--flood 64] [--bodies 48]
//!     [--after-quiet N]
//! ```
//! The server binary is looked up beside the bench's own directory (`../lancet`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[path = "support/served.rs"]
mod served;
use served::{Served, client};

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use serde_json::json;

fn rows(n: i64) -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("text", DataType::Utf8, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..n)),
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("row {i} of the bench table")),
            )),
        ],
    )
    .unwrap();
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &schema).unwrap();
    w.write(&batch).unwrap();
    w.finish().unwrap();
    drop(w);
    out
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// One quiet request: alternately a count with a predicate and a small filtered query.
async fn quiet_request(c: &reqwest::Client, base: &str, i: usize) -> Duration {
    let start = Instant::now();
    let (path, body) = if i.is_multiple_of(2) {
        ("count_rows", json!({"predicate": "id > 100"}))
    } else {
        (
            "query",
            json!({"filter": "id < 50", "k": 10, "columns": ["id", "text"]}),
        )
    };
    let r = c
        .post(format!("{base}/v1/table/t/{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_success(),
        "quiet request failed: {}",
        r.status()
    );
    r.bytes().await.unwrap();
    start.elapsed()
}

async fn quiet_run(c: &reqwest::Client, base: &str, n: usize) -> (f64, f64) {
    let mut ms: Vec<f64> = Vec::with_capacity(n);
    for i in 0..n {
        ms.push(quiet_request(c, base, i).await.as_secs_f64() * 1e3);
    }
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (percentile(&ms, 0.5), percentile(&ms, 0.99))
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(default)
}

async fn isolation(bin: &std::path::Path, requests: usize, flood: usize) {
    let dir = tempfile::tempdir().unwrap();
    let auth_path = dir.path().join("_auth/auth.toml");
    let mut auth = lancet::auth::AuthFile::default();
    let (quiet_key, _) = auth
        .create_key("quiet", lancet::auth::Role::Write, vec![], "bench")
        .unwrap();
    let (flood_key, _) = auth
        .create_key("flood", lancet::auth::Role::Write, vec![], "bench")
        .unwrap();
    auth.save(&auth_path).unwrap();
    let server = Served::start(bin, dir.path(), &[]);
    let base = server.base.clone();
    let (quiet, flooder) = (client(&quiet_key), client(&flood_key));
    for c in [&quiet, &flooder] {
        let r = c
            .post(format!("{base}/v1/table/t/create"))
            .header("content-type", "application/vnd.apache.arrow.stream")
            .body(rows(20_000))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    }
    // Warm both tables' caches.
    quiet_run(&quiet, &base, 20).await;
    quiet_run(&flooder, &base, 20).await;

    let (p50, p99) = quiet_run(&quiet, &base, requests).await;
    println!("quiet tenant alone:        p50 {p50:7.2} ms   p99 {p99:7.2} ms");

    let stop = Arc::new(AtomicBool::new(false));
    let (served, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let tasks: Vec<_> = (0..flood)
        .map(|i| {
            let (c, base, stop) = (flooder.clone(), base.clone(), stop.clone());
            let (served, refused) = (served.clone(), refused.clone());
            tokio::spawn(async move {
                // Costly for the server (a scan matching text), cheap for this client (one
                // number back), so the client's own CPU use disturbs the figures little.
                let body = json!({"predicate": format!("text LIKE '%{} of%'", i % 10)});
                while !stop.load(Ordering::Relaxed) {
                    let r = c
                        .post(format!("{base}/v1/table/t/count_rows"))
                        .json(&body)
                        .send()
                        .await;
                    match r {
                        Ok(r) if r.status() == 503 => {
                            refused.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Ok(r) => {
                            let _ = r.bytes().await;
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let start = Instant::now();
    let (f50, f99) = quiet_run(&quiet, &base, requests).await;
    let secs = start.elapsed().as_secs_f64();
    // `--after-quiet N`: N quiet requests more, each after 1.5 s of quiet, so the flood is a
    // tenant alone and runs beyond the run slots when each comes (`--max-running-alone`).
    let spells = arg("--after-quiet", 0);
    let mut after: Vec<f64> = Vec::with_capacity(spells);
    for i in 0..spells {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        after.push(quiet_request(&quiet, &base, i).await.as_secs_f64() * 1e3);
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    println!("quiet tenant under flood:  p50 {f50:7.2} ms   p99 {f99:7.2} ms");
    println!(
        "flood ({flood} connections, {secs:.1} s): {} served ({:.0}/s), {} refused with 503",
        served.load(Ordering::Relaxed),
        served.load(Ordering::Relaxed) as f64 / secs,
        refused.load(Ordering::Relaxed)
    );
    println!(
        "ratio under flood / alone: p50 {:.2}x   p99 {:.2}x   (target p99 <= 2x)",
        f50 / p50,
        f99 / p99
    );
    if !after.is_empty() {
        after.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "quiet tenant after 1.5 s of quiet, under flood ({spells} requests): p50 {:.2} ms \
             ({:.2}x alone)   max {:.2} ms ({:.2}x alone p99)",
            percentile(&after, 0.5),
            percentile(&after, 0.5) / p50,
            percentile(&after, 1.0),
            percentile(&after, 1.0) / p99
        );
    }
}

async fn body_memory(bin: &std::path::Path, mib: usize, budget: Option<usize>) {
    let dir = tempfile::tempdir().unwrap();
    let budget_arg = budget.unwrap_or(1 << 20).to_string();
    let server = Served::start(
        bin,
        dir.path(),
        &["--max-body-mb", "512", "--max-body-memory-mb", &budget_arg],
    );
    let idle = server.peak_rss_mib();
    // Zeros are not Arrow: each body is received whole, then refused with a 400.
    let body = bytes::Bytes::from(vec![0u8; mib << 20]);
    let c = client(KEY);
    let mut counts = std::collections::BTreeMap::<u16, u64>::new();
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (c, base, body) = (c.clone(), server.base.clone(), body.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                for _ in 0..3 {
                    let r = c
                        .post(format!("{base}/v1/table/x/insert"))
                        .header("content-type", "application/vnd.apache.arrow.stream")
                        .body(body.clone())
                        .send()
                        .await;
                    seen.push(r.map(|r| r.status().as_u16()).unwrap_or(0));
                }
                seen
            })
        })
        .collect();
    for t in tasks {
        for s in t.await.unwrap() {
            *counts.entry(s).or_default() += 1;
        }
    }
    let label = match budget {
        Some(b) => format!("budget {b} MiB"),
        None => "no budget".to_string(),
    };
    println!(
        "32 clients x 3 bodies of {mib} MiB ({label}): peak RSS {:.0} MiB (idle {idle:.0}); answers {counts:?}",
        server.peak_rss_mib()
    );
}

const KEY: &str = "overload-bench-key";

#[tokio::main]
async fn main() {
    // SAFETY: set before any thread of ours reads the environment.
    unsafe { std::env::set_var("LANCET_BOOTSTRAP_KEY", KEY) };
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("lancet");
    assert!(bin.exists(), "build the server first: {}", bin.display());
    let requests = arg("--requests", 400);
    let flood = arg("--flood", 64);
    let mib = arg("--bodies", 48);
    println!("== tenant isolation ({requests} quiet requests)");
    isolation(&bin, requests, flood).await;
    println!("== body memory");
    body_memory(&bin, mib, Some(256)).await;
    body_memory(&bin, mib, None).await;
}
