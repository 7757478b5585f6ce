//! Row-wise helpers for the common case: one value in, one value out, nulls propagated.
//!
//! They work on whole arrays so the loops stay tight (and vectorise for numbers); an author
//! only writes the per-value closure.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type,
    UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, Float32Array, Float64Array, Int64Array, PrimitiveArray,
    RecordBatch, StringArray, StructArray,
};
use arrow_buffer::{
    BooleanBuffer, BooleanBufferBuilder, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer,
};
use arrow_schema::{DataType, Field, Fields};

use crate::{UdfError, udf_error};

/// The `i`-th input column (inputs arrive in the order of the manifest's `input_columns`).
pub fn arg(batch: &RecordBatch, i: usize) -> Result<&ArrayRef, UdfError> {
    batch.columns().get(i).ok_or_else(|| {
        udf_error!(
            "expected at least {} input column(s), got {}",
            i + 1,
            batch.num_columns()
        )
    })
}

/// Values per iteration of the numeric kernels' loops (see [`map_values`]).
const LANES: usize = 16;

/// `f` over every value, into a new buffer.
///
/// Written as a loop over fixed chunks of [`LANES`] values, whose inner loop LLVM unrolls
/// completely. That matters in Wasm only: wasmtime checks for interruption (the call time
/// limit) at every loop iteration, and the check's slow path makes its code generator keep
/// the loop's state on the stack. A plain vectorised loop handles 2 doubles per iteration
/// and spent about half its time on that; here the check is paid once per 16 values.
/// Natively LLVM unrolls either form the same way.
pub fn map_values<I: Copy, O>(input: &[I], f: impl Fn(I) -> O) -> Vec<O> {
    let mut out = Vec::with_capacity(input.len());
    let spare = &mut out.spare_capacity_mut()[..input.len()];
    let (chunks, rest) = input.as_chunks::<LANES>();
    let (out_chunks, out_rest) = spare.as_chunks_mut::<LANES>();
    for (o, x) in out_chunks.iter_mut().zip(chunks) {
        for i in 0..LANES {
            o[i].write(f(x[i]));
        }
    }
    for (o, &x) in out_rest.iter_mut().zip(rest) {
        o.write(f(x));
    }
    // SAFETY: the chunks and the rest together cover all `input.len()` slots, each written.
    unsafe { out.set_len(input.len()) };
    out
}

/// `f` over pairs of values, into a new buffer; [`map_values`] for two inputs.
pub fn zip_values<A: Copy, B: Copy, O>(a: &[A], b: &[B], f: impl Fn(A, B) -> O) -> Vec<O> {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut out = Vec::with_capacity(n);
    let spare = &mut out.spare_capacity_mut()[..n];
    let ((ca, ra), (cb, rb)) = (a.as_chunks::<LANES>(), b.as_chunks::<LANES>());
    let (out_chunks, out_rest) = spare.as_chunks_mut::<LANES>();
    for ((o, x), y) in out_chunks.iter_mut().zip(ca).zip(cb) {
        for i in 0..LANES {
            o[i].write(f(x[i], y[i]));
        }
    }
    for ((o, &x), &y) in out_rest.iter_mut().zip(ra).zip(rb) {
        o.write(f(x, y));
    }
    // SAFETY: a and b have n values each; chunks plus rest wrote all n slots.
    unsafe { out.set_len(n) };
    out
}

/// A primitive array of `f` over `array`'s values, nulls kept.
fn map_primitive<I, O>(
    array: &PrimitiveArray<I>,
    f: impl Fn(I::Native) -> O::Native,
) -> PrimitiveArray<O>
where
    I: ArrowPrimitiveType,
    O: ArrowPrimitiveType,
{
    let values = map_values(array.values(), f);
    PrimitiveArray::new(ScalarBuffer::from(values), array.nulls().cloned())
}

