//! Registered Functions (lancedb's `create_function`) run by the native tier: those whose pip
//! packages only native wheels provide (numpy, pandas, ...), for a tenant opted into the tier.
//! Built here (interpreter version matched, environment installed by pip, source loaded in the
//! sandbox and its parameters read) and computed with the Wasm tier's semantics: parameters
//! that take no null skip their rows, rows that raise are null and recorded
//! (`function_errors`), class Functions are set up with their initialization, and a
//! named-struct result gives each column its field.

use std::sync::{Arc, OnceLock};

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field};
use lancet_native::{Code, Environments, FunctionSpec, Mode, Worker, WorkerKey};
use lancet_udf::{RowFailure, sha256_hex};
use serde_json::{Map, Value};

use super::VirtualColumns;
use super::backfill::{ColumnUdf, Computed, call_strict, converted, udf_input};
use crate::error::{ApiError, ApiResult};
use crate::functions::StoredFunction;
use crate::native::{NativeTier, native_error};

/// What a native Function's build found.
pub struct NativeBuild {
    /// The interpreter's full version (`3.11.2`).
    pub python_version: String,
    /// The callable's parameters, in order, and how many have no default.
    pub params: Vec<String>,
    pub required: usize,
    /// What its environment holds, `name==version`.
    pub resolved: Vec<String>,
}

/// The source a native Function build loads.
pub struct NativeSource<'a> {
    pub source: &'a str,
    pub entry: &'a str,
    /// Modules shipped with it (`code=[...]`).
    pub files: &'a [(String, Vec<u8>)],
    pub env: Vec<(String, String)>,
}

/// How one Function column calls its Function (resolved by `function_udf`).
pub(super) struct FunctionCall<'a> {
    pub input_columns: Vec<String>,
    pub inputs: Vec<Field>,
    pub result_type: DataType,
    pub struct_field: String,
    pub strict: Vec<usize>,
    /// The binding's initialization (JSON object text): a class Function's arguments.
    pub initialization: &'a str,
    /// Its `env` and bound secrets' values.
    pub env: Vec<(String, String)>,
}

/// A Function column computed by the native tier.
pub(super) struct NativeFunction {
    tier: Arc<NativeTier>,
    packages: Vec<String>,
    /// The worker spec without its environment, which is resolved on first use (on a
    /// blocking thread: pip may run, e.g. on a replica that never built it).
    base: FunctionSpec,
    spec: OnceLock<FunctionSpec>,
    /// Which worker, for the pool: every input of the spec hashed (a rotated secret or
    /// another initialization is another worker).
    function: String,
    label: String,
    digest: String,
    pub(super) input_columns: Vec<String>,
    inputs: Vec<Field>,
    struct_field: String,
    strict: Vec<usize>,
}

/// Whether interpreter `have` (`3.11.2`) is the `asked` one (`3.11`, `3`, `3.11.2`).
fn version_matches(asked: &str, have: &str) -> bool {
    let asked: Vec<&str> = asked.trim().split('.').collect();
    let have: Vec<&str> = have.split('.').collect();
    asked.len() <= have.len() && asked.iter().zip(&have).all(|(a, h)| a == h)
}

impl VirtualColumns {
    /// The native tier, when this server runs it and `tenant` is opted in.
    pub fn native_for(&self, tenant: &str) -> Option<Arc<NativeTier>> {
        self.native.as_ref().filter(|t| t.allows(tenant)).cloned()
    }

    /// A native Function's build: `python_version` (the client's `major.minor`) must be the
    /// tier's interpreter; `packages` are installed (blocking: pip runs); the source is
    /// loaded in the sandbox (a class is not set up) and its parameters read.
    pub fn check_native_function(
        &self,
        tenant: &str,
        python_version: Option<&str>,
        packages: &[String],
        code: NativeSource<'_>,
    ) -> ApiResult<NativeBuild> {
        let tier = self.native_for(tenant).ok_or_else(|| {
            ApiError::invalid(format!(
                "tenant '{tenant}' has no native Python tier for this Function's packages"
            ))
        })?;
        let have = tier.python_version().to_string();
        if let Some(asked) = python_version
            && !version_matches(asked, &have)
        {
            return Err(ApiError::invalid(format!(
                "runtime.python_version {asked} is not the native tier's Python {have}: this \
                 server runs native Functions with Python {have} only"
            )));
        }
        let environment = tier.environment(packages)?;
        let resolved = Environments::installed(&environment[0]).map_err(native_error)?;
        let spec = FunctionSpec {
            code: Code::Source {
                source: code.source.to_string(),
                entry: code.entry.to_string(),
            },
            mode: Mode::Row,
            output: DataType::Null,
            environment,
            env: code.env,
            null_on_error: false,
            init: None,
            files: code.files.to_vec(),
            load_only: true,
            pass_nulls: true,
        };
        let worker = Worker::start(tier.pool().sandbox(), &spec).map_err(native_error)?;
        Ok(NativeBuild {
            python_version: worker.python_version().to_string(),
            params: worker.params().to_vec(),
            required: worker.required_params(),
            resolved,
        })
    }

