//! Around every route that changes something (role above `read`, and every operator route):
//! the tenant's quotas first (tables, open jobs, storage bytes), then the handler, then the
//! table's bytes measured again, then the audit record, stored before the answer leaves (an
//! acknowledged change always has its record).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http_body::Frame;
use lancet_hosting::storage::Reservation;

use axum::extract::{FromRequestParts, MatchedPath, Path, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use lancet_hosting::audit::Record;

use super::AppState;
use super::pipeline::auth::{Caller, OperatorCaller, forbidden};
use super::pipeline::extract::Target;
use crate::config::Quota;
use crate::error::{ApiError, ApiResult};
use crate::jobs::state::JobState;

/// Routes that make a table (the tables quota).
const MAKE_TABLE: [&str; 6] = [
    "/v1/table/{id}/create",
    "/v1/tables/{id}",
    "/v1/table/{id}/declare",
    "/v1/table/{id}/register",
    "/v1/table/{id}/clone",
    "/v1/materialized_view/{id}/create",
];

/// Routes that start a job (the jobs quota).
const START_JOB: [&str; 3] = [
    "/v1/table/{id}/backfill_column",
    "/v1/materialized_view/{id}/create",
    "/v1/materialized_view/{id}/refresh",
];

/// The path's parameters as the client sent them, for the record's `object`.
fn object_of(params: &HashMap<String, String>) -> String {
    ["tenant", "id", "name", "key_id", "index_name", "column"]
        .iter()
        .filter_map(|k| params.get(*k))
        .cloned()
        .collect::<Vec<_>>()
        .join(" ")
}

fn outcome(status: u16) -> &'static str {
    match status {
        s if s < 400 => "ok",
        401 | 403 | 429 | 503 => "refused",
        _ => "failed",
    }
}

pub async fn guard(
    axum::Extension(app): axum::Extension<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let template = request
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_default();
    let (mut parts, body) = request.into_parts();
    let params = Path::<HashMap<String, String>>::from_request_parts(&mut parts, &())
        .await
        .map(|p| p.0)
        .unwrap_or_default();
    let target = Target::from_request_parts(&mut parts, &()).await.ok();
    let caller = parts.extensions.get::<Caller>().cloned();
    let operator = parts.extensions.get::<OperatorCaller>().cloned();
    let mut record = Record {
        time_ms: chrono::Utc::now().timestamp_millis(),
        tenant: caller
            .as_ref()
            .map(|c| c.tenant().to_string())
            .unwrap_or_default(),
        principal: caller
            .as_ref()
            .map(|c| c.grant.principal.clone())
            .or(operator.map(|o| o.principal))
            .unwrap_or_default(),
        action: format!("{} {template}", parts.method),
        object: object_of(&params),
        request_id: parts
            .headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        ..Default::default()
    };
    let mut request = Request::from_parts(parts, body);

    let quota = caller.as_ref().and_then(|c| {
        app.auth
            .keys()
            .tenant_settings(c.tenant())
            .and_then(|s| s.quota)
    });
    let mut reservation = None;
    let mut location = None;
    // Held while a table is made, so that this node's concurrent creates count each other.
    let mut _making = None;
    let response = match (&caller, &quota) {
        (Some(c), Some(q)) => {
            if q.tables.is_some() && MAKE_TABLE.contains(&template.as_str()) {
                _making = Some(app.hosting.making_table(c.tenant()).await);
            }
            match admit(&app, c, q, &template).await {
                Ok(r) => {
                    reservation = r.map(|r| Arc::new(Mutex::new(r)));
                    if let (Some(r), Some(max)) = (&reservation, q.storage_bytes) {
                        request = metered(request, r.clone(), max, c.tenant());
                    }
                    if reservation.is_some()
                        && let Some(t) = &target
                    {
                        location = t.catalog.locate(&t.id).await.ok();
                    }
                    None
                }
                Err(e) => Some(e.into_response()),
            }
        }
        _ => None,
    };
    let response = match response {
        Some(refused) => {
            record.detail = "refused by the tenant's quota".into();
            refused
        }
        None => next.run(request).await,
    };
    let status = response.status();
    if let (Some(c), Some(_)) = (&caller, &reservation)
        && status.is_success()
    {
        if location.is_none()
            && let Some(t) = &target
        {
            location = t.catalog.locate(&t.id).await.ok();
        }
        if let Some(loc) = &location
            && let Err(e) = crate::hosting::storage::measure_table(&app, c.tenant(), loc).await
        {
            tracing::warn!(error = %e, "storage not measured after a write");
        }
    }
    drop(reservation);
    let Some(audit) = &app.hosting.audit else {
        return response;
    };
    record.status = status.as_u16();
    record.outcome = outcome(record.status).into();
    match audit.append(record).await {
        Ok(()) => response,
        Err(e) if status.is_success() => ApiError::internal(format!(
            "the change was made, but its audit record could not be stored: {e}"
        ))
        .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "audit record of a refused or failed call lost");
            response
        }
    }
}

