//! Hostile and buggy entry points, one module, for the runtime's tests. Each entry passes
//! definition-time checks (it is exported with the right signature) and misbehaves when run.

use std::hint::black_box;
use std::sync::atomic::{AtomicI64, Ordering};

use lancet_sdk::abi::{STATUS_GATHERED, STATUS_OK, raw_result};
use lancet_sdk::prelude::*;

/// Never returns: only the epoch deadline stops it.
pub fn spin(_: &RecordBatch) -> Result<ArrayRef, UdfError> {
    let mut n = 0u64;
    loop {
        n = black_box(n.wrapping_add(1));
    }
}

/// Allocates (and touches) 1 MiB blocks until the memory cap stops it.
pub fn bomb(_: &RecordBatch) -> Result<ArrayRef, UdfError> {
    let mut hoard = Vec::new();
    loop {
        hoard.push(black_box(vec![7u8; 1 << 20]));
    }
}

/// Unbounded non-tail recursion: exhausts the wasm stack.
pub fn recurse(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    let depth = deep(black_box(batch.num_rows() as u64 + 1_000_000_000));
    Ok(Arc::new(Int64Array::from(vec![
        depth as i64;
        batch.num_rows()
    ])))
}

#[inline(never)]
fn deep(n: u64) -> u64 {
    if n == 0 {
        return 0;
    }
    // Called through an opaque pointer so LLVM cannot turn the recursion into a loop.
    let next: fn(u64) -> u64 = black_box(deep);
    next(n - 1).wrapping_mul(3).wrapping_add(n)
}

/// One row more than it was given.
pub fn wrong_rows(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    Ok(Arc::new(Int64Array::from(vec![1i64; batch.num_rows() + 1])))
}

/// A valid but very large result: 4 MiB of text per call.
pub fn huge_output(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    let mut rows = vec![String::new(); batch.num_rows()];
    if let Some(first) = rows.first_mut() {
        *first = "x".repeat(4 << 20);
    }
    Ok(Arc::new(StringArray::from(rows)))
}

// Entries below return a raw packed result buffer (see `export_raw!`), to hand the host
// bytes the SDK would never produce.

/// Claims a result buffer far outside its memory.
pub fn bogus_length(_: &RecordBatch) -> i64 {
    lancet_sdk::abi::pack(0xffff_0000, 0x7fff_ffff)
}

/// Not an Arrow stream at all.
pub fn malformed(_: &RecordBatch) -> i64 {
    raw_result(STATUS_OK, b"\xff\xff\xff\xff\x10\x00\x00\x00not arrow, no")
}

/// A correct result followed by extra bytes.
pub fn trailing(batch: &RecordBatch) -> i64 {
    let column: ArrayRef = Arc::new(Int64Array::from(vec![0i64; batch.num_rows()]));
    let mut body = Vec::new();
    lancet_sdk::ipc::encode_column(&column, &mut body).unwrap();
    body.extend_from_slice(b"extra");
    raw_result(STATUS_OK, &body)
}

/// Two columns instead of one.
pub fn two_columns(batch: &RecordBatch) -> i64 {
    let column: ArrayRef = Arc::new(Int64Array::from(vec![0i64; batch.num_rows()]));
    let two = RecordBatch::try_from_iter([("a", column.clone()), ("b", column)]).unwrap();
    raw_result(STATUS_OK, &lancet_sdk::ipc::encode_batch(&two).unwrap())
}

/// An unknown status byte.
pub fn bad_status(_: &RecordBatch) -> i64 {
    raw_result(7, b"")
}

/// A gathered result (ABI version 2) listing a range far outside memory.
pub fn gather_outside(_: &RecordBatch) -> i64 {
    raw_result(STATUS_GATHERED, &range(0xffff_0000, 0x100))
}

