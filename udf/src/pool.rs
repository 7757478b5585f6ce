//! Idle instances kept for reuse, per (tenant, prepared module + config). An instance never
//! serves two tenants: its memory may still hold the previous caller's data.

use std::collections::HashMap;
use std::sync::Mutex;

/// Identifies instances that are interchangeable: same module bytes, same init config.
pub(crate) type InstanceKey = [u8; 32];

struct Idle<I> {
    instance: I,
    last_used: u64,
}

struct Slots<I> {
    idle: HashMap<(String, InstanceKey), Vec<Idle<I>>>,
    total: usize,
    clock: u64,
}

impl<I> Default for Slots<I> {
    fn default() -> Self {
        Self {
            idle: HashMap::new(),
            total: 0,
            clock: 0,
        }
    }
}

/// Idle instances of one kind (`I`: a Wasm module's or the Python runner's).
/// What the pool asks of an instance before keeping it.
pub(crate) trait Pooled {
    /// See `MemoryLimiter::worn`: such an instance is dropped rather than kept.
    fn memory_worn(&self) -> bool;
}

pub(crate) struct InstancePool<I> {
    slots: Mutex<Slots<I>>,
    /// Healthy instances dropped because their memory was worn.
    retired: std::sync::atomic::AtomicU64,
    max_per_key: usize,
    max_total: usize,
}

impl<I: Pooled> InstancePool<I> {
    pub(crate) fn new(max_per_key: usize, max_total: usize) -> Self {
        Self {
            slots: Mutex::default(),
            retired: Default::default(),
            max_per_key,
            max_total,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots<I>> {
        // Nothing in Slots can be left inconsistent by a panic, so a poisoned lock is usable.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most recently used idle instance for this tenant and key (its memory is warmest).
    pub(crate) fn take(&self, tenant: &str, key: &InstanceKey) -> Option<I> {
        let mut slots = self.lock();
        let list = slots.idle.get_mut(&(tenant.to_string(), *key))?;
        let idle = list.pop()?;
        slots.total -= 1;
        Some(idle.instance)
    }

    /// Instances dropped by [`put`](Self::put) because their memory was worn.
    pub(crate) fn retired(&self) -> u64 {
        self.retired.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Keeps `instance` for reuse; drops it (or the least recently used one) when full, or
    /// when its memory is worn.
    pub(crate) fn put(&self, tenant: &str, key: &InstanceKey, instance: I) {
        if instance.memory_worn() {
            self.retired
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        let evicted;
        {
            let mut slots = self.lock();
            slots.clock += 1;
            let last_used = slots.clock;
            let list = slots.idle.entry((tenant.to_string(), *key)).or_default();
            if list.len() >= self.max_per_key {
                return; // `instance` is dropped after the lock is released
            }
            list.push(Idle {
                instance,
                last_used,
            });
            slots.total += 1;
            evicted = if slots.total > self.max_total {
                Self::pop_oldest(&mut slots)
            } else {
                None
            };
        }
        drop(evicted);
    }

    /// Drops the least recently used idle instance, freeing its allocator slot. False if none.
    pub(crate) fn evict_oldest(&self) -> bool {
        let evicted = Self::pop_oldest(&mut self.lock());
        evicted.is_some()
    }

    fn pop_oldest(slots: &mut Slots<I>) -> Option<I> {
        let key = slots
            .idle
            .iter()
            .filter_map(|(k, list)| list.first().map(|i| (i.last_used, k)))
            .min_by_key(|(t, _)| *t)
            .map(|(_, k)| k.clone())?;
        let list = slots.idle.get_mut(&key)?;
        let oldest = list.remove(0);
        if list.is_empty() {
            slots.idle.remove(&key);
        }
        slots.total -= 1;
        Some(oldest.instance)
    }

    pub(crate) fn idle_count(&self) -> usize {
        self.lock().total
    }
}
