//! Lancet as a service for many tenants: the operator's view of tenants (their lifecycle in
//! [`lifecycle`]), quotas (request rates, tables, jobs, storage measured in [`storage`]) and the
//! audit log ([`audit_log`]). The pieces that know neither HTTP nor lance are the
//! `lancet-hosting` crate's; this module stores and measures them under the root.

pub mod audit_log;
pub mod keys_used;
pub mod lifecycle;
pub mod storage;
pub mod usage_log;

use std::sync::Arc;
use std::time::Duration;

use lancet_hosting::rate::{Rate, RateLimits};
use lancet_hosting::storage::Ledger;
use lancet_hosting::usage::Usage;

use crate::config::TenantSettings;

/// Every row of `ds` matching `filter` (empty: all), as lance scans them.
pub async fn scan_all(
    ds: &lance::Dataset,
    filter: &str,
) -> lance::Result<Vec<arrow_array::RecordBatch>> {
    use futures::TryStreamExt;
    let mut scanner = ds.scan();
    if !filter.is_empty() {
        scanner.filter(filter)?;
    }
    scanner.try_into_stream().await?.try_collect().await
}

/// The hosting state of one process.
pub struct Hosting {
    /// `None` with `--audit off`.
    pub audit: Option<Arc<audit_log::AuditLog>>,
    pub rates: RateLimits,
    pub ledger: Ledger,
    /// What each tenant used since the last flush (`usage_log`); `None` with `--usage off`.
    pub usage: Option<Arc<Usage>>,
    /// Serialises whole-tenant measurements (the first one of a tenant, and rescans).
    pub measuring: tokio::sync::Mutex<()>,
    /// Per tenant with a tables quota: held while one of its tables is made.
    making: std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Hosting {
    pub fn new(audit: Option<Arc<audit_log::AuditLog>>, usage: Option<Arc<Usage>>) -> Self {
        Self {
            audit,
            usage,
            rates: RateLimits::default(),
            ledger: Ledger::default(),
            measuring: Default::default(),
            making: Default::default(),
        }
    }

    /// `tenant`'s usage counters, unless usage is off.
    pub fn counters(&self, tenant: &str) -> Option<Arc<lancet_hosting::usage::Counters>> {
        self.usage.as_ref().map(|u| u.tenant(tenant))
    }

    /// Waits until no other request of this node is making a table for `tenant`, so that
    /// concurrent creates count one another against the tables quota.
    pub async fn making_table(&self, tenant: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self
            .making
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(tenant.to_string())
            .or_default()
            .clone();
        lock.lock_owned().await
    }

    /// Takes a request token of `tenant` if its quota sets a rate; else how long to wait.
    pub fn admit_rate(
        &self,
        tenant: &str,
        settings: Option<&TenantSettings>,
    ) -> Result<(), Duration> {
        let Some(per_second) = settings
            .and_then(|s| s.quota.as_ref())
            .and_then(|q| q.requests_per_second)
        else {
            return Ok(());
        };
        let burst = settings
            .and_then(|s| s.quota.as_ref())
            .and_then(|q| q.burst)
            .unwrap_or(per_second.max(1.0));
        self.rates.take(tenant, Rate { per_second, burst })
    }
}
