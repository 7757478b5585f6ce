//! The server's request service served over loopback HTTP from a thread of the bench's own
//! process, on its own cores and runtime: hyper and the socket as the `lancet` binary has
//! them, without the separate process. Against the `lancet` binary it names what the second
//! process costs; against the in-service loop, what the socket and hyper cost.

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

/// The name of the threads serving, so their CPU time can be told from the clients'.
pub const THREAD: &str = "served-here";

/// Starts the service `make` builds on a thread moved to the CPUs of `cpus` (a taskset list)
/// before its runtime is built, so the runtime sizes itself for them, as the server does.
/// Answers the address it listens on.
pub fn start<F, Fut>(cpus: String, make: F) -> SocketAddr
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = lancet::http::Service>,
{
    start_named(cpus, THREAD, None, make)
}

/// [`start`], its threads named `name` (which should begin with [`THREAD`]), and logging
/// through `logs` when given (as the `lancet` binary does through its own).
pub fn start_named<F, Fut>(
    cpus: String,
    name: &str,
    logs: Option<tracing::Dispatch>,
    make: F,
) -> SocketAddr
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = lancet::http::Service>,
{
    let (tx, rx) = mpsc::channel();
    let name = name.to_string();
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let logs = logs.map(|d| tracing::dispatcher::set_default(&d));
            let runtime = pinned(&cpus, &name, logs.is_some());
            runtime.block_on(serve(make, tx))
        })
        .unwrap();
    rx.recv().unwrap()
}

/// A runtime of its own on the CPUs of `cpus`, its threads named `name` (begin it with
/// [`THREAD`] to have lance run on it in-process counted as the serving threads are).
#[allow(dead_code)]
pub fn runtime(cpus: String, name: &str) -> tokio::runtime::Handle {
    let (tx, rx) = mpsc::channel();
    let name = name.to_string();
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let runtime = pinned(&cpus, &name, false);
            tx.send(runtime.handle().clone()).unwrap();
            runtime.block_on(std::future::pending::<()>());
        })
        .unwrap();
    rx.recv().unwrap()
}

/// Allocations made by the threads of each path `served-here-K` (index K), all of which run
/// on the serving CPU, so the counters never bounce between cores. The clients, on another
/// CPU, are not counted: a path's figure is its own.
static PATH_ALLOCATIONS: [AtomicU64; 32] = [const { AtomicU64::new(0) }; 32];

thread_local! {
    /// This thread's path index plus one (0: not a serving thread).
    static PATH: Cell<usize> = const { Cell::new(0) };
}

/// Whether allocations are counted per path (`--allocs`): off by default, since an atomic add
/// on every allocation costs a read some 20 µs (~3,000 allocations per full-text search).
static COUNTING_PATHS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns per-path allocation counting on.
#[allow(dead_code)]
pub fn count_paths() {
    COUNTING_PATHS.store(true, Ordering::Relaxed);
}

/// Counts one allocation against this thread's path, if it serves one and counting is on.
pub fn count_allocation() {
    if !COUNTING_PATHS.load(Ordering::Relaxed) {
        return;
    }
    let path = PATH.with(Cell::get);
    if path > 0 {
        PATH_ALLOCATIONS[path - 1].fetch_add(1, Ordering::Relaxed);
    }
}

/// Allocations the threads of path `k` have made.
#[allow(dead_code)]
pub fn allocations_of(k: usize) -> u64 {
    PATH_ALLOCATIONS
        .get(k)
        .map_or(0, |c| c.load(Ordering::Relaxed))
}

/// Marks this thread as serving the path its name ends with (`served-here-K`).
fn count_as(name: &str) {
    let k = name
        .rsplit('-')
        .next()
        .and_then(|k| k.parse::<usize>().ok());
    if let Some(k) = k.filter(|k| *k < PATH_ALLOCATIONS.len()) {
        PATH.with(|p| p.set(k + 1));
    }
}

