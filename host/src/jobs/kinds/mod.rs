//! The kinds of job this server runs, each behind [`super::JobKind`]: column backfills,
//! table upkeep (`optimize`), materialized view refreshes, Function builds and drops. A kind imports the job
//! machinery; the machinery learns of the kinds only from [`all`], at start-up.

use std::future::Future;
use std::sync::Arc;

use serde_json::Value;

use super::{Job, JobKind, Stop};

pub mod backfill;
pub mod function_build;
pub mod function_drop;
pub mod geneva_jobs;
pub mod optimize;
pub mod refresh;

/// Every kind, configured: `upkeep_concurrency` upkeep jobs run at once on this node, and it
/// helps with up to `helper_tasks` tasks of other nodes' backfills at once.
pub fn all(upkeep_concurrency: usize, helper_tasks: usize) -> Vec<Arc<dyn JobKind>> {
    vec![
        Arc::new(backfill::Backfill::new(helper_tasks)),
        Arc::new(optimize::Optimize::new(upkeep_concurrency)),
        Arc::new(refresh::Refresh),
        Arc::new(function_build::FunctionBuild),
        Arc::new(function_drop::FunctionDrop),
    ]
}

/// Run a kind whose work is one step to its end and record how it ended: the job's result is
/// what the work recorded as step `step` (a refresh, a Function build or drop).
async fn run_one_step(
    job: Arc<Job>,
    step: &'static str,
    work: impl Future<Output = Result<(), Stop>> + Send + 'static,
) {
    let outcome = job.run_caught(work).await;
    job.finish(outcome, |r| {
        r.steps.get(step).cloned().unwrap_or(Value::Null)
    })
    .await;
}
