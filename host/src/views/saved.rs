//! Views (the lancedb client's `create_view`): a named SQL query over the tenant's tables,
//! stored with the schema it resolved to when it was made. A view holds no rows; it is a
//! catalog object, kept under the tenant's root at `_views/<sha256 of its id>.json` so every
//! replica sees it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::root::RootStore;

const DIR: &str = "_views";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedView {
    /// The view's id in the tenant's catalog (namespace parts, then its name).
    pub id: Vec<String>,
    /// As the client sees it: its name and namespace (relative to the caller's database).
    pub name: String,
    pub namespace: Vec<String>,
    pub query: String,
    /// The database and namespace bare table names in `query` resolve against.
    pub default_database: String,
    pub default_namespace: Vec<String>,
    /// The query's output schema when the view was made (JSON Arrow schema).
    pub schema: Value,
    pub created_ms: i64,
}

fn key(id: &[String]) -> String {
    // Ids may hold any character and be of any length; the key is a fixed-length hash (the
    // record keeps the id itself).
    use sha2::Digest;
    let digest = sha2::Sha256::digest(id.join("\u{1f}").as_bytes());
    format!("{DIR}/{}.json", hex::encode(digest))
}

/// A table a view's query names, as written: `[table]`, `[schema, table]` or
/// `[catalog, schema, table]`.
pub type TableName = Vec<String>;

/// The tables `sql` reads (a single SELECT query; anything else is a 400).
pub fn tables_read(sql: &str) -> ApiResult<Vec<TableName>> {
    use lance::deps::datafusion::prelude::SessionContext;
    use lance::deps::datafusion::sql::parser::Statement;
    crate::sql_guard::check_depth(sql, "query")?;
    let state = SessionContext::new().state();
    let statement = state
        .sql_to_statement(sql, &datafusion_common::config::Dialect::Generic)
        .map_err(|e| ApiError::invalid(format!("view query: {e}")))?;
    match &statement {
        Statement::Statement(s) if matches!(**s, sqlparser::ast::Statement::Query(_)) => {}
        _ => {
            return Err(ApiError::invalid(
                "view query: a view is defined by one SELECT query",
            ));
        }
    }
    let refs = state
        .resolve_table_references(&statement)
        .map_err(|e| ApiError::invalid(format!("view query: {e}")))?;
    Ok(refs
        .into_iter()
        .map(|r| {
            let mut parts: Vec<String> = Vec::new();
            parts.extend(r.catalog().map(str::to_string));
            parts.extend(r.schema().map(str::to_string));
            parts.push(r.table().to_string());
            parts
        })
        .collect())
}

pub struct SavedViews<'a> {
    root: &'a RootStore,
}

impl<'a> SavedViews<'a> {
    pub fn new(root: &'a RootStore) -> Self {
        Self { root }
    }

    /// Record `view`; false when a view with its id exists already.
    pub async fn create(&self, view: &SavedView) -> ApiResult<bool> {
        let bytes = serde_json::to_vec(view).map_err(|e| ApiError::internal(e.to_string()))?;
        Ok(self.root.create(&key(&view.id), bytes).await?.is_some())
    }

    pub async fn get(&self, id: &[String]) -> ApiResult<Option<SavedView>> {
        match self.root.get(&key(id)).await? {
            None => Ok(None),
            Some(found) => serde_json::from_slice(&found.bytes)
                .map(Some)
                .map_err(|e| ApiError::internal(format!("view record is unreadable: {e}"))),
        }
    }

    pub async fn remove(&self, id: &[String]) -> ApiResult<()> {
        self.root.delete(&key(id)).await
    }

    /// The names of the views directly in namespace `namespace` (a catalog id), sorted.
    pub async fn names_in(&self, namespace: &[String]) -> ApiResult<Vec<String>> {
        let mut names = Vec::new();
        for k in self.root.list(DIR).await? {
            if let Some(found) = self.root.get(&k).await?
                && let Ok(v) = serde_json::from_slice::<SavedView>(&found.bytes)
                && v.id.len() == namespace.len() + 1
                && v.id[..namespace.len()] == *namespace
            {
                names.push(v.name);
            }
        }
        names.sort();
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_a_query_reads_are_named_as_written() {
        let t = tables_read("SELECT a.x, b.y FROM t a JOIN ns.u b ON a.id = b.id").unwrap();
        assert_eq!(
            t,
            vec![vec!["t".to_string()], vec!["ns".into(), "u".into()]]
        );
        let t = tables_read("WITH c AS (SELECT * FROM \"T\") SELECT count(*) FROM c").unwrap();
        assert_eq!(t, vec![vec!["T".to_string()]]);
        for bad in [
            "DROP TABLE t",
            "SELEC 1",
            "SELECT 1; SELECT 2",
            "CREATE TABLE x (a int)",
        ] {
            assert_eq!(tables_read(bad).unwrap_err().status.as_u16(), 400, "{bad}");
        }
    }
}
