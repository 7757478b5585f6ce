//! Lancet's Wasm UDF runtime: verifies and stores modules, compiles and caches them, and runs
//! UDFs over Arrow batches in sandboxed, resource-limited wasmtime instances.
//!
//! Knows Arrow and wasmtime; nothing about HTTP or Lance. The guest ABI is described in
//! `sdk/README.md` (ABI version [`ABI_VERSION`], manifest `abi` [`ABI_NAME`]).
//!
//! Typical use: [`Manifest::parse_verified`] → [`Runtime::store_module`] →
//! [`Runtime::prepare`] (definition time; errors with
//! [`is_definition_error`](UdfError::is_definition_error) are the caller's fault) →
//! [`Runtime::invoke`] per batch. `invoke` blocks while the guest runs (up to the timeout),
//! so call it from a blocking-capable thread with a normal (≥ 2 MiB) stack.
//!
//! Python UDFs run in the same runtime (`python/`): CPython compiled to a Wasm component (the
//! runner, [`RuntimeConfig::python`]), under the same limits and per-tenant pools:
//! [`Runtime::prepare_python`] (compiles the source in a fresh interpreter; Python's own errors
//! are definition errors) → [`Runtime::invoke_python`] per batch.

mod call_stats;
mod codec;
mod embed;
mod engine;
mod error;
mod instance;
mod invoke;
mod limits;
mod manifest;
mod module_cache;
mod module_check;
mod package;
mod pool;
mod python;
mod result_reader;
mod runtime;

pub use call_stats::CallStats;
pub use embed::{HostEmbed, MAX_EMBED_REQUEST};
pub use error::UdfError;
pub use invoke::{InvokeOutput, RowFailure};
pub use limits::{Limits, LimitsOverride};
pub use manifest::{
    ABI_NAME, ABI_VERSION, MAX_MODULE_BYTES, Manifest, OLDEST_ABI_VERSION, OnError, sha256_hex,
};
pub use package::{Packaged, decode_module_base64, package};
pub use python::{
    MAX_FILES, MAX_FILES_BYTES, MAX_SOURCE_BYTES, Param, PreparedPython, PythonRunnerConfig,
    PythonSpec, Signature, check_file_path as check_python_file_path,
    decode_source as decode_python_source, files_b64 as python_files_b64,
};
pub use runtime::{PreparedUdf, Runtime, RuntimeConfig, RuntimeStats, SharedModules};
