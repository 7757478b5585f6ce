//! `--hold R --alternate ROUNDS`: in-process lance, bare (`bare.rs`) and Lancet's request
//! service (and any `--variant` of it), all in this one process and all on the serving CPU,
//! each for `--phase-secs` (2) in turn, ROUNDS times. This machine's speed drifts by a third
//! over minutes, and separate processes differ by more than the gaps sought; phases seconds
//! apart in one process see the same machine, so the ratio taken within each round is what
//! compares. CPU per call is the serving threads' run time (`/proc/self/task/*/schedstat`,
//! nanoseconds), the wall time per call that of the window.
//!
//! `--together`: the paths at once rather than in turn, each at `--clients`, on the same CPU,
//! each path's CPU told apart by its own runtime's threads (lance's CPU pool, shared, is
//! printed apart). Every path then sees exactly the same machine, and one another's caches:
//! the way to compare two builds or settings of Lancet, not the regime of a lone server.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lance::Dataset;

use crate::Read;
use crate::served_here;

#[path = "stages.rs"]
mod stages;

/// One way of serving the read.
enum Path {
    /// Lance on a dataset opened here, `clients` tasks on the serving CPU's runtime; each
    /// call after this long asleep (as a server waits for its client's next request).
    InProcess(tokio::runtime::Handle, Arc<Dataset>, Duration),
    /// Over loopback HTTP to a service served here.
    Http(String),
}

/// The name of the threads of path `k`'s runtime.
fn threads(k: usize) -> String {
    format!("{}-{k}", served_here::THREAD)
}

/// What one phase measured.
#[derive(Clone, Copy)]
struct Phase {
    calls: u64,
    cpu_us: f64,
    wall_us: f64,
    /// Context switches of the path's own threads per call (lance's pool not counted).
    switches: f64,
    /// Allocations of the path's own threads per call (lance's pool not counted).
    allocations: f64,
}

