//! `/v1/namespace/{id}/...`: namespace CRUD and table listing, on the DirectoryNamespace catalog.

use axum::extract::State;
use axum::response::Response;
use lance_namespace::models::{
    CreateNamespaceRequest, DescribeNamespaceRequest, DropNamespaceRequest, DropTableRequest,
    ListNamespacesRequest, ListTablesRequest, NamespaceExistsRequest,
};
use serde_json::json;

use super::pipeline::extract::{Model, page};
use super::{AppState, answer, reply, respond};
use crate::catalog::Catalog;
use crate::error::{ApiError, ApiResult};

/// The catalog (lance-namespace's DirectoryNamespace, 14.0.2) lists a namespace's children with
/// a SQL filter that quotes the namespace's name without escaping it, so a name with a `'`
/// breaks every listing (and lets the name inject SQL into it). Such names are refused where a
/// namespace is created or listed.
fn listable(id: &[String]) -> ApiResult<()> {
    match id.iter().find(|part| part.contains('\'')) {
        Some(part) => Err(ApiError::invalid(format!(
            "namespace name '{part}' contains a single quote, which the catalog cannot list"
        ))),
        None => Ok(()),
    }
}

/// `mode` as the spec defines it when the namespace exists: `Create` (default) is a 409,
/// `ExistOk` keeps it (and answers its properties), `Overwrite` drops it with everything in
/// it and creates it empty with the new properties.
pub async fn create(
    State(app): State<AppState>,
    Model(target, mut request): Model<CreateNamespaceRequest>,
) -> ApiResult<Response> {
    listable(&target.id)?;
    let mode = request
        .mode
        .take()
        .or_else(|| target.params.string("mode"))
        .unwrap_or_default()
        .to_ascii_lowercase()
        .replace('_', "");
    if !matches!(mode.as_str(), "" | "create" | "existok" | "overwrite") {
        return Err(ApiError::invalid(format!(
            "unknown mode '{mode}': use Create, ExistOk or Overwrite"
        )));
    }
    let exists = !target.id.is_empty()
        && target
            .catalog
            .reader()
            .namespace_exists(NamespaceExistsRequest {
                id: Some(target.id.clone()),
                ..Default::default()
            })
            .await
            .is_ok();
    if exists && mode == "existok" {
        let described = target
            .catalog
            .reader()
            .describe_namespace(DescribeNamespaceRequest {
                id: Some(target.id.clone()),
                ..Default::default()
            })
            .await
            .map_err(ApiError::from)?;
        return Ok(reply(
            json!({ "properties": described.properties.unwrap_or_default() }),
        ));
    }
    if exists && mode == "overwrite" {
        drop_contents(&app, &target.catalog, &target.id).await?;
        target
            .catalog
            .ns()
            .drop_namespace(DropNamespaceRequest {
                id: Some(target.id.clone()),
                ..Default::default()
            })
            .await
            .map_err(ApiError::from)?;
        target.catalog.invalidate_all();
    }
    answer(target.catalog.ns().create_namespace(request).await)
}

pub async fn list(Model(target, mut request): Model<ListNamespacesRequest>) -> ApiResult<Response> {
    listable(&target.id)?;
    let (limit, token) = page(
        &target.params,
        request.limit.map(i64::from),
        request.page_token.take(),
    )?;
    request.limit = limit.map(|l| l as i32);
    request.page_token = token;
    answer(target.catalog.list_namespaces(request).await)
}

pub async fn describe(
    Model(target, request): Model<DescribeNamespaceRequest>,
) -> ApiResult<Response> {
    answer(target.catalog.describe_namespace(request).await)
}

pub async fn exists(Model(target, request): Model<NamespaceExistsRequest>) -> ApiResult<Response> {
    target
        .catalog
        .namespace_exists(request)
        .await
        .map_err(ApiError::from)?;
    Ok(reply(json!({})))
}

