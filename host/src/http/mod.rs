//! The HTTP layer: routing, extractors, error rendering. Handlers translate requests into
//! catalog/store calls and know nothing of Wasm or of lance internals beyond the store's API.
//!
//! Every route is listed in `build()` below; find a handler from its path there.

mod admin;
mod arrow_body;
mod audited;
mod batch;
mod blobs;
mod branch_merge;
mod branches;
mod clone;
mod columns;
mod console;
mod data;
pub mod errors;
mod functions;
pub use pipeline::extract::Target;
mod indexes;
mod jobs;
mod json_rows;
mod lsm;
mod metadata;
mod models;
mod multipart;
mod namespaces;
pub mod openapi;
mod own_task;
pub mod pipeline;
pub use pipeline::observe::{ServedTenant, install_panic_hook};
mod materialized_views;
mod query;
mod query_body;
mod secrets;
mod table_versions;
mod tables;
mod transactions;
mod upkeep;
mod vend;
mod versions;
mod views;
mod whoami;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::handler::Handler;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use serde_json::Value;
use tower_http::trace::TraceLayer;

use crate::App;
use crate::auth::Role;
use crate::error::{ApiError, ApiResult};

pub type AppState = Arc<App>;

/// The version the lancedb SDK reads from `phalanx-version` to decide which request shapes
/// the server understands (0.3: structured full-text queries, multivector; 0.4: multipart
/// writes).
pub const PHALANX_VERSION: &str = "0.5.0";

/// One row of the route table: method, path, the role it needs, and what the request carries
/// (body kind and schema, query parameters) and the answer is, for `/v1/openapi.json`. Every
/// `/v1` route is added through [`Routes`], so none can skip the credential check or the role
/// guard; the auth tests iterate over [`route_table`].
#[derive(Debug, Clone)]
pub struct RouteInfo {
    pub method: &'static str,
    pub path: &'static str,
    pub role: Role,
    pub doc: openapi::Operation,
}

struct Routes {
    router: Router<AppState>,
    table: Vec<RouteInfo>,
    /// The rows the last `add` made (one per method), which `params`/`answers` amend.
    last: std::ops::Range<usize>,
}

impl Routes {
    fn add(
        mut self,
        methods: &[&'static str],
        path: &'static str,
        role: Role,
        handler: MethodRouter<AppState>,
        doc: openapi::Operation,
    ) -> Self {
        // Writes to a table tell the upkeep scheduler to watch it (not those that remove or
        // move it: there is nothing left to keep up at that id).
        let handler = if role != Role::Read
            && path.starts_with("/v1/table/{id}/")
            && !["/drop", "/deregister", "/rename"]
                .iter()
                .any(|s| path.ends_with(s))
        {
            handler.route_layer(middleware::from_fn(upkeep::note_writes))
        } else {
            handler
        };
        let guarded = handler.route_layer(pipeline::auth::Require(role));
        // Outside the role guard, so refusals are audited too.
        let guarded = if role == Role::Read {
            guarded
        } else {
            guarded.route_layer(middleware::from_fn(audited::guard))
        };
        self.router = self.router.route(path, guarded);
        let first = self.table.len();
        self.table.extend(methods.iter().map(|&method| RouteInfo {
            method,
            path,
            role,
            doc: doc.clone(),
        }));
        self.last = first..self.table.len();
        self
    }
    fn post<H: Handler<T, AppState> + openapi::Describe<T>, T: 'static>(
        self,
        path: &'static str,
        role: Role,
        h: H,
    ) -> Self {
        self.add(
            &["POST"],
            path,
            role,
            post(h),
            openapi::Operation::of::<H, T>(),
        )
    }
    fn get<H: Handler<T, AppState> + openapi::Describe<T>, T: 'static>(
        self,
        path: &'static str,
        role: Role,
        h: H,
    ) -> Self {
        self.add(
            &["GET"],
            path,
            role,
            get(h),
            openapi::Operation::of::<H, T>(),
        )
    }
    fn get_post<H: Handler<T, AppState> + openapi::Describe<T> + Clone, T: 'static>(
        self,
        path: &'static str,
        role: Role,
        h: H,
    ) -> Self {
        let doc = openapi::Operation::of::<H, T>();
        self.add(&["GET", "POST"], path, role, get(h.clone()).post(h), doc)
    }
    /// The query parameters the last route's handler reads (besides `delimiter`).
    fn params(mut self, params: &[openapi::Param]) -> Self {
        for row in &mut self.table[self.last.clone()] {
            for p in params {
                row.doc.add_param(*p);
            }
        }
        self
    }
    /// The last route's success answer, when it is not a JSON object.
    fn answers(mut self, answer: openapi::Answer) -> Self {
        for row in &mut self.table[self.last.clone()] {
            row.doc.answer = answer;
        }
        self
    }
}

