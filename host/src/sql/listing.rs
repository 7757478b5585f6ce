//! What a caller's SQL can name, for catalog calls (Flight SQL's `GetDbSchemas`,
//! `GetTables`): its namespaces as schema names (levels joined by `.`; the database root is
//! the schema `""`) and the tables in them, under the one catalog [`super::names::CATALOG`].

use lance_namespace::models::ListNamespacesRequest;

use crate::error::{ApiError, ApiResult};
use crate::http::pipeline::auth::Caller;

/// Namespaces walked at most, so a huge catalog cannot make one call unbounded.
const MAX_NAMESPACES: usize = 100_000;

/// Where the caller's view of its catalog starts: its database, narrowed to its credential's
/// namespace when that lies deeper.
fn root(caller: &Caller) -> Vec<String> {
    let db: Vec<String> = caller.database.iter().cloned().collect();
    let scope = &caller.grant.scope;
    if scope.len() > db.len() && scope.starts_with(&db) {
        scope.clone()
    } else {
        db
    }
}

fn schema_name(caller: &Caller, namespace: &[String]) -> String {
    caller.unresolve(namespace).join(".")
}

/// Every namespace the caller can name (the root included, as `""`), sorted.
pub async fn schemas(caller: &Caller) -> ApiResult<Vec<String>> {
    let start = root(caller);
    let mut out = vec![start.clone()];
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(ns) = queue.pop_front() {
        for name in child_namespaces(caller, &ns).await? {
            let mut child = ns.clone();
            child.push(name);
            if out.len() >= MAX_NAMESPACES {
                return Err(ApiError::invalid(format!(
                    "more than {MAX_NAMESPACES} namespaces: name a schema pattern"
                )));
            }
            out.push(child.clone());
            queue.push_back(child);
        }
    }
    let mut names: Vec<String> = out
        .iter()
        .filter(|ns| caller.covers(ns))
        .map(|ns| schema_name(caller, ns))
        .collect();
    names.sort();
    Ok(names)
}

/// Every page of a listing: `page(token)` answers one page's names and the next token.
async fn all_pages<F, Fut>(mut page: F) -> ApiResult<Vec<String>>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = lance_core::Result<(Vec<String>, Option<String>)>>,
{
    let (mut out, mut token) = (Vec::new(), None);
    loop {
        let (names, next) = page(token).await.map_err(ApiError::from)?;
        out.extend(names);
        token = next;
        if token.is_none() {
            return Ok(out);
        }
    }
}

async fn child_namespaces(caller: &Caller, ns: &[String]) -> ApiResult<Vec<String>> {
    all_pages(|page_token| async move {
        let request = ListNamespacesRequest {
            id: Some(ns.to_vec()),
            page_token,
            limit: Some(1000),
            ..Default::default()
        };
        let page = caller.catalog.list_namespaces(request).await?;
        Ok((page.namespaces, page.page_token))
    })
    .await
}

async fn tables_in(caller: &Caller, ns: &[String]) -> ApiResult<Vec<String>> {
    all_pages(|page_token| async move {
        let request = lance_namespace::models::ListTablesRequest {
            id: Some(ns.to_vec()),
            page_token,
            limit: Some(1000),
            ..Default::default()
        };
        let page = caller.catalog.list_tables(request).await?;
        Ok((page.tables, page.page_token))
    })
    .await
}

/// Every table the caller can name, as (schema, table), sorted.
pub async fn tables(caller: &Caller) -> ApiResult<Vec<(String, String)>> {
    let start = root(caller);
    let mut out = Vec::new();
    match caller.catalog.list_all_tables(&start, "\u{1f}").await {
        Some(names) => {
            for name in names {
                let mut id = start.clone();
                id.extend(name.split('\u{1f}').map(str::to_string));
                let table = id.pop().unwrap_or_default();
                out.push((schema_name(caller, &id), table));
            }
        }
        None => {
            for schema in schemas(caller).await? {
                let mut ns: Vec<String> = caller.database.iter().cloned().collect();
                ns.extend(
                    schema
                        .split('.')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string),
                );
                let tables = tables_in(caller, &ns).await?;
                out.extend(tables.into_iter().map(|t| (schema.clone(), t)));
            }
        }
    }
    out.retain(|(schema, _)| {
        let mut ns: Vec<String> = caller.database.iter().cloned().collect();
        ns.extend(
            schema
                .split('.')
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        );
        caller.covers(&ns)
    });
    out.sort();
    Ok(out)
}

/// The id (from the caller's database) of table `table` in schema `schema`.
pub fn table_id(schema: &str, table: &str) -> Vec<String> {
    schema
        .split('.')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .chain(std::iter::once(table.to_string()))
        .collect()
}
