//! `jobs/pause`, `jobs/resume` and `jobs/query_events`. A pause is recorded on the job's
//! record; the node running the job sees it within a second (as it sees a cancel), stops
//! where the job stands and records it PAUSED, keeping its checkpoints and staged files. A
//! resume sets it IN_PROGRESS again, and this node (or any, at its next scan) adopts it and
//! continues from its record, exactly as after a restart.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow_array::RecordBatch;
use lance_namespace::ErrorCode;
use serde_json::{Value, json};

use super::events::{self, JobEvent};
use super::manager::JobManager;
use super::ownership;
use super::state::JobState;
use crate::App;
use crate::error::{ApiError, ApiResult};

fn finished(job_id: &str, state: JobState) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidTableState,
        format!("job {job_id} already finished ({state:?})"),
    )
}

impl JobManager {
    /// `paused: true` when this request paused the job; `false` when it was paused (or
    /// pausing) already. A finished job cannot be paused (409).
    pub async fn pause(&self, tenant: &str, job_id: &str) -> ApiResult<Value> {
        let job = self.get(tenant, job_id).await?;
        let r = job.snapshot();
        if r.state.is_terminal() {
            return Err(finished(job_id, r.state));
        }
        let paused_now = AtomicBool::new(false);
        let node = self.node.clone();
        job.update(|r| {
            let now = r.state == JobState::InProgress && !r.pause_requested;
            if now {
                r.pause_requested = true;
                r.log(JobEvent::api("pause_requested", &node));
            }
            paused_now.store(now, Ordering::Relaxed);
        })
        .await?;
        let paused_now = paused_now.into_inner();
        if paused_now {
            job.pause.store(true, Ordering::Relaxed);
        }
        Ok(json!({ "job_id": job_id, "paused": paused_now, "committing": false }))
    }

    /// `resumed: true` when the job was PAUSED and now runs again; `still_pausing` when its
    /// runner has not stopped yet (try again); both false when it was not paused.
    pub async fn resume(&self, app: &Arc<App>, tenant: &str, job_id: &str) -> ApiResult<Value> {
        let job = self.get(tenant, job_id).await?;
        let r = job.snapshot();
        if r.state.is_terminal() {
            return Err(finished(job_id, r.state));
        }
        let (resumed, pausing) = (AtomicBool::new(false), AtomicBool::new(false));
        let node = self.node.clone();
        job.update(|r| {
            let paused = r.state == JobState::Paused;
            if paused {
                r.state = JobState::InProgress;
                r.pause_requested = false;
                r.log(JobEvent::api("resumed", &node));
            }
            resumed.store(paused, Ordering::Relaxed);
            pausing.store(!paused && r.pause_requested, Ordering::Relaxed);
        })
        .await?;
        let (resumed, pausing) = (resumed.into_inner(), pausing.into_inner());
        if resumed {
            // Adopt it here at once rather than at the next scan of the root.
            self.forget(job_id);
            if let Err(e) = ownership::adopt_orphans(app).await {
                tracing::warn!(job_id, error = %e, "cannot adopt a resumed job now; the next scan will");
            }
        }
        Ok(json!({ "job_id": job_id, "resumed": resumed, "still_pausing": pausing }))
    }

    /// The job's events as an Arrow table (see `events`).
    pub async fn events(
        &self,
        tenant: &str,
        job_id: &str,
        filter: Option<&str>,
        limit: Option<usize>,
    ) -> ApiResult<RecordBatch> {
        let job = self.get(tenant, job_id).await?;
        // The record on the root: the running node's copy may be a moment behind others'.
        let r = job.dir.load().await.unwrap_or_else(|_| job.snapshot());
        events::query(&r.job_id, &r.events, filter, limit)
    }

    /// Drop this node's stale copy of a job it no longer runs (a paused one), so the next
    /// look reads the record afresh.
    fn forget(&self, job_id: &str) {
        let mut jobs = self.jobs.lock().unwrap();
        if jobs
            .get(job_id)
            .is_some_and(|j| j.generation.load(Ordering::Relaxed) == 0)
        {
            jobs.remove(job_id);
        }
    }
}
