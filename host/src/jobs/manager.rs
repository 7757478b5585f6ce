//! The job manager: every job this node runs or has looked at, by id; submission (one job per
//! table and branch where its kind says so), describe/list/cancel for the API, and the kinds
//! it was handed at start-up.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lance_namespace::ErrorCode;
use serde_json::Value;

use super::events::JobEvent;
use super::job::{Job, job_not_found, now_ms};
use super::kind::{JobKind, JobSpec};
use super::ownership;
use super::state::{self, JobDir, JobRecord, JobState};
use crate::App;
use crate::error::{ApiError, ApiResult};
use crate::root::{Lease, RootStore};

pub struct JobManager {
    pub(super) root: Arc<RootStore>,
    /// This node's name in job leases.
    pub(super) node: String,
    pub(super) lease_ttl: Duration,
    /// What each `job_type` does.
    kinds: BTreeMap<&'static str, Arc<dyn JobKind>>,
    /// Jobs this node runs or has run, by id.
    pub(super) jobs: Mutex<BTreeMap<String, Arc<Job>>>,
    /// Records of finished jobs read from the root (a finished record no longer changes but
    /// for its properties, which this node then rewrites here too).
    pub(super) finished: Mutex<BTreeMap<String, JobRecord>>,
    /// (table, branch) of the jobs other nodes were running at the last scan of the root.
    pub(super) elsewhere: Mutex<std::collections::HashSet<(String, Option<String>)>>,
    /// Jobs this node runs now (their runner or lease keeper has not ended).
    pub(super) running: tokio::sync::watch::Sender<usize>,
    /// Set on shutdown: this node adopts no more jobs.
    pub(super) closing: AtomicBool,
}

impl JobManager {
    /// Jobs are recorded under `<root>/_jobs`; nothing is read until [`Self::resume_all`].
    pub fn open(root: Arc<RootStore>, node: String, lease_ttl: Duration) -> Self {
        Self {
            root,
            node,
            lease_ttl: lease_ttl.max(Duration::from_secs(1)),
            kinds: BTreeMap::new(),
            jobs: Default::default(),
            finished: Default::default(),
            elsewhere: Default::default(),
            running: tokio::sync::watch::Sender::new(0),
            closing: AtomicBool::new(false),
        }
    }

    /// The kinds of job this node runs. A record of any other `job_type` (written by a newer
    /// server) is listed and described, but never run here.
    pub fn with_kinds(mut self, kinds: impl IntoIterator<Item = Arc<dyn JobKind>>) -> Self {
        for kind in kinds {
            self.kinds.insert(kind.job_type(), kind);
        }
        self
    }

    pub(super) fn kind(&self, job_type: &str) -> Option<&Arc<dyn JobKind>> {
        self.kinds.get(job_type)
    }

    /// This node's name in leases and events.
    pub fn node(&self) -> &str {
        &self.node
    }

    pub fn root(&self) -> &Arc<RootStore> {
        &self.root
    }

    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// Set once this node shuts down: kinds start no new work.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// A copy of a job this node does not run (a helper's view of another node's job).
    pub fn detached(&self, record: JobRecord) -> Arc<Job> {
        Arc::new(Job::new(self.dir(&record.job_id), record))
    }

    /// The records of the jobs this node runs or ran, as it last saw them.
    pub fn jobs_here(&self) -> Vec<JobRecord> {
        self.jobs
            .lock()
            .unwrap()
            .values()
            .map(|j| j.snapshot())
            .collect()
    }

    /// Forget finished jobs and remove their records (the upkeep policy's old runs).
    pub fn remove_finished(&self, ids: &[String]) {
        let mut jobs = self.jobs.lock().unwrap();
        for id in ids {
            let Some(job) = jobs.remove(id) else { continue };
            if !job.snapshot().state.is_terminal() {
                jobs.insert(id.clone(), job);
                continue;
            }
            self.finished.lock().unwrap().remove(id);
            tokio::spawn(async move {
                if let Err(e) = job.dir.remove().await {
                    tracing::warn!(error = %e, "cannot remove a finished job");
                }
            });
        }
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
    pub async fn job_ids(&self) -> ApiResult<Vec<String>> {
        self.root.list_dirs(state::JOBS).await
    }

    /// The job as this node knows it: its own live job, else the record on the root (`None`
    /// when there is no such record).
    pub async fn view(&self, job_id: &str) -> ApiResult<Option<Arc<Job>>> {
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

    pub fn dir(&self, job_id: &str) -> JobDir {
        JobDir::new(self.root.clone(), job_id)
    }

    pub(super) async fn get(&self, tenant: &str, job_id: &str) -> ApiResult<Arc<Job>> {
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

    /// Record a job of the kind `job_type` and start it on this node; answers once the job is durable (the
    /// work happens in the background). Refused (409) when `conflict` names a reason against
    /// it among the jobs of the same kind in progress on the same (table, branch), on any node.
    pub async fn submit(
        &self,
        app: &Arc<App>,
        job_type: &'static str,
        tenant: &str,
        location: String,
        spec: JobSpec,
        conflict: impl Fn(&JobRecord) -> Option<String>,
    ) -> ApiResult<String> {
        if self.kind(job_type).is_none() {
            return Err(ApiError::internal(format!(
                "this server does not run {job_type} jobs"
            )));
        }
        let job_id = new_job_id();
        let record = new_record(&job_id, job_type, tenant, location, spec);
        let (job, lease) = self
            .insert_unless(record, |other| {
                (other.job_type == job_type)
                    .then(|| conflict(other))
                    .flatten()
            })
            .await?;
        ownership::start(app, job, lease);
        Ok(job_id)
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

    fn kind_of(&self, job: &Job) -> Option<&dyn JobKind> {
        self.kind(&job.snapshot().job_type).map(|k| k.as_ref())
    }

    pub async fn describe(&self, tenant: &str, job_id: &str) -> ApiResult<Value> {
        let job = self.get(tenant, job_id).await?;
        Ok(job.describe(self.kind_of(&job)))
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
                rows.push((r.job_id.clone(), job.list_row(self.kind_of(&job))));
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
                return Ok(job.describe(self.kind_of(&job)));
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
