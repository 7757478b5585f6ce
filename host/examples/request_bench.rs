//! Per-request cost over in-process lance (issue 29 item 2), with a Rust client.
//!
//! A 100k-row table loaded through Lancet in 40 inserts (40 fragments), IVF_PQ on `vec`, FTS on
//! `text`, BTREE on `category`; then, on the fresh table and again after `optimize` compacted
//! it, three reads through Lancet (HTTP/1.1 keep-alive, `reqwest`, one connection per client)
//! and through lance opened in this process on the same files:
//!
//! - vector: k=10 nearest, nprobes 8, `id` only;
//! - fts: a full-text match, k=10, `id` only;
//! - count: `count_rows` with a predicate on the indexed `category`.
//!
//! Printed per read: p50/p99 at 1 client, Lancet minus in-process against the HTTP floor
//! (`GET /healthz` on the same client), Lancet's own time from `/metrics`, and throughput at 8
//! clients with the ratio. The client is checked not to be the bottleneck by its own CPU time
//! per request (from `getrusage`) and by its `GET /healthz` rate at 8 clients. As the client
//! shares the machine's cores with the server, c=8 also prints CPU per request: the server's
//! (from `/proc/<pid>/stat`) against the in-process loop's, and their ratio (in-process over
//! server: the throughput ratio a client on other cores would see, when the cores are full).
//!
//! ```sh
//! cargo build --release --no-default-features -p lancet --bin lancet --example request_bench
//! $CARGO_TARGET_DIR/release/examples/request_bench [--rows 100000] [--n 400] [--secs 4]
//! ```
//! The server binary is looked up beside the bench's own directory (`../lancet`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

// Same allocator as the `lancet` binary, so the ratio measures the server, not the allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/rows.rs"]
mod rows;
#[path = "support/served.rs"]
mod served;
use rows::{WORDS, arg, batch, vector};
use served::{Served, client};

use arrow_array::{Float32Array, RecordBatch};
use futures::TryStreamExt;
use lance::Dataset;
use lance_index::scalar::FullTextSearchQuery;
use serde_json::{Value, json};

const KEY: &str = "request-bench-key";

#[derive(Clone, Copy, PartialEq)]
enum Read {
    Vector,
    Fts,
    Count,
}

impl Read {
    fn name(self) -> &'static str {
        match self {
            Read::Vector => "vector",
            Read::Fts => "fts",
            Read::Count => "count",
        }
    }
    fn route(self) -> &'static str {
        match self {
            Read::Count => "/v1/table/{id}/count_rows",
            _ => "/v1/table/{id}/query",
        }
    }
    fn path(self) -> &'static str {
        match self {
            Read::Count => "/v1/table/t/count_rows",
            _ => "/v1/table/t/query",
        }
    }
    fn body(self, i: usize) -> Vec<u8> {
        let b = match self {
            Read::Vector => json!({"vector": query_vector(i), "k": 10, "nprobes": 8,
                "columns": ["id"]}),
            Read::Fts => json!({"full_text_query": {"string_query": {"query": word(i)}},
                "k": 10, "vector": {}, "columns": ["id"]}),
            Read::Count => json!({"predicate": format!("category = {}", i % 10)}),
        };
        serde_json::to_vec(&b).unwrap()
    }

    /// The same read through HTTP; answers the rows (or the count) it got.
    async fn lancet(self, http: &reqwest::Client, base: &str, i: usize) -> usize {
        let r = http
            .post(format!("{base}{}", self.path()))
            .header("content-type", "application/json")
            .header("accept", "application/vnd.apache.arrow.stream")
            .body(self.body(i))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let bytes = r.bytes().await.unwrap();
        assert!(status.is_success(), "{status}: {bytes:?}");
        if self == Read::Count {
            return std::str::from_utf8(&bytes).unwrap().trim().parse().unwrap();
        }
        arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
            .unwrap()
            .map(|b| b.unwrap().num_rows())
            .sum()
    }

    /// The same read on lance in this process.
    async fn in_process(self, ds: &Dataset, i: usize) -> usize {
        if self == Read::Count {
            return ds
                .count_rows(Some(format!("category = {}", i % 10)))
                .await
                .unwrap();
        }
        let mut scan = ds.scan();
        scan.project(&["id"]).unwrap();
        if self == Read::Vector {
            scan.nearest("vec", &Float32Array::from(query_vector(i)), 10)
                .unwrap();
            scan.nprobes(8);
        } else {
            scan.full_text_search(FullTextSearchQuery::new(word(i)))
                .unwrap();
            scan.limit(Some(10), None).unwrap();
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

fn hold() -> Option<Read> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == "--hold")?;
    Some(match args.get(at + 1).map(String::as_str) {
        Some("vector") => Read::Vector,
        Some("fts") => Read::Fts,
        Some("count") => Read::Count,
        other => panic!("--hold takes vector, fts or count, not {other:?}"),
    })
}

fn query_vector(i: usize) -> Vec<f32> {
    vector(1234 + (i % 16) as i64, 0)
}

fn word(i: usize) -> String {
    WORDS[i % WORDS.len()].to_string()
}

