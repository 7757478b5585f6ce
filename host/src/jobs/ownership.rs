//! Which node runs which job. A job runs on the node holding its lease (`_jobs/<id>/lease`):
//! the node that accepted it, until that node stops renewing (killed, partitioned, shut down);
//! then whichever node finds the lease expired first takes the job over and resumes it from its
//! record and checkpoints, exactly as a restarted process would. The record carries the
//! lease generation it runs under, and every record write checks it, so a node that stalled
//! past its TTL and lost the job cannot write over the new owner's progress: it stops.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::events::JobEvent;
use super::job::Job;
use super::state::JobState;
use crate::App;
use crate::error::ApiResult;
use crate::root::Lease;

/// Run `job` on this node under `lease`, renewing it until the job ends, then releasing it.
/// The job's kind is one this node runs (submit and adoption check it).
pub(super) fn start(app: &Arc<App>, job: Arc<Job>, lease: Lease) {
    let app = app.clone();
    app.jobs.running.send_modify(|n| *n += 1);
    tokio::spawn(async move {
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let keeper = tokio::spawn(keep(app.clone(), job.clone(), lease, stopped));
        let kind = app.jobs.kind(&job.snapshot().job_type).cloned();
        match kind {
            // Below request priority: see `crate::background`.
            Some(kind) => crate::background::run(kind.run(app.clone(), job.clone())).await,
            None => {
                tracing::error!(job_id = %job.snapshot().job_id, "started a job of a kind this node does not run")
            }
        }
        let _ = stop.send(());
        let _ = keeper.await;
        // A paused job no longer runs here: this node reads its record like any other.
        if job.snapshot().state == JobState::Paused {
            job.generation.store(0, Ordering::Relaxed);
        }
        app.jobs.running.send_modify(|n| *n -= 1);
    });
}

/// Renew the lease every third of its TTL; pick up a cancel recorded through another node;
/// notice a takeover (then the job stops without recording anything).
async fn keep(
    app: Arc<App>,
    job: Arc<Job>,
    mut lease: Lease,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let (root, ttl) = (app.jobs.root.clone(), app.jobs.lease_ttl);
    // The record is read every second (a cancel sent to another node stops the job within
    // about a second); the lease is renewed every third of its TTL.
    let tick = (ttl / 3).min(std::time::Duration::from_secs(1));
    let mut renewed = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = &mut stop => {
                lease.release(&root).await;
                return;
            }
            _ = tokio::time::sleep(tick) => {}
        }
        if renewed.elapsed() >= ttl / 3 {
            match lease.renew(&root, ttl).await {
                Ok(true) => renewed = tokio::time::Instant::now(),
                Ok(false) => {
                    tracing::warn!(key = %lease.key, "lost a job's lease to another node; stopping the job");
                    job.lost.store(true, Ordering::Relaxed);
                    return;
                }
                // Keep trying: if the store stays unreachable past the TTL, another node
                // takes the job and the next renewal says so.
                Err(e) => {
                    tracing::warn!(key = %lease.key, error = %e, "cannot renew a job's lease")
                }
            }
        }
        if let Ok(r) = job.dir.load().await {
            if r.cancel_requested {
                job.cancel.store(true, Ordering::Relaxed);
            }
            if r.pause_requested {
                job.pause.store(true, Ordering::Relaxed);
            }
            if r.owner_generation != lease.generation {
                job.lost.store(true, Ordering::Relaxed);
                return;
            }
        }
    }
}

/// Adopt every unfinished job no node is running: left by a previous process of this node,
/// or by a node that stopped renewing its lease.
pub(super) async fn adopt_orphans(app: &Arc<App>) -> ApiResult<()> {
    let manager = &app.jobs;
    let mut elsewhere = std::collections::HashSet::new();
    for id in manager.job_ids().await? {
        if manager.closing.load(Ordering::Relaxed) {
            return Ok(());
        }
        if manager.finished.lock().unwrap().contains_key(&id) {
            continue;
        }
        let running_here = manager.jobs.lock().unwrap().get(&id).is_some_and(|j| {
            j.generation.load(Ordering::Relaxed) != 0
                && !j.lost.load(Ordering::Relaxed)
                && !j.snapshot().state.is_terminal()
        });
        if running_here {
            continue;
        }
        let dir = manager.dir(&id);
        let record = match manager.view(&id).await {
            Ok(Some(job)) => job.snapshot(),
            // A folder without a record: a job being created, or what a removal left.
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(job_id = %id, error = %e, "skipping an unreadable job");
                continue;
            }
        };
        if record.state.is_terminal() {
            manager.finished.lock().unwrap().insert(id, record);
            continue;
        }
        // Paused jobs wait for `jobs/resume`.
        if record.state == JobState::Paused {
            continue;
        }
        // A kind this node does not run (a newer server's): left to the nodes that do, and
        // its table left alone meanwhile.
        let Some(kind) = manager.kind(&record.job_type).cloned() else {
            elsewhere.insert((
                record.location.clone(),
                record.spec.branch().map(str::to_string),
            ));
            continue;
        };
        let Some(lease) = Lease::try_acquire(
            &manager.root,
            &dir.lease_key(),
            &manager.node,
            manager.lease_ttl,
        )
        .await?
        else {
            // Another node runs it: upkeep here leaves its table alone meanwhile, and this
            // node helps compute it if it has room.
            elsewhere.insert((
                record.location.clone(),
                record.spec.branch().map(str::to_string),
            ));
            kind.help_elsewhere(app, &record);
            continue;
        };
        let job = Arc::new(Job::new(dir.clone(), record));
        let generation = lease.generation;
        let node = manager.node.clone();
        let owned = job
            .update(|r| {
                r.owner = Some(node.clone());
                r.owner_generation = generation;
                if !r.state.is_terminal() {
                    r.log(JobEvent::new("claim", "runner", "scheduler", &node).entity("job"));
                }
            })
            .await;
        let record = job.snapshot();
        if let Err(e) = owned {
            tracing::warn!(job_id = %id, error = %e, "cannot take a job over");
            lease.release(&manager.root).await;
            continue;
        }
        if record.state.is_terminal() {
            // It finished between our read and our lease.
            lease.release(&manager.root).await;
            continue;
        }
        job.generation.store(generation, Ordering::Relaxed);
        tracing::info!(job_id = %id, job_type = %record.job_type, generation, "resuming job");
        manager.jobs.lock().unwrap().insert(id, job.clone());
        start(app, job, lease);
    }
    *manager.elsewhere.lock().unwrap() = elsewhere;
    Ok(())
}
