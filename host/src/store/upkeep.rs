//! Table upkeep with lance's own operations: compaction (`compact_files`), index upkeep
//! (`optimize_indices`) and version cleanup (`cleanup_with_policy`), plus the table health
//! figures the upkeep policy decides from.
//!
//! Their long parts (rewrites, index builds, file deletions) run without the in-process write
//! lock, so writers do not queue behind them; lance's commit protocol orders them against
//! writers. Only compaction's commit takes the lock (see `compact_once`). A writer that lost a
//! race against a compaction rebases onto it (merge_insert, update and delete retry).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lance::dataset::cleanup::CleanupPolicyBuilder;
use lance::dataset::index::DatasetIndexRemapperOptions;
use lance::dataset::optimize::{CompactionOptions, commit_compaction, plan_compaction};
use lance::index::DatasetIndexExt;
use lance_index::is_system_index;
use lance_index::optimize::OptimizeOptions;
use serde::Serialize;

use super::Store;
use crate::error::{ApiError, ApiResult};

/// What upkeep looks at, read from the manifest alone (no data file is opened).
#[derive(Debug, Clone, Default, Serialize)]
pub struct TableHealth {
    pub version: u64,
    pub fragments: usize,
    /// Fragments with fewer live rows than the compaction target.
    pub small_fragments: usize,
    pub live_rows: u64,
    pub deleted_rows: u64,
    /// Fragments whose deleted share is above the threshold asked for.
    pub fragments_with_many_deletions: usize,
    pub indexes: Vec<IndexHealth>,
    /// LSM tables: flushed generations not merged into the base table yet.
    pub lsm_generations: usize,
    /// LSM tables: rows in this node's memtables.
    pub lsm_memtable_rows: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct IndexHealth {
    pub name: String,
    pub index_type: String,
    pub vector: bool,
    pub segments: usize,
    /// Live rows in fragments no segment covers (searched by brute force).
    pub unindexed_rows: u64,
    /// Live rows covered by the largest segment (the one trained last, for a vector index).
    pub base_rows: u64,
    /// Live rows covered by the other segments: the deltas appended since.
    pub delta_rows: u64,
}

impl IndexHealth {
    /// Rows added since the index was last trained, as a share of the rows it was trained on.
    pub fn delta_share(&self) -> f64 {
        (self.delta_rows + self.unindexed_rows) as f64 / self.base_rows.max(1) as f64
    }
}

/// What a compaction did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CompactionReport {
    /// Fragments of the version it read, and of the version it committed.
    pub fragments_before: usize,
    pub fragments_after: usize,
    pub fragments_removed: usize,
    pub fragments_added: usize,
    pub files_removed: usize,
    pub files_added: usize,
    pub version: u64,
}

/// What a cleanup removed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CleanupReport {
    pub old_versions: u64,
    pub bytes_removed: u64,
    pub data_files_removed: u64,
    pub index_files_removed: u64,
    pub deletion_files_removed: u64,
}

/// How one index was brought up to date.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexAction {
    /// New rows folded in (lance merges or appends a delta segment as it sees fit).
    Append,
    /// Every segment merged into one, new rows included.
    Merge,
    /// A vector index retrained on the current data (new centroids), all in one segment.
    Retrain,
}

fn live_rows(f: &lance_table::format::Fragment) -> (u64, u64) {
    let physical = f.physical_rows.unwrap_or(0) as u64;
    let deleted = f
        .deletion_file
        .as_ref()
        .and_then(|d| d.num_deleted_rows)
        .unwrap_or(0) as u64;
    (physical.saturating_sub(deleted), deleted.min(physical))
}

/// Live rows an index's segments cover and live rows they do not, from the manifest.
pub(super) fn coverage(
    ds: &lance::Dataset,
    segments: &[lance_table::format::IndexMetadata],
) -> (u64, u64) {
    let indexed: std::collections::HashSet<u64> = segments
        .iter()
        .filter_map(|s| s.fragment_bitmap.as_ref())
        .flat_map(|b| b.iter().map(u64::from))
        .collect();
    ds.fragments().iter().fold((0, 0), |(i, u), f| {
        let live = live_rows(f).0;
        if indexed.contains(&f.id) {
            (i + live, u)
        } else {
            (i, u + live)
        }
    })
}

fn is_vector_type(index_type: &str) -> bool {
    let t = index_type.to_ascii_uppercase();
    t.contains("IVF") || t.contains("HNSW") || t.contains("VECTOR")
}

/// A commit race lost to another writer: worth another attempt on the newer version.
fn is_conflict(err: &lance_core::Error) -> bool {
    use lance_core::Error as E;
    matches!(
        err,
        E::CommitConflict { .. }
            | E::RetryableCommitConflict { .. }
            | E::IncompatibleTransaction { .. }
            | E::TooMuchWriteContention { .. }
    )
}

