//! Streaming writes on lance's MemWAL (`lance::dataset::mem_wal`), behind the lancedb LSM
//! calls. A table gets lance's MemWAL index from `set_lsm_write_spec`; from then on its
//! upserts go to lance shard writers (a write-ahead log on the table's store plus an in-memory
//! memtable per shard) instead of being commits, queries read the base table, the flushed
//! generations and the memtables through lance's `LsmScanner`, and upkeep merges flushed
//! generations into the base table (`compact`). Nothing here is an LSM of our own: routing
//! rows to shards, holding one writer per shard, and driving the merge are what lance leaves
//! to its embedder.
//!
//! A shard's writer lives in the process that last claimed the shard's epoch (lance's fencing:
//! a claim replays the shard's WAL and fences the previous holder out). A write or read on a
//! node that does not hold a shard claims it; a holder that finds itself fenced reopens
//! (claiming back) and writes again. A write is acknowledged only once its writer is confirmed
//! the shard's owner after its WAL entry was stored (owner.rs), so an acknowledged write is
//! never lost to a takeover, an unset or reclaim, whatever files they removed.

mod compact;
mod owner;
mod read;
mod reclaim;
mod seal;
mod spec;
mod stats;
mod write;

pub use compact::CompactReport;
pub use read::LsmRead;
pub use reclaim::ReclaimReport;
pub use spec::{LsmWriteSpec, Sharding};
pub use stats::LsmStats;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lance::Dataset;
use lance::dataset::mem_wal::scanner::{DatasetCache, SsTableCache};
use lance::dataset::mem_wal::{
    DatasetMemWalExt, ShardManifestStore, ShardWriter, ShardWriterConfig,
};
use lance::index::DatasetIndexExt;
use lance_index::mem_wal::{MEM_WAL_INDEX_NAME, MemWalIndexDetails};
use uuid::Uuid;

use super::Store;
use crate::error::{ApiError, ApiResult};

/// The most shard writers one table may have open in this process (lance's bucket limit).
const MAX_SHARDS_PER_TABLE: usize = 1024;

/// How long a write trusts this process's last look at whether a table has a spec.
const SPEC_TRUST: Duration = Duration::from_secs(1);

/// A table with an LSM write spec, as a write found it.
pub struct LsmTable {
    ds: Arc<Dataset>,
    installed: Installed,
}

impl LsmTable {
    pub fn primary_key(&self) -> &[String] {
        &self.installed.pk
    }
}

/// Key of `writer_config_defaults` under which a spec records the seed its shard ids are
/// derived from (so a spec set again after an unset starts on fresh shards). Never shown.
const SHARD_SEED_KEY: &str = "lancet.shard_seed";

/// A shard's writer, opened once however many requests ask for it at the same moment.
type WriterCell = Arc<tokio::sync::OnceCell<Arc<owner::Owned>>>;

/// Shard writers held by this process, by (table location, shard id).
pub struct Writers {
    open: Mutex<HashMap<(String, Uuid), WriterCell>>,
    /// Opened generation datasets, so a query does not read their manifests again.
    sstables: Arc<dyn DatasetCache>,
    /// Identity-sharded shards known to belong to a spec: (seed, shard).
    ours: Mutex<std::collections::HashSet<(String, Uuid)>>,
    /// Per table: LSM writes hold it shared, an unset exclusively (so no write lands in a WAL
    /// the unset is about to remove).
    gates: Mutex<HashMap<String, Arc<tokio::sync::RwLock<()>>>>,
    /// The WAL group-commit window of writers this server opens (`--lsm-wal-flush-interval`),
    /// unless the table's spec records its own.
    wal_flush_interval: Mutex<Option<Duration>>,
    /// Per dataset uri, the version last asked about and its MemWAL index: every read and
    /// write asks, and a version's answer never changes (a spec set or unset is a commit).
    installed: Mutex<HashMap<String, (u64, Option<Installed>)>>,
    /// When each shard's merged generations, WAL and manifest versions may go.
    reclaim: reclaim::Reclaimer,
}

