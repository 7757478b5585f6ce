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
//! A tenant alone may also run more handlers than there are slots, up to its *alone* bound:
//! those beyond the slots run outside them, as demoted requests do. A tenant that becomes
//! active takes the room of the next of the lone tenant's requests to end, in a slot or beyond
//! them, and runs beside the rest until they end (they are short: anything over
//! [`DEMOTE_AFTER`] was outside the slots already); from then on the shares hold. A handler
//! spends part of its time waiting (for lance's CPU pool, for reads), and with only one slot
//! per core the cores then idle: a lone tenant's full-text searches at 8 clients on one core
//! cost 15-18% more CPU each with one slot than with four. The price is paid by a tenant that comes
//! after a quiet spell: its first request runs beside the lone tenant's (bench/RESULTS.md,
//! session 34).
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
    /// Handlers run beyond the slots by a tenant while no other tenant is active.
    extra_alone: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Slots in use: requests running that have not been demoted.
    running: usize,
    /// Requests a lone tenant runs beyond the slots (see the module docs).
    beyond: usize,
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

    /// The one tenant waiting, when no other tenant is active: it may run beyond the slots.
    fn lone_waiter(&self, now: Instant) -> Option<String> {
        let mut waiting = self.waiting.keys();
        let (Some(tenant), None) = (waiting.next(), waiting.next()) else {
            return None;
        };
        (!self.others_active(tenant, now)).then(|| tenant.clone())
    }
}

/// A held run slot; dropping it hands the slot to the next waiter.
pub struct RunSlot {
    /// `None` once handed back by hand (see `dispatch`).
    scheduler: Option<Arc<FairScheduler>>,
    tenant: String,
    /// Outside the slots: demoted, or run beyond them by a lone tenant.
    demoted: bool,
    /// Run beyond the slots by a lone tenant (counted in `State::beyond`).
    beyond: bool,
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
            scheduler.release(&self.tenant, self.demoted, self.beyond);
        }
    }
}

