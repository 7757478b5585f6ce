use std::time::Duration;

/// Why a native-tier call failed. The host maps these to its own errors: a guest's own
/// failure (`Guest`) is the user's; `Killed` and `Timeout` are limits; the rest are setup.
#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    /// The tier cannot run here: bubblewrap or the interpreter is missing or unusable.
    #[error("the native Python tier is unavailable: {0}")]
    Unavailable(String),
    /// A function's environment could not be built (pip's own message, shortened).
    #[error("building the function's environment failed: {0}")]
    Environment(String),
    /// The worker did not start or could not load the function.
    #[error("the function could not be loaded: {0}")]
    Load(String),
    /// The function raised (on `row`, for a row-at-a-time function).
    #[error("{}{message}", row.map(|r| format!("row {r}: ")).unwrap_or_default())]
    Guest {
        /// The row whose call raised, when the function is called a row at a time.
        row: Option<usize>,
        /// The exception's type and message.
        message: String,
    },
    /// The function's result does not fit the declared output (type or length).
    #[error("the function's result is unusable: {0}")]
    Result(String),
    /// The worker passed its wall-clock deadline and was killed.
    #[error("the function did not finish within {0:?} and was stopped")]
    Timeout(Duration),
    /// The worker died: a limit (memory, CPU time) or a crash; `detail` is its last words.
    #[error("the function's worker died ({status}){detail}")]
    Killed {
        /// How it ended, as the OS says it.
        status: String,
        /// The end of its standard error, prefixed with ": ", or empty.
        detail: String,
    },
    /// An I/O failure talking to the worker.
    #[error("talking to the worker failed: {0}")]
    Io(#[from] std::io::Error),
}

impl NativeError {
    /// Whether the worker is still usable after this error (the function raised): the pool
    /// keeps it warm; after any other error (a refused result included) it is discarded.
    pub fn worker_survives(&self) -> bool {
        matches!(self, NativeError::Guest { .. })
    }
}
