//! `/v1/namespace/{id}/...`: namespace CRUD and table listing, on the DirectoryNamespace catalog.

use axum::extract::State;
use axum::response::Response;
use lance_namespace::models::{
    CreateNamespaceRequest, DescribeNamespaceRequest, DropNamespaceRequest, DropTableRequest,
    ListNamespacesRequest, ListTablesRequest, NamespaceExistsRequest,
};
use serde_json::{Value, json};

use super::extract::{JsonBody, Target, page};
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};

/// Deserialize a body into an upstream request model with the path's id. `context` and
/// `identity` are the HTTP layer's business and are not passed down.
pub(super) fn model<T: serde::de::DeserializeOwned>(
    target: &Target,
    mut body: Value,
) -> ApiResult<T> {
    if !body.is_object() {
        return Err(ApiError::invalid("the request body must be a JSON object"));
    }
    let body_id: Option<Vec<String>> = body
        .get("id")
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    target.check_body_id(&body_id)?;
    let map = body.as_object_mut().unwrap();
    map.insert("id".into(), json!(target.id));
    map.remove("context");
    map.remove("identity");
    serde_json::from_value(body)
        .map_err(|e| ApiError::invalid(format!("invalid request body: {e}")))
}

pub(super) fn to_json<T: serde::Serialize>(value: T) -> ApiResult<Value> {
    serde_json::to_value(value).map_err(|e| ApiError::internal(e.to_string()))
}

pub async fn create(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<Response> {
    let request: CreateNamespaceRequest = model(&target, body)?;
    let response = app
        .catalog
        .ns()
        .create_namespace(request)
        .await
        .map_err(ApiError::from)?;
    Ok(reply(to_json(response)?))
}

pub async fn list(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<Response> {
    let mut request: ListNamespacesRequest = model(&target, body)?;
    let (limit, token) = page(
        &target.params,
        request.limit.map(i64::from),
        request.page_token.take(),
    )?;
    request.limit = limit.map(|l| l as i32);
    request.page_token = token;
    let response = app
        .catalog
        .ns()
        .list_namespaces(request)
        .await
        .map_err(ApiError::from)?;
    Ok(reply(to_json(response)?))
}

pub async fn describe(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<Response> {
    let request: DescribeNamespaceRequest = model(&target, body)?;
    let response = app
        .catalog
        .ns()
        .describe_namespace(request)
        .await
        .map_err(ApiError::from)?;
    Ok(reply(to_json(response)?))
}

pub async fn exists(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<Response> {
    let request: NamespaceExistsRequest = model(&target, body)?;
    app.catalog
        .ns()
        .namespace_exists(request)
        .await
        .map_err(ApiError::from)?;
    Ok(reply(json!({})))
}

pub async fn drop(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<Response> {
    let request: DropNamespaceRequest = model(&target, body)?;
    if target.id.is_empty() {
        return Err(ApiError::invalid("the root namespace cannot be dropped"));
    }
    let skip_missing = request
        .mode
        .as_deref()
        .is_some_and(|m| m.eq_ignore_ascii_case("skip"));
    let cascade = request
        .behavior
        .as_deref()
        .is_some_and(|b| b.eq_ignore_ascii_case("cascade"));
    let exists = app
        .catalog
        .ns()
        .namespace_exists(NamespaceExistsRequest {
            id: Some(target.id.clone()),
            ..Default::default()
        })
        .await;
    if let Err(e) = exists {
        let e = ApiError::from(e);
        if skip_missing && e.status == axum::http::StatusCode::NOT_FOUND {
            return Ok(reply(json!({})));
        }
        return Err(e);
    }
    if cascade {
        drop_contents(&app, &target.id).await?;
    }
    let response = app
        .catalog
        .ns()
        .drop_namespace(request)
        .await
        .map_err(ApiError::from)?;
    app.catalog.invalidate_all();
    Ok(reply(to_json(response)?))
}

/// Cascade: drop every table and child namespace below `id`, deepest first.
async fn drop_contents(app: &AppState, id: &[String]) -> ApiResult<()> {
    let children = list_all_namespaces(app, id).await?;
    for child in children {
        let mut child_id = id.to_vec();
        child_id.push(child);
        Box::pin(drop_contents(app, &child_id)).await?;
        let request = DropNamespaceRequest {
            id: Some(child_id),
            ..Default::default()
        };
        app.catalog
            .ns()
            .drop_namespace(request)
            .await
            .map_err(ApiError::from)?;
    }
    let request = ListTablesRequest {
        id: Some(id.to_vec()),
        include_declared: Some(true),
        ..Default::default()
    };
    let tables = app
        .catalog
        .ns()
        .list_tables(request)
        .await
        .map_err(ApiError::from)?
        .tables;
    for table in tables {
        let mut table_id = id.to_vec();
        table_id.push(table);
        if let Ok(loc) = app.catalog.locate(&table_id).await {
            app.store.forget(&loc);
        }
        app.catalog
            .ns()
            .drop_table(DropTableRequest {
                id: Some(table_id.clone()),
                ..Default::default()
            })
            .await
            .map_err(ApiError::from)?;
        app.catalog.invalidate(&table_id);
    }
    Ok(())
}

async fn list_all_namespaces(app: &AppState, id: &[String]) -> ApiResult<Vec<String>> {
    let request = ListNamespacesRequest {
        id: Some(id.to_vec()),
        ..Default::default()
    };
    Ok(app
        .catalog
        .ns()
        .list_namespaces(request)
        .await
        .map_err(ApiError::from)?
        .namespaces)
}

pub async fn list_tables(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<Response> {
    let mut request: ListTablesRequest = model(&target, body)?;
    let (limit, token) = page(
        &target.params,
        request.limit.map(i64::from),
        request.page_token.take(),
    )?;
    request.limit = limit.map(|l| l as i32);
    request.page_token = token;
    if request.include_declared.is_none() {
        request.include_declared = target.params.bool("include_declared")?;
    }
    let response = app
        .catalog
        .ns()
        .list_tables(request)
        .await
        .map_err(ApiError::from)?;
    Ok(reply(to_json(response)?))
}