/// Dataset uris whose answer [`Writers::installed`] keeps before starting over.
const MAX_INSTALLED_ENTRIES: usize = 10_000;

impl Default for Writers {
    fn default() -> Self {
        Self {
            open: Mutex::default(),
            sstables: Arc::new(SsTableCache::new(1024)),
            ours: Mutex::default(),
            gates: Mutex::default(),
            wal_flush_interval: Mutex::default(),
            installed: Mutex::default(),
            reclaim: reclaim::Reclaimer::default(),
        }
    }
}

impl Writers {
    pub fn set_wal_flush_interval(&self, interval: Duration) {
        *self.wal_flush_interval.lock().unwrap() = Some(interval);
    }

    /// How long each step of reclaiming merged generations waits after the one before
    /// (`--lsm-reclaim-after`).
    pub fn set_reclaim_grace(&self, grace: Duration) {
        self.reclaim.set_grace(grace);
    }

    fn wal_flush_interval(&self) -> Duration {
        self.wal_flush_interval
            .lock()
            .unwrap()
            .unwrap_or(Duration::from_millis(2))
    }

    fn gate(&self, location: &str) -> Arc<tokio::sync::RwLock<()>> {
        self.gates
            .lock()
            .unwrap()
            .entry(location.to_string())
            .or_default()
            .clone()
    }

    /// The writers this process holds for `location`.
    fn held(&self, location: &str) -> Vec<Arc<ShardWriter>> {
        self.open
            .lock()
            .unwrap()
            .iter()
            .filter(|((l, _), _)| l == location)
            .filter_map(|(_, cell)| cell.get().map(|o| o.writer.clone()))
            .collect()
    }

    fn holds(&self, location: &str, shard: Uuid) -> Option<Arc<ShardWriter>> {
        self.open
            .lock()
            .unwrap()
            .get(&(location.to_string(), shard))
            .and_then(|cell| cell.get().map(|o| o.writer.clone()))
    }

    /// Forget a writer that lost its shard (fenced out, poisoned, or its files removed); the
    /// next use opens a new one, and this one is aborted.
    fn drop_writer(&self, location: &str, shard: Uuid, writer: &Arc<ShardWriter>) {
        let mut open = self.open.lock().unwrap();
        let key = (location.to_string(), shard);
        if open
            .get(&key)
            .and_then(|c| c.get())
            .is_some_and(|o| Arc::ptr_eq(&o.writer, writer))
        {
            open.remove(&key);
            retire(writer.clone(), Ending::Abort);
        }
    }

    /// Take every writer of `location` out of the registry (to close them).
    pub(super) fn take_all(&self, location: &str) -> Vec<Arc<ShardWriter>> {
        let mut open = self.open.lock().unwrap();
        let keys: Vec<_> = open
            .keys()
            .filter(|(l, _)| l == location)
            .cloned()
            .collect();
        keys.into_iter()
            .filter_map(|k| {
                open.remove(&k)
                    .and_then(|c| c.get().map(|o| o.writer.clone()))
            })
            .collect()
    }
}

/// What a table's MemWAL index says, read from one dataset version.
#[derive(Clone, Debug)]
pub(crate) struct Installed {
    pub details: MemWalIndexDetails,
    pub pk: Vec<String>,
}

impl Installed {
    fn seed(&self) -> &str {
        self.details
            .writer_config_defaults
            .get(SHARD_SEED_KEY)
            .map(String::as_str)
            .unwrap_or("")
    }

    /// The generation of `shard` the base table already holds (0: none).
    fn compacted(&self, shard: Uuid) -> u64 {
        self.details
            .compacted_sstables
            .iter()
            .filter(|c| c.shard_id == shard)
            .map(|c| c.generation)
            .max()
            .unwrap_or(0)
    }
}

