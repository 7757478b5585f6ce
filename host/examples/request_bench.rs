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
//! A third path splits Lancet's cost in two: "in-service" calls the server's whole request
//! service (every pipeline stage and the handler; `lancet::http::service`) built in this
//! process on the same data directory, with no socket, hyper or second process. Lancet minus
//! in-service is what the network and the separate process cost; in-service minus in-process
//! is what Lancet's own code costs.
//!
//! Printed per read: p50/p99 at 1 client of the three paths, Lancet minus in-process against
//! the HTTP floor (`GET /healthz` on the same client, measured with each read), Lancet's own
//! time from `/metrics`, and throughput at 8
//! clients with the ratio. The client is checked not to be the bottleneck by its own CPU time
//! per request (from `getrusage`) and by its `GET /healthz` rate at 8 clients. As the client
//! shares the machine's cores with the server, c=8 also prints CPU per request: the server's
//! (from `/proc/<pid>/stat`) against the in-process loop's, and their ratio (in-process over
//! server: the throughput ratio a client on other cores would see, when the cores are full).
//! The last column bounds any server over HTTP: the c=8 ratio a server could reach if it added
//! to lance's CPU per call only what `GET /healthz` costs it at 8 clients, with this client on
//! these cores (its CPU per call of the read counted too) and with the client elsewhere (the
//! one that applies when the bench is pinned away from the server, below).
//!
//! ```sh
//! cargo build --release -p lancet --bin lancet --example request_bench
//! $CARGO_TARGET_DIR/release/examples/request_bench [--rows 100000] [--n 400] [--secs 4] \
//!     [--interleave]
//! ```
//! `--interleave` takes the four latencies one call of each in turn rather than in blocks (see
//! `latencies`). `--server-cpus 1 --client-cpus 0` pins the server and this process (its
//! clients and the in-process loop) to separate cores: then neither side's work shares a core
//! with the clients, and the c=8 ratio is measured with a client that is not the bottleneck.
//! This process moves to `--client-cpus` before it builds its runtime, so lance in-process
//! runs on as many async workers as it has cores, as the server does.
//! `--hold vector|fts|count [--clients C] [--in-process | --in-service]` runs one
//! read for `--secs` (for a profiler) and prints this process's allocations per call; with
//! `--in-process`, `LANCET_BENCH_URING=1` opens the table through lance's io_uring reader.
//! More ways to serve the held read, each taking one cost apart: `--in-store` (lance on the
//! dataset the server's store holds, no request path), `--served-here` (the request service
//! over loopback HTTP from a thread of this process on `--server-cpus`, 1 unless told: the
//! socket and hyper without a second process; `--burn US` serves a stand-in that burns US µs
//! of CPU per call instead: what HTTP costs at that call rate, whatever the server does;
//! `--thrash KIB` makes it write over that much memory as it burns, as a read does; `--bare`
//! serves the least any server over lance must do instead: `support/bare.rs`; with
//! `--from-store`, on the dataset as Lancet's store holds it; `--from-store-once`, taken once),
//! `--ab` (in-process, in-store and in-service in turn in this process; `support/ab.rs`),
//! `--alternate ROUNDS [--variant ARGS]` (in-process, bare and Lancet on the serving CPU in turn,
//! seconds apart; `support/alternate.rs`). `--data DIR` keeps (or reuses) the loaded table;
//! `--compact` compacts it there and stops.
//! `--count-all` counts without a predicate (lance answers from the manifest), leaving the
//! request path's own cost.
//! The server binary is looked up beside the bench's own directory (`../lancet`).
#![recursion_limit = "256"] // proving `stages.rs`'s request future Sync overflowed 128 once

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

// Same allocator as the `lancet` binary, so the ratio measures the server, not the allocator;
// counted, so `--hold` can print allocations per call of the loops run in this process.
#[global_allocator]
static ALLOCATOR: Counted = Counted(mimalloc::MiMalloc);

struct Counted(mimalloc::MiMalloc);

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// On only for `--hold` loops on one core (not `--served-here`): one counter written from two
/// cores bounces its cache line on every allocation (the whole bench runs lance on two cores).
static COUNTING: AtomicBool = AtomicBool::new(false);

fn counted() {
    if COUNTING.load(Ordering::Relaxed) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
    served_here::count_allocation();
}