/// Nanoseconds of CPU this process has used (user + system).
fn cpu_ns() -> u64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid rusage for getrusage to fill.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    ns(u.ru_utime) + ns(u.ru_stime)
}

fn p(lat: &mut [Duration], q: f64) -> f64 {
    lat.sort();
    lat[((lat.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3
}

/// p50 and p99 (ms) of `n` sequential calls, after 30 to warm up.
async fn latency<F, Fut>(n: usize, mut one: F) -> (f64, f64)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    for i in 0..30 {
        one(i).await;
    }
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        one(i).await;
        lat.push(t.elapsed());
    }
    (p(&mut lat, 0.5), p(&mut lat, 0.99))
}

/// Calls per second from `clients` concurrent tasks for `secs`, and the CPU this process
/// spent per call (µs).
async fn throughput<F, Fut>(clients: usize, secs: f64, make: F) -> (f64, f64)
where
    F: Fn() -> Box<dyn FnMut(usize) -> Fut + Send>,
    Fut: std::future::Future<Output = usize> + Send + 'static,
{
    let done = Arc::new(AtomicU64::new(0));
    let stop = Instant::now() + Duration::from_secs_f64(secs);
    let cpu = cpu_ns();
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let mut one = make();
            let done = done.clone();
            tokio::spawn(async move {
                let mut i = c;
                while Instant::now() < stop {
                    one(i).await;
                    done.fetch_add(1, Ordering::Relaxed);
                    i += clients;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let n = done.load(Ordering::Relaxed) as f64;
    let cpu_us = (cpu_ns() - cpu) as f64 / 1e3 / n;
    (n / started.elapsed().as_secs_f64(), cpu_us)
}

/// route -> (seconds, count) of `lancet_http_request_duration_seconds`.
async fn server_time(http: &reqwest::Client, base: &str, route: &str) -> (f64, f64) {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut out = (0.0, 0.0);
    for line in text.lines() {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        if !name.contains(&format!("route=\"{route}\"")) {
            continue;
        }
        let v: f64 = value.parse().unwrap_or(0.0);
        if name.starts_with("lancet_http_request_duration_seconds_sum") {
            out.0 += v;
        } else if name.starts_with("lancet_http_request_duration_seconds_count") {
            out.1 += v;
        }
    }
    out
}

async fn post(http: &reqwest::Client, url: &str, body: Value) -> Value {
    let r = http.post(url).json(&body).send().await.unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert!(status.is_success(), "{url}: {status} {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

async fn measure(base: &str, location: &str, label: &str, n: usize, secs: f64, server_pid: u32) {
    let ds = Arc::new(Dataset::open(location).await.unwrap());
    let http = client(KEY);
    let floor = latency(n, |_| {
        let http = http.clone();
        async move {
            http.get(format!("{base}/healthz"))
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap()
                .len()
        }
    })
    .await;
    let (hz, hz_cpu) = throughput(8, secs, || {
        let http = client(KEY);
        let url = format!("{base}/healthz");
        Box::new(move |_| {
            let (http, url) = (http.clone(), url.clone());
            Box::pin(async move {
                let r = http.get(url).send().await.unwrap();
                r.bytes().await.unwrap().len()
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = usize> + Send>>
        })
    })
    .await;
    println!(
        "\n== {label}: floor GET /healthz p50 {:.3} ms; at 8 clients {hz:.0}/s, client CPU {hz_cpu:.0} µs/call",
        floor.0
    );
    println!(
        "| read | Lancet p50/p99 | in-process p50/p99 | diff | diff - floor | server | Lancet c=8/s | client CPU µs/call | in-process c=8/s | ratio | server CPU µs/req c=8 | in-process CPU µs/call c=8 | CPU ratio |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for read in [Read::Vector, Read::Fts, Read::Count] {
        let before = server_time(&http, base, read.route()).await;
        let a = latency(n, |i| {
            let http = http.clone();
            async move { read.lancet(&http, base, i).await }
        })
        .await;
        let after = server_time(&http, base, read.route()).await;
        let server = (after.0 - before.0) / (after.1 - before.1) * 1e3;
        let b = latency(n, |i| {
            let ds = ds.clone();
            async move { read.in_process(&ds, i).await }
        })
        .await;
        let base_owned = base.to_string();
        let server_cpu = process_cpu_ns(server_pid);
        let started = Instant::now();
        let (ta, cpu) = throughput(8, secs, || {
            let http = client(KEY);
            let base = base_owned.clone();
            Box::new(move |i| {
                let (http, base) = (http.clone(), base.clone());
                Box::pin(async move { read.lancet(&http, &base, i).await })
                    as std::pin::Pin<Box<dyn std::future::Future<Output = usize> + Send>>
            })
        })
        .await;
        // The server's own CPU per request at c=8, against the in-process loop's CPU per call
        // below: what each costs the machine, whoever else runs on it.
        let served = ta * started.elapsed().as_secs_f64();
        let server_us = (process_cpu_ns(server_pid) - server_cpu) as f64 / 1e3 / served;
        let (tb, in_process_us) = throughput(8, secs, || {
            let ds = ds.clone();
            Box::new(move |i| {
                let ds = ds.clone();
                Box::pin(async move { read.in_process(&ds, i).await })
                    as std::pin::Pin<Box<dyn std::future::Future<Output = usize> + Send>>
            })
        })
        .await;
        let diff = a.0 - b.0;
        println!(
            "| {} | {:.3}/{:.3} | {:.3}/{:.3} | {diff:.3} | {:.3} | {server:.3} | {ta:.0} | {cpu:.0} | {tb:.0} | {:.2} | {server_us:.0} | {in_process_us:.0} | {:.2} |",
            read.name(),
            a.0,
            a.1,
            b.0,
            b.1,
            diff - floor.0,
            ta / tb,
            in_process_us / server_us
        );
    }
}

/// Nanoseconds of CPU process `pid` has used (user + system), from `/proc/<pid>/stat`.
fn process_cpu_ns(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) end with ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    // SAFETY: sysconf only reads its argument.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ticks * 1_000_000_000 / hz
}

#[tokio::main]
async fn main() {
    let rows = arg("--rows", 100_000);
    let n = arg("--n", 400);
    let secs = arg("--secs", 4) as f64;
    let bin = served::server_binary();
    let dir = tempfile::tempdir().unwrap();
    let start = || {
        Served::start_with(
            &bin,
            dir.path().to_str().unwrap(),
            &[],
            &[("LANCET_BOOTSTRAP_KEY", KEY), ("LANCET_UPKEEP", "false")],
        )
    };
    let mut served = start();
    let mut base = served.base.clone();
    let http = client(KEY);
    let per = rows / 40;
    for k in 0..40 {
        let ids: Vec<i64> = ((k * per) as i64..((k + 1) * per) as i64).collect();
        let op = if k == 0 { "create" } else { "insert" };
        let r = http
            .post(format!("{base}/v1/table/t/{op}"))
            .header("content-type", "application/vnd.apache.arrow.stream")
            .body(batch(&ids, 0))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{op}: {}", r.text().await.unwrap());
    }
    for body in [
        json!({"column": "vec", "index_type": "IVF_PQ", "num_partitions": 16, "num_sub_vectors": 8}),
        json!({"column": "text", "index_type": "FTS"}),
        json!({"column": "category", "index_type": "BTREE"}),
    ] {
        post(&http, &format!("{base}/v1/table/t/create_index"), body).await;
    }
    let location = post(&http, &format!("{base}/v1/table/t/describe"), json!({})).await["location"]
        .as_str()
        .unwrap()
        .to_string();
    println!(
        "{rows} rows in 40 fragments; {n} sequential calls per latency, {secs} s per throughput"
    );
    // `--restart`: measure a server started afresh on the loaded table (its datasets opened
    // from disk, as the in-process side's are) rather than the one that wrote it.
    if std::env::args().any(|a| a == "--restart") {
        drop(served);
        served = start();
        base = served.base.clone();
    }
    // `--hold <vector|fts|count> --secs S [--clients C]`: only that read through Lancet, at C
    // clients (1 unless told) for S seconds, the server's pid printed first: for a profiler
    // attached to the server. `--clients 0` only keeps the server up (its address printed) for
    // a client of another kind.
    if let Some(read) = hold() {
        println!("server pid {} at {base}", served.child.id());
        let clients = arg("--clients", 1);
        let stop = Instant::now() + Duration::from_secs_f64(secs);
        // `--in-process`: the same loop on lance in this process (profile the bench itself).
        let ds = std::env::args()
            .any(|a| a == "--in-process")
            .then(|| Dataset::open(&location));
        let ds = match ds {
            Some(open) => Some(Arc::new(open.await.unwrap())),
            None => None,
        };
        let calls = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..clients)
            .map(|c| {
                let (ds, http, base, calls) =
                    (ds.clone(), http.clone(), base.clone(), calls.clone());
                tokio::spawn(async move {
                    let mut i = c * 1_000_003;
                    while Instant::now() < stop {
                        match &ds {
                            Some(ds) => read.in_process(ds, i).await,
                            None => read.lancet(&http, &base, i).await,
                        };
                        calls.fetch_add(1, Ordering::Relaxed);
                        i += 1;
                    }
                })
            })
            .collect();
        if clients == 0 {
            tokio::time::sleep_until(stop.into()).await;
        }
        for t in tasks {
            t.await.unwrap();
        }
        println!("{} calls", calls.load(Ordering::Relaxed));
        return;
    }
    measure(
        &base,
        &location,
        "fresh (40 fragments)",
        n,
        secs,
        served.child.id(),
    )
    .await;
    post(&http, &format!("{base}/v1/table/t/optimize"), json!({})).await;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let stats = post(&http, &format!("{base}/v1/table/t/stats"), json!({})).await;
        if stats["fragment_stats"]["num_fragments"].as_u64() == Some(1) {
            break;
        }
        assert!(Instant::now() < deadline, "optimize did not compact");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    measure(&base, &location, "compacted", n, secs, served.child.id()).await;
}