impl Store {
    /// The table's MemWAL index, if it has one (`None`: not an LSM table).
    pub(crate) async fn lsm_installed(&self, ds: &Dataset) -> ApiResult<Option<Installed>> {
        // Most tables have no index at all: answer from the manifest without a lookup.
        if ds.manifest.index_section.is_none() {
            return Ok(None);
        }
        let version = ds.manifest.version;
        if let Some((v, answer)) = self.lsm.installed.lock().unwrap().get(ds.uri())
            && *v == version
        {
            return Ok(answer.clone());
        }
        let answer = self.read_installed(ds).await?;
        let mut known = self.lsm.installed.lock().unwrap();
        if known.len() >= MAX_INSTALLED_ENTRIES {
            known.clear();
        }
        known.insert(ds.uri().to_string(), (version, answer.clone()));
        Ok(answer)
    }

    async fn read_installed(&self, ds: &Dataset) -> ApiResult<Option<Installed>> {
        let has = ds
            .load_indices()
            .await
            .map_err(ApiError::from)?
            .iter()
            .any(|i| i.name == MEM_WAL_INDEX_NAME);
        if !has {
            return Ok(None);
        }
        let Some(details) = ds.mem_wal_index_details().await.map_err(ApiError::from)? else {
            return Ok(None);
        };
        let pk = ds
            .schema()
            .unenforced_primary_key()
            .iter()
            .map(|f| f.name.clone())
            .collect();
        Ok(Some(Installed { details, pk }))
    }

    /// The primary key of a table with an LSM write spec (`None`: the table has none).
    pub async fn lsm_primary_key(&self, ds: &Dataset) -> ApiResult<Option<Vec<String>>> {
        Ok(self.lsm_installed(ds).await?.map(|i| i.pk))
    }

    /// A write's view of the table's LSM state (`None`: a branch, or a table without a spec).
    /// It trusts what this process saw of the table within the last second: a spec changes
    /// rarely, and an unset on this node waits for the writes in flight (`gate`).
    pub async fn lsm_table(
        &self,
        location: &str,
        branch: Option<&str>,
    ) -> ApiResult<Option<LsmTable>> {
        if branch.is_some() {
            return Ok(None);
        }
        let ds = self.recent(location, SPEC_TRUST).await?;
        Ok(self
            .lsm_installed(&ds)
            .await?
            .map(|installed| LsmTable { ds, installed }))
    }

    /// Whether the latest main-branch state of `location` has an LSM write spec.
    pub async fn lsm_enabled(&self, ds: &Dataset) -> ApiResult<bool> {
        Ok(self.lsm_installed(ds).await?.is_some())
    }

