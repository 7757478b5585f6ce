//! Background work (jobs: upkeep, backfills, view refreshes, Function builds) runs on a tokio
//! runtime of its own whose threads have the lowest CPU priority (nice 19): while requests run,
//! the kernel gives their threads the cores and background work gets what is left (a thread
//! of nice 19 weighs 15 against 1024 for one of nice 0), and an idle server gives background
//! work everything. Tasks that lance spawns from a job (scans, file writes, blocking I/O) land
//! on this runtime too; lance's shared CPU pool (index training, `spawn_cpu`) stays as it is.

use std::future::Future;
use std::sync::OnceLock;

/// Worker threads: the cores (background work may use all of them when nothing else runs).
fn workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers())
            .thread_name("lancet-bg")
            .on_thread_start(lower_priority)
            .enable_all()
            .build()
            .expect("the background runtime starts")
    })
}

/// Lowest CPU priority for the calling thread (Linux: per thread). Best effort: where it is not
/// allowed, background work runs at normal priority. `LANCET_BACKGROUND_PRIORITY=normal` keeps
/// normal priority (to compare, or where background work must keep pace with a busy server).
fn lower_priority() {
    if std::env::var("LANCET_BACKGROUND_PRIORITY").is_ok_and(|v| v == "normal") {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: gettid and setpriority only read their arguments; the thread id is the caller's.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 19);
    }
}

/// Run `work` on the background runtime; the result (or the panic) comes back to the caller.
pub async fn run<F>(work: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match runtime().spawn(work).await {
        Ok(out) => out,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("background task ended: {e}"),
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn work_runs_on_a_low_priority_thread_and_returns() {
        let (nice, name) = super::run(async {
            // SAFETY: reads the calling thread's priority.
            let nice = unsafe {
                libc::getpriority(libc::PRIO_PROCESS, libc::syscall(libc::SYS_gettid) as _)
            };
            (nice, std::thread::current().name().map(str::to_string))
        })
        .await;
        assert_eq!(name.as_deref(), Some("lancet-bg"));
        assert_eq!(nice, 19);
    }
}
