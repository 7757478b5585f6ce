//! The one error type a UDF returns; the host shows its message to the caller.

use std::fmt;

use arrow_schema::ArrowError;

/// An error returned by a UDF (or by its `init`). Only the message crosses the ABI boundary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdfError {
    message: String,
}

impl UdfError {
    /// An error the host reports with `message` (the call fails, or the row is nulled, as
    /// the column's `on_error` says).
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// What went wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for UdfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for UdfError {}

impl From<ArrowError> for UdfError {
    fn from(e: ArrowError) -> Self {
        Self::new(e.to_string())
    }
}

impl From<String> for UdfError {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

impl From<&str> for UdfError {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

/// `return Err(udf_error!("bad {}", x))` without spelling out the constructor.
#[macro_export]
macro_rules! udf_error {
    ($($arg:tt)*) => { $crate::UdfError::new(::std::format!($($arg)*)) };
}
