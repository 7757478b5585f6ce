//! Merging flushed generations into the base table (`compact_lsm`, and upkeep's `compact_lsm`
//! phase). Lance records how far each shard has been merged (`compacted_sstables` of the
//! MemWAL index) in the same commit that merges the rows, so a merge interrupted anywhere
//! is simply done again: a generation is either in the base table and marked, or not marked.

use std::sync::Arc;

use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::Schema as ArrowSchema;
use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::CommitBuilder;
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::mem_wal::{
    ShardManifestStore, TOMBSTONE, arrow_schema_with_field_ids, reconcile_batches,
};
use lance::dataset::transaction::{Operation, Transaction};
use lance::dataset::write::merge_insert::{MergeInsertBuilder, WhenMatched, WhenNotMatched};
use lance_index::mem_wal::{CompactedSsTable, SsTable};
use serde::Serialize;
use uuid::Uuid;

use super::Installed;
use crate::error::{ApiError, ApiResult};
use crate::store::Store;

/// What a merge of flushed generations did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CompactReport {
    pub generations: usize,
    pub rows_upserted: u64,
    pub rows_deleted: u64,
    pub version: u64,
    /// What merged generations left that this pass deleted (see `reclaim.rs`).
    pub reclaimed: super::ReclaimReport,
}

impl Store {
    /// Merge every flushed generation the base table does not hold yet, oldest first per shard;
    /// then reclaim what generations merged earlier left behind.
    pub async fn lsm_compact(&self, location: &str) -> ApiResult<CompactReport> {
        let mut report = CompactReport::default();
        let ds = self.latest(location, None).await?;
        let Some(installed) = self.lsm_installed(&ds).await? else {
            return Ok(report);
        };
        for (shard, sstables) in self.lsm_pending(&ds, &installed).await? {
            for sstable in sstables {
                let done = self.merge_generation(location, shard, &sstable).await?;
                report.generations += usize::from(done.merged);
                report.rows_upserted += done.upserted;
                report.rows_deleted += done.deleted;
            }
        }
        let latest = self.latest(location, None).await?;
        report.version = latest.version().version;
        if let Some(installed) = self.lsm_installed(&latest).await? {
            report.reclaimed = self.lsm_reclaim(location, &latest, &installed).await?;
        }
        Ok(report)
    }

    /// Each shard's flushed generations the base table (as `ds`) does not hold, oldest first.
    pub(crate) async fn lsm_pending(
        &self,
        ds: &Dataset,
        installed: &Installed,
    ) -> ApiResult<Vec<(Uuid, Vec<SsTable>)>> {
        let store = ds.object_store(None).await.map_err(ApiError::from)?;
        let base = ds.branch_location().path;
        let mut out = Vec::new();
        for shard in self.lsm_shards(ds, installed).await? {
            let manifests = ShardManifestStore::new(store.clone(), &base, shard, 2);
            let Some(manifest) = manifests.latest().await.map_err(ApiError::from)? else {
                continue;
            };
            let merged = installed.compacted(shard);
            let mut sstables: Vec<SsTable> = manifest
                .sstables
                .into_iter()
                .filter(|s| s.generation > merged)
                .collect();
            sstables.sort_by_key(|s| s.generation);
            if !sstables.is_empty() {
                out.push((shard, sstables));
            }
        }
        Ok(out)
    }

