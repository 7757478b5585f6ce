//! Lancet: a server for versioned Lance tables whose virtual columns are computed by
//! sandboxed WebAssembly UDFs.
//!
//! Layers: `http` (routing, extractors, errors, credentials) -> `auth` (who may do what),
//! `tenants`/`catalog` (a DirectoryNamespace per tenant) and `store`
//! (lance datasets) -> `virtual_columns` (UDF definitions, computed with `lancet-udf`); `jobs`
//! (background backfills) drives `store` and `virtual_columns`.

pub mod auth;
pub mod background;
pub mod catalog;
pub mod config;
pub mod error;
pub mod field_path;
pub mod flight;
pub mod functions;
pub mod hosting;
pub mod http;
pub mod jobs;
pub mod json_types;
pub mod logging;
pub mod metrics;
pub mod models;
pub mod native;
pub mod object_cache;
pub mod object_requests;
pub mod root;
pub mod server;
pub mod sql;
pub mod sql_guard;
pub mod store;
pub mod tenants;
pub mod upkeep;
pub mod uploads;
pub mod views;
pub mod virtual_columns;

use auth::Authenticator;
use store::Store;
use tenants::Tenants;
use virtual_columns::VirtualColumns;

/// Everything a request handler can reach.
pub struct App {
    /// Each tenant's catalog.
    pub tenants: Tenants,
    pub auth: Authenticator,
    /// Host names `<database>.<host_domain>` select a database.
    pub host_domain: Option<String>,
    pub store: Store,
    pub virtual_columns: VirtualColumns,
    /// Registered Functions and secrets (lancedb's registry).
    pub functions: functions::Functions,
    /// Registered embedding models and the process's loaded ones.
    pub models: std::sync::Arc<models::Models>,
    pub jobs: jobs::JobManager,
    /// Background compaction, index upkeep and version cleanup.
    pub upkeep: upkeep::Upkeep,
    pub metrics: metrics::Metrics,
    /// Object-store requests by operation, for `/metrics`.
    pub object_requests: std::sync::Arc<object_requests::Counts>,
    /// Immutable table-file ranges held in memory (object-store roots only).
    pub object_cache: Option<std::sync::Arc<object_cache::ObjectCache>>,
    /// Bounds on requests in flight and on body memory.
    pub admission: http::pipeline::overload::Admission,
    /// Lets non-loopback clients read `/metrics`.
    pub metrics_token: Option<String>,
    /// `LANCET_FAULT_INJECTION=1`: honour `x-lancet-fault` request headers (tests only).
    pub fault_injection: bool,
    /// `--vend-storage-options`: describe/declare may hand clients the storage options.
    pub vend_storage_options: bool,
    /// `--console`: serve the web console at `/console`.
    pub console: bool,
    /// `--access-log`: a log line per answered request.
    pub access_log: bool,
    /// Server state under the data root (auth file, jobs, modules, leases).
    pub root: std::sync::Arc<root::RootStore>,
    /// This node's name in leases.
    pub node_id: String,
    /// Where jobs may run besides this server's own nodes (`--clusters`).
    pub clusters: lancet_ray::Clusters,
    /// Quotas and the audit log (hosting many tenants).
    pub hosting: hosting::Hosting,
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
        target.catalog.locate(&target.id).await
    }
}
