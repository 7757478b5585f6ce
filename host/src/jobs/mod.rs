//! Background jobs: column backfills and table upkeep (`optimize`). The manager keeps every job's record in memory
//! and on disk (see `state`), starts runners as tokio tasks, resumes unfinished jobs when the
//! server starts, and answers describe/list/cancel. Jobs belong to a tenant: another tenant
//! neither sees nor cancels them.

mod backfill;
pub mod events;
mod helper;
pub mod optimize;
mod ownership;
mod pause;
pub mod refresh;
pub mod row_errors;
pub mod spec;
pub mod state;
pub mod transaction;
pub mod watch;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lance_namespace::ErrorCode;
use serde_json::{Value, json};

use crate::App;
use crate::error::{ApiError, ApiResult};
use crate::root::{Lease, RootStore};
use crate::store::At;
use events::JobEvent;
use optimize::{OPTIMIZE, OptimizeSpec};
use spec::{BackfillOptions, BackfillSpec, JobSpec};
use state::{FragmentStatus, JobDir, JobRecord, JobState};

pub const BACKFILL: &str = "backfill";

/// Live counters of a running job (the durable ones are in its record).
#[derive(Default)]
struct Progress {
    rows_done: AtomicU64,
    rows_nulled: AtomicU64,
}

pub struct Job {
    dir: JobDir,
    /// The record as last read or written by this node.
    record: Mutex<JobRecord>,
    progress: Progress,
    cancel: AtomicBool,
    /// Set by a pause: the runner stops as for a cancel, but the job ends PAUSED.
    pause: AtomicBool,
    /// The generation of the lease this node runs the job under (0: it does not run it).
    generation: AtomicU64,
    /// Set when this node lost the job's lease, or hands it over on shutdown: its runner stops
    /// and records nothing more.
    lost: AtomicBool,
    /// This node's record writes, one at a time.
    writing: tokio::sync::Mutex<()>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn job_not_found(job_id: &str) -> ApiError {
    // Lance Namespace has no "job" code; a job is the nearest thing to a transaction.
    ApiError::new(
        ErrorCode::TransactionNotFound,
        format!("job not found: {job_id}"),
    )
}

impl Job {
    fn snapshot(&self) -> JobRecord {
        self.record.lock().unwrap().clone()
    }

