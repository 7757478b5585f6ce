//! One guest instance in its own Store, and the ABI calls into it: copy the input in, call,
//! check and copy the result out. Any error returned here means the instance must be dropped.

use arrow_buffer::{Buffer, MutableBuffer};
use wasmtime::{Engine, InstancePre, Memory, ResourceLimiter, Store, Trap, TypedFunc};

use crate::UdfError;
use crate::codec::EncodedInput;
use crate::engine::{GuestClock, LOG_LINES_PER_CALL, deadline_ticks};
use crate::limits::Limits;

const STATUS_OK: u8 = 0;
const STATUS_ERROR: u8 = 1;
/// ABI version 2: the rest of the buffer lists `(address, length)` ranges (u32 LE each) of
/// guest memory that together form the result stream.
const STATUS_GATHERED: u8 = 2;
/// Guest error messages longer than this are cut (the guest controls their size).
const MAX_MESSAGE: usize = 4096;

/// Per-store data: the resource limiter and what the guest logged.
pub(crate) struct HostState {
    limiter: MemoryLimiter,
    pub(crate) last_log: Option<String>,
    pub(crate) log_lines_left: u32,
    /// Who may answer `embed`, for which tenant, and its staged answer.
    pub(crate) embed: crate::embed::EmbedContext,
    /// The call's own time, host calls excluded.
    pub(crate) clock: GuestClock,
}

/// Caps a store's linear memories; records whether the cap is what stopped the guest.
pub(crate) struct MemoryLimiter {
    pub(crate) cap: usize,
    pub(crate) hit: bool,
    /// The largest linear memory's size so far (a memory never shrinks).
    pub(crate) size: usize,
    /// Core instances, tables and memories a store may hold: 1 for a module, more for a
    /// component (CPython's component links several core modules).
    pub(crate) objects: usize,
}

impl MemoryLimiter {
    pub(crate) fn new(cap: usize, objects: usize) -> Self {
        Self {
            cap,
            hit: false,
            size: 0,
            objects,
        }
    }

    /// Whether the instance's memory has grown past half its cap: it is then dropped after
    /// its call rather than kept for another. A guest's heap creeps up over a long backfill
    /// (fragmentation in its allocator, or a leak: Python UDFs returning JSON grew ~5 KB a
    /// row), and linear memory never shrinks, so a reused instance would otherwise reach the
    /// cap after enough rows and fail a call that fits easily in a fresh one.
    pub(crate) fn worn(&self) -> bool {
        self.size > self.cap / 2
    }
}

#[derive(Debug)]
struct MemoryCapHit;

impl std::fmt::Display for MemoryCapHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("memory limit reached")
    }
}

impl std::error::Error for MemoryCapHit {}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.cap || maximum.is_some_and(|m| desired > m) {
            // Trap rather than let memory.grow return -1: a Rust guest aborts on allocation
            // failure anyway, and this way the error says precisely what happened.
            self.hit = true;
            return Err(wasmtime::Error::new(MemoryCapHit));
        }
        self.size = self.size.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000 && maximum.is_none_or(|m| desired <= m))
    }

    fn instances(&self) -> usize {
        self.objects
    }

    fn tables(&self) -> usize {
        self.objects
    }

    fn memories(&self) -> usize {
        self.objects
    }
}

/// What the host writes into a fresh guest buffer before a call.
pub(crate) enum Payload<'a> {
    Bytes(&'a [u8]),
    Stream(EncodedInput),
}

impl Payload<'_> {
    fn len(&self) -> usize {
        match self {
            Payload::Bytes(b) => b.len(),
            Payload::Stream(s) => s.len(),
        }
    }

    fn write_to(self, out: &mut [u8]) -> Result<(), UdfError> {
        match self {
            Payload::Bytes(b) => {
                out.copy_from_slice(b);
                Ok(())
            }
            Payload::Stream(s) => s.write_to(out),
        }
    }
}

/// What a guest call produced when the instance is still healthy.
pub(crate) enum Outcome {
    /// The result's Arrow IPC stream, copied out of guest memory (64-byte aligned).
    Ok(Buffer),
    /// The guest reported an error (status 1).
    GuestError(String),
}

/// `(ptr, len) -> packed result`: the signature of entry points and `lancet_init`.
type EntryFunc = TypedFunc<(i32, i32), i64>;

pub(crate) struct GuestInstance {
    store: Store<HostState>,
    memory: Memory,
    alloc: TypedFunc<i32, i32>,
    instance: wasmtime::Instance,
    /// Entry points looked up so far; a module usually has one or two.
    entries: Vec<(String, EntryFunc)>,
}