/// Runs the alternation and prints each round and the summary.
pub async fn run(read: Read, location: &str, data: &str, cpus: String, clients: usize) {
    let rounds = crate::arg("--alternate", 5);
    let phase = Duration::from_secs_f64(crate::arg("--phase-secs", 2) as f64);
    let ds = Arc::new(Dataset::open(location).await.unwrap());
    let together = std::env::args().any(|a| a == "--together");
    // `--allocs`: allocations per call of each path (costs every path an atomic add each).
    if std::env::args().any(|a| a == "--allocs") {
        served_here::count_paths();
    }
    let mut paths = vec![
        (
            "in-process".to_string(),
            Path::InProcess(
                served_here::runtime(cpus.clone(), &threads(0)),
                ds.clone(),
                Duration::ZERO,
            ),
        ),
        ("bare".to_string(), served(&cpus, 1, bare(location))),
        ("lancet".to_string(), served(&cpus, 2, lancet(data, vec![]))),
    ];
    // `--variant "ARGS"` (repeatable): Lancet built with these `serve` options as well; with
    // `+logged` among them, logging as the `lancet` binary does (see `served`).
    for args in variants() {
        let logged = args.split_whitespace().any(|a| a == "+logged");
        let extra = args
            .split_whitespace()
            .filter(|a| *a != "+logged")
            .map(str::to_string)
            .collect();
        let k = paths.len();
        let path = served_logged(&cpus, k, logged, lancet(data, extra));
        paths.push((format!("lancet {args}"), path));
    }
    // `--bare-store`: bare again, each read's dataset from Lancet's store (`Store::read`): what
    // Lancet's way of holding tables costs lance, without Lancet's request path.
    if std::env::args().any(|a| a == "--bare-store") {
        let (k, data, location) = (paths.len(), data.to_string(), location.to_string());
        let make = move || async move {
            let app = crate::app(&data).await;
            crate::bare::service_on(crate::bare::Source::Store(app, location))
        };
        paths.push(("bare from store".into(), served(&cpus, k, make)));
    }
    // `--bare-spec`: bare from the store, searching through Lancet's query code.
    if std::env::args().any(|a| a == "--bare-spec") {
        let (k, data, location) = (paths.len(), data.to_string(), location.to_string());
        let make = move || async move {
            let app = crate::app(&data).await;
            crate::bare::service_with(crate::bare::Source::Store(app, location), true)
        };
        paths.push(("bare, Lancet's query".into(), served(&cpus, k, make)));
    }
    // `--bare-staged`: bare from the store behind Lancet's request stages (`Pipeline`: metrics,
    // admission, context, credential, tenant admission and run slot, panic guard) but not its
    // router, extractors or handler: the stages' cost apart from the route's.
    if std::env::args().any(|a| a == "--bare-staged") {
        let (k, data, location) = (paths.len(), data.to_string(), location.to_string());
        let make = move || async move {
            use lancet::http::pipeline::{Pipeline, observe::RouteNames};
            let app = crate::app(&data).await;
            let bare = crate::bare::service_on(crate::bare::Source::Store(app.clone(), location));
            let names = RouteNames::new(["/v1/table/{id}/query", "/v1/table/{id}/count_rows"]);
            let staged = Pipeline::new(app, Arc::new(names), Duration::from_secs(30), bare);
            tower::util::BoxCloneSyncService::new(staged)
        };
        paths.push(("bare in Lancet's stages".into(), served(&cpus, k, make)));
    }
    // `--bare-stages LIST` (repeatable): bare behind only the named stages (`stages.rs`).
    for (list, names) in stages::lists() {
        let (k, data, location) = (paths.len(), data.to_string(), location.to_string());
        let label = format!("bare + {list}");
        let make = move || async move { stages::service(&data, location, &list, &names).await };
        paths.push((label, served(&cpus, k, make)));
    }
    // `--idle-us US`: in-process again, its thread asleep US µs before each call (the CPU idle,
    // as a server's is while its answer travels and the next request comes): what that idle
    // costs lance itself. Meant for one client (the sleep holds the runtime's thread).
    let idle = crate::arg("--idle-us", 0);
    if idle > 0 {
        let k = paths.len();
        let runtime = served_here::runtime(cpus.clone(), &threads(k));
        let idle = Duration::from_micros(idle as u64);
        paths.push((
            format!("in-process idle {idle:?}"),
            Path::InProcess(runtime, ds, idle),
        ));
    }
    if together {
        return run_together(read, &paths, clients, rounds, phase).await;
    }
    println!(
        "{} {clients} client(s), {rounds} rounds of {:.1} s per path; CPU µs per call (wall µs \
         per call), in-process over each path in that round",
        read.name(),
        phase.as_secs_f64()
    );
    let mut all: Vec<Vec<Phase>> = vec![vec![]; paths.len()];
    for round in 1..=rounds {
        let mut line = format!("round {round:>2}:");
        for (k, (name, path)) in paths.iter().enumerate() {
            // A short unmeasured run first, so each window starts with the path's own caches.
            one_phase(read, path, k, clients, Duration::from_millis(250)).await;
            let p = one_phase(read, path, k, clients, phase).await;
            let ratio = all[0]
                .last()
                .map_or(1.0, |base: &Phase| base.cpu_us / p.cpu_us);
            let ratio = if k == 0 { 1.0 } else { ratio };
            line += &format!("  {name} {:.0} ({:.0}) {ratio:.3}", p.cpu_us, p.wall_us);
            all[k].push(p);
        }
        println!("{line}");
    }
    summary(&paths, &all);
}

fn variants() -> Vec<String> {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .filter(|w| w[0] == "--variant")
        .map(|w| w[1].clone())
        .collect()
}

fn served<F, Fut>(cpus: &str, k: usize, make: F) -> Path
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = lancet::http::Service>,
{
    served_logged(cpus, k, false, make)
}

