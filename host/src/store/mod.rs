//! The data plane: lance datasets opened through one shared [`Session`], cached per
//! (table location, branch). Writers and jobs always check a cached dataset is the latest
//! version before use ([`Store::latest`]); reads ([`Store::read`]) do so unless they checked
//! within the read consistency interval (`--read-consistency-interval`), and this process's
//! own commits replace the cached dataset at once, so a node always reads its own writes.
//! Writes to one (table, branch) are serialised inside
//! this process so concurrent clients queue instead of failing on optimistic-commit conflicts;
//! lance's own commit protocol still protects against other writers.

mod backfill;
pub mod blobs;
mod branch_merge;
mod columns;
mod flat_search;
mod fts_take;
mod history;
mod index_count;
mod indexes;
mod lineage;
mod local_reads;
pub mod lsm;
mod plan_run;
mod prewarm;
mod query;
mod row_read;
mod staged;
pub(crate) mod stamp;
mod upkeep;
mod vector_cache;
mod views;
mod write;

pub use backfill::*;
pub use columns::*;
pub use history::*;
pub use index_count::count_rows;
pub use indexes::*;
pub use local_reads::{LocalReadStats, LocalReads};
pub use query::*;
pub use upkeep::*;
pub use vector_cache::VectorCache;
pub use write::*;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lance::Dataset;
use lance::dataset::builder::DatasetBuilder;
use lance::session::Session;
use lance_namespace::ErrorCode;

use crate::error::{ApiError, ApiResult};

type Key = (String, Option<String>);

pub struct Store {
    session: Arc<Session>,
    cache: Mutex<HashMap<Key, Cached>>,
    /// How long a read trusts a dataset checked (or written) by this process without asking
    /// the store again; zero: every read checks.
    read_consistency: Duration,
    write_locks: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
    /// Decoded vector columns for exact search without an index.
    pub vectors: VectorCache,
    /// `--storage-option`s, for every dataset opened or written.
    storage_options: HashMap<String, String>,
    /// Shard writers of LSM tables held by this process.
    pub lsm: lsm::Writers,
    /// Searches without a filter read what the page cache holds of local tables in place.
    pub local_reads: LocalReads,
}

