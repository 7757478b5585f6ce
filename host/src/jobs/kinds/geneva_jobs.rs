//! Geneva's job table, kept up to date for the jobs it watches (backfills and view refreshes).
//!
//! Geneva 0.17's remote mode starts a backfill with `backfill_column` (a view refresh with
//! `materialized_view/refresh`), then follows the job
//! only through its own table `geneva_jobs` in the namespace `__system` beside the database's
//! tables: its blocking `backfill()`, `get_job` and `list_jobs` read the job's row (status
//! PENDING / RUNNING / DONE / FAILED / CANCELLED, events, metrics) and nothing else. Right
//! after answering, Geneva "launches" the job: it adds a row for the job id unless one exists,
//! else updates that row's bookkeeping fields.
//!
//! So when a database has that table, the server writes the job's row before it answers (Geneva
//! then updates the row instead of adding a second one), and the node that runs the job mirrors
//! its state into the row until the job ends ([`Follower`]). Only columns the table has are
//! written, so older and newer Geneva schemas both work; a table Geneva has not made is never
//! created here.

use std::future::Future;
use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::App;
use crate::error::{ApiError, ApiResult};
use crate::jobs::Job;
use crate::jobs::state::{JobRecord, JobState};
use crate::store::MergeOptions;

/// Geneva's namespace for its own tables, under the database.
pub const SYSTEM_NAMESPACE: &str = "__system";
/// Geneva's job table, in [`SYSTEM_NAMESPACE`].
pub const JOBS_TABLE: &str = "geneva_jobs";

/// How often a running job's row is brought up to date (Geneva polls every 2 s).
const EVERY: Duration = Duration::from_secs(1);
/// How often progress alone (the rows done) is written while a job runs.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// How long a finished job's last state is retried while its row is missing (a row Geneva
/// adds itself, after the answer, for a job submitted before its table existed).
const FINAL_WAIT: Duration = Duration::from_secs(60);

/// The catalog id of the database's Geneva job table, when a job should be mirrored there:
/// Geneva has made the table, or `geneva` says the job is on something Geneva defined (Geneva
/// makes the table when it first launches a job, right after the request is answered).
pub async fn find(
    app: &App,
    tenant: &str,
    database: Option<&str>,
    geneva: bool,
) -> Option<Vec<String>> {
    let id: Vec<String> = database
        .into_iter()
        .chain([SYSTEM_NAMESPACE, JOBS_TABLE])
        .map(str::to_string)
        .collect();
    (geneva || locate(app, tenant, &id).await.is_ok()).then_some(id)
}

/// Whether `column` of the table at `location` is a Geneva column.
pub async fn is_geneva_column(app: &App, location: &str, column: &str) -> bool {
    let Ok(ds) = app.store.latest(location, None).await else {
        return false;
    };
    ds.schema()
        .field(column)
        .and_then(|f| f.metadata.get(GENEVA_BACKEND_KEY))
        .is_some_and(|b| b == crate::virtual_columns::geneva::BACKEND)
}

/// The field metadata key Geneva reads a column's UDF backend from.
const GENEVA_BACKEND_KEY: &str = "virtual_column.udf_backend";

async fn locate(app: &App, tenant: &str, id: &[String]) -> ApiResult<String> {
    app.tenants.catalog(tenant).await?.locate(id).await
}

/// The row of a job just submitted, as Geneva's `launch` writes it.
pub struct Launch<'a> {
    pub job_id: &'a str,
    /// The table's name as Geneva knows it (the last part of its id).
    pub table_name: &'a str,
    /// The column a backfill computes; empty for a view refresh.
    pub column_name: &'a str,
    pub job_type: &'a str,
    /// The job's parameters (Geneva keeps its launch arguments as JSON).
    pub config: Value,
}

