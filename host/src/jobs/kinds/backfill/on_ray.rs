//! A backfill's tasks run on a Ray cluster (`cluster` names one of `--clusters`). This node
//! stays the job's owner and its only committer: it submits one Ray job whose driver runs
//! each open task as a Ray task (`lancet jobs run-task`, see `remote`), then watches the
//! task checkpoints land under the root and stages and commits fragments from them, exactly
//! as it does for its own tasks. The Ray job's id is derived from the Lancet job's, so a node
//! that takes the job over (its owner died) attaches to the running Ray job instead of
//! submitting a second one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lancet_ray::{Attachment, JobClient, JobStatus, RayCluster, RayError, Submission, TaskRunSpec};

use super::helper::Task;
use super::run::{Ctx, durable_progress, failed, task_done};
use crate::jobs::Stop;
use crate::jobs::events::JobEvent;
use crate::jobs::state::covered;

/// Characters of a Ray job's failure kept in the Lancet job's record.
const MAX_REASON: usize = 2000;

/// How often the checkpoints and the Ray job are looked at.
const POLL: Duration = Duration::from_millis(500);

/// Compute `tasks` on the Ray cluster `name`; stage and commit fragments as their tasks'
/// checkpoints land.
pub(super) async fn compute(
    ctx: &Arc<Ctx>,
    name: &str,
    cluster: &RayCluster,
    tasks: Vec<Task>,
    remaining: &mut HashMap<u64, usize>,
    queue: &mut Vec<u64>,
) -> Result<(), Stop> {
    if tasks.is_empty() {
        return Ok(());
    }
    let job_id = ctx.job.snapshot().job_id;
    let client = JobClient::new(&cluster.address);
    let spec = TaskRunSpec::new(cluster, &job_id, ctx.app.root.uri());
    let submission = Submission {
        entrypoint: lancet_ray::entrypoint(&cluster.python, &spec),
        env_vars: cluster.env.clone(),
        metadata: [
            ("lancet_job".to_string(), job_id.clone()),
            ("lancet_tenant".to_string(), ctx.tenant.clone()),
            ("lancet_node".to_string(), ctx.app.node_id.clone()),
        ]
        .into(),
    };
    let base = format!("lancet-{job_id}");
    let mut ray_job = attach(ctx, &client, name, cluster, &base, &submission).await?;
    let mut open = tasks;
    let mut unreachable_since: Option<Instant> = None;
    let mut succeeded_seen = false;
    loop {
        if let Err(stop) = ctx.check() {
            // Cancelled or paused here: stop the Ray job too. A node that lost the job to
            // another leaves it running: the new owner attaches to it.
            if !ctx.job.is_lost() {
                let _ = client.stop(&ray_job).await;
            }
            return Err(stop);
        }
        let ckpts = ctx.job.dir().checkpoints().await?;
        let mut finished = Vec::new();
        open.retain(|t| {
            let (_, pos) = covered(&ckpts, t.fragment, t.start, t.end);
            let done = pos >= t.end;
            if done {
                finished.push(t.fragment);
            }
            !done
        });
        if let Some(plan) = ctx.job.snapshot().plan {
            durable_progress(&ctx.job, &plan, &ckpts);
        }
        for id in finished {
            task_done(ctx, id, remaining, queue).await?;
        }
        if open.is_empty() {
            return Ok(());
        }
        match client.info(&ray_job).await {
            Ok(Some(info)) => {
                unreachable_since = None;
                match info.status {
                    JobStatus::Pending | JobStatus::Running => {}
                    // The driver exits once every task ran: one more look at the checkpoints
                    // (the last may have landed after this look's listing).
                    JobStatus::Succeeded if !succeeded_seen => {
                        succeeded_seen = true;
                        continue;
                    }
                    JobStatus::Succeeded => {
                        let first = open[0];
                        return Err(failed(
                            "compute",
                            format!(
                                "Ray job {ray_job} on cluster '{name}' ended, but {} task(s) have no \
                                 checkpoints (the first: fragment {} rows {}..{})",
                                open.len(),
                                first.fragment,
                                first.start,
                                first.end
                            ),
                        ));
                    }
                    status @ (JobStatus::Failed | JobStatus::Stopped) => {
                        let why = reason(&client, &ray_job, info.message).await;
                        return Err(failed(
                            "compute",
                            format!(
                                "Ray job {ray_job} on cluster '{name}' {}: {why}",
                                if status == JobStatus::Failed {
                                    "failed"
                                } else {
                                    "was stopped"
                                }
                            ),
                        ));
                    }
                }
            }
            // A head restarted without its jobs (no persistent job store): submit again.
            Ok(None) => {
                ray_job = attach(ctx, &client, name, cluster, &base, &submission).await?;
            }
            Err(e) => {
                let since = *unreachable_since.get_or_insert_with(Instant::now);
                let limit = cluster.unreachable_after.unwrap_or(Duration::MAX);
                if since.elapsed() >= limit {
                    return Err(failed(
                        "compute",
                        format!(
                            "Ray cluster '{name}' at {} did not answer for {} s: {e}",
                            cluster.address,
                            limit.as_secs()
                        ),
                    ));
                }
                tracing::warn!(cluster = name, error = %e, "Ray head did not answer; retrying");
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Attach to the job's running Ray job, or submit one; record which in the job's events.
async fn attach(
    ctx: &Arc<Ctx>,
    client: &JobClient,
    name: &str,
    cluster: &RayCluster,
    base: &str,
    submission: &Submission,
) -> Result<String, Stop> {
    let attachment = client.submit_once(base, submission).await.map_err(|e| {
        let why = match &e {
            RayError::Unreachable(_) => "cannot reach it",
            _ => "it refused the job",
        };
        failed(
            "submit",
            format!("Ray cluster '{name}' at {}: {why}: {e}", cluster.address),
        )
    })?;
    let (state, id) = match &attachment {
        Attachment::Submitted(id) => ("ray_submitted", id.clone()),
        Attachment::Attached(id) => ("ray_attached", id.clone()),
    };
    let node = ctx.app.node_id.clone();
    ctx.job
        .update(|r| {
            r.log(
                JobEvent::new(state, "runner", "runner", &node)
                    .message(format!("Ray job {id} on cluster '{name}'")),
            )
        })
        .await?;
    Ok(id)
}

/// Why a Ray job failed: the driver's own reason (a task's error or the limit it exceeded)
/// when its logs have one, else Ray's message.
async fn reason(client: &JobClient, id: &str, message: Option<String>) -> String {
    // Both come from the Ray job's output, which a task's stderr (a guest's) feeds: bounded,
    // as they are kept in the job's record.
    if let Ok(logs) = client.logs(id).await
        && let Some(why) = lancet_ray::failure_in(&logs)
    {
        return why.chars().take(MAX_REASON).collect();
    }
    let message = message.unwrap_or_default();
    // Ray's message ends with the driver's last log lines: keep it short.
    let tail: String = message
        .lines()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .take(3)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join(" | ");
    if tail.is_empty() {
        "no reason given".into()
    } else {
        tail.chars().take(MAX_REASON).collect()
    }
}
