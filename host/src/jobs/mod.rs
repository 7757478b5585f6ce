//! Background jobs: column backfills and table upkeep (`optimize`). The manager keeps every job's record in memory
//! and on disk (see `state`), starts runners as tokio tasks, resumes unfinished jobs when the
//! server starts, and answers describe/list/cancel. Jobs belong to a tenant: another tenant
//! neither sees nor cancels them.

mod backfill;
pub mod optimize;
pub mod spec;
pub mod state;
pub mod transaction;
pub mod watch;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lance_namespace::ErrorCode;
use serde_json::{Value, json};

use crate::App;
use crate::error::{ApiError, ApiResult};
use crate::store::At;
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
    record: Mutex<JobRecord>,
    progress: Progress,
    cancel: AtomicBool,
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

    /// Change the record and make the change durable before anything depends on it.
    fn update(&self, change: impl FnOnce(&mut JobRecord)) -> ApiResult<()> {
        let mut r = self.record.lock().unwrap();
        change(&mut r);
        self.dir.save(&r)
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
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
        json!({
            "rows_done": self.progress.rows_done.load(Ordering::Relaxed),
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

    /// Record how the job ended (durably); `result` makes a finished job's result.
    fn finish(&self, outcome: Result<(), Stop>, result: impl FnOnce(&JobRecord) -> Value) {
        let saved = self.update(|r| {
            r.finish_ms = Some(now_ms());
            match outcome {
                Ok(()) => {
                    r.state = JobState::Done;
                    r.result = Some(result(r));
                }
                Err(Stop::Cancelled) => r.state = JobState::Cancelled,
                Err(Stop::Failed(f)) => {
                    r.state = JobState::Failed;
                    r.failure = Some(f);
                }
            }
        });
        let r = self.snapshot();
        if let Err(e) = saved {
            tracing::error!(job_id = %r.job_id, error = %e, "could not record the end of a job");
        }
        tracing::info!(job_id = %r.job_id, job_type = %r.job_type, state = ?r.state, "job finished");
    }
}

pub struct JobManager {
    root: PathBuf,
    jobs: Mutex<BTreeMap<String, Arc<Job>>>,
    /// Upkeep jobs running at once (the rest wait their turn).
    upkeep_slots: Arc<tokio::sync::Semaphore>,
}

impl JobManager {
    /// Load every job recorded under `root` (unreadable records are logged and skipped).
    pub fn open(root: PathBuf) -> std::io::Result<Self> {
        std::fs::create_dir_all(&root)?;
        let mut jobs = BTreeMap::new();
        for entry in std::fs::read_dir(&root)?.flatten() {
            if !entry.path().is_dir() {
                continue;
            }
            let dir = JobDir::new(entry.path());
            match dir.load() {
                Ok(record) => {
                    let job = Job {
                        dir,
                        cancel: AtomicBool::new(record.cancel_requested),
                        record: Mutex::new(record.clone()),
                        progress: Progress::default(),
                    };
                    jobs.insert(record.job_id.clone(), Arc::new(job));
                }
                Err(e) => {
                    tracing::warn!(path = %entry.path().display(), error = %e, "skipping job")
                }
            }
        }
        Ok(Self {
            root,
            jobs: Mutex::new(jobs),
            upkeep_slots: Arc::new(tokio::sync::Semaphore::new(1)),
        })
    }

    /// How many upkeep jobs may run at once (at least one).
    pub fn with_upkeep_concurrency(mut self, n: usize) -> Self {
        self.upkeep_slots = Arc::new(tokio::sync::Semaphore::new(n.max(1)));
        self
    }

    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// How many jobs there are of each (type, state, tenant), for metrics.
    pub fn counts(&self) -> BTreeMap<(String, JobState, String), u64> {
        let mut counts = BTreeMap::new();
        for job in self.jobs.lock().unwrap().values() {
            let r = job.snapshot();
            *counts.entry((r.job_type, r.state, r.tenant)).or_default() += 1;
        }
        counts
    }

    /// Restart every job a previous process left IN_PROGRESS.
    pub fn resume_all(&self, app: &Arc<App>) {
        let unfinished: Vec<Arc<Job>> = self
            .jobs
            .lock()
            .unwrap()
            .values()
            .filter(|j| j.snapshot().state == JobState::InProgress)
            .cloned()
            .collect();
        for job in unfinished {
            let r = job.snapshot();
            tracing::info!(job_id = %r.job_id, job_type = %r.job_type, "resuming job");
            match r.spec {
                JobSpec::Backfill(_) => tokio::spawn(backfill::run(app.clone(), job)),
                JobSpec::Optimize(_) => tokio::spawn(optimize::run(app.clone(), job)),
            };
        }
    }

    fn get(&self, tenant: &str, job_id: &str) -> ApiResult<Arc<Job>> {
        let job = self.jobs.lock().unwrap().get(job_id).cloned();
        match job {
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
        let creation_ms = now_ms();
        let job_id = format!(
            "job-{creation_ms:013}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let column = spec.column.clone();
        let record = new_record(&job_id, BACKFILL, tenant, location, JobSpec::Backfill(spec));
        let job = self.insert_unless(record, |other| {
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
        })?;
        tokio::spawn(backfill::run(app.clone(), job));
        Ok(job_id)
    }

    /// Record an upkeep job and start it (it waits for an upkeep slot). One upkeep job per
    /// (table, branch) at a time: another is refused (409) while one is in progress.
    pub fn submit_optimize(
        &self,
        app: &Arc<App>,
        tenant: &str,
        location: String,
        spec: OptimizeSpec,
    ) -> ApiResult<String> {
        let job_id = format!(
            "job-{:013}-{}",
            now_ms(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let trigger_is_policy = spec.trigger == "policy";
        let (location_of_job, branch_of_job) = (location.clone(), spec.branch.clone());
        let record = new_record(&job_id, OPTIMIZE, tenant, location, JobSpec::Optimize(spec));
        let job = self.insert_unless(record, |other| {
            matches!(other.spec, JobSpec::Optimize(_)).then(|| {
                format!(
                    "the table already has an upkeep job in progress (job {})",
                    other.job_id
                )
            })
        })?;
        tokio::spawn(optimize::run(app.clone(), job));
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
                job.dir.remove();
            }
        }
    }

    /// Make `record` durable and known, unless `conflict` names a reason against it among the
    /// jobs in progress on the same (table, branch).
    fn insert_unless(
        &self,
        record: JobRecord,
        conflict: impl Fn(&JobRecord) -> Option<String>,
    ) -> ApiResult<Arc<Job>> {
        let job = Arc::new(Job {
            dir: JobDir::new(self.root.join(&record.job_id)),
            record: Mutex::new(record.clone()),
            progress: Progress::default(),
            cancel: AtomicBool::new(false),
        });
        let mut jobs = self.jobs.lock().unwrap();
        for other in jobs.values() {
            let o = other.snapshot();
            if o.state == JobState::InProgress
                && o.location == record.location
                && o.spec.branch() == record.spec.branch()
                && let Some(why) = conflict(&o)
            {
                return Err(ApiError::conflict(why));
            }
        }
        job.dir.save(&record)?;
        jobs.insert(record.job_id.clone(), job.clone());
        Ok(job)
    }

    /// Whether any job is in progress on (table, branch): the upkeep policy leaves such a
    /// table alone (a compaction would make a running backfill skip the fragments it rewrote).
    pub fn busy(&self, location: &str, branch: Option<&str>) -> bool {
        self.jobs.lock().unwrap().values().any(|j| {
            let r = j.snapshot();
            r.state == JobState::InProgress && r.location == location && r.spec.branch() == branch
        })
    }

    /// Whether an upkeep job is running the index phase on a table (index/list's `status`).
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

    pub fn describe(&self, tenant: &str, job_id: &str) -> ApiResult<Value> {
        Ok(self.get(tenant, job_id)?.describe())
    }

    /// A tenant's jobs as (job_id, row), optionally only those of one table and/or state.
    pub fn list(
        &self,
        tenant: &str,
        table: Option<&[String]>,
        state: Option<JobState>,
    ) -> Vec<(String, Value)> {
        let jobs: Vec<Arc<Job>> = self.jobs.lock().unwrap().values().cloned().collect();
        jobs.into_iter()
            .filter_map(|j| {
                let r = j.snapshot();
                let keep = r.tenant == tenant
                    && table.is_none_or(|t| t == r.spec.table_id())
                    && state.is_none_or(|s| s == r.state);
                keep.then(|| (r.job_id.clone(), j.list_row()))
            })
            .collect()
    }

    /// Ask a job to stop and wait (briefly) until it has: work already committed stays,
    /// staged files are never committed. A finished job cannot be cancelled (409).
    pub async fn cancel(&self, tenant: &str, job_id: &str) -> ApiResult<Value> {
        let job = self.get(tenant, job_id)?;
        let state = job.snapshot().state;
        if state.is_terminal() {
            return Err(ApiError::new(
                ErrorCode::InvalidTableState,
                format!("job {job_id} already finished ({state:?}); nothing to cancel"),
            ));
        }
        job.cancel.store(true, Ordering::Relaxed);
        job.update(|r| r.cancel_requested = true)?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !job.snapshot().state.is_terminal() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(job.describe())
    }
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
