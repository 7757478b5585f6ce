//! Leases on the data root: who does a piece of shared work (runs a job, holds a tenant's
//! catalog for a batch-commit) until when. A lease is one small JSON object, taken with a
//! create-if-absent or, once expired, a replace-if-unchanged; renewed the same way. Two nodes
//! racing for one lease cannot both win: the store accepts exactly one of their conditional
//! writes. A holder that stops renewing (killed, partitioned) loses the lease when it expires;
//! it must stop the work as soon as a renewal fails.
//!
//! Expiry is compared with each node's wall clock: clocks must agree to well within a TTL
//! (NTP does; the TTLs here are tens of seconds).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{RootStore, Version};
use crate::error::ApiResult;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeaseBody {
    /// The node holding it (`--node-id`, else a name made at start-up).
    pub holder: String,
    /// Wall-clock milliseconds after which anyone may take it.
    pub expires_ms: i64,
    /// How many times it changed hands (for logs).
    #[serde(default)]
    pub generation: u64,
}

/// A lease this node holds.
#[derive(Debug)]
pub struct Lease {
    pub key: String,
    pub holder: String,
    pub generation: u64,
    version: Version,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn body(holder: &str, ttl: Duration, generation: u64) -> Vec<u8> {
    serde_json::to_vec(&LeaseBody {
        holder: holder.to_string(),
        expires_ms: now_ms() + ttl.as_millis() as i64,
        generation,
    })
    .unwrap_or_default()
}

impl Lease {
    /// Take the lease at `key` if nobody holds it (absent, expired, or already ours); `None`
    /// when another node holds it.
    pub async fn try_acquire(
        root: &RootStore,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> ApiResult<Option<Lease>> {
        let current = root.get(key).await?;
        let (version, generation) = match current {
            None => match root.create(key, body(holder, ttl, 1)).await? {
                Some(v) => (v, 1),
                None => return Ok(None),
            },
            Some(current) => {
                let held: Option<LeaseBody> = serde_json::from_slice(&current.bytes).ok();
                let generation = held.as_ref().map_or(0, |h| h.generation);
                // A garbled lease is as good as expired: nobody could prove they hold it.
                let free = held
                    .as_ref()
                    .is_none_or(|h| h.expires_ms < now_ms() || h.holder == holder);
                if !free {
                    return Ok(None);
                }
                let generation = generation + 1;
                match root
                    .replace(key, body(holder, ttl, generation), &current.version)
                    .await?
                {
                    Some(v) => (v, generation),
                    None => return Ok(None),
                }
            }
        };
        Ok(Some(Lease {
            key: key.to_string(),
            holder: holder.to_string(),
            generation,
            version,
        }))
    }

    /// Take the lease, waiting for it up to `wait` (polling); `None` if it stayed taken.
    pub async fn acquire_within(
        root: &RootStore,
        key: &str,
        holder: &str,
        ttl: Duration,
        wait: Duration,
    ) -> ApiResult<Option<Lease>> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut pause = Duration::from_millis(20);
        loop {
            if let Some(lease) = Self::try_acquire(root, key, holder, ttl).await? {
                return Ok(Some(lease));
            }
            if tokio::time::Instant::now() + pause > deadline {
                return Ok(None);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// Extend the lease by `ttl` from now; `false` when it was lost (taken over after it
    /// expired): the work it covered must stop.
    pub async fn renew(&mut self, root: &RootStore, ttl: Duration) -> ApiResult<bool> {
        match root
            .replace(
                &self.key,
                body(&self.holder, ttl, self.generation),
                &self.version,
            )
            .await?
        {
            Some(v) => {
                self.version = v;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Give the lease up at once (only if still ours), so the next taker need not wait.
    pub async fn release(self, root: &RootStore) {
        let expired = serde_json::to_vec(&LeaseBody {
            holder: String::new(),
            expires_ms: 0,
            generation: self.generation,
        })
        .unwrap_or_default();
        if let Err(e) = root.replace(&self.key, expired, &self.version).await {
            tracing::warn!(key = %self.key, error = %e, "cannot release a lease; it will expire");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn root() -> (tempfile::TempDir, RootStore) {
        let dir = tempfile::tempdir().unwrap();
        let session = lance::session::Session::default();
        let root = RootStore::open(dir.path().to_str().unwrap(), &Default::default(), &session)
            .await
            .unwrap();
        (dir, root)
    }

    #[tokio::test]
    async fn one_holder_at_a_time_and_expired_leases_are_taken_over() {
        let (_dir, root) = root().await;
        let ttl = Duration::from_millis(300);
        let mut a = Lease::try_acquire(&root, "l/x", "a", ttl)
            .await
            .unwrap()
            .unwrap();
        assert!(
            Lease::try_acquire(&root, "l/x", "b", ttl)
                .await
                .unwrap()
                .is_none()
        );
        assert!(a.renew(&root, ttl).await.unwrap());
        tokio::time::sleep(Duration::from_millis(400)).await;
        let b = Lease::try_acquire(&root, "l/x", "b", ttl)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(b.generation, 2);
        // a's renewal fails: b holds it now.
        assert!(!a.renew(&root, ttl).await.unwrap());
        b.release(&root).await;
        assert!(
            Lease::try_acquire(&root, "l/x", "c", ttl)
                .await
                .unwrap()
                .is_some()
        );
        // Lock files are not objects.
        assert_eq!(root.list("l").await.unwrap(), vec!["l/x".to_string()]);
    }

    #[tokio::test]
    async fn racing_creates_have_one_winner() {
        let (_dir, root) = root().await;
        let root = std::sync::Arc::new(root);
        let mut tasks = Vec::new();
        for i in 0..8 {
            let root = root.clone();
            tasks.push(tokio::spawn(async move {
                Lease::try_acquire(&root, "race", &format!("n{i}"), Duration::from_secs(30))
                    .await
                    .unwrap()
                    .is_some()
            }));
        }
        let mut wins = 0;
        for t in tasks {
            wins += t.await.unwrap() as usize;
        }
        assert_eq!(wins, 1);
    }
}
