//! Search benchmark (issue "Search"): the same queries over the same data, through HTTP to
//! Lancet, through HTTP to upstream `lance_namespace_impls::RestAdapter` over a
//! `DirectoryNamespace`, and in-process through the lance crate (the floor). Prints p50, p99,
//! queries/s and server peak RSS for 1 and 8 concurrent clients, then the ratios.
//!
//! ```sh
//! cargo build --release --bin lancet --example search_bench --features bench-upstream
//! target/release/examples/search_bench [--rows 100000] [--requests 200] [--only full-text]
//! ```
//! (with `CARGO_TARGET_DIR` set, the binaries are under it). The data is generated with a
//! fixed seed; both servers run as child processes so their RSS is their own.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

// The in-process floor uses the same allocator as the `lancet` binary, so the ratio measures
// the server, not the allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use arrow_array::{FixedSizeListArray, Float32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use futures::TryStreamExt;
use lance::dataset::Dataset;
use lance_index::scalar::FullTextSearchQuery;
use serde_json::{Value, json};

const DIM: usize = 128;
const KEY: &str = "bench-key";

/// A deterministic generator (xorshift), so every run searches the same data.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn float(&mut self) -> f32 {
        (self.next() % 10_000) as f32 / 10_000.0
    }
}

fn word(i: u64) -> String {
    format!("w{}", i % 2000)
}

fn batch(rng: &mut Rng, start: i64, n: usize) -> RecordBatch {
    let ids = Int64Array::from_iter_values(start..start + n as i64);
    let texts = StringArray::from_iter_values((0..n).map(|_| {
        (0..8)
            .map(|_| word(rng.next()))
            .collect::<Vec<_>>()
            .join(" ")
    }));
    let values = Float32Array::from_iter_values((0..n * DIM).map(|_| rng.float()));
    let vectors = FixedSizeListArray::try_new(
        Arc::new(Field::new("item", DataType::Float32, true)),
        DIM as i32,
        Arc::new(values),
        None,
    )
    .unwrap();
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("text", DataType::Utf8, false),
        Field::new(
            "vector",
            DataType::FixedSizeList(
                Arc::new(Field::new("item", DataType::Float32, true)),
                DIM as i32,
            ),
            false,
        ),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![Arc::new(ids), Arc::new(texts), Arc::new(vectors)],
    )
    .unwrap()
}

fn ipc(batches: &[RecordBatch]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &batches[0].schema()).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.finish().unwrap();
    drop(w);
    out
}

/// A server child process and its base URL.
struct Served {
    child: Child,
    base: String,
}

impl Served {
    // The child is reaped by `Drop` once it is a `Served`, or just below if it never listens.
    #[allow(clippy::zombie_processes)]
    fn start(mut cmd: Command) -> Served {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start server");
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                let status = child.wait();
                panic!("server exited before listening: {status:?}");
            }
            if let Some(base) = line.trim().strip_prefix("listening on ") {
                let base = base.to_string();
                std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
                return Served { child, base };
            }
        }
    }
    /// Peak resident set (VmHWM) in MiB.
    fn peak_rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
            .unwrap_or(f64::NAN)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lancet(bin: &std::path::Path, data: &std::path::Path) -> Served {
    let mut cmd = Command::new(bin);
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--data"])
        .arg(data)
        .env("LANCET_BOOTSTRAP_KEY", KEY)
        .env("LANCET_LOG", "warn");
    Served::start(cmd)
}

/// `search_bench upstream <root>`: serve the upstream adapter (run as a child of the bench).
async fn serve_upstream(root: &str) {
    use lance_namespace_impls::{DirectoryNamespaceBuilder, RestAdapter, RestAdapterConfig};
    // The same catalog mode as Lancet: manifest only.
    let ns = DirectoryNamespaceBuilder::new(root)
        .dir_listing_enabled(false)
        .build()
        .await
        .unwrap();
    let handle = RestAdapter::new(
        Arc::new(ns),
        RestAdapterConfig {
            host: "127.0.0.1".into(),
            port: 0,
        },
    )
    .start()
    .await
    .unwrap();
    println!("listening on http://127.0.0.1:{}", handle.port());
    std::future::pending::<()>().await;
}

async fn post(client: &reqwest::Client, url: &str, body: &Value) -> Vec<u8> {
    let r = client.post(url).json(body).send().await.unwrap();
    let status = r.status();
    let bytes = r.bytes().await.unwrap().to_vec();
    assert!(
        status.is_success(),
        "{url}: {status} {}",
        String::from_utf8_lossy(&bytes)
    );
    bytes
}