    fn new(dir: JobDir, record: JobRecord) -> Self {
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

    /// Change the record and make the change durable before anything depends on it. The
    /// record is read back and changed with a conditional write, so changes from other nodes
    /// (a cancel, properties) are never overwritten. The node running the job checks it still
    /// owns it: after a takeover it finds a newer lease generation and stops.
    async fn update(&self, change: impl Fn(&mut JobRecord)) -> ApiResult<()> {
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
    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
            || self.pause.load(Ordering::Relaxed)
            || self.lost.load(Ordering::Relaxed)
    }

    /// The describe answer: the shape the lancedb SDK polls, plus `progress`.
    fn describe(&self) -> Value {
        let r = self.snapshot();
        let failure = r
            .failure
            .as_ref()
            .map(|f| json!({"phase": f.phase, "message": f.message, "retryable": f.retryable}));
        let progress = match &r.spec {
            JobSpec::Backfill(_) => self.backfill_progress(&r),
            JobSpec::Refresh(_) => json!({ "steps": r.steps }),
            JobSpec::Optimize(spec) => {
                let done = spec
                    .actions
                    .iter()
                    .filter(|p| r.steps.contains_key(p.name()))
                    .count();
                let current = (!r.state.is_terminal())
                    .then(|| {
                        spec.actions
                            .iter()
                            .find(|p| !r.steps.contains_key(p.name()))
                    })
                    .flatten()
                    .map(|p| p.name());
                json!({
                    "phases_done": done,
                    "phases_total": spec.actions.len(),
                    "phase": current,
                    "steps": r.steps,
                })
            }
        };
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

    fn backfill_progress(&self, r: &JobRecord) -> Value {
        let (rows_total, fragments_total, fragments_done) = match &r.plan {
            Some(p) => (
                p.fragments.iter().map(|f| f.selected_rows).sum::<u64>(),
                p.fragments.len() as u64,
                p.fragments
                    .iter()
                    .filter(|f| {
                        !matches!(
                            f.status,
                            FragmentStatus::Pending | FragmentStatus::Staged { .. }
                        )
                    })
                    .count() as u64,
            ),
            None => (0, 0, 0),
        };
        // A node that does not run the job has no live counter: what is durable.
        let durable_rows: u64 = r
            .plan
            .iter()
            .flat_map(|p| &p.fragments)
            .filter(|f| {
                matches!(
                    f.status,
                    FragmentStatus::Staged { .. } | FragmentStatus::Committed { .. }
                )
            })
            .map(|f| f.selected_rows)
            .sum();
        json!({
            "rows_done": self.progress.rows_done.load(Ordering::Relaxed).max(durable_rows),
            "rows_total": rows_total,
            "rows_nulled": self.progress.rows_nulled.load(Ordering::Relaxed),
            "fragments_done": fragments_done,
            "fragments_total": fragments_total,
            "commits": r.commits,
            "planned": r.plan.is_some(),
        })
    }

    fn list_row(&self) -> Value {
        let r = self.snapshot();
        let mut row = self.describe();
        // The SDK's list rows name these differently from describe.
        row["state"] = json!(r.state);
        row["created_at_millis"] = json!(r.creation_ms);
        row["table"] = json!(r.spec.table_id().join("$"));
        row
    }
}

/// Why a job stopped early.
enum Stop {
    Cancelled,
    Failed(state::Failure),
}

impl Job {
    /// Run `drive` in a task of its own, so that a panic in it still ends the job (FAILED)
    /// instead of leaving it running forever.
    async fn run_caught<F>(&self, drive: F) -> Result<(), Stop>
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
    async fn finish(&self, outcome: Result<(), Stop>, result: impl Fn(&JobRecord) -> Value) {
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

pub struct JobManager {
    root: Arc<RootStore>,
    /// This node's name in job leases.
    node: String,
    lease_ttl: Duration,
    /// Jobs this node runs or has run, by id.
    jobs: Mutex<BTreeMap<String, Arc<Job>>>,
    /// Records of finished jobs read from the root (a finished record no longer changes but
    /// for its properties, which this node then rewrites here too).
    finished: Mutex<BTreeMap<String, JobRecord>>,
    /// Upkeep jobs running at once (the rest wait their turn).
    upkeep_slots: Arc<tokio::sync::Semaphore>,
    /// (table, branch) of the jobs other nodes were running at the last scan of the root.
    elsewhere: Mutex<std::collections::HashSet<(String, Option<String>)>>,
    /// Jobs this node runs now (their runner or lease keeper has not ended).
    running: tokio::sync::watch::Sender<usize>,
    /// Set on shutdown: this node adopts no more jobs.
    closing: AtomicBool,
    /// Tasks of other nodes' backfills this node computes at once, at most (`helper`).
    helper_tasks: usize,
    helping: std::sync::atomic::AtomicUsize,
}

impl JobManager {
    /// Jobs are recorded under `<root>/_jobs`; nothing is read until [`Self::resume_all`].
    pub fn open(root: Arc<RootStore>, node: String, lease_ttl: Duration) -> Self {
        Self {
            root,
            node,
            lease_ttl: lease_ttl.max(Duration::from_secs(1)),
            jobs: Default::default(),
            finished: Default::default(),
            upkeep_slots: Arc::new(tokio::sync::Semaphore::new(1)),
            elsewhere: Default::default(),
            running: tokio::sync::watch::Sender::new(0),
            closing: AtomicBool::new(false),
            helper_tasks: 1,
            helping: Default::default(),
        }
    }

    /// How many tasks of other nodes' backfills this node computes at once (0: none).
    pub fn with_helper_tasks(mut self, n: usize) -> Self {
        self.helper_tasks = n;
        self
    }

    /// How many upkeep jobs may run at once (at least one).
    pub fn with_upkeep_concurrency(mut self, n: usize) -> Self {
        self.upkeep_slots = Arc::new(tokio::sync::Semaphore::new(n.max(1)));
        self
    }

    /// How many jobs there are of each (type, state, tenant), for metrics: those this node
    /// runs or ran, and the finished ones its scans of the root found.
    pub fn counts(&self) -> BTreeMap<(String, JobState, String), u64> {
        let mut records: BTreeMap<String, (String, JobState, String)> = self
            .finished
            .lock()
            .unwrap()
            .values()
            .map(|r| {
                (
                    r.job_id.clone(),
                    (r.job_type.clone(), r.state, r.tenant.clone()),
                )
            })
            .collect();
        for job in self.jobs.lock().unwrap().values() {
            let r = job.snapshot();
            records.insert(r.job_id, (r.job_type, r.state, r.tenant));
        }
        let mut counts = BTreeMap::new();
        for key in records.into_values() {
            *counts.entry(key).or_default() += 1;
        }
        counts
    }

    /// On shutdown: stop this node's jobs where they stand (nothing more is recorded; work
    /// already durable stays) and give their leases up, so another node resumes them at once
    /// instead of after the lease TTL. Waits up to `wait` for the runners to stop; a runner
    /// still busy then leaves its lease to expire.
    pub async fn hand_over(&self, wait: Duration) {
        self.closing.store(true, Ordering::Relaxed);
        let mut handed = 0;
        for job in self.jobs.lock().unwrap().values() {
            if job.generation.load(Ordering::Relaxed) != 0 && !job.snapshot().state.is_terminal() {
                job.lost.store(true, Ordering::Relaxed);
                handed += 1;
            }
        }
        if handed == 0 {
            return;
        }
        tracing::info!(jobs = handed, "handing jobs over to other nodes");
        let mut running = self.running.subscribe();
        let _ = tokio::time::timeout(wait, running.wait_for(|n| *n == 0)).await;
    }

    /// Start adopting unfinished jobs: at once (those a previous process of this node left),
    /// then every third of the lease TTL, at most 2 s apart (those whose node stopped renewing
    /// their lease, or handed them over on shutdown).
    pub fn resume_all(&self, app: &Arc<App>) {
        let app = app.clone();
        tokio::spawn(async move {
            let every = (app.jobs.lease_ttl / 3).min(Duration::from_secs(2));
            loop {
                if let Err(e) = ownership::adopt_orphans(&app).await {
                    tracing::warn!(error = %e, "cannot look for jobs to resume");
                }
                tokio::time::sleep(every).await;
            }
        });
    }

    /// Ids of every job recorded under the root (its folders; one listing).
    async fn job_ids(&self) -> ApiResult<Vec<String>> {
        self.root.list_dirs(state::JOBS).await
    }

    /// The job as this node knows it: its own live job, else the record on the root (`None`
    /// when there is no such record).
    async fn view(&self, job_id: &str) -> ApiResult<Option<Arc<Job>>> {
        if let Some(job) = self.jobs.lock().unwrap().get(job_id).cloned()
            && (job.generation.load(Ordering::Relaxed) != 0 || job.snapshot().state.is_terminal())
            && !job.lost.load(Ordering::Relaxed)
        {
            return Ok(Some(job));
        }
        if let Some(r) = self.finished.lock().unwrap().get(job_id).cloned() {
            return Ok(Some(Arc::new(Job::new(self.dir(job_id), r))));
        }
        let dir = self.dir(job_id);
        let record = match dir.load().await {
            Ok(r) => r,
            Err(e) => {
                let key = format!("{}/{job_id}/job.json", state::JOBS);
                if self.root.head(&key).await?.is_none() {
                    return Ok(None);
                }
                return Err(e);
            }
        };
        if record.state.is_terminal() {
            self.finished
                .lock()
                .unwrap()
                .insert(job_id.to_string(), record.clone());
        }
        Ok(Some(Arc::new(Job::new(dir, record))))
    }

    fn dir(&self, job_id: &str) -> JobDir {
        JobDir::new(self.root.clone(), job_id)
    }

    async fn get(&self, tenant: &str, job_id: &str) -> ApiResult<Arc<Job>> {
        // Ids are ours (`job-<millis>-<hex>`); anything else names no job (and no object).
        let well_formed = !job_id.is_empty()
            && job_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !well_formed {
            return Err(job_not_found(job_id));
        }
        match self.view(job_id).await? {
            Some(j) if j.snapshot().tenant == tenant => Ok(j),
            _ => Err(job_not_found(job_id)),
        }
    }

    /// Validate a backfill request completely, record the job and start it. Answers once the
    /// job is durable; the work happens in the background.
    pub async fn submit_backfill(
        &self,
        app: &Arc<App>,
        tenant: &str,
        table_id: Vec<String>,
        location: String,
        branch: Option<String>,
        options: BackfillOptions,
    ) -> ApiResult<String> {
        let latest = app.store.latest(&location, branch.as_deref()).await?;
        let spec = options.check(table_id, branch, latest.version().version)?;
        crate::field_path::parse(&spec.column)?;
        backfill::prepare(app, &location, &spec).await?;
        let job_id = new_job_id();
        let column = spec.column.clone();
        let record = new_record(&job_id, BACKFILL, tenant, location, JobSpec::Backfill(spec));
        let (job, lease) = self
            .insert_unless(record, |other| {
                other
                    .spec
                    .backfill()
                    .is_some_and(|s| s.column == column)
                    .then(|| {
                        format!(
                            "column '{column}' already has a backfill in progress (job {})",
                            other.job_id
                        )
                    })
            })
            .await?;
        ownership::start(app, job, lease);
        Ok(job_id)
    }

    /// Record an upkeep job and start it (it waits for an upkeep slot). One upkeep job per
    /// (table, branch) at a time: another is refused (409) while one is in progress.
    pub async fn submit_optimize(
        &self,
        app: &Arc<App>,
        tenant: &str,
        location: String,
        spec: OptimizeSpec,
    ) -> ApiResult<String> {
        let job_id = new_job_id();
        let trigger_is_policy = spec.trigger == "policy";
        let (location_of_job, branch_of_job) = (location.clone(), spec.branch.clone());
        let record = new_record(&job_id, OPTIMIZE, tenant, location, JobSpec::Optimize(spec));
        let (job, lease) = self
            .insert_unless(record, |other| {
                matches!(other.spec, JobSpec::Optimize(_)).then(|| {
                    format!(
                        "the table already has an upkeep job in progress (job {})",
                        other.job_id
                    )
                })
            })
            .await?;
        ownership::start(app, job, lease);
        if trigger_is_policy {
            self.prune_policy_jobs(&location_of_job, branch_of_job.as_deref());
        }
        Ok(job_id)
    }

    /// Upkeep the policy starts runs every few seconds on a busy table: of its finished jobs,
    /// only the newest `KEEP_POLICY_JOBS` per (table, branch) are kept (record and all), so
    /// their number stays bounded. Jobs started on request are kept like backfills.
    fn prune_policy_jobs(&self, location: &str, branch: Option<&str>) {
        const KEEP_POLICY_JOBS: usize = 16;
        let mut jobs = self.jobs.lock().unwrap();
        let mut finished: Vec<String> = jobs
            .values()
            .map(|j| j.snapshot())
            .filter(|r| {
                r.state.is_terminal()
                    && r.location == location
                    && r.spec.branch() == branch
                    && matches!(&r.spec, JobSpec::Optimize(s) if s.trigger == "policy")
            })
            .map(|r| r.job_id)
            .collect();
        // Ids start with the creation time: sorted, the oldest come first.
        finished.sort();
        let excess = finished.len().saturating_sub(KEEP_POLICY_JOBS);
        for id in &finished[..excess] {
            if let Some(job) = jobs.remove(id) {
                self.finished.lock().unwrap().remove(id);
                tokio::spawn(async move {
                    if let Err(e) = job.dir.remove().await {
                        tracing::warn!(error = %e, "cannot remove a finished upkeep job");
                    }
                });
            }
        }
    }

    /// Every unfinished job recorded under the root.
    async fn unfinished(&self) -> ApiResult<Vec<JobRecord>> {
        let mut out = Vec::new();
        for id in self.job_ids().await? {
            if self.finished.lock().unwrap().contains_key(&id) {
                continue;
            }
            match self.view(&id).await {
                Ok(Some(job)) => {
                    let r = job.snapshot();
                    if !r.state.is_terminal() {
                        out.push(r);
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(job_id = %id, error = %e, "skipping an unreadable job"),
            }
        }
        Ok(out)
    }

    /// Make `record` durable and known, unless `conflict` names a reason against it among the
    /// jobs in progress on the same (table, branch), on any node. The job's lease is taken
    /// before its record is written, so no other node adopts it in between.
    async fn insert_unless(
        &self,
        mut record: JobRecord,
        conflict: impl Fn(&JobRecord) -> Option<String>,
    ) -> ApiResult<(Arc<Job>, Lease)> {
        for o in self.unfinished().await? {
            if o.location == record.location
                && o.spec.branch() == record.spec.branch()
                && let Some(why) = conflict(&o)
            {
                return Err(ApiError::conflict(why));
            }
        }
        let dir = self.dir(&record.job_id);
        let lease = Lease::try_acquire(&self.root, &dir.lease_key(), &self.node, self.lease_ttl)
            .await?
            .ok_or_else(|| ApiError::internal("a new job's lease is taken"))?;
        record.owner = Some(self.node.clone());
        record.owner_generation = lease.generation;
        record.log(JobEvent::api("created", &self.node));
        record.log(JobEvent::new("claim", "runner", "scheduler", &self.node).entity("job"));
        let job = Arc::new(Job::new(dir.clone(), record.clone()));
        job.generation.store(lease.generation, Ordering::Relaxed);
        // Known as running here before its record exists, so the orphan scan of this very
        // node (which may take a lease it holds itself) never adopts it a second time.
        self.jobs
            .lock()
            .unwrap()
            .insert(record.job_id.clone(), job.clone());
        let created = dir.create(&record).await;
        if !matches!(created, Ok(true)) {
            self.jobs.lock().unwrap().remove(&record.job_id);
            lease.release(&self.root).await;
            created?;
            return Err(ApiError::internal(format!(
                "job id {} is taken",
                record.job_id
            )));
        }
        Ok((job, lease))
    }

    /// Whether a job runs on (table, branch), here or (as of the last scan of the root) on
    /// another node: the upkeep policy leaves such a table alone (a compaction would make a
    /// running backfill skip the fragments it rewrote).
    pub fn busy(&self, location: &str, branch: Option<&str>) -> bool {
        let key = (location.to_string(), branch.map(str::to_string));
        if self.elsewhere.lock().unwrap().contains(&key) {
            return true;
        }
        self.jobs.lock().unwrap().values().any(|j| {
            let r = j.snapshot();
            r.state == JobState::InProgress && r.location == location && r.spec.branch() == branch
        })
    }

    /// Whether an upkeep job of this node is running the index phase on a table
    /// (index/list's `status`).
    pub fn indexing(&self, location: &str, branch: Option<&str>) -> bool {
        self.jobs.lock().unwrap().values().any(|j| {
            let r = j.snapshot();
            r.state == JobState::InProgress
                && r.location == location
                && r.spec.branch() == branch
                && matches!(&r.spec, JobSpec::Optimize(s)
                    if s.actions.contains(&optimize::Phase::Index)
                        && !r.steps.contains_key(optimize::Phase::Index.name()))
        })
    }

    pub async fn describe(&self, tenant: &str, job_id: &str) -> ApiResult<Value> {
        Ok(self.get(tenant, job_id).await?.describe())
    }

    /// A tenant's jobs as (job_id, row), optionally only those of one table and/or state, as
    /// recorded under the root (so every node answers the same).
    pub async fn list(
        &self,
        tenant: &str,
        table: Option<&[String]>,
        state: Option<JobState>,
    ) -> ApiResult<Vec<(String, Value)>> {
        let mut rows = Vec::new();
        for id in self.job_ids().await? {
            let job = match self.view(&id).await {
                Ok(Some(j)) => j,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(job_id = %id, error = %e, "skipping an unreadable job");
                    continue;
                }
            };
            let r = job.snapshot();
            let keep = r.tenant == tenant
                && table.is_none_or(|t| t == r.spec.table_id())
                && state.is_none_or(|s| s == r.state);
            if keep {
                rows.push((r.job_id.clone(), job.list_row()));
            }
        }
        Ok(rows)
    }

    /// Ask a job to stop and wait (briefly) until it has: work already committed stays,
    /// staged files are never committed. A finished job cannot be cancelled (409). The
    /// request is recorded; the node running the job sees it within a lease renewal.
    pub async fn cancel(&self, tenant: &str, job_id: &str) -> ApiResult<Value> {
        let job = self.get(tenant, job_id).await?;
        let state = job.snapshot().state;
        if state.is_terminal() {
            return Err(ApiError::new(
                ErrorCode::InvalidTableState,
                format!("job {job_id} already finished ({state:?}); nothing to cancel"),
            ));
        }
        job.cancel.store(true, Ordering::Relaxed);
        let node = self.node.clone();
        job.update(|r| {
            r.cancel_requested = true;
            r.log(JobEvent::api("cancel_requested", &node));
            // A paused job has no runner to stop: it ends here.
            if r.state == JobState::Paused {
                r.state = JobState::Cancelled;
                r.finish_ms = Some(now_ms());
                r.log(JobEvent::api("cancelled", &node));
            }
        })
        .await?;
        if job.snapshot().state == JobState::Cancelled {
            let _ = job.dir.remove_all_checkpoints().await;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let job = self.get(tenant, job_id).await?;
            if job.snapshot().state.is_terminal() || tokio::time::Instant::now() >= deadline {
                return Ok(job.describe());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn new_job_id() -> String {
    format!(
        "job-{:013}-{}",
        now_ms(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

fn new_record(
    job_id: &str,
    job_type: &str,
    tenant: &str,
    location: String,
    spec: JobSpec,
) -> JobRecord {
    JobRecord {
        job_id: job_id.to_string(),
        job_type: job_type.to_string(),
        tenant: tenant.to_string(),
        location,
        state: JobState::InProgress,
        creation_ms: now_ms(),
        finish_ms: None,
        spec,
        plan: None,
        steps: Default::default(),
        commits: 0,
        failure: None,
        result: None,
        cancel_requested: false,
        pause_requested: false,
        events: Vec::new(),
        owner: None,
        owner_generation: 0,
        properties: Default::default(),
    }
}

/// Where a job reads: its branch at its pinned version.
fn read_at(spec: &BackfillSpec) -> At {
    At {
        branch: spec.branch.clone(),
        version: Some(spec.read_version),
    }
}
