//! Tenants are kept apart physically: each has its own catalog (a `DirectoryNamespace`) rooted
//! at `<root>/tenants/<tenant>`, so no id of one tenant can name anything of another, whatever
//! a request says. Catalogs are opened on first use and kept.

use std::collections::HashMap;
use std::sync::Arc;

use lance::session::Session;

use crate::catalog::Catalog;
use crate::error::{ApiError, ApiResult};

pub struct Tenants {
    root: String,
    session: Arc<Session>,
    storage_options: HashMap<String, String>,
    node: String,
    read_consistency: std::time::Duration,
    /// Read on every request; written once per tenant.
    catalogs: std::sync::RwLock<HashMap<String, Arc<Catalog>>>,
    /// Serialises first opens, so a tenant's catalog is opened once.
    opening: tokio::sync::Mutex<()>,
}

impl Tenants {
    pub fn new(
        root: &str,
        session: Arc<Session>,
        storage_options: HashMap<String, String>,
        node: String,
    ) -> Self {
        Self {
            root: root.trim_end_matches('/').to_string(),
            session,
            storage_options,
            node,
            read_consistency: std::time::Duration::ZERO,
            catalogs: Default::default(),
            opening: Default::default(),
        }
    }

    /// Catalog lookups trust a snapshot checked within `interval` (see `catalog/snapshot.rs`).
    pub fn with_read_consistency(mut self, interval: std::time::Duration) -> Self {
        self.read_consistency = interval;
        self
    }

    pub fn root(&self) -> &str {
        &self.root
    }

    /// Where a tenant's tables live.
    pub fn tenant_root(&self, tenant: &str) -> String {
        format!("{}/tenants/{tenant}", self.root)
    }

    pub async fn catalog(&self, tenant: &str) -> ApiResult<Arc<Catalog>> {
        if let Some(c) = self.catalogs.read().unwrap().get(tenant) {
            return Ok(c.clone());
        }
        crate::auth::check_tenant_name(tenant).map_err(ApiError::invalid)?;
        let _opening = self.opening.lock().await;
        if let Some(c) = self.catalogs.read().unwrap().get(tenant) {
            return Ok(c.clone());
        }
        let root = self.tenant_root(tenant);
        if !root.contains("://") {
            std::fs::create_dir_all(&root)
                .map_err(|e| ApiError::internal(format!("cannot create tenant directory: {e}")))?;
        }
        let catalog = Arc::new(
            Catalog::open(
                &root,
                self.session.clone(),
                &self.storage_options,
                &self.node,
                self.read_consistency,
            )
            .await?,
        );
        self.catalogs
            .write()
            .unwrap()
            .insert(tenant.to_string(), catalog.clone());
        Ok(catalog)
    }

    /// Drops the cached catalog of a deleted tenant.
    pub fn forget(&self, tenant: &str) {
        self.catalogs.write().unwrap().remove(tenant);
    }

    /// Tenants that have a folder under the root.
    pub async fn with_data(&self, root: &crate::root::RootStore) -> ApiResult<Vec<String>> {
        root.list_dirs("tenants").await
    }
}