/// A gathered result whose ranges each lie in memory but add up to 64 MiB.
pub fn gather_huge(_: &RecordBatch) -> i64 {
    let list: Vec<u8> = (0..1024).flat_map(|_| range(0, 65_536)).collect();
    raw_result(STATUS_GATHERED, &list)
}

/// A gathered result list that is not a whole number of ranges.
pub fn gather_ragged(_: &RecordBatch) -> i64 {
    raw_result(STATUS_GATHERED, &[1, 2, 3])
}

fn range(at: u32, len: u32) -> Vec<u8> {
    [at.to_le_bytes(), len.to_le_bytes()].concat()
}

/// Utf8 where the caller declared another type.
pub fn wrong_type(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    Ok(Arc::new(StringArray::from(vec!["x"; batch.num_rows()])))
}

/// Executes `unreachable`.
pub fn trap(_: &RecordBatch) -> Result<ArrayRef, UdfError> {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    std::process::abort()
}

/// Panics (an abort, i.e. `unreachable`, under panic = "abort"; the message reaches the log).
pub fn panics(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    panic!("boom after {} rows", batch.num_rows())
}

/// A clean error.
pub fn guest_error(_: &RecordBatch) -> Result<ArrayRef, UdfError> {
    Err(UdfError::new("bad input: cannot score negative ages"))
}

/// Fails only for rows whose value is negative: exercises on_error = "null" bisection.
pub fn fail_negative(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    let values = to_i64(arg(batch, 0)?)?;
    if values.iter().flatten().any(|v| v < 0) {
        return Err(UdfError::new("negative value"));
    }
    Ok(Arc::new(values))
}

/// `2 * x`, after spinning `spin` (config, default 100000) iterations per row: a slow but
/// deterministic UDF, for observing and interrupting long backfills.
pub fn slow_double(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    let spin: u64 = config().parse("spin")?.unwrap_or(100_000);
    let values = to_i64(arg(batch, 0)?)?;
    let mut acc = 0u64;
    for _ in 0..(spin * values.len() as u64) {
        acc = black_box(acc.wrapping_add(1));
    }
    black_box(acc);
    Ok(Arc::new(
        values
            .iter()
            .map(|v| v.map(|v| v * 2))
            .collect::<Int64Array>(),
    ))
}

static CALLS: AtomicI64 = AtomicI64::new(0);

/// How many times this instance has been called (1 for a fresh instance): shows reuse.
pub fn count_calls(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    let n = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
    Ok(Arc::new(Int64Array::from(vec![n; batch.num_rows()])))
}

fn init(config: &Config) -> Result<(), UdfError> {
    match config.get("fail_init") {
        Some(why) => Err(UdfError::new(format!("init refused: {why}"))),
        None => Ok(()),
    }
}

export_init!(init);
export_udf!(
    spin,
    bomb,
    recurse,
    wrong_rows,
    huge_output,
    wrong_type,
    trap,
    panics
);
export_udf!(guest_error, fail_negative, count_calls, slow_double);

/// Exports `fn(&RecordBatch) -> i64` entries that build their packed result themselves.
macro_rules! export_raw {
    ($($name:ident),+) => {$(
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            #[unsafe(export_name = stringify!($name))]
            extern "C" fn entry(ptr: i32, len: i32) -> i64 {
                // SAFETY: the host hands over a buffer from lancet_alloc(len).
                let input = unsafe { lancet_sdk::abi::take_input(ptr, len) };
                match lancet_sdk::ipc::decode_batch(input) {
                    Ok(batch) => $name(&batch),
                    Err(e) => raw_result(1, e.message().as_bytes()),
                }
            }
        };
    )+};
}

export_raw!(
    bogus_length,
    malformed,
    trailing,
    two_columns,
    bad_status,
    gather_outside,
    gather_huge,
    gather_ragged
);

/// Exported with a signature the ABI does not allow.
#[cfg(target_arch = "wasm32")]
#[unsafe(no_mangle)]
extern "C" fn bad_signature(x: i32) -> i32 {
    x
}
