//! `/v1/view/{id}/{create,describe,drop}` and `GET /v1/namespace/{id}/view/list`: named SQL
//! queries (see `crate::views::saved`).

use std::collections::HashMap;

use axum::extract::State;
use axum::response::Response;
use lance_namespace::ErrorCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::pipeline::extract::{JsonBody, Target, page, paginate};
use super::{AppState, reply, to_json};
use crate::error::{ApiError, ApiResult};
use crate::views::saved::{SavedView, SavedViews, tables_read};

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CreateBody {
    /// The defining query: one SELECT over the tenant's tables, named from the database's root
    /// (`table`, `ns.table`, `a.b.table`), wherever the view is.
    query: String,
    id: Option<Vec<String>>,
    #[allow(dead_code)]
    identity: Option<Value>,
    #[allow(dead_code)]
    context: Option<HashMap<String, Value>>,
}

fn not_found(target: &Target) -> ApiError {
    ApiError::new(
        ErrorCode::TableNotFound,
        format!("view not found: {}", target.name()),
    )
}

fn describe_json(v: &SavedView) -> Value {
    json!({
        "name": v.name,
        "namespace": v.namespace,
        "query": v.query,
        "default_database": v.default_database,
        "default_namespace": v.default_namespace,
        "schema": v.schema,
    })
}

pub async fn create(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<CreateBody>,
) -> ApiResult<Response> {
    target.check_body_id(&body.id)?;
    let Some((name, namespace)) = target.path_id.split_last() else {
        return Err(ApiError::invalid("a view needs a name"));
    };
    if body.query.trim().is_empty() {
        return Err(ApiError::invalid("a view needs a 'query'"));
    }
    // Every table the query reads must exist (and be the caller's): its schema is resolved
    // against them now.
    let mut tables = Vec::new();
    for written in tables_read(&body.query)? {
        let id = target.caller.resolve(&written)?;
        let location = target.catalog.locate(&id).await?;
        tables.push((written, location));
    }
    let schema = app.store.query_schema(&body.query, &tables).await?;
    let view = SavedView {
        id: target.id.clone(),
        name: name.clone(),
        namespace: namespace.to_vec(),
        query: body.query,
        default_database: target.caller.database.clone().unwrap_or_default(),
        default_namespace: Vec::new(),
        schema: to_json(
            lance_namespace::schema::arrow_schema_to_json(&schema).map_err(ApiError::from)?,
        )?,
        created_ms: chrono::Utc::now().timestamp_millis(),
    };
    if !SavedViews::new(target.catalog.state())
        .create(&view)
        .await?
    {
        return Err(ApiError::new(
            ErrorCode::TableAlreadyExists,
            format!("view already exists: {}", target.name()),
        ));
    }
    Ok(reply(describe_json(&view)))
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct IdBody {
    id: Option<Vec<String>>,
}

pub async fn describe(target: Target, JsonBody(body): JsonBody<IdBody>) -> ApiResult<Response> {
    target.check_body_id(&body.id)?;
    let view = SavedViews::new(target.catalog.state())
        .get(&target.id)
        .await?
        .ok_or_else(|| not_found(&target))?;
    Ok(reply(describe_json(&view)))
}

pub async fn drop(target: Target, JsonBody(body): JsonBody<IdBody>) -> ApiResult<Response> {
    target.check_body_id(&body.id)?;
    let views = SavedViews::new(target.catalog.state());
    if views.get(&target.id).await?.is_none() {
        return Err(not_found(&target));
    }
    views.remove(&target.id).await?;
    Ok(reply(json!({})))
}

pub async fn list(target: Target) -> ApiResult<Response> {
    let (limit, token) = page(&target.params, None, None)?;
    let names = SavedViews::new(target.catalog.state())
        .names_in(&target.id)
        .await?;
    let (views, page_token) = paginate(
        names.into_iter().map(|n| (n.clone(), n)).collect(),
        limit,
        token.as_deref(),
    );
    let views: Vec<String> = views.into_iter().map(|(_, n)| n).collect();
    Ok(reply(json!({ "views": views, "page_token": page_token })))
}
