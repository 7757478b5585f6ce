//! The one wasmtime Engine: its configuration, the epoch ticker that enforces timeouts, the
//! allow-listed imports, and the key that says which precompiled code it can load.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::{
    Caller, Config, Engine, InstanceAllocationStrategy, Linker, OptLevel, PoolingAllocationConfig,
};

use crate::UdfError;
use crate::instance::HostState;
use crate::limits::Limits;

/// Epoch length: timeouts are enforced to within one tick.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Most log bytes kept from one guest call (the last line is attached to trap messages).
const MAX_LOG_LINE: usize = 1024;
/// Lines a guest may log per call before further lines are dropped: a guest must not be able
/// to flood the server's log.
pub(crate) const LOG_LINES_PER_CALL: u32 = 16;

/// Builds the engine: pooling allocator if this machine allows it, on-demand otherwise.
/// Returns whether pooling is in use.
pub(crate) fn build_engine(limits: &Limits, pool_slots: u32) -> Result<(Engine, bool), UdfError> {
    let mut base = Config::new();
    base.epoch_interruption(true)
        .max_wasm_stack(limits.max_stack_bytes)
        .cranelift_opt_level(OptLevel::Speed)
        .parallel_compilation(true);
    // For profiling guests: /tmp/perf-<pid>.map names each compiled Wasm function, so
    // `perf report` shows guest symbols (build the module unstripped to get Rust names).
    if std::env::var_os("LANCET_UDF_PERFMAP").is_some() {
        base.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    // wasmtime is built without its `threads` feature: no shared memories, no guest threads.

    let mut pool = PoolingAllocationConfig::new();
    let memory = limits.max_memory_bytes.next_multiple_of(64 << 10);
    pool.total_core_instances(pool_slots)
        .total_memories(pool_slots)
        .total_tables(pool_slots)
        .max_memories_per_module(1)
        .max_tables_per_module(1)
        .max_memory_size(memory)
        // Reused slots keep this much memory paged in, so a new instance of a module starts
        // without page faults for its data segment and first allocations.
        .linear_memory_keep_resident(1 << 20);
    let mut pooled = base.clone();
    pooled.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    match Engine::new(&pooled) {
        Ok(engine) => Ok((engine, true)),
        Err(err) => {
            tracing::warn!(
                "wasmtime pooling allocator unavailable ({err}); using on-demand instance allocation"
            );
            let engine = Engine::new(&base).map_err(|e| UdfError::Internal(e.to_string()))?;
            Ok((engine, false))
        }
    }
}

/// Linker offering exactly the allow-listed imports: `lancet.log(ptr, len)`, and
/// `lancet.embed` / `lancet.embed_take` (`crate::embed`).
pub(crate) fn build_linker(engine: &Engine) -> Result<Linker<HostState>, UdfError> {
    let mut linker = Linker::new(engine);
    linker
        .func_wrap("lancet", "log", guest_log)
        .and_then(|l| l.func_wrap("lancet", "embed", crate::embed::guest_embed))
        .and_then(|l| l.func_wrap("lancet", "embed_take", crate::embed::guest_embed_take))
        .map_err(|e| UdfError::Internal(e.to_string()))?;
    Ok(linker)
}

fn guest_log(mut caller: Caller<'_, HostState>, ptr: i32, len: i32) {
    if caller.data().log_lines_left == 0 {
        return;
    }
    caller.data_mut().log_lines_left -= 1;
    let Some(memory) = caller.get_export("memory").and_then(|e| e.into_memory()) else {
        return;
    };
    let start = ptr as u32 as usize;
    let len = (len as u32 as usize).min(MAX_LOG_LINE);
    let data = memory.data(&caller);
    let Some(bytes) = data.get(start..start.saturating_add(len)) else {
        return;
    };
    let line = String::from_utf8_lossy(bytes).into_owned();
    tracing::debug!(target: "lancet_udf::guest", "{line}");
    caller.data_mut().last_log = Some(line);
}

/// Names precompiled code by what the engine can load: wasmtime version, target, settings.
pub(crate) fn compatibility_key(engine: &Engine) -> String {
    struct Sha(Sha256);
    impl Hasher for Sha {
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
        fn finish(&self) -> u64 {
            unreachable!("only the digest is read")
        }
    }
    let mut h = Sha(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut h);
    hex::encode(&h.0.finalize()[..8])
}

/// Background thread advancing the engine's epoch every [`EPOCH_TICK`] while a guest may be
/// running; stops on drop.
///
/// An always-on ticker wakes every tick per engine on a server that runs no UDF at all (~400
/// wake-ups a second for the two engines, each a preemption of a request's thread on a small
/// machine). So a ticker sleeps until a deadline is set ([`deadline_ticks`], called before
/// every guest entry) and then gives at least that many ticks (and two more) before it sleeps
/// again. The window is counted in ticks, not time: on a loaded machine where sleeps overshoot,
/// a guest still gets interrupted after its ticks. No call end is tracked: a window that
/// outlives its call only costs some ticks.
pub(crate) struct EpochTicker {
    state: Arc<TickerState>,
    thread: Option<JoinHandle<()>>,
    registry: &'static Registry,
}

type Registry = Mutex<Vec<Arc<TickerState>>>;

struct TickerState {
    /// Ticks given so far (each one `increment_epoch`); only the ticker thread adds to it.
    ticks: AtomicU64,
    /// Tick count up to which the ticker keeps ticking.
    until: AtomicU64,
    stop: AtomicBool,
    thread: OnceLock<std::thread::Thread>,
}

/// Every running ticker, to open windows on: a deadline does not say which engine it is for.
static TICKERS: Registry = Mutex::new(Vec::new());

fn lock(registry: &Registry) -> std::sync::MutexGuard<'_, Vec<Arc<TickerState>>> {
    registry.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes every ticker give at least `ticks` more ticks (two more: the engine's epoch may be
/// one ahead of the ticker's count, and the current tick may be about to end).
fn keep_ticking(registry: &Registry, ticks: u64) {
    for t in lock(registry).iter() {
        let done = t.ticks.load(Ordering::Acquire);
        let before = t.until.fetch_max(
            done.saturating_add(ticks).saturating_add(2),
            Ordering::AcqRel,
        );
        // The ticker parks only after reading `until <= ticks`, and only it adds ticks: if the
        // window it may have seen was over, wake it (an unpark of a running thread is one
        // atomic operation).
        if before <= t.ticks.load(Ordering::Acquire)
            && let Some(thread) = t.thread.get()
        {
            thread.unpark();
        }
    }
}

impl EpochTicker {
    pub(crate) fn start(engine: Engine) -> Result<Self, UdfError> {
        Self::start_in(engine, &TICKERS)
    }

    fn start_in(engine: Engine, registry: &'static Registry) -> Result<Self, UdfError> {
        let state = Arc::new(TickerState {
            ticks: AtomicU64::new(0),
            until: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            thread: OnceLock::new(),
        });
        let shared = state.clone();
        let thread = std::thread::Builder::new()
            .name("lancet-udf-epoch".into())
            .spawn(move || {
                while !shared.stop.load(Ordering::Acquire) {
                    let done = shared.ticks.load(Ordering::Acquire);
                    if done >= shared.until.load(Ordering::Acquire) {
                        // The timeout is only a backstop; a window opening unparks.
                        std::thread::park_timeout(Duration::from_secs(1));
                        continue;
                    }
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                    shared.ticks.store(done + 1, Ordering::Release);
                }
            })
            .map_err(|e| UdfError::io("starting the epoch thread", e))?;
        let _ = state.thread.set(thread.thread().clone());
        lock(registry).push(state.clone());
        Ok(Self {
            state,
            thread: Some(thread),
            registry,
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        lock(self.registry).retain(|t| !Arc::ptr_eq(t, &self.state));
        self.state.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Epoch ticks to allow for `timeout`: rounded up, plus one because the current tick may be
/// about to end. Called right before a guest runs: it also has the tickers give those ticks.
pub(crate) fn deadline_ticks(timeout: Duration) -> u64 {
    let ticks = (timeout
        .as_nanos()
        .div_ceil(EPOCH_TICK.as_nanos())
        .min(u64::MAX as u128) as u64)
        .max(1)
        .saturating_add(1);
    keep_ticking(&TICKERS, ticks);
    ticks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_round_up_and_count_the_current_tick() {
        assert_eq!(deadline_ticks(Duration::from_millis(20)), 5);
        assert_eq!(deadline_ticks(Duration::from_millis(21)), 6);
        assert_eq!(deadline_ticks(Duration::ZERO), 2);
        assert!(deadline_ticks(Duration::MAX) > 1 << 40);
    }

    #[test]
    fn a_deadline_wakes_an_idle_ticker_for_its_ticks_then_it_sleeps() {
        // A registry of its own: other tests' deadlines must not wake this ticker.
        static REGISTRY: Registry = Mutex::new(Vec::new());
        let engine = Engine::new(Config::new().epoch_interruption(true)).unwrap();
        let ticker = EpochTicker::start_in(engine, &REGISTRY).unwrap();
        let state = ticker.state.clone();
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(state.ticks.load(Ordering::Acquire), 0, "idle: no ticks");
        keep_ticking(&REGISTRY, 5);
        let begun = std::time::Instant::now();
        while state.ticks.load(Ordering::Acquire) < 7 {
            assert!(
                begun.elapsed() < Duration::from_secs(10),
                "ticks did not come"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // The window was 7 ticks: then it sleeps again.
        std::thread::sleep(Duration::from_millis(100));
        let ticks = state.ticks.load(Ordering::Acquire);
        assert!(ticks <= 8, "{ticks} ticks after a 7-tick window");
        drop(ticker);
    }
}

/// A guest call's own time, host calls (a model's `embed`) excluded: each host call has its
/// own deadline, and a batch the host embeds for a guest must not use up the guest's time.
///
/// The limit counts the CPU time of the thread running the guest, not wall time: a backfill's
/// calls run on low-priority threads, and on a machine busy with requests such a thread may get
/// a few percent of a core, so a call needing 0.3 s of CPU could pass a 10 s wall limit and
/// fail, not retryably, for load another tenant made. Wall time is still bounded, at
/// [`WALL_FACTOR`] times the limit, so a call starved for good also ends. The epoch callback
/// runs on the guest's own thread (calls are synchronous), so the thread clock read there is
/// the guest's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GuestClock {
    armed: Mark,
    timeout: Duration,
    host: Spent,
}

/// A call may take this many times its time limit in wall time before it is stopped, however
/// little CPU it got.
pub(crate) const WALL_FACTOR: u32 = 10;

/// Where a thread's two clocks stood.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    wall: std::time::Instant,
    cpu: Duration,
}

/// Time between two marks on one thread.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Spent {
    wall: Duration,
    cpu: Duration,
}

impl Mark {
    pub(crate) fn now() -> Self {
        Self {
            wall: std::time::Instant::now(),
            cpu: thread_cpu_time(),
        }
    }

    /// Time since this mark, read on the thread that made it.
    pub(crate) fn elapsed(&self) -> Spent {
        Spent {
            wall: self.wall.elapsed(),
            cpu: thread_cpu_time().saturating_sub(self.cpu),
        }
    }
}

/// CPU time the calling thread has used. Where the platform has no thread clock, wall time
/// since the first read stands in (the limit is then a wall-time limit, as it used to be).
fn thread_cpu_time() -> Duration {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant.
        if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0 {
            return Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
        }
    }
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

impl GuestClock {
    pub(crate) fn new(timeout: Duration) -> Self {
        Self {
            armed: Mark::now(),
            timeout,
            host: Spent::default(),
        }
    }

    /// A new call starts with `timeout` of guest time. Called on the thread that runs it.
    pub(crate) fn arm(&mut self, timeout: Duration) {
        *self = Self::new(timeout);
    }

    pub(crate) fn add_host_time(&mut self, spent: Spent) {
        self.host.wall += spent.wall;
        self.host.cpu += spent.cpu;
    }

    /// At the epoch deadline: go on for the guest time left, or stop the guest (a trap its
    /// caller reports as the time limit).
    pub(crate) fn on_deadline(&self) -> wasmtime::UpdateDeadline {
        let spent = self.armed.elapsed();
        let cpu = spent.cpu.saturating_sub(self.host.cpu);
        let wall = spent.wall.saturating_sub(self.host.wall);
        let wall_bound = self.timeout.saturating_mul(WALL_FACTOR);
        if cpu >= self.timeout || wall >= wall_bound {
            wasmtime::UpdateDeadline::Interrupt
        } else {
            // Ticks are wall time: the CPU time left is the soonest the limit can be reached.
            let left = (self.timeout - cpu).min(wall_bound - wall);
            wasmtime::UpdateDeadline::Continue(deadline_ticks(left))
        }
    }
}

#[cfg(test)]
mod clock_tests {
    use super::*;

    fn spin(d: Duration) {
        let m = Mark::now();
        while m.elapsed().cpu < d {
            std::hint::black_box(0u64);
        }
    }

    #[test]
    fn cpu_time_counts_and_host_time_does_not() {
        let mut c = GuestClock::new(Duration::from_millis(20));
        spin(Duration::from_millis(30));
        assert!(matches!(
            c.on_deadline(),
            wasmtime::UpdateDeadline::Interrupt
        ));
        // The same time, spent in a host call: the guest still has time left.
        c.add_host_time(Spent {
            wall: Duration::from_secs(1),
            cpu: Duration::from_secs(1),
        });
        assert!(matches!(c.on_deadline(), wasmtime::UpdateDeadline::Continue(t) if t > 0));
        c.arm(Duration::from_millis(20));
        assert!(matches!(
            c.on_deadline(),
            wasmtime::UpdateDeadline::Continue(_)
        ));
    }

    #[test]
    fn time_off_the_cpu_counts_only_up_to_the_wall_bound() {
        // A starved thread looks like this one: wall time passes, little CPU time does.
        let c = GuestClock::new(Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(60));
        assert!(matches!(c.on_deadline(), wasmtime::UpdateDeadline::Continue(t) if t > 0));
        std::thread::sleep(Duration::from_millis(20) * WALL_FACTOR);
        assert!(matches!(
            c.on_deadline(),
            wasmtime::UpdateDeadline::Interrupt
        ));
    }

    #[test]
    fn the_thread_clock_is_this_threads() {
        let m = Mark::now();
        // Another thread's work is not ours.
        std::thread::spawn(|| spin(Duration::from_millis(50)))
            .join()
            .unwrap();
        assert!(m.elapsed().cpu < Duration::from_millis(40));
        assert!(m.elapsed().wall >= Duration::from_millis(50));
    }
}