    /// This process's writer for `shard` of the table `ds` is the latest state of, opened (and
    /// the shard claimed) when it holds none, with what this process has confirmed of its
    /// ownership (what a write needs before it is acknowledged: owner.rs).
    async fn shard_owner(
        &self,
        location: &str,
        ds: &Dataset,
        installed: &Installed,
        shard: Uuid,
        field_values: Option<HashMap<String, Vec<u8>>>,
        purpose: Purpose,
    ) -> ApiResult<Arc<owner::Owned>> {
        let cell = {
            let mut open = self.lsm.open.lock().unwrap();
            let key = (location.to_string(), shard);
            // Identity sharding opens a writer per value: bounded, so a column of a million
            // distinct values cannot make a million writers (and WAL tickers).
            if !open.contains_key(&key)
                && open.keys().filter(|(l, _)| l == location).count() >= MAX_SHARDS_PER_TABLE
            {
                return Err(ApiError::invalid(format!(
                    "the table's LSM spec spreads writes over more than {MAX_SHARDS_PER_TABLE} \
                     shards: shard by a column with fewer values, or use bucket sharding"
                )));
            }
            open.entry(key).or_default().clone()
        };
        let writer = cell
            .get_or_try_init(|| async {
                // An unset in progress (seal.rs): checked before opening (not to fence the
                // unsetting node for nothing) and after (a shard it may not have listed).
                let unset = purpose == Purpose::Unset;
                if !unset && self.lsm_unsetting(ds).await? {
                    return Err(seal::unsetting_error());
                }
                let store = ds.object_store(None).await.map_err(ApiError::from)?;
                let manifests =
                    ShardManifestStore::new(store.clone(), &ds.branch_location().path, shard, 2);
                let manifest = manifests.latest().await.map_err(ApiError::from)?;
                if manifest
                    .as_ref()
                    .is_some_and(|m| m.status == lance_index::mem_wal::ShardStatus::Sealed)
                {
                    return Err(seal::unsetting_error());
                }
                if let Some(values) = field_values
                    && manifest.is_none()
                {
                    // Record which shard value this shard holds (shown by get_lsm_stats);
                    // idempotent, and a no-op once the shard has a manifest.
                    let spec_id = installed
                        .details
                        .sharding_specs
                        .first()
                        .map_or(0, |s| s.spec_id);
                    manifests
                        .initialize_shard(spec_id, values)
                        .await
                        .map_err(ApiError::from)?;
                }
                let config = self.writer_config(installed)?;
                let writer = Arc::new(ds.mem_wal_writer(shard, config).await.map_err(|e| {
                    if lost_ownership(&e) {
                        // Another node claimed the shard while this one replayed it.
                        ApiError::unavailable(format!(
                            "shard {shard} was claimed by another node while this one opened \
                             it: retry ({e})"
                        ))
                    } else {
                        ApiError::from(e)
                    }
                })?);
                let base = ds.branch_location().path;
                let owned = |writer| Arc::new(owner::Owned::new(writer, store.clone(), &base));
                if unset {
                    return Ok(owned(writer));
                }
                if self.lsm_unsetting(ds).await? {
                    // What it replayed stays in the WAL, for the unset's next claim.
                    retire(writer, Ending::Abort);
                    return Err(seal::unsetting_error());
                }
                // A write that trusted a view of the spec up to SPEC_TRUST old may meet a
                // table whose spec was unset (or set again) since: its rows would land in a
                // WAL nobody reads. Checked once per writer opened; a writer held from before
                // the unset is caught after its append instead (owner.rs).
                let now = self.latest(location, None).await?;
                let current = self.lsm_installed(&now).await?;
                if current.as_ref().map(Installed::seed) != Some(installed.seed()) {
                    // Nothing of it may reach the directory removed next.
                    if let Err(e) = writer.abort().await {
                        tracing::debug!(%location, %shard, error = %e, "aborting a shard opened after its spec went");
                    }
                    drop(writer);
                    if let Err(e) = owner::remove_shard_files(&store, &base, shard).await {
                        tracing::debug!(%location, %shard, error = %e, "could not remove a shard opened after its spec went");
                    }
                    return Err(ApiError::unavailable(
                        "the table's LSM write spec changed during this write: nothing of it \
                         is acknowledged; retry",
                    ));
                }
                Ok::<_, ApiError>(owned(writer))
            })
            .await;
        match writer {
            Ok(w) => Ok(w.clone()),
            Err(e) => {
                // Not opened: let the next call try again.
                let mut open = self.lsm.open.lock().unwrap();
                let key = (location.to_string(), shard);
                if open.get(&key).is_some_and(|c| c.get().is_none()) {
                    open.remove(&key);
                }
                Err(e)
            }
        }
    }

    /// The writer settings of a table's spec, over this server's defaults: durable writes
    /// (an upsert is answered once its WAL entry is stored) with a short group-commit window.
    fn writer_config(&self, installed: &Installed) -> ApiResult<ShardWriterConfig> {
        let mut config = ShardWriterConfig {
            durable_write: true,
            max_wal_flush_interval: Some(self.lsm.wal_flush_interval()),
            stats_log_interval: None,
            ..Default::default()
        };
        spec::apply_writer_defaults(&mut config, &installed.details.writer_config_defaults)?;
        Ok(config)
    }

