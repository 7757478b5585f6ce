//! Replica benchmark (issues 17 and 29). In one run, the same workload against:
//! 1 `lancet serve` on a local directory, and 1, 2 and 3 replicas sharing one root on an
//! S3-compatible server (moto on loopback, started from the test venv unless
//! `LANCET_BENCH_S3_ENDPOINT` names one), first checking the store on every read
//! (`--read-consistency-interval 0`), then with the default interval. Clients spread their
//! requests round-robin over the replicas. Printed per setup:
//!
//! - query throughput for 8 concurrent clients: vector (exact, k=10), full-text, and a count
//!   with a predicate;
//! - merge_insert throughput for 4 concurrent writers (20 rows each: 10 updates, 10 new);
//! - with 2+ replicas, how long after a write acknowledged by one node another node first
//!   answers with it (polled every 5 ms), against a repeat of that read.
//!
//! ```sh
//! cargo build --release --bin lancet --example replica_bench
//! $CARGO_TARGET_DIR/release/examples/replica_bench [--rows 20000] [--secs 5]
//! ```

#[path = "support/rows.rs"]
mod rows;
#[path = "support/served.rs"]
mod served;
use rows::{arg, batch, vector};
use served::{Served, client};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const KEY: &str = "replica-bench-key";
const ARROW: &str = "application/vnd.apache.arrow.stream";

