//! Per-tenant counts of UDF calls and how they ended, kept by the runtime so that whoever
//! exports metrics (the host) needs no hook in the call path.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::UdfError;

/// What one tenant's calls came to since the runtime started.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CallStats {
    /// Guest calls made (one per chunk of at most `max_rows_per_call` rows).
    pub calls: u64,
    /// Rows passed to those calls.
    pub rows: u64,
    /// Calls the guest itself reported as failed.
    pub guest_errors: u64,
    /// Calls that trapped (a panic, an unreachable, an out-of-bounds access).
    pub traps: u64,
    /// Calls stopped by a limit: time, memory, stack, output size.
    pub limit_hits: u64,
    /// Calls whose result failed the host's checks.
    pub bad_output: u64,
    /// Microseconds spent inside those calls (a guest runs on one thread: its CPU time, plus
    /// any time the host made it wait).
    pub busy_us: u64,
}

#[derive(Default)]
struct Atomics {
    calls: AtomicU64,
    rows: AtomicU64,
    guest_errors: AtomicU64,
    traps: AtomicU64,
    limit_hits: AtomicU64,
    bad_output: AtomicU64,
    busy_us: AtomicU64,
}

#[derive(Default)]
pub(crate) struct TenantCallStats {
    // Written once per tenant, read on every call.
    by_tenant: RwLock<HashMap<String, Arc<Atomics>>>,
}

impl TenantCallStats {
    fn counters(&self, tenant: &str) -> Arc<Atomics> {
        if let Some(c) = self
            .by_tenant
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tenant)
        {
            return c.clone();
        }
        let mut map = self.by_tenant.write().unwrap_or_else(|p| p.into_inner());
        map.entry(tenant.to_string()).or_default().clone()
    }

    /// Counts one guest call over `rows` rows that took `took` and ended in `outcome`.
    pub(crate) fn record<T>(
        &self,
        tenant: &str,
        rows: usize,
        took: std::time::Duration,
        outcome: &Result<T, UdfError>,
    ) {
        let c = self.counters(tenant);
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.rows.fetch_add(rows as u64, Ordering::Relaxed);
        c.busy_us
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        let slot = match outcome {
            Ok(_) => return,
            Err(UdfError::Guest { .. }) => &c.guest_errors,
            Err(UdfError::Trap { .. }) => &c.traps,
            Err(
                UdfError::Timeout { .. }
                | UdfError::MemoryLimit { .. }
                | UdfError::StackOverflow { .. }
                | UdfError::OutputTooLarge { .. },
            ) => &c.limit_hits,
            Err(UdfError::BadOutput { .. }) => &c.bad_output,
            Err(_) => return,
        };
        slot.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Vec<(String, CallStats)> {
        let map = self.by_tenant.read().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<_> = map
            .iter()
            .map(|(tenant, c)| {
                let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
                let stats = CallStats {
                    calls: get(&c.calls),
                    rows: get(&c.rows),
                    guest_errors: get(&c.guest_errors),
                    traps: get(&c.traps),
                    limit_hits: get(&c.limit_hits),
                    bad_output: get(&c.bad_output),
                    busy_us: get(&c.busy_us),
                };
                (tenant.clone(), stats)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_counted_per_tenant() {
        let stats = TenantCallStats::default();
        stats.record::<()>("a", 10, std::time::Duration::from_micros(5), &Ok(()));
        stats.record::<()>(
            "a",
            5,
            std::time::Duration::from_micros(5),
            &Err(UdfError::Trap {
                udf: "f".into(),
                message: "unreachable".into(),
            }),
        );
        stats.record::<()>(
            "b",
            7,
            std::time::Duration::from_micros(5),
            &Err(UdfError::Timeout {
                udf: "f".into(),
                limit: std::time::Duration::from_millis(1),
            }),
        );
        let snap = stats.snapshot();
        assert_eq!(snap[0].0, "a");
        assert_eq!(
            snap[0].1,
            CallStats {
                calls: 2,
                rows: 15,
                traps: 1,
                busy_us: 10,
                ..Default::default()
            }
        );
        assert_eq!(snap[1].1.limit_hits, 1);
        assert_eq!(snap[1].1.calls, 1);
    }
}
