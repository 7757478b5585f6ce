//! Why a model could not be registered, loaded or run, split by whose fault it is.

/// A model error. [`ModelError::is_client_error`] tells a caller's mistake (bad manifest,
/// checksum mismatch, a file that is no model, text over the limits) from the server's.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The request or the files are wrong: a 4xx for an API, a row error for a column.
    #[error("{0}")]
    Invalid(String),
    /// The call ran past its deadline and ONNX Runtime stopped it.
    #[error("model '{model}' ran past its deadline of {millis} ms and was stopped")]
    Deadline {
        /// The model's name.
        model: String,
        /// The deadline it had.
        millis: u64,
    },
    /// No ONNX Runtime library is loaded on this server.
    #[error("{0}")]
    Unavailable(String),
    /// ONNX Runtime failed on input that passed every check.
    #[error("{0}")]
    Runtime(String),
}

impl ModelError {
    /// An [`ModelError::Invalid`] with this message.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid(message.into())
    }

    /// Whether the caller can fix it (bad input), as opposed to the server.
    pub fn is_client_error(&self) -> bool {
        matches!(self, Self::Invalid(_) | Self::Deadline { .. })
    }
}
