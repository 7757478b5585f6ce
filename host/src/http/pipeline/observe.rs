//! What an operator sees of each request: its span (every log line of the request carries
//! the request id, which the answer returns as `x-request-id`), its metrics, and what
//! happens when a handler panics. Also the fault-injection hook the reliability tests use.

use std::any::Any;
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use tracing::Span;

use crate::error::ApiError;
use crate::http::AppState;
use lancet_hosting::usage::Measure;

use crate::metrics::{NO_TENANT, RequestLabels, RouteLabels};

/// The tenant a request was served for, left on the answer by authentication for metrics.
#[derive(Clone)]
pub struct ServedTenant(pub Arc<str>);

/// The span every log line of a request is logged in.
pub fn request_span(request: &Request) -> Span {
    let id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    tracing::info_span!(
        "request",
        request_id = %id,
        method = %request.method(),
        path = %request.uri().path(),
        tenant = tracing::field::Empty,
    )
}

/// The route patterns a path may match, for the metrics' route label. The layers run before
/// the router (see `http::service`), so they cannot read axum's `MatchedPath`: they look the
/// path up here instead, one match of the same patterns the router holds.
pub struct RouteNames(matchit::Router<&'static str>);

impl RouteNames {
    pub fn new(patterns: impl IntoIterator<Item = &'static str>) -> Self {
        let mut router = matchit::Router::new();
        for pattern in patterns {
            // The route table lists a path once per method, so a pattern may come again; that
            // is the only refusal possible, as axum's router took the same patterns.
            let _ = router.insert(pattern, pattern);
        }
        Self(router)
    }

    /// The pattern `path` matches, or "unmatched".
    pub fn name(&self, path: &str) -> &'static str {
        self.0.at(path).map_or("unmatched", |m| *m.value)
    }
}

/// Counts requests, latency and bytes by route (the route pattern, so ids do not explode the
/// label set), method, status and tenant.
pub async fn record_metrics<N, F>(
    app: &AppState,
    names: &RouteNames,
    request: Request,
    next: N,
) -> Response
where
    N: FnOnce(Request) -> F,
    F: Future<Output = Response>,
{
    let route = Cow::Borrowed(names.name(request.uri().path()));
    // Extension methods are any token a client sends: one label value for all of them keeps
    // the series bounded.
    let method = Cow::Borrowed(match *request.method() {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "other",
    });
    let start = Instant::now();
    let bytes_in = Arc::new(AtomicU64::new(0));
    let request = {
        let counter = bytes_in.clone();
        request.map(|body| {
            Counted::body(body, move |n| {
                counter.fetch_add(n, Ordering::Relaxed);
            })
        })
    };
    let in_flight = InFlight::enter(app);
    let response = next(request).await;
    drop(in_flight);
    let tenant = response
        .extensions()
        .get::<ServedTenant>()
        .map_or_else(|| Arc::from(NO_TENANT), |t| t.0.clone());
    let labels = RouteLabels {
        route,
        method,
        tenant,
    };
    let metrics = &app.metrics;
    metrics
        .requests
        .get_or_create(&RequestLabels {
            route: labels.route.clone(),
            method: labels.method.clone(),
            status: response.status().as_u16(),
            tenant: labels.tenant.clone(),
        })
        .inc();
    metrics
        .latency
        .get_or_create(&labels)
        .observe(start.elapsed().as_secs_f64());
    metrics
        .bytes_in
        .get_or_create(&labels)
        .inc_by(bytes_in.load(Ordering::Relaxed));
    let usage = (!labels.tenant.is_empty() && &*labels.tenant != NO_TENANT)
        .then(|| app.hosting.counters(&labels.tenant))
        .flatten();
    if let Some(u) = &usage {
        u.add(Measure::Requests, 1);
        u.add(Measure::BytesIn, bytes_in.load(Ordering::Relaxed));
    }
    // Answers may stream after this returns: count their bytes as they go, on a counter looked
    // up once (it shares its value with the family's).
    let bytes_out = metrics.bytes_out.get_or_create(&labels).clone();
    response.map(move |body| {
        Counted::body(body, move |n| {
            bytes_out.inc_by(n);
            if let Some(u) = &usage {
                u.add(Measure::BytesOut, n);
            }
        })
    })
}

/// A body that reports the length of each data frame as it passes. Unlike a `map_frame`
/// wrapper it keeps the body's size hint, so an answer of known length goes out with a
/// `content-length` in one write rather than chunked (a second write and the client's wait
/// for the terminating chunk, on every request).
struct Counted<F> {
    inner: Body,
    count: F,
}

impl<F: FnMut(u64) + Send + Unpin + 'static> Counted<F> {
    fn body(inner: Body, count: F) -> Body {
        Body::new(Counted { inner, count })
    }
}

