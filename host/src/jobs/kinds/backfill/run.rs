//! The backfill runner. A job reads its table at a pinned version, splits each fragment into
//! read tasks of `task_size` physical rows, and runs up to `concurrency` tasks at once. A task
//! reads batches of at most `max_checkpoint_size` rows, computes the selected rows in UDF calls
//! of an adaptive size (`checkpoint_size` within min/max, `intra_applier_concurrency` calls at
//! once) and makes its results durable as checkpoint files every
//! `batch_checkpoint_flush_interval_seconds`. When every task of a fragment is checkpointed,
//! the fragment's column file is written from the checkpoints and recorded as staged; staged
//! fragments are committed `commit_granularity` at a time with lance's DataReplacement.
//!
//! Restart safety: checkpoints are reused, so only values computed after the last flush are
//! computed again; a staged fragment is looked up in the table before it is committed, so a
//! commit that landed just before a crash is not made twice.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arrow_array::ArrayRef;
use arrow_schema::Field;
use futures::{StreamExt, TryStreamExt};
use serde_json::json;

use super::calls::start;
use super::helper::{self, Task, open_tasks};
use super::row_errors::{RowErrorFiles, RowErrors};
use super::spec::BackfillSpec;
use crate::App;
use crate::error::{ApiError, ApiResult};
use crate::jobs::events::JobEvent;
use crate::jobs::state::{
    Checkpoint, Failure, FragmentPlan, FragmentStatus, JobRecord, Plan, covered,
};
use crate::jobs::{Job, Stop};
use crate::store::{BackfillSource, StagedFile};
use crate::virtual_columns::ColumnUdf;

/// Results held in memory before a forced flush, in multiples of `max_checkpoint_size`...
const MAX_BUFFERED_BATCHES: usize = 2;
/// ...once they also fill this many bytes: every checkpoint costs a write and two fsyncs
/// (~1-5 ms here), so thousands of tiny checkpoints (8 KiB of results at 4096 rows of a
/// float) would cost more than computing them. Memory stays bounded: by this, or by
/// `MAX_BUFFERED_BATCHES * max_checkpoint_size` rows when those are larger.
const MIN_CHECKPOINT_BYTES: usize = 4 << 20;

pub(super) fn failed(phase: &str, message: impl Into<String>) -> Stop {
    Stop::Failed(Failure {
        phase: phase.to_string(),
        message: message.into(),
        retryable: false,
    })
}

impl From<ApiError> for Stop {
    fn from(e: ApiError) -> Self {
        failed("run", e.message)
    }
}

pub(super) async fn run(app: Arc<App>, job: Arc<Job>) {
    let (a, j) = (app.clone(), job.clone());
    let outcome = job.run_caught(async move { drive(&a, &j).await }).await;
    job.finish(outcome, result_of).await;
    let r = job.snapshot();
    if !job.is_lost() && r.state.is_terminal() {
        let rows = r.result.as_ref().and_then(|v| v["rows_written"].as_u64());
        if let Some(u) = app.hosting.counters(&r.tenant) {
            u.add(lancet_hosting::usage::Measure::JobRows, rows.unwrap_or(0));
        }
    }
    // A paused job keeps its checkpoints for its resumption.
    if !job.is_lost()
        && job.snapshot().state.is_terminal()
        && let Err(e) = job.dir().remove_all_checkpoints().await
    {
        tracing::warn!(error = %e, "cannot remove a finished job's checkpoints");
    }
}

