//! Overload control: bounds on requests in flight (whole server, and per tenant) and on the
//! memory request bodies may hold. A request over a bound is answered at once with 503
//! `/errors/service-unavailable` and `Retry-After`, never queued: a queue would only move the
//! overload into memory and latency, and clients (the lancedb SDK among them) retry 503s.
//!
//! The per-tenant bound keeps one tenant's flood from taking the in-flight slots another
//! tenant's requests need, and `fair` shares the CPU between the tenants' admitted requests;
//! the global bound and the body budget keep the process inside its memory whatever all
//! tenants send together.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use lance_namespace::ErrorCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::auth::Caller;
use super::body::BodyMemoryExhausted;
use crate::error::ApiError;
use crate::http::AppState;

/// Body memory is reserved in units of this many bytes.
const UNIT: usize = 1024;

/// Seconds a refused client is asked to wait.
const RETRY_AFTER_SECS: &str = "1";

pub struct Admission {
    global: Arc<Semaphore>,
    tenant_default: usize,
    /// Each tenant's semaphore with the limit it was made for; a changed limit (auth file
    /// edited) gets a fresh one, and permits of the old one drain as their requests end.
    tenants: Mutex<HashMap<String, (usize, Arc<Semaphore>)>>,
    body_memory: Arc<Semaphore>,
    body_limit: usize,
    /// Run slots shared fairly between tenants (see `fair`).
    run: Arc<super::fair::FairScheduler>,
}

/// The bounds, from the server's settings.
pub struct Bounds {
    pub max_in_flight: usize,
    pub tenant_max_in_flight: usize,
    pub body_memory_bytes: usize,
    /// The largest body accepted at all (larger ones are a 413, not a matter of load).
    pub body_limit: usize,
    pub max_running: usize,
    pub tenant_max_running: usize,
    /// Handlers a tenant runs while no other is active (see `fair`).
    pub max_running_alone: usize,
}

pub fn slow_down(message: impl Into<String>) -> Response {
    let mut response = ApiError::new(ErrorCode::ServiceUnavailable, message).into_response();
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(RETRY_AFTER_SECS),
    );
    response
}

impl Admission {
    pub fn new(b: Bounds) -> Self {
        Self {
            global: Arc::new(Semaphore::new(b.max_in_flight.max(1))),
            tenant_default: b.tenant_max_in_flight.max(1),
            tenants: Mutex::default(),
            body_memory: Arc::new(Semaphore::new(
                (b.body_memory_bytes / UNIT).clamp(1, u32::MAX as usize),
            )),
            body_limit: b.body_limit,
            run: super::fair::FairScheduler::new(
                b.max_running,
                b.tenant_max_running,
                b.max_running_alone,
            ),
        }
    }

    /// Reserve `bytes` of the request-memory budget for an answer assembled in memory (the
    /// same budget request bodies draw on); None when it is in use: the caller answers 503.
    /// The reservation lasts as long as the permit.
    pub fn reserve_memory(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        self.body_memory
            .clone()
            .try_acquire_many_owned(units(bytes))
            .ok()
    }

    fn tenant_slot(&self, tenant: &str, limit: Option<usize>) -> Option<OwnedSemaphorePermit> {
        let limit = limit.unwrap_or(self.tenant_default).max(1);
        let semaphore = {
            let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
            let entry = tenants
                .entry(tenant.to_string())
                .or_insert_with(|| (limit, Arc::new(Semaphore::new(limit))));
            if entry.0 != limit {
                *entry = (limit, Arc::new(Semaphore::new(limit)));
            }
            entry.1.clone()
        };
        semaphore.try_acquire_owned().ok()
    }
}

/// What a request of another front end (Flight SQL) holds while it is served: a whole-server
/// and a tenant in-flight slot, as an HTTP request does.
pub struct Admitted {
    _global: OwnedSemaphorePermit,
    _tenant: OwnedSemaphorePermit,
}

impl Admission {
    /// Admits a request of `tenant` (with its auth-file limit, if any) from a front end
    /// other than HTTP; `Err` says which bound refused it (the caller answers "unavailable,
    /// retry"), and counts the refusal like HTTP's.
    pub fn admit(
        &self,
        metrics: &crate::metrics::Metrics,
        tenant: &str,
        limit: Option<usize>,
    ) -> Result<Admitted, String> {
        let Ok(global) = self.global.clone().try_acquire_owned() else {
            metrics.reject("global", crate::metrics::NO_TENANT);
            return Err("the server is at its limit of requests in flight; slow down".into());
        };
        let Some(tenant_slot) = self.tenant_slot(tenant, limit) else {
            metrics.reject("tenant", tenant);
            return Err(format!(
                "tenant '{tenant}' is at its limit of requests in flight; slow down"
            ));
        };
        Ok(Admitted {
            _global: global,
            _tenant: tenant_slot,
        })
    }

    /// A fair run slot for `tenant` (see `fair`); `None` after waiting too long.
    pub async fn run_slot(&self, tenant: &str) -> Option<super::fair::RunSlot> {
        self.run.acquire(tenant).await
    }
}

fn units(bytes: usize) -> u32 {
    bytes.div_ceil(UNIT).min(u32::MAX as usize) as u32
}

