//! What every request goes through before its handler, in the order it goes through it:
//!
//! 1. [`observe`]: the request's span and id, its metrics, a panic turned into a 500.
//! 2. [`overload`]: whole-server admission (in-flight bound, body memory) on arrival; after
//!    authentication, the tenant's in-flight bound and a fair run slot ([`fair`]).
//! 3. [`context`]: spec 2.3 `context` entries as headers, and back into JSON answers.
//! 4. [`auth`]: the credential, checked, becomes the request's [`auth::Caller`]; each route
//!    then checks the caller's role.
//! 5. [`extract`]: what handlers take from the request: the target table or namespace (with
//!    the caller's catalog), query parameters, JSON bodies.
//! 6. [`fair`]: the run slots shared between tenants.
//! 7. [`body`]: why a body could not be read, as the client is told.
//!
//! Imports run one way, towards the bottom of the request path: `overload` and `extract` use
//! `auth` (the caller's tenant); `overload` uses `fair`; `auth`, `context`, `extract` and
//! `overload` use `body`; `observe`, `fair` and `body` use none of the others.
//!
//! [`Pipeline::run`] puts the stages together, outermost first, in one function: each stage is
//! an `async fn(.., request, next)` that calls `next` with the request it passes on, so the
//! whole path is one future with no box or service clone per stage (as axum's `from_fn`
//! layers cost: a boxed clone of the stack below and a boxed future, per stage and request).
//! Error rendering (`http::errors`) wraps the stages; only the role guard sits on the routes.

pub mod auth;
pub mod body;
pub mod context;
pub mod extract;
pub mod fair;
pub mod observe;
pub mod overload;

use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;
use futures::FutureExt;
use futures::future::BoxFuture;
use tower::ServiceExt;

use crate::http::AppState;

/// The stages around the router, as one service.
#[derive(Clone)]
pub struct Pipeline<R> {
    app: AppState,
    names: Arc<observe::RouteNames>,
    body_timeout: Duration,
    router: R,
}

impl<R> Pipeline<R> {
    pub fn new(
        app: AppState,
        names: Arc<observe::RouteNames>,
        body_timeout: Duration,
        router: R,
    ) -> Self {
        Self {
            app,
            names,
            body_timeout,
            router,
        }
    }
}

impl<R> Pipeline<R>
where
    R: tower::Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    R::Future: Send,
{
    /// The request's way to the router and its answer's way back, outermost stage first.
    async fn run(self, request: Request) -> Response {
        let Self {
            app,
            names,
            body_timeout,
            router,
        } = self;
        let app = &app;
        observe::record_metrics(app, &names, request, |request| async move {
            // Outside the context mapping too, for answers made before it (overload refusals).
            with_version(
                crate::http::errors::render_errors(request, |request| async move {
                    let request = request.map(|body| {
                        Body::new(tower_http::timeout::TimeoutBody::new(body_timeout, body))
                    });
                    overload::admit_request(app, request, |request| {
                        context::map_context(request, |request| async move {
                            // Inside the context mapping, so JSON answers mirror it into
                            // `context`.
                            with_version(
                                auth::authenticate(app, request, |request| {
                                    overload::admit_tenant(app, request, |request| {
                                        caught(
                                            app,
                                            observe::inject_faults(app, request, |r| {
                                                router.oneshot(r).map(|answer| match answer {
                                                    Ok(response) => response,
                                                    Err(never) => match never {},
                                                })
                                            }),
                                        )
                                    })
                                })
                                .await,
                            )
                        })
                    })
                    .await
                })
                .await,
            )
        })
        .await
    }
}

impl<R> tower::Service<Request> for Pipeline<R>
where
    R: tower::Service<Request, Response = Response, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    R::Future: Send,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let pipeline = self.clone();
        Box::pin(pipeline.run(request).map(Ok))
    }
}

/// Adds `phalanx-version` to an answer.
fn with_version(mut response: Response) -> Response {
    response.headers_mut().insert(
        HeaderName::from_static("phalanx-version"),
        HeaderValue::from_static(crate::http::PHALANX_VERSION),
    );
    response
}

/// The handler's answer, or a 500 in the spec's shape when it panicked (the panic hook has
/// logged where, in the request's span).
async fn caught(app: &AppState, handler: impl Future<Output = Response>) -> Response {
    match AssertUnwindSafe(handler).catch_unwind().await {
        Ok(response) => response,
        Err(panic) => observe::panicked(app, panic),
    }
}