fn result_of(r: &JobRecord) -> serde_json::Value {
    let frags = r
        .plan
        .as_ref()
        .map(|p| p.fragments.as_slice())
        .unwrap_or(&[]);
    let mut rows_written = 0;
    let mut rows_nulled = 0;
    let mut committed = 0;
    let mut version = None;
    let mut skipped = Vec::new();
    for f in frags {
        match &f.status {
            FragmentStatus::Committed { version: v, nulled } => {
                rows_written += f.selected_rows;
                rows_nulled += nulled;
                committed += 1;
                version = version.max(Some(*v));
            }
            FragmentStatus::Skipped { reason } => {
                skipped.push(json!({"fragment": f.id, "rows": f.selected_rows, "reason": reason}))
            }
            _ => {}
        }
    }
    let skipped_rows: u64 = skipped.iter().filter_map(|s| s["rows"].as_u64()).sum();
    let read_version = r
        .spec
        .get("read_version")
        .and_then(serde_json::Value::as_u64);
    json!({
        "rows_written": rows_written,
        "rows_nulled": rows_nulled,
        "fragments_committed": committed,
        "fragments_skipped": skipped,
        "commits": r.commits,
        "read_version": read_version,
        "version": version,
        // The same, under the names of the lancedb client's refresh results.
        "rows_filled": rows_written,
        "rows_assigned": rows_written - rows_nulled,
        "rows_failed": rows_nulled,
        "rows_remaining": skipped_rows,
        "source_version": read_version,
        "published_version": version,
    })
}

/// Everything the tasks of one run share.
pub(super) struct Ctx {
    pub(super) app: Arc<App>,
    pub(super) job: Arc<Job>,
    pub(super) source: BackfillSource,
    pub(super) udf: Arc<ColumnUdf>,
    field: Field,
    pub(super) spec: BackfillSpec,
    pub(super) tenant: String,
    location: String,
    /// Set when any task fails, so the others stop.
    abort: std::sync::atomic::AtomicBool,
}

impl Ctx {
    pub(super) fn check(&self) -> Result<(), Stop> {
        if self.job.cancelled() {
            return Err(Stop::Cancelled);
        }
        if self.abort.load(Ordering::Relaxed) {
            return Err(failed("compute", "stopped because another task failed"));
        }
        Ok(())
    }
}

/// The run's context: the job's inputs prepared on this node (see [`prepare`]).
pub(super) async fn context(app: &Arc<App>, job: &Arc<Job>) -> Result<Arc<Ctx>, Stop> {
    let record = job.snapshot();
    let spec: BackfillSpec = record
        .spec
        .typed()
        .map_err(|e| failed("prepare", e.message))?;
    let (source, udf) = super::prepare::prepare(app, &record.tenant, &record.location, &spec)
        .await
        .map_err(|e| failed("prepare", e.message))?;
    let field = source.target_field()?;
    Ok(Arc::new(Ctx {
        app: app.clone(),
        job: job.clone(),
        field,
        source,
        udf,
        spec,
        tenant: record.tenant.clone(),
        location: record.location.clone(),
        abort: Default::default(),
    }))
}