/// `--logged` (or `logged`): the path logs as the `lancet` binary does by default
/// (`LANCET_LOG`, `LANCET_LOG_FORMAT=json`; to stderr, which the caller sends where it likes).
fn served_logged<F, Fut>(cpus: &str, k: usize, logged: bool, make: F) -> Path
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = lancet::http::Service>,
{
    let logged = logged || std::env::args().any(|a| a == "--logged");
    let logs = logged.then(|| {
        let json = std::env::var("LANCET_LOG_FORMAT").is_ok_and(|f| f == "json");
        lancet::logging::dispatch(match json {
            true => lancet::config::LogFormat::Json,
            false => lancet::config::LogFormat::Text,
        })
    });
    let addr = served_here::start_named(cpus.to_string(), &threads(k), logs, make);
    Path::Http(format!("http://{addr}"))
}

fn bare(location: &str) -> impl FnOnce() -> Served + Send + 'static {
    let location = location.to_string();
    move || Box::pin(async move { crate::bare::service(&location).await }) as Served
}

fn lancet(data: &str, extra: Vec<String>) -> impl FnOnce() -> Served + Send + 'static {
    let data = data.to_string();
    move || Box::pin(async move { crate::in_service_with(&data, &extra).await }) as Served
}

type Served = std::pin::Pin<Box<dyn Future<Output = lancet::http::Service>>>;

/// `clients` loops of the read on `path` until `stop`, counting calls in `calls`.
fn spawn(
    read: Read,
    path: &Path,
    clients: usize,
    stop: Instant,
    calls: &Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    // Each window starts its clients at other rows (the same words or vectors every window
    // would leave the answer's pages warmer than a server's are).
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as usize);
    (0..clients)
        .map(|c| {
            let calls = calls.clone();
            let mut i = c * 1_000_003 + salt;
            match path {
                Path::InProcess(runtime, ds, idle) => {
                    let (ds, idle) = (ds.clone(), *idle);
                    runtime.spawn(async move {
                        while Instant::now() < stop {
                            if !idle.is_zero() {
                                std::thread::sleep(idle);
                            }
                            read.in_process(&ds, i).await;
                            calls.fetch_add(1, Ordering::Relaxed);
                            i += 1;
                        }
                    })
                }
                Path::Http(base) => {
                    let (http, base) = (crate::client(crate::KEY), base.clone());
                    tokio::spawn(async move {
                        while Instant::now() < stop {
                            read.lancet(&http, &base, i).await;
                            calls.fetch_add(1, Ordering::Relaxed);
                            i += 1;
                        }
                    })
                }
            }
        })
        .collect()
}

/// `clients` loops of the read on `path` for `secs`.
async fn one_phase(read: Read, path: &Path, k: usize, clients: usize, secs: Duration) -> Phase {
    let calls = Arc::new(AtomicU64::new(0));
    let switches = || served_here::switches_of(|comm| comm == threads(k));
    let (cpu, switched) = (served_here::cpu_ns(), switches());
    let allocated = served_here::allocations_of(k);
    let started = Instant::now();
    for t in spawn(read, path, clients, started + secs, &calls) {
        t.await.unwrap();
    }
    let wall = started.elapsed();
    let cpu = served_here::cpu_ns() - cpu;
    let mut p = phase(calls.load(Ordering::Relaxed), cpu, wall, clients);
    p.switches = switches().saturating_sub(switched) as f64 / p.calls as f64;
    p.allocations = (served_here::allocations_of(k) - allocated) as f64 / p.calls as f64;
    p
}

fn phase(calls: u64, cpu_ns: u64, wall: Duration, clients: usize) -> Phase {
    let n = calls.max(1);
    Phase {
        calls: n,
        cpu_us: cpu_ns as f64 / 1e3 / n as f64,
        // Per client: the latency each client saw, on average.
        wall_us: wall.as_secs_f64() * 1e6 * clients as f64 / n as f64,
        switches: 0.0,
        allocations: 0.0,
    }
}

