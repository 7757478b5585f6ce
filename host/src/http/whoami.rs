//! `GET /v1/whoami`: who the credential of the request is, so a client (the console) can show
//! the tenant and role and offer only what the role allows. It tells the caller nothing it
//! does not already hold: never the key, only its id.

use axum::response::Response;
use serde_json::json;

use super::pipeline::auth::Caller;
use super::reply;
use crate::error::ApiResult;

pub async fn whoami(caller: Caller) -> ApiResult<Response> {
    Ok(reply(json!({
        "tenant": caller.tenant(),
        "role": caller.grant.role,
        "scope": caller.grant.scope,
        "principal": caller.grant.principal,
        "database": caller.database,
    })))
}