    /// What computes a Function column whose version runs in the native tier.
    pub(super) fn native_function_udf(
        &self,
        stored: &StoredFunction,
        call: FunctionCall<'_>,
        field: &Field,
    ) -> ApiResult<ColumnUdf> {
        let tier = self.native.clone().ok_or_else(|| {
            ApiError::invalid(format!(
                "Function '{}' version {} runs in the native Python tier, which this server \
                 does not run (--native-python)",
                stored.name, stored.version
            ))
        })?;
        let init: Map<String, Value> = serde_json::from_str(call.initialization)
            .map_err(|e| ApiError::internal(format!("stored initialization: {e}")))?;
        let base = FunctionSpec {
            code: Code::Source {
                source: stored.source.clone(),
                entry: stored.entrypoint.clone(),
            },
            mode: Mode::Row,
            output: call.result_type.clone(),
            environment: Vec::new(),
            env: call.env,
            null_on_error: true,
            init: Some(init),
            files: stored.files.clone(),
            load_only: false,
            pass_nulls: true,
        };
        let mut identity = format!(
            "{}\0{}\0{}\0{}\0{}",
            stored.object_id, stored.version, stored.digest, call.initialization, call.result_type
        );
        for (k, v) in &base.env {
            identity.push_str(&format!("\0{k}={v}"));
        }
        let udf = NativeFunction {
            tier,
            packages: stored.packages.clone(),
            base,
            spec: OnceLock::new(),
            function: format!("function:{}", sha256_hex(identity.as_bytes())),
            label: stored.entrypoint.clone(),
            digest: stored.digest.clone(),
            input_columns: call.input_columns,
            inputs: call.inputs,
            struct_field: call.struct_field,
            strict: call.strict,
        };
        Ok(ColumnUdf::native_function(udf, field.clone()))
    }
}

impl NativeFunction {
    pub(super) fn version(&self) -> &str {
        &self.digest
    }

    pub(super) fn label(&self) -> &str {
        &self.label
    }

    fn spec(&self) -> ApiResult<&FunctionSpec> {
        if let Some(s) = self.spec.get() {
            return Ok(s);
        }
        let spec = FunctionSpec {
            environment: self.tier.environment(&self.packages)?,
            ..self.base.clone()
        };
        Ok(self.spec.get_or_init(|| spec))
    }

    /// Computes the column over `batch` (holding its inputs). Blocking.
    pub(super) fn compute(
        &self,
        tenant: &str,
        batch: &RecordBatch,
        field: &Field,
    ) -> ApiResult<Computed> {
        self.tier.allow(tenant)?;
        let input = udf_input(&self.inputs, batch)?;
        call_strict(input, &self.strict, field, |called| {
            let key = WorkerKey {
                tenant: tenant.to_string(),
                function: self.function.clone(),
            };
            let out = self
                .tier
                .pool()
                .call(&key, self.spec()?, &called)
                .map_err(native_error)?;
            Ok(Computed {
                values: converted(&out.values, &self.struct_field, field)?,
                nulled: out.nulled as u64,
                failures: out
                    .failures
                    .into_iter()
                    .map(|(offset, message)| RowFailure {
                        offset,
                        rows: 1,
                        error_type: "guest_error",
                        message,
                    })
                    .collect(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::version_matches;

    #[test]
    fn a_version_matches_the_interpreter_it_prefixes() {
        assert!(version_matches("3.11", "3.11.2"));
        assert!(version_matches("3", "3.11.2"));
        assert!(version_matches("3.11.2", "3.11.2"));
        assert!(!version_matches("3.12", "3.11.2"));
        assert!(!version_matches("3.1", "3.11.2"));
        assert!(!version_matches("3.11.2.1", "3.11.2"));
    }
}
