//! SQL over Arrow Flight SQL: a gRPC service on its own port (`--flight-addr`), in the same
//! process as the REST API, over the same tenants, keys and tables. It knows Flight and gRPC;
//! planning and running statements is `crate::sql`'s.
//!
//! Credentials on every call, as for REST: `authorization: Bearer <key or token>` or
//! `x-api-key`, or a Flight handshake with HTTP Basic (any user name, the key as password),
//! whose answer hands the key back as the bearer token. `x-lancedb-database` /
//! `x-service-database` select a database, as for REST.
//!
//! Statement and prepared-statement handles carry the statement itself (and bound
//! parameters), never server state: any replica can run them, and each run is planned again
//! for the caller presenting it, so a handle grants nothing.

mod front;
mod handle;
mod service;

use std::sync::Arc;

use tonic::Status;

use crate::App;
use crate::error::ApiError;
use crate::http::pipeline::auth::Caller;

pub use service::SqlService;

/// Serves Flight SQL on `listener` until `shutdown` resolves.
pub async fn serve(
    app: Arc<App>,
    limits: crate::sql::Limits,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let service = SqlService::new(app, limits);
    // Answers are written in several frames: without TCP_NODELAY the last small one waits
    // for the client's delayed ACK.
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(service.into_server())
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .map_err(|e| format!("flight sql server: {e}"))
}

/// The caller of a Flight call, from its metadata.
async fn caller(app: &App, metadata: &tonic::metadata::MetadataMap) -> Result<Caller, Status> {
    let text = |name: &str| -> Result<Option<&str>, Status> {
        match metadata.get(name) {
            None => Ok(None),
            Some(v) => v
                .to_str()
                .map(|s| Some(s.trim()))
                .map_err(|_| Status::unauthenticated(format!("{name} is not valid text"))),
        }
    };
    let grant = if let Some(value) = text("authorization")? {
        let token = value
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                Status::unauthenticated("authorization must be 'Bearer <key or token>'")
            })?;
        app.auth.bearer(token)
    } else if let Some(key) = text("x-api-key")? {
        app.auth.api_key(key)
    } else {
        return Err(Status::unauthenticated(
            "no credentials: send 'authorization: Bearer <key>' or 'x-api-key', or handshake \
             with the key as password",
        ));
    }
    .map_err(|e| Status::unauthenticated(e.0))?;
    // The lancedb client's SQL sends `database`.
    let database = match text("x-service-database")? {
        Some(db) => Some(db),
        None => match text("x-lancedb-database")? {
            Some(db) => Some(db),
            None => text("database")?,
        },
    }
    .filter(|db| !db.is_empty())
    .map(str::to_string);
    if let Some(db) = &database
        && (db.contains(['$', '/', '\\', '\'']) || db == "." || db == "..")
    {
        return Err(Status::invalid_argument(format!(
            "database name '{db}' is not a valid namespace name"
        )));
    }
    let catalog = app.tenants.catalog(&grant.tenant).await.map_err(status)?;
    Ok(Caller {
        grant,
        database,
        catalog,
    })
}

/// Where unqualified table names are looked up, below the database: the lancedb client's
/// `namespace-path` (its `default_namespace_path`, levels joined by `.`). Its default,
/// `public`, is the database itself: that is where the lancedb client's tables are.
fn default_namespace(metadata: &tonic::metadata::MetadataMap) -> Vec<String> {
    let path = metadata
        .get("namespace-path")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .trim();
    if path.is_empty() || path == "public" {
        return Vec::new();
    }
    path.split(['.', '$'])
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// An API error as a gRPC status of the same meaning.
pub(crate) fn status(e: ApiError) -> Status {
    use axum::http::StatusCode as S;
    let message = e.message;
    match e.status {
        S::BAD_REQUEST | S::UNPROCESSABLE_ENTITY | S::PAYLOAD_TOO_LARGE => {
            Status::invalid_argument(message)
        }
        S::UNAUTHORIZED => Status::unauthenticated(message),
        S::FORBIDDEN => Status::permission_denied(message),
        S::NOT_FOUND => Status::not_found(message),
        S::CONFLICT => Status::already_exists(message),
        S::SERVICE_UNAVAILABLE | S::TOO_MANY_REQUESTS => Status::unavailable(message),
        S::NOT_IMPLEMENTED => Status::unimplemented(message),
        _ => Status::internal(message),
    }
}

/// The HTTP status of the same meaning as a gRPC status, for metrics.
pub(crate) fn http_status(status: &Status) -> u16 {
    use tonic::Code;
    match status.code() {
        Code::Ok => 200,
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => 400,
        Code::Unauthenticated => 401,
        Code::PermissionDenied => 403,
        Code::NotFound => 404,
        Code::AlreadyExists | Code::Aborted => 409,
        Code::Cancelled => 499,
        Code::Unavailable | Code::ResourceExhausted => 503,
        Code::Unimplemented => 501,
        _ => 500,
    }
}