/// The tenant's quotas for this call: `Ok(Some)` holds the bytes it reserved.
async fn admit(
    app: &AppState,
    caller: &Caller,
    quota: &Quota,
    template: &str,
) -> ApiResult<Option<lancet_hosting::storage::Reservation>> {
    let tenant = caller.tenant();
    if let Some(max) = quota.tables
        && MAKE_TABLE.contains(&template)
    {
        let have = match caller.catalog.list_all_tables(&[], "$").await {
            Some(t) => t.len() as u64,
            None => caller.catalog.walk_tables(&[], None).await?.len() as u64,
        };
        if have >= max {
            return Err(forbidden(format!(
                "tenant '{tenant}' has {have} tables and its quota is {max}: drop one first"
            )));
        }
    }
    if let Some(max) = quota.jobs
        && START_JOB.contains(&template)
    {
        let mut open = 0;
        for state in [JobState::InProgress, JobState::Paused] {
            open += app.jobs.list(tenant, None, Some(state)).await?.len() as u64;
        }
        if open >= u64::from(max) {
            return Err(forbidden(format!(
                "tenant '{tenant}' has {open} jobs running or paused and its quota is {max}: \
                 wait for one to finish or cancel one"
            )));
        }
    }
    let Some(max) = quota.storage_bytes else {
        return Ok(None);
    };
    crate::hosting::storage::ensure_measured(app, tenant).await?;
    app.hosting
        .ledger
        .reserve(tenant, 0, Some(max))
        .map(Some)
        .map_err(|over| forbidden(format!("tenant '{tenant}': {over}")))
}

/// The request with its body counted against the tenant's storage quota as it arrives: each
/// piece grows the write's reservation, and the piece that would pass the quota ends the body
/// with [`OverQuotaBody`](super::pipeline::body::OverQuotaBody) (a 403 from every extractor;
/// the handler applies nothing of a body it could not read).
fn metered(
    request: Request,
    reservation: Arc<Mutex<Reservation>>,
    quota: u64,
    tenant: &str,
) -> Request {
    let tenant = tenant.to_string();
    request.map(|body| {
        Body::new(Metered {
            inner: body,
            reservation,
            quota,
            tenant,
        })
    })
}

struct Metered {
    inner: Body,
    reservation: Arc<Mutex<Reservation>>,
    quota: u64,
    tenant: String,
}

impl http_body::Body for Metered {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            let grown = self
                .reservation
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .grow(data.len() as u64, Some(self.quota));
            if let Err(over) = grown {
                let why = format!("tenant '{}': {over}", self.tenant);
                return Poll::Ready(Some(Err(Box::new(super::pipeline::body::OverQuotaBody(
                    why,
                )))));
            }
        }
        polled.map(|f| f.map(|r| r.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
