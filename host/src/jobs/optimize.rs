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

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::state::Failure;
use super::{Job, Stop};
use crate::App;
use crate::error::{ApiError, ApiResult};
use crate::store::{IndexAction, IndexHealth};

pub const OPTIMIZE: &str = "optimize";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Index,
    Compact,
    Cleanup,
}

impl Phase {
    pub const ALL: [Phase; 3] = [Phase::Index, Phase::Compact, Phase::Cleanup];

    pub fn name(self) -> &'static str {
        match self {
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
    /// The phases asked for, in the order they run.
    pub fn phases(&self) -> ApiResult<Vec<Phase>> {
        let names = match &self.action {
            None => return Ok(Phase::ALL.to_vec()),
            Some(ActionField::One(a)) => vec![a.clone()],
            Some(ActionField::Many(a)) => a.clone(),
        };
        if names.is_empty() {
            return Err(ApiError::invalid(
                "action must name at least one of all, compact, index, cleanup",
            ));
        }
        let mut phases = Vec::new();
        for n in names {
            match n.to_ascii_lowercase().as_str() {
                "all" => phases.extend(Phase::ALL),
                "compact" => phases.push(Phase::Compact),
                "index" => phases.push(Phase::Index),
                "cleanup" => phases.push(Phase::Cleanup),
                other => {
                    return Err(ApiError::invalid(format!(
                        "unknown action '{other}': use all, compact, index or cleanup"
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
    Stop::Failed(Failure {
        phase: phase.name().to_string(),
        // A lost commit race or a busy store: the next attempt may well succeed.
        retryable: matches!(
            e.code,
            lance_namespace::ErrorCode::ConcurrentModification
                | lance_namespace::ErrorCode::ServiceUnavailable
        ),
        message: e.message,
    })
}

/// Run a job to its end (also for jobs resumed at start-up).
pub(super) async fn run(app: Arc<App>, job: Arc<Job>) {
    // Upkeep shares the cores with queries: at most `--upkeep-concurrency` jobs run at once.
    let permit = tokio::select! {
        p = app.jobs.upkeep_slots.clone().acquire_owned() => p.ok(),
        _ = cancelled(&job) => None,
    };
    let (a, j) = (app.clone(), job.clone());
    let outcome = job.run_caught(async move { drive(&a, &j).await }).await;
    drop(permit);
    job.finish(outcome, |r| json!(r.steps)).await;
}

async fn drive(app: &Arc<App>, job: &Arc<Job>) -> Result<(), Stop> {
    let record = job.snapshot();
    let super::spec::JobSpec::Optimize(spec) = &record.spec else {
        return Err(Stop::Failed(Failure {
            phase: "run".into(),
            message: "not an upkeep job".into(),
            retryable: false,
        }));
    };
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
            run_phase(app, &record.location, spec, phase).await
        };
        let result = tokio::select! {
            r = work => r.map_err(|e| failed(phase, e))?,
            _ = cancelled(job) => return Err(Stop::Cancelled),
        };
        job.update(|r| {
            r.steps.insert(phase.name().to_string(), result.clone());
        })
        .await
        .map_err(|e| failed(phase, e))?;
    }
    Ok(())
}

/// Resolves once the job is asked to stop. Dropping a phase's future mid-way is safe: lance
/// makes nothing visible before its commit, and files written for a commit that never came
/// are removed by a later cleanup.
pub(super) async fn cancelled(job: &Job) {
    while !job.cancelled() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
