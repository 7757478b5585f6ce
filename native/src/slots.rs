//! Batches running per tenant, at most a fixed number: one tenant's flood of calls waits for
//! its own workers instead of starting sandboxes without bound. Waiters are served first come,
//! first served, and a long holder (a backfill's pipeline) gives its slot up to whoever waits,
//! so a tenant's inserts are not held behind its backfill for a whole task.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Every tenant's slots.
pub(crate) struct Slots {
    state: Mutex<HashMap<String, Tenant>>,
    freed: Condvar,
    per_tenant: usize,
}

/// One tenant's running batches and its queue of waiters (their tickets, oldest first).
#[derive(Default)]
struct Tenant {
    running: usize,
    queue: VecDeque<u64>,
    next: u64,
}

/// A tenant's running batch (or pipeline); frees its slot when dropped.
pub(crate) struct Slot {
    slots: Arc<Slots>,
    tenant: String,
}

impl Slots {
    pub(crate) fn new(per_tenant: usize) -> Arc<Slots> {
        Arc::new(Slots {
            state: Mutex::default(),
            freed: Condvar::new(),
            per_tenant: per_tenant.max(1),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Tenant>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for one of `tenant`'s slots, behind those already waiting.
    pub(crate) fn take(self: &Arc<Self>, tenant: &str) -> Slot {
        self.wait_turn(tenant);
        Slot {
            slots: self.clone(),
            tenant: tenant.to_string(),
        }
    }

    fn wait_turn(&self, tenant: &str) {
        let mut state = self.lock();
        let t = state.entry(tenant.to_string()).or_default();
        let ticket = t.next;
        t.next += 1;
        t.queue.push_back(ticket);
        loop {
            let t = state.get_mut(tenant).expect("a waiter's tenant is kept");
            if t.running < self.per_tenant && t.queue.front() == Some(&ticket) {
                t.queue.pop_front();
                t.running += 1;
                break;
            }
            state = self.freed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        // The next in line may fit too.
        self.freed.notify_all();
    }

    fn release(&self, tenant: &str) {
        let mut state = self.lock();
        if let Some(t) = state.get_mut(tenant) {
            t.running -= 1;
            if t.running == 0 && t.queue.is_empty() {
                state.remove(tenant);
            }
        }
        self.freed.notify_all();
    }
}

impl Slot {
    /// Whether another of the tenant's batches waits for a slot.
    pub(crate) fn contended(&self) -> bool {
        self.slots
            .lock()
            .get(&self.tenant)
            .is_some_and(|t| !t.queue.is_empty())
    }

    /// Gives the slot up and waits for one again, behind those waiting now.
    pub(crate) fn yield_to_waiters(&mut self) {
        self.slots.release(&self.tenant);
        self.slots.wait_turn(&self.tenant);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.release(&self.tenant);
    }
}
