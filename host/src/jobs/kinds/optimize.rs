//! Upkeep jobs (`job_type: "optimize"`): index upkeep, compaction and version cleanup of one
//! (table, branch), in that order, each phase one of lance's own operations (see
//! `store::upkeep`). Indexes come first because lance never compacts indexed and unindexed
//! fragments together: once every fragment is indexed, compaction can merge them all (and
//! remaps the indexes in its commit). Started by `POST /v1/table/{id}/optimize` or by the upkeep policy.
//!
//! Restart safety: a phase's result is recorded when it finishes, and a job found unfinished
//! at start-up carries on from the first unfinished phase. Every phase is idempotent (each
//! re-plans from the table as it is), and none makes anything visible before its single
//! commit, so a phase cut off by a crash or a cancel is simply run again or dropped.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::App;
use crate::error::{ApiError, ApiResult};
use crate::jobs::state::{Failure, JobRecord, JobState};
use crate::jobs::{Job, JobKind, JobManager, JobSpec, Stop};
use crate::store::{IndexAction, IndexHealth};

pub const OPTIMIZE: &str = "optimize";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// LSM tables: merge flushed generations into the base table (a quiet table's memtables
    /// are flushed first).
    CompactLsm,
    Index,
    Compact,
    Cleanup,
}

impl Phase {
    /// What `all` runs (with `compact_lsm` first on a table with an LSM write spec).
    pub const ALL: [Phase; 3] = [Phase::Index, Phase::Compact, Phase::Cleanup];

    pub fn name(self) -> &'static str {
        match self {
            Phase::CompactLsm => "compact_lsm",
            Phase::Compact => "compact",
            Phase::Index => "index",
            Phase::Cleanup => "cleanup",
        }
    }
}

/// The thresholds a job works to (the policy's, or a request's overrides of them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Fragments with fewer live rows are merged by compaction.
    pub target_rows_per_fragment: u64,
    /// A fragment with at least this share of deleted rows is rewritten without them.
    pub deleted_share: f64,
    /// A vector index whose new rows reach this share of the rows it was trained on is
    /// retrained instead of appended to.
    pub retrain_share: f64,
    /// An index with more segments than this has them merged into one.
    pub max_index_segments: usize,
    /// Versions younger than this are kept by cleanup.
    pub retention_secs: u64,
}

/// What an upkeep job was asked to do; stored with the job and shown by describe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptimizeSpec {
    pub table_id: Vec<String>,
    pub branch: Option<String>,
    /// The phases to run, in order.
    pub actions: Vec<Phase>,
    #[serde(flatten)]
    pub thresholds: Thresholds,
    /// Retrain every vector index, whatever its delta.
    #[serde(default)]
    pub retrain: bool,
    /// Fold every index's segments into one (the table has gone quiet; requests always do).
    #[serde(default)]
    pub merge_segments: bool,
    /// `request` (optimize endpoint) or `policy` (background upkeep).
    pub trigger: String,
}

/// The body of `POST /v1/table/{id}/optimize`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct OptimizeRequest {
    pub id: Option<Vec<String>>,
    pub branch: Option<String>,
    pub identity: Option<Value>,
    pub context: Option<std::collections::HashMap<String, Value>>,
    /// `all` (default) or any of `compact`, `index`, `cleanup`.
    pub action: Option<ActionField>,
    /// Keep versions younger than this many seconds (cleanup); default: the policy's.
    pub retention_seconds: Option<i64>,
    /// Retrain vector indexes from the current rows instead of appending to them.
    pub retrain: Option<bool>,
    /// Compaction target: fragments with fewer rows are merged.
    pub target_rows_per_fragment: Option<i64>,
}

/// One action name or a list of them.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ActionField {
    One(String),
    Many(Vec<String>),
}

impl OptimizeRequest {
    /// Whether `all` (or nothing) was asked for.
    pub fn wants_all(&self) -> bool {
        match &self.action {
            None => true,
            Some(ActionField::One(a)) => a.eq_ignore_ascii_case("all"),
            Some(ActionField::Many(a)) => a.iter().any(|a| a.eq_ignore_ascii_case("all")),
        }
    }

    /// The phases asked for, in the order they run.
    pub fn phases(&self) -> ApiResult<Vec<Phase>> {
        let names = match &self.action {
            None => return Ok(Phase::ALL.to_vec()),
            Some(ActionField::One(a)) => vec![a.clone()],
            Some(ActionField::Many(a)) => a.clone(),
        };
        if names.is_empty() {
            return Err(ApiError::invalid(
                "action must name at least one of all, compact_lsm, compact, index, cleanup",
            ));
        }
        let mut phases = Vec::new();
        for n in names {
            match n.to_ascii_lowercase().as_str() {
                "all" => phases.extend(Phase::ALL),
                "compact" => phases.push(Phase::Compact),
                "compact_lsm" => phases.push(Phase::CompactLsm),
                "index" => phases.push(Phase::Index),
                "cleanup" => phases.push(Phase::Cleanup),
                other => {
                    return Err(ApiError::invalid(format!(
                        "unknown action '{other}': use all, compact_lsm, compact, index or cleanup"
                    )));
                }
            }
        }
        phases.sort();
        phases.dedup();
        Ok(phases)
    }