/// Any integer or float column as Float64 (nulls kept). Float64 input is not copied.
pub fn to_f64(array: &ArrayRef) -> Result<Float64Array, UdfError> {
    macro_rules! widen {
        ($t:ty) => {
            map_primitive::<$t, Float64Type>(array.as_primitive::<$t>(), |v| v as f64)
        };
    }
    Ok(match array.data_type() {
        DataType::Float64 => array.as_primitive::<Float64Type>().clone(),
        DataType::Float32 => widen!(Float32Type),
        DataType::Int8 => widen!(Int8Type),
        DataType::Int16 => widen!(Int16Type),
        DataType::Int32 => widen!(Int32Type),
        DataType::Int64 => widen!(Int64Type),
        DataType::UInt8 => widen!(UInt8Type),
        DataType::UInt16 => widen!(UInt16Type),
        DataType::UInt32 => widen!(UInt32Type),
        DataType::UInt64 => widen!(UInt64Type),
        other => return Err(udf_error!("expected a numeric column, got {other}")),
    })
}

/// Any signed integer column (or UInt8..UInt32) as Int64 (nulls kept).
pub fn to_i64(array: &ArrayRef) -> Result<Int64Array, UdfError> {
    macro_rules! widen {
        ($t:ty) => {
            map_primitive::<$t, Int64Type>(array.as_primitive::<$t>(), |v| v as i64)
        };
    }
    Ok(match array.data_type() {
        DataType::Int64 => array.as_primitive::<Int64Type>().clone(),
        DataType::Int8 => widen!(Int8Type),
        DataType::Int16 => widen!(Int16Type),
        DataType::Int32 => widen!(Int32Type),
        DataType::UInt8 => widen!(UInt8Type),
        DataType::UInt16 => widen!(UInt16Type),
        DataType::UInt32 => widen!(UInt32Type),
        other => return Err(udf_error!("expected an integer column, got {other}")),
    })
}

/// `f` applied to each value of a numeric column, as Float64.
pub fn map_f64(array: &ArrayRef, f: impl Fn(f64) -> f64) -> Result<ArrayRef, UdfError> {
    Ok(Arc::new(map_primitive::<Float64Type, Float64Type>(
        &to_f64(array)?,
        f,
    )))
}

/// `f` applied pairwise to two numeric columns, as Float64; null where either input is null.
pub fn zip_f64(
    a: &ArrayRef,
    b: &ArrayRef,
    f: impl Fn(f64, f64) -> f64,
) -> Result<ArrayRef, UdfError> {
    let (a, b) = (to_f64(a)?, to_f64(b)?);
    if a.len() != b.len() {
        return Err(udf_error!(
            "column lengths differ: {} vs {}",
            a.len(),
            b.len()
        ));
    }
    let values = zip_values(a.values(), b.values(), f);
    let nulls = NullBuffer::union(a.nulls(), b.nulls());
    Ok(Arc::new(Float64Array::new(
        ScalarBuffer::from(values),
        nulls,
    )))
}

/// `f` applied to each value of an integer column, as Int64.
pub fn map_i64(array: &ArrayRef, f: impl Fn(i64) -> i64) -> Result<ArrayRef, UdfError> {
    Ok(Arc::new(map_primitive::<Int64Type, Int64Type>(
        &to_i64(array)?,
        f,
    )))
}

/// Calls `f` with every row of a Utf8, LargeUtf8 or Utf8View column (`None` for nulls).
pub fn for_each_str(array: &ArrayRef, mut f: impl FnMut(Option<&str>)) -> Result<(), UdfError> {
    match array.data_type() {
        DataType::Utf8 => array.as_string::<i32>().iter().for_each(&mut f),
        DataType::LargeUtf8 => array.as_string::<i64>().iter().for_each(&mut f),
        DataType::Utf8View => array.as_string_view().iter().for_each(&mut f),
        other => return Err(udf_error!("expected a string column, got {other}")),
    }
    Ok(())
}

