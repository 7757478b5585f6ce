//! Function builds (`job_type: "function_build"`): lancedb's `create_function` registers a
//! Function through a job that "builds" it. Here a build loads the source in the Python sandbox
//! (Python's own errors fail the job), checks the callable's parameters against the declared
//! signature, and publishes an immutable version in the registry; the job's result is that
//! version (the client's `FunctionVersion`). A build cut off by a crash simply runs again: the
//! registry answers an identical registration with the version it already holds.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::App;
use crate::error::{ApiError, ApiResult};
use crate::functions::Registry;
use crate::functions::registry::{Built, Checked, Files, Registration, requested};
use crate::jobs::state::JobRecord;
use crate::jobs::{Job, JobKind, JobSpec, Stop};

pub const FUNCTION_BUILD: &str = "function_build";
const STEP: &str = "build";

/// What a build job builds; stored with the job and shown by describe.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuildSpec {
    /// The Function's id: its namespace path, then its name.
    pub table_id: Vec<String>,
    pub namespace_path: Vec<String>,
    pub name: String,
    pub registration: Registration,
    /// The database namespace the client addressed (the result shows paths under it).
    #[serde(default)]
    pub database: Option<String>,
}

pub struct FunctionBuild;

impl JobKind for FunctionBuild {
    fn job_type(&self) -> &'static str {
        FUNCTION_BUILD
    }

    fn run(&self, app: Arc<App>, job: Arc<Job>) -> BoxFuture<'static, ()> {
        run(app, job).boxed()
    }

    fn progress(&self, _job: &Job, r: &JobRecord) -> Value {
        json!({ "steps": r.steps.keys().collect::<Vec<_>>() })
    }
}

/// Check a registration completely (everything short of running it), record its build and
/// start it. One build per Function name at a time.
pub async fn submit(
    app: &Arc<App>,
    tenant: &str,
    database: Option<String>,
    namespace_path: Vec<String>,
    name: String,
    registration: Registration,
) -> ApiResult<String> {
    registration
        .clone()
        .check(
            &name,
            tenant,
            &app.functions.secrets,
            app.functions.packages.as_ref(),
        )
        .await?;
    let mut table_id = namespace_path.clone();
    table_id.push(name.clone());
    let location = Registry::build_location(tenant, &namespace_path, &name);
    let spec = JobSpec::new(&BuildSpec {
        table_id,
        namespace_path,
        name: name.clone(),
        registration,
        database,
    })?;
    app.jobs
        .submit(app, FUNCTION_BUILD, tenant, location, spec, |other| {
            Some(format!(
                "Function '{name}' is being built already (job {})",
                other.job_id
            ))
        })
        .await
}

async fn run(app: Arc<App>, job: Arc<Job>) {
    let j = job.clone();
    super::run_one_step(job, STEP, async move { drive(&app, &j).await }).await;
}

fn failed(e: ApiError) -> Stop {
    Stop::failed(STEP, e)
}

async fn drive(app: &Arc<App>, job: &Arc<Job>) -> Result<(), Stop> {
    let record = job.snapshot();
    let spec: BuildSpec = record.spec.typed().map_err(failed)?;
    let checked = spec
        .registration
        .check(
            &spec.name,
            &record.tenant,
            &app.functions.secrets,
            app.functions.packages.as_ref(),
        )
        .await
        .map_err(failed)?;
    let (files, resolved) = shipped(app, &checked).await.map_err(failed)?;
    let python_version =
        tokio::task::block_in_place(|| build(app, &checked, &files)).map_err(failed)?;
    let built = Built {
        python_version,
        files,
        resolved,
    };
    let stored = app
        .functions
        .registry
        .publish(
            &record.tenant,
            &spec.namespace_path,
            &spec.name,
            &checked,
            &built,
        )
        .await
        .map_err(failed)?;
    job.update(|r| {
        r.steps
            .insert(STEP.to_string(), stored.public(spec.database.as_deref()));
    })
    .await
    .map_err(failed)
}

/// Every file shipped with the Function: its bundle's modules, then its pip packages' files
/// (resolved and fetched from the configured index); and what the packages resolved to.
async fn shipped(app: &Arc<App>, checked: &Checked) -> ApiResult<(Files, Vec<String>)> {
    let mut files = checked.files.clone();
    let wanted = requested(&checked.registration);
    let Some(index) = app
        .functions
        .packages
        .as_ref()
        .filter(|_| !wanted.is_empty())
    else {
        return Ok((files, Vec::new()));
    };
    let python = tokio::task::block_in_place(|| sandbox_python(app))?;
    let used: usize = files.iter().map(|(p, d)| p.len() + d.len()).sum();
    let budget = lancet_udf::MAX_FILES_BYTES.saturating_sub(used);
    let resolved = index.resolve(&wanted, &python, budget).await?;
    let mine: std::collections::HashSet<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    if let Some((clash, _)) = resolved
        .files
        .iter()
        .find(|(p, _)| mine.contains(p.as_str()))
    {
        return Err(ApiError::invalid(format!(
            "{clash} is both shipped with the Function (code=) and in its pip packages"
        )));
    }
    files.extend(resolved.files);
    Ok((files, resolved.pins))
}

/// The sandbox interpreter's `sys.version` (what package markers are evaluated for).
fn sandbox_python(app: &Arc<App>) -> ApiResult<String> {
    let probe = lancet_udf::PythonSpec {
        files: Vec::new(),
        source: "def probe():\n    pass\n".to_string(),
        entry: "probe".to_string(),
        env: Vec::new(),
        init: None,
        on_error: lancet_udf::OnError::Fail,
        limits: None,
    };
    Ok(app
        .virtual_columns
        .check_function(&probe)?
        .python_version()
        .to_string())
}

/// Load the source in the sandbox and check its parameters against the signature; the
/// interpreter's version.
fn build(app: &Arc<App>, checked: &Checked, files: &[(String, Vec<u8>)]) -> ApiResult<String> {
    let r = &checked.registration;
    let spec = lancet_udf::PythonSpec {
        files: files.to_vec(),
        source: checked.source.clone(),
        entry: r.artifact.entrypoint.clone(),
        // Configuration only: secrets reach a Function when it runs, not when it is built.
        env: r
            .runtime
            .env
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        init: None,
        on_error: lancet_udf::OnError::Fail,
        limits: None,
    };
    let signature = app.virtual_columns.check_function(&spec)?;
    let declared: Vec<&str> = r.signature.inputs.iter().map(|p| p.name.as_str()).collect();
    let params: Vec<&str> = signature.params.iter().map(|p| p.name.as_str()).collect();
    let required = signature.params.iter().filter(|p| !p.has_default).count();
    if params.len() < declared.len()
        || params[..declared.len()] != declared[..]
        || required > declared.len()
    {
        return Err(ApiError::invalid(format!(
            "'{}' takes ({}), but the signature declares inputs ({})",
            r.artifact.entrypoint,
            params.join(", "),
            declared.join(", ")
        )));
    }
    Ok(signature.python_version().to_string())
}
