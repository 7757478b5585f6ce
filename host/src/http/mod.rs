//! The HTTP layer: routing, extractors, error rendering. Handlers translate requests into
//! catalog/store calls and know nothing of Wasm or of lance internals beyond the store's API.
//!
//! Every route is listed in [`routes`]; find a handler from its path there.

mod arrow_body;
pub mod auth;
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
mod namespaces;
mod query;
mod query_body;
mod tables;
mod versions;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::handler::Handler;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use serde_json::Value;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

use crate::App;
use crate::auth::Role;
use crate::error::{ApiError, ApiResult};

pub type AppState = Arc<App>;

/// The version the lancedb SDK reads from `phalanx-version` to decide which request shapes
/// the server understands (0.3: structured full-text queries, multivector).
pub const PHALANX_VERSION: &str = "0.3.0";

/// One row of the route table: method, path and the role it needs. Every `/v1` route is added
/// through [`Routes`], so none can skip the credential check or the role guard; the auth tests
/// iterate over [`route_table`].
#[derive(Debug, Clone)]
pub struct RouteInfo {
    pub method: &'static str,
    pub path: &'static str,
    pub role: Role,
}

struct Routes {
    router: Router<AppState>,
    table: Vec<RouteInfo>,
}

impl Routes {
    fn add(
        mut self,
        methods: &[&'static str],
        path: &'static str,
        role: Role,
        handler: MethodRouter<AppState>,
    ) -> Self {
        let guarded = handler.route_layer(middleware::from_fn_with_state(role, auth::require));
        self.router = self.router.route(path, guarded);
        self.table.extend(
            methods
                .iter()
                .map(|&method| RouteInfo { method, path, role }),
        );
        self
    }
    fn post<H: Handler<T, AppState>, T: 'static>(
        self,
        path: &'static str,
        role: Role,
        h: H,
    ) -> Self {
        self.add(&["POST"], path, role, post(h))
    }
    fn get<H: Handler<T, AppState>, T: 'static>(
        self,
        path: &'static str,
        role: Role,
        h: H,
    ) -> Self {
        self.add(&["GET"], path, role, get(h))
    }
    fn get_post<H: Handler<T, AppState> + Clone, T: 'static>(
        self,
        path: &'static str,
        role: Role,
        h: H,
    ) -> Self {
        self.add(&["GET", "POST"], path, role, get(h.clone()).post(h))
    }
}

fn build() -> Routes {
    use Role::{Admin, Read, Write};
    Routes {
        router: Router::new().route("/healthz", get(|| async { "ok" })),
        table: Vec::new(),
    }
    // Namespaces
    .post("/v1/namespace/{id}/create", Admin, namespaces::create)
    .get_post("/v1/namespace/{id}/list", Read, namespaces::list)
    .post("/v1/namespace/{id}/describe", Read, namespaces::describe)
    .post("/v1/namespace/{id}/drop", Admin, namespaces::drop)
    .post("/v1/namespace/{id}/exists", Read, namespaces::exists)
    .get_post(
        "/v1/namespace/{id}/table/list",
        Read,
        namespaces::list_tables,
    )
    // Tables: catalog
    .get("/v1/table", Read, tables::list_all)
    .post("/v1/table/{id}/create", Write, tables::create)
    .post("/v1/table/{id}/declare", Write, tables::declare)
    .post("/v1/table/{id}/describe", Read, tables::describe)
    .post("/v1/table/{id}/exists", Read, tables::exists)
    .post("/v1/table/{id}/drop", Write, tables::drop)
    .post("/v1/table/{id}/deregister", Admin, tables::deregister)
    .post("/v1/table/{id}/register", Admin, tables::register)
    .post("/v1/table/{id}/rename", Write, tables::rename)
    .post("/v1/table/{id}/stats", Read, tables::stats)
    .post("/v1/table/batch-commit", Admin, batch::commit)
    // Extended deployment (spec 4.16)
    .get("/v1/tables", Read, tables::list_all)
    .post("/v1/tables/{id}", Write, tables::create)
    // Tables: data
    .post("/v1/table/{id}/insert", Write, data::insert)
    .post("/v1/table/{id}/merge_insert", Write, data::merge_insert)
    .post("/v1/table/{id}/update", Write, data::update)
    .post("/v1/table/{id}/delete", Write, data::delete)
    .post("/v1/table/{id}/count_rows", Read, data::count_rows)
    .post("/v1/table/{id}/query", Read, query::query)
    .post("/v1/table/{id}/explain_plan", Read, query::explain_plan)
    .post("/v1/table/{id}/analyze_plan", Read, query::analyze_plan)
    // Tables: indexes
    .post("/v1/table/{id}/create_index", Write, indexes::create)
    .post(
        "/v1/table/{id}/create_scalar_index",
        Write,
        indexes::create_scalar,
    )
    .post("/v1/table/{id}/index/list", Read, indexes::list)
    .post(
        "/v1/table/{id}/index/{index_name}/stats",
        Read,
        indexes::stats,
    )
    .post(
        "/v1/table/{id}/index/{index_name}/drop",
        Write,
        indexes::drop,
    )
    // Tables: schema
    .post("/v1/table/{id}/add_columns", Write, columns::add)
    .post("/v1/table/{id}/alter_columns", Write, columns::alter)
    .post("/v1/table/{id}/drop_columns", Write, columns::drop)
    // Tables: history
    .post("/v1/table/{id}/version/list", Read, versions::list)
    .post("/v1/table/{id}/restore", Write, versions::restore)
    .post("/v1/table/{id}/tags/list", Read, versions::list_tags)
    .post("/v1/table/{id}/tags/version", Read, versions::tag_version)
    .post("/v1/table/{id}/tags/create", Write, versions::create_tag)
    .post("/v1/table/{id}/tags/delete", Write, versions::delete_tag)
    .post("/v1/table/{id}/tags/update", Write, versions::update_tag)
    .post("/v1/table/{id}/branches/create", Write, branches::create)
    .post("/v1/table/{id}/branches/list", Read, branches::list)
    .post("/v1/table/{id}/branches/delete", Write, branches::delete)
    // Jobs
    .post(
        "/v1/table/{id}/backfill_column",
        Write,
        jobs::backfill_column,
    )
    .post("/v1/jobs/describe", Read, jobs::describe)
    .get_post("/v1/jobs/list", Read, jobs::list)
    .post("/v1/jobs/cancel", Write, jobs::cancel)
}

/// Every route with its handler and role guard.
pub fn routes() -> Router<AppState> {
    build().router
}

/// Every `/v1` route: method, path, role needed.
pub fn route_table() -> Vec<RouteInfo> {
    build().table
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
            .with_state(state.clone())
            .layer(DefaultBodyLimit::max(body_limit))
            .layer(CatchPanicLayer::custom(
                |_panic: Box<dyn std::any::Any + Send>| {
                    ApiError::internal("the server hit an internal fault handling this request")
                        .into_response()
                },
            ))
            .layer(middleware::from_fn_with_state(state, auth::authenticate))
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
