//! The guest half of the Lancet UDF ABI, version 2 (see README.md for the contract).
//!
//! Everything here is plain Rust so it is unit-tested natively; only the `extern "C"` exports
//! at the bottom are compiled for wasm32.

use std::alloc::Layout;
use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_buffer::Buffer;

use crate::{Config, UdfError, ipc};

/// Returned by `lancet_abi_version`. Version 2 is version 1 plus gathered results
/// ([`STATUS_GATHERED`]); hosts speaking 2 also run version-1 modules.
pub const ABI_VERSION: i32 = 2;
/// First byte of a result buffer: the rest is an Arrow IPC stream (or empty, for init).
pub const STATUS_OK: u8 = 0;
/// First byte of a result buffer: the rest is a UTF-8 error message.
pub const STATUS_ERROR: u8 = 1;
/// First byte of a result buffer (version 2): the rest is a list of `(address: u32 LE,
/// length: u32 LE)` byte ranges of guest memory whose concatenation is the Arrow IPC stream.
pub const STATUS_GATHERED: u8 = 2;

/// Guest buffers are 16-byte aligned so Arrow buffers inside an IPC stream (64-byte padded
/// relative to its start) can be used in place instead of being copied for alignment.
const ALIGN: usize = 16;

fn layout(size: usize) -> Option<Layout> {
    Layout::from_size_align(size.max(1), ALIGN).ok()
}

/// `lancet_alloc`: a buffer for the host to write into; 0 when out of memory.
pub fn alloc(size: i32) -> i32 {
    let Some(layout) = usize::try_from(size).ok().and_then(layout) else {
        return 0;
    };
    // SAFETY: layout has a non-zero size.
    unsafe { std::alloc::alloc(layout) as usize as i32 }
}

/// `lancet_free`: releases a buffer from [`alloc`] that was not handed to an entry point.
///
/// # Safety
/// `ptr`/`size` must come from one earlier `alloc(size)` call and not have been freed.
pub unsafe fn free(ptr: i32, size: i32) {
    if let (Some(layout), Some(p)) = (
        layout(size as u32 as usize),
        NonNull::new(ptr as u32 as usize as *mut u8),
    ) {
        unsafe { std::alloc::dealloc(p.as_ptr(), layout) }
    }
}

/// Owns an [`alloc`]ed input buffer once it is wrapped as an Arrow [`Buffer`], so the decoded
/// arrays can point into it and it is freed when the last of them is dropped.
struct GuestAllocation {
    addr: usize,
    size: usize,
}

impl Drop for GuestAllocation {
    fn drop(&mut self) {
        if let Some(layout) = layout(self.size) {
            // SAFETY: addr/size describe a live allocation made by `alloc` (see take_input).
            unsafe { std::alloc::dealloc(self.addr as *mut u8, layout) }
        }
    }
}

/// Takes ownership of the host-written buffer `[ptr, ptr+len)`.
///
/// # Safety
/// The buffer must come from `alloc(len)` and not be used by anyone else afterwards.
pub unsafe fn take_input(ptr: i32, len: i32) -> Buffer {
    let addr = ptr as u32 as usize;
    let size = len as u32 as usize;
    match NonNull::new(addr as *mut u8) {
        // SAFETY: per the contract above the allocation is live, `size` bytes long, and ours.
        Some(p) => unsafe {
            Buffer::from_custom_allocation(p, size, Arc::new(GuestAllocation { addr, size }))
        },
        None => Buffer::from_vec(Vec::<u8>::new()),
    }
}

thread_local! {
    /// The last result buffer. It is reused across calls (its capacity stays), and stays valid
    /// until the next call into the instance, which is all the host needs to copy it out.
    static RESULT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The last entry point's result stream, as ranges (and the column buffers they point
    /// into, kept alive until the next call).
    static GATHERED: RefCell<ipc::GatheredStream> = RefCell::new(ipc::GatheredStream::default());
}

/// Packs a result buffer as the i64 the ABI returns: pointer in the high 32 bits, length low.
pub fn pack(ptr: usize, len: usize) -> i64 {
    (((ptr as u64) << 32) | (len as u32 as u64)) as i64
}

