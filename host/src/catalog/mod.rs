//! Where tables live. The catalog is lance-namespace's `DirectoryNamespace` in manifest mode,
//! so any Lance client pointed at the same root sees the same namespaces and tables. Lancet
//! adds a location cache (table id -> URI) so data-plane requests do not read the
//! `__manifest` table each time; entries are dropped whenever this server changes the catalog,
//! and a stale entry (table dropped by another process) surfaces as "not found" on open.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use lance::session::Session;
use lance_namespace::models::{
    CreateNamespaceRequest, DeregisterTableRequest, DescribeTableRequest, NamespaceExistsRequest,
    RegisterTableRequest, TableExistsRequest,
};
use lance_namespace::{ErrorCode, LanceNamespace};
use lance_namespace_impls::DirectoryNamespaceBuilder;

use crate::error::{ApiError, ApiResult};
use crate::root::RootStore;

pub mod batch;
mod lock;

pub use lock::{CatalogGuard, CatalogLock};

pub struct Catalog {
    ns: Arc<dyn LanceNamespace>,
    root: String,
    /// Table id -> location, with the version of the catalog's `__manifest` table it was read
    /// at (0 when the root is not shared).
    locations: Mutex<HashMap<Vec<String>, (String, u64)>>,
    /// When other nodes share the root: the catalog's own table, whose latest version is
    /// checked before a cached location is trusted (a drop, rename or re-create by another
    /// node moves it on).
    manifest: Option<Mutex<Option<Arc<lance::Dataset>>>>,
    session: Arc<Session>,
    storage_options: HashMap<String, String>,
    /// Namespaces known to exist (database namespaces are created on first use).
    known_namespaces: Mutex<HashSet<Vec<String>>>,
    /// Serialises catalog changes against each other, on every node sharing the root.
    pub(crate) commit_lock: CatalogLock,
    /// batch-commit's intent records (`batch.rs`).
    intents: batch::Intents,
    /// The tenant's server state under its root (intents, leases, uploads).
    state: Arc<RootStore>,
    /// When this process last swept the tenant's abandoned multipart uploads.
    uploads_swept: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Catalog {
    pub async fn open(
        root: &str,
        session: Arc<Session>,
        options: &HashMap<String, String>,
        node: &str,
        shared: bool,
    ) -> ApiResult<Self> {
        // Manifest only: in dual mode a deregistered root-level table stays visible through
        // directory listing, so the `__manifest` table is the single source of truth.
        let ns = DirectoryNamespaceBuilder::new(root)
            .dir_listing_enabled(false)
            .session(session.clone())
            .storage_options(options.clone())
            .build()
            .await
            .map_err(ApiError::from)?;
        let state = Arc::new(RootStore::open(root, options, &session).await?);
        let catalog = Self {
            ns: Arc::new(ns),
            root: root.to_string(),
            locations: Mutex::default(),
            manifest: shared.then(Default::default),
            session: session.clone(),
            storage_options: options.clone(),
            known_namespaces: Mutex::default(),
            commit_lock: CatalogLock::new(state.clone(), node.to_string()),
            intents: batch::Intents::new(state.clone()),
            state,
            uploads_swept: Default::default(),
        };
        // A batch-commit a killed process left half-done is settled before anyone uses this,
        // unless another node holds the catalog lock (it may be in the middle of that batch;
        // it settles or finishes it). If recovery fails the tenant still opens (one bad record
        // must not lock it out); every batch-commit tries again first, and fails until it
        // succeeds.
        match catalog.commit_lock.try_lock().await {
            Ok(Some(_guard)) => {
                if let Err(e) = catalog.recover_batches().await {
                    tracing::error!(error = %e, root, "cannot settle an interrupted batch-commit");
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, root, "cannot take the catalog lock to recover"),
        }
        Ok(catalog)
    }

    pub fn ns(&self) -> &dyn LanceNamespace {
        self.ns.as_ref()
    }

    pub fn root(&self) -> &str {
        &self.root
    }

    /// True (and the clock restarted) when `every` has passed since this process last swept
    /// the tenant's multipart uploads: the caller sweeps them.
    pub fn uploads_sweep_due(&self, every: std::time::Duration) -> bool {
        let mut last = self.uploads_swept.lock().unwrap();
        if last.is_some_and(|t| t.elapsed() < every) {
            return false;
        }
        *last = Some(std::time::Instant::now());
        true
    }

    /// The store of server state under this catalog's root (see `root`).
    pub fn state(&self) -> &RootStore {
        &self.state
    }

    /// The storage location of table `id`; 404 `TableNotFound` when the catalog has no such table.
    pub async fn locate(&self, id: &[String]) -> ApiResult<String> {
        if id.is_empty() {
            return Err(ApiError::invalid("a table id is required"));
        }
        let catalog_version = self.catalog_version().await?;
        let cached = self.locations.lock().unwrap().get(id).cloned();
        if let Some((loc, at)) = cached
            && at == catalog_version
        {
            return Ok(loc);
        }
        // `describe_table` of a root-level table falls back to directory listing, which does not
        // see a deregistration; `table_exists` does.
        let exists = TableExistsRequest {
            id: Some(id.to_vec()),
            ..Default::default()
        };
        self.ns
            .table_exists(exists)
            .await
            .map_err(|e| not_found_as_table(e, id))?;
        let request = DescribeTableRequest {
            id: Some(id.to_vec()),
            load_detailed_metadata: Some(false),
            ..Default::default()
        };
        let response = self
            .ns
            .describe_table(request)
            .await
            .map_err(|e| not_found_as_table(e, id))?;
        let location = response
            .location
            .ok_or_else(|| ApiError::table_not_found(&id.join(".")))?;
        self.locations
            .lock()
            .unwrap()
            .insert(id.to_vec(), (location.clone(), catalog_version));
        Ok(location)
    }

    /// The latest version of the catalog's `__manifest` table when the root is shared (every
    /// catalog change on any node commits one), else 0. One version check, like the one every
    /// request makes of its table.
    async fn catalog_version(&self) -> ApiResult<u64> {
        let Some(manifest) = &self.manifest else {
            return Ok(0);
        };
        let opened = manifest.lock().unwrap().clone();
        let ds = match opened {
            Some(ds) => ds,
            None => {
                let uri = format!("{}/__manifest", self.root.trim_end_matches('/'));
                let loaded = lance::dataset::builder::DatasetBuilder::from_uri(&uri)
                    .with_session(self.session.clone())
                    .with_storage_options(self.storage_options.clone())
                    .load()
                    .await;
                // No catalog table yet: nothing is cached either.
                let Ok(ds) = loaded else { return Ok(0) };
                let ds = Arc::new(ds);
                *manifest.lock().unwrap() = Some(ds.clone());
                ds
            }
        };
        ds.latest_version_id().await.map_err(ApiError::from)
    }

    /// Locations inside the root, as register wants them: relative to the root. Deregister
    /// answers absolute URIs, so both spellings of the root are accepted.
    pub fn relative_location(&self, location: &str) -> String {
        let root = self.root.trim_end_matches('/');
        let file_root = format!("file://{root}");
        for prefix in [file_root.as_str(), root] {
            if let Some(rest) = location.strip_prefix(prefix)
                && (rest.is_empty() || rest.starts_with('/'))
            {
                return rest.trim_start_matches('/').to_string();
            }
        }
        location.to_string()
    }

    /// Forget a cached location after this server changed or removed the table's entry.
    pub fn invalidate(&self, id: &[String]) {
        self.locations.lock().unwrap().remove(id);
    }

    pub fn invalidate_all(&self) {
        self.locations.lock().unwrap().clear();
        self.known_namespaces.lock().unwrap().clear();
    }

    /// Creates namespace `id` (and its parents) unless it exists: a database named by a request
    /// header exists implicitly, as a top-level namespace of the tenant's catalog.
    pub async fn ensure_namespace(&self, id: &[String]) -> ApiResult<()> {
        if self.known_namespaces.lock().unwrap().contains(id) {
            return Ok(());
        }
        for depth in 1..=id.len() {
            let level = id[..depth].to_vec();
            let exists = self
                .ns
                .namespace_exists(NamespaceExistsRequest {
                    id: Some(level.clone()),
                    ..Default::default()
                })
                .await
                .is_ok();
            if !exists {
                let created = self
                    .ns
                    .create_namespace(CreateNamespaceRequest {
                        id: Some(level.clone()),
                        mode: Some("exist_ok".into()),
                        ..Default::default()
                    })
                    .await;
                if let Err(e) = created {
                    let e = ApiError::from(e);
                    if e.code != ErrorCode::NamespaceAlreadyExists {
                        return Err(e);
                    }
                }
            }
        }
        self.known_namespaces.lock().unwrap().insert(id.to_vec());
        Ok(())
    }

    /// Renames (or moves) a table. `DirectoryNamespace` has no rename, so this re-registers
    /// the same location under the new id; the data does not move. Under the catalog lock, as
    /// a batch (`batch.rs`): undone if the second half fails or the process dies half-way, so
    /// the table is never lost or doubled.
    pub async fn rename_table(&self, from: &[String], to: &[String]) -> ApiResult<()> {
        let _guard = self.commit_lock.lock().await?;
        let location = self.locate(from).await?;
        if from == to {
            return Ok(());
        }
        match self.locate(to).await {
            Ok(_) => {
                return Err(ApiError::new(
                    ErrorCode::TableAlreadyExists,
                    format!("table already exists: {}", to.join(".")),
                ));
            }
            Err(e) if e.code == ErrorCode::TableNotFound => {}
            Err(e) => return Err(e),
        }
        if to.len() > 1 {
            self.ns
                .namespace_exists(NamespaceExistsRequest {
                    id: Some(to[..to.len() - 1].to_vec()),
                    ..Default::default()
                })
                .await
                .map_err(ApiError::from)?;
        }
        // Deregister + register as one batch (batch.rs): all-or-nothing, also when the process
        // is killed between the two.
        let ops = vec![
            batch::BatchOp::DeregisterTable(DeregisterTableRequest {
                id: Some(from.to_vec()),
                ..Default::default()
            }),
            batch::BatchOp::RegisterTable(RegisterTableRequest {
                id: Some(to.to_vec()),
                location: self.relative_location(&location),
                ..Default::default()
            }),
        ];
        self.commit_batch_locked(ops).await.map_err(|f| f.error)?;
        Ok(())
    }

    /// Locations a tenant may register: inside its own root, with no way out of it.
    pub fn contained_location(&self, location: &str) -> ApiResult<String> {
        let relative = self.relative_location(location);
        let escapes = relative.contains("://")
            || relative.starts_with('/')
            || relative.split(['/', '\\']).any(|part| part == "..");
        if escapes || relative.is_empty() {
            return Err(ApiError::invalid(format!(
                "location '{location}' must be inside this tenant's root ({})",
                self.root
            )));
        }
        Ok(relative)
    }
}

/// Namespace errors for a table lookup whose namespace is missing still mean "no such table"
/// to the caller of a table operation.
pub fn not_found_as_table(err: lance_core::Error, id: &[String]) -> ApiError {
    let api = ApiError::from(err);
    if api.status == axum::http::StatusCode::NOT_FOUND && api.code != ErrorCode::TableNotFound {
        return ApiError::new(
            ErrorCode::TableNotFound,
            format!("table not found: {} ({})", id.join("."), api.message),
        );
    }
    api
}
