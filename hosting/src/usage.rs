//! What each tenant used, counted as it happens: requests, bytes in and out, rows read and
//! written, UDF time, model tokens, rows computed by jobs. Counting is an atomic add on the
//! tenant's counters; [`Usage::take`] hands the counts since the last take to whoever stores
//! them (and [`Usage::give_back`] returns them when storing failed, so nothing is lost or
//! counted twice).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// What is counted, in the order of [`Counts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Requests answered.
    Requests,
    /// Request body bytes received.
    BytesIn,
    /// Answer body bytes sent.
    BytesOut,
    /// Rows answered by queries.
    RowsRead,
    /// Rows written by requests (inserted, merged, created).
    RowsWritten,
    /// Milliseconds inside UDF guest calls.
    UdfMillis,
    /// Model tokens (estimated as the embedding budget counts them).
    ModelTokens,
    /// Rows computed by the tenant's backfill jobs.
    JobRows,
}

impl Measure {
    /// Every measure, in order.
    pub const ALL: [Measure; 8] = [
        Measure::Requests,
        Measure::BytesIn,
        Measure::BytesOut,
        Measure::RowsRead,
        Measure::RowsWritten,
        Measure::UdfMillis,
        Measure::ModelTokens,
        Measure::JobRows,
    ];

    /// Its column name.
    pub fn name(self) -> &'static str {
        match self {
            Measure::Requests => "requests",
            Measure::BytesIn => "bytes_in",
            Measure::BytesOut => "bytes_out",
            Measure::RowsRead => "rows_read",
            Measure::RowsWritten => "rows_written",
            Measure::UdfMillis => "udf_ms",
            Measure::ModelTokens => "model_tokens",
            Measure::JobRows => "job_rows",
        }
    }
}

/// One count per [`Measure`].
pub type Counts = [u64; Measure::ALL.len()];

/// A tenant's live counters.
#[derive(Debug, Default)]
pub struct Counters([AtomicU64; Measure::ALL.len()]);

impl Counters {
    /// Adds `n` to `what`.
    pub fn add(&self, what: Measure, n: u64) {
        if n > 0 {
            self.0[what as usize].fetch_add(n, Ordering::Relaxed);
        }
    }

    fn take(&self) -> Counts {
        std::array::from_fn(|i| self.0[i].swap(0, Ordering::Relaxed))
    }

    fn give_back(&self, counts: &Counts) {
        for (c, n) in self.0.iter().zip(counts) {
            c.fetch_add(*n, Ordering::Relaxed);
        }
    }
}

/// Every tenant's counters.
#[derive(Debug, Default)]
pub struct Usage {
    tenants: RwLock<HashMap<String, Arc<Counters>>>,
}

impl Usage {
    /// `tenant`'s counters (made on first use).
    pub fn tenant(&self, tenant: &str) -> Arc<Counters> {
        if let Some(c) = self
            .tenants
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(tenant)
        {
            return c.clone();
        }
        let mut map = self.tenants.write().unwrap_or_else(|e| e.into_inner());
        map.entry(tenant.to_string()).or_default().clone()
    }

    /// Adds `n` to `tenant`'s `what`.
    pub fn add(&self, tenant: &str, what: Measure, n: u64) {
        if n > 0 {
            self.tenant(tenant).add(what, n);
        }
    }

    /// The counts since the last take, per tenant (tenants with none left out); the counters
    /// restart from zero.
    pub fn take(&self) -> Vec<(String, Counts)> {
        let map = self.tenants.read().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<(String, Counts)> = map
            .iter()
            .map(|(t, c)| (t.clone(), c.take()))
            .filter(|(_, c)| c.iter().any(|n| *n > 0))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Returns counts taken but not stored, to be taken again.
    pub fn give_back(&self, taken: &[(String, Counts)]) {
        for (tenant, counts) in taken {
            self.tenant(tenant).give_back(counts);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_taken_once_or_given_back() {
        let usage = Usage::default();
        usage.add("a", Measure::Requests, 2);
        usage.add("a", Measure::BytesIn, 100);
        usage.add("b", Measure::JobRows, 7);
        usage.add("c", Measure::Requests, 0);
        let taken = usage.take();
        assert_eq!(taken.len(), 2, "{taken:?}");
        assert_eq!(taken[0].1[Measure::Requests as usize], 2);
        assert_eq!(taken[0].1[Measure::BytesIn as usize], 100);
        assert!(usage.take().is_empty());
        usage.give_back(&taken);
        usage.add("a", Measure::Requests, 1);
        let again = usage.take();
        assert_eq!(again[0].1[Measure::Requests as usize], 3);
        assert_eq!(again[1].1[Measure::JobRows as usize], 7);
        assert_eq!(Measure::ALL.map(Measure::name)[5], "udf_ms");
    }
}
