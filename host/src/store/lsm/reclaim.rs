//! Reclaiming what merged generations leave on the store. Lance records a merged generation in
//! the base table (the MemWAL index's `compacted_sstables`) and stops there: the shard
//! manifest still lists it, its files stay, the WAL entries its flush covered stay, and every
//! manifest write leaves a version behind. Lance's MemWAL expects the embedder's compactor to
//! drain merged generations from the shard manifest (its flush builds on whatever list it
//! finds, `memtable/flush.rs`), and offers `prune_versions_before` for manifest versions.
//!
//! Each step waits `grace` after the step before it, per shard, so no reader can still need
//! what goes: a generation is drained only a grace after its merge was seen (a replica whose
//! base table is up to its read-consistency interval old would otherwise find it in neither
//! place), and its files are deleted only a grace after the drain (a query that read the old
//! manifest may still be scanning them). WAL entries below the manifest's replay cursor are
//! never replayed (lance starts at the cursor + 1); the entry at the cursor and every later one
//! stay, so the WAL's tip, which a new writer finds by listing, never moves back.
//!
//! The times live in this process only: after a restart the first pass starts the clock again,
//! so a restart delays reclaiming by one grace and never shortens it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::mem_wal::ShardManifestStore;
use lance::dataset::mem_wal::util::{parse_bit_reversed_filename, shard_base_path, shard_wal_path};
use lance_index::mem_wal::ShardManifest;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use serde::Serialize;
use uuid::Uuid;

use super::Installed;
use crate::error::{ApiError, ApiResult};
use crate::store::Store;

/// How long each reclaim step waits after the one before, unless the server says otherwise.
const DEFAULT_GRACE: Duration = Duration::from_secs(600);

/// What one pass reclaimed, summed over the table's shards.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReclaimReport {
    /// Merged generations taken off their shard manifests.
    pub generations_drained: usize,
    /// Generation directories deleted.
    pub generation_dirs_deleted: usize,
    /// WAL entries deleted.
    pub wal_entries_deleted: usize,
    /// Shard manifest versions deleted (lance keeps those younger than a day).
    pub manifest_versions_pruned: usize,
}

/// Per (table, shard): what the last acting pass saw, and when.
#[derive(Clone, Copy, Debug)]
struct Seen {
    at: Instant,
    /// The shard's generation the base table held.
    merged: u64,
    /// The manifest's replay cursor.
    replay_after: u64,
    /// Generations drained from the manifest by the pass before (files deletable next).
    drained: u64,
}

pub(crate) struct Reclaimer {
    grace: Mutex<Duration>,
    seen: Mutex<HashMap<(String, Uuid), Seen>>,
}

impl Default for Reclaimer {
    fn default() -> Self {
        Self {
            grace: Mutex::new(DEFAULT_GRACE),
            seen: Mutex::default(),
        }
    }
}

impl Reclaimer {
    pub(crate) fn set_grace(&self, grace: Duration) {
        *self.grace.lock().unwrap() = grace;
    }

    /// What this pass may act on for the shard: `None` while the last look is younger than
    /// the grace (the look is recorded when there was none).
    fn due(&self, key: &(String, Uuid), now: Seen) -> Option<Seen> {
        let grace = *self.grace.lock().unwrap();
        let mut seen = self.seen.lock().unwrap();
        match seen.get(key) {
            Some(prev) if prev.at.elapsed() >= grace => Some(*prev),
            Some(_) => None,
            None => {
                seen.insert(key.clone(), now);
                None
            }
        }
    }

    fn record(&self, key: (String, Uuid), now: Seen) {
        self.seen.lock().unwrap().insert(key, now);
    }

    /// Forget a table's shards (its spec was unset: its MemWAL files are gone).
    pub(crate) fn forget(&self, location: &str) {
        self.seen.lock().unwrap().retain(|(l, _), _| l != location);
    }
}

impl Store {
    /// One reclaim pass over every shard of the table (`ds` its latest state). Best effort:
    /// a shard that cannot be reclaimed now (fenced, a store error) is left for a later pass.
    pub(super) async fn lsm_reclaim(
        &self,
        location: &str,
        ds: &Dataset,
        installed: &Installed,
    ) -> ApiResult<ReclaimReport> {
        let mut report = ReclaimReport::default();
        if self.lsm_unsetting(ds).await? {
            // The unset removes everything itself; a claim here would fence it.
            return Ok(report);
        }
        for shard in self.lsm_shards(ds, installed).await? {
            if let Err(e) = self
                .reclaim_shard(location, ds, installed, shard, &mut report)
                .await
            {
                tracing::debug!(%location, %shard, error = %e.message, "LSM reclaim left for a later pass");
            }
        }
        Ok(report)
    }

