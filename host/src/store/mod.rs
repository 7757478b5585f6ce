//! The data plane: lance datasets opened through one shared [`Session`], cached per
//! (table location, branch), always checked for freshness before use so that writes made by
//! another process or replica are seen. Writes to one (table, branch) are serialised inside
//! this process so concurrent clients queue instead of failing on optimistic-commit conflicts;
//! lance's own commit protocol still protects against other writers.

mod backfill;
pub mod blobs;
mod branch_merge;
mod columns;
mod flat_search;
mod history;
mod indexes;
mod prewarm;
mod query;
mod staged;
mod upkeep;
mod vector_cache;
mod views;
mod write;

pub use backfill::*;
pub use columns::*;
pub use history::*;
pub use indexes::*;
pub use query::*;
pub use upkeep::*;
pub use vector_cache::VectorCache;
pub use write::*;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use lance::Dataset;
use lance::dataset::builder::DatasetBuilder;
use lance::session::Session;
use lance_namespace::ErrorCode;

use crate::error::{ApiError, ApiResult};

type Key = (String, Option<String>);

pub struct Store {
    session: Arc<Session>,
    cache: Mutex<HashMap<Key, Arc<Dataset>>>,
    write_locks: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
    /// Decoded vector columns for exact search without an index.
    pub vectors: VectorCache,
    /// `--storage-option`s, for every dataset opened or written.
    storage_options: HashMap<String, String>,
}

/// Which state of a table a request reads: a branch (None = main) and a version (None = latest).
#[derive(Debug, Clone, Default)]
pub struct At {
    pub branch: Option<String>,
    pub version: Option<u64>,
}

impl At {
    pub fn new(branch: Option<String>, version: Option<i64>) -> ApiResult<Self> {
        let version = match version {
            Some(v) if v < 0 => {
                return Err(ApiError::invalid(format!("version must be >= 0, got {v}")));
            }
            Some(v) => Some(v as u64),
            None => None,
        };
        Ok(Self {
            branch: normalize_branch(branch),
            version,
        })
    }
}

/// "main" and "" both mean the main branch.
pub fn normalize_branch(branch: Option<String>) -> Option<String> {
    branch.filter(|b| !b.is_empty() && b != "main")
}

impl Store {
    /// Datasets held open in the cache, for metrics.
    pub fn cached_datasets(&self) -> usize {
        self.cache.lock().unwrap().len()
    }

    /// A store sharing `session`, keeping up to `vector_cache_bytes` of decoded vectors.
    pub fn new(
        session: Arc<Session>,
        vector_cache_bytes: usize,
        storage_options: HashMap<String, String>,
    ) -> Self {
        Self {
            session,
            cache: Mutex::default(),
            write_locks: Mutex::default(),
            vectors: VectorCache::new(vector_cache_bytes),
            storage_options,
        }
    }

    pub fn session(&self) -> Arc<Session> {
        self.session.clone()
    }

    /// Lance's object-store parameters for this server's `--storage-option`s.
    pub fn store_params(&self) -> lance::io::ObjectStoreParams {
        crate::root::store_params(&self.storage_options)
    }

    pub fn storage_options(&self) -> &HashMap<String, String> {
        &self.storage_options
    }

    /// The latest version of `branch`, fresh.
    pub async fn latest(&self, location: &str, branch: Option<&str>) -> ApiResult<Arc<Dataset>> {
        let key = (location.to_string(), branch.map(str::to_string));
        let cached = self.cache.lock().unwrap().get(&key).cloned();
        if let Some(ds) = cached {
            let latest = ds.latest_version_id().await.map_err(ApiError::from)?;
            if latest == ds.version().version {
                return Ok(ds);
            }
            let mut fresh = (*ds).clone();
            fresh.checkout_latest().await.map_err(ApiError::from)?;
            let fresh = Arc::new(fresh);
            self.remember(location, branch, fresh.clone());
            return Ok(fresh);
        }
        let ds = Arc::new(self.load(location, branch).await?);
        self.remember(location, branch, ds.clone());
        Ok(ds)
    }

    /// The dataset as `at` asks: latest of its branch, or a pinned version of it.
    pub async fn read(&self, location: &str, at: &At) -> ApiResult<Arc<Dataset>> {
        let ds = self.latest(location, at.branch.as_deref()).await?;
        match at.version {
            None => Ok(ds),
            Some(v) if v == ds.version().version => Ok(ds),
            Some(v) => ds.checkout_version(v).await.map(Arc::new).map_err(|e| {
                ApiError::from(e).or_not_found(
                    ErrorCode::TableVersionNotFound,
                    format!("version {v} not found"),
                )
            }),
        }
    }

    async fn load(&self, location: &str, branch: Option<&str>) -> ApiResult<Dataset> {
        let main = DatasetBuilder::from_uri(location)
            .with_session(self.session.clone())
            .with_storage_options(self.storage_options.clone())
            .load()
            .await
            .map_err(ApiError::from)?;
        match branch {
            None => Ok(main),
            Some(b) => main
                .checkout_branch(b)
                .await
                .map_err(|e| branch_error(e, b)),
        }
    }

    pub fn remember(&self, location: &str, branch: Option<&str>, ds: Arc<Dataset>) {
        let key = (location.to_string(), branch.map(str::to_string));
        let mut cache = self.cache.lock().unwrap();
        // Never replace a newer dataset with an older one (two writers finishing out of order).
        if let Some(old) = cache.get(&key)
            && old.version().version > ds.version().version
        {
            return;
        }
        cache.insert(key, ds);
    }

    /// Forget every cached state of a table (dropped, deregistered, overwritten by a restore
    /// on another branch).
    pub fn forget(&self, location: &str) {
        self.cache
            .lock()
            .unwrap()
            .retain(|(loc, _), _| loc != location);
    }

    /// Serialise writers of one (table, branch) inside this process.
    pub async fn write_lock(
        &self,
        location: &str,
        branch: Option<&str>,
    ) -> tokio::sync::OwnedMutexGuard<()> {
        let key = (location.to_string(), branch.map(str::to_string));
        let lock = self
            .write_locks
            .lock()
            .unwrap()
            .entry(key)
            .or_default()
            .clone();
        lock.lock_owned().await
    }
}

pub fn branch_error(err: lance_core::Error, branch: &str) -> ApiError {
    let api = ApiError::from(err);
    match api.code {
        ErrorCode::TableNotFound
        | ErrorCode::TableTagNotFound
        | ErrorCode::TableVersionNotFound => ApiError::new(
            ErrorCode::TableBranchNotFound,
            format!("branch not found: {branch}"),
        ),
        _ if api.message.contains("not found") || api.message.contains("Not found") => {
            ApiError::new(
                ErrorCode::TableBranchNotFound,
                format!("branch not found: {branch}"),
            )
        }
        _ => api,
    }
}
