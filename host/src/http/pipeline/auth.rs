//! Finding and checking credentials on every `/v1` request, and the per-route role check.
//!
//! Credentials, first found wins: `Authorization: Bearer <token>`, `x-api-key: <key>`, then a
//! JSON body's `identity.auth_token` / `identity.api_key`. A present but invalid credential
//! is refused outright (no fall-through to a weaker one). No valid credential: 401. Valid but
//! the route needs a higher role, or the id lies outside the credential's namespace subtree:
//! 403. The database (`x-service-database`, `x-lancedb-database`, else the host name under
//! `--host-domain`) selects a top-level namespace of the caller's tenant.

use std::sync::Arc;

use axum::body::{Body, to_bytes};
use axum::extract::{FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use lance_namespace::ErrorCode;
use serde_json::Value;

use crate::auth::{Grant, Role};
use crate::catalog::Catalog;
use crate::error::{ApiError, ApiResult};
use crate::http::AppState;

/// The authenticated caller of a request: whose it is, what it may do, and where its tables are.
#[derive(Clone)]
pub struct Caller {
    pub grant: Grant,
    /// The database namespace selected by header or host name.
    pub database: Option<String>,
    pub catalog: Arc<Catalog>,
}

impl Caller {
    pub fn tenant(&self) -> &str {
        &self.grant.tenant
    }

    /// A client's id as a catalog id: under the database namespace, and inside the
    /// credential's subtree (else 403).
    pub fn resolve(&self, id: &[String]) -> ApiResult<Vec<String>> {
        let full: Vec<String> = self
            .database
            .iter()
            .cloned()
            .chain(id.iter().cloned())
            .collect();
        if !self.grant.covers(&full) {
            return Err(forbidden(format!(
                "this credential covers namespace '{}' only",
                self.grant.scope.join(".")
            )));
        }
        Ok(full)
    }

    /// Whether this credential covers catalog id `full` (database prefix included).
    pub fn covers(&self, full: &[String]) -> bool {
        self.grant.covers(full)
    }

    /// A catalog id as the client sees it (the database prefix removed).
    pub fn unresolve(&self, id: &[String]) -> Vec<String> {
        match &self.database {
            Some(db) if id.first() == Some(db) => id[1..].to_vec(),
            _ => id.to_vec(),
        }
    }
}

/// The operator's credential on a `/v1/admin/...` request (it has no tenant, no catalog).
#[derive(Clone, Debug)]
pub struct OperatorCaller {
    /// `operator:<id>`.
    pub principal: String,
}

impl<S: Send + Sync> FromRequestParts<S> for OperatorCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<OperatorCaller>()
            .cloned()
            .ok_or_else(|| forbidden("this route is the operator's"))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| unauthorized("no credentials"))
    }
}

pub fn unauthorized(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::Unauthenticated, message)
}

pub fn forbidden(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::PermissionDenied, message)
}

/// JSON bodies read for an `identity`; larger ones must carry a header credential.
const MAX_IDENTITY_BODY: usize = 8 * 1024 * 1024;

pub async fn authenticate<N, F>(app: &AppState, request: Request, next: N) -> Response
where
    N: FnOnce(Request) -> F,
    F: Future<Output = Response>,
{
    if !request.uri().path().starts_with("/v1") {
        return next(request).await;
    }
    let path = request.uri().path().to_string();
    let request_id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    match admit(app, request).await {
        Ok(request) => {
            let tenant = request
                .extensions()
                .get::<Caller>()
                .map_or_else(|| Arc::from(""), |c| Arc::from(c.tenant()));
            tracing::Span::current().record("tenant", &*tenant);
            let mut response = next(request).await;
            response
                .extensions_mut()
                .insert(super::observe::ServedTenant(tenant));
            response
        }
        Err(err) => {
            if let Some(audit) = &app.hosting.audit {
                audit.note(lancet_hosting::audit::Record {
                    time_ms: chrono::Utc::now().timestamp_millis(),
                    action: "authenticate".into(),
                    object: path,
                    outcome: "refused".into(),
                    status: err.status.as_u16(),
                    request_id,
                    detail: err.message.chars().take(500).collect(),
                    ..Default::default()
                });
            }
            err.into_response()
        }
    }
}

async fn admit(app: &AppState, request: Request) -> ApiResult<Request> {
    let (grant, mut request) = credential(app, request).await?;
    if grant.is_operator() {
        request.extensions_mut().insert(OperatorCaller {
            principal: grant.principal,
        });
        return Ok(request);
    }
    if let Some(why) = app.auth.keys().tenant_refusal(&grant.tenant) {
        return Err(forbidden(why));
    }
    let database = database(request.headers(), app.host_domain.as_deref())?;
    let catalog = app.tenants.catalog(&grant.tenant).await?;
    if let Some(db) = &database {
        let db_id = vec![db.clone()];
        // The database must overlap the credential's subtree (be inside it, or contain it).
        if !(grant.covers(&db_id) || grant.scope.starts_with(&db_id)) {
            return Err(forbidden(format!(
                "this credential has no access to database '{db}'"
            )));
        }
        catalog.ensure_namespace(&db_id).await?;
    }
    tracing::debug!(principal = %grant.principal, tenant = %grant.tenant, "authenticated");
    request.extensions_mut().insert(Caller {
        grant,
        database,
        catalog,
    });
    Ok(request)
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> ApiResult<Option<&'a str>> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map(|s| Some(s.trim()))
            .map_err(|_| unauthorized(format!("{name} is not valid text"))),
    }
}

