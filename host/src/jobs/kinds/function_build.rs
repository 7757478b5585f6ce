//! Function builds (`job_type: "function_build"`): lancedb's `create_function` registers a
//! Function through a job that "builds" it. Here a build loads the source in the Python sandbox
//! (Python's own errors fail the job), checks the callable's parameters against the declared
//! signature, and publishes an immutable version in the registry; the job's result is that
//! version (the client's `FunctionVersion`). A Function whose pip packages only native wheels
//! provide is built for the native tier instead when its tenant has it (environment installed,
//! source loaded in the bubblewrap sandbox). A build cut off by a crash simply runs again: the
//! registry answers an identical registration with the version it already holds.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::App;
use crate::error::{ApiError, ApiResult};
use crate::functions::Registry;
use crate::functions::packages;
use crate::functions::registry::{Built, Checked, Files, Registration, Tier, requested};
use crate::jobs::state::JobRecord;
use crate::jobs::{Job, JobKind, JobSpec, Stop};
use crate::virtual_columns::native_function::NativeSource;

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
            app.virtual_columns.native_for(tenant).is_some(),
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
            app.virtual_columns.native_for(&record.tenant).is_some(),
        )
        .await
        .map_err(failed)?;
    let built = match shipped(app, &record.tenant, &checked)
        .await
        .map_err(failed)?
    {
        Shipped::Wasm(files, resolved) => {
            let python_version =
                tokio::task::block_in_place(|| build(app, &checked, &files)).map_err(failed)?;
            Built {
                python_version,
                files,
                resolved,
                tier: Tier::Wasm,
            }
        }
        Shipped::Native => {
            tokio::task::block_in_place(|| build_native(app, &record.tenant, &checked))
                .map_err(failed)?
        }
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

/// Where a Function's build goes on, and with what.
enum Shipped {
    /// The Wasm sandbox: every file shipped with it (its bundle's modules, then its pip
    /// packages' files) and what the packages resolved to.
    Wasm(Files, Vec<String>),
    /// The native tier: a package has only native wheels (or this server has no package
    /// index for the Wasm sandbox) and the tenant has the tier.
    Native,
}

/// Resolve and fetch a Function's pip packages for the Wasm sandbox, or choose the native
/// tier when they cannot run there and the tenant has it.
async fn shipped(app: &Arc<App>, tenant: &str, checked: &Checked) -> ApiResult<Shipped> {
    let mut files = checked.files.clone();
    let wanted = requested(&checked.registration);
    if wanted.is_empty() {
        return Ok(Shipped::Wasm(files, Vec::new()));
    }
    let native = app.virtual_columns.native_for(tenant).is_some();
    let Some(index) = app.functions.packages.as_ref() else {
        // `check` refused packages without an index unless the tenant has the native tier.
        return if native {
            Ok(Shipped::Native)
        } else {
            Err(ApiError::invalid(
                "pip packages need a package index (--package-index) or the native tier",
            ))
        };
    };
    let python = tokio::task::block_in_place(|| sandbox_python(app))?;
    let used: usize = files.iter().map(|(p, d)| p.len() + d.len()).sum();
    let budget = lancet_udf::MAX_FILES_BYTES.saturating_sub(used);
    let resolved = match index.resolve(&wanted, &python, budget).await {
        Ok(r) => r,
        Err(e) if native && packages::needs_native(&e) => return Ok(Shipped::Native),
        Err(e) => return Err(e),
    };
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
    Ok(Shipped::Wasm(files, resolved.pins))
}

/// Install the packages, load the source in the native sandbox and check its parameters
/// against the signature (blocking: pip runs).
fn build_native(app: &Arc<App>, tenant: &str, checked: &Checked) -> ApiResult<Built> {
    let r = &checked.registration;
    let found = app.virtual_columns.check_native_function(
        tenant,
        r.runtime.python_version.as_deref(),
        &requested(r),
        NativeSource {
            source: &checked.source,
            entry: &r.artifact.entrypoint,
            files: &checked.files,
            // Configuration only: secrets reach a Function when it runs, not when it is built.
            env: config_env(r),
        },
    )?;
    check_params(r, &found.params, found.required)?;
    Ok(Built {
        python_version: found.python_version,
        files: checked.files.clone(),
        resolved: found.resolved,
        tier: Tier::Native,
    })
}

fn config_env(r: &Registration) -> Vec<(String, String)> {
    r.runtime
        .env
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The callable takes the signature's inputs first, in order, and nothing else without a
/// default.
fn check_params(r: &Registration, params: &[String], required: usize) -> ApiResult<()> {
    let declared: Vec<&str> = r.signature.inputs.iter().map(|p| p.name.as_str()).collect();
    if params.len() < declared.len()
        || params[..declared.len()]
            .iter()
            .map(String::as_str)
            .ne(declared.iter().copied())
        || required > declared.len()
    {
        return Err(ApiError::invalid(format!(
            "'{}' takes ({}), but the signature declares inputs ({})",
            r.artifact.entrypoint,
            params.join(", "),
            declared.join(", ")
        )));
    }
    Ok(())
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
        env: config_env(r),
        init: None,
        on_error: lancet_udf::OnError::Fail,
        limits: None,
    };
    let signature = app.virtual_columns.check_function(&spec)?;
    let params: Vec<String> = signature.params.iter().map(|p| p.name.clone()).collect();
    let required = signature.params.iter().filter(|p| !p.has_default).count();
    check_params(r, &params, required)?;
    Ok(signature.python_version().to_string())
}
