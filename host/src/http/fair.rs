//! Fair sharing of the server between tenants. Admitted requests (see `overload`) run their
//! handler only while holding one of a few *run slots*; when a slot frees, it goes to the
//! waiting tenant that holds the fewest slots (oldest request first among equals). A tenant
//! that floods the server therefore queues behind itself: another tenant's request waits for
//! at most the next slot to free, then runs beside a bounded number of the flood's requests,
//! instead of sharing the CPU with every request the flood has in flight.
//!
//! Waiting is bounded by the in-flight limits (a tenant cannot queue more than its in-flight
//! bound), and by [`MAX_WAIT`], after which the request is refused with 503.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

/// How long an admitted request may wait for a run slot before it is refused.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

pub struct FairScheduler {
    slots: usize,
    /// The most slots one tenant holds, so that one tenant's slow requests (an index build,
    /// a large write) never hold every slot.
    per_tenant: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    running: usize,
    by_tenant: HashMap<String, usize>,
    waiting: HashMap<String, VecDeque<(u64, oneshot::Sender<RunSlot>)>>,
    next_seq: u64,
}

/// A held run slot; dropping it hands the slot to the next waiter.
pub struct RunSlot {
    scheduler: Arc<FairScheduler>,
    tenant: String,
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        self.scheduler.release(&self.tenant);
    }
}

impl FairScheduler {
    pub fn new(slots: usize, per_tenant: usize) -> Arc<Self> {
        let slots = slots.max(1);
        Arc::new(Self {
            slots,
            per_tenant: per_tenant.clamp(1, slots),
            state: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a slot for `tenant`; `None` after [`MAX_WAIT`].
    pub async fn acquire(self: &Arc<Self>, tenant: &str) -> Option<RunSlot> {
        let receiver = {
            let mut state = self.lock();
            let held = state.by_tenant.get(tenant).copied().unwrap_or(0);
            let queued = state.waiting.contains_key(tenant);
            if state.running < self.slots && held < self.per_tenant && !queued {
                state.running += 1;
                *state.by_tenant.entry(tenant.to_string()).or_default() += 1;
                return Some(self.slot(tenant));
            }
            let (sender, receiver) = oneshot::channel();
            let seq = state.next_seq;
            state.next_seq += 1;
            state
                .waiting
                .entry(tenant.to_string())
                .or_default()
                .push_back((seq, sender));
            receiver
        };
        // A waiter that gives up (time-out, client gone) drops its receiver: a slot sent to it
        // then is dropped with the channel, which releases it to the next waiter.
        tokio::time::timeout(MAX_WAIT, receiver).await.ok()?.ok()
    }

    fn slot(self: &Arc<Self>, tenant: &str) -> RunSlot {
        RunSlot {
            scheduler: self.clone(),
            tenant: tenant.to_string(),
        }
    }

    fn release(self: &Arc<Self>, tenant: &str) {
        let mut state = self.lock();
        state.running -= 1;
        if let Some(n) = state.by_tenant.get_mut(tenant) {
            *n -= 1;
            if *n == 0 {
                state.by_tenant.remove(tenant);
            }
        }
        while state.running < self.slots {
            let Some(next) = pick(&state, self.per_tenant) else {
                return;
            };
            let queue = state
                .waiting
                .get_mut(&next)
                .expect("picked a waiting tenant");
            let (_, sender) = queue.pop_front().expect("a waiting tenant has a waiter");
            if queue.is_empty() {
                state.waiting.remove(&next);
            }
            state.running += 1;
            *state.by_tenant.entry(next.clone()).or_default() += 1;
            let slot = RunSlot {
                scheduler: self.clone(),
                tenant: next.clone(),
            };
            if let Err(slot) = sender.send(slot) {
                // That waiter is gone; undo by hand (dropping the slot here would re-enter
                // this lock) and offer the slot to the next one.
                std::mem::forget(slot);
                state.running -= 1;
                if let Some(n) = state.by_tenant.get_mut(&next) {
                    *n -= 1;
                    if *n == 0 {
                        state.by_tenant.remove(&next);
                    }
                }
            }
        }
    }
}

/// The waiting tenant under its cap holding the fewest slots; among equals, the one waiting
/// longest.
fn pick(state: &State, per_tenant: usize) -> Option<String> {
    let held = |t: &String| state.by_tenant.get(t).copied().unwrap_or(0);
    state
        .waiting
        .iter()
        .filter(|(tenant, _)| held(tenant) < per_tenant)
        .filter_map(|(tenant, queue)| Some((tenant, queue.front()?.0)))
        .min_by_key(|(tenant, seq)| (held(tenant), *seq))
        .map(|(tenant, _)| tenant.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_tenant_holding_fewest() {
        let s = FairScheduler::new(2, 2);
        let a1 = s.acquire("a").await.unwrap();
        let a2 = s.acquire("a").await.unwrap();
        // Both slots are a's; a queues a third, then b arrives later.
        let s2 = s.clone();
        let a3 = tokio::spawn(async move { s2.acquire("a").await.map(|_| "a") });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let s3 = s.clone();
        let b1 = tokio::spawn(async move { s3.acquire("b").await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(a1);
        // b holds none, a holds one: b goes first although a waited longer.
        let b_slot = b1.await.unwrap();
        assert!(b_slot.is_some());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!a3.is_finished());
        drop(a2);
        assert_eq!(a3.await.unwrap(), Some("a"));
        drop(b_slot);
    }

    #[tokio::test]
    async fn a_tenant_holds_at_most_its_share_of_slots() {
        let s = FairScheduler::new(4, 2);
        let a1 = s.acquire("a").await.unwrap();
        let _a2 = s.acquire("a").await.unwrap();
        // Two slots are free, but a is at its cap: a waits, b does not.
        let s2 = s.clone();
        let a3 = tokio::spawn(async move { s2.acquire("a").await.is_some() });
        let _b1 = s.acquire("b").await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!a3.is_finished());
        drop(a1);
        assert!(a3.await.unwrap());
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_does_not_leak_its_slot() {
        let s = FairScheduler::new(1, 1);
        let first = s.acquire("a").await.unwrap();
        let s2 = s.clone();
        let gone = tokio::spawn(async move { s2.acquire("b").await.is_some() });
        tokio::time::sleep(Duration::from_millis(20)).await;
        gone.abort();
        let _ = gone.await;
        drop(first);
        let again = tokio::time::timeout(Duration::from_secs(1), s.acquire("c")).await;
        assert!(again.unwrap().is_some(), "the slot came back");
    }
}