/// Whole-server bounds, before credentials are looked at (a flood of bad credentials is load
/// too). `/healthz` and `/metrics` are exempt, so a saturated server still reports in.
pub async fn admit_request<N, F>(app: &AppState, request: Request, next: N) -> Response
where
    N: FnOnce(Request) -> F,
    F: Future<Output = Response>,
{
    let path = request.uri().path();
    if path == "/healthz" || path == "/metrics" {
        return next(request).await;
    }
    let admission = &app.admission;
    let Ok(_slot) = admission.global.clone().try_acquire_owned() else {
        app.metrics.reject("global", crate::metrics::NO_TENANT);
        return slow_down("the server is at its limit of requests in flight; slow down");
    };
    // Held until the answer is built: handlers keep the decoded body that long.
    let held: Arc<Mutex<Vec<OwnedSemaphorePermit>>> = Arc::default();
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    let request = match declared {
        // Over the body limit: the extractor answers 413 before reading much of it.
        Some(n) if n > admission.body_limit => request,
        Some(0) => request,
        Some(n) => match admission
            .body_memory
            .clone()
            .try_acquire_many_owned(units(n))
        {
            Ok(permit) => {
                held.lock().unwrap().push(permit);
                request
            }
            Err(_) => {
                app.metrics.reject("body_memory", crate::metrics::NO_TENANT);
                return slow_down(BodyMemoryExhausted.to_string());
            }
        },
        // A body of unknown length reserves memory piece by piece as it arrives.
        None => {
            let (parts, body) = request.into_parts();
            let budget = admission.body_memory.clone();
            let held = held.clone();
            let metrics_app = app.clone();
            let stream = body.into_data_stream().map(move |chunk| {
                let chunk = chunk?;
                match budget.clone().try_acquire_many_owned(units(chunk.len())) {
                    Ok(permit) => held.lock().unwrap().push(permit),
                    Err(_) => {
                        metrics_app
                            .metrics
                            .reject("body_memory", crate::metrics::NO_TENANT);
                        return Err(axum::Error::new(BodyMemoryExhausted));
                    }
                }
                Ok(chunk)
            });
            Request::from_parts(parts, Body::from_stream(stream))
        }
    };
    let response = next(request).await;
    drop(held);
    response
}

/// The caller's tenant's bound; runs after authentication.
pub async fn admit_tenant<N, F>(app: &AppState, request: Request, next: N) -> Response
where
    N: FnOnce(Request) -> F,
    F: Future<Output = Response>,
{
    let Some(tenant) = request
        .extensions()
        .get::<Caller>()
        .map(|c| c.tenant().to_string())
    else {
        return next(request).await;
    };
    let settings = app.auth.keys().tenant_settings(&tenant);
    if let Err(wait) = app.hosting.admit_rate(&tenant, settings.as_ref()) {
        app.metrics.reject("rate", &tenant);
        let mut response = slow_down(format!(
            "tenant '{tenant}' is over its quota of requests per second; slow down"
        ));
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        return response;
    }
    let limit = settings.and_then(|s| s.max_in_flight);
    let Some(_slot) = app.admission.tenant_slot(&tenant, limit) else {
        app.metrics.reject("tenant", &tenant);
        return slow_down(format!(
            "tenant '{tenant}' is at its limit of requests in flight; slow down"
        ));
    };
    // Index builds run for minutes on large tables: in a run slot they would hold back the
    // tenant's other requests all that time. They are bounded by the in-flight limits only.
    let path = request.uri().path();
    if path.ends_with("/create_index") || path.ends_with("/create_scalar_index") {
        return next(request).await;
    }
    let Some(mut run) = app.admission.run.acquire(&tenant).await else {
        app.metrics.reject("run_wait", &tenant);
        return slow_down(format!(
            "tenant '{tenant}' waited too long for the server to be free; slow down"
        ));
    };
    let handler = next(request);
    tokio::pin!(handler);
    tokio::select! {
        response = &mut handler => return response,
        () = tokio::time::sleep(super::fair::DEMOTE_AFTER) => run.demote(),
    }
    handler.await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_slots_are_bounded_and_follow_a_changed_limit() {
        let a = Admission::new(Bounds {
            max_in_flight: 10,
            tenant_max_in_flight: 2,
            body_memory_bytes: 1 << 20,
            body_limit: 1 << 20,
            max_running: 4,
            tenant_max_running: 2,
            max_running_alone: 4,
        });
        let s1 = a.tenant_slot("t", None).expect("first");
        let _s2 = a.tenant_slot("t", None).expect("second");
        assert!(a.tenant_slot("t", None).is_none(), "third is over 2");
        assert!(
            a.tenant_slot("u", None).is_some(),
            "another tenant is apart"
        );
        drop(s1);
        assert!(a.tenant_slot("t", None).is_some(), "a freed slot is reused");
        // Raised in the auth file: a fresh semaphore with the new size.
        let raised: Vec<_> = (0..5).filter_map(|_| a.tenant_slot("t", Some(5))).collect();
        assert_eq!(raised.len(), 5);
    }

    #[test]
    fn units_round_up() {
        assert_eq!(units(1), 1);
        assert_eq!(units(UNIT), 1);
        assert_eq!(units(UNIT + 1), 2);
        assert_eq!(units(usize::MAX), u32::MAX);
    }
}