fn finish(fill: impl FnOnce(&mut Vec<u8>) -> Result<(), UdfError>) -> i64 {
    RESULT.with(|cell| {
        let mut out = cell.borrow_mut();
        out.clear();
        out.push(STATUS_OK);
        if let Err(e) = fill(&mut out) {
            out.clear();
            out.push(STATUS_ERROR);
            out.extend_from_slice(e.message().as_bytes());
        }
        pack(out.as_ptr() as usize, out.len())
    })
}

/// Copies the current result buffer (for native tests of the wrappers).
pub fn last_result() -> Vec<u8> {
    RESULT.with(|cell| cell.borrow().clone())
}

/// The stream the last gathered result describes, assembled (for native tests).
pub fn last_gathered_stream() -> Vec<u8> {
    GATHERED.with(|cell| cell.borrow().to_vec())
}

/// Body of every exported entry point: decode the input batch, run `f`, and return its
/// column as a gathered result (the host copies the column's buffers straight out).
pub fn run_entry(input: Buffer, f: fn(&RecordBatch) -> Result<ArrayRef, UdfError>) -> i64 {
    install_panic_hook();
    GATHERED.with(|cell| {
        let mut gathered = cell.borrow_mut();
        // The previous result's buffers are no longer needed: free them before this call.
        gathered.clear();
        let described = (|| {
            // SAFETY: entry points only receive what the host encoded from valid arrays.
            let batch = unsafe { ipc::decode_trusted_batch(input)? };
            let result = f(&batch)?;
            drop(batch);
            gathered.describe(&result)
        })();
        match described {
            Ok(()) => RESULT.with(|cell| {
                let mut out = cell.borrow_mut();
                out.clear();
                out.push(STATUS_GATHERED);
                for &(at, len) in gathered.segments() {
                    // Guest addresses and lengths fit in 32 bits (wasm32); natively the
                    // list is only for show and tests read `last_gathered_stream`.
                    out.extend_from_slice(&(at as u32).to_le_bytes());
                    out.extend_from_slice(&(len as u32).to_le_bytes());
                }
                pack(out.as_ptr() as usize, out.len())
            }),
            Err(e) => {
                gathered.clear();
                finish(|_| Err(e))
            }
        }
    })
}

/// Writes a result buffer verbatim after the OK status. The SDK never needs this; it exists
/// so tests and hostile example guests can hand the host bytes the SDK would never produce.
pub fn raw_result(status: u8, body: &[u8]) -> i64 {
    RESULT.with(|cell| {
        let mut out = cell.borrow_mut();
        out.clear();
        out.push(status);
        out.extend_from_slice(body);
        pack(out.as_ptr() as usize, out.len())
    })
}

/// Body of `lancet_init`: parse the config, remember it, run the author's hook.
pub fn run_init(input: Buffer, hook: fn(&Config) -> Result<(), UdfError>) -> i64 {
    install_panic_hook();
    finish(|_| {
        let text = std::str::from_utf8(input.as_slice())
            .map_err(|_| UdfError::new("config is not UTF-8"))?;
        let config = Config::from_json(text)?;
        hook(&config)?;
        crate::config::set_config(config)
    })
}

/// Sends a line to the host's log (rate-limited there). Also used for panic messages, which a
/// `panic = "abort"` guest would otherwise lose: the host attaches the last line to the trap.
pub fn log(message: &str) {
    #[cfg(target_arch = "wasm32")]
    {
        #[link(wasm_import_module = "lancet")]
        unsafe extern "C" {
            #[link_name = "log"]
            fn host_log(ptr: *const u8, len: usize);
        }
        // SAFETY: the host only reads `len` bytes at `ptr` from this instance's memory.
        unsafe { host_log(message.as_ptr(), message.len()) }
    }
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("lancet udf: {message}");
}

fn install_panic_hook() {
    #[cfg(target_arch = "wasm32")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| std::panic::set_hook(Box::new(|info| log(&format!("panic: {info}")))));
    }
}

#[cfg(target_arch = "wasm32")]
mod exports {
    #[unsafe(no_mangle)]
    pub extern "C" fn lancet_abi_version() -> i32 {
        super::ABI_VERSION
    }

    #[unsafe(no_mangle)]
    pub extern "C" fn lancet_alloc(size: i32) -> i32 {
        super::alloc(size)
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn lancet_free(ptr: i32, size: i32) {
        unsafe { super::free(ptr, size) }
    }
}