/// Writes the row of a job just submitted (PENDING) into `jobs`, unless a row with its id
/// exists.
pub async fn register(
    app: &App,
    tenant: &str,
    jobs: &[String],
    launch: Launch<'_>,
) -> ApiResult<()> {
    // Not made yet: Geneva adds the row itself, with the table, after the answer.
    let Ok(location) = locate(app, tenant, jobs).await else {
        return Ok(());
    };
    let ds = app.store.latest(&location, None).await?;
    let schema = Arc::new(arrow_schema::Schema::from(ds.schema()));
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let outputs: Vec<&str> = Some(launch.column_name)
        .filter(|c| !c.is_empty())
        .into_iter()
        .collect();
    let row = json!({
        "table_name": launch.table_name,
        "column_name": launch.column_name,
        "job_id": launch.job_id,
        "job_type": launch.job_type,
        "status": "PENDING",
        "launched_at": now,
        "updated_at": now,
        "config": launch.config.to_string(),
        "metrics": [],
        "events": ["Job submitted"],
        "output_columns": outputs,
    });
    // Only the table's own columns: the decoder refuses a row that lacks a required one.
    let row: serde_json::Map<String, Value> = row
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| schema.field_with_name(k).is_ok())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let text = serde_json::to_string(&row).map_err(|e| ApiError::internal(e.to_string()))?;
    let batch = arrow_json::ReaderBuilder::new(schema)
        .build(Cursor::new(text.into_bytes()))
        .and_then(|mut r| r.next().transpose())
        .map_err(|e| {
            ApiError::internal(format!(
                "Geneva's job table has a schema Lancet cannot fill: {e}"
            ))
        })?
        .ok_or_else(|| ApiError::internal("no job row was decoded"))?;
    let opts = MergeOptions {
        on: vec!["job_id".into()],
        when_not_matched_insert_all: true,
        ..Default::default()
    };
    app.store
        .merge_insert(&location, None, vec![batch], &opts, None)
        .await?;
    Ok(())
}

/// A job's progress as (rows done, rows in all), for the row's metrics.
pub type Progress = fn(&Job, &JobRecord) -> (u64, u64);

/// How a kind's progress shows in the row: `metrics` names the metrics that carry it (Geneva
/// reads `rows_checkpointed` as a backfill's rows, `rows_refreshed` as a refresh's).
#[derive(Clone, Copy)]
pub struct Shown {
    pub progress: Progress,
    pub metrics: &'static [&'static str],
}

/// Runs a job's `runner` on this node; when `jobs` names a Geneva job table, the job's state is
/// mirrored into its row meanwhile, and its last state once the runner is done.
pub async fn mirrored(
    app: &Arc<App>,
    job: &Arc<Job>,
    jobs: Option<Vec<String>>,
    shown: Shown,
    runner: impl Future<Output = ()>,
) {
    let Some(jobs) = jobs else {
        return runner.await;
    };
    let ended = Arc::new(Notify::new());
    let (app, followed, signal) = (app.clone(), job.clone(), ended.clone());
    tokio::spawn(async move {
        if let Err(e) = follow(&app, &followed, &jobs, shown, &signal).await {
            tracing::warn!(job_id = %followed.snapshot().job_id, error = %e,
                "cannot keep the job's Geneva row up to date");
        }
    });
    runner.await;
    ended.notify_one();
}

/// What was last written to the row.
#[derive(PartialEq, Clone)]
struct Written {
    status: &'static str,
    rows: (u64, u64),
}