/// A Utf8 column from a string column: `f` appends one row's output to the `String` it is
/// given and returns false to make that row null. Null inputs stay null.
///
/// The `String` is the output column's value buffer itself (`f` must only append), so rows
/// are never copied: a per-row copy costs a host call in Wasm (`memory.copy`).
pub fn map_str(
    array: &ArrayRef,
    mut f: impl FnMut(&str, &mut String) -> bool,
) -> Result<ArrayRef, UdfError> {
    let mut values = String::with_capacity(array.len() * 16);
    let mut offsets = Vec::with_capacity(array.len() + 1);
    offsets.push(0i32);
    let mut valid = BooleanBufferBuilder::new(array.len());
    let mut misuse = false;
    for_each_str(array, |value| {
        let start = values.len();
        let ok = value.is_some_and(|s| f(s, &mut values));
        misuse |= values.len() < start;
        if !ok {
            values.truncate(start);
        }
        valid.append(ok);
        offsets.push(values.len() as i32);
    })?;
    if misuse {
        return Err(UdfError::new(
            "map_str: the closure may only append to its String",
        ));
    }
    utf8_column(values, offsets, Some(NullBuffer::new(valid.finish())))
}

/// [`map_str`] for the hottest string UDFs: `f` writes one row's output bytes at the start of
/// `out` and returns how many it wrote (`None` makes the row null). `out` holds at least
/// `max_len(row)` bytes; writing past it panics (the call fails), so a wrong bound is a bug
/// report, never corruption. The whole result must be UTF-8 (checked once, at the end).
///
/// Why: in Wasm, a loop that may call out (a `String` growing, say) has its state spilled to
/// the stack on every iteration by the code generator. Writing into a slice keeps the loop
/// free of calls (a failed bounds check is a trap, not a call), so its state stays in
/// registers. (slugify, with its rare cases moved out of line: 160 -> 125 ns/row in Wasm.)
///
/// Validity and offsets are written by index into buffers sized up front, not pushed: a
/// push that may grow its buffer is a possible call in the row loop, which in Wasm made
/// cranelift keep the loop's state on the stack (slugify 1.51-1.56x -> 1.46-1.50x native).
pub fn map_str_bounded(
    array: &ArrayRef,
    max_len: impl Fn(&str) -> usize,
    mut f: impl FnMut(&str, &mut [u8]) -> Option<usize>,
) -> Result<ArrayRef, UdfError> {
    let len = array.len();
    // `values[..end]` is the column so far; the rest is zeroed scratch a row is written into.
    let mut values = vec![0u8; len * 16];
    let mut end = 0;
    let mut offsets = vec![0i32; len + 1];
    let mut valid = vec![0u64; len.div_ceil(64)];
    let mut overrun = false;
    let mut i = 0;
    for_each_str(array, |value| {
        let written = value.and_then(|s| {
            let room = max_len(s);
            if values.len() < end + room {
                values.resize((end + room).max(values.len() * 2), 0);
            }
            let n = f(s, &mut values[end..end + room])?;
            overrun |= n > room;
            Some(n.min(room))
        });
        end += written.unwrap_or(0);
        valid[i / 64] |= (written.is_some() as u64) << (i % 64);
        offsets[i + 1] = end as i32;
        i += 1;
    })?;
    if overrun {
        return Err(UdfError::new(
            "map_str_bounded: the closure reported more bytes than fit its slice",
        ));
    }
    values.truncate(end);
    let valid = BooleanBuffer::new(Buffer::from_vec(valid), 0, len);
    utf8_column_from_bytes(values, offsets, Some(NullBuffer::new(valid)))
}