fn moto() -> (String, Option<std::process::Child>) {
    if let Ok(e) = std::env::var("LANCET_BENCH_S3_ENDPOINT") {
        return (e, None);
    }
    let venv = std::env::var("LANCET_VENV").unwrap_or_else(|_| {
        format!(
            "{}/.cache/lancet-venv",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = std::process::Command::new(format!("{venv}/bin/python"))
        .args([
            "-m",
            "moto.server",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start moto (run scripts/venv.sh first)");
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        std::thread::sleep(Duration::from_millis(200));
    }
    (format!("http://127.0.0.1:{port}"), Some(child))
}

struct Setup {
    name: String,
    nodes: Vec<Served>,
    c: reqwest::Client,
}

impl Setup {
    fn base(&self, i: usize) -> &str {
        &self.nodes[i % self.nodes.len()].base
    }

    async fn send(&self, node: usize, path: &str, body: reqwest::Body, arrow: bool) -> u16 {
        let r = self
            .c
            .post(format!("{}{path}", self.base(node)))
            .header(
                "content-type",
                if arrow { ARROW } else { "application/json" },
            )
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.bytes().await.unwrap();
        if status >= 400 && status != 409 {
            panic!("{path}: {status} {}", String::from_utf8_lossy(&text));
        }
        status
    }

    async fn json(&self, node: usize, path: &str, body: Value) -> u16 {
        self.send(node, path, body.to_string().into(), false).await
    }

    async fn setup(&self, rows: i64) {
        let ids: Vec<i64> = (0..rows).collect();
        self.send(0, "/v1/table/b/create", batch(&ids, 0).into(), true)
            .await;
        self.json(
            0,
            "/v1/table/b/create_index",
            json!({"column": "text", "index_type": "FTS"}),
        )
        .await;
    }

    /// Requests of `kind` per second from `clients` concurrent clients over `secs`.
    async fn throughput(self: &Arc<Self>, kind: &'static str, clients: usize, secs: u64) -> f64 {
        let done = Arc::new(AtomicU64::new(0));
        let stop = Instant::now() + Duration::from_secs(secs);
        let mut tasks = Vec::new();
        for c in 0..clients {
            let (me, done) = (self.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = c;
                while Instant::now() < stop {
                    me.one(kind, i).await;
                    done.fetch_add(1, Ordering::Relaxed);
                    i += clients;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        done.load(Ordering::Relaxed) as f64 / secs as f64
    }

    async fn one(&self, kind: &str, i: usize) {
        let w = rows::WORDS[i % rows::WORDS.len()];
        match kind {
            "vector" => {
                let body = json!({"vector": vector(i as i64, 7), "k": 10, "columns": ["id"]});
                self.json(i, "/v1/table/b/query", body).await;
            }
            "fts" => {
                let body = json!({"full_text_query": {"string_query": {"query": w}}, "k": 10,
                                  "vector": {}, "columns": ["id"]});
                self.json(i, "/v1/table/b/query", body).await;
            }
            "count" => {
                let body = json!({"predicate": format!("category = {} AND id > 100", i % 10)});
                self.json(i, "/v1/table/b/count_rows", body).await;
            }
            _ => {
                // 10 updates of existing rows and 10 rows of this writer's own new range.
                let mut ids: Vec<i64> = (0..10)
                    .map(|k| ((i * 131 + k * 1999) % 20_000) as i64)
                    .collect();
                ids.sort();
                ids.dedup();
                ids.extend((0..10).map(|k| 1_000_000 + (i as i64) * 10 + k));
                let path = "/v1/table/b/merge_insert?on=id&when_matched_update_all=true&when_not_matched_insert_all=true";
                self.send(i, path, batch(&ids, i as i64 + 1).into(), true)
                    .await;
            }
        }
    }

    /// Medians (ms from a write acknowledged by node 0 until node 1 answers with it, a repeat
    /// of that read).
    async fn read_after_write(&self, samples: usize) -> (f64, f64) {
        let (mut visible, mut again) = (Vec::new(), Vec::new());
        for s in 0..samples {
            let id = 5_000_000 + s as i64;
            self.send(0, "/v1/table/b/insert", batch(&[id], 0).into(), true)
                .await;
            let body = json!({"predicate": format!("id = {id}")});
            let written = Instant::now();
            while self.count_on(1, &body).await != 1 {
                assert!(written.elapsed() < Duration::from_secs(30), "never seen");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            visible.push(written.elapsed().as_secs_f64() * 1e3);
            let start = Instant::now();
            assert_eq!(self.count_on(1, &body).await, 1);
            again.push(start.elapsed().as_secs_f64() * 1e3);
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v[v.len() / 2]
        };
        (median(visible), median(again))
    }

    async fn count_on(&self, node: usize, body: &Value) -> u64 {
        let r = self
            .c
            .post(format!("{}/v1/table/b/count_rows", self.base(node)))
            .json(body)
            .send()
            .await
            .unwrap();
        r.json::<Value>().await.unwrap().as_u64().unwrap()
    }
}

#[tokio::main]
async fn main() {
    let rows = arg("--rows", 20_000) as i64;
    let secs = arg("--secs", 5) as u64;
    let bin = served::server_binary();
    let (endpoint, mut moto_child) = moto();
    let store_env = [
        ("AWS_ENDPOINT", endpoint.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_ACCESS_KEY_ID", "bench"),
        ("AWS_SECRET_ACCESS_KEY", "bench-secret"),
        ("AWS_REGION", "us-east-1"),
        ("LANCET_BOOTSTRAP_KEY", KEY),
        ("LANCET_UPKEEP", "false"),
    ];
    println!("== {rows} rows; {secs} s per measurement; moto at {endpoint}");
    println!(
        "{:<22} {:>12} {:>12} {:>12} {:>12} {:>24}",
        "setup", "vector/s", "fts/s", "count/s", "merge_ins/s", "visible elsewhere ms"
    );
    let local_dir = tempfile::tempdir().unwrap();
    let mut baseline: Option<[f64; 4]> = None;
    // (replicas, read consistency interval; None: the default)
    let setups = [
        (0usize, None),
        (1, Some("0")),
        (2, Some("0")),
        (1, None),
        (2, None),
        (3, None),
    ];
    for (replicas, interval) in setups {
        let (name, nodes) = if replicas == 0 {
            let node = Served::start_with(
                &bin,
                local_dir.path().to_str().unwrap(),
                &[],
                &store_env[5..],
            );
            ("local, 1".to_string(), vec![node])
        } else {
            let bucket = format!(
                "bench-{replicas}-{}-{}",
                interval.unwrap_or("default"),
                std::process::id()
            );
            reqwest::Client::new()
                .put(format!("{endpoint}/{bucket}"))
                .send()
                .await
                .unwrap();
            let root = format!("s3://{bucket}/root");
            let nodes = (0..replicas)
                .map(|n| {
                    let id = format!("bench-{n}");
                    let mut env = store_env.to_vec();
                    env.push(("LANCET_NODE_ID", id.as_str()));
                    if let Some(i) = interval {
                        env.push(("LANCET_READ_CONSISTENCY_INTERVAL", i));
                    }
                    Served::start_with(&bin, &root, &[], &env)
                })
                .collect();
            let interval = interval.unwrap_or("default");
            (format!("s3, {replicas}, rci {interval}"), nodes)
        };
        let setup = Arc::new(Setup {
            name,
            nodes,
            c: client(KEY),
        });
        setup.setup(rows).await;
        let mut figures = [0.0; 4];
        for (k, (kind, clients)) in [("vector", 8), ("fts", 8), ("count", 8), ("merge", 4)]
            .into_iter()
            .enumerate()
        {
            figures[k] = setup.throughput(kind, clients, secs).await;
        }
        let raw = if setup.nodes.len() > 1 {
            let (first, again) = setup.read_after_write(20).await;
            format!("{first:.1} (repeat {again:.1})")
        } else {
            "-".into()
        };
        let base = *baseline.get_or_insert(figures);
        println!(
            "{:<22} {:>12} {:>12} {:>12} {:>12} {:>24}",
            setup.name,
            format!("{:.0} ({:.2}x)", figures[0], figures[0] / base[0]),
            format!("{:.0} ({:.2}x)", figures[1], figures[1] / base[1]),
            format!("{:.0} ({:.2}x)", figures[2], figures[2] / base[2]),
            format!("{:.1} ({:.2}x)", figures[3], figures[3] / base[3]),
            raw
        );
    }
    println!("(ratios against 1 server on local disk in this run)");
    if let Some(m) = moto_child.as_mut() {
        let _ = m.kill();
    }
}