impl GuestInstance {
    pub(crate) fn new(
        engine: &Engine,
        pre: &InstancePre<HostState>,
        limits: &Limits,
        udf: &str,
    ) -> Result<Self, UdfError> {
        let state = HostState {
            limiter: MemoryLimiter::new(limits.max_memory_bytes, 1),
            last_log: None,
            log_lines_left: LOG_LINES_PER_CALL,
            embed: Default::default(),
            clock: GuestClock::new(limits.timeout),
        };
        let mut store = Store::new(engine, state);
        store.limiter(|s| &mut s.limiter);
        store.set_epoch_deadline(deadline_ticks(limits.timeout));
        store.epoch_deadline_callback(|ctx| Ok(ctx.data().clock.on_deadline()));
        let instance = pre
            .instantiate(&mut store)
            .map_err(|e| instantiate_error(e, &mut store, udf, limits))?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or_else(|| UdfError::Internal("checked export `memory` vanished".into()))?;
        let alloc = instance
            .get_typed_func(&mut store, "lancet_alloc")
            .map_err(|e| UdfError::Internal(e.to_string()))?;
        Ok(Self {
            store,
            memory,
            alloc,
            instance,
            entries: Vec::new(),
        })
    }

    /// The tenant the next calls are made for, and who runs models for its `embed` calls.
    pub(crate) fn set_caller(
        &mut self,
        tenant: &str,
        embedder: Option<std::sync::Arc<dyn crate::embed::HostEmbed>>,
    ) {
        let embed = &mut self.store.data_mut().embed;
        if embed.tenant != tenant {
            embed.tenant = tenant.to_string();
        }
        embed.embedder = embedder;
        embed.staged = Vec::new();
    }

    fn arm(&mut self, limits: &Limits) {
        let state = self.store.data_mut();
        state.limiter.cap = limits.max_memory_bytes;
        state.limiter.hit = false;
        state.log_lines_left = LOG_LINES_PER_CALL;
        state.last_log = None;
        state.clock.arm(limits.timeout);
        self.store
            .set_epoch_deadline(deadline_ticks(limits.timeout));
    }

    /// Calls `lancet_abi_version`.
    pub(crate) fn abi_version(&mut self, limits: &Limits, udf: &str) -> Result<i32, UdfError> {
        self.arm(limits);
        let f: TypedFunc<(), i32> = self
            .instance
            .get_typed_func(&mut self.store, "lancet_abi_version")
            .map_err(|e| UdfError::Internal(e.to_string()))?;
        f.call(&mut self.store, ())
            .map_err(|e| self.call_error(e, udf, limits))
    }

    /// Calls `lancet_init` with the config JSON, if the module exports it.
    pub(crate) fn init(
        &mut self,
        config_json: &[u8],
        limits: &Limits,
        udf: &str,
    ) -> Result<(), UdfError> {
        let Ok(init) = self
            .instance
            .get_typed_func::<(i32, i32), i64>(&mut self.store, "lancet_init")
        else {
            return Ok(());
        };
        match self.call_with(init, Payload::Bytes(config_json), limits, udf)? {
            Outcome::Ok(_) => Ok(()),
            Outcome::GuestError(message) => Err(UdfError::Init {
                udf: udf.to_string(),
                message,
            }),
        }
    }

    /// Calls entry point `entry` with an Arrow IPC stream.
    pub(crate) fn call(
        &mut self,
        entry: &str,
        input: EncodedInput,
        limits: &Limits,
        udf: &str,
    ) -> Result<Outcome, UdfError> {
        let func = match self.entries.iter().find(|(name, _)| name == entry) {
            Some((_, f)) => f.clone(),
            None => {
                let f = self
                    .instance
                    .get_typed_func::<(i32, i32), i64>(&mut self.store, entry)
                    .map_err(|e| UdfError::MissingExport {
                        name: entry.to_string(),
                        detail: e.to_string(),
                    })?;
                self.entries.push((entry.to_string(), f.clone()));
                f
            }
        };
        self.call_with(func, Payload::Stream(input), limits, udf)
    }

    fn call_with(
        &mut self,
        func: EntryFunc,
        input: Payload<'_>,
        limits: &Limits,
        udf: &str,
    ) -> Result<Outcome, UdfError> {
        self.arm(limits);
        let memory_limit = || UdfError::MemoryLimit {
            udf: udf.to_string(),
            limit: limits.max_memory_bytes,
        };
        let len = i32::try_from(input.len()).map_err(|_| memory_limit())?;
        let ptr = self
            .alloc
            .call(&mut self.store, len)
            .map_err(|e| self.call_error(e, udf, limits))?;
        if ptr == 0 {
            return Err(memory_limit());
        }
        let start = ptr as u32 as usize;
        let buffer = self
            .memory
            .data_mut(&mut self.store)
            .get_mut(start..start + input.len())
            .ok_or_else(|| bad_output(udf, "lancet_alloc returned a buffer outside its memory"))?;
        input.write_to(buffer)?;
        let packed = func
            .call(&mut self.store, (ptr, len))
            .map_err(|e| self.call_error(e, udf, limits))?;
        self.read_result(packed as u64, limits, udf)
    }

