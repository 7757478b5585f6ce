//! `get_lsm_stats`: per-shard state of an LSM table, in the lancedb client's shape.

use lance::dataset::mem_wal::ShardManifestStore;
use serde::Serialize;

use crate::error::{ApiError, ApiResult};
use crate::store::Store;

#[derive(Debug, Serialize)]
pub struct LsmStats {
    pub buckets: Vec<BucketStats>,
}

#[derive(Debug, Serialize)]
pub struct BucketStats {
    pub shard_id: String,
    /// `open`: this node holds the shard's writer; `closed`: no node here does (its rows are
    /// in its WAL and generations).
    pub status: &'static str,
    pub writer_epoch: u64,
    pub manifest_version: u64,
    pub current_generation: u64,
    pub replay_after_wal_entry_position: u64,
    pub wal_entry_position_last_seen: u64,
    /// Flushed generations not merged into the base table yet: what `checkpoint_lsm` waits for.
    pub generations: Vec<GenerationStats>,
    /// Whether a merge of this table's generations is running.
    pub compacting: bool,
    /// This node's memtables of the shard (active first); `null` when it holds no writer.
    pub memtables: Option<Vec<MemtableStats>>,
}

#[derive(Debug, Serialize)]
pub struct GenerationStats {
    pub generation: u64,
    pub bytes: u64,
    /// Live rows (asked for with `include_generation_rows`).
    pub rows: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct MemtableStats {
    pub generation: u64,
    pub rows: u64,
    pub bytes: u64,
    pub batches: u64,
    pub indexes: Vec<String>,
}

impl Store {
    /// The table's LSM state (`None`: no spec). `compacting` says whether a merge is running.
    pub async fn lsm_stats(
        &self,
        location: &str,
        include_generation_rows: bool,
        compacting: bool,
    ) -> ApiResult<Option<LsmStats>> {
        let ds = self.latest(location, None).await?;
        let Some(installed) = self.lsm_installed(&ds).await? else {
            return Ok(None);
        };
        let store = ds.object_store(None).await.map_err(ApiError::from)?;
        let base = ds.branch_location().path;
        let mut buckets = Vec::new();
        for shard in self.lsm_shards(&ds, &installed).await? {
            let held = self.lsm.holds(location, shard);
            let manifest = match &held {
                Some(w) => w.manifest().await.map_err(ApiError::from)?,
                None => ShardManifestStore::new(store.clone(), &base, shard, 2)
                    .latest()
                    .await
                    .map_err(ApiError::from)?,
            };
            let Some(manifest) = manifest else { continue };
            let merged = installed.compacted(shard);
            let mut generations = Vec::new();
            for s in manifest.sstables.iter().filter(|s| s.generation > merged) {
                let rows = if include_generation_rows {
                    let generation = self.open_generation(&ds, shard, s).await?;
                    Some(generation.count_rows(None).await.map_err(ApiError::from)? as u64)
                } else {
                    None
                };
                generations.push(GenerationStats {
                    generation: s.generation,
                    bytes: s.in_memory_bytes.unwrap_or(0),
                    rows,
                });
            }
            let memtables = match &held {
                None => None,
                Some(w) => {
                    let indexes = w.maintained_index_names().await;
                    let refs = w.in_memory_memtable_refs().await.map_err(ApiError::from)?;
                    Some(
                        std::iter::once(&refs.active)
                            .chain(refs.frozen.iter())
                            .map(|m| MemtableStats {
                                generation: m.generation,
                                rows: m.batch_store.total_rows() as u64,
                                bytes: m.row_bytes() as u64,
                                batches: m.batch_store.len() as u64,
                                indexes: indexes.clone(),
                            })
                            .collect(),
                    )
                }
            };
            buckets.push(BucketStats {
                shard_id: shard.to_string(),
                status: if held.is_some() { "open" } else { "closed" },
                writer_epoch: manifest.writer_epoch,
                manifest_version: manifest.version,
                current_generation: manifest.current_generation,
                replay_after_wal_entry_position: manifest.replay_after_wal_entry_position,
                wal_entry_position_last_seen: manifest.wal_entry_position_last_seen,
                generations,
                compacting,
                memtables,
            });
        }
        Ok(Some(LsmStats { buckets }))
    }
}
