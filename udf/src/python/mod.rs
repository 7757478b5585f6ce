//! Python UDFs: CPython compiled to a WebAssembly component (the *runner*, built from
//! `udf/python/` by componentize-py with every WASI import stubbed out), run by wasmtime under
//! the same limits as Wasm guests: memory cap, epoch deadline, output cap, per-tenant instance
//! pools. One runner instance holds one function: `load` compiles the user's source in it,
//! `call` applies the function row by row.
//!
//! Values cross the boundary as typed lists (`columns.rs`); the runner's interface is
//! `udf/python/wit/runner.wit`.

mod columns;
mod instance;
mod runner;
mod spec;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arrow_array::{ArrayRef, RecordBatch, new_empty_array};
use arrow_schema::DataType;
use sha2::{Digest, Sha256};

use crate::UdfError;
use crate::invoke::{InvokeOutput, RowFailure};
use crate::limits::Limits;
use crate::manifest::OnError;
use crate::pool::{InstanceKey, InstancePool};
use crate::runtime::Runtime;

pub use runner::PythonRunnerConfig;
pub use spec::{
    MAX_FILES, MAX_FILES_BYTES, MAX_SOURCE_BYTES, Param, PythonSpec, Signature, check_file_path,
    decode_source, files_b64,
};

use instance::{CallResult, PyInstance};
use runner::RunnerSlot;

/// A Python UDF ready to call: its source compiled once in the sandbox, its signature read.
pub struct PreparedPython {
    spec: PythonSpec,
    sha256: String,
    label: String,
    signature: Signature,
    instance_key: InstanceKey,
    nulled_rows: AtomicU64,
}

impl PreparedPython {
    pub fn spec(&self) -> &PythonSpec {
        &self.spec
    }

    /// sha256 of the source, lowercase hex.
    pub fn source_sha256(&self) -> &str {
        &self.sha256
    }

    /// `entry@sha256-prefix`, as in error messages.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The function's parameters and return annotation, and the interpreter's version.
    pub fn signature(&self) -> &Signature {
        &self.signature
    }