// SAFETY: every call is passed to mimalloc unchanged; the counter is only a relaxed add.
unsafe impl std::alloc::GlobalAlloc for Counted {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        counted();
        unsafe { self.0.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        counted();
        unsafe { self.0.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        counted();
        unsafe { self.0.realloc(ptr, layout, size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { self.0.dealloc(ptr, layout) }
    }
}

#[path = "support/ab.rs"]
mod ab;
#[path = "support/alternate.rs"]
mod alternate;
#[path = "support/bare.rs"]
mod bare;
#[path = "support/loaded.rs"]
mod loaded;
#[path = "support/rows.rs"]
mod rows;
#[path = "support/served.rs"]
mod served;
#[path = "support/served_here.rs"]
mod served_here;
use rows::{WORDS, arg, vector};
use served::{Served, client};

use lance::Dataset;
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
            Read::Count if count_all() => json!({}),
            Read::Count => json!({"predicate": format!("category = {}", i % 10)}),
        };
        serde_json::to_vec(&b).unwrap()
    }

    /// The rows (or the count) an answer holds.
    fn rows(self, answer: &[u8]) -> usize {
        if self == Read::Count {
            return std::str::from_utf8(answer).unwrap().trim().parse().unwrap();
        }
        arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(answer), None)
            .unwrap()
            .map(|b| b.unwrap().num_rows())
            .sum()
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
        self.rows(&bytes)
    }

    /// The same read through the server's whole request service, called in this process:
    /// every stage and the handler, but no socket, no hyper and no second process.
    async fn in_service(self, service: &lancet::http::Service, i: usize) -> usize {
        let response = call_service(service, "POST", self.path(), self.body(i)).await;
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        assert!(status.is_success(), "{status}: {bytes:?}");
        self.rows(&bytes)
    }

    /// The `i`th call's read, as lance is asked for it.
    fn query(self, i: usize) -> bare::Query {
        match self {
            Read::Vector => bare::Query::Vector(query_vector(i)),
            Read::Fts => bare::Query::Fts(word(i)),
            Read::Count => {
                bare::Query::Count((!count_all()).then(|| format!("category = {}", i % 10)))
            }
        }
    }

    /// The same read on lance in this process.
    async fn in_process(self, ds: &Dataset, i: usize) -> usize {
        bare::run(ds, self.query(i)).await.rows()
    }
}

/// `method path` with a JSON `body` through `service`, as a loopback client with the bench's
/// key sends it.
async fn call_service(
    service: &lancet::http::Service,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> axum::response::Response {
    use tower::ServiceExt as _;
    let mut request = axum::http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .header("accept", "application/vnd.apache.arrow.stream")
        .header("authorization", format!("Bearer {KEY}"))
        .body(axum::body::Body::from(body))
        .unwrap();
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(std::net::SocketAddr::from((
            [127, 0, 0, 1],
            1,
        ))));
    service.clone().oneshot(request).await.unwrap()
}

/// The server's request service on `data`, built in this process (upkeep off, as the served
/// one runs here).
async fn in_service(data: &str) -> lancet::http::Service {
    in_service_with(data, &[]).await
}

/// The same with more `serve` options.
async fn in_service_with(data: &str, extra: &[String]) -> lancet::http::Service {
    let app = app_with(data, extra).await;
    lancet::http::service(app, 64 << 20, Duration::from_secs(30))
}

/// The server's state on `data`, built in this process (upkeep off).
async fn app(data: &str) -> Arc<lancet::App> {
    app_with(data, &[]).await
}

async fn app_with(data: &str, extra: &[String]) -> Arc<lancet::App> {
    let args = ["--data", data, "--upkeep", "false"].into_iter();
    let config =
        lancet::config::ServeConfig::from_args(args.chain(extra.iter().map(String::as_str)))
            .unwrap();
    lancet::server::build_app(&config).await.unwrap()
}

/// `LANCET_BENCH_URING=1`: lance's io_uring reader (`file+uring://`) for the in-process loop.
fn location_for_in_process(location: &str) -> String {
    let uring = std::env::var("LANCET_BENCH_URING").is_ok_and(|v| v == "1");
    if uring && !location.contains("://") {
        format!("file+uring://{location}")
    } else {
        location.to_string()
    }
}

