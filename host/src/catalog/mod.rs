//! Where tables live. The catalog is lance-namespace's `DirectoryNamespace` in manifest mode,
//! so any Lance client pointed at the same root sees the same namespaces and tables. Lookups
//! and listings are answered from an in-memory snapshot of its `__manifest` table
//! (`snapshot.rs`), rebuilt whenever that table changes, whoever changed it; changes go to the
//! namespace itself.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use lance::session::Session;
use lance_namespace::models::{
    CreateNamespaceRequest, DeregisterTableRequest, DescribeNamespaceRequest,
    DescribeNamespaceResponse, DescribeTableRequest, ListNamespacesRequest, ListNamespacesResponse,
    ListTablesRequest, ListTablesResponse, NamespaceExistsRequest, RegisterTableRequest,
};
use lance_namespace::{ErrorCode, LanceNamespace};
use lance_namespace_impls::DirectoryNamespaceBuilder;

use crate::error::{ApiError, ApiResult};
use crate::root::RootStore;

pub mod batch;
mod lock;
pub mod snapshot;

pub use lock::{CatalogGuard, CatalogLock};

/// The namespace borrowed for one call; see [`Catalog::ns`].
pub struct NsCall<'a> {
    ns: &'a dyn LanceNamespace,
    changed: &'a snapshot::Snapshots,
}

impl<'a> std::ops::Deref for NsCall<'a> {
    type Target = dyn LanceNamespace + 'a;

    fn deref(&self) -> &Self::Target {
        self.ns
    }
}