#[derive(Clone)]
enum Query {
    Vector {
        index: bool,
        filter: Option<&'static str>,
    },
    Fts,
    Count,
}

impl Query {
    fn name(&self) -> &'static str {
        match self {
            Query::Vector { index: false, .. } => "vector k=10, no index",
            Query::Vector { filter: None, .. } => "vector k=10, IVF_PQ",
            Query::Vector { .. } => "vector k=10, IVF_PQ, filter",
            Query::Fts => "full-text k=10",
            Query::Count => "count_rows(predicate)",
        }
    }
    fn path(&self) -> &'static str {
        match self {
            Query::Count => "count_rows",
            _ => "query",
        }
    }
    /// The request body (upstream's QueryTableRequest shape, which both servers take).
    fn body(&self, i: usize, vectors: &[Vec<f32>]) -> Value {
        let q = &vectors[i % vectors.len()];
        match self {
            Query::Vector { index, filter } => {
                let mut b = json!({"vector": {"single_vector": q}, "k": 10, "nprobes": 20,
                    "bypass_vector_index": !index, "columns": {"column_names": ["id"]}});
                if let Some(f) = filter {
                    b["filter"] = json!(f);
                    b["prefilter"] = json!(true);
                }
                b
            }
            Query::Fts => {
                json!({"full_text_query": {"string_query": {"query": word(i as u64 * 7919)}},
                "k": 10, "vector": {}, "columns": {"column_names": ["id"]}})
            }
            Query::Count => json!({"predicate": format!("id < {}", 1000 + i * 37)}),
        }
    }
    async fn in_process(&self, ds: &Dataset, i: usize, vectors: &[Vec<f32>]) -> usize {
        if let Query::Count = self {
            return ds
                .count_rows(Some(format!("id < {}", 1000 + i * 37)))
                .await
                .unwrap();
        }
        let mut scan = ds.scan();
        scan.project(&["id"]).unwrap();
        match self {
            Query::Vector { index, filter } => {
                let q = Float32Array::from(vectors[i % vectors.len()].clone());
                scan.nearest("vector", &q, 10).unwrap();
                scan.nprobes(20);
                scan.use_index(*index);
                if let Some(f) = filter {
                    scan.filter(f).unwrap();
                    scan.prefilter(true);
                }
            }
            Query::Fts => {
                scan.full_text_search(FullTextSearchQuery::new(word(i as u64 * 7919)))
                    .unwrap();
                scan.limit(Some(10), None).unwrap();
            }
            Query::Count => unreachable!(),
        }
        let batches: Vec<RecordBatch> = scan
            .try_into_stream()
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        batches.iter().map(|b| b.num_rows()).sum()
    }
}

struct Stats {
    p50: f64,
    p99: f64,
    qps: f64,
}