/// Every path at once, `rounds` windows of `secs`; each path's CPU from its own threads.
async fn run_together(
    read: Read,
    paths: &[(String, Path)],
    clients: usize,
    rounds: usize,
    secs: Duration,
) {
    println!(
        "{} {clients} client(s) on each of {} paths at once, {rounds} windows of {:.1} s; CPU \
         µs per call of each path's own threads (wall µs per call)",
        read.name(),
        paths.len(),
        secs.as_secs_f64()
    );
    let mut all: Vec<Vec<Phase>> = vec![vec![]; paths.len()];
    for round in 1..=rounds {
        let counters: Vec<_> = paths.iter().map(|_| Arc::new(AtomicU64::new(0))).collect();
        let cpu = |k: usize| served_here::cpu_ns_of(|comm| comm == threads(k));
        let pool = || served_here::cpu_ns_of(|comm| comm == "lance-cpu");
        let (before, pool_before) = ((0..paths.len()).map(cpu).collect::<Vec<_>>(), pool());
        let started = Instant::now();
        let tasks: Vec<_> = paths
            .iter()
            .zip(&counters)
            .flat_map(|((_, path), calls)| spawn(read, path, clients, started + secs, calls))
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let wall = started.elapsed();
        let calls: u64 = counters.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        let mut line = format!(
            "round {round:>2}: lance-cpu {:.0} µs/call",
            (pool() - pool_before) as f64 / 1e3 / calls.max(1) as f64
        );
        for (k, (name, _)) in paths.iter().enumerate() {
            let p = phase(
                counters[k].load(Ordering::Relaxed),
                cpu(k) - before[k],
                wall,
                clients,
            );
            line += &format!("  {name} {:.0} ({:.0})", p.cpu_us, p.wall_us);
            all[k].push(p);
        }
        println!("{line}");
    }
    summary(paths, &all);
}

fn summary(paths: &[(String, Path)], all: &[Vec<Phase>]) {
    println!(
        "path: mean CPU µs/call, mean wall µs/call; in-process over path per round: mean \
              [min, max]; wall minus in-process per round: mean ± sd; context switches (and with --allocs \
         allocations) per call"
    );
    for (k, (name, _)) in paths.iter().enumerate() {
        let mean =
            |f: &dyn Fn(usize) -> f64| (0..all[k].len()).map(f).sum::<f64>() / all[k].len() as f64;
        let ratios: Vec<f64> = (0..all[k].len())
            .map(|r| all[0][r].cpu_us / all[k][r].cpu_us)
            .collect();
        let diffs: Vec<f64> = (0..all[k].len())
            .map(|r| all[k][r].wall_us - all[0][r].wall_us)
            .collect();
        let (rm, dm) = (avg(&ratios), avg(&diffs));
        let sd = (diffs.iter().map(|d| (d - dm).powi(2)).sum::<f64>()
            / (diffs.len().max(2) - 1) as f64)
            .sqrt();
        let allocations = match std::env::args().any(|a| a == "--allocs") {
            true => format!("{:.0} allocs  ", mean(&|r| all[k][r].allocations)),
            false => String::new(),
        };
        println!(
            "{name:<24} {:>6.0} {:>6.0}  {rm:.3} [{:.3}, {:.3}]  {dm:+.0} ± {sd:.0}  {:.2} sw  \
             {allocations}({} calls)",
            mean(&|r| all[k][r].cpu_us),
            mean(&|r| all[k][r].wall_us),
            ratios.iter().copied().fold(f64::INFINITY, f64::min),
            ratios.iter().copied().fold(0.0, f64::max),
            mean(&|r| all[k][r].switches),
            all[k].iter().map(|p| p.calls).sum::<u64>(),
        );
    }
}

fn avg(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}
