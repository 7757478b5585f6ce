//! Spec 2.3 context mapping, both ways, for JSON requests and answers:
//! - a request body's `context` entries `header.X` become request headers `X` (never the
//!   credential or database headers: a body cannot grant itself another identity or database);
//! - every header of a JSON object answer is mirrored into its `context` as `header.X`.

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, header};
use axum::response::Response;
use serde_json::Value;

/// Marks an answer whose JSON shape a client parses strictly (no `context` may be added).
#[derive(Clone, Copy)]
pub struct Verbatim;

/// An error answer; `errors::render_errors`, outside this layer, gives it the spec's shape.
fn plain(err: crate::error::ApiError) -> Response {
    use axum::response::IntoResponse;
    err.into_response()
}

/// JSON bodies this layer reads whole; larger ones pass through untouched.
const MAX_JSON: usize = 8 * 1024 * 1024;

const PROTECTED: &[&str] = &[
    "authorization",
    "x-api-key",
    "x-service-database",
    "x-lancedb-database",
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
];

fn is_json(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|ct| ct.as_bytes().starts_with(b"application/json"))
}

pub async fn map_context<N, F>(request: Request, next: N) -> Response
where
    N: FnOnce(Request) -> F,
    F: Future<Output = Response>,
{
    let arrived_with = request.headers().get("x-request-id").cloned();
    let request = match request_headers_from_context(request).await {
        Ok(r) => r,
        Err(response) => return *response,
    };
    // The request id is the request's header as the context left it; the answer carries that
    // one (the layers outside keep a header already there). The span was made with the id
    // the request came with: only a context that changed it is recorded (a field recorded
    // again shows twice in a log line).
    let request_id = request.headers().get("x-request-id").cloned();
    if request_id != arrived_with
        && let Some(id) = request_id.as_ref().and_then(|v| v.to_str().ok())
    {
        tracing::Span::current().record("request_id", id);
    }
    let mut response = next(request).await;
    if let Some(id) = request_id
        && !response.headers().contains_key("x-request-id")
    {
        response
            .headers_mut()
            .insert(HeaderName::from_static("x-request-id"), id);
    }
    if !response.status().is_success()
        || !is_json(response.headers())
        || response.extensions().get::<Verbatim>().is_some()
    {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = to_bytes(body, MAX_JSON).await else {
        return plain(crate::error::ApiError::internal(
            "answer too large to map its context",
        ));
    };
    // Only an object answer gets a context: skip parsing bare values (a count, a list).
    let object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    let parsed = if object {
        serde_json::from_slice::<Value>(&bytes).ok()
    } else {
        None
    };
    let Some(Value::Object(mut map)) = parsed else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let context = map
        .entry("context")
        .or_insert_with(|| Value::Object(Default::default()));
    if !context.is_object() {
        *context = Value::Object(Default::default());
    }
    if let Value::Object(ctx) = context {
        for (name, value) in parts.headers.iter() {
            if name == header::CONTENT_TYPE || name == header::CONTENT_LENGTH {
                continue;
            }
            if let Ok(v) = value.to_str() {
                ctx.insert(format!("header.{name}"), Value::String(v.to_string()));
            }
        }
    }
    let out = serde_json::to_vec(&Value::Object(map)).unwrap_or_else(|_| bytes.to_vec());
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(out))
}

async fn request_headers_from_context(request: Request) -> Result<Request, Box<Response>> {
    let wants = request.headers().get(header::CONTENT_TYPE).is_none() || is_json(request.headers());
    let small = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .is_some_and(|n| n <= MAX_JSON);
    if !wants || !small {
        return Ok(request);
    }
    let (mut parts, body) = request.into_parts();
    let bytes = to_bytes(body, MAX_JSON)
        .await
        .map_err(|e| Box::new(plain(super::body::body_error(&e))))?;
    // Most bodies carry no context: a scan for the key (or for an escape that could spell
    // it) is far cheaper than a parse.
    let mentioned = memchr::memmem::find(&bytes, b"\"context\"").is_some()
        || memchr::memmem::find(&bytes, b"\\u").is_some();
    if mentioned
        && let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(&bytes)
        && let Some(Value::Object(ctx)) = map.get("context")
    {
        for (key, value) in ctx {
            let (Some(name), Some(value)) = (key.strip_prefix("header."), value.as_str()) else {
                continue;
            };
            if PROTECTED.iter().any(|p| name.eq_ignore_ascii_case(p)) {
                continue;
            }
            if let (Ok(name), Ok(value)) =
                (HeaderName::try_from(name), HeaderValue::try_from(value))
            {
                parts.headers.insert(name, value);
            }
        }
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}