impl Drop for NsCall<'_> {
    fn drop(&mut self) {
        self.changed
            .changed()
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A table's entry: where it is and what the namespace stores with it.
#[derive(Clone, Debug)]
pub struct TableEntry {
    /// Full URI.
    pub location: String,
    pub properties: Option<HashMap<String, String>>,
    pub storage_options: Option<HashMap<String, String>>,
}

#[derive(Clone)]
struct Resolved {
    location: String,
    storage_options: Option<HashMap<String, String>>,
}

pub struct Catalog {
    ns: Arc<dyn LanceNamespace>,
    root: String,
    /// The `__manifest` table in memory.
    snapshots: snapshot::Snapshots,
    /// A stored (relative) table location -> its full URI and the storage options the
    /// namespace answers with it: both depend only on the root, so each is asked once.
    resolved: Mutex<HashMap<String, Resolved>>,
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
        read_consistency: std::time::Duration,
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
        let snapshots = snapshot::Snapshots::new(
            root,
            state.is_local(),
            session.clone(),
            options.clone(),
            read_consistency,
        );
        let changed = snapshots.changed();
        let catalog = Self {
            ns: Arc::new(ns),
            root: root.to_string(),
            snapshots,
            resolved: Mutex::default(),
            known_namespaces: Mutex::default(),
            commit_lock: CatalogLock::new(state.clone(), node.to_string(), changed),
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

    /// The namespace, for a lookup that changes nothing (stats, listings the snapshot cannot
    /// answer): unlike [`Catalog::ns`], it leaves the snapshot's next check to the interval.
    pub fn reader(&self) -> &dyn LanceNamespace {
        self.ns.as_ref()
    }

    /// The namespace, for a change (or a lookup the snapshot cannot answer). The snapshot is
    /// marked for a check once the call's statement ends, so this process sees its own
    /// change at the next lookup whatever the read consistency interval.
    pub fn ns(&self) -> NsCall<'_> {
        NsCall {
            ns: self.ns.as_ref(),
            changed: &self.snapshots,
        }
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
        Ok(self.describe_table(id).await?.location)
    }

    /// Table `id`'s entry; 404 `TableNotFound` when the catalog has no such table.
    pub async fn describe_table(&self, id: &[String]) -> ApiResult<TableEntry> {
        if id.is_empty() {
            return Err(ApiError::invalid("a table id is required"));
        }
        let object_id = id.join(snapshot::DELIMITER);
        let found = self
            .snapshot()
            .await
            .and_then(|s| s.tables.get(&object_id).cloned());
        if let Some(entry) = found {
            let known = self.resolved.lock().unwrap().get(&entry.location).cloned();
            if let Some(r) = known {
                return Ok(TableEntry {
                    location: r.location,
                    properties: entry.properties,
                    storage_options: r.storage_options,
                });
            }
        }
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
        // Remembered by the stored location, which the snapshot knows the table by.
        if let Some(entry) = self
            .snapshot()
            .await
            .and_then(|s| s.tables.get(&object_id).cloned())
        {
            self.resolved.lock().unwrap().insert(
                entry.location,
                Resolved {
                    location: location.clone(),
                    storage_options: response.storage_options.clone(),
                },
            );
        }
        Ok(TableEntry {
            location,
            properties: response.properties,
            storage_options: response.storage_options,
        })
    }

    /// The snapshot, or `None` (the namespace is asked instead) when there is none yet or it
    /// cannot be read.
    async fn snapshot(&self) -> Option<Arc<snapshot::Snapshot>> {
        match self.snapshots.get().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, root = %self.root, "catalog snapshot unavailable");
                None
            }
        }
    }

    /// `namespace_exists`, from the snapshot when it knows the namespace.
    pub async fn namespace_exists(
        &self,
        request: NamespaceExistsRequest,
    ) -> lance_core::Result<()> {
        if let Some(id) = &request.id
            && (id.is_empty() || self.knows_namespace(id).await)
        {
            return Ok(());
        }
        self.ns.namespace_exists(request).await
    }

    async fn knows_namespace(&self, id: &[String]) -> bool {
        id.is_empty()
            || self
                .snapshot()
                .await
                .is_some_and(|s| s.namespaces.contains_key(&id.join(snapshot::DELIMITER)))
    }

    /// `describe_namespace`, from the snapshot when it knows the namespace.
    pub async fn describe_namespace(
        &self,
        request: DescribeNamespaceRequest,
    ) -> lance_core::Result<DescribeNamespaceResponse> {
        if let Some(id) = request.id.as_ref().filter(|id| !id.is_empty())
            && let Some(s) = self.snapshot().await
            && let Some(properties) = s.namespaces.get(&id.join(snapshot::DELIMITER))
        {
            return Ok(DescribeNamespaceResponse {
                properties: properties.clone(),
                ..Default::default()
            });
        }
        self.ns.describe_namespace(request).await
    }

    /// `list_namespaces`, from the snapshot when it knows the parent.
    pub async fn list_namespaces(
        &self,
        request: ListNamespacesRequest,
    ) -> lance_core::Result<ListNamespacesResponse> {
        if let Some(parent) = request.id.clone()
            && self.knows_namespace(&parent).await
            && let Some(s) = self.snapshot().await
        {
            let names = snapshot::Snapshot::children(&s.namespaces, &parent);
            let (names, token) = paginate(names, request.page_token, request.limit);
            let mut response = ListNamespacesResponse::new(names);
            response.page_token = token;
            return Ok(response);
        }
        self.ns.list_namespaces(request).await
    }

    /// Every table below namespace `root` (at any depth, in namespaces that exist), named by
    /// its id from `root` joined with `delimiter`, sorted; `None` when the snapshot cannot
    /// answer (the caller walks the namespaces instead).
    pub async fn list_all_tables(&self, root: &[String], delimiter: &str) -> Option<Vec<String>> {
        if !self.knows_namespace(root).await {
            return None;
        }
        let s = self.snapshot().await?;
        let prefix = match root {
            [] => String::new(),
            r => format!("{}{}", r.join(snapshot::DELIMITER), snapshot::DELIMITER),
        };
        let mut names: Vec<String> = s
            .tables
            .range(prefix.clone()..)
            .map(|(id, _)| id)
            .take_while(|id| id.starts_with(&prefix))
            .filter(|id| match id.rfind(snapshot::DELIMITER) {
                Some(end) => s.namespaces.contains_key(&id[..end]),
                None => true,
            })
            .map(|id| id[prefix.len()..].replace(snapshot::DELIMITER, delimiter))
            .collect();
        names.sort();
        Some(names)
    }

    /// Every table below namespace `root` by its id relative to `root`: from the snapshot when
    /// it can answer, else by walking the namespaces.
    pub async fn walk_tables(
        &self,
        root: &[String],
        include_declared: Option<bool>,
    ) -> ApiResult<Vec<Vec<String>>> {
        const SEP: &str = "\u{0}";
        if include_declared != Some(false)
            && let Some(names) = self.list_all_tables(root, SEP).await
        {
            return Ok(names
                .into_iter()
                .map(|n| n.split(SEP).map(str::to_string).collect())
                .collect());
        }
        let mut names = Vec::new();
        let mut pending: Vec<Vec<String>> = vec![Vec::new()];
        while let Some(relative) = pending.pop() {
            let mut id = root.to_vec();
            id.extend(relative.iter().cloned());
            let tables = self
                .list_tables(ListTablesRequest {
                    id: Some(id.clone()),
                    include_declared,
                    ..Default::default()
                })
                .await
                .map_err(ApiError::from)?
                .tables;
            for t in tables {
                let mut name = relative.clone();
                name.push(t);
                names.push(name);
            }
            let children = self
                .list_namespaces(ListNamespacesRequest {
                    id: Some(id),
                    ..Default::default()
                })
                .await
                .map_err(ApiError::from)?
                .namespaces;
            for child in children {
                let mut next = relative.clone();
                next.push(child);
                pending.push(next);
            }
        }
        Ok(names)
    }

    /// `list_tables`, from the snapshot when it knows the namespace (and declared tables are
    /// not to be left out: that needs a look at each table's files).
    pub async fn list_tables(
        &self,
        request: ListTablesRequest,
    ) -> lance_core::Result<ListTablesResponse> {
        if let Some(parent) = request.id.clone()
            && request.include_declared != Some(false)
            && self.knows_namespace(&parent).await
            && let Some(s) = self.snapshot().await
        {
            let names = snapshot::Snapshot::children(&s.tables, &parent);
            let (names, token) = paginate(names, request.page_token, request.limit);
            let mut response = ListTablesResponse::new(names);
            response.page_token = token;
            return Ok(response);
        }
        self.ns.list_tables(request).await
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

    /// Lookups follow the `__manifest` table by themselves; what is left to forget after
    /// this server changed a table's entry is nothing (kept for the callers' clarity).
    pub fn invalidate(&self, _id: &[String]) {}

    pub fn invalidate_all(&self) {
        self.snapshots
            .changed()
            .store(true, std::sync::atomic::Ordering::SeqCst);
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

/// One page of sorted `names`, as lance-namespace pages them: after the name `token`, at most
/// `limit`; the next token is the page's last name when more follow.
fn paginate(
    names: Vec<&str>,
    token: Option<String>,
    limit: Option<i32>,
) -> (Vec<String>, Option<String>) {
    let start = token.map_or(0, |t| names.partition_point(|n| *n <= t.as_str()));
    let rest = &names[start..];
    match limit.filter(|l| *l >= 0).map(|l| l as usize) {
        Some(limit) if rest.len() > limit => {
            let page: Vec<String> = rest[..limit].iter().map(|n| n.to_string()).collect();
            let next = page.last().cloned();
            (page, next)
        }
        _ => (rest.iter().map(|n| n.to_string()).collect(), None),
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

#[cfg(test)]
mod tests {
    use super::paginate;

    #[test]
    fn pages_follow_lance_namespaces_tokens() {
        let names = vec!["a", "b", "c", "d"];
        assert_eq!(
            paginate(names.clone(), None, Some(2)),
            (vec!["a".into(), "b".into()], Some("b".into()))
        );
        assert_eq!(
            paginate(names.clone(), Some("b".into()), Some(2)),
            (vec!["c".into(), "d".into()], None)
        );
        assert_eq!(
            paginate(names.clone(), Some("bb".into()), None),
            (vec!["c".into(), "d".into()], None)
        );
        assert_eq!(paginate(names.clone(), None, Some(0)), (vec![], None));
        assert_eq!(paginate(names, Some("z".into()), Some(1)), (vec![], None));
    }
}