    /// The policy's thresholds with this request's overrides.
    pub fn thresholds(&self, mut base: Thresholds) -> ApiResult<Thresholds> {
        if let Some(r) = self.retention_seconds {
            if r < 0 {
                return Err(ApiError::invalid(format!(
                    "retention_seconds must be >= 0, got {r}"
                )));
            }
            base.retention_secs = r as u64;
        }
        if let Some(t) = self.target_rows_per_fragment {
            if t <= 0 {
                return Err(ApiError::invalid(format!(
                    "target_rows_per_fragment must be positive, got {t}"
                )));
            }
            base.target_rows_per_fragment = t as u64;
        }
        Ok(base)
    }
}

/// How one index is brought up to date: retrained (a vector index whose new rows outgrew
/// what it was trained on, or when asked), merged (too many segments, or `merge` asked for
/// one), appended to (rows not yet indexed), or left alone.
pub fn index_action(
    h: &IndexHealth,
    t: &Thresholds,
    retrain: bool,
    merge: bool,
) -> Option<IndexAction> {
    let stale = h.unindexed_rows > 0 || h.segments > 1;
    if h.vector && (retrain || (stale && h.delta_share() >= t.retrain_share)) {
        return Some(IndexAction::Retrain);
    }
    if h.segments > t.max_index_segments || (merge && h.segments > 1) {
        return Some(IndexAction::Merge);
    }
    (h.unindexed_rows > 0).then_some(IndexAction::Append)
}

fn failed(phase: Phase, e: ApiError) -> Stop {
    Stop::failed(phase.name(), e)
}

/// The upkeep kind. Upkeep shares the cores with queries: at most `--upkeep-concurrency` of
/// its jobs run at once on this node (the rest wait their turn).
pub struct Optimize {
    slots: Arc<tokio::sync::Semaphore>,
}

impl Optimize {
    pub fn new(concurrency: usize) -> Self {
        Self {
            slots: Arc::new(tokio::sync::Semaphore::new(concurrency.max(1))),
        }
    }
}

impl JobKind for Optimize {
    fn job_type(&self) -> &'static str {
        OPTIMIZE
    }

    fn run(&self, app: Arc<App>, job: Arc<Job>) -> BoxFuture<'static, ()> {
        run(app, job, self.slots.clone()).boxed()
    }

    fn progress(&self, _job: &Job, r: &JobRecord) -> Value {
        let Ok(spec) = r.spec.typed::<OptimizeSpec>() else {
            return json!({ "steps": r.steps });
        };
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
}

/// Record an upkeep job and start it (it waits for an upkeep slot). One upkeep job per
/// (table, branch) at a time: another is refused (409) while one is in progress.
pub async fn submit(
    app: &Arc<App>,
    tenant: &str,
    location: String,
    spec: OptimizeSpec,
) -> ApiResult<String> {
    let by_policy = spec.trigger == "policy";
    let branch = spec.branch.clone();
    let stored = JobSpec::new(&spec)?;
    let job_id = app
        .jobs
        .submit(app, OPTIMIZE, tenant, location.clone(), stored, |other| {
            Some(format!(
                "the table already has an upkeep job in progress (job {})",
                other.job_id
            ))
        })
        .await?;
    if by_policy {
        prune_policy_jobs(&app.jobs, &location, branch.as_deref());
    }
    Ok(job_id)
}

/// Upkeep the policy starts runs every few seconds on a busy table: of its finished jobs,
/// only the newest `KEEP_POLICY_JOBS` per (table, branch) are kept (record and all), so
/// their number stays bounded. Jobs started on request are kept like backfills.
fn prune_policy_jobs(jobs: &JobManager, location: &str, branch: Option<&str>) {
    const KEEP_POLICY_JOBS: usize = 16;
    let mut finished: Vec<String> = jobs
        .jobs_here()
        .into_iter()
        .filter(|r| {
            r.state.is_terminal()
                && r.job_type == OPTIMIZE
                && r.location == location
                && r.spec.branch() == branch
                && r.spec.get("trigger").and_then(Value::as_str) == Some("policy")
        })
        .map(|r| r.job_id)
        .collect();
    // Ids start with the creation time: sorted, the oldest come first.
    finished.sort();
    let excess = finished.len().saturating_sub(KEEP_POLICY_JOBS);
    jobs.remove_finished(&finished[..excess]);
}

/// Whether an upkeep job of this node is running the index phase on a table
/// (index/list's `status`).
pub fn indexing(jobs: &JobManager, location: &str, branch: Option<&str>) -> bool {
    running_phase(jobs, location, branch, Phase::Index)
}

/// Whether an upkeep job of this node is (or is about to be) merging a table's LSM generations
/// (get_lsm_stats' `compacting`).
pub fn compacting_lsm(jobs: &JobManager, location: &str) -> bool {
    running_phase(jobs, location, None, Phase::CompactLsm)
}

