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
//! `overload` use `body`; `observe`, `fair` and `body` use none of the others. The layers are
//! put together in `http::service`, around the router rather than inside it (each request then
//! clones no boxed layer stack); error rendering (`http::errors`) wraps them. Only the role
//! guard sits on the routes themselves.

pub mod auth;
pub mod body;
pub mod context;
pub mod extract;
pub mod fair;
pub mod observe;
pub mod overload;