fn build() -> Routes {
    use Role::{Admin, Operator, Read, Write};
    use openapi::Answer;
    use openapi::params::*;
    Routes {
        router: Router::new().route("/healthz", get(|| async { "ok" })),
        table: Vec::new(),
        last: 0..0,
    }
    .get("/v1/openapi.json", Read, openapi::serve)
    .get("/v1/whoami", Read, whoami::whoami)
    // Namespaces
    .post("/v1/namespace/{id}/create", Admin, namespaces::create)
    .params(&[NAMESPACE_MODE])
    .get_post("/v1/namespace/{id}/list", Read, namespaces::list)
    .params(&[LIMIT, PAGE_TOKEN])
    .post("/v1/namespace/{id}/describe", Read, namespaces::describe)
    .post("/v1/namespace/{id}/drop", Admin, namespaces::drop)
    .post("/v1/namespace/{id}/exists", Read, namespaces::exists)
    .get_post(
        "/v1/namespace/{id}/table/list",
        Read,
        namespaces::list_tables,
    )
    .params(&[LIMIT, PAGE_TOKEN, INCLUDE_DECLARED])
    // Materialized views
    .post(
        "/v1/materialized_view/{id}/create",
        Write,
        materialized_views::create,
    )
    .answers(Answer::Started)
    .post(
        "/v1/materialized_view/{id}/describe",
        Read,
        materialized_views::describe,
    )
    .post(
        "/v1/materialized_view/{id}/refresh",
        Write,
        materialized_views::refresh,
    )
    .answers(Answer::Started)
    .post(
        "/v1/materialized_view/{id}/drop",
        Write,
        materialized_views::drop,
    )
    .get(
        "/v1/namespace/{id}/materialized_view/list",
        Read,
        materialized_views::list,
    )
    .params(&[LIMIT, PAGE_TOKEN])
    // Views (named queries)
    .post("/v1/view/{id}/create", Write, views::create)
    .post("/v1/view/{id}/describe", Read, views::describe)
    .post("/v1/view/{id}/drop", Write, views::drop)
    .get("/v1/namespace/{id}/view/list", Read, views::list)
    .params(&[LIMIT, PAGE_TOKEN])
    // Tables: catalog
    .get("/v1/table", Read, tables::list_all)
    .params(&[LIMIT, PAGE_TOKEN, INCLUDE_DECLARED, DELIMITER])
    .post("/v1/table/{id}/create", Write, tables::create)
    .params(&[CREATE_MODE, PROPERTIES, STORAGE_OPTIONS])
    .post("/v1/table/{id}/declare", Write, tables::declare)
    .post("/v1/table/{id}/describe", Read, tables::describe)
    .params(&[VERSION, BRANCH])
    .post("/v1/table/{id}/exists", Read, tables::exists)
    .params(&[VERSION, BRANCH])
    .post("/v1/table/{id}/drop", Write, tables::drop)
    .post("/v1/table/{id}/deregister", Admin, tables::deregister)
    .post("/v1/table/{id}/register", Admin, tables::register)
    .post("/v1/table/{id}/rename", Write, tables::rename)
    .post("/v1/table/{id}/clone", Write, clone::clone)
    .post("/v1/table/{id}/stats", Read, tables::stats)
    .params(&[BRANCH])
    .post("/v1/table/batch-commit", Admin, batch::commit)
    // Extended deployment (spec 4.16)
    .get("/v1/tables", Read, tables::list_database)
    .params(&[LIMIT, PAGE_TOKEN, INCLUDE_DECLARED])
    .post("/v1/tables/{id}", Write, tables::create)
    .params(&[CREATE_MODE, PROPERTIES, STORAGE_OPTIONS])
    // Tables: data
    .post("/v1/table/{id}/insert", Write, data::insert)
    .params(&[INSERT_MODE, BRANCH, UPLOAD_ID, UPLOAD_PART_ID])
    .post(
        "/v1/table/{id}/multipart_write/create",
        Write,
        multipart::create,
    )
    .params(&[BRANCH])
    .post(
        "/v1/table/{id}/multipart_write/complete",
        Write,
        multipart::complete,
    )
    .params(&[UPLOAD_ID_REQUIRED, BRANCH])
    .post(
        "/v1/table/{id}/multipart_write/abort",
        Write,
        multipart::abort,
    )
    .params(&[UPLOAD_ID_REQUIRED, BRANCH])
    .post("/v1/table/{id}/merge_insert", Write, data::merge_insert)
    .params(&[
        ON,
        WHEN_MATCHED_UPDATE_ALL,
        WHEN_MATCHED_UPDATE_ALL_FILT,
        WHEN_NOT_MATCHED_INSERT_ALL,
        WHEN_NOT_MATCHED_BY_SOURCE_DELETE,
        WHEN_NOT_MATCHED_BY_SOURCE_DELETE_FILT,
        TIMEOUT,
        USE_INDEX,
        USE_LSM,
        BRANCH,
    ])
    // Tables: LSM writes (lance's MemWAL)
    .post("/v1/table/{id}/set_lsm_write_spec", Write, lsm::set_spec)
    .post(
        "/v1/table/{id}/unset_lsm_write_spec",
        Write,
        lsm::unset_spec,
    )
    .post("/v1/table/{id}/get_lsm_write_spec", Read, lsm::get_spec)
    .post("/v1/table/{id}/flush_lsm", Write, lsm::flush)
    .post("/v1/table/{id}/compact_lsm", Write, lsm::compact)
    .post("/v1/table/{id}/get_lsm_stats", Read, lsm::stats)
    .post(
        "/v1/table/{id}/close_lsm_writers",
        Write,
        lsm::close_writers,
    )
    .post("/v1/table/{id}/update", Write, data::update)
    .params(&[BRANCH])
    .post("/v1/table/{id}/delete", Write, data::delete)
    .params(&[BRANCH])
    .post("/v1/table/{id}/count_rows", Read, data::count_rows)
    .params(&[VERSION, BRANCH])
    .answers(Answer::Count)
    .post("/v1/table/{id}/query", Read, query::query)
    .params(&[VERSION, BRANCH])
    .answers(Answer::Arrow)
    .post("/v1/table/{id}/explain_plan", Read, query::explain_plan)
    .params(&[VERSION, BRANCH])
    .answers(Answer::ObjectOrString)
    .post("/v1/table/{id}/analyze_plan", Read, query::analyze_plan)
    .params(&[VERSION, BRANCH])
    .answers(Answer::ObjectOrString)
    // Tables: indexes
    .post("/v1/table/{id}/create_index", Write, indexes::create)
    .params(&[BRANCH])
    .post(
        "/v1/table/{id}/create_scalar_index",
        Write,
        indexes::create_scalar,
    )
    .params(&[BRANCH])
    .post("/v1/table/{id}/index/list", Read, indexes::list)
    .params(&[VERSION, BRANCH, LIMIT, PAGE_TOKEN])
    .post(
        "/v1/table/{id}/index/{index_name}/stats",
        Read,
        indexes::stats,
    )
    .params(&[VERSION, BRANCH])
    .post(
        "/v1/table/{id}/index/{index_name}/drop",
        Write,
        indexes::drop,
    )
    .params(&[BRANCH])
    .post(
        "/v1/table/{id}/index/{index_name}/prewarm",
        Read,
        indexes::prewarm_index,
    )
    .params(&[VERSION, BRANCH])
    .post(
        "/v1/table/{id}/page_cache/prewarm",
        Read,
        indexes::prewarm_pages,
    )
    .params(&[VERSION, BRANCH])
    .post("/v1/table/{id}/errors", Read, jobs::row_errors)
    .params(&[BRANCH])
    // Tables: blobs
    .post("/v1/table/{id}/fetch_blobs", Read, blobs::fetch)
    .params(&[VERSION, BRANCH])
    .answers(Answer::ArrowStream)
    .get(
        "/v1/table/{id}/blob/{column}/{row_id}/bytes",
        Read,
        blobs::bytes,
    )
    .params(&[VERSION, BRANCH, RANGE])
    .answers(Answer::Bytes)
    // Tables: schema
    .post("/v1/table/{id}/add_columns", Write, columns::add)
    .params(&[BRANCH])
    .post("/v1/table/{id}/alter_columns", Write, columns::alter)
    .params(&[BRANCH])
    .post("/v1/table/{id}/drop_columns", Write, columns::drop)
    .params(&[BRANCH])
    .post(
        "/v1/table/{id}/schema_metadata/update",
        Write,
        metadata::update_schema_metadata,
    )
    .params(&[BRANCH])
    .post(
        "/v1/table/{id}/update_field_metadata",
        Write,
        metadata::update_field_metadata,
    )
    .params(&[BRANCH])
    // Tables: history
    .post("/v1/table/{id}/version/list", Read, versions::list)
    .params(&[BRANCH, LIMIT, PAGE_TOKEN, DESCENDING])
    .post("/v1/table/{id}/version/describe", Read, versions::describe)
    .params(&[VERSION, BRANCH])
    .post(
        "/v1/table/{id}/version/create",
        Write,
        table_versions::create,
    )
    .post(
        "/v1/table/{id}/version/delete",
        Write,
        table_versions::delete,
    )
    .post(
        "/v1/table/version/batch-create",
        Write,
        table_versions::batch_create,
    )
    .post("/v1/table/{id}/restore", Write, versions::restore)
    .params(&[BRANCH])
    .post("/v1/table/{id}/tags/list", Read, versions::list_tags)
    .params(&[LIMIT, PAGE_TOKEN])
    .post("/v1/table/{id}/tags/version", Read, versions::tag_version)
    .post("/v1/table/{id}/tags/create", Write, versions::create_tag)
    .params(&[BRANCH])
    .post("/v1/table/{id}/tags/delete", Write, versions::delete_tag)
    .post("/v1/table/{id}/tags/update", Write, versions::update_tag)
    .params(&[BRANCH])
    .post("/v1/table/{id}/branches/create", Write, branches::create)
    .post("/v1/table/{id}/branches/list", Read, branches::list)
    .params(&[LIMIT, PAGE_TOKEN])
    .post("/v1/table/{id}/branches/delete", Write, branches::delete)
    .post("/v1/table/{id}/branches/diff", Read, branch_merge::diff)
    .post(
        "/v1/table/{id}/branches/cherry_pick",
        Write,
        branch_merge::cherry_pick,
    )
    // Jobs
    .post(
        "/v1/table/{id}/backfill_column",
        Write,
        jobs::backfill_column,
    )
    .params(&[BRANCH])
    .answers(Answer::Accepted)
    .post("/v1/table/{id}/optimize", Write, upkeep::optimize)
    .params(&[BRANCH])
    .post(
        "/v1/transaction/{id}/describe",
        Read,
        transactions::describe,
    )
    .post("/v1/transaction/{id}/alter", Write, transactions::alter)
    .post("/v1/jobs/describe", Read, jobs::describe)
    .get_post("/v1/jobs/list", Read, jobs::list)
    .params(&[LIMIT, PAGE_TOKEN, TABLE_ID, JOB_STATE, DELIMITER])
    .post("/v1/jobs/cancel", Write, jobs::cancel)
    .post("/v1/jobs/pause", Write, jobs::pause)
    .post("/v1/jobs/resume", Write, jobs::resume)
    .post("/v1/jobs/query_events", Read, jobs::query_events)
    .answers(Answer::ArrowStream)
    // Functions and secrets (lancedb's registry)
    // Embedding models (Lancet's own; per tenant)
    .post("/v1/model/file", Write, models::upload_file)
    .get("/v1/model/list", Read, models::list)
    .post("/v1/model/{name}/create", Write, models::create)
    .post("/v1/model/{name}/describe", Read, models::describe)
    .post("/v1/model/{name}/drop", Write, models::drop)
    .post("/v1/model/{name}/embed", Read, models::embed)
    .post("/v1/function/{id}/create", Write, functions::create)
    .post("/v1/function/{id}/describe", Read, functions::describe)
    .post("/v1/function/{id}/drop", Write, functions::drop)
    .get_post("/v1/namespace/{id}/function/list", Read, functions::list)
    .params(&[LIMIT, PAGE_TOKEN, INCLUDE_DEFINITION])
    .post("/v1/secret/{id}/create", Write, secrets::create)
    .post("/v1/secret/{id}/alter", Write, secrets::alter)
    .post("/v1/secret/{id}/describe", Read, secrets::describe)
    .post("/v1/secret/{id}/drop", Write, secrets::drop)
    .get_post("/v1/namespace/{id}/secret/list", Read, secrets::list)
    .params(&[LIMIT, PAGE_TOKEN])
    // A tenant's own: its quota, its keys (its admins), its audit records
    .get("/v1/tenant", Read, admin::tenant_self)
    .get("/v1/tenant/keys", Admin, admin::tenant_keys)
    .post("/v1/tenant/keys/create", Admin, admin::tenant_create_key)
    .post(
        "/v1/tenant/keys/{key_id}/rotate",
        Admin,
        admin::tenant_rotate_key,
    )
    .post(
        "/v1/tenant/keys/{key_id}/revoke",
        Admin,
        admin::tenant_revoke_key,
    )
    .get("/v1/tenant/usage", Read, admin::tenant_usage)
    .params(&[AUDIT_SINCE, AUDIT_UNTIL, USAGE_FORMAT])
    .get("/v1/tenant/audit", Admin, admin::tenant_audit)
    .params(&[
        AUDIT_PRINCIPAL,
        AUDIT_ACTION,
        AUDIT_SINCE,
        AUDIT_UNTIL,
        LIMIT,
    ])
    // The operator's (hosting many tenants; docs/hosting.md)
    .get("/v1/admin/whoami", Operator, admin::whoami)
    .get("/v1/admin/tenants", Operator, admin::list_tenants)
    .get(
        "/v1/admin/tenants/{tenant}",
        Operator,
        admin::describe_tenant,
    )
    .post(
        "/v1/admin/tenants/{tenant}/create",
        Operator,
        admin::create_tenant,
    )
    .post(
        "/v1/admin/tenants/{tenant}/update",
        Operator,
        admin::update_tenant,
    )
    .post(
        "/v1/admin/tenants/{tenant}/suspend",
        Operator,
        admin::suspend_tenant,
    )
    .post(
        "/v1/admin/tenants/{tenant}/resume",
        Operator,
        admin::resume_tenant,
    )
    .post(
        "/v1/admin/tenants/{tenant}/delete",
        Operator,
        admin::delete_tenant,
    )
    .get(
        "/v1/admin/tenants/{tenant}/keys",
        Operator,
        admin::list_keys,
    )
    .post(
        "/v1/admin/tenants/{tenant}/keys/create",
        Operator,
        admin::create_key,
    )
    .post(
        "/v1/admin/keys/{key_id}/rotate",
        Operator,
        admin::rotate_key,
    )
    .post(
        "/v1/admin/keys/{key_id}/revoke",
        Operator,
        admin::revoke_key,
    )
    .get("/v1/admin/audit", Operator, admin::audit)
    .params(&[
        AUDIT_TENANT,
        AUDIT_PRINCIPAL,
        AUDIT_ACTION,
        AUDIT_SINCE,
        AUDIT_UNTIL,
        LIMIT,
    ])
    .get("/v1/admin/audit/verify", Operator, admin::audit_verify)
    .get("/v1/admin/usage", Operator, admin::usage)
    .params(&[AUDIT_TENANT, AUDIT_SINCE, AUDIT_UNTIL, USAGE_FORMAT])
}

