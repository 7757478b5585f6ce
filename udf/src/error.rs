//! Every way defining or running a UDF can fail, worded for the person who defined it.

use std::time::Duration;

/// Errors from lancet-udf. `udf` fields name the UDF as `entry@sha256-prefix`.
#[derive(Debug, thiserror::Error)]
pub enum UdfError {
    #[error("invalid UDF manifest: {0}")]
    BadManifest(String),
    #[error(
        "manifest checksum mismatch: manifest_checksum is {expected} but the manifest hashes to {actual}"
    )]
    ManifestChecksumMismatch { expected: String, actual: String },
    #[error(
        "module checksum mismatch: the manifest says sha256 {expected} but the module hashes to {actual}"
    )]
    ModuleChecksumMismatch { expected: String, actual: String },
    #[error("module size mismatch: the manifest says {expected} bytes but the module has {actual}")]
    ModuleSizeMismatch { expected: u64, actual: u64 },
    #[error("module {sha256} is not stored; send its bytes with the definition")]
    ModuleNotStored { sha256: String },
    #[error("UDF module is not valid base64: {0}")]
    BadModuleEncoding(String),
    #[error("not a WebAssembly module: {0}")]
    NotWasm(String),
    #[error("invalid WebAssembly module: {0}")]
    InvalidModule(String),
    #[error(
        "module imports `{module}.{name}`, which is not allowed (allowed: lancet.log(i32, i32))"
    )]
    ForbiddenImport { module: String, name: String },
    #[error("module export `{name}` is missing or has the wrong type: {detail}")]
    MissingExport { name: String, detail: String },
    #[error(
        "module speaks UDF ABI version {found}; this server speaks versions {} to {expected}",
        crate::OLDEST_ABI_VERSION
    )]
    AbiMismatch { expected: i32, found: i32 },
    #[error("UDF {udf} rejected its configuration: {message}")]
    Init { udf: String, message: String },
    #[error("UDF {udf} trapped: {message}")]
    Trap { udf: String, message: String },
    #[error(
        "UDF {udf} exceeded its time limit of {limit:?} of CPU time ({wall:?} of wall time at most)",
        wall = limit.saturating_mul(crate::engine::WALL_FACTOR)
    )]
    Timeout { udf: String, limit: Duration },
    #[error("UDF {udf} exceeded its memory limit of {limit} bytes")]
    MemoryLimit { udf: String, limit: usize },
    #[error("UDF {udf} overflowed its stack (limit {limit} bytes)")]
    StackOverflow { udf: String, limit: usize },
    #[error("UDF {udf} returned {size} bytes, over the output limit of {limit} bytes")]
    OutputTooLarge {
        udf: String,
        size: usize,
        limit: usize,
    },
    #[error("UDF {udf} returned bad output: {reason}")]
    BadOutput { udf: String, reason: String },
    #[error("UDF {udf} failed: {message}")]
    Guest { udf: String, message: String },
    #[error("Python UDF rejected: {0}")]
    PythonSource(String),
    #[error("Python UDFs are not available on this server: {0}")]
    PythonUnavailable(String),
    #[error("bad UDF input: {0}")]
    BadInput(String),
    #[error("UDF runtime is at capacity: {0}")]
    Busy(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("internal UDF runtime error: {0}")]
    Internal(String),
}

impl UdfError {
    /// True for problems with the module or manifest themselves (the HTTP layer answers 400):
    /// the same definition will never work, whatever the data.
    pub fn is_definition_error(&self) -> bool {
        matches!(
            self,
            Self::BadManifest(_)
                | Self::ManifestChecksumMismatch { .. }
                | Self::ModuleChecksumMismatch { .. }
                | Self::ModuleSizeMismatch { .. }
                | Self::ModuleNotStored { .. }
                | Self::BadModuleEncoding(_)
                | Self::NotWasm(_)
                | Self::InvalidModule(_)
                | Self::ForbiddenImport { .. }
                | Self::MissingExport { .. }
                | Self::AbiMismatch { .. }
                | Self::Init { .. }
                | Self::PythonSource(_)
                | Self::PythonUnavailable(_)
        )
    }

    /// True when a call hit one of its limits (time, memory, stack, output size).
    pub fn is_limit(&self) -> bool {
        matches!(
            self,
            Self::Timeout { .. }
                | Self::MemoryLimit { .. }
                | Self::StackOverflow { .. }
                | Self::OutputTooLarge { .. }
        )
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}
