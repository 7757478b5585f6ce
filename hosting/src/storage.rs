//! Storage per tenant: what was measured (per part: a table, the models, the checkpoints)
//! plus what writes in flight have reserved. A write reserves the bytes it brings before it
//! starts and holds the [`Reservation`] until its part has been measured again, so writers
//! racing each other see one another's bytes and together stay within one write of the quota.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Why a write was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverQuota {
    /// Bytes held now (measured and reserved).
    pub used: u64,
    /// Bytes the write brings.
    pub incoming: u64,
    /// The tenant's quota.
    pub quota: u64,
}

impl std::fmt::Display for OverQuota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "storage quota exceeded: {} bytes used (with writes in flight), this write brings {} \
             and the quota is {}; delete data or clean up old versions to make room",
            self.used, self.incoming, self.quota
        )
    }
}

#[derive(Debug, Default)]
struct Tenant {
    parts: HashMap<String, u64>,
    measured: u64,
    reserved: u64,
}

#[derive(Debug, Default)]
struct Inner {
    tenants: Mutex<HashMap<String, Tenant>>,
}

/// Every tenant's bytes.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    inner: Arc<Inner>,
}

/// Bytes reserved by a write in flight; released when dropped.
#[derive(Debug)]
pub struct Reservation {
    inner: Arc<Inner>,
    tenant: String,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut tenants = self.inner.tenants.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = tenants.get_mut(&self.tenant) {
            t.reserved = t.reserved.saturating_sub(self.bytes);
        }
    }
}

impl Reservation {
    /// Reserves `more` bytes on top (a body arriving in pieces), if they fit under `quota`.
    pub fn grow(&mut self, more: u64, quota: Option<u64>) -> Result<(), OverQuota> {
        let mut tenants = self.inner.tenants.lock().unwrap_or_else(|e| e.into_inner());
        let t = tenants.entry(self.tenant.clone()).or_default();
        let used = t.measured + t.reserved;
        if let Some(quota) = quota
            && used.saturating_add(more) > quota
        {
            return Err(OverQuota {
                used,
                incoming: self.bytes + more,
                quota,
            });
        }
        t.reserved += more;
        self.bytes += more;
        Ok(())
    }

    /// Bytes reserved.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Ledger {
    /// Records that `part` of `tenant` now holds `bytes` (0 removes it).
    pub fn set(&self, tenant: &str, part: &str, bytes: u64) {
        let mut tenants = self.inner.tenants.lock().unwrap_or_else(|e| e.into_inner());
        let t = tenants.entry(tenant.to_string()).or_default();
        let old = if bytes == 0 {
            t.parts.remove(part).unwrap_or(0)
        } else {
            t.parts.insert(part.to_string(), bytes).unwrap_or(0)
        };
        t.measured = t.measured - old + bytes;
    }

    /// Replaces every part of `tenant` at once (after measuring all of it).
    pub fn set_all(&self, tenant: &str, parts: HashMap<String, u64>) {
        let mut tenants = self.inner.tenants.lock().unwrap_or_else(|e| e.into_inner());
        let t = tenants.entry(tenant.to_string()).or_default();
        t.measured = parts.values().sum();
        t.parts = parts;
    }

    /// Bytes measured for `tenant` (without reservations).
    pub fn measured(&self, tenant: &str) -> u64 {
        let tenants = self.inner.tenants.lock().unwrap_or_else(|e| e.into_inner());
        tenants.get(tenant).map_or(0, |t| t.measured)
    }

    /// Whether `tenant` was measured at all.
    pub fn knows(&self, tenant: &str) -> bool {
        let tenants = self.inner.tenants.lock().unwrap_or_else(|e| e.into_inner());
        tenants.contains_key(tenant)
    }

    /// Reserves `incoming` bytes of `tenant` if they fit under `quota` (`None`: no quota),
    /// else says why not. A write bringing no bytes (an index build, a backfill) is refused
    /// only once the tenant is at or over its quota.
    pub fn reserve(
        &self,
        tenant: &str,
        incoming: u64,
        quota: Option<u64>,
    ) -> Result<Reservation, OverQuota> {
        let mut tenants = self.inner.tenants.lock().unwrap_or_else(|e| e.into_inner());
        let t = tenants.entry(tenant.to_string()).or_default();
        let used = t.measured + t.reserved;
        if let Some(quota) = quota {
            let over = if incoming == 0 {
                used >= quota
            } else {
                used.saturating_add(incoming) > quota
            };
            if over {
                return Err(OverQuota {
                    used,
                    incoming,
                    quota,
                });
            }
        }
        t.reserved += incoming;
        Ok(Reservation {
            inner: self.inner.clone(),
            tenant: tenant.to_string(),
            bytes: incoming,
        })
    }

    /// Forgets a tenant (deleted).
    pub fn forget(&self, tenant: &str) {
        self.inner
            .tenants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(tenant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_count_until_released() {
        let ledger = Ledger::default();
        ledger.set("a", "t1", 600);
        let r1 = ledger.reserve("a", 300, Some(1000)).unwrap();
        // Together with the first write in flight, the second would pass the quota.
        let err = ledger.reserve("a", 200, Some(1000)).unwrap_err();
        assert_eq!((err.used, err.incoming, err.quota), (900, 200, 1000));
        // Another tenant is unaffected.
        assert!(ledger.reserve("b", 10_000, Some(20_000)).is_ok());
        // The first write lands and is measured, then its reservation goes.
        ledger.set("a", "t1", 880);
        drop(r1);
        assert_eq!(ledger.measured("a"), 880);
        assert!(ledger.reserve("a", 100, Some(1000)).is_ok());
        assert!(ledger.reserve("a", 121, Some(1000)).is_err());
        // A write with no body is refused only at the quota.
        assert!(ledger.reserve("a", 0, Some(1000)).is_ok());
        ledger.set("a", "t2", 120);
        assert!(ledger.reserve("a", 0, Some(1000)).is_err());
        // A body arriving in pieces grows its reservation until it would pass the quota.
        let mut growing = ledger.reserve("a", 0, Some(1000)).unwrap_err();
        assert_eq!(growing.used, 1000);
        ledger.set("a", "t2", 0);
        let mut r = ledger.reserve("a", 0, Some(1000)).unwrap();
        r.grow(50, Some(1000)).unwrap();
        growing = r.grow(2000, Some(1000)).unwrap_err();
        assert_eq!(growing.incoming, 2050);
        assert_eq!(r.bytes(), 50);
        drop(r);
        ledger.set("a", "t2", 120);
        // Deleting gives room back.
        ledger.set("a", "t1", 0);
        assert_eq!(ledger.measured("a"), 120);
        assert!(ledger.reserve("a", 500, Some(1000)).is_ok());
        assert!(ledger.reserve("a", u64::MAX, None).is_ok());
    }
}
