//! The Python runner in the runtime: CPython in a Wasm component, under the same limits as
//! Wasm guests. Needs the runner built by scripts/build-python-runner.sh (scripts/test.sh
//! builds it and sets LANCET_PYTHON_RUNNER).

mod bundle;
mod hostile;
mod values;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use lancet_udf::{
    InvokeOutput, Limits, OnError, PreparedPython, PythonRunnerConfig, PythonSpec, Runtime,
    RuntimeConfig, UdfError,
};

/// The crate's directory at run time (cargo sets it for tests): a test binary built in another
/// checkout that shares the target directory still finds this one's scripts.
fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string())
}

fn runner_path() -> PathBuf {
    let path = std::env::var_os("LANCET_PYTHON_RUNNER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let script = PathBuf::from(manifest_dir()).join("../scripts/build-python-runner.sh");
            let out = std::process::Command::new("bash")
                .arg(&script)
                .output()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
            assert!(
                out.status.success(),
                "{} failed: {}",
                script.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        });
    assert!(path.exists(), "no Python runner at {}", path.display());
    path
}

/// One runtime for every test (the runner is loaded once), with tight limits so hostile
/// functions end quickly.
pub fn runtime() -> &'static Runtime {
    static RT: OnceLock<(tempfile::TempDir, Runtime)> = OnceLock::new();
    &RT.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = RuntimeConfig::new(dir.path().join("m"), dir.path().join("c"));
        cfg.default_limits = limits();
        let cache = std::env::var_os("LANCET_CACHE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/lancet"))
            .join("python");
        cfg.python = Some(PythonRunnerConfig {
            component: runner_path(),
            cache_dir: cache,
        });
        let rt = Runtime::new(cfg).unwrap();
        (dir, rt)
    })
    .1
}

pub fn limits() -> Limits {
    Limits {
        timeout: Duration::from_secs(2),
        max_memory_bytes: 128 << 20,
        max_output_bytes: 16 << 20,
        ..Limits::default()
    }
}

pub fn spec(source: &str, entry: &str) -> PythonSpec {
    PythonSpec {
        files: Vec::new(),
        source: source.to_string(),
        entry: entry.to_string(),
        env: vec![],
        init: None,
        on_error: OnError::Fail,
        limits: None,
    }
}

pub fn prepare(source: &str, entry: &str) -> Arc<PreparedPython> {
    runtime()
        .prepare_python(&spec(source, entry))
        .unwrap_or_else(|e| panic!("preparing {entry}: {e}"))
}

pub fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns.into_iter().map(|(_, a)| a).collect(),
    )
    .unwrap()
}

pub fn call(
    udf: &PreparedPython,
    tenant: &str,
    input: &RecordBatch,
    expected: &DataType,
) -> Result<InvokeOutput, UdfError> {
    runtime().invoke_python(udf, tenant, input, expected, &limits())
}