pub async fn drop(
    State(app): State<AppState>,
    Model(target, request): Model<DropNamespaceRequest>,
) -> ApiResult<Response> {
    if target.id.is_empty() {
        return Err(ApiError::invalid("the root namespace cannot be dropped"));
    }
    let mut request = request;
    request.mode = choice("mode", request.mode.as_deref(), &["Fail", "Skip"])?;
    request.behavior = choice(
        "behavior",
        request.behavior.as_deref(),
        &["Restrict", "Cascade"],
    )?;
    let skip_missing = request.mode.as_deref() == Some("Skip");
    let cascade = request.behavior.as_deref() == Some("Cascade");
    let exists = target
        .catalog
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
        listable(&target.id)?;
        drop_contents(&app, &target.catalog, &target.id).await?;
    }
    let response = target
        .catalog
        .ns()
        .drop_namespace(request)
        .await
        .map_err(ApiError::from)?;
    target.catalog.invalidate_all();
    respond(response)
}

/// One of `allowed` (as spelled there), matched without regard to case; a value that is itself a
/// quoted JSON string (`"\"Cascade\""`, as `@lancedb/lancedb` 0.39 sends a drop's behavior)
/// is read as the string it quotes. Anything else is a 400 naming the field and the value.
fn choice(field: &str, value: Option<&str>, allowed: &[&'static str]) -> ApiResult<Option<String>> {
    let Some(raw) = value else { return Ok(None) };
    let unquoted = serde_json::from_str::<String>(raw).unwrap_or_else(|_| raw.to_string());
    allowed
        .iter()
        .find(|a| a.eq_ignore_ascii_case(unquoted.trim()))
        .map(|a| Some(a.to_string()))
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "{field}: unknown value {raw:?}; use one of {}",
                allowed.join(", ")
            ))
        })
}

/// Cascade: drop every table and child namespace below `id`, deepest first.
async fn drop_contents(app: &AppState, catalog: &Catalog, id: &[String]) -> ApiResult<()> {
    let children = list_all_namespaces(catalog, id).await?;
    for child in children {
        let mut child_id = id.to_vec();
        child_id.push(child);
        Box::pin(drop_contents(app, catalog, &child_id)).await?;
        let request = DropNamespaceRequest {
            id: Some(child_id),
            ..Default::default()
        };
        catalog
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
    let tables = catalog
        .list_tables(request)
        .await
        .map_err(ApiError::from)?
        .tables;
    for table in tables {
        let mut table_id = id.to_vec();
        table_id.push(table);
        if let Ok(loc) = catalog.locate(&table_id).await {
            app.store.forget(&loc);
        }
        catalog
            .ns()
            .drop_table(DropTableRequest {
                id: Some(table_id.clone()),
                ..Default::default()
            })
            .await
            .map_err(ApiError::from)?;
        catalog.invalidate(&table_id);
    }
    Ok(())
}

async fn list_all_namespaces(catalog: &Catalog, id: &[String]) -> ApiResult<Vec<String>> {
    let request = ListNamespacesRequest {
        id: Some(id.to_vec()),
        ..Default::default()
    };
    Ok(catalog
        .list_namespaces(request)
        .await
        .map_err(ApiError::from)?
        .namespaces)
}

pub async fn list_tables(
    Model(target, mut request): Model<ListTablesRequest>,
) -> ApiResult<Response> {
    listable(&target.id)?;
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
    answer(target.catalog.list_tables(request).await)
}

#[cfg(test)]
mod tests {
    use super::choice;

    #[test]
    fn drop_choices_take_any_case_and_a_quoted_string_and_refuse_the_rest() {
        let behavior = |v| choice("behavior", Some(v), &["Restrict", "Cascade"]);
        assert_eq!(behavior("cascade").unwrap().as_deref(), Some("Cascade"));
        assert_eq!(behavior("\"Cascade\"").unwrap().as_deref(), Some("Cascade"));
        assert_eq!(behavior("RESTRICT").unwrap().as_deref(), Some("Restrict"));
        assert_eq!(choice("mode", None, &["Fail", "Skip"]).unwrap(), None);
        let err = behavior("sideways").unwrap_err();
        assert_eq!(err.status.as_u16(), 400);
        assert!(err.message.contains("sideways") && err.message.contains("behavior"));
        assert!(behavior("\"Sideways\"").is_err());
    }
}