/// [`utf8_column`] for text a UDF built as bytes: checked as UTF-8 too.
///
/// All-ASCII text (most UDF output) is recognised in one vectorised pass, which also spares
/// the per-offset char-boundary check; `String::from_utf8` alone walks text 8 bytes per step
/// in Wasm, where `usize` is 4 bytes.
pub fn utf8_column_from_bytes(
    values: Vec<u8>,
    offsets: Vec<i32>,
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef, UdfError> {
    let ascii = all_ascii(&values);
    let values = if ascii {
        // SAFETY: ASCII is UTF-8.
        unsafe { String::from_utf8_unchecked(values) }
    } else {
        String::from_utf8(values).map_err(|e| udf_error!("string result is not UTF-8: {e}"))?
    };
    checked_utf8_column(values, ascii, offsets, nulls)
}

/// Whether every byte is ASCII, by OR-ing them all together 8 at a time, 64 bytes per
/// iteration: no early exit, and in Wasm one interruption check per 64 bytes (see
/// [`map_values`]). Natively LLVM vectorises this; in Wasm it does not (see below).
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
fn all_ascii(bytes: &[u8]) -> bool {
    let (chunks, rest) = bytes.as_chunks::<64>();
    let mut seen = rest.iter().fold(0, |acc, &b| acc | b as u64);
    for chunk in chunks {
        for word in chunk.as_chunks::<8>().0 {
            seen |= u64::from_le_bytes(*word);
        }
    }
    seen & 0x8080_8080_8080_8080 == 0
}

/// [`all_ascii`] with Wasm SIMD: LLVM leaves the `u64` loop above scalar for wasm32 (eight
/// loads and ORs per 64 bytes, each load with its own address arithmetic in cranelift's
/// code); 16-byte vectors do the same in four. Half the time of the check in `email_parts`.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn all_ascii(bytes: &[u8]) -> bool {
    use core::arch::wasm32::{u8x16_bitmask, u8x16_splat, v128_load, v128_or};
    let (chunks, rest) = bytes.as_chunks::<64>();
    let mut seen = u8x16_splat(0);
    for chunk in chunks {
        for block in chunk.as_chunks::<16>().0 {
            // SAFETY: `block` is 16 readable bytes, and v128.load needs no alignment.
            seen = v128_or(seen, unsafe { v128_load(block.as_ptr().cast()) });
        }
    }
    let rest = rest.iter().fold(0, |acc, &b| acc | b);
    u8x16_bitmask(seen) == 0 && rest.is_ascii()
}

/// Whether `offsets` never decrease, 16 pairs per iteration: one interruption check per 16 in
/// Wasm instead of per vector of 4, which also let cranelift keep the running result in a
/// register rather than on the stack (a store and reload every iteration).
fn never_decreasing(offsets: &[i32]) -> bool {
    let Some(pairs) = offsets.len().checked_sub(1) else {
        return true;
    };
    let (lo, lo_rest) = offsets[..pairs].as_chunks::<16>();
    let (hi, hi_rest) = offsets[1..].as_chunks::<16>();
    let mut decreasing = false;
    for (a, b) in lo.iter().zip(hi) {
        let mut any = false;
        for i in 0..16 {
            any |= b[i] < a[i];
        }
        decreasing |= any;
    }
    for (a, b) in lo_rest.iter().zip(hi_rest) {
        decreasing |= b < a;
    }
    !decreasing
}

