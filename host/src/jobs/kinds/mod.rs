//! The kinds of job this server runs, each behind [`super::JobKind`]: column backfills,
//! table upkeep (`optimize`), materialized view refreshes, Function builds and drops. A kind imports the job
//! machinery; the machinery learns of the kinds only from [`all`], at start-up.

use std::sync::Arc;

use super::JobKind;

pub mod backfill;
pub mod function_build;
pub mod function_drop;
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
