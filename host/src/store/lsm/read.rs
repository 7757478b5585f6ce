//! Reads of an LSM table: lance's `LsmScanner` over the base table, the flushed generations
//! the base does not hold yet, and the memtables of every shard (claimed by this process
//! first, so a write acknowledged by any node is seen).

use arrow_array::RecordBatch;
use std::sync::Arc;

use datafusion_physical_plan::SendableRecordBatchStream;
use futures::StreamExt;
use lance::Dataset;
use lance::dataset::mem_wal::scanner::{LsmScanner, ShardSnapshot};
use lance::index::DatasetIndexExt;

use super::{Installed, require};
use crate::error::{ApiError, ApiResult};
use crate::store::{Projection, QuerySpec, Store};

/// The most rows one LSM delete may remove.
const MAX_DELETED_KEYS: usize = 1_000_000;

/// A query over an LSM table, planned by lance's LSM scanner.
pub struct LsmRead {
    pub scanner: LsmScanner,
}

impl LsmRead {
    pub async fn stream(&self) -> ApiResult<SendableRecordBatchStream> {
        self.scanner.try_into_stream().await.map_err(unplannable)
    }

    pub async fn count(&self) -> ApiResult<u64> {
        self.scanner.count_rows().await.map_err(unplannable)
    }

    pub async fn explain(&self) -> ApiResult<String> {
        let plan = self.scanner.create_plan().await.map_err(unplannable)?;
        Ok(datafusion_physical_plan::displayable(plan.as_ref())
            .indent(true)
            .to_string())
    }
}

/// What lance cannot plan over memtables is the caller's query, not a server fault.
fn unplannable(e: lance_core::Error) -> ApiError {
    let api = ApiError::from(e);
    if api.status.is_server_error() && api.code == lance_namespace::ErrorCode::Internal {
        tracing::warn!(error = %api.message, "LSM read failed");
    }
    api
}

/// Why a query cannot read the fresh tier, naming what to change.
fn refuse(what: &str) -> ApiError {
    ApiError::invalid(format!(
        "{what}: the MemWAL LSM scanner does not support this over rows still in memtables; \
         set use_lsm(false) to read the base table only (rows not yet merged are left out)"
    ))
}

impl Store {
    /// A scanner over every tier of the table (`location`'s main branch, latest), for `spec`.
    pub async fn lsm_read(&self, location: &str, spec: &QuerySpec) -> ApiResult<LsmRead> {
        if spec.with_row_id {
            // The lancedb client falls back to primary-key fusion on exactly these words.
            return Err(ApiError::invalid(
                "the MemWAL LSM scanner does not support with_row_id: rows still in memtables \
                 have no stable row id; set use_lsm(false) to read the base table only",
            ));
        }
        if spec.fast_search {
            return Err(refuse("fast_search"));
        }
        if spec.order_by.is_some() {
            return Err(refuse("order_by"));
        }
        if spec.prefilter == Some(false) && (spec.vector.is_some() || spec.fts.is_some()) {
            return Err(refuse("prefilter=false"));
        }
        let (mut scanner, base) = self.lsm_scanner(location).await?;
        if let Some(p) = &spec.projection {
            match p {
                Projection::Names(names) => {
                    if let Some(system) = names.iter().find(|n| lance_core::is_system_column(n)) {
                        return Err(refuse(&format!("column '{system}'")));
                    }
                    scanner = scanner.project(names).map_err(ApiError::from)?;
                }
                Projection::Aliases(_) => {
                    return Err(refuse("column expressions (columns as a map)"));
                }
            }
        }
        if let Some(f) = &spec.filter {
            scanner = scanner.filter(f).map_err(ApiError::from)?;
        }
        if let Some(fts) = &spec.fts {
            let mut fts = fts.clone();
            // Lance's LSM planner searches the columns a query names; a query that names none
            // searches the table's full-text-indexed column, as a plain search would.
            if fts.columns().is_empty() {
                let columns = fts_columns(&base).await?;
                if columns.len() == 1 {
                    fts = fts.with_columns(&columns).map_err(ApiError::from)?;
                }
            }
            scanner = scanner.full_text_search(fts).map_err(ApiError::from)?;
        }
        if let Some(v) = &spec.vector {
            if v.multi || v.vectors.len() != 1 {
                return Err(refuse("a multivector or batched vector query"));
            }
            if v.ef.is_some() {
                return Err(refuse("ef"));
            }
            if v.lower_bound.is_some() || v.upper_bound.is_some() {
                return Err(refuse("a distance range (lower_bound / upper_bound)"));
            }
            if v.bypass_vector_index {
                return Err(refuse("bypass_vector_index"));
            }
            if v.approx_mode.is_some() {
                return Err(refuse("approx_mode"));
            }
            let column = match &v.column {
                Some(c) => c.clone(),
                None => crate::store::default_vector_column_of(&scanner.schema())?,
            };
            let key = arrow_array::Float32Array::from(v.vectors[0].clone());
            scanner = scanner
                .nearest(&column, &key, spec.nearest_k(1 << 20))
                .map_err(ApiError::from)?;
            if let Some(d) = v.distance_type {
                scanner = scanner.distance_metric(d);
            }
            if let Some(n) = v.nprobes {
                scanner = scanner.nprobes(n);
            }
            if let Some(n) = v.minimum_nprobes {
                scanner = scanner.minimum_nprobes(n);
            }
            if let Some(n) = v.maximum_nprobes {
                scanner = scanner.maximum_nprobes(n);
            }
            if let Some(r) = v.refine_factor {
                scanner = scanner.refine(r);
            }
            if spec.offset.is_some() {
                scanner = scanner
                    .limit(None, spec.offset.map(|o| o as i64))
                    .map_err(ApiError::from)?;
            }
        } else if spec.k.is_some() || spec.offset.is_some() {
            let k = spec.k.map(|k| k.min(i64::MAX as usize) as i64);
            scanner = scanner
                .limit(k, spec.offset.map(|o| o as i64))
                .map_err(ApiError::from)?;
        }
        Ok(LsmRead { scanner })
    }

