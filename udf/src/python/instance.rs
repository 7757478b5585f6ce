//! One runner instance in its own Store: arming the limits, and the two calls into it.

use wasmtime::Store;

use super::runner::PythonRunner;
use super::spec::{Param, PythonSpec, Signature};
use crate::UdfError;
use crate::engine::{GuestClock, deadline_ticks};
use crate::instance::{MemoryLimiter, classify};
use crate::limits::Limits;

mod bindings {
    wasmtime::component::bindgen!({
        path: "python/wit",
        world: "runner",
    });
}

pub(crate) use bindings::RunnerPre;
pub(crate) use bindings::lancet::python::types::{Column, Kind, RowError};

/// Core instances, memories and tables one runner instance may hold (the CPython component
/// links a few dozen core modules).
const COMPONENT_OBJECTS: usize = 128;

pub(crate) struct PyState {
    limiter: MemoryLimiter,
    /// The tenant calls are made for, and who answers its `lancet.embed` calls.
    tenant: String,
    embedder: Option<std::sync::Arc<dyn crate::HostEmbed>>,
    /// The call's own time, host calls excluded.
    clock: GuestClock,
}

impl bindings::lancet::python::types::Host for PyState {}

impl bindings::lancet::python::host::Host for PyState {
    fn embed(&mut self, model: String, texts: Vec<String>) -> Result<(u32, Vec<f32>), String> {
        let embedder = self
            .embedder
            .clone()
            .ok_or("this server runs no embedding models")?;
        let started = crate::engine::Mark::now();
        let answer = embedder.embed(&self.tenant, &model, texts);
        self.clock.add_host_time(started.elapsed());
        let (dimension, values) = answer?;
        let dimension = u32::try_from(dimension).map_err(|_| "dimension too large")?;
        Ok((dimension, values))
    }
}

/// Offers the runner what it imports (`host`).
pub(crate) fn add_imports(
    linker: &mut wasmtime::component::Linker<PyState>,
) -> wasmtime::Result<()> {
    bindings::Runner::add_to_linker::<PyState, wasmtime::component::HasSelf<PyState>>(linker, |s| s)
}

pub(crate) struct PyInstance {
    store: Store<PyState>,
    runner: bindings::Runner,
}

/// What a call produced while the instance stayed healthy.
pub(crate) enum CallResult {
    /// The result column (or a struct's field columns and its own nulls), null where a row
    /// raised, and the rows that raised.
    Values(Vec<Column>, Vec<u8>, Vec<RowError>),
    /// The call ended with a Python exception (the first raising row, when it stops there).
    Raised(String),
}

impl PyInstance {
    pub(crate) fn new(runner: &PythonRunner, limits: &Limits, udf: &str) -> Result<Self, UdfError> {
        let state = PyState {
            limiter: MemoryLimiter::new(limits.max_memory_bytes, COMPONENT_OBJECTS),
            tenant: String::new(),
            embedder: None,
            clock: GuestClock::new(limits.timeout),
        };
        let mut store = Store::new(&runner.engine, state);
        store.limiter(|s| &mut s.limiter);
        store.set_epoch_deadline(deadline_ticks(limits.timeout));
        store.epoch_deadline_callback(|ctx| Ok(ctx.data().clock.on_deadline()));
        let runner = runner
            .pre
            .instantiate(&mut store)
            .map_err(|e| classify(e, &store.data().limiter, None, udf, limits))?;
        Ok(Self { store, runner })
    }

    /// The tenant the next calls are made for, and who runs models for its `embed` calls.
    pub(crate) fn set_caller(
        &mut self,
        tenant: &str,
        embedder: Option<std::sync::Arc<dyn crate::HostEmbed>>,
    ) {
        let state = self.store.data_mut();
        if state.tenant != tenant {
            state.tenant = tenant.to_string();
        }
        state.embedder = embedder;
    }

    fn arm(&mut self, limits: &Limits) {
        let state = self.store.data_mut();
        state.clock.arm(limits.timeout);
        state.limiter.cap = limits.max_memory_bytes;
        state.limiter.hit = false;
        self.store
            .set_epoch_deadline(deadline_ticks(limits.timeout));
    }

    fn failed(&self, err: wasmtime::Error, udf: &str, limits: &Limits) -> UdfError {
        classify(err, &self.store.data().limiter, None, udf, limits)
    }

    /// Compiles the source and finds the entry; `Ok(Err(message))` is Python's own complaint.
    pub(crate) fn load(
        &mut self,
        spec: &PythonSpec,
        limits: &Limits,
        udf: &str,
    ) -> Result<Result<Signature, String>, UdfError> {
        self.arm(limits);
        let loaded = self
            .runner
            .call_load(
                &mut self.store,
                &spec.source,
                &spec.entry,
                &spec.env,
                spec.init.as_deref(),
                &spec.files,
            )
            .map_err(|e| self.failed(e, udf, limits))?;
        Ok(loaded.map(|sig| Signature {
            params: sig
                .params
                .into_iter()
                .map(|p| Param {
                    name: p.name,
                    annotation: p.annotation,
                    has_default: p.has_default,
                })
                .collect(),
            returns: sig.returns,
            python: sig.python,
        }))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn call(
        &mut self,
        args: &[Column],
        rows: usize,
        kind: Kind,
        fields: &[(String, Kind)],
        stop_at_first_error: bool,
        limits: &Limits,
        udf: &str,
    ) -> Result<CallResult, UdfError> {
        self.arm(limits);
        let rows32 = u32::try_from(rows)
            .map_err(|_| UdfError::BadInput(format!("{rows} rows in one call")))?;
        let out = self
            .runner
            .call_call(
                &mut self.store,
                args,
                rows32,
                kind,
                fields,
                stop_at_first_error,
            )
            .map_err(|e| self.failed(e, udf, limits))?;
        let out = match out {
            Ok(out) => out,
            Err(message) => return Ok(CallResult::Raised(message)),
        };
        let size = out
            .values
            .iter()
            .map(super::columns::byte_size)
            .sum::<usize>()
            + out.nulls.len()
            + out.errors.iter().map(|e| e.message.len()).sum::<usize>();
        if size > limits.max_output_bytes {
            return Err(UdfError::OutputTooLarge {
                udf: udf.to_string(),
                size,
                limit: limits.max_output_bytes,
            });
        }
        Ok(CallResult::Values(out.values, out.nulls, out.errors))
    }
}

impl crate::pool::Pooled for PyInstance {
    fn memory_worn(&self) -> bool {
        self.store.data().limiter.worn()
    }
}
