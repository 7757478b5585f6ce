//! Lancet: a server for versioned Lance tables whose virtual columns are computed by
//! sandboxed WebAssembly UDFs.
//!
//! Layers: `http` (routing, extractors, errors) -> `catalog` (DirectoryNamespace) and `store`
//! (lance datasets) -> `virtual_columns` (UDF definitions, computed with `lancet-udf`); `jobs`
//! (background backfills) drives `store` and `virtual_columns`.

pub mod catalog;
pub mod config;
pub mod error;
pub mod field_path;
pub mod http;
pub mod jobs;
pub mod json_types;
pub mod server;
pub mod store;
pub mod virtual_columns;

use catalog::Catalog;
use store::Store;
use virtual_columns::VirtualColumns;

/// Everything a request handler can reach.
pub struct App {
    pub catalog: Catalog,
    pub store: Store,
    pub virtual_columns: VirtualColumns,
    pub jobs: jobs::JobManager,
}

impl App {
    /// The storage location of the table a request addresses, after checking that a body `id`
    /// (if any) agrees with the path.
    pub async fn table(
        &self,
        target: &http::Target,
        body_id: &Option<Vec<String>>,
    ) -> error::ApiResult<String> {
        target.check_body_id(body_id)?;
        self.catalog.locate(&target.id).await
    }
}