    /// Claim every shard of the table (opening writers this process does not hold), and drop
    /// held writers another node has fenced out, so what they hold is read from the WAL again.
    /// A sealed shard (an unset in progress) is not claimed: it holds nothing unflushed, and
    /// its manifest is returned for reads.
    async fn claim_all(
        &self,
        location: &str,
        ds: &Dataset,
        installed: &Installed,
        purpose: Purpose,
    ) -> ApiResult<Claimed> {
        let shards = self.lsm_shards(ds, installed).await?;
        let mut claimed = Claimed {
            writers: Vec::with_capacity(shards.len()),
            sealed: Vec::new(),
        };
        for shard in shards {
            let writer = match self.lsm.holds(location, shard) {
                Some(w) if w.check_fenced().await.is_ok() => w,
                held => {
                    if let Some(w) = held {
                        self.lsm.drop_writer(location, shard, &w);
                    }
                    if let Some(manifest) = self.sealed_manifest(ds, shard).await? {
                        claimed.sealed.push(manifest);
                        continue;
                    }
                    self.shard_owner(location, ds, installed, shard, None, purpose)
                        .await?
                        .writer
                        .clone()
                }
            };
            claimed.writers.push(writer);
        }
        Ok(claimed)
    }

    /// The shards of the table's current spec that have been written. A spec set again
    /// after an unset (or on a table overwritten under the same name) has a new seed, so
    /// shards an earlier spec left behind are not read as this one's.
    pub(crate) async fn lsm_shards(
        &self,
        ds: &Dataset,
        installed: &Installed,
    ) -> ApiResult<Vec<Uuid>> {
        let listed = ds
            .list_mem_wal_latest_shard_ids()
            .await
            .map_err(ApiError::from)?;
        let Some(spec) = installed.details.sharding_specs.first() else {
            return Ok(Vec::new());
        };
        let expected: Option<std::collections::HashSet<Uuid>> =
            match spec.fields.first().and_then(|f| f.transform.as_deref()) {
                Some("bucket") => Some(
                    (0..installed.details.num_shards.max(1) as i32)
                        .map(|b| write::shard_id(installed.seed(), spec.spec_id, &b.to_le_bytes()))
                        .collect(),
                ),
                Some("unsharded") => Some(
                    [write::shard_id(
                        installed.seed(),
                        spec.spec_id,
                        &0i32.to_le_bytes(),
                    )]
                    .into(),
                ),
                _ => None,
            };
        if let Some(expected) = expected {
            return Ok(listed
                .into_iter()
                .filter(|s| expected.contains(s))
                .collect());
        }
        // Identity sharding has a shard per value: a shard says whose it is in its manifest.
        let store = ds.object_store(None).await.map_err(ApiError::from)?;
        let base = ds.branch_location().path;
        let mut out = Vec::new();
        for shard in listed {
            let key = (installed.seed().to_string(), shard);
            if self.lsm.ours.lock().unwrap().contains(&key) {
                out.push(shard);
                continue;
            }
            let manifest = ShardManifestStore::new(store.clone(), &base, shard, 2)
                .latest()
                .await
                .map_err(ApiError::from)?;
            let seed = manifest
                .as_ref()
                .and_then(|m| m.shard_field_values.get(SHARD_SEED_KEY).cloned());
            if seed.as_deref() == Some(installed.seed().as_bytes()) {
                self.lsm.ours.lock().unwrap().insert(key);
                out.push(shard);
            }
        }
        Ok(out)
    }

