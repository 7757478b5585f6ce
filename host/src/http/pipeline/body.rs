//! Why a request body could not be read, as the client is told: the bottom of the pipeline,
//! used by every layer and extractor that reads a body.

use crate::error::ApiError;

/// A request body could not be received because the server's body memory is in use.
#[derive(Debug)]
pub struct BodyMemoryExhausted;

impl std::fmt::Display for BodyMemoryExhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the server is receiving too much request data at once; slow down")
    }
}

impl std::error::Error for BodyMemoryExhausted {}

/// A request body stopped because the tenant's storage quota would be passed (the message
/// says by how much); nothing of the request is applied.
#[derive(Debug)]
pub struct OverQuotaBody(pub String);

impl std::fmt::Display for OverQuotaBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OverQuotaBody {}

/// Why a request body could not be received, as the answer a client should get: the
/// server's body memory in use (503, retry), a stalled sender (408), a body over the limit
/// (413), anything else (400).
pub fn body_error(err: &(dyn std::error::Error + 'static)) -> ApiError {
    use axum::http::StatusCode;
    let mut cause = Some(err);
    while let Some(e) = cause {
        if e.is::<BodyMemoryExhausted>() {
            return ApiError::new(
                lance_namespace::ErrorCode::ServiceUnavailable,
                e.to_string(),
            );
        }
        if let Some(over) = e.downcast_ref::<OverQuotaBody>() {
            return ApiError::new(lance_namespace::ErrorCode::PermissionDenied, over.0.clone());
        }
        if e.is::<tower_http::timeout::TimeoutError>() {
            return ApiError::invalid("the request body stalled and timed out")
                .with_status(StatusCode::REQUEST_TIMEOUT);
        }
        if e.is::<http_body_util::LengthLimitError>() {
            return ApiError::invalid("request body exceeds the server's limit")
                .with_status(StatusCode::PAYLOAD_TOO_LARGE);
        }
        cause = e.source();
    }
    ApiError::invalid(format!("unreadable request body: {err}"))
}

/// [`body_error`] for the `Bytes` extractor, whose rejection knows an over-limit body (its
/// cause chain does not reach the limit error).
pub fn bytes_error(e: axum::extract::rejection::BytesRejection) -> ApiError {
    if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::invalid("request body exceeds the server's limit")
            .with_status(e.status());
    }
    body_error(&e)
}