struct Cached {
    ds: Arc<Dataset>,
    /// When it was last known to be the latest version (taken before the check began).
    checked: Instant,
    /// On a local root, the `_versions` directory time read before the check that found
    /// `ds` latest, when old enough to be a stamp (see [`stamp`]): while the directory still
    /// has this time, `ds` is still the latest version.
    dir_time: Option<std::time::SystemTime>,
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
            read_consistency: Duration::ZERO,
            write_locks: Mutex::default(),
            vectors: VectorCache::new(vector_cache_bytes),
            local_reads: LocalReads::new(crate::root::store_params(&storage_options).block_size),
            storage_options,
            lsm: lsm::Writers::default(),
        }
    }

    /// Reads trust what this process saw within `interval` (see the module docs).
    pub fn with_read_consistency(mut self, interval: Duration) -> Self {
        self.read_consistency = interval;
        self
    }

    /// Whether searches without a filter read local tables' cached bytes in place (see
    /// [`LocalReads`]); on unless told.
    pub fn with_inline_local_reads(mut self, on: bool) -> Self {
        self.local_reads.set_enabled(on);
        self
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

    /// The latest version of `branch`, checked against the store now.
    pub async fn latest(&self, location: &str, branch: Option<&str>) -> ApiResult<Arc<Dataset>> {
        let key = (location.to_string(), branch.map(str::to_string));
        let began = Instant::now();
        let cached = self
            .cache
            .lock()
            .unwrap()
            .get(&key)
            .map(|c| (c.ds.clone(), c.dir_time));
        if let Some((ds, dir_time)) = cached {
            let dir = stamp::versions_dir(ds.uri()).and_then(|d| stamp::read(&d));
            // `manifest.version`, not `version()`: the latter builds the version's metadata
            // map, on every read.
            if let (Some((now, _)), Some(then)) = (dir, dir_time)
                && now == then
            {
                self.checked(&key, ds.manifest.version, began, dir_time);
                return Ok(ds);
            }
            let dir_time = dir.and_then(|(t, settled)| settled.then_some(t));
            let latest = ds.latest_version_id().await.map_err(ApiError::from)?;
            if latest == ds.manifest.version {
                self.checked(&key, latest, began, dir_time);
                return Ok(ds);
            }
            let mut fresh = (*ds).clone();
            fresh.checkout_latest().await.map_err(ApiError::from)?;
            let fresh = Arc::new(fresh);
            self.remember_checked(key, fresh.clone(), began, dir_time);
            return Ok(fresh);
        }
        let ds = Arc::new(self.load(location, branch).await?);
        self.remember_checked(key, ds.clone(), began, None);
        Ok(ds)
    }

    /// The latest version of `branch` as a read may see it: the cached one when it was
    /// checked within the read consistency interval, else checked now.
    async fn current(&self, location: &str, branch: Option<&str>) -> ApiResult<Arc<Dataset>> {
        if !self.read_consistency.is_zero() {
            let key = (location.to_string(), branch.map(str::to_string));
            let trusted = self
                .cache
                .lock()
                .unwrap()
                .get(&key)
                .filter(|c| c.checked.elapsed() < self.read_consistency)
                .map(|c| c.ds.clone());
            if let Some(ds) = trusted {
                return Ok(ds);
            }
        }
        self.latest(location, branch).await
    }

    /// The latest main-branch state as this process last checked it, when that was within
    /// `within`; else checked now. For decisions that only read what rarely changes (whether
    /// a table has an LSM write spec), so a stream of small writes does not ask the store
    /// for the latest version once per request.
    pub async fn recent(&self, location: &str, within: Duration) -> ApiResult<Arc<Dataset>> {
        let key = (location.to_string(), None);
        let trusted = self
            .cache
            .lock()
            .unwrap()
            .get(&key)
            .filter(|c| c.checked.elapsed() < within.max(self.read_consistency))
            .map(|c| c.ds.clone());
        match trusted {
            Some(ds) => Ok(ds),
            None => self.latest(location, None).await,
        }
    }

    /// The dataset as `at` asks: latest of its branch (within the read consistency
    /// interval), or a pinned version of it.
    pub async fn read(&self, location: &str, at: &At) -> ApiResult<Arc<Dataset>> {
        let ds = self.current(location, at.branch.as_deref()).await?;
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

    /// `ds` is the latest version of (`location`, `branch`): this process just committed
    /// it.
    pub fn remember(&self, location: &str, branch: Option<&str>, ds: Arc<Dataset>) {
        let key = (location.to_string(), branch.map(str::to_string));
        self.remember_checked(key, ds, Instant::now(), None);
    }

    fn remember_checked(
        &self,
        key: Key,
        ds: Arc<Dataset>,
        checked: Instant,
        dir_time: Option<std::time::SystemTime>,
    ) {
        let mut cache = self.cache.lock().unwrap();
        // Never replace a newer dataset with an older one (two writers finishing out of order).
        if let Some(old) = cache.get(&key)
            && old.ds.version().version > ds.version().version
        {
            return;
        }
        cache.insert(
            key,
            Cached {
                ds,
                checked,
                dir_time,
            },
        );
    }

    /// The cached dataset of `key` was found to be `version`, the latest, at `checked`, with
    /// its `_versions` directory at `dir_time` (when a stamp).
    fn checked(
        &self,
        key: &Key,
        version: u64,
        checked: Instant,
        dir_time: Option<std::time::SystemTime>,
    ) {
        if let Some(c) = self.cache.lock().unwrap().get_mut(key)
            && c.ds.manifest.version == version
            && c.checked < checked
        {
            c.checked = checked;
            c.dir_time = dir_time;
        }
    }

    /// The next read of any branch of `location` checks the store, whatever the interval
    /// (it was committed to other than through this store: a namespace client's version).
    pub fn recheck(&self, location: &str) {
        let mut cache = self.cache.lock().unwrap();
        match Instant::now().checked_sub(self.read_consistency) {
            Some(stale) => cache
                .iter_mut()
                .filter(|((loc, _), _)| loc == location)
                .for_each(|(_, c)| c.checked = c.checked.min(stale)),
            None => cache.retain(|(loc, _), _| loc != location),
        }
    }

    /// Forget every cached state of a table (dropped, deregistered, overwritten by a restore
    /// on another branch).
    pub fn forget(&self, location: &str) {
        self.cache
            .lock()
            .unwrap()
            .retain(|(loc, _), _| loc != location);
        // Shard writers of a dropped table: their WAL is gone with it.
        for writer in self.lsm.take_all(location) {
            lsm::retire(writer, lsm::Ending::Abort);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Int64Array, RecordBatch, RecordBatchIterator};
    use arrow_schema::{DataType, Field, Schema};
    use lance::dataset::{WriteMode, WriteParams};

    fn rows(n: i64) -> (RecordBatch, Arc<Schema>) {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let column = Arc::new(Int64Array::from((0..n).collect::<Vec<_>>())) as ArrayRef;
        (
            RecordBatch::try_new(schema.clone(), vec![column]).unwrap(),
            schema,
        )
    }

    /// Another process appends to the table (not through `store`).
    async fn append_elsewhere(location: &str) {
        let (batch, schema) = rows(5);
        let params = WriteParams {
            mode: WriteMode::Append,
            ..Default::default()
        };
        Dataset::write(
            RecordBatchIterator::new([Ok(batch)], schema),
            location,
            Some(params),
        )
        .await
        .unwrap();
    }

    /// A 10-row table at version 1 in a fresh directory, and a store reading it with
    /// `interval`.
    async fn table(interval: Duration) -> (tempfile::TempDir, String, Store) {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().join("t.lance").to_string_lossy().to_string();
        let store = Store::new(Arc::new(Session::default()), 0, Default::default())
            .with_read_consistency(interval);
        let (batch, schema) = rows(10);
        store
            .create_at(&location, vec![batch], schema, WriteMode::Create)
            .await
            .unwrap();
        (dir, location, store)
    }

    #[tokio::test]
    async fn reads_trust_a_check_for_the_interval_and_recheck_when_told() {
        let (_dir, location, store) = table(Duration::from_secs(3600)).await;
        let at = At::default();
        assert_eq!(
            store.read(&location, &at).await.unwrap().version().version,
            1
        );

        append_elsewhere(&location).await;
        // Within the interval a read trusts its last check; a writer's view never does.
        assert_eq!(
            store.read(&location, &at).await.unwrap().version().version,
            1
        );
        assert_eq!(
            store
                .latest(&location, None)
                .await
                .unwrap()
                .version()
                .version,
            2
        );
        assert_eq!(
            store.read(&location, &at).await.unwrap().version().version,
            2
        );

        append_elsewhere(&location).await;
        store.recheck(&location);
        let ds = store.read(&location, &at).await.unwrap();
        assert_eq!(ds.version().version, 3);
        assert_eq!(ds.count_rows(None).await.unwrap(), 20);
    }

    /// With no interval, every read sees another process's commit: when the `_versions`
    /// directory time is too fresh to be a stamp, when it has settled (then one `stat` says the
    /// cached version is still the latest), and right after a commit lands in the same clock
    /// tick as a settled check.
    #[tokio::test]
    async fn a_local_stamp_never_hides_another_process_commit() {
        let (_dir, location, store) = table(Duration::ZERO).await;
        let at = At::default();
        let version = |ds: Arc<Dataset>| ds.version().version;
        let mut expected = 1;
        for round in 0..6 {
            // Alternate fresh directory times with settled ones.
            if round % 2 == 1 {
                tokio::time::sleep(stamp::GRACE + Duration::from_millis(20)).await;
            }
            assert_eq!(version(store.read(&location, &at).await.unwrap()), expected);
            assert_eq!(version(store.read(&location, &at).await.unwrap()), expected);
            append_elsewhere(&location).await;
            expected += 1;
            assert_eq!(
                version(store.read(&location, &at).await.unwrap()),
                expected,
                "round {round}"
            );
        }
        // A branch has a `_versions` of its own (`tree/<branch>`): its stamp is that one.
        let mut main = Dataset::open(&location).await.unwrap();
        main.create_branch("b", expected, None).await.unwrap();
        let branch = At::new(Some("b".to_string()), None).unwrap();
        tokio::time::sleep(stamp::GRACE + Duration::from_millis(20)).await;
        assert_eq!(
            version(store.read(&location, &branch).await.unwrap()),
            expected
        );
        assert_eq!(
            version(store.read(&location, &branch).await.unwrap()),
            expected
        );
        let mut b = main.checkout_branch("b").await.unwrap();
        let (batch, schema) = rows(5);
        b.append(RecordBatchIterator::new([Ok(batch)], schema), None)
            .await
            .unwrap();
        let on_branch = store.read(&location, &branch).await.unwrap();
        assert_eq!(version(on_branch.clone()), expected + 1);
        assert_eq!(on_branch.count_rows(None).await.unwrap(), 10 + 5 * 7);
        assert_eq!(version(store.read(&location, &at).await.unwrap()), expected);

        let key = (location.clone(), None);
        tokio::time::sleep(stamp::GRACE + Duration::from_millis(20)).await;
        store.read(&location, &at).await.unwrap();
        store.read(&location, &at).await.unwrap();
        assert!(
            store.cache.lock().unwrap()[&key].dir_time.is_some(),
            "a settled directory time is kept as the stamp"
        );
    }
}
