//! One job as this node holds it: its record (in memory and durable), the flags that stop its
//! runner (cancel, pause, a lost lease), its live counters, and how a run ends.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use lance_namespace::ErrorCode;
use serde_json::{Value, json};

use super::events::JobEvent;
use super::kind::JobKind;
use super::state::{self, JobDir, JobRecord, JobState};
use crate::error::{ApiError, ApiResult};

/// Live counters of a running job (the durable ones are in its record).
#[derive(Default)]
pub struct Progress {
    pub rows_done: AtomicU64,
    pub rows_nulled: AtomicU64,
}

pub struct Job {
    pub(super) dir: JobDir,
    /// The record as last read or written by this node.
    record: Mutex<JobRecord>,
    progress: Progress,
    pub(super) cancel: AtomicBool,
    /// Set by a pause: the runner stops as for a cancel, but the job ends PAUSED.
    pub(super) pause: AtomicBool,
    /// The generation of the lease this node runs the job under (0: it does not run it).
    pub(super) generation: AtomicU64,
    /// Set when this node lost the job's lease, or hands it over on shutdown: its runner stops
    /// and records nothing more.
    pub(super) lost: AtomicBool,
    /// This node's record writes, one at a time.
    writing: tokio::sync::Mutex<()>,
}

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub(super) fn job_not_found(job_id: &str) -> ApiError {
    // Lance Namespace has no "job" code; a job is the nearest thing to a transaction.
    ApiError::new(
        ErrorCode::TransactionNotFound,
        format!("job not found: {job_id}"),
    )
}

/// Why a job stopped early.
pub enum Stop {
    Cancelled,
    Failed(state::Failure),
}

impl Stop {
    /// A failure in `phase` from `e`; worth retrying when a commit lost a race or the store
    /// was busy (the next attempt may well succeed).
    pub fn failed(phase: &str, e: ApiError) -> Stop {
        Stop::Failed(state::Failure {
            phase: phase.to_string(),
            retryable: matches!(
                e.code,
                ErrorCode::ConcurrentModification | ErrorCode::ServiceUnavailable
            ),
            message: e.message,
        })
    }

    pub fn message(&self) -> String {
        match self {
            Stop::Cancelled => "cancelled".into(),
            Stop::Failed(f) => f.message.clone(),
        }
    }
}

impl Job {
    pub fn snapshot(&self) -> JobRecord {
        self.record.lock().unwrap().clone()
    }

    pub(super) fn new(dir: JobDir, record: JobRecord) -> Self {
        Self {
            dir,
            cancel: AtomicBool::new(record.cancel_requested),
            pause: AtomicBool::new(record.pause_requested),
            record: Mutex::new(record),
            progress: Progress::default(),
            generation: AtomicU64::new(0),
            lost: AtomicBool::new(false),
            writing: Default::default(),
        }
    }