fn running_phase(jobs: &JobManager, location: &str, branch: Option<&str>, phase: Phase) -> bool {
    jobs.jobs_here().iter().any(|r| {
        r.state == JobState::InProgress
            && r.job_type == OPTIMIZE
            && r.location == location
            && r.spec.branch() == branch
            && !r.steps.contains_key(phase.name())
            && r.spec
                .typed::<OptimizeSpec>()
                .is_ok_and(|s| s.actions.contains(&phase))
    })
}

/// Run a job to its end (also for jobs resumed at start-up).
async fn run(app: Arc<App>, job: Arc<Job>, slots: Arc<tokio::sync::Semaphore>) {
    let permit = tokio::select! {
        p = slots.acquire_owned() => p.ok(),
        _ = job.stopped() => None,
    };
    let (a, j) = (app.clone(), job.clone());
    let outcome = job.run_caught(async move { drive(&a, &j).await }).await;
    drop(permit);
    job.finish(outcome, |r| json!(r.steps)).await;
}

async fn drive(app: &Arc<App>, job: &Arc<Job>) -> Result<(), Stop> {
    let record = job.snapshot();
    let spec: OptimizeSpec = record.spec.typed().map_err(|e| {
        Stop::Failed(Failure {
            phase: "run".into(),
            message: e.message,
            retryable: false,
        })
    })?;
    for &phase in &spec.actions {
        if record.steps.contains_key(phase.name()) {
            continue;
        }
        let work = async {
            // Tests hold a phase open to cancel or kill it (LANCET_FAULT_INJECTION only).
            if let Some(ms) = app
                .fault_injection
                .then(|| std::env::var("LANCET_FAULT_UPKEEP_DELAY_MS").ok())
                .flatten()
                .and_then(|v| v.parse().ok())
            {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            run_phase(app, &record.location, &spec, phase).await
        };
        let result = tokio::select! {
            r = work => r.map_err(|e| failed(phase, e))?,
            _ = job.stopped() => return Err(Stop::Cancelled),
        };
        job.update(|r| {
            r.steps.insert(phase.name().to_string(), result.clone());
        })
        .await
        .map_err(|e| failed(phase, e))?;
    }
    Ok(())
}

async fn run_phase(
    app: &Arc<App>,
    location: &str,
    spec: &OptimizeSpec,
    phase: Phase,
) -> ApiResult<Value> {
    let branch = spec.branch.as_deref();
    let t = &spec.thresholds;
    let started = std::time::Instant::now();
    let mut out = match phase {
        Phase::CompactLsm if branch.is_some() => json!({ "skipped": "a branch has no LSM tier" }),
        Phase::CompactLsm => {
            // A quiet table's shard writers are closed by the policy's job (never by a
            // writer's request): their memtables are flushed, and no writer of an idle table
            // keeps a WAL ticker running. Then everything flushed is merged.
            let closed = if spec.trigger == "policy" && spec.merge_segments {
                app.store.lsm_close_writers(location).await?
            } else {
                0
            };
            let report = app.store.lsm_compact(location).await?;
            json!({ "writers_closed": closed, "report": report })
        }
        Phase::Compact => {
            let report = app
                .store
                .compact(
                    location,
                    branch,
                    t.target_rows_per_fragment,
                    t.deleted_share,
                )
                .await?;
            json!({
                "fragments_before": report.fragments_before,
                "fragments_after": report.fragments_after,
                "report": report,
            })
        }
        Phase::Index => {
            let health = app
                .store
                .health(
                    location,
                    branch,
                    t.target_rows_per_fragment,
                    t.deleted_share,
                )
                .await?;
            let mut done = serde_json::Map::new();
            for index in &health.indexes {
                let Some(action) = index_action(index, t, spec.retrain, spec.merge_segments) else {
                    continue;
                };
                let taken = match app
                    .store
                    .upkeep_index(location, branch, &index.name, action)
                    .await
                {
                    // Lance retrains only its newer vector index formats: merge instead.
                    Err(e) if action == IndexAction::Retrain => {
                        tracing::info!(index = %index.name, error = %e.message, "retrain refused; merging instead");
                        app.store
                            .upkeep_index(location, branch, &index.name, IndexAction::Merge)
                            .await?;
                        IndexAction::Merge
                    }
                    r => {
                        r?;
                        action
                    }
                };
                done.insert(
                    index.name.clone(),
                    json!({"action": taken, "unindexed_rows_before": index.unindexed_rows, "segments_before": index.segments}),
                );
            }
            json!({ "indexes": done })
        }
        Phase::Cleanup => {
            let report = app
                .store
                .cleanup(location, branch, Duration::from_secs(t.retention_secs))
                .await?;
            json!({ "report": report, "retention_seconds": t.retention_secs })
        }
    };
    out["seconds"] = json!(started.elapsed().as_secs_f64());
    Ok(out)
}
