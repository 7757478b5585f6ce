//! Fair sharing of the server between tenants. Admitted requests (see `overload`) run their
//! handler only while holding one of a few *run slots*; when a slot frees, it goes to the
//! waiting tenant that holds the fewest slots (oldest request first among equals). A tenant
//! that floods the server therefore queues behind itself: another tenant's request waits for
//! at most the next slot to free, then runs beside a bounded number of the flood's requests,
//! instead of sharing the CPU with every request the flood has in flight.
//!
//! The per-tenant share binds only while tenants compete: a tenant may borrow slots beyond it
//! while no other tenant has sent a request for [`ACTIVE_WINDOW`], so a lone tenant uses the
//! whole server (and its second request, say while its first runs a UDF to its time limit,
//! never queues behind its first). Borrowing waits for that quiet spell rather than only for an
//! empty queue: a tenant sending one request at a time has no request waiting most of the time,
//! and a flood that borrowed every slot in those gaps would make each of its requests wait for
//! a flood request to end (measured: p99 2.5-3.2x against 1x, `overload_bench`).
//!
//! A request that has held its slot for [`DEMOTE_AFTER`] gives it back and runs on outside the
//! slots (it still counts against its tenant's share): a few slow requests (large writes, UDFs
//! near their limits) must not hold every slot while short requests queue behind them.
//!
//! Waiting is bounded by the in-flight limits (a tenant cannot queue more than its in-flight
//! bound), and by [`MAX_WAIT`], after which the request is refused with 503.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// How long an admitted request may wait for a run slot before it is refused.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// How long a request runs in a slot before it gives the slot back (see the module docs).
pub const DEMOTE_AFTER: Duration = Duration::from_secs(1);

/// How recently another tenant must have sent a request for the shares to bind.
pub const ACTIVE_WINDOW: Duration = Duration::from_secs(1);

pub struct FairScheduler {
    slots: usize,
    /// The slots one tenant holds before another tenant's waiting request goes first.
    per_tenant: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Slots in use: requests running that have not been demoted.
    running: usize,
    /// Requests each tenant runs, demoted ones included: the measure of its share.
    by_tenant: HashMap<String, usize>,
    waiting: HashMap<String, VecDeque<(u64, oneshot::Sender<RunSlot>)>>,
    next_seq: u64,
    /// When each tenant last asked for or gave back a slot (within [`ACTIVE_WINDOW`]).
    seen: HashMap<String, Instant>,
}

impl State {
    fn held(&self, tenant: &str) -> usize {
        self.by_tenant.get(tenant).copied().unwrap_or(0)
    }

    /// Whether a tenant other than `tenant` waits or was active within [`ACTIVE_WINDOW`].
    fn others_active(&self, tenant: &str, now: Instant) -> bool {
        self.waiting.keys().any(|t| t != tenant)
            || self
                .seen
                .iter()
                .any(|(t, at)| t != tenant && now.duration_since(*at) < ACTIVE_WINDOW)
    }

    fn touch(&mut self, tenant: &str, now: Instant) {
        self.seen
            .retain(|_, at| now.duration_since(*at) < ACTIVE_WINDOW);
        self.seen.insert(tenant.to_string(), now);
    }

    /// The next waiting tenant to run: tenants under their share before those over it (who
    /// borrow only while nobody else is active), then the fewest held, then the longest
    /// waiting.
    fn pick(&self, per_tenant: usize, now: Instant) -> Option<String> {
        self.waiting
            .iter()
            .filter(|(t, _)| self.held(t) < per_tenant || !self.others_active(t, now))
            .filter_map(|(t, queue)| Some((t, queue.front()?.0)))
            .min_by_key(|(t, seq)| (self.held(t) >= per_tenant, self.held(t), *seq))
            .map(|(t, _)| t.clone())
    }
}

/// A held run slot; dropping it hands the slot to the next waiter.
pub struct RunSlot {
    /// `None` once handed back by hand (see `dispatch`).
    scheduler: Option<Arc<FairScheduler>>,
    tenant: String,
    demoted: bool,
}