    fn read_result(&self, packed: u64, limits: &Limits, udf: &str) -> Result<Outcome, UdfError> {
        let (ptr, len) = ((packed >> 32) as usize, (packed & 0xffff_ffff) as usize);
        if len == 0 {
            return Err(bad_output(udf, "empty result buffer (no status byte)"));
        }
        if len - 1 > limits.max_output_bytes {
            return Err(UdfError::OutputTooLarge {
                udf: udf.to_string(),
                size: len - 1,
                limit: limits.max_output_bytes,
            });
        }
        let data = self.memory.data(&self.store);
        let bytes = data.get(ptr..ptr + len).ok_or_else(|| {
            bad_output(
                udf,
                &format!("result buffer {ptr:#x}+{len} lies outside guest memory"),
            )
        })?;
        match bytes[0] {
            STATUS_OK => Ok(Outcome::Ok(Buffer::from_slice_ref(&bytes[1..]))),
            STATUS_GATHERED => gather(data, &bytes[1..], limits, udf).map(Outcome::Ok),
            STATUS_ERROR => {
                let message = &bytes[1..bytes.len().min(MAX_MESSAGE + 1)];
                Ok(Outcome::GuestError(
                    String::from_utf8_lossy(message).into_owned(),
                ))
            }
            other => Err(bad_output(udf, &format!("unknown status byte {other}"))),
        }
    }

    /// Classifies a failed guest call: which limit it hit, or which trap it raised.
    fn call_error(&mut self, err: wasmtime::Error, udf: &str, limits: &Limits) -> UdfError {
        let state = self.store.data_mut();
        classify(err, &state.limiter, state.last_log.take(), udf, limits)
    }
}

/// Copies the ranges a gathered result lists, in order, into one 64-byte-aligned buffer.
/// Every range is checked against guest memory and the total against the output cap before
/// anything is copied, so a hostile list costs no more than reading it.
fn gather(memory: &[u8], list: &[u8], limits: &Limits, udf: &str) -> Result<Buffer, UdfError> {
    if !list.len().is_multiple_of(8) {
        return Err(bad_output(
            udf,
            &format!(
                "gathered result list of {} bytes (not whole ranges)",
                list.len()
            ),
        ));
    }
    let word = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize;
    let ranges = || list.chunks_exact(8).map(|r| (word(&r[..4]), word(&r[4..])));
    let mut total = 0usize;
    for (at, len) in ranges() {
        if at.checked_add(len).is_none_or(|end| end > memory.len()) {
            return Err(bad_output(
                udf,
                &format!("gathered range {at:#x}+{len} lies outside guest memory"),
            ));
        }
        total = total.saturating_add(len);
    }
    if total > limits.max_output_bytes {
        return Err(UdfError::OutputTooLarge {
            udf: udf.to_string(),
            size: total,
            limit: limits.max_output_bytes,
        });
    }
    let mut out = MutableBuffer::with_capacity(total);
    for (at, len) in ranges() {
        out.extend_from_slice(&memory[at..at + len]);
    }
    Ok(out.into())
}

fn instantiate_error(
    err: wasmtime::Error,
    store: &mut Store<HostState>,
    udf: &str,
    limits: &Limits,
) -> UdfError {
    if err.chain().any(|e| {
        e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
            .is_some()
    }) {
        return UdfError::Busy(format!("no free instance slot for {udf}: {err}"));
    }
    let state = store.data_mut();
    classify(err, &state.limiter, state.last_log.take(), udf, limits)
}

/// Which limit a failed call hit, or which trap it raised.
pub(crate) fn classify(
    err: wasmtime::Error,
    limiter: &MemoryLimiter,
    last_log: Option<String>,
    udf: &str,
    limits: &Limits,
) -> UdfError {
    let udf = udf.to_string();
    if limiter.hit {
        return UdfError::MemoryLimit {
            udf,
            limit: limits.max_memory_bytes,
        };
    }
    match err.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => UdfError::Timeout {
            udf,
            limit: limits.timeout,
        },
        Some(Trap::StackOverflow) => UdfError::StackOverflow {
            udf,
            limit: limits.max_stack_bytes,
        },
        Some(trap) => {
            let mut message = trap.to_string();
            if let Some(line) = last_log {
                message.push_str(&format!(" (guest's last log line: {line})"));
            }
            UdfError::Trap { udf, message }
        }
        None => UdfError::Trap {
            udf,
            message: format!("{err:#}"),
        },
    }
}

fn bad_output(udf: &str, reason: &str) -> UdfError {
    UdfError::BadOutput {
        udf: udf.to_string(),
        reason: reason.to_string(),
    }
}

impl crate::pool::Pooled for GuestInstance {
    fn memory_worn(&self) -> bool {
        self.store.data().limiter.worn()
    }
}