/// Moves this thread to `cpus`, then builds a runtime there, its threads named `name` (and
/// logging through this thread's subscriber with `logged`).
fn pinned(cpus: &str, name: &str, logged: bool) -> tokio::runtime::Runtime {
    // SAFETY: gettid has no arguments and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    let status = std::process::Command::new("taskset")
        .args(["-cp", cpus, &tid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("taskset (util-linux) runs");
    assert!(status.success(), "taskset -cp {cpus} {tid}: {status}");
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    let logs = logged.then(|| tracing::dispatcher::get_default(|d| d.clone()));
    let counted_as = name.to_string();
    count_as(name);
    builder.on_thread_start(move || {
        count_as(&counted_as);
        // Every thread of the runtime logs as this one: the guard lives as long as the thread.
        if let Some(logs) = &logs {
            std::mem::forget(tracing::dispatcher::set_default(logs));
        }
    });
    builder.enable_all().thread_name(name).build().unwrap()
}

async fn serve<F, Fut>(make: F, tx: mpsc::Sender<SocketAddr>)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = lancet::http::Service>,
{
    use hyper_util::rt::TokioIo;
    let service = make().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    tx.send(listener.local_addr().unwrap()).unwrap();
    let http = hyper::server::conn::http1::Builder::new();
    loop {
        let (tcp, peer) = listener.accept().await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let connection = http.serve_connection(
            TokioIo::new(tcp),
            lancet::server::for_connection(service.clone(), peer),
        );
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
}

/// Nanoseconds of CPU the serving threads of this process have used: its own and lance's CPU
/// pool (`lance-cpu`; when serving here, only the served side runs lance). From each thread's
/// `schedstat` (nanoseconds), else its `stat` (clock ticks).
pub fn cpu_ns() -> u64 {
    cpu_ns_of(|comm| comm.starts_with(THREAD) || comm == "lance-cpu")
}

/// Nanoseconds of CPU the threads of this process whose name passes `counted` have used.
pub fn cpu_ns_of(counted: impl Fn(&str) -> bool) -> u64 {
    let mut total = 0;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let comm = comm.trim_end();
        if !counted(comm) {
            continue;
        }
        let schedstat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        if let Some(ns) = schedstat
            .split_whitespace()
            .next()
            .and_then(|f| f.parse::<u64>().ok())
        {
            total += ns;
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = [11, 12]
            .iter()
            .filter_map(|i| fields.get(*i).and_then(|f| f.parse::<u64>().ok()))
            .sum();
        // SAFETY: sysconf only reads its argument.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        total += ticks * 1_000_000_000 / hz;
    }
    total
}

/// Context switches (voluntary and not) of the threads of this process whose name passes
/// `counted`: each park and wake-up of a serving thread is one, so their count per call says
/// how often a path's threads hand the CPU over, a figure free of the machine's noise.
pub fn switches_of(counted: impl Fn(&str) -> bool) -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    let mut total = 0;
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !counted(comm.trim_end()) {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        total += status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum::<u64>();
    }
    total
}

/// A service that answers every request with the count `10000` after burning `micros` of this
/// thread's CPU: a stand-in for lance's work of a known cost, so that served here its CPU per
/// call over `micros` is what HTTP and the socket cost at that call rate on this machine,
/// whatever the server does.
/// With `thrash_kib` > 0 the burning writes over that much memory, line by line, as a read's
/// work does: the request path then runs with caches another working set has filled.
pub fn burner(micros: u64, thrash_kib: usize) -> lancet::http::Service {
    tower::util::BoxCloneSyncService::new(tower::service_fn(
        move |_request: axum::http::Request<axum::body::Body>| async move {
            burn(micros, thrash_kib);
            Ok::<_, std::convert::Infallible>(axum::response::Response::new(
                axum::body::Body::from("10000"),
            ))
        },
    ))
}

/// Spins (or writes over `thrash_kib` of memory) until this thread has used `micros` more
/// µs of CPU.
pub fn burn(micros: u64, thrash_kib: usize) {
    let now = || {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid timespec to write.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
    };
    let until = now() + micros * 1_000;
    if thrash_kib == 0 {
        while now() < until {
            std::hint::spin_loop();
        }
        return;
    }
    thread_local! {
        static MEMORY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    MEMORY.with_borrow_mut(|memory| {
        memory.resize(thrash_kib << 10, 0);
        let mut at = 0;
        while now() < until {
            // A thousand cache lines between looks at the clock.
            for _ in 0..1024 {
                memory[at] = memory[at].wrapping_add(1);
                at = (at + 64) % memory.len();
            }
        }
        std::hint::black_box(&memory);
    });
}
