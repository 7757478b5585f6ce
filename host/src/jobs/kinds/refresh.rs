//! Materialized view refreshes (`job_type: "materialized_view_refresh"`): the view's rows are
//! replaced by its query over the source, at the version the request named (default: the
//! latest when the job runs), in one overwrite commit. A refresh cut off by a crash, cancel or
//! pause made nothing visible, so a job resumed on any node simply runs again.

use std::collections::HashMap;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::App;
use crate::error::{ApiError, ApiResult};
use crate::jobs::kinds::geneva_jobs::{self, Launch, Shown};
use crate::jobs::state::JobRecord;
use crate::jobs::{Job, JobKind, JobSpec, Stop};
use crate::views::SOURCE_VERSION_KEY;
use crate::views::definition::Definition;

pub const REFRESH: &str = "materialized_view_refresh";
const STEP: &str = "refresh";

/// What a refresh job does; stored with the job and shown by describe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefreshSpec {
    /// The view's id.
    pub table_id: Vec<String>,
    /// The view's defining query.
    pub view_query: String,
    /// Where the source table is.
    pub source_location: String,
    /// The source version to read; None: the latest when the job runs.
    pub source_version: Option<u64>,
    /// The Geneva job table this job's state is mirrored into (`geneva_jobs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geneva_jobs: Option<Vec<String>>,
}

/// The refresh kind.
pub struct Refresh;

impl JobKind for Refresh {
    fn job_type(&self) -> &'static str {
        REFRESH
    }

    fn run(&self, app: Arc<App>, job: Arc<Job>) -> BoxFuture<'static, ()> {
        async move {
            let jobs = job
                .snapshot()
                .spec
                .typed::<RefreshSpec>()
                .ok()
                .and_then(|s| s.geneva_jobs);
            let shown = Shown {
                progress: rows_written,
                metrics: &["rows_checkpointed", "rows_refreshed"],
            };
            let runner = run(app.clone(), job.clone());
            geneva_jobs::mirrored(&app, &job, jobs, shown, runner).await
        }
        .boxed()
    }

    fn progress(&self, _job: &Job, r: &JobRecord) -> Value {
        json!({ "steps": r.steps })
    }
}

/// Record a refresh of the view at `location` and start it. One refresh per view at a time:
/// another is refused (409) while one is in progress.
pub async fn submit(
    app: &Arc<App>,
    tenant: &str,
    location: String,
    spec: RefreshSpec,
) -> ApiResult<String> {
    let stored = JobSpec::new(&spec)?;
    let job_id = app
        .jobs
        .submit(app, REFRESH, tenant, location, stored, |other| {
            Some(format!(
                "the view already has a refresh in progress (job {})",
                other.job_id
            ))
        })
        .await?;
    if let Some(jobs) = &spec.geneva_jobs {
        let launch = Launch {
            job_id: &job_id,
            table_name: spec.table_id.last().map_or("", String::as_str),
            column_name: "",
            job_type: "REFRESH",
            config: json!({"src_version": spec.source_version}),
        };
        if let Err(e) = geneva_jobs::register(app, tenant, jobs, launch).await {
            tracing::warn!(job_id = %job_id, error = %e, "cannot add the job to Geneva's job table");
        }
    }
    Ok(job_id)
}

/// Rows the refresh wrote, once it has (Geneva's job row shows them).
fn rows_written(_job: &Job, r: &JobRecord) -> (u64, u64) {
    let n = r
        .steps
        .get(STEP)
        .and_then(|s| s["rows_written"].as_u64())
        .unwrap_or(0);
    (n, n)
}

/// Run a refresh job to its end (also one resumed at start-up or taken over).
async fn run(app: Arc<App>, job: Arc<Job>) {
    let j = job.clone();
    super::run_one_step(job, STEP, async move { drive(&app, &j).await }).await;
}

fn failed(e: ApiError) -> Stop {
    Stop::failed(STEP, e)
}

async fn drive(app: &Arc<App>, job: &Arc<Job>) -> Result<(), Stop> {
    let record = job.snapshot();
    let spec: RefreshSpec = record.spec.typed().map_err(failed)?;
    let def = Definition::parse(&spec.view_query).map_err(failed)?;
    let mark = |v: u64| HashMap::from([(SOURCE_VERSION_KEY.to_string(), v.to_string())]);
    let work = app.store.refresh_view(
        &record.location,
        &spec.source_location,
        spec.source_version,
        &def,
        mark,
    );
    let done = tokio::select! {
        r = work => r.map_err(failed)?,
        _ = job.stopped() => return Err(Stop::Cancelled),
    };
    // The lancedb client's RefreshMaterializedViewResult.
    let result = json!({
        "mode": "rebuild",
        "rows_written": done.rows_written,
        "source_version": done.source_version,
        "version": done.version,
    });
    job.update(|r| {
        r.steps.insert(STEP.to_string(), result.clone());
    })
    .await
    .map_err(failed)
}