/// A Utf8 column from every row's text back to back in `values` and `offsets` (one per row
/// plus one: row `i` is `values[offsets[i]..offsets[i + 1]]`), `nulls` marking null rows.
///
/// Checks only what a `String` does not already promise: offsets start at 0, never
/// decrease, end at `values.len()`, fit `i32` and fall on char boundaries (always, when the
/// text is ASCII). Unlike arrow's `StringArray::try_new` it does not re-validate the text as
/// UTF-8, which at Wasm speed can cost as much as a simple UDF itself.
pub fn utf8_column(
    values: String,
    offsets: Vec<i32>,
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef, UdfError> {
    let ascii = all_ascii(values.as_bytes());
    checked_utf8_column(values, ascii, offsets, nulls)
}

/// [`utf8_column`], told whether `values` is all ASCII.
fn checked_utf8_column(
    values: String,
    ascii: bool,
    offsets: Vec<i32>,
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef, UdfError> {
    if values.len() > i32::MAX as usize {
        return Err(UdfError::new("string result larger than 2 GiB"));
    }
    let mut ok = offsets.first() == Some(&0)
        && offsets.last() == Some(&(values.len() as i32))
        && never_decreasing(&offsets);
    if ok && !ascii {
        // No early exit: a failure is a bug in the UDF, not worth a branch per row.
        for &offset in &offsets {
            ok &= values.is_char_boundary(offset as usize);
        }
    }
    if !ok {
        return Err(UdfError::new(
            "string result: offsets out of order or inside a character",
        ));
    }
    let rows = offsets.len() - 1;
    if nulls.as_ref().is_some_and(|n| n.len() != rows) {
        return Err(udf_error!(
            "string result: {rows} rows but a different number of null flags"
        ));
    }
    let nulls = nulls.filter(|n| n.null_count() > 0);
    // SAFETY (both): checked above: offsets start at 0, never decrease, end at values.len()
    // (which fits i32), and are char boundaries of a String, so every row is valid UTF-8.
    let offsets = unsafe { OffsetBuffer::new_unchecked(ScalarBuffer::from(offsets)) };
    let out =
        unsafe { StringArray::new_unchecked(offsets, Buffer::from(values.into_bytes()), nulls) };
    Ok(Arc::new(out))
}

/// A `FixedSizeList<Float32, dim>` column (the shape vector search wants) from a string
/// column: `f` fills one row's zeroed `dim` floats and returns false to make the row null.
pub fn map_str_to_f32s(
    array: &ArrayRef,
    dim: usize,
    mut f: impl FnMut(&str, &mut [f32]) -> bool,
) -> Result<ArrayRef, UdfError> {
    let dim_i32 = i32::try_from(dim).map_err(|_| udf_error!("dimension {dim} too large"))?;
    let mut values = vec![0f32; array.len() * dim];
    let mut valid = BooleanBufferBuilder::new(array.len());
    let mut row = 0;
    for_each_str(array, |value| {
        let slot = &mut values[row * dim..(row + 1) * dim];
        valid.append(value.is_some_and(|s| f(s, slot)));
        row += 1;
    })?;
    let nulls = NullBuffer::new(valid.finish());
    let nulls = (nulls.null_count() > 0).then_some(nulls);
    let item = Arc::new(Field::new_list_field(DataType::Float32, true));
    let values = Arc::new(Float32Array::from(values));
    Ok(Arc::new(FixedSizeListArray::try_new(
        item, dim_i32, values, nulls,
    )?))
}

/// A struct column from named children (all nullable, struct itself never null): what a
/// multi-output UDF returns, one child per output column.
pub fn struct_of(children: Vec<(&str, ArrayRef)>) -> Result<ArrayRef, UdfError> {
    let fields: Fields = children
        .iter()
        .map(|(name, a)| Field::new(*name, a.data_type().clone(), true))
        .collect();
    let arrays = children.into_iter().map(|(_, a)| a).collect();
    Ok(Arc::new(StructArray::try_new(fields, arrays, None)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, LargeStringArray, StringViewArray};

    #[test]
    fn numeric_helpers_propagate_nulls_and_widen() {
        let a: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), None, Some(3)]));
        let b: ArrayRef = Arc::new(Float64Array::from(vec![Some(10.0), Some(20.0), None]));
        let z = zip_f64(&a, &b, |x, y| x + y).unwrap();
        let z = z.as_primitive::<Float64Type>();
        assert_eq!(z.iter().collect::<Vec<_>>(), vec![Some(11.0), None, None]);
        let m = map_i64(&a, |x| x * 2).unwrap();
        assert_eq!(
            m.as_primitive::<Int64Type>().iter().collect::<Vec<_>>(),
            vec![Some(2), None, Some(6)]
        );
        let s: ArrayRef = Arc::new(StringArray::from(vec!["x"]));
        assert!(map_f64(&s, |x| x).is_err());
    }

    #[test]
    fn utf8_column_checks_offsets() {
        let ok = utf8_column("aébc".into(), vec![0, 1, 3, 5], None).unwrap();
        assert_eq!(
            ok.as_string::<i32>().iter().collect::<Vec<_>>(),
            vec![Some("a"), Some("é"), Some("bc")]
        );
        let nulls = NullBuffer::from(vec![true, false]);
        let n = utf8_column("ab".into(), vec![0, 2, 2], Some(nulls)).unwrap();
        assert!(n.is_null(1));
        for (values, offsets) in [
            ("aé", vec![0, 2, 3]),   // inside é
            ("ab", vec![0, 2, 1]),   // decreasing
            ("ab", vec![1, 2]),      // not from 0
            ("ab", vec![0, 1]),      // not to the end
            ("abc", vec![0, -1, 3]), // negative
            ("ab", vec![0]),         // no rows, yet text
        ] {
            assert!(utf8_column(values.into(), offsets, None).is_err());
        }
        let short = NullBuffer::from(vec![true]);
        assert!(utf8_column("ab".into(), vec![0, 1, 2], Some(short)).is_err());
    }

    #[test]
    fn never_decreasing_sees_every_pair() {
        for len in [0, 1, 2, 15, 16, 17, 32, 33, 40] {
            let offsets: Vec<i32> = (0..len).collect();
            assert!(never_decreasing(&offsets), "{len}");
            for at in 1..len as usize {
                let mut bad = offsets.clone();
                bad[at] = bad[at - 1] - 1;
                assert!(!never_decreasing(&bad), "{len}: drop at {at}");
            }
        }
    }

    #[test]
    fn all_ascii_sees_every_byte() {
        for len in [0, 1, 63, 64, 65, 130] {
            let bytes = vec![b'a'; len];
            assert!(all_ascii(&bytes));
            for at in 0..len {
                let mut high = bytes.clone();
                high[at] = 0x80;
                assert!(!all_ascii(&high), "{len}: high byte at {at}");
            }
        }
    }

    #[test]
    fn utf8_column_from_bytes_checks_bytes() {
        let text = |bytes: &[u8]| {
            let offsets = vec![0, bytes.len() as i32];
            utf8_column_from_bytes(bytes.to_vec(), offsets, None)
                .map(|a| a.as_string::<i32>().value(0).to_string())
        };
        assert_eq!(text(b"plain").unwrap(), "plain");
        assert_eq!(text("é".as_bytes()).unwrap(), "é");
        assert!(text(b"a\xc3").is_err());
        assert!(text(b"\xff").is_err());
        // Bytes that are UTF-8 still get their offsets checked.
        assert!(utf8_column_from_bytes("é".as_bytes().to_vec(), vec![0, 1, 2], None).is_err());
    }

    #[test]
    fn map_str_bounded_writes_rows_in_place() {
        let a: ArrayRef = Arc::new(StringArray::from(vec![
            Some("ab"),
            None,
            Some("xyz"),
            Some(""),
        ]));
        let r = map_str_bounded(
            &a,
            |s| 2 * s.len(),
            |s, out| {
                for (i, b) in s.bytes().enumerate() {
                    out[2 * i] = b;
                    out[2 * i + 1] = b'.';
                }
                (!s.is_empty()).then_some(2 * s.len())
            },
        )
        .unwrap();
        assert_eq!(
            r.as_string::<i32>().iter().collect::<Vec<_>>(),
            vec![Some("a.b."), None, Some("x.y.z."), None]
        );
        // Invalid UTF-8 and overstated lengths are errors, not bad columns.
        let bad = map_str_bounded(
            &a,
            |s| s.len(),
            |_, out| {
                out.fill(0xff);
                Some(out.len())
            },
        );
        assert!(bad.is_err());
        let over = map_str_bounded(&a, |s| s.len(), |s, _| Some(s.len() + 1));
        assert!(over.is_err());
    }

    /// Past the first validity word and the first scratch size, from every input layout.
    #[test]
    fn map_str_bounded_handles_long_columns() {
        let rows: Vec<Option<String>> = (0..300)
            .map(|i| (i % 7 != 3).then(|| "w".repeat(i % 50)))
            .collect();
        let upper = |s: &str, out: &mut [u8]| {
            out[..s.len()].copy_from_slice(s.to_uppercase().as_bytes());
            (s.len() % 5 != 1).then_some(s.len())
        };
        let want: Vec<Option<String>> = rows
            .iter()
            .map(|r| {
                r.as_ref()
                    .filter(|s| s.len() % 5 != 1)
                    .map(|s| s.to_uppercase())
            })
            .collect();
        let inputs: [ArrayRef; 3] = [
            Arc::new(StringArray::from(rows.clone())),
            Arc::new(LargeStringArray::from(rows.clone())),
            Arc::new(StringViewArray::from(rows.clone())),
        ];
        for input in inputs {
            let out = map_str_bounded(&input, |s| s.len(), upper).unwrap();
            let got: Vec<Option<String>> = out
                .as_string::<i32>()
                .iter()
                .map(|v| v.map(str::to_string))
                .collect();
            assert_eq!(got, want, "{}", input.data_type());
        }
    }

    #[test]
    fn chunked_kernels_cover_every_value() {
        // Lengths around the chunk size: empty, only a remainder, exact chunks, both.
        for n in [0, 1, 15, 16, 17, 32, 33, 100] {
            let a: Vec<i64> = (0..n as i64).collect();
            let b: Vec<f64> = (0..n).map(|i| i as f64 * 0.5).collect();
            assert_eq!(
                map_values(&a, |x| x * 3),
                a.iter().map(|x| x * 3).collect::<Vec<_>>()
            );
            let want: Vec<f64> = a.iter().zip(&b).map(|(x, y)| *x as f64 + y).collect();
            assert_eq!(zip_values(&a, &b, |x, y| x as f64 + y), want);
        }
        // Unequal inputs: the shorter one decides.
        assert_eq!(
            zip_values(&[1, 2, 3], &[10, 20], |x, y| x + y),
            vec![11, 22]
        );
    }

    #[test]
    fn string_helpers_accept_every_string_layout() {
        let upper = |s: &str, out: &mut String| {
            out.push_str(&s.to_uppercase());
            !s.is_empty()
        };
        let arrays: [ArrayRef; 3] = [
            Arc::new(StringArray::from(vec![Some("ab"), None, Some("")])),
            Arc::new(LargeStringArray::from(vec![Some("ab"), None, Some("")])),
            Arc::new(StringViewArray::from(vec![Some("ab"), None, Some("")])),
        ];
        for a in arrays {
            let r = map_str(&a, upper).unwrap();
            let r = r.as_string::<i32>();
            assert_eq!(r.iter().collect::<Vec<_>>(), vec![Some("AB"), None, None]);
        }
    }

    #[test]
    fn map_str_refuses_closures_that_rewrite_earlier_rows() {
        let a: ArrayRef = Arc::new(StringArray::from(vec!["é", "x"]));
        let err = map_str(&a, |s, out| {
            out.clear();
            out.push_str(s);
            true
        });
        assert!(err.is_err());
        let err = map_str(&a, |s, out| {
            out.insert(0, 'y');
            out.push_str(s);
            true
        });
        assert!(err.is_err(), "shifted a char boundary");
    }

    #[test]
    fn vectors_and_structs() {
        let a: ArrayRef = Arc::new(StringArray::from(vec![Some("ab"), None]));
        let v = map_str_to_f32s(&a, 2, |s, out| {
            out[0] = s.len() as f32;
            true
        })
        .unwrap();
        let v = v.as_fixed_size_list();
        assert_eq!(v.value_length(), 2);
        assert!(v.is_null(1));
        assert_eq!(
            v.value(0).as_primitive::<Float32Type>().values(),
            &[2.0, 0.0]
        );
        let s = struct_of(vec![("x", a.clone()), ("y", a)]).unwrap();
        assert_eq!(s.as_struct().column_names(), vec!["x", "y"]);
    }
}
