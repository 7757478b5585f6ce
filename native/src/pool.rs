//! Warm workers, kept per (tenant, function) and never shared between tenants.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::RecordBatch;

use crate::pipeline::{Opened, Retire};
use crate::slots::Slots;
use crate::{CallOutput, FunctionSpec, NativeError, Pipeline, Sandbox, Worker};

/// Whose worker: a tenant and a function (the digest of everything that defines it, so a
/// redefined function never reuses a worker that loaded the old one).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkerKey {
    /// The tenant the function belongs to.
    pub tenant: String,
    /// A digest of the function's code, mode, output type and environment.
    pub function: String,
}

/// Idle workers, ready for the next batch of the same function.
pub struct Pool {
    sandbox: Arc<Sandbox>,
    idle: Mutex<HashMap<WorkerKey, Vec<Worker>>>,
    /// Batches running per tenant, at most `per_tenant`: one tenant's flood of calls waits
    /// for its own workers instead of starting sandboxes without bound.
    slots: Arc<Slots>,
    /// Idle workers kept per key and in all.
    per_key: usize,
    total: usize,
    /// A worker is retired after this many batches or this long (before RLIMIT_CPU, which
    /// counts a process's whole life, could end it mid-batch).
    max_calls: u64,
    max_age: Duration,
}

impl Pool {
    /// A pool starting workers in `sandbox`, running at most `per_tenant` batches of one
    /// tenant at once, keeping up to `per_key` idle workers a function and `total` in all.
    pub fn new(sandbox: Arc<Sandbox>, per_tenant: usize, per_key: usize, total: usize) -> Self {
        let cpu = sandbox.limits().cpu_seconds;
        Pool {
            sandbox,
            idle: Mutex::default(),
            slots: Slots::new(per_tenant),
            per_key,
            total,
            max_calls: 10_000,
            // Wall time is an upper bound of CPU time only for one thread; half leaves room.
            max_age: Duration::from_secs(cpu / 2),
        }
    }

    /// The sandbox workers start in.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// Computes `batch` with a warm worker of `key`, or a new one loading `spec`. Blocking:
    /// call it from a thread that may block (the worker runs up to the call timeout).
    pub fn call(
        &self,
        key: &WorkerKey,
        spec: &FunctionSpec,
        batch: &RecordBatch,
    ) -> Result<CallOutput, NativeError> {
        let _slot = self.slots.take(&key.tenant);
        let mut worker = match self.take(key) {
            Some(w) => w,
            None => Worker::start(&self.sandbox, spec)?,
        };
        let result = worker.call(batch);
        match &result {
            Ok(_) => self.put(key, worker),
            Err(e) if e.worker_survives() => self.put(key, worker),
            Err(_) => drop(worker),
        }
        result
    }

    /// Ends the idle workers of a function (its column was dropped or redefined).
    pub fn forget(&self, key: &WorkerKey) {
        let gone = self.lock().remove(key);
        drop(gone);
    }

    /// Idle workers now.
    pub fn idle(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }

    /// A pipeline of `key`'s function ([`Pipeline`]). At its first batch it takes one of the
    /// tenant's slots (as one running batch) and a warm worker, or starts one loading the
    /// spec `spec` makes (it may install the function's environment); when it is dropped and
    /// its batches are answered, the worker comes back here. It gives its slot up between
    /// batches, after a second, when another of the tenant's batches waits. Never blocks.
    pub fn pipeline(
        self: &Arc<Self>,
        key: &WorkerKey,
        spec: impl FnOnce() -> Result<FunctionSpec, NativeError> + Send + 'static,
    ) -> Result<Pipeline, NativeError> {
        let (pool, key) = (self.clone(), key.clone());
        Pipeline::lazy(move || {
            let slot = pool.slots.take(&key.tenant);
            // The spec is made when a worker must start (it may run pip), once.
            let mut make = Some(spec);
            let mut made: Option<FunctionSpec> = None;
            let mut start = {
                let pool = pool.clone();
                move || -> Result<Worker, NativeError> {
                    if made.is_none() {
                        let make = make.take().ok_or_else(|| {
                            NativeError::Load("the function's spec could not be made".into())
                        })?;
                        made = Some(make()?);
                    }
                    let spec = made.as_ref().expect("made above");
                    Worker::start(&pool.sandbox, spec)
                }
            };
            let worker = match pool.take(&key) {
                Some(w) => w,
                None => start()?,
            };
            let back = pool.clone();
            let done = move |worker: Option<Worker>| {
                if let Some(w) = worker {
                    back.put(&key, w);
                }
            };
            Ok(Opened {
                worker,
                done: Arc::new(done),
                slot: Some(slot),
                renew: Some((
                    Retire {
                        age: pool.max_age,
                        calls: pool.max_calls,
                    },
                    Box::new(start),
                )),
            })
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<WorkerKey, Vec<Worker>>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self, key: &WorkerKey) -> Option<Worker> {
        self.lock().get_mut(key).and_then(Vec::pop)
    }

    fn put(&self, key: &WorkerKey, worker: Worker) {
        if worker.calls() >= self.max_calls || worker.age() >= self.max_age {
            return;
        }
        let mut idle = self.lock();
        let total: usize = idle.values().map(Vec::len).sum();
        let list = idle.entry(key.clone()).or_default();
        if list.len() < self.per_key && total < self.total {
            list.push(worker);
        }
    }
}
