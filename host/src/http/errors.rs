//! Rendering of every non-2xx answer in the spec's JSON error shape
//! (`type`, `title`, `status`, `detail`, `instance`) plus the upstream `code` and `error`,
//! including axum's own rejections (unknown route, wrong method, oversize or malformed body).

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use lance_namespace::ErrorCode;
use serde_json::json;

use crate::error::ApiError;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = Response::new(Body::empty());
        *response.status_mut() = self.status;
        response.extensions_mut().insert(self);
        response
    }
}

fn type_and_title(status: StatusCode) -> (&'static str, &'static str) {
    match status.as_u16() {
        400 => ("/errors/bad-request", "Malformed request"),
        401 => (
            "/errors/unauthorized-request",
            "No valid authentication credentials for the operation",
        ),
        403 => (
            "/errors/forbidden-request",
            "Not authorized to make this request",
        ),
        404 => ("/errors/not-found-error", "Not found Error"),
        405 => ("/errors/method-not-allowed", "Method not allowed"),
        409 => (
            "/errors/conflict",
            "The namespace has been concurrently modified",
        ),
        408 => ("/errors/request-timeout", "Request timed out"),
        413 => ("/errors/payload-too-large", "Request body too large"),
        503 => ("/errors/service-unavailable", "Slow down"),
        s if s < 500 => ("/errors/bad-request", "Malformed request"),
        _ => ("/errors/server-error", "Internal Server Error"),
    }
}

/// A title that says what happened where the status alone would mislead: the spec titles every
/// 409 "The namespace has been concurrently modified", which is true of a lost race only.
fn title_for(err: &ApiError) -> Option<&'static str> {
    use ErrorCode::*;
    Some(match err.code {
        TableAlreadyExists => "Table already exists",
        NamespaceAlreadyExists => "Namespace already exists",
        TableIndexAlreadyExists => "Index already exists",
        TableTagAlreadyExists => "Tag already exists",
        TableBranchAlreadyExists => "Branch already exists",
        NamespaceNotEmpty => "Namespace not empty",
        InvalidTableState => "Invalid table state",
        TableColumnNotFound => "Column not found",
        TableNotFound => "Table not found",
        NamespaceNotFound => "Namespace not found",
        TableIndexNotFound => "Index not found",
        TableTagNotFound => "Tag not found",
        TableVersionNotFound => "Version not found",
        TableBranchNotFound => "Branch not found",
        TransactionNotFound => "Transaction not found",
        _ => return None,
    })
}

pub fn error_json(err: &ApiError, instance: &str) -> serde_json::Value {
    let (kind, title) = type_and_title(err.status);
    let title = title_for(err).unwrap_or(title);
    json!({
        "type": kind,
        "title": title,
        "status": err.status.as_u16(),
        "detail": err.message,
        "instance": instance,
        "code": err.code.as_u32(),
        "error": err.message,
    })
}

/// Middleware: turns an [`ApiError`] carried in a response, or any non-JSON error body that
/// axum or tower-http produced, into the JSON error shape.
pub async fn render_errors<N, F>(request: Request, next: N) -> Response
where
    N: FnOnce(Request) -> F,
    F: std::future::Future<Output = Response>,
{
    let instance = request.uri().path().to_string();
    let response = next(request).await;
    let status = response.status();
    if status.is_success() || status.is_redirection() || status.is_informational() {
        return response;
    }
    // The answer's extensions (who was served, for metrics) outlive its rendering.
    let (parts, body) = response.into_parts();
    let err = if let Some(err) = parts.extensions.get::<ApiError>() {
        if status.is_server_error() {
            tracing::error!(path = %instance, error = %err.message, "request failed");
        }
        err.clone()
    } else {
        let is_json = parts
            .headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|ct| ct.as_bytes().starts_with(b"application/json"));
        if is_json {
            return Response::from_parts(parts, body);
        }
        let text = axum::body::to_bytes(body, 64 * 1024)
            .await
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&text).trim().to_string();
        let (code, message) = match parts.status {
            StatusCode::NOT_FOUND => (ErrorCode::Unsupported, format!("no such route: {instance}")),
            StatusCode::METHOD_NOT_ALLOWED => (
                ErrorCode::Unsupported,
                format!("method not allowed on {instance}"),
            ),
            StatusCode::PAYLOAD_TOO_LARGE => (
                ErrorCode::InvalidInput,
                "request body exceeds the server's limit".to_string(),
            ),
            StatusCode::REQUEST_TIMEOUT => (
                ErrorCode::InvalidInput,
                "the request body was not received in time".to_string(),
            ),
            s if s.is_client_error() => (
                ErrorCode::InvalidInput,
                if text.is_empty() { s.to_string() } else { text },
            ),
            _ => (
                ErrorCode::Internal,
                if text.is_empty() {
                    "internal error".to_string()
                } else {
                    text
                },
            ),
        };
        ApiError {
            status: parts.status,
            code,
            message,
        }
    };
    let mut rendered = (err.status, axum::Json(error_json(&err, &instance))).into_response();
    rendered.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if matches!(
        err.status,
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT
    ) {
        // The body was not read to its end, so the connection cannot carry another request:
        // say so, or a client reusing it sees it closed under its next request.
        rendered
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    if err.status == StatusCode::SERVICE_UNAVAILABLE {
        // Every 503 is a "come back later": overload, a busy UDF runtime, a full body budget.
        let retry = parts
            .headers
            .get(header::RETRY_AFTER)
            .cloned()
            .unwrap_or(HeaderValue::from_static("1"));
        rendered.headers_mut().insert(header::RETRY_AFTER, retry);
    }
    if let Some(range) = parts.headers.get(header::CONTENT_RANGE) {
        // A 416 says how large the value is (`bytes */<size>`); range clients read it.
        rendered
            .headers_mut()
            .insert(header::CONTENT_RANGE, range.clone());
    }
    if err.status == StatusCode::UNAUTHORIZED {
        // RFC 6750: tell the client which scheme to use.
        rendered
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    rendered.extensions_mut().extend(parts.extensions);
    rendered
}

/// Router fallback: an unknown route is a 404 in the error shape.
pub async fn no_route() -> ApiError {
    ApiError::new(ErrorCode::Unsupported, "no such route").with_status(StatusCode::NOT_FOUND)
}