const CONFLICT_ATTEMPTS: usize = 4;

impl Store {
    /// The health figures of `branch`'s latest version. `target_rows` is the compaction
    /// target, `deleted_share` the deleted fraction that makes a fragment worth rewriting.
    pub async fn health(
        &self,
        location: &str,
        branch: Option<&str>,
        target_rows: u64,
        deleted_share: f64,
    ) -> ApiResult<TableHealth> {
        let ds = self.latest(location, branch).await?;
        let mut h = TableHealth {
            version: ds.version().version,
            ..Default::default()
        };
        let mut live_by_fragment = BTreeMap::new();
        for f in ds.fragments().iter() {
            let (live, deleted) = live_rows(f);
            live_by_fragment.insert(f.id, live);
            h.fragments += 1;
            h.live_rows += live;
            h.deleted_rows += deleted;
            if live < target_rows {
                h.small_fragments += 1;
            }
            // Strictly more, as lance's planner decides.
            if deleted > 0 && deleted as f64 > deleted_share * (live + deleted) as f64 {
                h.fragments_with_many_deletions += 1;
            }
        }
        for d in ds.describe_indices(None).await.map_err(ApiError::from)? {
            let segments = d.metadata();
            if segments.first().is_none_or(is_system_index) {
                continue;
            }
            let covered = |s: &lance_table::format::IndexMetadata| -> u64 {
                s.fragment_bitmap.as_ref().map_or(0, |b| {
                    b.iter()
                        .filter_map(|id| live_by_fragment.get(&u64::from(id)))
                        .sum()
                })
            };
            let per_segment: Vec<u64> = segments.iter().map(covered).collect();
            let base = per_segment.iter().copied().max().unwrap_or(0);
            let unindexed = coverage(&ds, segments).1;
            let index_type = d.index_type().to_string();
            h.indexes.push(IndexHealth {
                name: d.name().to_string(),
                vector: is_vector_type(&index_type),
                index_type,
                segments: segments.len(),
                unindexed_rows: unindexed,
                base_rows: base,
                delta_rows: per_segment.iter().sum::<u64>().saturating_sub(base),
            });
        }
        if branch.is_none()
            && let Some(installed) = self.lsm_installed(&ds).await?
        {
            h.lsm_generations = self
                .lsm_pending(&ds, &installed)
                .await?
                .iter()
                .map(|(_, g)| g.len())
                .sum();
            h.lsm_memtable_rows = self.lsm_memtable_rows(location).await;
        }
        Ok(h)
    }

    /// Rewrite small fragments and fragments with many deleted rows (lance's planner picks
    /// them); indexes are remapped in the same commit. A compaction that loses its commit race
    /// against a writer (an update or delete of rows it rewrote) is retried; the last attempt
    /// holds the table's write lock, so that a steady stream of updates through this server
    /// cannot starve it (writers queue behind that one attempt).
    pub async fn compact(
        &self,
        location: &str,
        branch: Option<&str>,
        target_rows: u64,
        deleted_share: f64,
    ) -> ApiResult<CompactionReport> {
        for attempt in 1..=CONFLICT_ATTEMPTS {
            let _guard = if attempt == CONFLICT_ATTEMPTS {
                Some(self.write_lock(location, branch).await)
            } else {
                None
            };
            let ds = (*self.latest(location, branch).await?).clone();
            let locked = _guard.is_some();
            match self
                .compact_once(location, branch, ds, target_rows, deleted_share, locked)
                .await
            {
                Err(e) if is_conflict(&e) && attempt < CONFLICT_ATTEMPTS => {
                    tracing::info!(location, attempt, error = %e, "compaction lost a commit race; retrying");
                }
                r => return r.map_err(ApiError::from),
            }
        }
        unreachable!("the last attempt returns")
    }