    /// Rows turned to null so far under `on_error: null`.
    pub fn nulled_rows(&self) -> u64 {
        self.nulled_rows.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for PreparedPython {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedPython")
            .field("udf", &self.label)
            .finish()
    }
}

/// The runtime's Python half: the runner (loaded on first use) and its instances.
pub(crate) struct PythonHost {
    runner: RunnerSlot,
    pub(crate) pool: InstancePool<PyInstance>,
    prepared: Mutex<HashMap<[u8; 32], Arc<PreparedPython>>>,
}

/// Idle interpreters kept, in all: each holds tens of MiB of heap (a Wasm module's instance a
/// few hundred KiB), so fewer are kept than of Wasm guests.
const MAX_IDLE_PYTHON: usize = 16;
/// Idle interpreters kept per (tenant, function): enough for a backfill's parallel calls.
const MAX_IDLE_PYTHON_PER_KEY: usize = 4;

impl PythonHost {
    pub(crate) fn new(config: Option<PythonRunnerConfig>, max_idle_per_key: usize) -> Self {
        Self {
            runner: RunnerSlot::new(config),
            pool: InstancePool::new(
                max_idle_per_key.min(MAX_IDLE_PYTHON_PER_KEY),
                MAX_IDLE_PYTHON,
            ),
            prepared: Mutex::default(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Runtime {
    /// Whether Python UDFs can run here, and if not, why.
    pub fn python_status(&self) -> Result<(), UdfError> {
        self.inner.python.runner.configured()
    }

    /// Loads (or compiles, first time on this machine) the Python runner now rather than at
    /// the first Python call. Blocks; for a background thread at start-up.
    pub fn warm_python(&self) -> Result<(), UdfError> {
        self.inner.python.runner.get().map(|_| ())
    }

    /// Compiles `spec`'s source in a fresh sandboxed interpreter and reads the function's
    /// signature. Python's own errors (a SyntaxError, a missing name, an exception at import)
    /// are definition errors. Memoised per spec.
    pub fn prepare_python(&self, spec: &PythonSpec) -> Result<Arc<PreparedPython>, UdfError> {
        spec.validate()?;
        let key: [u8; 32] = Sha256::digest(
            serde_json::to_vec(spec).map_err(|e| UdfError::Internal(e.to_string()))?,
        )
        .into();
        let host = &self.inner.python;
        if let Some(p) = lock(&host.prepared).get(&key) {
            return Ok(p.clone());
        }
        let runner = host.runner.get()?;
        let sha256 = crate::manifest::sha256_hex(spec.source.as_bytes());
        let label = format!("{}@{}", spec.entry, &sha256[..12]);
        let limits = self
            .inner
            .cfg
            .default_limits
            .tightened_by(spec.limits.as_ref());
        let mut instance = PyInstance::new(&runner, &limits, &label)?;
        let signature = instance
            .load(spec, &limits, &label)?
            .map_err(UdfError::PythonSource)?;
        let mut files = Sha256::new();
        for (path, data) in &spec.files {
            files.update(path.as_bytes());
            files.update([0]);
            files.update((data.len() as u64).to_le_bytes());
            files.update(data);
        }
        let instance_key: InstanceKey = Sha256::new()
            .chain_update(sha256.as_bytes())
            .chain_update([0])
            .chain_update(spec.entry.as_bytes())
            .chain_update([0])
            .chain_update(serde_json::to_vec(&spec.env).unwrap_or_default())
            .chain_update([0])
            .chain_update(serde_json::to_vec(&spec.init).unwrap_or_default())
            .chain_update([0])
            .chain_update(files.finalize())
            .finalize()
            .into();
        let udf = Arc::new(PreparedPython {
            spec: spec.clone(),
            sha256,
            label,
            signature,
            instance_key,
            nulled_rows: AtomicU64::new(0),
        });
        lock(&host.prepared).insert(key, udf.clone());
        Ok(udf)
    }

    /// Runs `udf` over `input` (one column per parameter, in order) for `tenant`; the result
    /// has `input.num_rows()` rows of type `expected`. Under `on_error: null` rows whose call
    /// raised are null and listed; otherwise the first raising row fails the call.
    pub fn invoke_python(
        &self,
        udf: &PreparedPython,
        tenant: &str,
        input: &RecordBatch,
        expected: &DataType,
        limits: &Limits,
    ) -> Result<InvokeOutput, UdfError> {
        let limits = limits.tightened_by(udf.spec.limits.as_ref());
        let rows = input.num_rows();
        let step = limits.max_rows_per_call.max(1);
        let mut arrays: Vec<ArrayRef> = Vec::new();
        let mut failures = Vec::new();
        let mut offset = 0;
        while offset < rows {
            let len = step.min(rows - offset);
            let chunk = input.slice(offset, len);
            let started = std::time::Instant::now();
            let result = self.python_chunk(udf, tenant, &chunk, expected, &limits);
            self.inner
                .call_stats
                .record(tenant, len, started.elapsed(), &result);
            let (array, errors) = result?;
            for e in errors {
                failures.push(RowFailure {
                    offset: offset + e.row as usize,
                    rows: 1,
                    error_type: "python_error",
                    message: e.message,
                });
            }
            arrays.push(array);
            offset += len;
        }
        let array = match arrays.len() {
            0 => new_empty_array(expected),
            1 => arrays.pop().expect("one array"),
            _ => {
                let refs: Vec<_> = arrays.iter().map(|a| a.as_ref()).collect();
                arrow_select::concat::concat(&refs)
                    .map_err(|e| UdfError::Internal(format!("concatenating results: {e}")))?
            }
        };
        udf.nulled_rows
            .fetch_add(failures.len() as u64, Ordering::Relaxed);
        Ok(InvokeOutput {
            array,
            nulled_rows: failures.len(),
            failures,
        })
    }

    /// One call into one instance. Python exceptions leave the interpreter usable; traps and
    /// limit hits drop the instance, so the next call gets a fresh one.
    fn python_chunk(
        &self,
        udf: &PreparedPython,
        tenant: &str,
        chunk: &RecordBatch,
        expected: &DataType,
        limits: &Limits,
    ) -> Result<(ArrayRef, Vec<instance::RowError>), UdfError> {
        let host = &self.inner.python;
        let args = chunk
            .columns()
            .iter()
            .zip(chunk.schema().fields())
            .map(|(a, f)| {
                columns::to_wit(a)
                    .map_err(|e| UdfError::BadInput(format!("column '{}': {e}", f.name())))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut instance = match host.pool.take(tenant, &udf.instance_key) {
            Some(i) => {
                self.inner.counters.reused.fetch_add(1, Ordering::Relaxed);
                i
            }
            None => {
                let runner = host.runner.get()?;
                let mut i = PyInstance::new(&runner, limits, &udf.label)?;
                // Module-level code may call `lancet.embed` while it loads.
                i.set_caller(tenant, self.config().embedder.clone());
                self.inner.counters.created.fetch_add(1, Ordering::Relaxed);
                i.load(&udf.spec, limits, &udf.label)?
                    .map_err(UdfError::PythonSource)?;
                i
            }
        };
        instance.set_caller(tenant, self.config().embedder.clone());
        let stop_at_first = udf.spec.on_error == OnError::Fail;
        let kind = columns::kind_for(expected);
        let fields = columns::struct_fields(expected);
        let discard = |e| {
            self.inner
                .counters
                .discarded
                .fetch_add(1, Ordering::Relaxed);
            e
        };
        let outcome = instance
            .call(
                &args,
                chunk.num_rows(),
                kind,
                &fields,
                stop_at_first,
                limits,
                &udf.label,
            )
            .map_err(discard)?;
        match outcome {
            CallResult::Raised(message) => {
                host.pool.put(tenant, &udf.instance_key, instance);
                Err(UdfError::Guest {
                    udf: udf.label.clone(),
                    message,
                })
            }
            CallResult::Values(values, nulls, errors) => {
                // The UDF's code shares the interpreter with the runner and could rewrite it:
                // what comes back is checked like any guest output.
                if let Some(e) = errors.iter().find(|e| e.row as usize >= chunk.num_rows()) {
                    return Err(UdfError::BadOutput {
                        udf: udf.label.clone(),
                        reason: format!("an error for row {} of {}", e.row, chunk.num_rows()),
                    });
                }
                let array = columns::from_output(values, nulls, chunk.num_rows(), expected)
                    .map_err(|reason| UdfError::BadOutput {
                        udf: udf.label.clone(),
                        reason,
                    })?;
                host.pool.put(tenant, &udf.instance_key, instance);
                Ok((array, errors))
            }
        }
    }
}
