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

/// SEED-SPEC.md Part 7: the `type` and `title` of each status it names. Normative and fixed
/// per status: what happened is said in `detail`, `error` and `code`, which clients read.
pub const PART7: [(u16, &str, &str); 7] = [
    (400, "/errors/bad-request", "Malformed request"),
    (
        401,
        "/errors/unauthorized-request",
        "No valid authentication credentials for the operation",
    ),
    (
        403,
        "/errors/forbidden-request",
        "Not authorized to make this request",
    ),
    (404, "/errors/not-found-error", "Not found Error"),
    (
        409,
        "/errors/conflict",
        "The namespace has been concurrently modified",
    ),
    (500, "/errors/server-error", "Internal Server Error"),
    (503, "/errors/service-unavailable", "Slow down"),
];

/// Part 7's type and title for `status`; statuses it does not name (answered by HTTP itself
/// before any endpoint runs: an unknown method, a body too large or too slow, a range past a
/// value's end) get their own, in the same shape.
fn type_and_title(status: StatusCode) -> (&'static str, &'static str) {
    let code = status.as_u16();
    if let Some((_, kind, title)) = PART7.iter().find(|(s, _, _)| *s == code) {
        return (kind, title);
    }
    match code {
        405 => ("/errors/method-not-allowed", "Method not allowed"),
        408 => ("/errors/request-timeout", "Request timed out"),
        413 => ("/errors/payload-too-large", "Request body too large"),
        416 => ("/errors/range-not-satisfiable", "Range not satisfiable"),
        s if s < 500 => PART7_400,
        _ => PART7_500,
    }
}

const PART7_400: (&str, &str) = (PART7[0].1, PART7[0].2);
const PART7_500: (&str, &str) = (PART7[5].1, PART7[5].2);

/// What kind of thing happened, for codes whose messages may not say it: lance-namespace's
/// directory words a missing table only as "table id 'x'" and leaves the rest to its code.
fn kind_of(code: ErrorCode) -> Option<(&'static str, &'static str)> {
    use ErrorCode::*;
    Some(match code {
        TableNotFound => ("Table not found", "not found"),
        NamespaceNotFound => ("Namespace not found", "not found"),
        TableIndexNotFound => ("Index not found", "not found"),
        TableTagNotFound => ("Tag not found", "not found"),
        TableVersionNotFound => ("Version not found", "not found"),
        TableBranchNotFound => ("Branch not found", "not found"),
        TransactionNotFound => ("Transaction not found", "not found"),
        TableColumnNotFound => ("Column not found", "not found"),
        TableAlreadyExists => ("Table already exists", "already exists"),
        NamespaceAlreadyExists => ("Namespace already exists", "already exists"),
        TableIndexAlreadyExists => ("Index already exists", "already exists"),
        TableTagAlreadyExists => ("Tag already exists", "already exists"),
        TableBranchAlreadyExists => ("Branch already exists", "already exists"),
        NamespaceNotEmpty => ("Namespace not empty", "not empty"),
        _ => return None,
    })
}

/// The detail (and `error`): the message, led by what kind of thing happened when it does not
/// say so itself. The title is the status's (Part 7), so these words, which people and the
/// SDKs read ("not found", "already exists"), live here.
fn detail(err: &ApiError) -> String {
    match kind_of(err.code) {
        Some((kind, words)) if !err.message.to_ascii_lowercase().contains(words) => {
            format!("{kind}: {}", err.message)
        }
        _ => err.message.clone(),
    }
}

pub fn error_json(err: &ApiError, instance: &str) -> serde_json::Value {
    let (kind, title) = type_and_title(err.status);
    let detail = detail(err);
    json!({
        "type": kind,
        "title": title,
        "status": err.status.as_u16(),
        "detail": detail,
        "instance": instance,
        "code": err.code.as_u32(),
        "error": detail,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_that_says_what_happened_is_kept_as_it_is() {
        let err = ApiError::new(ErrorCode::TableNotFound, "table not found: t");
        assert_eq!(detail(&err), "table not found: t");
        let err = ApiError::new(ErrorCode::TableNotFound, "table id 'ghost'");
        assert_eq!(detail(&err), "Table not found: table id 'ghost'");
        let err = ApiError::new(ErrorCode::InvalidInput, "bad");
        assert_eq!(detail(&err), "bad");
    }

    /// Every code lance-namespace defines, under every status it can carry, renders
    /// Part 7's type and title for that status: nothing of the code reaches the title.
    #[test]
    fn every_error_has_part_7s_type_and_title() {
        for code in 0..=40u32 {
            let Some(code) = ErrorCode::from_u32(code) else {
                continue;
            };
            for (status, kind, title) in PART7 {
                let err = ApiError::new(code, "what happened")
                    .with_status(StatusCode::from_u16(status).unwrap());
                let body = error_json(&err, "/v1/table/t/describe");
                assert_eq!(body["type"], kind, "{body}");
                assert_eq!(body["title"], title, "{body}");
                let said = body["detail"].as_str().unwrap();
                assert!(said.ends_with("what happened"), "{body}");
                assert_eq!(body["error"], said);
                if let Some((kind, _)) = kind_of(code) {
                    assert_eq!(said, format!("{kind}: what happened"));
                }
            }
            // And under the status the code maps to by default.
            let err = ApiError::new(code, "x");
            let status = err.status.as_u16();
            let body = error_json(&err, "/");
            if let Some((_, kind, title)) = PART7.iter().find(|(s, _, _)| *s == status) {
                assert_eq!(
                    (body["type"].as_str(), body["title"].as_str()),
                    (Some(*kind), Some(*title))
                );
            }
        }
    }
}