impl FairScheduler {
    /// `slots` shared fairly, `per_tenant` of them a tenant's share, and `alone` (at least
    /// `slots`) the handlers a tenant runs at once while no other tenant is active.
    pub fn new(slots: usize, per_tenant: usize, alone: usize) -> Arc<Self> {
        let slots = slots.max(1);
        Arc::new(Self {
            slots,
            per_tenant: per_tenant.clamp(1, slots),
            extra_alone: alone.saturating_sub(slots),
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
                return Some(self.slot(tenant, false));
            }
            if state.beyond < self.extra_alone
                && !queued
                && state.waiting.is_empty()
                && !state.others_active(tenant, now)
            {
                state.beyond += 1;
                *state.by_tenant.entry(tenant.to_string()).or_default() += 1;
                return Some(self.slot(tenant, true));
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

    fn slot(self: &Arc<Self>, tenant: &str, beyond: bool) -> RunSlot {
        RunSlot {
            scheduler: Some(self.clone()),
            tenant: tenant.to_string(),
            demoted: beyond,
            beyond,
        }
    }

    fn release(self: &Arc<Self>, tenant: &str, demoted: bool, beyond: bool) {
        let mut state = self.lock();
        if !demoted {
            state.running -= 1;
        }
        uncount(&mut state, tenant);
        let now = Instant::now();
        state.touch(tenant, now);
        if beyond {
            state.beyond -= 1;
            // Another tenant's request waiting within its share takes this room at once, over
            // the slots by one until one of them frees: it need not wait for one of the slots
            // the lone tenant held when it came (the count of handlers running does not grow).
            if let Some(next) = state.pick(self.per_tenant, now)
                && state.held(&next) < self.per_tenant
            {
                self.hand(&mut state, &next, false);
            }
        }
        self.dispatch(&mut state);
    }

    /// Hands free slots to waiters, in the fair order of [`State::pick`]; then, to a lone
    /// tenant's waiters, room beyond the slots.
    fn dispatch(self: &Arc<Self>, state: &mut State) {
        while state.running < self.slots {
            let Some(next) = state.pick(self.per_tenant, Instant::now()) else {
                break;
            };
            self.hand(state, &next, false);
        }
        while state.beyond < self.extra_alone {
            let Some(next) = state.lone_waiter(Instant::now()) else {
                return;
            };
            self.hand(state, &next, true);
        }
    }

    /// Gives `tenant`'s oldest waiter a slot (or room beyond the slots).
    fn hand(self: &Arc<Self>, state: &mut State, tenant: &str, beyond: bool) {
        let queue = state
            .waiting
            .get_mut(tenant)
            .expect("picked a waiting tenant");
        let (_, sender) = queue.pop_front().expect("a waiting tenant has a waiter");
        if queue.is_empty() {
            state.waiting.remove(tenant);
        }
        match beyond {
            true => state.beyond += 1,
            false => state.running += 1,
        }
        *state.by_tenant.entry(tenant.to_string()).or_default() += 1;
        if let Err(mut slot) = sender.send(self.slot(tenant, beyond)) {
            // That waiter is gone; undo by hand (dropping the slot as it is would re-enter
            // this lock). `dispatch`'s loops offer the room to the next one.
            slot.scheduler = None;
            match beyond {
                true => state.beyond -= 1,
                false => state.running -= 1,
            }
            uncount(state, tenant);
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
        let s = FairScheduler::new(2, 2, 2);
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
        let s = FairScheduler::new(2, 1, 2);
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
        let s = FairScheduler::new(2, 1, 2);
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
        let s = FairScheduler::new(1, 1, 1);
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
        let s = FairScheduler::new(1, 1, 1);
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

    #[tokio::test]
    async fn a_lone_tenant_runs_beyond_the_slots_up_to_its_alone_bound() {
        let s = FairScheduler::new(2, 1, 4);
        let mut held: Vec<RunSlot> = Vec::new();
        for _ in 0..4 {
            held.push(s.acquire("a").await.unwrap());
        }
        assert_eq!(held.iter().filter(|slot| slot.beyond).count(), 2);
        // A fifth waits, and takes the room the first request beyond the slots frees.
        let s2 = s.clone();
        let fifth = tokio::spawn(async move { s2.acquire("a").await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!fifth.is_finished());
        let first_beyond = held.iter().position(|slot| slot.beyond).unwrap();
        drop(held.remove(first_beyond));
        let fifth = fifth.await.unwrap().unwrap();
        assert!(fifth.beyond);
        // Demoting a request beyond the slots frees no slot: it never held one.
        let mut fifth = fifth;
        fifth.demote();
        {
            let state = s.lock();
            assert_eq!((state.running, state.beyond), (2, 2));
        }
        drop(fifth);
        drop(held);
        let state = s.lock();
        assert_eq!((state.running, state.beyond), (0, 0));
        assert!(state.by_tenant.is_empty());
    }

    #[tokio::test]
    async fn a_tenant_that_comes_takes_the_first_room_a_lone_tenant_frees() {
        let s = FairScheduler::new(2, 1, 4);
        let mut a: Vec<RunSlot> = Vec::new();
        for _ in 0..4 {
            a.push(s.acquire("a").await.unwrap());
        }
        let s2 = s.clone();
        let b1 = tokio::spawn(async move { s2.acquire("b").await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!b1.is_finished(), "every slot is a's");
        // a is no longer alone: its next request waits, not beyond the slots.
        let s3 = s.clone();
        let a5 = tokio::spawn(async move { s3.acquire("a").await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!a5.is_finished());
        // One of a's requests beyond the slots ends: b runs at once, in a slot.
        let beyond = a.iter().position(|slot| slot.beyond).unwrap();
        drop(a.remove(beyond));
        let b_slot = b1.await.unwrap().unwrap();
        assert!(!b_slot.beyond);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!a5.is_finished(), "a is over its share while b runs");
        // As a's requests end, the slots come back to two in use; then a's waiter runs.
        drop(a);
        let a5 = a5.await.unwrap().unwrap();
        assert!(!a5.beyond);
        {
            let state = s.lock();
            assert_eq!((state.running, state.beyond), (2, 0));
        }
        drop((a5, b_slot));
        assert_eq!(s.lock().running, 0);
    }
}
