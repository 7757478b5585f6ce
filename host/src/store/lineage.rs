//! Row lineage: lance's stable row ids, which carry each row's `_row_last_updated_at_version`
//! through updates, upserts and compaction, and the table config entries that remember what a
//! refresh has seen (see `jobs::kinds::backfill::changed`).

use std::time::Duration;

use lance_namespace::ErrorCode;

use super::Store;
use crate::error::ApiResult;

/// Migration commits refuse to rebase over a concurrent write; tried this many times.
const MIGRATION_ATTEMPTS: usize = 4;

impl Store {
    /// Give the table stable row ids if it has none (a metadata-only commit). Answers whether
    /// it has them now: `false` when concurrent writes kept the migration from landing.
    pub async fn ensure_stable_row_ids(
        &self,
        location: &str,
        branch: Option<&str>,
    ) -> ApiResult<bool> {
        for attempt in 0..MIGRATION_ATTEMPTS {
            if self
                .latest(location, branch)
                .await?
                .manifest
                .uses_stable_row_ids()
            {
                return Ok(true);
            }
            let migrated = self
                .evolve(location, branch, |ds| {
                    Box::pin(async move { ds.migrate_to_stable_row_ids().await })
                })
                .await;
            match migrated {
                Ok(_) => return Ok(true),
                Err(e) if e.code == ErrorCode::ConcurrentModification => {
                    tracing::debug!(attempt, error = %e.message, "stable row id migration raced a write");
                    tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// Set one table config entry (a commit of its own).
    pub async fn set_config_value(
        &self,
        location: &str,
        branch: Option<&str>,
        key: String,
        value: String,
    ) -> ApiResult<u64> {
        self.evolve(location, branch, |ds| {
            Box::pin(async move { ds.update_config([(key, value)]).await.map(|_| ()) })
        })
        .await
    }
}