/// Every `/v1` route: method, path, role needed, request and answer (see [`openapi`]).
pub fn route_table() -> Vec<RouteInfo> {
    build().table
}

/// The whole server as one service, for the accept loop.
pub type Service = tower::util::BoxCloneSyncService<Request, Response, std::convert::Infallible>;

/// The full service: trailing slashes ignored, request id, tracing span (tower-http layers),
/// then the request pipeline's stages ([`pipeline::Pipeline`]: metrics, error rendering,
/// admission, context mapping, credentials, per-tenant admission and fair run slots, panics,
/// fault injection), then the router, whose routes add the role guard.
///
/// All of it wraps the router from outside rather than through `Router::layer`, which boxes
/// every layer around every route and clones the boxed services below on each call (a dozen
/// layers made ~80 allocations per request). A request pays for one box, at the top.
pub fn service(state: AppState, body_limit: usize, body_timeout: std::time::Duration) -> Service {
    use tower::{ServiceBuilder, ServiceExt as _};
    use tower_http::request_id::{PropagateRequestIdLayer, SetRequestIdLayer};
    let built = build();
    let mut routes = built.router.route("/metrics", get(metrics));
    let mut names: Vec<&'static str> = built.table.iter().map(|r| r.path).collect();
    names.extend(["/healthz", "/metrics"]);
    if state.console {
        routes = routes
            .route("/", get(console::root))
            .route("/console", get(console::index))
            .route("/console/{*path}", get(console::file));
        names.extend(["/", "/console", "/console/{*path}"]);
    }
    let router = routes.fallback(errors::no_route).with_state(state.clone());
    let names = Arc::new(pipeline::observe::RouteNames::new(names));
    // Below the stages: the body limit for extractors, and the state for middleware that is
    // not given it (`upkeep::note_writes`).
    let router = ServiceBuilder::new()
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::Extension(state.clone()))
        .service(router);
    let stack = ServiceBuilder::new()
        .layer(tower_http::normalize_path::NormalizePathLayer::trim_trailing_slash())
        .layer(SetRequestIdLayer::x_request_id(
            pipeline::observe::MakeRequestId,
        ))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(pipeline::observe::request_span)
                .on_request(())
                // A line per request only when asked for (`--access-log`); `debug` otherwise,
                // so `LANCET_LOG=tower_http=debug` still shows them.
                .on_response(tower_http::trace::DefaultOnResponse::new().level(
                    if state.access_log {
                        tracing::Level::INFO
                    } else {
                        tracing::Level::DEBUG
                    },
                )),
        )
        .layer(PropagateRequestIdLayer::x_request_id())
        .service(pipeline::Pipeline::new(state, names, body_timeout, router))
        .map_response(IntoResponse::into_response);
    Service::new(stack)
}

/// `GET /metrics`: Prometheus text. Loopback clients need no credential; others need
/// `--metrics-token` as a bearer token (and are refused when none is configured), since the
/// figures name every tenant.
async fn metrics(
    axum::extract::State(app): axum::extract::State<AppState>,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    headers: axum::http::HeaderMap,
) -> Response {
    let loopback = peer.is_some_and(|p| p.0.0.ip().is_loopback());
    let token_ok = app.metrics_token.as_deref().is_some_and(|token| {
        headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| given.as_bytes() == token.as_bytes())
    });
    if !loopback && !token_ok {
        return pipeline::auth::unauthorized(
            "/metrics needs the metrics token (--metrics-token) from a non-loopback address",
        )
        .into_response();
    }
    let body = app.metrics.render(&app);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

/// A JSON answer (its `context` is filled by `pipeline::context::map_context`).
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
