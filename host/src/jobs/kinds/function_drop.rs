//! Function drops (`job_type: "function_drop"`): lancedb's `drop_function_async` unbinds a
//! version at once (the request deletes its record) and hands back a job for what follows.
//! Here that is little: once a Function has no version left, its folder under a local root is
//! removed (an object store has no folders). A version registered meanwhile keeps the folder.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::App;
use crate::error::ApiResult;
use crate::functions::Registry;
use crate::jobs::state::JobRecord;
use crate::jobs::{Job, JobKind, JobSpec, Stop};

pub const FUNCTION_DROP: &str = "function_drop";
const STEP: &str = "cleanup";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DropSpec {
    /// The Function's id: its namespace path, then its name.
    pub table_id: Vec<String>,
    pub namespace_path: Vec<String>,
    pub name: String,
    pub version: String,
    /// Whether the request found the version (and unbound it).
    pub dropped: bool,
}

pub struct FunctionDrop;

impl JobKind for FunctionDrop {
    fn job_type(&self) -> &'static str {
        FUNCTION_DROP
    }

    fn run(&self, app: Arc<App>, job: Arc<Job>) -> BoxFuture<'static, ()> {
        run(app, job).boxed()
    }

    fn progress(&self, _job: &Job, r: &JobRecord) -> Value {
        json!({ "steps": r.steps.keys().collect::<Vec<_>>() })
    }
}

/// Record the cleanup after a drop and start it.
pub async fn submit(app: &Arc<App>, tenant: &str, spec: DropSpec) -> ApiResult<String> {
    let location = Registry::build_location(tenant, &spec.namespace_path, &spec.name);
    app.jobs
        .submit(
            app,
            FUNCTION_DROP,
            tenant,
            location,
            JobSpec::new(&spec)?,
            |_| None,
        )
        .await
}

async fn run(app: Arc<App>, job: Arc<Job>) {
    let j = job.clone();
    super::run_one_step(job, STEP, async move { drive(&app, &j).await }).await;
}

async fn drive(app: &Arc<App>, job: &Arc<Job>) -> Result<(), Stop> {
    let record = job.snapshot();
    let failed = |e| Stop::failed(STEP, e);
    let spec: DropSpec = record.spec.typed().map_err(failed)?;
    let removed = app
        .functions
        .registry
        .remove_if_empty(&record.tenant, &spec.namespace_path, &spec.name)
        .await
        .map_err(failed)?;
    job.update(|r| {
        r.steps.insert(
            STEP.to_string(),
            json!({"dropped": spec.dropped, "function_removed": removed}),
        );
    })
    .await
    .map_err(failed)
}
