//! Column backfills (`job_type: "backfill"`): a virtual column's values computed by its UDF
//! and written into the table, checkpointed and resumable (`run`), shared task by task with
//! other nodes (`helper`), with the rows its UDF failed on recorded (`row_errors`).

mod calls;
mod changed;
mod helper;
mod on_ray;
mod prepare;
pub mod remote;
pub mod row_errors;
mod run;
pub mod spec;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::App;
use crate::error::{ApiError, ApiResult};
use crate::jobs::kinds::geneva_jobs::{self, Launch, Shown};
use crate::jobs::state::{FragmentStatus, JobRecord};
use crate::jobs::{Job, JobKind, JobSpec};
use crate::store::At;
pub use spec::{BackfillOptions, BackfillSpec};

pub const BACKFILL: &str = "backfill";

/// The backfill kind, with this node's share of other nodes' backfills.
pub struct Backfill {
    /// Tasks of other nodes' backfills this node computes at once, at most (`helper`).
    helper_tasks: usize,
    helping: Arc<AtomicUsize>,
}

impl Backfill {
    pub fn new(helper_tasks: usize) -> Self {
        Self {
            helper_tasks,
            helping: Default::default(),
        }
    }
}

impl JobKind for Backfill {
    fn job_type(&self) -> &'static str {
        BACKFILL
    }

    fn run(&self, app: Arc<App>, job: Arc<Job>) -> BoxFuture<'static, ()> {
        async move {
            let jobs = job
                .snapshot()
                .spec
                .typed::<BackfillSpec>()
                .ok()
                .and_then(|s| s.geneva_jobs);
            let shown = Shown {
                progress: rows_of,
                metrics: &["rows_checkpointed"],
            };
            let runner = run::run(app.clone(), job.clone());
            geneva_jobs::mirrored(&app, &job, jobs, shown, runner).await
        }
        .boxed()
    }

    fn progress(&self, job: &Job, r: &JobRecord) -> Value {
        progress_of(job, r)
    }

    fn help_elsewhere(&self, app: &Arc<App>, record: &JobRecord) {
        if helper::may_help(record)
            && self.helping.load(Ordering::Relaxed) < self.helper_tasks
            && !app.jobs.is_closing()
        {
            helper::help(app, record.clone(), self.helping.clone());
        }
    }
}

/// Rows computed of those selected, for Geneva's job row.
fn rows_of(job: &Job, r: &JobRecord) -> (u64, u64) {
    let p = progress_of(job, r);
    (
        p["rows_done"].as_u64().unwrap_or(0),
        p["rows_total"].as_u64().unwrap_or(0),
    )
}

/// describe's `progress` of a backfill: rows and fragments done of those planned.
fn progress_of(job: &Job, r: &JobRecord) -> Value {
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
    let live = job.progress();
    json!({
        "rows_done": live.rows_done.load(Ordering::Relaxed).max(durable_rows),
        "rows_total": rows_total,
        "rows_nulled": live.rows_nulled.load(Ordering::Relaxed),
        "fragments_done": fragments_done,
        "fragments_total": fragments_total,
        "commits": r.commits,
        "planned": r.plan.is_some(),
    })
}

/// Validate a backfill request completely, record the job and start it. Answers once the
/// job is durable; the work happens in the background. One backfill per column at a time.
pub async fn submit(
    app: &Arc<App>,
    tenant: &str,
    table_id: Vec<String>,
    location: String,
    branch: Option<String>,
    options: BackfillOptions,
    geneva_jobs: Option<Vec<String>>,
) -> ApiResult<String> {
    let latest = app.store.latest(&location, branch.as_deref()).await?;
    let mut spec = options.check(table_id, branch, latest.version().version)?;
    check_cluster(app, tenant, &spec.cluster)?;
    spec.geneva_jobs = geneva_jobs;
    crate::field_path::parse(&spec.column)?;
    if options.is_plain_refresh()
        && let Some(refresh) =
            changed::refresh_of(app, &location, spec.branch.as_deref(), &spec.column).await?
    {
        // Giving the table stable row ids may have committed: read what is latest now.
        let latest = app.store.latest(&location, spec.branch.as_deref()).await?;
        spec.read_version = latest.version().version;
        spec.definition_version = Some(spec.read_version);
        spec.filter = changed::filter(&spec.column, &refresh);
        spec.refresh = Some(refresh);
    }
    prepare::prepare(app, tenant, &location, &spec).await?;
    let column = spec.column.clone();
    let stored = JobSpec::new(&spec)?;
    let job_id = app
        .jobs
        .submit(app, BACKFILL, tenant, location, stored, |other| {
            (other.spec.get("column").and_then(Value::as_str) == Some(column.as_str())).then(|| {
                format!(
                    "column '{column}' already has a backfill in progress (job {})",
                    other.job_id
                )
            })
        })
        .await?;
    // Before the answer: Geneva adds a row of its own unless it finds this one.
    if let Some(jobs) = &spec.geneva_jobs {
        let launch = Launch {
            job_id: &job_id,
            table_name: spec.table_id.last().map_or("", String::as_str),
            column_name: &spec.column,
            job_type: "BACKFILL",
            config: json!({"where": spec.filter, "read_version": spec.read_version}),
        };
        if let Err(e) = geneva_jobs::register(app, tenant, jobs, launch).await {
            tracing::warn!(job_id = %job_id, error = %e, "cannot add the job to Geneva's job table");
        }
    }
    Ok(job_id)
}

/// A backfill's cluster must be `default` (this server's nodes) or a Ray cluster configured
/// here (`--clusters`) that is open to the tenant.
fn check_cluster(app: &App, tenant: &str, name: &str) -> ApiResult<()> {
    if name == "default" {
        return Ok(());
    }
    match app.clusters.ray(name) {
        Some(c) if c.allows(tenant) => Ok(()),
        Some(_) => Err(ApiError::invalid(format!(
            "cluster '{name}' is not open to tenant '{tenant}'"
        ))),
        None => {
            let open: Vec<&str> = app
                .clusters
                .names()
                .into_iter()
                .filter(|n| app.clusters.ray(n).is_none_or(|c| c.allows(tenant)))
                .collect();
            Err(ApiError::invalid(format!(
                "unknown cluster '{name}'; this server has: {}",
                open.join(", ")
            )))
        }
    }
}

/// Where a job reads: its branch at its pinned version.
fn read_at(spec: &BackfillSpec) -> At {
    At {
        branch: spec.branch.clone(),
        version: Some(spec.read_version),
    }
}
