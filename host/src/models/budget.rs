//! A tenant's embedding tokens per second: a bucket that refills at a steady rate and holds one
//! second's worth. A call may take more than the bucket holds (a big batch is one call); the
//! debt then delays the tenant's next calls, so a guest calling `embed` in a loop gets the rate
//! and no more, and other tenants' calls never wait on it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct TokenBudget {
    per_sec: u64,
    state: Mutex<State>,
}

struct State {
    /// Tokens available; negative is debt.
    balance: f64,
    at: Instant,
}

impl TokenBudget {
    /// `per_sec` = 0: no limit.
    pub fn new(per_sec: u64) -> Self {
        Self {
            per_sec,
            state: Mutex::new(State {
                balance: per_sec as f64,
                at: Instant::now(),
            }),
        }
    }

    /// Takes `tokens`, waiting (up to `max_wait`) while the tenant is in debt; `Err(wait)`
    /// when the debt needs longer than `max_wait` to clear.
    pub async fn take(&self, tokens: u64, max_wait: Duration) -> Result<(), Duration> {
        if self.per_sec == 0 {
            return Ok(());
        }
        loop {
            let wait = {
                let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
                let now = Instant::now();
                let refill = now.duration_since(s.at).as_secs_f64() * self.per_sec as f64;
                s.balance = (s.balance + refill).min(self.per_sec as f64);
                s.at = now;
                if s.balance >= 0.0 {
                    s.balance -= tokens as f64;
                    return Ok(());
                }
                Duration::from_secs_f64(-s.balance / self.per_sec as f64)
            };
            if wait > max_wait {
                return Err(wait);
            }
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn debt_delays_the_next_call_and_no_further() {
        let b = TokenBudget::new(10_000);
        // A burst beyond the bucket passes, and leaves 2,000 tokens (0.2 s) of debt.
        b.take(12_000, Duration::ZERO).await.unwrap();
        let wait = b.take(1, Duration::from_millis(50)).await.unwrap_err();
        assert!(
            wait > Duration::from_millis(100) && wait <= Duration::from_millis(200),
            "{wait:?}"
        );
        let start = Instant::now();
        b.take(1, Duration::from_secs(1)).await.unwrap();
        assert!(
            start.elapsed() >= Duration::from_millis(100),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(
            TokenBudget::new(0).take(u64::MAX, Duration::ZERO).await,
            Ok(())
        );
    }
}