async fn drive(app: &Arc<App>, job: &Arc<Job>) -> Result<(), Stop> {
    if app.fault_injection && std::env::var_os("LANCET_FAULT_JOB_PANIC").is_some() {
        panic!("fault injected by LANCET_FAULT_JOB_PANIC");
    }
    let record = job.snapshot();
    let ctx = context(app, job).await?;
    if record.plan.is_none() {
        let plan = plan(&ctx).await.map_err(|e| failed("plan", e.message))?;
        job.update(|r| r.plan = Some(plan.clone())).await?;
    }
    let plan = job.snapshot().plan.expect("planned above");
    let ckpts = job.dir().checkpoints().await?;

    durable_progress(job, &plan, &ckpts);

    // Fragments staged before a restart: committed already, or still to commit. Commits are
    // made one at a time and recorded before the next, so at most one commit (of one group)
    // can have landed unrecorded.
    let mut queue = Vec::new();
    let mut landed = Vec::new();
    for f in &plan.fragments {
        if let FragmentStatus::Staged { file, nulled } = &f.status {
            let found = ctx
                .app
                .store
                .committed_file(&ctx.location, ctx.spec.branch.as_deref(), file)
                .await?;
            match found {
                Some(version) => landed.push((f.id, version, *nulled)),
                None => queue.push(f.id),
            }
        }
    }
    if !landed.is_empty() {
        job.update(|r| {
            r.commits += 1;
            for (id, version, nulled) in &landed {
                set_status(
                    r,
                    *id,
                    FragmentStatus::Committed {
                        version: *version,
                        nulled: *nulled,
                    },
                );
            }
        })
        .await?;
        for (id, ..) in &landed {
            job.dir().remove_checkpoints(*id).await?;
        }
    }

    // Work left: tasks not fully covered by checkpoints.
    let (tasks, mut remaining, ready) = open_tasks(&plan, &ckpts);
    for id in ready {
        stage(&ctx, id).await?;
        queue.push(id);
        commit_when_full(&ctx, &mut queue, false).await?;
    }

    match ctx.spec.cluster.as_str() {
        "default" => compute_here(&ctx, tasks, &mut remaining, &mut queue).await?,
        name => {
            let Some(cluster) = ctx.app.clusters.ray(name).cloned() else {
                return Err(failed(
                    "run",
                    format!("cluster '{name}' is no longer configured on this server"),
                ));
            };
            super::on_ray::compute(&ctx, name, &cluster, tasks, &mut remaining, &mut queue).await?;
        }
    }
    commit_when_full(&ctx, &mut queue, true).await?;
    // The versions this job's commits made, when it committed everything it selected.
    let own = job.snapshot().plan.and_then(|p| {
        p.fragments
            .iter()
            .map(|f| match f.status {
                FragmentStatus::Committed { version, .. } => Some(Some(version)),
                FragmentStatus::Unselected => Some(None),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .map(|v| v.into_iter().flatten().collect::<Vec<u64>>())
    });
    super::changed::record(&ctx.app, &ctx.location, &ctx.spec, own).await;
    Ok(())
}

/// Compute `tasks` on this node (and the replicas that help): each task is claimed first,
/// and one another node (a helper) holds is left to it for now.
async fn compute_here(
    ctx: &Arc<Ctx>,
    tasks: Vec<Task>,
    remaining: &mut HashMap<u64, usize>,
    queue: &mut Vec<u64>,
) -> Result<(), Stop> {
    let mut running = futures::stream::iter(tasks)
        .map(|t| {
            let ctx = ctx.clone();
            tokio::spawn(async move {
                let ran = helper::run_claimed(&ctx, t).await?;
                Ok::<_, Stop>((t, ran))
            })
        })
        .buffer_unordered(ctx.spec.concurrency);
    let mut first_error = None;
    let mut deferred = Vec::new();
    while let Some(joined) = running.next().await {
        let outcome =
            joined.unwrap_or_else(|e| Err(failed("compute", format!("a task crashed: {e}"))));
        if first_error.is_some() {
            continue; // drain: let the other tasks notice and stop
        }
        let step = async {
            let (task, ran) = outcome?;
            if !ran {
                deferred.push(task);
                return Ok(());
            }
            task_done(ctx, task.fragment, remaining, queue).await
        }
        .await;
        if let Err(e) = step {
            ctx.abort.store(true, Ordering::Relaxed);
            first_error = Some(e);
        }
    }
    if let Some(e) = first_error {
        // A cancellation seen by one task while another failed is still a cancellation.
        return Err(if ctx.job.cancelled() {
            Stop::Cancelled
        } else {
            e
        });
    }
    // The tasks helpers hold: wait for their checkpoints (or compute those whose claim lapsed).
    while !deferred.is_empty() {
        ctx.check()?;
        let finished = helper::settle_deferred(ctx, &mut deferred).await?;
        if finished.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for id in finished {
            task_done(ctx, id, remaining, queue).await?;
        }
    }
    Ok(())
}

/// One more task of fragment `id` is checkpointed: once all are, stage the fragment and
/// commit when a group is full.
pub(super) async fn task_done(
    ctx: &Arc<Ctx>,
    id: u64,
    remaining: &mut HashMap<u64, usize>,
    queue: &mut Vec<u64>,
) -> Result<(), Stop> {
    let left = remaining.get_mut(&id).expect("a fragment with tasks");
    *left -= 1;
    if *left == 0 {
        ctx.check()?;
        stage(ctx, id).await?;
        queue.push(id);
        commit_when_full(ctx, queue, false).await?;
    }
    Ok(())
}

/// Set the job's progress from what is durable: staged and committed fragments, and the
/// checkpoints of the others.
pub(super) fn durable_progress(job: &Job, plan: &Plan, ckpts: &[Checkpoint]) {
    // By fragment first: a job on Ray looks at this every poll, with thousands of each.
    let mut checkpointed: HashMap<u64, (u64, u64)> = HashMap::new();
    for c in ckpts {
        let sums = checkpointed.entry(c.fragment).or_default();
        sums.0 += c.selected;
        sums.1 += c.nulled;
    }
    let mut done = 0;
    let mut nulled = 0;
    for f in &plan.fragments {
        match &f.status {
            FragmentStatus::Staged { nulled: n, .. }
            | FragmentStatus::Committed { nulled: n, .. } => {
                done += f.selected_rows;
                nulled += n;
            }
            FragmentStatus::Pending => {
                let (d, n) = checkpointed.get(&f.id).copied().unwrap_or_default();
                done += d;
                nulled += n;
            }
            FragmentStatus::Skipped { .. } | FragmentStatus::Unselected => {}
        }
    }
    job.progress().rows_done.store(done, Ordering::Relaxed);
    job.progress().rows_nulled.store(nulled, Ordering::Relaxed);
}

/// Fragments, rows each selects, and the task size.
async fn plan(ctx: &Ctx) -> ApiResult<Plan> {
    let frags = ctx.source.fragments(ctx.spec.num_frags).await?;
    let mut counts = Vec::with_capacity(frags.len());
    for f in &frags {
        counts.push(ctx.source.count_selected(f.id).await?);
    }
    let total: u64 = frags.iter().map(|f| f.physical_rows).sum();
    let workers = ctx.spec.concurrency as u64;
    let task_size = ctx.spec.task_size.unwrap_or_else(|| {
        // Enough tasks to keep every worker busy, none smaller than one full read batch.
        total
            .div_ceil(workers * 4)
            .max(ctx.spec.max_checkpoint_size as u64)
            .max(1)
    });
    Ok(Plan {
        task_size,
        fragments: frags
            .iter()
            .zip(counts)
            .map(|(f, selected)| FragmentPlan {
                id: f.id,
                physical_rows: f.physical_rows,
                selected_rows: selected,
                status: if selected == 0 {
                    FragmentStatus::Unselected
                } else {
                    FragmentStatus::Pending
                },
            })
            .collect(),
    })
}

/// Set a fragment's status, and log what it means in the job's events.
fn set_status(r: &mut JobRecord, id: u64, status: FragmentStatus) {
    let node = r.owner.clone().unwrap_or_default();
    let Some(f) = r
        .plan
        .as_mut()
        .and_then(|p| p.fragments.iter_mut().find(|f| f.id == id))
    else {
        return;
    };
    let event = match &status {
        FragmentStatus::Staged { .. } => Some(JobEvent::runner("staged", &node)),
        FragmentStatus::Committed { version, .. } => Some(
            JobEvent::runner("claim_complete", &node)
                .message(format!("committed as version {version}")),
        ),
        FragmentStatus::Skipped { reason } => {
            Some(JobEvent::runner("skipped", &node).message(reason.clone()))
        }
        FragmentStatus::Pending | FragmentStatus::Unselected => None,
    };
    let rows = f.selected_rows;
    f.status = status;
    if let Some(event) = event {
        r.log(event.entity(format!("fragment {id}")).rows(rows));
    }
}

/// Compute one task's rows and checkpoint them.
pub(super) async fn run_task(ctx: &Arc<Ctx>, task: Task) -> Result<(), Stop> {
    ctx.check()?;
    let spec = &ctx.spec;
    let batches = ctx
        .source
        .read(
            task.fragment,
            task.start..task.end,
            spec.max_checkpoint_size as u32,
        )
        .await?;
    // A native column's calls go to one worker for the whole task, the next read batches'
    // written while it computes (as many read batches in flight as the pipeline takes);
    // other engines compute one read batch at a time.
    let pipeline = ctx.udf.pipeline(&ctx.tenant)?;
    let depth = if pipeline.is_some() {
        lancet_native::Pipeline::DEPTH
    } else {
        1
    };
    let size = AtomicUsize::new(spec.checkpoint_size);
    let mut computed = batches
        .map(|sb| start(ctx, task.fragment, sb?, pipeline.as_ref(), &size))
        .try_buffered(depth);
    let flush_every = Duration::from_secs_f64(spec.batch_checkpoint_flush_interval_seconds);
    let mut buffer: Vec<ArrayRef> = Vec::new();
    let mut buffered_bytes = 0;
    let mut pending = Checkpoint {
        fragment: task.fragment,
        start: task.start,
        end: task.start,
        selected: 0,
        nulled: 0,
    };
    let mut errors = RowErrors {
        fragment: task.fragment,
        function: ctx.udf.label().to_string(),
        function_version: ctx.udf.version().to_string(),
        ..Default::default()
    };
    let mut last_flush = Instant::now();
    while let Some(done) = computed.try_next().await? {
        ctx.check()?;
        for (rows, kind, message) in &done.failures {
            errors.add(rows.iter().copied(), kind, message);
        }
        ctx.job
            .progress()
            .rows_done
            .fetch_add(done.selected, Ordering::Relaxed);
        ctx.job
            .progress()
            .rows_nulled
            .fetch_add(done.nulled, Ordering::Relaxed);
        pending.end = done.end;
        pending.selected += done.selected;
        pending.nulled += done.nulled;
        buffered_bytes += done
            .values
            .iter()
            .map(|v| v.get_array_memory_size())
            .sum::<usize>();
        buffer.extend(done.values);
        let buffered = (pending.end - pending.start) as usize;
        if last_flush.elapsed() >= flush_every
            || (buffered >= MAX_BUFFERED_BATCHES * spec.max_checkpoint_size
                && buffered_bytes >= MIN_CHECKPOINT_BYTES)
        {
            flush(ctx, &mut pending, &mut buffer, &mut errors).await?;
            last_flush = Instant::now();
            buffered_bytes = 0;
        }
    }
    flush(ctx, &mut pending, &mut buffer, &mut errors).await?;
    if pending.start != task.end {
        return Err(failed(
            "compute",
            format!(
                "fragment {} rows {}..{}: read ended at row {}",
                task.fragment, task.start, task.end, pending.start
            ),
        ));
    }
    Ok(())
}

/// Make the buffered results durable as one checkpoint, then start the next one.
async fn flush(
    ctx: &Arc<Ctx>,
    pending: &mut Checkpoint,
    buffer: &mut Vec<ArrayRef>,
    errors: &mut RowErrors,
) -> ApiResult<()> {
    if pending.end == pending.start {
        return Ok(());
    }
    if errors.rows_failed > 0 {
        // Before the checkpoint: rows checkpointed always have their failures recorded.
        errors.start = pending.start;
        errors.created_at_millis = chrono::Utc::now().timestamp_millis();
        ctx.job.dir().write_row_errors(errors).await?;
        errors.rows.clear();
        errors.rows_failed = 0;
    }
    let values = std::mem::take(buffer);
    let (dir, ckpt, field) = (ctx.job.dir().clone(), *pending, ctx.field.clone());
    dir.write_checkpoint(&ckpt, &field, values).await?;
    *pending = Checkpoint {
        fragment: pending.fragment,
        start: pending.end,
        end: pending.end,
        selected: 0,
        nulled: 0,
    };
    Ok(())
}

/// Write a fully checkpointed fragment's column file and record it as staged.
pub(super) async fn stage(ctx: &Arc<Ctx>, id: u64) -> Result<(), Stop> {
    let record = ctx.job.snapshot();
    let frag = record
        .plan
        .as_ref()
        .and_then(|p| p.fragments.iter().find(|f| f.id == id))
        .cloned()
        .ok_or_else(|| failed("stage", format!("fragment {id} is not in the plan")))?;
    let (chain, end) = covered(
        &ctx.job.dir().checkpoints().await?,
        id,
        0,
        frag.physical_rows,
    );
    if end != frag.physical_rows {
        return Err(failed(
            "stage",
            format!(
                "fragment {id}: checkpoints cover rows 0..{end} of {}",
                frag.physical_rows
            ),
        ));
    }
    let nulled = chain.iter().map(|c| c.nulled).sum();
    let dir = ctx.job.dir().clone();
    let batches = futures::stream::iter(chain)
        .then(move |c| {
            let dir = dir.clone();
            async move { dir.read_checkpoint(&c).await }
        })
        .map_ok(|batches| futures::stream::iter(batches.into_iter().map(Ok)))
        .try_flatten();
    let file = ctx
        .source
        .write_column(id, batches)
        .await
        .map_err(|e| failed("stage", format!("fragment {id}: {}", e.message)))?;
    ctx.job
        .update(|r| {
            let staged = FragmentStatus::Staged {
                file: file.clone(),
                nulled,
            };
            set_status(r, id, staged)
        })
        .await?;
    Ok(())
}

/// Commit the queued fragments once there are `commit_granularity` of them (or any, at the end).
pub(super) async fn commit_when_full(
    ctx: &Arc<Ctx>,
    queue: &mut Vec<u64>,
    last: bool,
) -> Result<(), Stop> {
    while !queue.is_empty() && (last || queue.len() >= ctx.spec.commit_granularity) {
        ctx.check()?;
        let n = queue.len().min(ctx.spec.commit_granularity);
        let group: Vec<u64> = queue.drain(..n).collect();
        commit(ctx, &group).await?;
    }
    Ok(())
}

async fn commit(ctx: &Arc<Ctx>, group: &[u64]) -> Result<(), Stop> {
    let record = ctx.job.snapshot();
    let mut files: Vec<(u64, StagedFile, u64)> = Vec::new();
    for id in group {
        let f = record
            .plan
            .as_ref()
            .and_then(|p| p.fragments.iter().find(|f| f.id == *id));
        if let Some(FragmentPlan {
            status: FragmentStatus::Staged { file, nulled },
            ..
        }) = f
        {
            files.push((*id, file.clone(), *nulled));
        }
    }
    let staged: Vec<StagedFile> = files.iter().map(|f| f.1.clone()).collect();
    let branch = ctx.spec.branch.as_deref();
    match ctx
        .app
        .store
        .commit_column_files(&ctx.location, branch, &ctx.source, &staged)
        .await
    {
        Ok(version) => {
            ctx.job
                .update(|r| {
                    r.commits += 1;
                    for (id, _, nulled) in &files {
                        set_status(
                            r,
                            *id,
                            FragmentStatus::Committed {
                                version,
                                nulled: *nulled,
                            },
                        );
                    }
                })
                .await?;
            for (id, ..) in &files {
                ctx.job.dir().remove_checkpoints(*id).await?;
            }
            Ok(())
        }
        // A conflict names one fragment at best: retry one by one and skip the refused ones.
        Err(e) if e.status.as_u16() == 409 && files.len() > 1 => {
            for id in group {
                Box::pin(commit(ctx, std::slice::from_ref(id))).await?;
            }
            Ok(())
        }
        Err(e) if e.status.as_u16() == 409 => {
            let (id, _, nulled) = files[0];
            tracing::warn!(fragment = id, error = %e.message, "backfill skips a fragment changed concurrently");
            ctx.job.progress().rows_done.fetch_sub(
                record
                    .plan
                    .as_ref()
                    .and_then(|p| p.fragments.iter().find(|f| f.id == id))
                    .map_or(0, |f| f.selected_rows),
                Ordering::Relaxed,
            );
            ctx.job
                .progress()
                .rows_nulled
                .fetch_sub(nulled, Ordering::Relaxed);
            ctx.job
                .update(|r| {
                    set_status(
                        r,
                        id,
                        FragmentStatus::Skipped {
                            reason: format!("changed concurrently; not written: {}", e.message),
                        },
                    )
                })
                .await?;
            ctx.job.dir().remove_checkpoints(id).await?;
            Ok(())
        }
        Err(e) => Err(failed("commit", e.message)),
    }
}