    async fn reclaim_shard(
        &self,
        location: &str,
        ds: &Dataset,
        installed: &Installed,
        shard: Uuid,
        report: &mut ReclaimReport,
    ) -> ApiResult<()> {
        let store = ds.object_store(None).await.map_err(ApiError::from)?;
        let base = ds.branch_location().path;
        let manifests = ShardManifestStore::new(store.clone(), &base, shard, 2);
        let Some(manifest) = manifests.latest().await.map_err(ApiError::from)? else {
            return Ok(());
        };
        let key = (location.to_string(), shard);
        let now = Seen {
            at: Instant::now(),
            merged: installed.compacted(shard),
            replay_after: manifest.replay_after_wal_entry_position,
            drained: 0,
        };
        let Some(prev) = self.lsm.reclaim.due(&key, now) else {
            return Ok(());
        };

        // 1. Generations merged a grace ago come off the manifest.
        let manifest = if manifest
            .sstables
            .iter()
            .any(|s| s.generation <= prev.merged)
        {
            let (drained, manifest) = self
                .drain(location, &manifests, shard, &manifest, prev.merged)
                .await?;
            report.generations_drained += drained;
            manifest
        } else {
            manifest
        };

        // 2. Files of generations drained a grace ago.
        let listed: Vec<u64> = manifest.sstables.iter().map(|s| s.generation).collect();
        let shard_dir = shard_base_path(&base, &shard);
        let mut dirs = Vec::new();
        let top = store
            .inner
            .list_with_delimiter(Some(&shard_dir))
            .await
            .map_err(|e| ApiError::internal(format!("listing {shard_dir}: {e}")))?;
        for dir in top.common_prefixes {
            let Some(generation) = dir.filename().and_then(generation_of) else {
                continue;
            };
            if generation <= prev.drained && !listed.contains(&generation) {
                dirs.push(dir);
            }
        }
        for dir in dirs {
            store.remove_dir_all(dir).await.map_err(ApiError::from)?;
            report.generation_dirs_deleted += 1;
        }

        // 3. WAL entries below the replay cursor of a grace ago (the entry at it stays).
        let wal_dir = shard_wal_path(&base, &shard);
        let stale: Vec<Path> = store
            .inner
            .list(Some(&wal_dir))
            .try_filter_map(|meta| {
                let below = meta
                    .location
                    .filename()
                    .and_then(parse_bit_reversed_filename)
                    .is_some_and(|p| p < prev.replay_after);
                futures::future::ready(Ok(below.then_some(meta.location)))
            })
            .try_collect()
            .await
            .map_err(|e| ApiError::internal(format!("listing {wal_dir}: {e}")))?;
        for entry in stale {
            match store.inner.delete(&entry).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                    report.wal_entries_deleted += 1;
                }
                Err(e) => return Err(ApiError::internal(format!("deleting {entry}: {e}"))),
            }
        }

        // 4. Old manifest versions, by lance's own rule (never one younger than a day).
        report.manifest_versions_pruned += manifests
            .prune_versions_before(manifest.version)
            .await
            .map_err(ApiError::from)?;

        self.lsm.reclaim.record(
            key,
            Seen {
                drained: prev.merged,
                ..now
            },
        );
        Ok(())
    }

    /// Take generations up to `merged` off the shard's manifest, as the holder of its epoch:
    /// this process's writer when it holds one, else a claim of our own (which fences a
    /// writer another node holds; its next write claims the shard back, as after any
    /// takeover). Returns how many came off and the manifest written.
    async fn drain(
        &self,
        location: &str,
        manifests: &ShardManifestStore,
        shard: Uuid,
        manifest: &ShardManifest,
        merged: u64,
    ) -> ApiResult<(usize, ShardManifest)> {
        let drop_merged = |current: &ShardManifest, epoch: u64| ShardManifest {
            version: current.next_version(),
            writer_epoch: epoch,
            sstables: current
                .sstables
                .iter()
                .filter(|s| s.generation > merged)
                .cloned()
                .collect(),
            ..current.clone()
        };
        let written = match self.lsm.holds(location, shard) {
            Some(writer) => {
                let epoch = writer.epoch();
                writer
                    .manifest_store()
                    .commit_update(epoch, |c| drop_merged(c, epoch))
                    .await
            }
            None => {
                let (epoch, _) = manifests
                    .claim_epoch(manifest.shard_spec_id)
                    .await
                    .map_err(ApiError::from)?;
                manifests
                    .commit_update(epoch, |c| drop_merged(c, epoch))
                    .await
            }
        }
        .map_err(ApiError::from)?;
        let drained = manifest.sstables.len().saturating_sub(
            manifest
                .sstables
                .iter()
                .filter(|s| s.generation > merged)
                .count(),
        );
        Ok((drained, written))
    }
}

/// The generation a generation directory (`{hash}_gen_{n}`) holds.
fn generation_of(name: &str) -> Option<u64> {
    let (_, n) = name.rsplit_once("_gen_")?;
    n.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_directories_are_told_by_name() {
        assert_eq!(generation_of("a1b2c3d4_gen_5"), Some(5));
        assert_eq!(
            generation_of("a1b2c3d4_gen_18446744073709551615"),
            Some(u64::MAX)
        );
        assert_eq!(generation_of("manifest"), None);
        assert_eq!(generation_of("wal"), None);
        assert_eq!(generation_of("x_gen_"), None);
        assert_eq!(generation_of("x_gen_-1"), None);
    }

    #[test]
    fn each_step_waits_a_grace_after_the_last_look() {
        let r = Reclaimer::default();
        r.set_grace(Duration::from_secs(3600));
        let key = ("t".to_string(), Uuid::nil());
        let look = |merged| Seen {
            at: Instant::now(),
            merged,
            replay_after: merged * 10,
            drained: 0,
        };
        assert!(
            r.due(&key, look(1)).is_none(),
            "the first look only records"
        );
        assert!(r.due(&key, look(2)).is_none(), "younger than the grace");
        r.set_grace(Duration::ZERO);
        let prev = r.due(&key, look(3)).expect("due once the grace is over");
        assert_eq!(
            prev.merged, 1,
            "acts on what it saw a grace ago, not on now"
        );
        r.record(
            key.clone(),
            Seen {
                drained: prev.merged,
                ..look(3)
            },
        );
        let next = r.due(&key, look(4)).unwrap();
        assert_eq!((next.merged, next.drained), (3, 1));
        r.forget("t");
        assert!(r.due(&key, look(5)).is_none(), "forgotten: starts again");
    }
}