async fn credential(app: &AppState, request: Request) -> ApiResult<(Grant, Request)> {
    let auth = &app.auth;
    if let Some(value) = header_str(request.headers(), "authorization")? {
        let token = value
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| unauthorized("Authorization must be 'Bearer <token>'"))?;
        let grant = auth.bearer(token).map_err(|e| unauthorized(e.0))?;
        return Ok((grant, request));
    }
    if let Some(key) = header_str(request.headers(), "x-api-key")? {
        let grant = auth.api_key(key).map_err(|e| unauthorized(e.0))?;
        return Ok((grant, request));
    }
    let (request, identity) = body_identity(request).await?;
    let missing = || {
        unauthorized("no credentials: send 'Authorization: Bearer <token>' or 'x-api-key: <key>'")
    };
    let identity = identity.ok_or_else(missing)?;
    let grant = if let Some(token) = identity.get("auth_token").and_then(Value::as_str) {
        auth.bearer(token)
    } else if let Some(key) = identity.get("api_key").and_then(Value::as_str) {
        auth.api_key(key)
    } else {
        return Err(missing());
    }
    .map_err(|e| unauthorized(e.0))?;
    Ok((grant, request))
}

/// The `identity` object of a small JSON body (the body is put back for the handler).
async fn body_identity(request: Request) -> ApiResult<(Request, Option<Value>)> {
    let json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .is_none_or(|ct| ct.as_bytes().starts_with(b"application/json"));
    let small = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .is_some_and(|n| n > 0 && n <= MAX_IDENTITY_BODY);
    if !json || !small {
        return Ok((request, None));
    }
    let (parts, body) = request.into_parts();
    let bytes = to_bytes(body, MAX_IDENTITY_BODY)
        .await
        .map_err(|e| super::body::body_error(&e))?;
    let identity = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|mut v| v.get_mut("identity").map(Value::take))
        .filter(Value::is_object);
    Ok((Request::from_parts(parts, Body::from(bytes)), identity))
}

/// The database a request addresses, if any.
fn database(headers: &HeaderMap, host_domain: Option<&str>) -> ApiResult<Option<String>> {
    let named = match header_str(headers, "x-service-database")? {
        Some(db) => Some(db),
        None => header_str(headers, "x-lancedb-database")?,
    };
    let db = match named {
        Some(db) => Some(db.to_string()),
        None => host_domain.and_then(|domain| {
            let host = headers.get(header::HOST)?.to_str().ok()?;
            let host = host.split(':').next()?;
            let sub = host.strip_suffix(domain)?.strip_suffix('.')?;
            sub.split('.').next().map(str::to_string)
        }),
    };
    match db {
        Some(db) if db.is_empty() => Ok(None),
        // A quote breaks the catalog's listings (see `namespaces::listable`).
        Some(db) if db.contains(['$', '/', '\\', '\'']) || db == "." || db == ".." => {
            Err(ApiError::invalid(format!(
                "database name '{db}' is not a valid namespace name"
            )))
        }
        other => Ok(other),
    }
}

/// Route guard: the caller's role must be at least the route's. A typed layer rather than
/// axum's `from_fn`, which boxes a clone of the route and a future on every request.
#[derive(Clone, Copy)]
pub struct Require(pub Role);

impl<S> tower::Layer<S> for Require {
    type Service = Guarded<S>;

    fn layer(&self, inner: S) -> Guarded<S> {
        Guarded {
            needed: self.0,
            inner,
        }
    }
}

#[derive(Clone)]
pub struct Guarded<S> {
    needed: Role,
    inner: S,
}

impl<S> tower::Service<Request> for Guarded<S>
where
    S: tower::Service<Request, Response = Response, Error = std::convert::Infallible>,
{
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = futures::future::Either<
        futures::future::Ready<Result<Response, std::convert::Infallible>>,
        S::Future,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        match refusal(self.needed, &request) {
            Some(err) => {
                futures::future::Either::Left(futures::future::ready(Ok(err.into_response())))
            }
            None => futures::future::Either::Right(self.inner.call(request)),
        }
    }
}

/// Why the caller of `request` may not use a route needing `needed`, if it may not. The
/// operator's credential reaches the operator's routes and nothing else; no tenant credential
/// reaches those.
fn refusal(needed: Role, request: &Request) -> Option<ApiError> {
    let operator = request.extensions().get::<OperatorCaller>().is_some();
    if needed == Role::Operator {
        return match (operator, request.extensions().get::<Caller>()) {
            (true, _) => None,
            (false, Some(_)) => Some(forbidden(
                "this route is the operator's: no tenant key or token reaches it",
            )),
            (false, None) => Some(unauthorized("no credentials")),
        };
    }
    if operator {
        return Some(forbidden(
            "the operator credential reaches /v1/admin/... only; tenants' routes need a \
             tenant's key or token",
        ));
    }
    let Some(caller) = request.extensions().get::<Caller>() else {
        return Some(unauthorized("no credentials"));
    };
    (caller.grant.role < needed).then(|| {
        forbidden(format!(
            "this operation needs the {needed} role; this credential has {}",
            caller.grant.role
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn database_from_headers_then_host() {
        let h = headers(&[
            ("x-service-database", "sales"),
            ("x-lancedb-database", "other"),
        ]);
        assert_eq!(database(&h, None).unwrap().as_deref(), Some("sales"));
        let h = headers(&[("x-lancedb-database", "mydb")]);
        assert_eq!(database(&h, None).unwrap().as_deref(), Some("mydb"));
        let h = headers(&[("host", "mydb.api.example.com:443")]);
        assert_eq!(
            database(&h, Some("api.example.com")).unwrap().as_deref(),
            Some("mydb")
        );
        assert_eq!(database(&h, None).unwrap(), None);
        let h = headers(&[("host", "api.example.com")]);
        assert_eq!(database(&h, Some("api.example.com")).unwrap(), None);
        let h = headers(&[("x-service-database", "../x")]);
        assert!(database(&h, None).is_err());
    }
}
