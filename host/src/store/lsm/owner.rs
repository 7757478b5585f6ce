//! When a stored WAL entry may be acknowledged.
//!
//! Lance fences a shard writer lazily: a node that claims a shard bumps the epoch in the
//! shard's manifest and drops a sentinel at the WAL's tip, and the previous holder learns it
//! was fenced only when its next append collides with that sentinel (`ShardWriter::put`:
//! "fencing is detected lazily during WAL flush via atomic writes"). That is sound only while
//! the sentinel is there. Lancet deletes WAL files itself: an unset removes the shard's whole
//! directory, and reclaim deletes entries below the replay cursor, the sentinel included. A
//! writer still held by a node that has not written to its shard since it was fenced then
//! appends into the empty slot, the append succeeds, and the write would be acknowledged into
//! a WAL nobody replays (issue 75: lost in the unset race, keys 1290 and 1291).
//!
//! So an append is not yet an acknowledgement. A write is acknowledged only after a read of
//! the shard's manifest that *began after* its entry was stored shows the shard still there
//! at the writer's own epoch. Either that read sees any claim made before it (and the write
//! is not acknowledged: it is written again through a fresh claim, the same state), or the
//! claim came after the entry was stored, in which case the claimant's sentinel lands above
//! the entry and its replay reads it. Missing files are never taken for ownership:
//! `check_fenced` answers `Ok` for a shard without a manifest, which is exactly the removed
//! directory of an unset, so the manifest is read and judged here.
//!
//! Writes to one shard at the same moment share a read: a read that began after a write's
//! entry was stored confirms it, so a wave of concurrent writes costs at most two reads.
//!
//! The read is usually two HEADs, not a scan of the manifest directory. Every claim writes the
//! version after the latest (put-if-not-exists, versions contiguous), so when the writer's own
//! manifest is at version `v` and its epoch, and `v + 1` does not exist, no claim has been
//! made, unless `v + 1` was deleted. Manifest versions are deleted oldest first (lance's
//! `prune_versions_before`; Lancet's own removals, [`remove_shard_files`]), so a deleted
//! `v + 1` means `v` went before it: `v` is looked for *after* `v + 1`, and its absence is
//! lost ownership. When `v + 1` exists (the writer's own flush, or a claim), the manifest is
//! read in full and its epoch judged.

use std::sync::Arc;
use std::time::Instant;

use lance::dataset::mem_wal::ShardWriter;
use lance::dataset::mem_wal::util::{manifest_filename, shard_base_path, shard_manifest_path};
use lance_io::object_store::ObjectStore;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use uuid::Uuid;

/// A shard writer this process holds, with what it has confirmed of its ownership.
pub(super) struct Owned {
    pub(super) writer: Arc<ShardWriter>,
    /// The store and directory of the shard's manifest versions.
    store: Arc<ObjectStore>,
    manifests: Path,
    /// When the newest read that found this writer still the shard's owner began.
    confirmed: tokio::sync::Mutex<Option<Instant>>,
}

/// What a read of the shard's manifest said of a writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ownership {
    /// The shard is there and still at this writer's epoch.
    Held,
    /// Another node claimed the shard (a higher epoch), or its files are gone.
    Lost,
}

impl Owned {
    /// `base` is the table's branch location, as the shard's manifest store was made with.
    pub(super) fn new(writer: Arc<ShardWriter>, store: Arc<ObjectStore>, base: &Path) -> Self {
        let manifests = shard_manifest_path(base, &writer.shard_id());
        Self {
            writer,
            store,
            manifests,
            confirmed: tokio::sync::Mutex::new(None),
        }
    }

    /// Whether this writer still owned its shard at some moment after `stored`, an instant
    /// taken once a write's WAL entry was known to be stored.
    pub(super) async fn confirm(&self, stored: Instant) -> lance_core::Result<Ownership> {
        let mut confirmed = self.confirmed.lock().await;
        // Strictly later: an equal reading of the clock says nothing of which came first.
        if confirmed.is_some_and(|began| began > stored) {
            return Ok(Ownership::Held);
        }
        let began = Instant::now();
        let held = match self.quick().await? {
            Some(held) => held,
            None => {
                let manifest = self.writer.manifest_store().refresh_latest().await?;
                judge(manifest.map(|m| m.writer_epoch), self.writer.epoch())
            }
        };
        if held == Ownership::Held {
            *confirmed = Some(began);
        }
        Ok(held)
    }

    /// The two-HEAD answer (module docs), or `None` when only a full read can tell.
    async fn quick(&self) -> lance_core::Result<Option<Ownership>> {
        let Some(own) = self.writer.manifest_store().latest().await? else {
            return Ok(Some(Ownership::Lost));
        };
        if own.writer_epoch != self.writer.epoch() {
            return Ok(None);
        }
        if self.exists(own.version + 1).await? {
            return Ok(None);
        }
        Ok(Some(if self.exists(own.version).await? {
            Ownership::Held
        } else {
            Ownership::Lost
        }))
    }

    async fn exists(&self, version: u64) -> lance_core::Result<bool> {
        let path = self.manifests.clone().join(manifest_filename(version));
        match self.store.inner.head(&path).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(lance_core::Error::io(format!("HEAD {path}: {e}"))),
        }
    }
}

/// Removes everything of a shard under `base`: its manifest versions first, oldest first, then
/// the rest. The order is what keeps [`Owned::confirm`]'s two HEADs sound for a writer another
/// node still holds.
pub(super) async fn remove_shard_files(
    store: &Arc<ObjectStore>,
    base: &Path,
    shard: Uuid,
) -> lance_core::Result<()> {
    let manifests = lance::dataset::mem_wal::ShardManifestStore::new(store.clone(), base, shard, 2);
    let dir = shard_manifest_path(base, &shard);
    for version in manifests.list_versions().await? {
        match store
            .inner
            .delete(&dir.clone().join(manifest_filename(version)))
            .await
        {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(lance_core::Error::io(format!("deleting {dir}: {e}"))),
        }
    }
    store.remove_dir_all(shard_base_path(base, &shard)).await
}

/// A writer of `epoch` owns its shard only while the shard's manifest exists and names that
/// epoch. A lower stored epoch cannot follow a claim; it is judged lost all the same rather
/// than trusted.
fn judge(stored_epoch: Option<u64>, epoch: u64) -> Ownership {
    match stored_epoch {
        Some(e) if e == epoch => Ownership::Held,
        _ => Ownership::Lost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_writers_own_epoch_in_an_existing_manifest_is_ownership() {
        assert_eq!(judge(Some(3), 3), Ownership::Held);
        assert_eq!(judge(Some(4), 3), Ownership::Lost, "a peer claimed it");
        assert_eq!(
            judge(None, 3),
            Ownership::Lost,
            "the shard's files are gone"
        );
        assert_eq!(judge(Some(2), 3), Ownership::Lost);
    }
}