    /// The scanner over every tier, nothing asked of it yet, and the base table it reads.
    async fn lsm_scanner(&self, location: &str) -> ApiResult<(LsmScanner, Arc<Dataset>)> {
        // The order matters: memtables first, then the shard manifests, then the base table.
        // A generation flushed between two of these steps is then in both the memtables and
        // the manifest (lance resolves that), and one merged into the base between the last
        // two is in both the manifest and the base: never in neither.
        let ds = self.latest(location, None).await?;
        let installed = require(self.lsm_installed(&ds).await?)?;
        let claimed = self
            .claim_all(location, &ds, &installed, super::Purpose::Use)
            .await?;
        let writers = claimed.writers;
        let mut memtables = Vec::with_capacity(writers.len());
        for w in &writers {
            memtables.push((
                w.shard_id(),
                w.in_memory_memtable_refs().await.map_err(ApiError::from)?,
            ));
        }
        let mut manifests: Vec<_> = claimed.sealed.into_iter().map(Some).collect();
        for w in &writers {
            manifests.push(w.manifest().await.map_err(ApiError::from)?);
        }
        let base = self.latest(location, None).await?;
        let merged = require(self.lsm_installed(&base).await?)?;
        let snapshots = snapshots(&merged, manifests.into_iter().flatten());
        let mut scanner = LsmScanner::new(base.clone(), snapshots, merged.pk.clone())
            .with_sstable_cache(self.lsm.sstables.clone());
        for (shard, refs) in memtables {
            scanner = scanner.with_in_memory_memtables(shard, refs);
        }
        Ok((scanner, base))
    }

    /// The primary keys of the rows `predicate` matches, over every tier.
    pub(super) async fn lsm_keys_matching(
        &self,
        location: &str,
        _ds: &Dataset,
        installed: &Installed,
        predicate: &str,
    ) -> ApiResult<Vec<RecordBatch>> {
        crate::sql_guard::check(predicate, "predicate")?;
        let scanner = self
            .lsm_scanner(location)
            .await?
            .0
            .project(&installed.pk)
            .map_err(ApiError::from)?
            .filter(predicate)
            .map_err(ApiError::from)?;
        let mut stream = scanner.try_into_stream().await.map_err(unplannable)?;
        // A tombstone per key, held in memory until written: a bulk delete is bounded.
        let (mut keys, mut n) = (Vec::new(), 0usize);
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(|e| ApiError::from(lance_core::Error::from(e)))?;
            n += batch.num_rows();
            if n > MAX_DELETED_KEYS {
                return Err(ApiError::invalid(format!(
                    "the predicate matches more than {MAX_DELETED_KEYS} rows: an LSM delete writes \
                     a tombstone per key; for a bulk delete run checkpoint_lsm and \
                     unset_lsm_write_spec first"
                )));
            }
            keys.push(batch);
        }
        Ok(keys)
    }
}

/// The columns of the table's full-text indexes.
async fn fts_columns(ds: &Dataset) -> ApiResult<Vec<String>> {
    let mut columns = std::collections::BTreeSet::new();
    for index in ds.load_indices().await.map_err(ApiError::from)?.iter() {
        let inverted = index
            .index_details
            .as_ref()
            .is_some_and(|d| d.type_url.ends_with("InvertedIndexDetails"));
        if inverted {
            for id in &index.fields {
                if let Some(field) = ds.schema().field_by_id(*id) {
                    columns.insert(field.name.clone());
                }
            }
        }
    }
    Ok(columns.into_iter().collect())
}

/// Each shard's flushed generations the base table does not hold yet.
pub(super) fn snapshots(
    installed: &Installed,
    manifests: impl Iterator<Item = lance_index::mem_wal::ShardManifest>,
) -> Vec<ShardSnapshot> {
    manifests
        .map(|m| {
            let merged = installed.compacted(m.shard_id);
            let mut snapshot = ShardSnapshot::new(m.shard_id)
                .with_spec_id(m.shard_spec_id)
                .with_current_generation(m.current_generation);
            for sstable in m.sstables.iter().filter(|s| s.generation > merged) {
                snapshot = snapshot.with_sstable(sstable.generation, sstable.path.clone());
            }
            snapshot
        })
        .collect()
}
