//! The one wasmtime Engine: its configuration, the epoch ticker that enforces timeouts, the
//! allow-listed imports, and the key that says which precompiled code it can load.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

/// Linker offering exactly the allow-listed imports: `lancet.log(ptr, len)`.
pub(crate) fn build_linker(engine: &Engine) -> Result<Linker<HostState>, UdfError> {
    let mut linker = Linker::new(engine);
    linker
        .func_wrap("lancet", "log", guest_log)
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
/// An always-on ticker wakes twice per tick per engine on a server that runs no UDF at all
/// (~400 wake-ups a second for the two engines, each a preemption of a request's thread on a
/// small machine). So the ticker sleeps until a deadline is set ([`deadline_ticks`], called
/// before every guest entry) and keeps ticking until every deadline set so far has had its
/// ticks with a wide margin. No call end is tracked: a window that outlives the call only
/// costs some ticks, and one cannot end before the deadline it was opened for is reached.
pub(crate) struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Nanoseconds since [`origin`] until which the tickers tick.
static TICK_UNTIL: AtomicU64 = AtomicU64::new(0);
/// The ticker threads, to wake when a window opens.
static TICKERS: Mutex<Vec<std::thread::Thread>> = Mutex::new(Vec::new());

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn now_nanos() -> u64 {
    origin().elapsed().as_nanos() as u64
}

fn tickers() -> std::sync::MutexGuard<'static, Vec<std::thread::Thread>> {
    TICKERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Keeps the tickers running for at least `timeout` from now (twice that and 50 ms more:
/// sleeps overshoot, so `n` ticks take longer than `n` tick lengths).
fn keep_ticking(timeout: Duration) {
    let span = timeout.as_nanos().saturating_mul(2).min(u64::MAX as u128) as u64;
    let until = now_nanos().saturating_add(span).saturating_add(50_000_000);
    let before = TICK_UNTIL.fetch_max(until, Ordering::AcqRel);
    // A ticker that read the old window before this store may be parking: it read the time
    // first, so its time is below a time read now. Wake it whenever the old window ends before
    // that (or nearly so); an unpark of a running thread is one atomic operation.
    if before < now_nanos().saturating_add(2 * EPOCH_TICK.as_nanos() as u64) {
        tickers().iter().for_each(std::thread::Thread::unpark);
    }
}

impl EpochTicker {
    pub(crate) fn start(engine: Engine) -> Result<Self, UdfError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("lancet-udf-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    if now_nanos() >= TICK_UNTIL.load(Ordering::Acquire) {
                        // The timeout is only a backstop; a window opening unparks.
                        std::thread::park_timeout(Duration::from_secs(1));
                        continue;
                    }
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .map_err(|e| UdfError::io("starting the epoch thread", e))?;
        tickers().push(thread.thread().clone());
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let id = t.thread().id();
            tickers().retain(|other| other.id() != id);
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Epoch ticks to allow for `timeout`: rounded up, plus one because the current tick may be
/// about to end. Called right before a guest runs: it also keeps the tickers ticking for it.
pub(crate) fn deadline_ticks(timeout: Duration) -> u64 {
    keep_ticking(timeout);
    (timeout.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64).max(1) + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_keeps_the_tickers_running_well_past_it() {
        let timeout = Duration::from_millis(700);
        let ticks = deadline_ticks(timeout);
        assert_eq!(ticks, 141);
        let left = TICK_UNTIL
            .load(Ordering::Acquire)
            .saturating_sub(now_nanos());
        assert!(
            left >= (2 * timeout).as_nanos() as u64,
            "window {left} ns for a {timeout:?} deadline"
        );
        // Even an absurd timeout opens a window instead of wrapping around.
        deadline_ticks(Duration::MAX);
        assert_eq!(TICK_UNTIL.load(Ordering::Acquire), u64::MAX);
    }
}