/// `--count-all`: count without a predicate, which lance answers from the manifest: what is
/// left of a count is then the request's path, without lance's run-to-run spread.
fn count_all() -> bool {
    static ALL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALL.get_or_init(|| std::env::args().any(|a| a == "--count-all"))
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

/// One kind of call (its argument picks the query).
type Call<'a> = Box<dyn FnMut(usize) -> std::pin::Pin<Box<dyn Future<Output = usize> + 'a>> + 'a>;

/// p50 and p99 (ms) of each kind of call: `n` calls of each after 30 to warm up. By default
/// each kind runs its calls back to back (every call finds the caches and threads its kind
/// left warm: the regime of the issue's figures). `--interleave`: one call of each kind in
/// turn, the order rotating, so drift on this noisy machine falls on all kinds alike and
/// every call finds what another kind left (the regime of a server whose requests come
/// between other work).
async fn latencies(n: usize, calls: &mut [Call<'_>]) -> Vec<(f64, f64)> {
    let k = calls.len();
    let mut lat = vec![Vec::with_capacity(n); k];
    if std::env::args().any(|a| a == "--interleave") {
        for i in 0..30 {
            for call in calls.iter_mut() {
                call(i).await;
            }
        }
        for i in 0..n {
            for j in 0..k {
                let which = (i + j) % k;
                let t = Instant::now();
                calls[which](i).await;
                lat[which].push(t.elapsed());
            }
        }
    } else {
        for (call, lat) in calls.iter_mut().zip(&mut lat) {
            for i in 0..30 {
                call(i).await;
            }
            for i in 0..n {
                let t = Instant::now();
                call(i).await;
                lat.push(t.elapsed());
            }
        }
    }
    lat.iter_mut().map(|l| (p(l, 0.5), p(l, 0.99))).collect()
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

struct Setup<'a> {
    base: &'a str,
    location: &'a str,
    server_pid: u32,
    /// The server's request service built in this process on the same data directory.
    service: lancet::http::Service,
}

async fn measure(setup: &Setup<'_>, label: &str, n: usize, secs: f64) {
    let (base, server_pid) = (setup.base, setup.server_pid);
    let ds = Arc::new(Dataset::open(setup.location).await.unwrap());
    let http = client(KEY);
    let floor_cpu = process_cpu_ns(server_pid);
    let started = Instant::now();
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
    // What the transport alone costs per request: the floor's CPU in the server and in the
    // client (the bound in the table's last column).
    let hz_server = (process_cpu_ns(server_pid) - floor_cpu) as f64
        / 1e3
        / (hz * started.elapsed().as_secs_f64());
    println!(
        "\n== {label}: GET /healthz at 8 clients {hz:.0}/s, CPU µs/request: client {hz_cpu:.0}, server {hz_server:.0}"
    );
    println!(
        "| read | floor p50 | Lancet p50/p99 | in-service p50/p99 | in-process p50/p99 | diff | diff - floor | server | Lancet c=8/s | client CPU µs/call | in-process c=8/s | ratio | server CPU µs/req c=8 | in-process CPU µs/call c=8 | CPU ratio | bound: client here / elsewhere |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for read in [Read::Vector, Read::Fts, Read::Count] {
        let before = server_time(&http, base, read.route()).await;
        // The floor, the read through Lancet, through the request service in this process and
        // on lance in this process.
        let mut calls: Vec<Call<'_>> = vec![
            Box::new(|_| {
                let http = http.clone();
                Box::pin(async move {
                    let r = http.get(format!("{base}/healthz")).send().await.unwrap();
                    r.bytes().await.unwrap().len()
                })
            }),
            Box::new(|i| {
                let http = http.clone();
                Box::pin(async move { read.lancet(&http, base, i).await })
            }),
            Box::new(|i| Box::pin(read.in_service(&setup.service, i))),
            Box::new(|i| {
                let ds = ds.clone();
                Box::pin(async move { read.in_process(&ds, i).await })
            }),
        ];
        let lat = latencies(n, &mut calls).await;
        drop(calls);
        let (floor, a, svc, b) = (lat[0], lat[1], lat[2], lat[3]);
        let after = server_time(&http, base, read.route()).await;
        let server = (after.0 - before.0) / (after.1 - before.1) * 1e3;
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
        // The c=8 ratio a server whose only cost over lance is the HTTP floor's could reach
        // once the cores are full: with this client on these cores (its CPU per call of this
        // read, not the floor's), and with the client on another machine.
        let bound_here = in_process_us / (in_process_us + hz_server + cpu);
        let bound_apart = in_process_us / (in_process_us + hz_server);
        println!(
            "| {} | {:.3} | {:.3}/{:.3} | {:.3}/{:.3} | {:.3}/{:.3} | {diff:.3} | {:.3} | {server:.3} | {ta:.0} | {cpu:.0} | {tb:.0} | {:.2} | {server_us:.0} | {in_process_us:.0} | {:.2} | {bound_here:.2} / {bound_apart:.2} |",
            read.name(),
            floor.0,
            a.0,
            a.1,
            svc.0,
            svc.1,
            b.0,
            b.1,
            diff - floor.0,
            ta / tb,
            in_process_us / server_us
        );
    }
}

/// Every thread of process `pid` (and the threads and processes it starts later) on the CPUs
/// of `list`.
fn pin(pid: u32, list: &str) {
    let status = std::process::Command::new("taskset")
        .args(["-a", "-cp", list, &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("taskset (util-linux) runs");
    assert!(status.success(), "taskset -a -cp {list} {pid}: {status}");
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

fn main() {
    // For the request service built in this process (`in_service`). SAFETY: no other thread
    // exists yet.
    unsafe { std::env::set_var("LANCET_BOOTSTRAP_KEY", KEY) };
    // Pinned (`--client-cpus`): this process moves to its cores before its runtime is built,
    // so the runtime (and lance's CPU pool, built on first use) is sized for the cores the
    // in-process loop runs on, as the server is for its own. Built on all cores and moved
    // after, it ran two async workers on one core, and lance in-process paid for their
    // switching: a ratio flattering the server.
    if let Some(list) = cpu_list("--client-cpus") {
        pin(std::process::id(), &list);
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench());
}

/// The value of option `name`: a taskset CPU list.
fn cpu_list(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == name)?;
    Some(args.get(at + 1).expect("a CPU list").clone())
}

async fn bench() {
    let rows = arg("--rows", 100_000);
    let n = arg("--n", 400);
    let secs = arg("--secs", 4) as f64;
    let bin = served::server_binary();
    let dir = loaded::Data::from_args();
    let start = || {
        Served::start_with(
            &bin,
            dir.path(),
            &[],
            &[("LANCET_BOOTSTRAP_KEY", KEY), ("LANCET_UPKEEP", "false")],
        )
    };
    // `--server-cpus LIST --client-cpus LIST` (taskset lists: 1 and 0 here, 0-1 and 2-3 on
    // four cores): the server and this process (the clients and the in-process loop) each on
    // their own cores, so c=8 is measured with a client that takes none of the server's.
    let (server_cpus, client_cpus) = (cpu_list("--server-cpus"), cpu_list("--client-cpus"));
    // The server sizes itself (async workers, run slots, lance's CPU pool) by the cores it
    // starts on: it is started while this process is on the server's cores (a child inherits
    // them), and this process moves to its own cores after.
    let start = || {
        if let Some(list) = &server_cpus {
            pin(std::process::id(), list);
        }
        let served = start();
        if let Some(list) = &client_cpus {
            pin(std::process::id(), list);
        }
        served
    };
    let mut served = start();
    let mut base = served.base.clone();
    let http = client(KEY);
    let location = loaded::table(&http, &base, rows).await;
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
    // `--compact`: only compact the table (into `--data DIR`, for later runs), then stop.
    if std::env::args().any(|a| a == "--compact") {
        return loaded::compact(&http, &base).await;
    }
    if let Some(read) = hold() {
        println!("server pid {} at {base}", served.child.id());
        let clients = arg("--clients", 1);
        let stop = Instant::now() + Duration::from_secs_f64(secs);
        // `--in-process`: the same loop on lance in this process (profile the bench itself).
        let ds = std::env::args()
            .any(|a| a == "--in-process")
            .then(|| location_for_in_process(&location))
            .map(|l| async move { Dataset::open(&l).await });
        let ds = match ds {
            Some(open) => Some(Arc::new(open.await.unwrap())),
            None => None,
        };
        // `--in-service`: the loop through the server's request service built in this
        // process on the same data directory (what the server adds, without the network).
        let service = match std::env::args().any(|a| a == "--in-service") {
            true => Some(in_service(dir.path()).await),
            false => None,
        };
        // `--in-store`: the read on lance as above, on the dataset the server's store holds
        // (its session, object-store wrappers and consistency check) rather than one opened
        // here: what Lancet's way of holding tables costs lance, without the request path.
        let store = match std::env::args().any(|a| a == "--in-store") {
            true => Some(Arc::new((app(dir.path()).await, location.clone()))),
            false => None,
        };
        // `--served-here`: the loop over HTTP to the request service served from a thread of
        // this process on `--server-cpus` (1 unless told): the socket and hyper without the
        // second process.
        let served_here = std::env::args().any(|a| a == "--served-here");
        COUNTING.store(!served_here, Ordering::Relaxed);
        if served_here {
            let data = dir.path().to_string();
            let cpus = server_cpus.clone().unwrap_or_else(|| "1".into());
            // `--burn US`: served here, a stand-in that burns US µs per call instead of Lancet.
            let burn = arg("--burn", 0) as u64;
            // `--thrash KIB`: the stand-in writes over that much memory as it burns.
            let thrash = arg("--thrash", 0);
            // `--bare`: the least any server must do (`bare`), on lance opened here.
            let bare = std::env::args()
                .any(|a| a == "--bare")
                .then(|| location.clone());
            let addr = served_here::start(cpus, move || async move {
                match (burn, bare) {
                    // `--bare --from-store`: bare, reading the dataset from Lancet's store
                    // (`--from-store-once`: taken from it once, at the start).
                    (0, Some(location)) if std::env::args().any(|a| a == "--from-store") => {
                        bare::service_on(bare::Source::Store(app(&data).await, location))
                    }
                    (0, Some(location)) if std::env::args().any(|a| a == "--from-store-once") => {
                        let store = bare::Source::Store(app(&data).await, location);
                        bare::service_on(bare::Source::Opened(store.dataset().await))
                    }
                    (0, Some(location)) => bare::service(&location).await,
                    (0, None) => in_service(&data).await,
                    (us, _) => served_here::burner(us, thrash),
                }
            });
            base = format!("http://{addr}");
        }
        // `--alternate ROUNDS`: in-process, bare and Lancet in turn in this process.
        if std::env::args().any(|a| a == "--alternate") {
            COUNTING.store(false, Ordering::Relaxed);
            let cpus = server_cpus.clone().unwrap_or_else(|| "1".into());
            alternate::run(read, &location, dir.path(), cpus, clients).await;
            return;
        }
        // `--ab`: the three paths in turn in this process (see `ab`).
        if std::env::args().any(|a| a == "--ab") {
            ab::run(read, &location, dir.path(), stop).await;
            return;
        }
        let calls = Arc::new(AtomicU64::new(0));
        let allocations = ALLOCATIONS.load(Ordering::Relaxed);
        let served_here_cpu = served_here::cpu_ns();
        let tasks: Vec<_> = (0..clients)
            .map(|c| {
                let (ds, http, base, calls, service, store) = (
                    ds.clone(),
                    http.clone(),
                    base.clone(),
                    calls.clone(),
                    service.clone(),
                    store.clone(),
                );
                tokio::spawn(async move {
                    let mut i = c * 1_000_003;
                    let latest = lancet::store::At {
                        branch: None,
                        version: None,
                    };
                    while Instant::now() < stop {
                        match (&ds, &service, &store) {
                            (Some(ds), _, _) => read.in_process(ds, i).await,
                            (None, Some(service), _) => read.in_service(service, i).await,
                            (None, None, Some(store)) => {
                                let (app, location) = &**store;
                                let ds = app.store.read(location, &latest).await.unwrap();
                                read.in_process(&ds, i).await
                            }
                            (None, None, None) => read.lancet(&http, &base, i).await,
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
        let calls = calls.load(Ordering::Relaxed);
        // Allocations of this process per call: the loop's own work when it runs here
        // (`--in-process`, `--in-service`), the HTTP client's otherwise.
        println!(
            "{:.0} allocations per call",
            (ALLOCATIONS.load(Ordering::Relaxed) - allocations) as f64 / calls.max(1) as f64
        );
        if std::env::args().any(|a| a == "--served-here") {
            let ns = served_here::cpu_ns() - served_here_cpu;
            println!(
                "served here: {:.0} µs of CPU per call in its threads",
                ns as f64 / 1e3 / calls.max(1) as f64
            );
        }
        println!("{calls} calls");
        return;
    }
    // The whole bench compacts its table: a kept one would stay compacted for later runs.
    assert!(
        matches!(dir, loaded::Data::Fresh(_)),
        "--data is for --hold runs and --compact: the whole bench compacts the table it loads"
    );
    let setup = Setup {
        base: &base,
        location: &location,
        server_pid: served.child.id(),
        service: in_service(dir.path()).await,
    };
    measure(&setup, "fresh (40 fragments)", n, secs).await;
    loaded::compact(&http, &base).await;
    measure(&setup, "compacted", n, secs).await;
}