    /// Merge one generation into the base table, under the table's write lock. Its deletes
    /// go first (a pass that marks nothing), then its upserts in the commit that marks the
    /// generation merged. Skipped when the base already holds it (another merge got there).
    async fn merge_generation(
        &self,
        location: &str,
        shard: Uuid,
        sstable: &SsTable,
    ) -> ApiResult<Merged> {
        let _guard = self.write_lock(location, None).await;
        let current = self.latest(location, None).await?;
        let Some(installed) = self.lsm_installed(&current).await? else {
            return Ok(Merged::default());
        };
        if installed.compacted(shard) >= sstable.generation {
            return Ok(Merged::default());
        }
        let generation = self.open_generation(&current, shard, sstable).await?;
        // The generation's deletion vector already hides the older rows of a key it holds
        // twice: one row per key is left.
        let rows: Vec<RecordBatch> = generation
            .scan()
            .try_into_stream()
            .await
            .map_err(ApiError::from)?
            .try_collect()
            .await
            .map_err(ApiError::from)?;
        let source = arrow_schema_with_field_ids(generation.schema());
        let target = Arc::new(arrow_schema_with_field_ids(current.schema()));
        let plain: Arc<ArrowSchema> = Arc::new(ArrowSchema::from(current.schema()));
        let (mut live, mut dead) = (Vec::new(), Vec::new());
        for batch in rows {
            let tombstone = batch
                .column_by_name(TOMBSTONE)
                .and_then(|c| c.as_any().downcast_ref::<BooleanArray>().cloned())
                .unwrap_or_else(|| BooleanArray::from(vec![false; batch.num_rows()]));
            let alive: BooleanArray = tombstone
                .iter()
                .map(|t| Some(!t.unwrap_or(false)))
                .collect();
            let kept = arrow_select::filter::filter_record_batch(&batch, &alive)
                .map_err(ApiError::from)?;
            let gone = arrow_select::filter::filter_record_batch(&batch, &tombstone)
                .map_err(ApiError::from)?;
            live.push(kept);
            dead.push(gone);
        }
        let to_base = |batches: Vec<RecordBatch>| -> ApiResult<Vec<RecordBatch>> {
            let batches: Vec<RecordBatch> =
                batches.into_iter().filter(|b| b.num_rows() > 0).collect();
            reconcile_batches(&source, &target, &installed.pk, batches)
                .map_err(ApiError::from)?
                .into_iter()
                .map(|b| {
                    RecordBatch::try_new(plain.clone(), b.columns().to_vec())
                        .map_err(ApiError::from)
                })
                .collect()
        };
        let live = to_base(live)?;
        // A tombstone carries its key and nothing else: the deletes are matched on the key.
        let key_schema = Arc::new(
            plain
                .project(
                    &installed
                        .pk
                        .iter()
                        .map(|k| plain.index_of(k))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(ApiError::from)?,
                )
                .map_err(ApiError::from)?,
        );
        let dead = dead
            .into_iter()
            .filter(|b| b.num_rows() > 0)
            .map(|b| {
                let columns = installed
                    .pk
                    .iter()
                    .map(|k| {
                        b.column_by_name(k).cloned().ok_or_else(|| {
                            ApiError::internal(format!("a tombstone lacks key column '{k}'"))
                        })
                    })
                    .collect::<ApiResult<Vec<_>>>()?;
                RecordBatch::try_new(key_schema.clone(), columns).map_err(ApiError::from)
            })
            .collect::<ApiResult<Vec<_>>>()?;
        let upserted: u64 = live.iter().map(|b| b.num_rows() as u64).sum();
        let deleted: u64 = dead.iter().map(|b| b.num_rows() as u64).sum();
        let mark = vec![CompactedSsTable::new(shard, sstable.generation)];
        let mut ds = current;
        if deleted > 0 {
            let mut builder = MergeInsertBuilder::try_new(ds.clone(), installed.pk.clone())
                .map_err(ApiError::from)?;
            builder
                .when_matched(WhenMatched::Delete)
                .when_not_matched(WhenNotMatched::DoNothing);
            if upserted == 0 {
                builder.mark_sstables_as_compacted(mark.clone());
            }
            let (next, _) = builder
                .try_build()
                .map_err(ApiError::from)?
                .execute_batches(dead)
                .await
                .map_err(ApiError::from)?;
            ds = next;
        }
        if upserted > 0 {
            let mut builder = MergeInsertBuilder::try_new(ds.clone(), installed.pk.clone())
                .map_err(ApiError::from)?;
            builder
                .when_matched(WhenMatched::UpdateAll)
                .when_not_matched(WhenNotMatched::InsertAll)
                .mark_sstables_as_compacted(mark.clone());
            let (next, _) = builder
                .try_build()
                .map_err(ApiError::from)?
                .execute_batches(live)
                .await
                .map_err(ApiError::from)?;
            ds = next;
        }
        if upserted == 0 && deleted == 0 {
            let transaction = Transaction::new(
                ds.manifest.version,
                Operation::UpdateMemWalState {
                    compacted_sstables: mark,
                },
                None,
            );
            ds = Arc::new(
                CommitBuilder::new(ds.clone())
                    .execute(transaction)
                    .await
                    .map_err(ApiError::from)?,
            );
        }
        self.remember(location, None, ds);
        Ok(Merged {
            merged: true,
            upserted,
            deleted,
        })
    }
}

impl Store {
    /// A flushed generation of `shard`, as the lance dataset it is.
    pub(super) async fn open_generation(
        &self,
        base: &Dataset,
        shard: Uuid,
        sstable: &SsTable,
    ) -> ApiResult<Dataset> {
        let path = format!(
            "{}/_mem_wal/{}/{}",
            base.uri().trim_end_matches('/'),
            shard,
            sstable.path
        );
        DatasetBuilder::from_uri(&path)
            .with_session(self.session())
            .with_storage_options(self.storage_options().clone())
            .load()
            .await
            .map_err(ApiError::from)
    }
}

#[derive(Default)]
struct Merged {
    merged: bool,
    upserted: u64,
    deleted: u64,
}