    /// Close this process's writers of `location`: their memtables are flushed to generations
    /// first. Another node (or this one) claims the shards again on their next use.
    pub async fn lsm_close_writers(&self, location: &str) -> ApiResult<usize> {
        let writers = self.lsm.take_all(location);
        let n = writers.len();
        for writer in writers {
            match Arc::try_unwrap(writer) {
                Ok(w) => w.close().await.map_err(ApiError::from)?,
                // A request still running holds it: flush now, close once it is done.
                Err(shared) => {
                    let fence = shared.force_freeze_active().await;
                    retire(shared, Ending::Close);
                    fence
                        .map_err(ApiError::from)?
                        .wait()
                        .await
                        .map_err(ApiError::from)?;
                }
            }
        }
        Ok(n)
    }

    /// Rows in this process's memtables of `location`.
    pub async fn lsm_memtable_rows(&self, location: &str) -> u64 {
        let mut rows = 0;
        for w in self.lsm.held(location) {
            if let Ok(refs) = w.in_memory_memtable_refs().await {
                rows += std::iter::once(&refs.active)
                    .chain(refs.frozen.iter())
                    .map(|m| m.batch_store.total_rows() as u64)
                    .sum::<u64>();
            }
        }
        rows
    }

    /// Seal every shard's memtable into a flushed generation and wait for the flushes
    /// (`flush_lsm`); claims the shards this process does not hold first.
    pub async fn lsm_flush(&self, location: &str) -> ApiResult<usize> {
        let ds = self.latest(location, None).await?;
        let installed = require(self.lsm_installed(&ds).await?)?;
        let writers = self
            .claim_all(location, &ds, &installed, Purpose::Use)
            .await?
            .writers;
        let mut frozen = 0;
        for writer in &writers {
            let fence = writer.force_freeze_active().await.map_err(ApiError::from)?;
            frozen += usize::from(fence.frozen_generation().is_some());
            fence.wait().await.map_err(ApiError::from)?;
        }
        Ok(frozen)
    }
}

/// Why a writer is opened: an unset (seal.rs) opens writers past its own marker.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Use,
    Unset,
}

/// The shards of a table as [`Store::claim_all`] found them.
struct Claimed {
    /// This process's writers of the shards it holds or claimed.
    writers: Vec<Arc<ShardWriter>>,
    /// The manifests of sealed shards (an unset is in progress).
    sealed: Vec<lance_index::mem_wal::ShardManifest>,
}

/// How a writer taken out of the registry ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ending {
    /// Flush its memtable into a generation, then stop (a writer that still owns its shard).
    Close,
    /// Stop without writing anything (lance's `abort`): a writer that lost its shard, or
    /// whose files are being removed. What it holds is either in the WAL its successor
    /// replayed or was never acknowledged (owner.rs); a flush would only write files into a
    /// shard it no longer owns, or into a directory just removed.
    Abort,
}

/// End a writer taken out of the registry once nothing else holds it. A lance shard writer
/// runs background tasks (WAL ticker, flush handlers) until it is closed or aborted; dropping
/// it would leave them running.
pub(super) fn retire(writer: Arc<ShardWriter>, ending: Ending) {
    tokio::spawn(async move {
        let mut writer = writer;
        loop {
            match Arc::try_unwrap(writer) {
                Ok(w) => {
                    let shard = w.shard_id();
                    let ended = match ending {
                        Ending::Close => w.close().await,
                        Ending::Abort => w.abort().await,
                    };
                    if let Err(e) = ended {
                        tracing::debug!(%shard, error = %e, ?ending, "retired shard writer ended with an error");
                    }
                    return;
                }
                Err(shared) => {
                    writer = shared;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    });
}

fn require(installed: Option<Installed>) -> ApiResult<Installed> {
    installed.ok_or_else(|| {
        ApiError::invalid("the table has no LSM write spec: set one with set_lsm_write_spec first")
    })
}

/// A lance error from a shard writer that means "this writer no longer owns its shard" (a
/// peer claimed it, or its own WAL write failed): reopen and retry.
fn lost_ownership(e: &lance_core::Error) -> bool {
    e.fence_reason().is_some()
}
