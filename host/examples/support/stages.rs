//! `--bare-stages LIST` (repeatable): bare from the store behind only the named ones of
//! Lancet's request stages, so one run can add them one at a time and show what each costs
//! (`--bare-staged` puts them all around bare at once). LIST is comma-separated, from
//! `outer` (the tower-http layers: trailing slash, request id, span; or one of them:
//! `normalize`, `request-id` (set and propagated), `trace`), `metrics`, `errors`
//! (error rendering and the version header), `admit` (whole-server admission), `context`,
//! `auth` (the credential and the tenant's catalog), `tenant` (the tenant's in-flight bound
//! and its run slot; needs `auth`, without which no tenant is known) and `caught` (the panic
//! guard); `all` names every one. They nest in the order `Pipeline::run` nests them. An
//! entry `OPTION=VALUE` builds that path's server state with `--OPTION VALUE` (e.g.
//! `max-running=8`).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use lancet::http::pipeline::{auth, context, observe, overload};
use tower::ServiceExt;

const ALL: [&str; 8] = [
    "outer", "metrics", "errors", "admit", "context", "auth", "tenant", "caught",
];

/// The parts of `outer`, each also a stage of its own.
const OUTER: [&str; 3] = ["normalize", "request-id", "trace"];

/// Which stages are on.
#[derive(Clone, Copy, Default)]
struct On {
    metrics: bool,
    errors: bool,
    admit: bool,
    context: bool,
    auth: bool,
    tenant: bool,
    caught: bool,
}

/// The `--bare-stages` lists given, each with the stages it names (checked).
pub fn lists() -> Vec<(String, Vec<&'static str>)> {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .filter(|w| w[0] == "--bare-stages")
        .map(|w| {
            let names = w[1]
                .split(',')
                .filter(|name| !name.contains('='))
                .flat_map(|name| match name {
                    "all" => ALL.to_vec(),
                    _ => vec![
                        *ALL.iter()
                            .chain(&OUTER)
                            .find(|known| **known == name)
                            .unwrap_or_else(|| panic!("unknown stage {name}; known: {ALL:?}")),
                    ],
                })
                .collect();
            (w[1].clone(), names)
        })
        .collect()
}

/// Bare from the store at `location` behind the stages in `names`.
pub async fn service(
    data: &str,
    location: String,
    list: &str,
    names: &[&str],
) -> lancet::http::Service {
    let options = list
        .split(',')
        .filter_map(|entry| entry.split_once('='))
        .flat_map(|(option, value)| [format!("--{option}"), value.to_string()])
        .collect::<Vec<_>>();
    let app = crate::app_with(data, &options).await;
    let on = |name| names.contains(&name);
    let stages = On {
        metrics: on("metrics"),
        errors: on("errors"),
        admit: on("admit"),
        context: on("context"),
        auth: on("auth"),
        tenant: on("tenant"),
        caught: on("caught"),
    };
    let bare = crate::bare::service_on(crate::bare::Source::Store(app.clone(), location));
    let routes = observe::RouteNames::new(["/v1/table/{id}/query", "/v1/table/{id}/count_rows"]);
    let staged = Staged {
        app,
        routes: Arc::new(routes),
        on: stages,
        inner: bare,
    };
    use tower::ServiceExt as _;
    use tower_http::normalize_path::NormalizePathLayer;
    use tower_http::request_id::{PropagateRequestIdLayer, SetRequestIdLayer};
    let trace = || {
        tower_http::trace::TraceLayer::new_for_http()
            .make_span_with(observe::request_span)
            .on_request(())
            .on_response(tower_http::trace::DefaultOnResponse::new().level(tracing::Level::DEBUG))
    };
    let builder = tower::ServiceBuilder::new;
    if on("outer") {
        // As `lancet::http::service` puts them around the stages.
        let stack = builder()
            .layer(NormalizePathLayer::trim_trailing_slash())
            .layer(SetRequestIdLayer::x_request_id(observe::MakeRequestId))
            .layer(trace())
            .layer(PropagateRequestIdLayer::x_request_id())
            .service(staged)
            .map_response(IntoResponse::into_response);
        return lancet::http::Service::new(stack);
    }
    let mut service = lancet::http::Service::new(staged);
    if on("normalize") {
        service = lancet::http::Service::new(
            builder()
                .layer(NormalizePathLayer::trim_trailing_slash())
                .service(service),
        );
    }
    if on("request-id") {
        service = lancet::http::Service::new(
            builder()
                .layer(SetRequestIdLayer::x_request_id(observe::MakeRequestId))
                .layer(PropagateRequestIdLayer::x_request_id())
                .service(service),
        );
    }
    if on("trace") {
        service = lancet::http::Service::new(
            builder()
                .layer(trace())
                .service(service)
                .map_response(IntoResponse::into_response),
        );
    }
    service
}

#[derive(Clone)]
struct Staged {
    app: Arc<lancet::App>,
    routes: Arc<observe::RouteNames>,
    on: On,
    inner: lancet::http::Service,
}

impl tower::Service<Request> for Staged {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let staged = self.clone();
        Box::pin(async move { Ok(staged.run(request).await) })
    }
}

impl Staged {
    /// `Pipeline::run`'s nesting, each stage skipped when off.
    async fn run(self, request: Request) -> Response {
        let Self {
            app,
            routes,
            on,
            inner,
        } = self;
        let app = &app;
        let leaf = |r: Request| async move {
            let answer = inner.oneshot(r).map(|a| match a {
                Ok(response) => response,
                Err(never) => match never {},
            });
            match on.caught {
                true => match std::panic::AssertUnwindSafe(answer).catch_unwind().await {
                    Ok(response) => response,
                    Err(panic) => observe::panicked(app, panic),
                },
                false => answer.await,
            }
        };
        let tenant = |r: Request| async move {
            match on.tenant {
                true => overload::admit_tenant(app, r, leaf).await,
                false => leaf(r).await,
            }
        };
        let authed = |r: Request| async move {
            match on.auth {
                true => auth::authenticate(app, r, tenant).await,
                false => tenant(r).await,
            }
        };
        let context = |r: Request| async move {
            match on.context {
                true => context::map_context(r, authed).await,
                false => authed(r).await,
            }
        };
        let admitted = |r: Request| async move {
            let r = r.map(|body| {
                axum::body::Body::new(tower_http::timeout::TimeoutBody::new(
                    Duration::from_secs(30),
                    body,
                ))
            });
            match on.admit {
                true => overload::admit_request(app, r, context).await,
                false => context(r).await,
            }
        };
        let rendered = |r: Request| async move {
            match on.errors {
                true => lancet::http::errors::render_errors(r, admitted).await,
                false => admitted(r).await,
            }
        };
        match on.metrics {
            true => observe::record_metrics(app, &routes, request, rendered).await,
            false => rendered(request).await,
        }
    }
}
