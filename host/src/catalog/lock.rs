//! The catalog lock: catalog changes (create, declare, register, deregister, drop, rename,
//! batch-commit) of one tenant run one at a time across every node sharing the root. Inside a
//! process a mutex queues them; across processes a lease (`_batch_intents/lease` under the
//! tenant's root) does, which also keeps a node from "recovering" a batch another node is in
//! the middle of: recovery runs only under the lease, and a node killed mid-batch stops
//! renewing, so its batch is settled by whoever takes the lease next.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::error::{ApiError, ApiResult};
use crate::root::{Lease, RootStore};

/// Long enough for any catalog change; renewed while held.
const TTL: Duration = Duration::from_secs(30);
/// How long a change waits for another node's before answering 503.
const WAIT: Duration = Duration::from_secs(20);
const KEY: &str = "_batch_intents/lease";

pub struct CatalogLock {
    local: Arc<tokio::sync::Mutex<()>>,
    store: Arc<RootStore>,
    node: String,
    /// Set when a change ends (the catalog snapshot's flag: see `snapshot.rs`).
    changed: Arc<AtomicBool>,
}

/// Held while a catalog change runs; released (locally at once, the lease in the background)
/// when dropped.
pub struct CatalogGuard {
    _local: tokio::sync::OwnedMutexGuard<()>,
    renewer: tokio::task::JoinHandle<()>,
    lease: Arc<tokio::sync::Mutex<Option<Lease>>>,
    store: Arc<RootStore>,
    changed: Arc<AtomicBool>,
}

impl CatalogLock {
    pub fn new(store: Arc<RootStore>, node: String, changed: Arc<AtomicBool>) -> Self {
        Self {
            local: Default::default(),
            store,
            node,
            changed,
        }
    }

    pub async fn lock(&self) -> ApiResult<CatalogGuard> {
        let local = self.local.clone().lock_owned().await;
        let lease = Lease::acquire_within(&self.store, KEY, &self.node, TTL, WAIT)
            .await?
            .ok_or_else(|| {
                ApiError::unavailable(
                    "another server node holds this tenant's catalog lock; retry shortly",
                )
            })?;
        Ok(self.guard(local, lease))
    }

    /// The lock if nobody holds it now (for recovery when a catalog opens).
    pub async fn try_lock(&self) -> ApiResult<Option<CatalogGuard>> {
        let Ok(local) = self.local.clone().try_lock_owned() else {
            return Ok(None);
        };
        let lease = Lease::try_acquire(&self.store, KEY, &self.node, TTL).await?;
        Ok(lease.map(|l| self.guard(local, l)))
    }

    fn guard(&self, local: tokio::sync::OwnedMutexGuard<()>, lease: Lease) -> CatalogGuard {
        let lease = Arc::new(tokio::sync::Mutex::new(Some(lease)));
        let (held, store) = (lease.clone(), self.store.clone());
        let renewer = tokio::spawn(async move {
            loop {
                tokio::time::sleep(TTL / 3).await;
                let mut held = held.lock().await;
                let Some(lease) = held.as_mut() else { return };
                match lease.renew(&store, TTL).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::error!("the catalog lease was taken over while held");
                        return;
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot renew the catalog lease"),
                }
            }
        });
        CatalogGuard {
            _local: local,
            renewer,
            lease,
            store: self.store.clone(),
            changed: self.changed.clone(),
        }
    }
}

impl Drop for CatalogGuard {
    fn drop(&mut self) {
        self.changed.store(true, Ordering::SeqCst);
        self.renewer.abort();
        let (lease, store) = (self.lease.clone(), self.store.clone());
        tokio::spawn(async move {
            if let Some(lease) = lease.lock().await.take() {
                lease.release(&store).await;
            }
        });
    }
}
