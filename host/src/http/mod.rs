//! The HTTP layer: routing, extractors, error rendering. Handlers translate requests into
//! catalog/store calls and know nothing of Wasm or of lance internals beyond the store's API.
//!
//! Every route is listed in [`routes`]; find a handler from its path there.

mod arrow_body;
mod batch;
mod branches;
mod columns;
mod context;
mod data;
pub mod errors;
mod extract;
pub use extract::Target;
mod indexes;
mod jobs;
pub use jobs::tenant_of;
mod namespaces;
mod query;
mod query_body;
mod tables;
mod versions;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

use crate::App;
use crate::error::{ApiError, ApiResult};

pub type AppState = Arc<App>;

/// The version the lancedb SDK reads from `phalanx-version` to decide which request shapes
/// the server understands (0.3: structured full-text queries, multivector).
pub const PHALANX_VERSION: &str = "0.3.0";

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        // Namespaces
        .route("/v1/namespace/{id}/create", post(namespaces::create))
        .route(
            "/v1/namespace/{id}/list",
            get(namespaces::list).post(namespaces::list),
        )
        .route("/v1/namespace/{id}/describe", post(namespaces::describe))
        .route("/v1/namespace/{id}/drop", post(namespaces::drop))
        .route("/v1/namespace/{id}/exists", post(namespaces::exists))
        .route(
            "/v1/namespace/{id}/table/list",
            get(namespaces::list_tables).post(namespaces::list_tables),
        )
        // Tables: catalog
        .route("/v1/table", get(tables::list_all))
        .route("/v1/table/{id}/create", post(tables::create))
        .route("/v1/table/{id}/declare", post(tables::declare))
        .route("/v1/table/{id}/describe", post(tables::describe))
        .route("/v1/table/{id}/exists", post(tables::exists))
        .route("/v1/table/{id}/drop", post(tables::drop))
        .route("/v1/table/{id}/deregister", post(tables::deregister))
        .route("/v1/table/{id}/register", post(tables::register))
        .route("/v1/table/{id}/rename", post(tables::rename))
        .route("/v1/table/{id}/stats", post(tables::stats))
        .route("/v1/table/batch-commit", post(batch::commit))
        // Tables: data
        .route("/v1/table/{id}/insert", post(data::insert))
        .route("/v1/table/{id}/merge_insert", post(data::merge_insert))
        .route("/v1/table/{id}/update", post(data::update))
        .route("/v1/table/{id}/delete", post(data::delete))
        .route("/v1/table/{id}/count_rows", post(data::count_rows))
        .route("/v1/table/{id}/query", post(query::query))
        .route("/v1/table/{id}/explain_plan", post(query::explain_plan))
        .route("/v1/table/{id}/analyze_plan", post(query::analyze_plan))
        // Tables: indexes
        .route("/v1/table/{id}/create_index", post(indexes::create))
        .route(
            "/v1/table/{id}/create_scalar_index",
            post(indexes::create_scalar),
        )
        .route("/v1/table/{id}/index/list", post(indexes::list))
        .route(
            "/v1/table/{id}/index/{index_name}/stats",
            post(indexes::stats),
        )
        .route(
            "/v1/table/{id}/index/{index_name}/drop",
            post(indexes::drop),
        )
        // Tables: schema
        .route("/v1/table/{id}/add_columns", post(columns::add))
        .route("/v1/table/{id}/alter_columns", post(columns::alter))
        .route("/v1/table/{id}/drop_columns", post(columns::drop))
        // Tables: history
        .route("/v1/table/{id}/version/list", post(versions::list))
        .route("/v1/table/{id}/restore", post(versions::restore))
        .route("/v1/table/{id}/tags/list", post(versions::list_tags))
        .route("/v1/table/{id}/tags/version", post(versions::tag_version))
        .route("/v1/table/{id}/tags/create", post(versions::create_tag))
        .route("/v1/table/{id}/tags/delete", post(versions::delete_tag))
        .route("/v1/table/{id}/tags/update", post(versions::update_tag))
        .route("/v1/table/{id}/branches/create", post(branches::create))
        .route("/v1/table/{id}/branches/list", post(branches::list))
        .route("/v1/table/{id}/branches/delete", post(branches::delete))
        // Jobs
        .route(
            "/v1/table/{id}/backfill_column",
            post(jobs::backfill_column),
        )
        .route("/v1/jobs/describe", post(jobs::describe))
        .route("/v1/jobs/list", get(jobs::list).post(jobs::list))
        .route("/v1/jobs/cancel", post(jobs::cancel))
}

/// The full service: routes plus the cross-cutting layers (error rendering, panics, body
/// limit, request ids, tracing), with trailing slashes ignored.
pub fn service(
    state: AppState,
    body_limit: usize,
) -> axum::routing::IntoMakeService<tower_http::normalize_path::NormalizePath<Router>> {
    use tower::Layer;
    let router =
        routes()
            .fallback(errors::no_route)
            .with_state(state)
            .layer(DefaultBodyLimit::max(body_limit))
            .layer(CatchPanicLayer::custom(
                |_panic: Box<dyn std::any::Any + Send>| {
                    ApiError::internal("the server hit an internal fault handling this request")
                        .into_response()
                },
            ))
            .layer(middleware::from_fn(errors::render_errors))
            .layer(middleware::from_fn(response_headers))
            .layer(middleware::from_fn(context::map_context))
            .layer(TraceLayer::new_for_http().on_request(()).on_response(
                tower_http::trace::DefaultOnResponse::new().level(tracing::Level::INFO),
            ));
    axum::ServiceExt::<Request>::into_make_service(
        tower_http::normalize_path::NormalizePathLayer::trim_trailing_slash().layer(router),
    )
}

/// Adds `x-request-id` (echoed or generated) and `phalanx-version` to every answer.
async fn response_headers(request: Request, next: Next) -> Response {
    let request_id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        headers.insert(HeaderName::from_static("x-request-id"), v);
    }
    headers.insert(
        HeaderName::from_static("phalanx-version"),
        HeaderValue::from_static(PHALANX_VERSION),
    );
    response
}

/// A JSON answer (its `context` is filled by `context::map_context`).
/// An upstream response model (or error) as a JSON answer.
pub fn answer<T: serde::Serialize>(result: Result<T, impl Into<ApiError>>) -> ApiResult<Response> {
    respond(result.map_err(Into::into)?)
}

/// An upstream response model as a JSON answer.
pub fn respond<T: serde::Serialize>(value: T) -> ApiResult<Response> {
    Ok(reply(to_json(value)?))
}

pub fn to_json<T: serde::Serialize>(value: T) -> ApiResult<Value> {
    serde_json::to_value(value).map_err(|e| ApiError::internal(e.to_string()))
}

pub fn reply(body: Value) -> Response {
    axum::Json(body).into_response()
}
