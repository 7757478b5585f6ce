//! A handler's work run as a task of its own, for reads that wait many times.
//!
//! A request's future nests every pipeline stage, the router and the handler; each time the
//! read inside it wakes (a vector search wakes 6-7 times), the runtime polls down through all
//! of them again, and after lance's work those are cold in the caches. Run as its own task,
//! the read is polled directly and the request's stack only twice: when it starts and when
//! the read is done.

use tracing::Instrument;

/// Runs `work` on a task of its own and answers what it answers. Dropping the returned
/// future (the client went away) aborts the task; a panic in it resumes in the caller, where
/// the pipeline turns it into a 500 as for any handler.
pub async fn run<T: Send + 'static>(work: impl Future<Output = T> + Send + 'static) -> T {
    let task = tokio::spawn(work.in_current_span());
    let _abort = AbortOnDrop(task.abort_handle());
    match task.await {
        Ok(answer) => answer,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Only an abort cancels the task, and only dropping this future aborts it.
        Err(e) => unreachable!("own task cancelled while awaited: {e}"),
    }
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_what_the_work_answers() {
        assert_eq!(run(async { 7 }).await, 7);
    }

    #[tokio::test]
    async fn a_panic_resumes_in_the_caller() {
        let caught = tokio::spawn(run(async { panic!("boom") })).await;
        let panic = caught.unwrap_err().into_panic();
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"boom"));
    }

    #[tokio::test]
    async fn dropping_the_caller_aborts_the_work() {
        let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let caller = tokio::spawn(run(async move {
            started_tx.send(()).unwrap();
            // Holds `tx` until aborted: the receiver then sees the sender dropped.
            std::future::pending::<()>().await;
            drop(tx);
        }));
        // The work runs on its own task before the caller goes away.
        started.await.unwrap();
        caller.abort();
        let dropped = tokio::time::timeout(std::time::Duration::from_secs(5), rx).await;
        assert!(
            matches!(dropped, Ok(Err(_))),
            "the work's task was aborted, and `tx` dropped with it"
        );
    }
}