fn stats(mut lat: Vec<Duration>, wall: Duration) -> Stats {
    lat.sort();
    let at = |q: f64| lat[((lat.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3;
    Stats {
        p50: at(0.5),
        p99: at(0.99),
        qps: lat.len() as f64 / wall.as_secs_f64(),
    }
}

/// Runs `requests` calls of `one(i)` from `clients` concurrent tasks.
async fn drive<F, Fut>(clients: usize, requests: usize, one: F) -> Stats
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let one = one.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut i = c;
                while i < requests {
                    let t = Instant::now();
                    one(i).await;
                    lat.push(t.elapsed());
                    i += clients;
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    stats(all, started.elapsed())
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("upstream") {
        return serve_upstream(&args[2]).await;
    }
    let rows = arg(&args, "--rows", 100_000);
    let requests = arg(&args, "--requests", 200);
    // `--only <text>`: run just the queries whose name contains it (for profiling one path).
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1).cloned());
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("lancet");
    assert!(
        bin.exists(),
        "{} missing: build the lancet binary in the same profile",
        bin.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::builder()
        .default_headers(
            [(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {KEY}").parse().unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .build()
        .unwrap();

    // Load and index with a Lancet that is then stopped, so the measured servers start fresh.
    let location = {
        let loader = lancet(&bin, dir.path());
        let mut rng = Rng(0x5eed);
        let batches: Vec<RecordBatch> = (0..rows.div_ceil(10_000))
            .map(|i| batch(&mut rng, (i * 10_000) as i64, 10_000.min(rows - i * 10_000)))
            .collect();
        let t = Instant::now();
        let r = client
            .post(format!("{}/v1/table/bench/create", loader.base))
            .header("content-type", "application/vnd.apache.arrow.stream")
            .body(ipc(&batches))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
        println!("loaded {rows} rows in {:.1} s", t.elapsed().as_secs_f64());
        let t = Instant::now();
        let partitions = ((rows as f64).sqrt() as usize).clamp(1, 256);
        post(&client, &format!("{}/v1/table/bench/create_index", loader.base),
            &json!({"column": "vector", "index_type": "IVF_PQ", "num_partitions": partitions, "num_sub_vectors": 16})).await;
        println!(
            "IVF_PQ ({partitions} partitions) built in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        let t = Instant::now();
        post(
            &client,
            &format!("{}/v1/table/bench/create_index", loader.base),
            &json!({"column": "text", "index_type": "FTS"}),
        )
        .await;
        println!("FTS index built in {:.1} s", t.elapsed().as_secs_f64());
        let d: Value = serde_json::from_slice(
            &post(
                &client,
                &format!("{}/v1/table/bench/describe", loader.base),
                &json!({}),
            )
            .await,
        )
        .unwrap();
        d["location"].as_str().unwrap().to_string()
    };

    let tenant_root = dir.path().join("tenants/default");
    let ours = lancet(&bin, dir.path());
    let mut up = Command::new(&exe);
    up.arg("upstream").arg(&tenant_root);
    let upstream = Served::start(up);
    println!(
        "servers: lancet pid {}, upstream pid {}",
        ours.child.id(),
        upstream.child.id()
    );
    let ds = Arc::new(Dataset::open(&location).await.unwrap());
    let plain = reqwest::Client::new();

    let mut rng = Rng(42);
    let vectors: Arc<Vec<Vec<f32>>> = Arc::new(
        (0..16)
            .map(|_| (0..DIM).map(|_| rng.float()).collect())
            .collect(),
    );
    let queries = [
        Query::Vector {
            index: false,
            filter: None,
        },
        Query::Vector {
            index: true,
            filter: None,
        },
        Query::Vector {
            index: true,
            filter: Some("id % 2 = 0"),
        },
        Query::Fts,
        Query::Count,
    ];
    println!(
        "\n{:<28} {:>3}  {:>28}  {:>28}  {:>28}  {:>8} {:>8}",
        "query",
        "c",
        "lancet p50/p99 ms (q/s)",
        "upstream p50/p99 ms (q/s)",
        "in-process p50/p99 ms (q/s)",
        "up/ours",
        "ours/ip"
    );
    let cell = |s: &Stats| format!("{:.2}/{:.2} ({:.0})", s.p50, s.p99, s.qps);
    for q in queries
        .iter()
        .filter(|q| only.as_ref().is_none_or(|o| q.name().contains(o.as_str())))
    {
        for clients in [1usize, 8] {
            let n = if clients == 1 { requests } else { requests * 4 };
            let mut results = Vec::new();
            for (base, c) in [(&ours.base, &client), (&upstream.base, &plain)] {
                let url = format!("{base}/v1/table/bench/{}", q.path());
                let (c, q, v) = (c.clone(), q.clone(), vectors.clone());
                // Warm up caches (index, fragments) outside the measurement.
                for i in 0..5 {
                    post(&c, &url, &q.body(i, &v)).await;
                }
                results.push(
                    drive(clients, n, move |i| {
                        let (c, url, body) = (c.clone(), url.clone(), q.body(i, &v));
                        async move {
                            post(&c, &url, &body).await;
                        }
                    })
                    .await,
                );
            }
            let (ds2, q2, v2) = (ds.clone(), q.clone(), vectors.clone());
            for i in 0..5 {
                q2.in_process(&ds2, i, &v2).await;
            }
            results.push(
                drive(clients, n, move |i| {
                    let (ds, q, v) = (ds2.clone(), q2.clone(), v2.clone());
                    async move {
                        q.in_process(&ds, i, &v).await;
                    }
                })
                .await,
            );
            println!(
                "{:<28} {:>3}  {:>28}  {:>28}  {:>28}  {:>7.2}x {:>7.2}x",
                q.name(),
                clients,
                cell(&results[0]),
                cell(&results[1]),
                cell(&results[2]),
                results[1].p50 / results[0].p50,
                results[0].p50 / results[2].p50,
            );
        }
    }
    println!(
        "\npeak RSS (MiB): lancet {:.0}, upstream adapter {:.0}",
        ours.peak_rss_mib(),
        upstream.peak_rss_mib()
    );
    println!(
        "up/ours: upstream p50 over Lancet p50 (target >= 2); ours/ip: Lancet p50 over in-process p50 (target <= 1.5)"
    );
}