impl RunSlot {
    /// Gives the slot to the next waiter; the request runs on, counted in its tenant's share.
    pub fn demote(&mut self) {
        if let Some(scheduler) = &self.scheduler
            && !std::mem::replace(&mut self.demoted, true)
        {
            let mut state = scheduler.lock();
            state.running -= 1;
            scheduler.dispatch(&mut state);
        }
    }
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        if let Some(scheduler) = self.scheduler.take() {
            scheduler.release(&self.tenant, self.demoted);
        }
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
        let mut receiver = {
            let mut state = self.lock();
            let now = Instant::now();
            let may_run = state.held(tenant) < self.per_tenant || !state.others_active(tenant, now);
            state.touch(tenant, now);
            let queued = state.waiting.contains_key(tenant);
            if state.running < self.slots && may_run && !queued {
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
        let deadline = tokio::time::Instant::now() + MAX_WAIT;
        loop {
            let wake = deadline.min(tokio::time::Instant::now() + ACTIVE_WINDOW);
            match tokio::time::timeout_at(wake, &mut receiver).await {
                Ok(slot) => return slot.ok(),
                Err(_) if wake >= deadline => return None,
                // Other tenants may have gone quiet since: a free slot may now be borrowed.
                Err(_) => self.dispatch(&mut self.lock()),
            }
        }
    }

    fn slot(self: &Arc<Self>, tenant: &str) -> RunSlot {
        RunSlot {
            scheduler: Some(self.clone()),
            tenant: tenant.to_string(),
            demoted: false,
        }
    }

    fn release(self: &Arc<Self>, tenant: &str, demoted: bool) {
        let mut state = self.lock();
        if !demoted {
            state.running -= 1;
        }
        uncount(&mut state, tenant);
        state.touch(tenant, Instant::now());
        self.dispatch(&mut state);
    }

    /// Hands free slots to waiters, in the fair order of [`State::pick`].
    fn dispatch(self: &Arc<Self>, state: &mut State) {
        while state.running < self.slots {
            let Some(next) = state.pick(self.per_tenant, Instant::now()) else {
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
            let slot = self.slot(&next);
            if let Err(mut slot) = sender.send(slot) {
                // That waiter is gone; undo by hand (dropping the slot as it is would re-enter
                // this lock) and offer the slot to the next one.
                slot.scheduler = None;
                state.running -= 1;
                uncount(state, &next);
            }
        }
    }
}

fn uncount(state: &mut State, tenant: &str) {
    if let Some(n) = state.by_tenant.get_mut(tenant) {
        *n -= 1;
        if *n == 0 {
            state.by_tenant.remove(tenant);
        }
    }
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
    async fn a_tenant_borrows_free_slots_only_while_no_other_tenant_is_active() {
        let s = FairScheduler::new(2, 1);
        // Alone, a takes both slots although its share is one.
        let a1 = s.acquire("a").await.unwrap();
        let a2 = s.acquire("a").await.unwrap();
        // b waits; then a asks again: b's request goes first when a slot frees.
        let s2 = s.clone();
        let b1 = tokio::spawn(async move { s2.acquire("b").await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let s3 = s.clone();
        let a3 = tokio::spawn(async move { s3.acquire("a").await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(a1);
        let b_slot = b1.await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!a3.is_finished(), "a is over its share while b runs");
        drop(a2);
        let a_slot = a3.await.unwrap().unwrap();
        drop((a_slot, b_slot));
    }

    #[tokio::test]
    async fn a_recently_active_tenant_keeps_its_share_free() {
        let s = FairScheduler::new(2, 1);
        drop(s.acquire("quiet").await.unwrap());
        let _a1 = s.acquire("a").await.unwrap();
        // quiet sent a request just now: a does not take the slot quiet's next request needs.
        let s2 = s.clone();
        let a2 = tokio::spawn(async move { s2.acquire("a").await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!a2.is_finished());
        assert!(s.acquire("quiet").await.is_some(), "quiet runs at once");
        // Once quiet has been idle for the window, a borrows the free slot.
        let start = std::time::Instant::now();
        assert!(a2.await.unwrap().is_some());
        assert!(start.elapsed() < ACTIVE_WINDOW * 3);
    }

    #[tokio::test]
    async fn a_demoted_request_frees_its_slot_but_keeps_its_share() {
        let s = FairScheduler::new(1, 1);
        let mut slow = s.acquire("a").await.unwrap();
        let s2 = s.clone();
        let b1 = tokio::spawn(async move { s2.acquire("b").await });
        let s3 = s.clone();
        let a2 = tokio::spawn(async move { s3.acquire("a").await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!b1.is_finished());
        slow.demote();
        // The freed slot goes to b: a still runs its demoted request.
        let b_slot = b1.await.unwrap().unwrap();
        drop(b_slot);
        // The slot is free and only a waits, but b was active just now: a borrows it beside
        // its demoted request once b has been quiet for the window.
        let start = std::time::Instant::now();
        let a_slot = a2.await.unwrap().unwrap();
        assert!(
            start.elapsed() >= ACTIVE_WINDOW / 2,
            "{:?}",
            start.elapsed()
        );
        drop(slow);
        drop(a_slot);
        assert!(s.acquire("c").await.is_some());
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
