//! Requests per second per tenant: a token bucket each, refilled continuously.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A tenant's rate: `per_second` tokens a second, at most `burst` saved up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Sustained requests per second (> 0).
    pub per_second: f64,
    /// Requests that may come at once after a quiet spell (>= 1).
    pub burst: f64,
}

#[derive(Debug)]
struct Bucket {
    rate: Rate,
    tokens: f64,
    at: Instant,
}

/// One bucket per tenant, made on first use.
#[derive(Debug, Default)]
pub struct RateLimits {
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimits {
    /// Takes one token of `tenant`'s bucket at `rate`; when there is none, how long until
    /// there is one. A changed rate applies from now on, keeping the tokens saved (capped).
    pub fn take(&self, tenant: &str, rate: Rate) -> Result<(), Duration> {
        self.take_at(tenant, rate, Instant::now())
    }

    fn take_at(&self, tenant: &str, rate: Rate, now: Instant) -> Result<(), Duration> {
        let per_second = rate.per_second.max(f64::MIN_POSITIVE);
        let burst = rate.burst.max(1.0);
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let bucket = buckets.entry(tenant.to_string()).or_insert(Bucket {
            rate,
            tokens: burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * per_second).min(burst);
        bucket.rate = rate;
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / per_second))
        }
    }

    /// Forgets a tenant's bucket (a deleted tenant).
    pub fn forget(&self, tenant: &str) {
        self.buckets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(tenant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_sustained_rate() {
        let limits = RateLimits::default();
        let rate = Rate {
            per_second: 10.0,
            burst: 3.0,
        };
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limits.take_at("a", rate, t0).is_ok());
        }
        let wait = limits.take_at("a", rate, t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-6, "{wait:?}");
        // Another tenant is untouched.
        assert!(limits.take_at("b", rate, t0).is_ok());
        // 0.1 s later one token is back, and only one.
        let t1 = t0 + Duration::from_millis(100);
        assert!(limits.take_at("a", rate, t1).is_ok());
        assert!(limits.take_at("a", rate, t1).is_err());
        // A long pause saves up no more than the burst.
        let t2 = t1 + Duration::from_secs(60);
        for _ in 0..3 {
            assert!(limits.take_at("a", rate, t2).is_ok());
        }
        assert!(limits.take_at("a", rate, t2).is_err());
    }
}