    /// One plan, rewrite and commit. Rewrites run one at a time (upkeep leaves the cores to
    /// queries), without the table's write lock. The commit takes it (unless `locked`: the
    /// caller holds it) and first checks that no writer changed a fragment it rewrote; if one
    /// did, the attempt is given up before lance remaps the indexes (which writes a copy of
    /// each). Whenever the commit does not happen, the files the rewrites wrote are deleted at
    /// once: no manifest ever referenced them, and lance's cleanup would keep them for 7 days.
    async fn compact_once(
        &self,
        location: &str,
        branch: Option<&str>,
        mut ds: lance::Dataset,
        target_rows: u64,
        deleted_share: f64,
        locked: bool,
    ) -> lance_core::Result<CompactionReport> {
        let mut options = CompactionOptions::from_dataset_config(&ds.manifest().config)?;
        options.target_rows_per_fragment = target_rows.max(1) as usize;
        options.materialize_deletions = true;
        options.materialize_deletions_threshold = deleted_share as f32;
        options.num_threads = Some(1);
        let fragments_before = ds.fragments().len();
        let plan = plan_compaction(&ds, &options).await?;
        let mut rewritten = Vec::with_capacity(plan.num_tasks());
        for task in plan.compaction_tasks() {
            rewritten.push(task.execute(&ds).await?);
        }
        if rewritten.is_empty() {
            return Ok(CompactionReport {
                fragments_before,
                fragments_after: fragments_before,
                version: ds.version().version,
                ..Default::default()
            });
        }
        let written: Vec<String> = rewritten
            .iter()
            .flat_map(|r| &r.new_fragments)
            .flat_map(|f| &f.files)
            .map(|f| format!("{}/{}", ds.data_dir(), f.path))
            .collect();
        let _guard = if locked {
            None
        } else {
            Some(self.write_lock(location, branch).await)
        };
        let unchanged = match self.latest(location, branch).await {
            Ok(now) => rewritten
                .iter()
                .flat_map(|r| &r.original_fragments)
                .all(|orig| now.fragments().iter().any(|f| f == orig)),
            Err(_) => false,
        };
        let committed = if unchanged {
            let remap = Arc::new(DatasetIndexRemapperOptions::default());
            commit_compaction(&mut ds, rewritten, remap, &options).await
        } else {
            Err(lance_core::Error::retryable_commit_conflict_source(
                ds.version().version,
                "a writer changed fragments this compaction rewrote".into(),
            ))
        };
        match committed {
            Ok(m) => {
                let version = ds.version().version;
                let fragments_after = ds.fragments().len();
                self.remember(location, branch, Arc::new(ds));
                Ok(CompactionReport {
                    fragments_before,
                    fragments_after,
                    fragments_removed: m.fragments_removed,
                    fragments_added: m.fragments_added,
                    files_removed: m.files_removed,
                    files_added: m.files_added,
                    version,
                })
            }
            // Delete the rewritten files only when the commit surely did not land (a lost
            // race); after any other error a manifest may reference them, and lance's
            // cleanup removes them once no manifest does.
            Err(e) if !unchanged || is_conflict(&e) => {
                let store = ds.object_store(None).await?;
                for path in written {
                    if let Ok(p) = object_store::path::Path::parse(&path)
                        && let Err(err) = store.delete(&p).await
                    {
                        tracing::warn!(%path, error = %err, "could not remove a file of a failed compaction");
                    }
                }
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Bring one index up to date with the table's rows.
    pub async fn upkeep_index(
        &self,
        location: &str,
        branch: Option<&str>,
        name: &str,
        action: IndexAction,
    ) -> ApiResult<u64> {
        let mut last_err = None;
        for _ in 0..CONFLICT_ATTEMPTS {
            let mut ds = (*self.latest(location, branch).await?).clone();
            let options = match action {
                IndexAction::Append => OptimizeOptions::new(),
                IndexAction::Merge => {
                    let segments = ds
                        .load_indices_by_name(name)
                        .await
                        .map_err(ApiError::from)?
                        .len();
                    OptimizeOptions::merge(segments.max(1))
                }
                IndexAction::Retrain => OptimizeOptions::retrain(),
            }
            .index_names(vec![name.to_string()]);
            match ds.optimize_indices(&options).await {
                Ok(()) => {
                    let version = ds.version().version;
                    self.remember(location, branch, Arc::new(ds));
                    return Ok(version);
                }
                Err(e) if is_conflict(&e) => last_err = Some(e),
                Err(e) => return Err(e.into()),
            }
        }
        Err(last_err.map(ApiError::from).unwrap_or_else(|| {
            ApiError::internal("index upkeep failed without an error".to_string())
        }))
    }

    /// Remove versions of `branch` older than `retention`, and the files only they used.
    /// Tagged versions stay (and so do the files they use), as do the versions branches were
    /// created from and the latest version. Files no manifest references are removed only when
    /// old enough that no writer can still be about to commit them (lance's 7-day rule).
    pub async fn cleanup(
        &self,
        location: &str,
        branch: Option<&str>,
        retention: Duration,
    ) -> ApiResult<CleanupReport> {
        let ds = self.latest(location, branch).await?;
        let cutoff = chrono::Utc::now()
            - chrono::Duration::from_std(retention).unwrap_or(chrono::Duration::MAX);
        let policy = CleanupPolicyBuilder::default()
            .before_timestamp(cutoff)
            .error_if_tagged_old_versions(false)
            .delete_unverified(false)
            .build();
        let stats = ds
            .cleanup_with_policy(policy)
            .await
            .map_err(ApiError::from)?;
        Ok(CleanupReport {
            old_versions: stats.old_versions,
            bytes_removed: stats.bytes_removed,
            data_files_removed: stats.data_files_removed,
            index_files_removed: stats.index_files_removed,
            deletion_files_removed: stats.deletion_files_removed,
        })
    }
}
