//! One backfill shared between nodes, task by task. The node holding the job's lease runs it
//! as before: it plans the job, and stages and commits its fragments. Every node, that one
//! included, *claims* a task (a range of a fragment's rows) before computing it, through a
//! lease on the root at `_jobs/<id>/tasks/<fragment>-<end>`; a task another node holds is
//! left to it. Other nodes with spare capacity help: at each scan of the root they claim an
//! open task of a job running elsewhere, compute it and write its checkpoints, exactly as the
//! owner would. Once the owner has nothing else to do it waits for the checkpoints of the
//! tasks others hold, and computes any whose claim lapsed (its helper died) itself.
//!
//! Only the owner stages and commits, from checkpoints, so each row is written once. Values
//! are deterministic: a task computed twice (a helper stalled past its claim) costs time,
//! never a row written twice.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::run::{Ctx, context, run_task};
use crate::App;
use crate::jobs::events::JobEvent;
use crate::jobs::state::{Checkpoint, FragmentStatus, JobRecord, JobState, Plan, covered};
use crate::jobs::{Job, JobManager, Stop};
use crate::root::Lease;

/// A range of a fragment's physical rows. `end` is where the task ends in the plan (a
/// resumed task starts later but ends there): it names the task's claim (`helper`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Task {
    pub(super) fragment: u64,
    pub(super) start: u64,
    pub(super) end: u64,
}

/// The tasks of the plan's pending fragments not yet covered by checkpoints; how many each
/// such fragment has; and the pending fragments already fully checkpointed.
pub(super) fn open_tasks(
    plan: &Plan,
    ckpts: &[Checkpoint],
) -> (Vec<Task>, HashMap<u64, usize>, Vec<u64>) {
    let mut remaining: HashMap<u64, usize> = HashMap::new();
    let mut tasks = Vec::new();
    let mut ready = Vec::new();
    for f in plan
        .fragments
        .iter()
        .filter(|f| matches!(f.status, FragmentStatus::Pending))
    {
        let mut open = 0;
        let mut start = 0;
        while start < f.physical_rows {
            let end = (start + plan.task_size).min(f.physical_rows);
            let (_, pos) = covered(ckpts, f.id, start, end);
            if pos < end {
                tasks.push(Task {
                    fragment: f.id,
                    start: pos,
                    end,
                });
                open += 1;
            }
            start = end;
        }
        if open == 0 {
            ready.push(f.id);
        } else {
            remaining.insert(f.id, open);
        }
    }
    (tasks, remaining, ready)
}

/// How long a task claim lasts: long enough for a slow task (it is not renewed).
fn claim_ttl(jobs: &JobManager) -> Duration {
    (jobs.lease_ttl() * 4).max(Duration::from_secs(60))
}

/// Compute `task` if this node can claim it: `Ok(false)` when another node holds it.
pub(super) async fn run_claimed(ctx: &Arc<Ctx>, task: Task) -> Result<bool, Stop> {
    let jobs = &ctx.app.jobs;
    let key = ctx.job.dir().task_key(task.fragment, task.end);
    let Some(claim) = Lease::try_acquire(jobs.root(), &key, jobs.node(), claim_ttl(jobs)).await?
    else {
        return Ok(false);
    };
    let outcome = run_task(ctx, task).await;
    claim.release(jobs.root()).await;
    outcome.map(|()| true)
}

/// One look at the tasks others claimed: the fragments of those now checkpointed (by their
/// helper, or here when the claim had lapsed); the rest stay in `deferred`.
pub(super) async fn settle_deferred(
    ctx: &Arc<Ctx>,
    deferred: &mut Vec<Task>,
) -> Result<Vec<u64>, Stop> {
    let ckpts = ctx.job.dir().checkpoints().await?;
    let mut done = Vec::new();
    let mut waiting = Vec::new();
    for task in deferred.drain(..) {
        let (_, pos) = covered(&ckpts, task.fragment, task.start, task.end);
        let rest = Task { start: pos, ..task };
        if pos >= task.end || run_claimed(ctx, rest).await? {
            done.push(task.fragment);
        } else {
            waiting.push(task);
        }
    }
    *deferred = waiting;
    Ok(done)
}

/// Whether another node's job is one this node could help with now (the helper budget,
/// `--job-helper-tasks`, is the kind's to check). A job on a Ray cluster is Ray's to run.
pub(super) fn may_help(record: &JobRecord) -> bool {
    let cluster = record.spec.get("cluster").and_then(|c| c.as_str());
    cluster.is_none_or(|c| c == "default")
        && record.state == JobState::InProgress
        && record.plan.is_some()
        && !record.cancel_requested
        && !record.pause_requested
}

/// Help with `record`'s job (another node runs it): claim and compute its open tasks one at
/// a time, until none is left unclaimed or the job stops. `helping` counts this node's helpers.
pub(super) fn help(app: &Arc<App>, record: JobRecord, helping: Arc<AtomicUsize>) {
    let app = app.clone();
    helping.fetch_add(1, Ordering::Relaxed);
    tokio::spawn(async move {
        let job_id = record.job_id.clone();
        // Below request priority, as the job's own work (see `crate::background`).
        let helped = crate::background::run({
            let app = app.clone();
            async move { help_with(&app, record).await }
        });
        if let Err(e) = helped.await {
            tracing::warn!(job_id, error = %e.message(), "stopped helping a job");
        }
        helping.fetch_sub(1, Ordering::Relaxed);
    });
}

async fn help_with(app: &Arc<App>, record: JobRecord) -> Result<(), Stop> {
    let job = app.jobs.detached(record);
    let ctx = context(app, &job).await?;
    let node = app.jobs.node().to_string();
    // A cancel, a pause or the job's end stops the task in hand too, so no checkpoint lands
    // after the job is over.
    let watcher = stop_when_over(&job);
    let outcome = help_tasks(&ctx, &job, &node).await;
    watcher.abort();
    outcome
}

/// Stop `job`'s work here once its record (read every second, as the owner reads it) says it
/// was cancelled, paused or ended elsewhere; abort the handle when the work is done.
pub(super) fn stop_when_over(job: &Arc<Job>) -> tokio::task::JoinHandle<()> {
    let job = job.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if let Ok(r) = job.dir().load().await
                && (r.cancel_requested || r.pause_requested || r.state != JobState::InProgress)
            {
                job.request_stop();
                return;
            }
        }
    })
}

async fn help_tasks(ctx: &Arc<Ctx>, job: &Arc<Job>, node: &str) -> Result<(), Stop> {
    let app = &ctx.app;
    loop {
        // The record as it is now: the job may have ended, been paused or cancelled.
        let fresh = job.dir().load().await?;
        let Some(plan) = fresh.plan.as_ref().filter(|_| {
            fresh.state == JobState::InProgress
                && !fresh.cancel_requested
                && !fresh.pause_requested
                && !app.jobs.is_closing()
        }) else {
            return Ok(());
        };
        let ckpts = job.dir().checkpoints().await?;
        let (tasks, ..) = open_tasks(plan, &ckpts);
        let mut helped = None;
        for task in tasks {
            if run_claimed(ctx, task).await? {
                helped = Some(task);
                break;
            }
        }
        let Some(task) = helped else {
            return Ok(());
        };
        let rows = task.end - task.start;
        job.update(|r| {
            r.log(
                JobEvent::new("task_complete", "runner", "helper", node)
                    .entity(format!(
                        "fragment {} rows {}..{}",
                        task.fragment, task.start, task.end
                    ))
                    .rows(rows),
            )
        })
        .await?;
    }
}
