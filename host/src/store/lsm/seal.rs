//! Unsetting a spec safely while other replicas write: before a node merges a table's LSM tier
//! and removes it, every shard must be drained into generations and closed to every writer, or
//! a write another replica acknowledges in between is deleted with the WAL it sits in.
//!
//! Two things close it, both on the table's store so every replica sees them:
//! - an **unset marker** (`_mem_wal/unsetting`), written first: a node that opens a shard
//!   writer checks it before and after opening and refuses the write (503, nothing
//!   acknowledged) when it is there. A shard created after the unsetting node listed the
//!   shards was therefore opened after the marker, and never acknowledges a write.
//! - lance's **sealed** shard status (the in-doubt record of its own drop protocol, which
//!   `claim_epoch` refuses): the unsetting node claims each shard (replaying what any replica
//!   acknowledged, and fencing its writer), flushes it, then seals it under its epoch. When a
//!   replica took a shard back in between, the seal is fenced and the round starts again.
//!
//! Reads go on meanwhile: a sealed shard's generations are read from its manifest (it holds
//! nothing unflushed). An unset that fails is rolled back (shards unsealed, marker removed);
//! one cut off by a crash leaves the marker, and LSM writes are refused with a 503 that says
//! to run the unset again.

use std::sync::Arc;

use lance::Dataset;
use lance::dataset::mem_wal::util::mem_wal_path;
use lance::dataset::mem_wal::{ShardManifestStore, ShardWriter};
use lance_index::mem_wal::{ShardManifest, ShardStatus};
use object_store::path::Path;
use uuid::Uuid;

use super::{Purpose, lost_ownership, require};
use crate::error::{ApiError, ApiResult};
use crate::store::Store;

/// Rounds of claim-flush-seal before an unset gives up on a replica that keeps writing.
const SEAL_ROUNDS: usize = 8;

fn marker_path(ds: &Dataset) -> Path {
    mem_wal_path(&ds.branch_location().path).join("unsetting")
}

/// The answer to a write that meets an unset in progress.
pub(super) fn unsetting_error() -> ApiError {
    ApiError::unavailable(
        "the table's LSM write spec is being unset (or an unset was cut off: run \
         unset_lsm_write_spec again): nothing of this write is acknowledged; retry",
    )
}

impl Store {
    /// Whether an unset of the table's spec is in progress (or was cut off).
    pub(super) async fn lsm_unsetting(&self, ds: &Dataset) -> ApiResult<bool> {
        let store = ds.object_store(None).await.map_err(ApiError::from)?;
        store.exists(&marker_path(ds)).await.map_err(ApiError::from)
    }

    /// The shard's manifest when it is sealed.
    pub(super) async fn sealed_manifest(
        &self,
        ds: &Dataset,
        shard: Uuid,
    ) -> ApiResult<Option<ShardManifest>> {
        let store = ds.object_store(None).await.map_err(ApiError::from)?;
        let manifest = ShardManifestStore::new(store, &ds.branch_location().path, shard, 2)
            .latest()
            .await
            .map_err(ApiError::from)?;
        Ok(manifest.filter(|m| m.status == ShardStatus::Sealed))
    }

    /// Write the unset marker, then flush and seal every shard of the table, however other
    /// replicas write meanwhile. On failure the table is left as it was.
    pub(super) async fn lsm_seal(&self, location: &str) -> ApiResult<()> {
        let ds = self.latest(location, None).await?;
        let store = ds.object_store(None).await.map_err(ApiError::from)?;
        store
            .put(&marker_path(&ds), marker_body().as_bytes())
            .await
            .map_err(ApiError::from)?;
        let sealed = self.seal_rounds(location).await;
        if let Err(e) = &sealed {
            tracing::warn!(%location, error = %e.message, "unset could not seal the shards; rolling back");
            self.lsm_unseal(location).await;
        }
        sealed
    }

    async fn seal_rounds(&self, location: &str) -> ApiResult<()> {
        for _ in 0..SEAL_ROUNDS {
            let ds = self.latest(location, None).await?;
            let installed = require(self.lsm_installed(&ds).await?)?;
            let claimed = match self
                .claim_all(location, &ds, &installed, Purpose::Unset)
                .await
            {
                Ok(c) => c,
                // A replica claimed a shard while this node opened it: another round.
                Err(e) if e.code == lance_namespace::ErrorCode::ServiceUnavailable => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut lost = false;
            for writer in &claimed.writers {
                match seal_one(writer).await {
                    Ok(()) => {}
                    Err(e) if lost_ownership(&e) => {
                        self.lsm.drop_writer(location, writer.shard_id(), writer);
                        lost = true;
                    }
                    Err(e) => return Err(ApiError::from(e)),
                }
            }
            if !lost {
                return Ok(());
            }
        }
        Err(ApiError::unavailable(
            "another replica kept taking this table's shards back while they were sealed: \
             stop writing to the table there and run the unset again",
        ))
    }

    /// Best effort: every sealed shard back to active (under a claim of its own), then the
    /// marker removed.
    async fn lsm_unseal(&self, location: &str) {
        let Ok(ds) = self.latest(location, None).await else {
            return;
        };
        let Ok(Some(installed)) = self.lsm_installed(&ds).await else {
            return;
        };
        let Ok(store) = ds.object_store(None).await else {
            return;
        };
        let base = ds.branch_location().path;
        for shard in self.lsm_shards(&ds, &installed).await.unwrap_or_default() {
            let manifests = ShardManifestStore::new(store.clone(), &base, shard, 2);
            let Ok(Some(m)) = manifests.latest().await else {
                continue;
            };
            if m.status != ShardStatus::Sealed {
                continue;
            }
            // A sealed shard refuses claims: reopen it under the epoch it was sealed with.
            let epoch = m.writer_epoch;
            let reopened = manifests
                .commit_update(epoch, |c| ShardManifest {
                    version: c.next_version(),
                    status: ShardStatus::Active,
                    ..c.clone()
                })
                .await;
            if let Err(e) = reopened {
                tracing::warn!(%location, %shard, error = %e, "could not unseal a shard");
            }
        }
        if let Err(e) = store.delete(&marker_path(&ds)).await {
            tracing::warn!(%location, error = %e, "could not remove the unset marker");
        }
    }
}

fn marker_body() -> String {
    format!(
        "unset_lsm_write_spec started at {}\n",
        chrono::Utc::now().to_rfc3339()
    )
}

/// Flush the writer's memtable into a generation, then seal its shard under its epoch.
async fn seal_one(writer: &Arc<ShardWriter>) -> lance_core::Result<()> {
    writer.force_freeze_active().await?.wait().await?;
    let epoch = writer.epoch();
    writer
        .manifest_store()
        .commit_update(epoch, |c| ShardManifest {
            version: c.next_version(),
            status: ShardStatus::Sealed,
            ..c.clone()
        })
        .await?;
    Ok(())
}
