//! A backfill's tasks computed by a process of their own, as a Ray task does (`on_ray`):
//! `lancet jobs tasks` lists the open tasks and `lancet jobs run-task` computes one with this
//! server's runtime, sandbox, limits and tenant settings, writing its checkpoints under the
//! job's root. Neither commits: the job's owner stages and commits from the checkpoints.

use std::sync::Arc;

use serde::Serialize;

use super::helper::{Task, open_tasks, stop_when_over};
use super::run::{context, run_task};
use crate::App;
use crate::error::{ApiError, ApiResult};
use crate::jobs::Stop;
use crate::jobs::events::JobEvent;
use crate::jobs::state::{JobRecord, JobState, covered};

/// A range of a fragment's physical rows still to compute.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct OpenTask {
    pub fragment: u64,
    pub start: u64,
    pub end: u64,
}

/// The job's tasks not yet covered by checkpoints.
pub async fn tasks(app: &Arc<App>, job_id: &str) -> ApiResult<Vec<OpenTask>> {
    let record = running(app, job_id).await?;
    let plan = record
        .plan
        .as_ref()
        .ok_or_else(|| ApiError::invalid(format!("job {job_id} is not planned yet")))?;
    let ckpts = app.jobs.dir(job_id).checkpoints().await?;
    let (open, ..) = open_tasks(plan, &ckpts);
    Ok(open
        .into_iter()
        .map(|t| OpenTask {
            fragment: t.fragment,
            start: t.start,
            end: t.end,
        })
        .collect())
}

/// Compute rows `start..end` of `fragment` (what checkpoints do not cover yet) and checkpoint
/// them; `worker` names where in the job's events. Answers the rows computed.
pub async fn run(app: &Arc<App>, job_id: &str, task: OpenTask, worker: &str) -> ApiResult<u64> {
    let record = running(app, job_id).await?;
    let job = app.jobs.detached(record);
    let ctx = context(app, &job).await.map_err(stopped)?;
    let ckpts = job.dir().checkpoints().await?;
    let (_, pos) = covered(&ckpts, task.fragment, task.start, task.end);
    if pos >= task.end {
        return Ok(0);
    }
    // A cancel, a pause or the job's end stops the task.
    let watcher = stop_when_over(&job);
    let ran = run_task(
        &ctx,
        Task {
            fragment: task.fragment,
            start: pos,
            end: task.end,
        },
    )
    .await;
    watcher.abort();
    ran.map_err(stopped)?;
    let rows = task.end - pos;
    job.update(|r| {
        r.log(
            JobEvent::new("task_complete", "runner", "ray", worker)
                .entity(format!(
                    "fragment {} rows {pos}..{}",
                    task.fragment, task.end
                ))
                .rows(rows),
        )
    })
    .await?;
    Ok(rows)
}

/// The job's record, if it is a backfill in progress.
async fn running(app: &Arc<App>, job_id: &str) -> ApiResult<JobRecord> {
    let record = app.jobs.dir(job_id).load().await?;
    if record.job_type != super::BACKFILL {
        return Err(ApiError::invalid(format!(
            "job {job_id} is a {} job, not a backfill",
            record.job_type
        )));
    }
    if record.state != JobState::InProgress || record.cancel_requested || record.pause_requested {
        return Err(ApiError::invalid(format!(
            "job {job_id} is {:?}{}",
            record.state,
            if record.cancel_requested || record.pause_requested {
                " and asked to stop"
            } else {
                ""
            }
        )));
    }
    Ok(record)
}

fn stopped(stop: Stop) -> ApiError {
    match stop {
        Stop::Cancelled => ApiError::invalid("the job was cancelled or paused"),
        Stop::Failed(f) => ApiError::invalid(format!("{}: {}", f.phase, f.message)),
    }
}