async fn follow(
    app: &App,
    job: &Job,
    jobs: &[String],
    how: Shown,
    ended: &Notify,
) -> ApiResult<()> {
    let tenant = job.snapshot().tenant;
    let mut location = None;
    let mut last: Option<Written> = None;
    let mut runner_ended = false;
    let mut final_since: Option<tokio::time::Instant> = None;
    let mut written_at = tokio::time::Instant::now();
    loop {
        if job.is_lost() {
            return Ok(());
        }
        let r = job.snapshot();
        let rows = (how.progress)(job, &r);
        let now = Written {
            status: status(r.state),
            rows,
        };
        let last_write = runner_ended || r.state.is_terminal();
        if location.is_none() {
            location = locate(app, &tenant, jobs).await.ok();
        }
        // A change of status is written at once; progress alone at most every PROGRESS_EVERY,
        // since every write is a version of Geneva's table.
        let due = match &last {
            None => true,
            Some(l) if *l == now => false,
            Some(l) => {
                l.status != now.status || last_write || written_at.elapsed() >= PROGRESS_EVERY
            }
        };
        if let Some(location) = &location
            && due
        {
            let event = event(last.as_ref(), &r);
            // A failed write (a conflict with Geneva's own update of the row) is retried on
            // the next tick.
            match write(app, location, &r, &now, how.metrics, event.as_deref()).await {
                Ok(0) => {}
                Ok(_) => {
                    last = Some(now.clone());
                    written_at = tokio::time::Instant::now();
                }
                Err(e) => tracing::debug!(job_id = %r.job_id, error = %e,
                    "the job's Geneva row was not updated; retrying"),
            }
        }
        if last_write {
            if last.as_ref() == Some(&now) {
                return Ok(());
            }
            let since = *final_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() > FINAL_WAIT && location.is_none() {
                // Geneva never made its table: nobody follows the job there.
                return Ok(());
            }
            if since.elapsed() > FINAL_WAIT {
                return Err(ApiError::internal(format!(
                    "no row for job {} appeared in {}",
                    r.job_id,
                    jobs.join("$")
                )));
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = ended.notified(), if !runner_ended => runner_ended = true,
        }
    }
}

/// Geneva's status for a job state. A paused job waits to be resumed, as a pending one does.
fn status(state: JobState) -> &'static str {
    match state {
        JobState::InProgress => "RUNNING",
        JobState::Paused => "PENDING",
        JobState::Done => "DONE",
        JobState::Failed => "FAILED",
        JobState::Cancelled => "CANCELLED",
    }
}

/// The event a change of status adds to the row (Geneva shows the newest one).
fn event(last: Option<&Written>, r: &JobRecord) -> Option<String> {
    let now = status(r.state);
    if last.is_some_and(|l| l.status == now) {
        return None;
    }
    Some(match r.state {
        JobState::InProgress => "Job running".to_string(),
        JobState::Paused => "Job paused".to_string(),
        JobState::Failed => format!(
            "Job failed: {}",
            r.failure.as_ref().map_or("", |f| f.message.as_str())
        ),
        _ => format!("Job completed with status {now}"),
    })
}

/// Brings the row up to date; answers how many rows matched the job's id.
async fn write(
    app: &App,
    location: &str,
    r: &JobRecord,
    now: &Written,
    metrics: &[&str],
    event: Option<&str>,
) -> ApiResult<u64> {
    let ds = app.store.latest(location, None).await?;
    let has = |c: &str| ds.schema().field(c).is_some();
    let mut set = vec![("status".to_string(), sql_string(now.status))];
    let micros = |ms: i64| format!("to_timestamp_micros({})", ms.saturating_mul(1000));
    if has("updated_at") {
        set.push((
            "updated_at".into(),
            micros(chrono::Utc::now().timestamp_millis()),
        ));
    }
    if let (true, Some(done)) = (has("completed_at"), r.finish_ms)
        && r.state.is_terminal()
    {
        set.push(("completed_at".into(), micros(done)));
    }
    if has("metrics") {
        let (n, total) = now.rows;
        let items: Vec<String> = metrics
            .iter()
            .map(|name| {
                let metric = json!({
                    "name": name,
                    "n": n,
                    "total": total,
                    "done": r.state.is_terminal(),
                    "desc": name.replace('_', " "),
                });
                sql_string(&metric.to_string())
            })
            .collect();
        set.push((
            "metrics".into(),
            format!("make_array({})", items.join(", ")),
        ));
    }
    if let (true, Some(e)) = (has("events"), event) {
        set.push((
            "events".into(),
            format!("array_concat(events, make_array({}))", sql_string(e)),
        ));
    }
    let predicate = format!("job_id = {}", sql_string(&r.job_id));
    let (matched, _) = app
        .store
        .update(location, None, &set, Some(&predicate))
        .await?;
    Ok(matched)
}

/// A SQL string literal.
fn sql_string(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_strings_are_quoted() {
        assert_eq!(sql_string("it's"), "'it''s'");
    }

    #[test]
    fn states_map_to_geneva_statuses() {
        assert_eq!(status(JobState::InProgress), "RUNNING");
        assert_eq!(status(JobState::Paused), "PENDING");
        assert_eq!(status(JobState::Cancelled), "CANCELLED");
    }
}
