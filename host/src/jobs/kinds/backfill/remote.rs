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
use crate::jobs::state::{FragmentStatus, JobRecord, JobState, covered};

/// A range of a fragment's physical rows still to compute.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct OpenTask {
    pub fragment: u64,
    pub start: u64,
    pub end: u64,
}

/// The job's tasks not yet covered by checkpoints (none once the job is over).
pub async fn tasks(app: &Arc<App>, job_id: &str) -> ApiResult<Vec<OpenTask>> {
    let Some(record) = running(app, job_id).await? else {
        return Ok(Vec::new());
    };
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
/// them; `worker` names where in the job's events. Answers the rows computed: 0 when the
/// job is over or asked to stop, or the fragment is already staged.
pub async fn run(app: &Arc<App>, job_id: &str, task: OpenTask, worker: &str) -> ApiResult<u64> {
    let Some(record) = running(app, job_id).await? else {
        return Ok(0);
    };
    // The range comes from a command line: it must be one of the plan's pending fragments.
    let fragment = record
        .plan
        .as_ref()
        .and_then(|p| p.fragments.iter().find(|f| f.id == task.fragment));
    let Some(f) = fragment else {
        return Err(ApiError::invalid(format!(
            "fragment {} is not in job {job_id}'s plan",
            task.fragment
        )));
    };
    if task.start >= task.end || task.end > f.physical_rows {
        return Err(ApiError::invalid(format!(
            "rows {}..{} are not a range of fragment {}'s {} rows",
            task.start, task.end, task.fragment, f.physical_rows
        )));
    }
    if !matches!(f.status, FragmentStatus::Pending) {
        return Ok(0); // staged or committed already, or nothing selected
    }
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
    match ran {
        Ok(()) => {}
        // The job ended (its last rows checkpointed by another attempt of this task: a stopped
        // Ray generation's task may finish after the next one started it again), or was
        // paused or cancelled: nothing left to do here, which is not this task failing.
        Err(Stop::Cancelled) => return Ok(0),
        Err(failure) => return Err(stopped(failure)),
    }
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

/// The job's record if it is a backfill in progress; `None` once it ended or was asked to
/// stop: a task that starts after the job finished (its rows computed by an earlier
/// attempt) or after a cancel has nothing to do, which is not a failure of the task.
async fn running(app: &Arc<App>, job_id: &str) -> ApiResult<Option<JobRecord>> {
    let record = app.jobs.dir(job_id).load().await?;
    if record.job_type != super::BACKFILL {
        return Err(ApiError::invalid(format!(
            "job {job_id} is a {} job, not a backfill",
            record.job_type
        )));
    }
    let live =
        record.state == JobState::InProgress && !record.cancel_requested && !record.pause_requested;
    Ok(live.then_some(record))
}

fn stopped(stop: Stop) -> ApiError {
    match stop {
        Stop::Cancelled => ApiError::invalid("the job was cancelled or paused"),
        Stop::Failed(f) => ApiError::invalid(format!("{}: {}", f.phase, f.message)),
    }
}