impl<F: FnMut(u64) + Unpin> HttpBody for Counted<F> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            (self.count)(data.len() as u64);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Counts a request in flight until dropped, so a request whose client went away (its
/// future dropped mid-way) is not counted forever.
struct InFlight(AppState);

impl InFlight {
    fn enter(app: &AppState) -> Self {
        app.metrics.in_flight.inc();
        Self(app.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.metrics.in_flight.dec();
    }
}

/// The answer to a request whose handler panicked: a 500 in the spec's shape. The panic hook
/// has already logged the message and place, inside the request's span.
pub fn panicked(app: &AppState, _panic: Box<dyn Any + Send>) -> Response {
    app.metrics.panics.inc();
    ApiError::internal("the server hit an internal fault handling this request").into_response()
}

/// Logs panics through tracing, so the line carries the current span (the request's id, or
/// the job's) and follows `--log-format`.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(non-text panic payload)".to_string());
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        tracing::error!(panic = %message, %location, "panic");
    }));
}

/// With `LANCET_FAULT_INJECTION=1` in the server's environment, a request header
/// `x-lancet-fault` makes the server misbehave on purpose: `panic` panics in the handler
/// chain, `sleep-ms=N` holds the request (and its admission slots) for N ms. Off by default;
/// the header is ignored then.
pub async fn inject_faults<N, F>(app: &AppState, request: Request, next: N) -> Response
where
    N: FnOnce(Request) -> F,
    F: Future<Output = Response>,
{
    if app.fault_injection
        && let Some(fault) = request
            .headers()
            .get("x-lancet-fault")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    {
        if fault == "panic" {
            panic!("fault injected by request header x-lancet-fault: panic");
        }
        if let Some(ms) = fault
            .strip_prefix("sleep-ms=")
            .and_then(|v| v.parse::<u64>().ok())
        {
            tokio::time::sleep(std::time::Duration::from_millis(ms.min(60_000))).await;
        }
    }
    next(request).await
}

/// Request ids for requests that bring none: UUID-shaped (version 4), unique within the
/// process by a counter and across processes by a random start. `MakeRequestUuid` asked the
/// kernel for 16 random bytes on every request (a `getrandom` call each).
#[derive(Clone, Copy, Default)]
pub struct MakeRequestId;

impl tower_http::request_id::MakeRequestId for MakeRequestId {
    fn make_request_id<B>(
        &mut self,
        _request: &axum::http::Request<B>,
    ) -> Option<tower_http::request_id::RequestId> {
        static START: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let start = *START.get_or_init(|| uuid::Uuid::new_v4().as_u128());
        // The counter in the last 7 bytes, which the version and variant bits leave alone.
        let n = NEXT.fetch_add(1, Ordering::Relaxed) & ((1 << 56) - 1);
        let bytes = (start ^ u128::from(n)).to_be_bytes();
        let id = uuid::Builder::from_random_bytes(bytes).into_uuid();
        axum::http::HeaderValue::from_str(&id.to_string())
            .ok()
            .map(tower_http::request_id::RequestId::new)
    }
}

#[cfg(test)]
mod request_id_tests {
    use tower_http::request_id::MakeRequestId as _;

    #[test]
    fn generated_ids_are_distinct_version_4_uuids() {
        let request = axum::http::Request::new(());
        let mut make = super::MakeRequestId;
        let ids: std::collections::HashSet<String> = (0..10_000)
            .map(|_| {
                let id = make.make_request_id(&request).unwrap();
                id.header_value().to_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(ids.len(), 10_000);
        for id in ids.iter().take(50) {
            let parsed = uuid::Uuid::parse_str(id).unwrap();
            assert_eq!(parsed.get_version_num(), 4, "{id}");
        }
    }
}

#[cfg(test)]
mod route_name_tests {
    use super::RouteNames;

    #[test]
    fn paths_are_named_by_the_pattern_they_match() {
        let names = RouteNames::new([
            "/healthz",
            "/v1/table/{id}/count_rows",
            "/v1/table/{id}/count_rows",
            "/v1/namespace/{id}/table/list",
            "/console/{*path}",
        ]);
        assert_eq!(names.name("/healthz"), "/healthz");
        assert_eq!(
            names.name("/v1/table/ns$t/count_rows"),
            "/v1/table/{id}/count_rows"
        );
        assert_eq!(
            names.name("/v1/namespace/a/table/list"),
            "/v1/namespace/{id}/table/list"
        );
        assert_eq!(names.name("/console/app.js"), "/console/{*path}");
        assert_eq!(names.name("/v1/table/t/nope"), "unmatched");
        assert_eq!(names.name("/v1/table/a/b/count_rows"), "unmatched");
    }
}