    /// The job's objects under the root (record, checkpoints, claims).
    pub fn dir(&self) -> &JobDir {
        &self.dir
    }

    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Whether this node lost the job (to a takeover, or a hand-over on shutdown).
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }

    /// Stop the runner as for a cancel (a helper seeing the job end elsewhere).
    pub fn request_stop(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// Change the record and make the change durable before anything depends on it. The
    /// record is read back and changed with a conditional write, so changes from other nodes
    /// (a cancel, properties) are never overwritten. The node running the job checks it still
    /// owns it: after a takeover it finds a newer lease generation and stops.
    pub async fn update(&self, change: impl Fn(&mut JobRecord)) -> ApiResult<()> {
        let _writing = self.writing.lock().await;
        let generation = self.generation.load(Ordering::Relaxed);
        loop {
            let (mut fresh, version) = self.dir.load_versioned().await?;
            if generation != 0 && fresh.owner_generation != generation {
                self.lost.store(true, Ordering::Relaxed);
                return Err(ApiError::conflict(format!(
                    "job {} was taken over by node {}",
                    fresh.job_id,
                    fresh.owner.as_deref().unwrap_or("?")
                )));
            }
            change(&mut fresh);
            if self.dir.replace(&fresh, &version).await? {
                if fresh.cancel_requested {
                    self.cancel.store(true, Ordering::Relaxed);
                }
                if fresh.pause_requested {
                    self.pause.store(true, Ordering::Relaxed);
                }
                *self.record.lock().unwrap() = fresh;
                return Ok(());
            }
        }
    }

    /// Whether the runner must stop: cancelled, paused, or lost to another node.
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
            || self.pause.load(Ordering::Relaxed)
            || self.lost.load(Ordering::Relaxed)
    }

    /// Resolves once the job is asked to stop. Kinds race their work against it; dropping
    /// the work mid-way must be safe (nothing visible before its commit).
    pub async fn stopped(&self) {
        while !self.cancelled() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// The describe answer: the shape the lancedb SDK polls, plus the kind's `progress`
    /// (null for a kind this server does not know).
    pub(super) fn describe(&self, kind: Option<&dyn JobKind>) -> Value {
        let r = self.snapshot();
        let failure = r
            .failure
            .as_ref()
            .map(|f| json!({"phase": f.phase, "message": f.message, "retryable": f.retryable}));
        let progress = kind.map_or(Value::Null, |k| k.progress(self, &r));
        json!({
            "job_id": r.job_id,
            "job_type": r.job_type,
            "job_state": r.state,
            "creation_ms": r.creation_ms,
            "finish_ms": r.finish_ms,
            "table": r.spec.table_id(),
            "spec": r.spec,
            // The SDK treats a result on an unfinished job as a protocol error.
            "result": if r.state == JobState::Done { r.result.clone() } else { None },
            "failure": failure,
            "progress": progress,
        })
    }

    pub(super) fn list_row(&self, kind: Option<&dyn JobKind>) -> Value {
        let r = self.snapshot();
        let mut row = self.describe(kind);
        // The SDK's list rows name these differently from describe.
        row["state"] = json!(r.state);
        row["created_at_millis"] = json!(r.creation_ms);
        row["table"] = json!(r.spec.table_id().join("$"));
        row
    }

    /// Run `drive` in a task of its own, so that a panic in it still ends the job (FAILED)
    /// instead of leaving it running forever.
    pub async fn run_caught<F>(&self, drive: F) -> Result<(), Stop>
    where
        F: std::future::Future<Output = Result<(), Stop>> + Send + 'static,
    {
        if self.cancelled() {
            return Err(Stop::Cancelled);
        }
        tokio::spawn(drive).await.unwrap_or_else(|e| {
            Err(Stop::Failed(state::Failure {
                phase: "run".into(),
                message: format!("the job crashed: {e}"),
                retryable: false,
            }))
        })
    }

    /// Record how the job ended (durably); `result` makes a finished job's result. A node
    /// that lost the job records nothing: the job is the new owner's.
    pub async fn finish(&self, outcome: Result<(), Stop>, result: impl Fn(&JobRecord) -> Value) {
        if self.lost.load(Ordering::Relaxed) {
            tracing::warn!(job_id = %self.snapshot().job_id, "stopped a job another node took over");
            return;
        }
        let node = self.snapshot().owner.unwrap_or_default();
        let saved = self
            .update(|r| {
                match &outcome {
                    // Stopped for a pause (and not cancelled too): it resumes later.
                    Err(Stop::Cancelled) if r.pause_requested && !r.cancel_requested => {
                        r.state = JobState::Paused;
                        r.log(JobEvent::runner("paused", &node));
                        return;
                    }
                    Ok(()) => {
                        r.state = JobState::Done;
                        r.result = Some(result(r));
                        r.log(JobEvent::runner("done", &node));
                    }
                    Err(Stop::Cancelled) => {
                        r.state = JobState::Cancelled;
                        r.log(JobEvent::runner("cancelled", &node));
                    }
                    Err(Stop::Failed(f)) => {
                        r.state = JobState::Failed;
                        r.failure = Some(f.clone());
                        r.log(JobEvent::runner("failed", &node).message(&f.message));
                    }
                }
                r.finish_ms = Some(now_ms());
            })
            .await;
        let r = self.snapshot();
        if let Err(e) = saved {
            tracing::error!(job_id = %r.job_id, error = %e, "could not record the end of a job");
        }
        tracing::info!(job_id = %r.job_id, job_type = %r.job_type, state = ?r.state, "job finished");
    }
}
