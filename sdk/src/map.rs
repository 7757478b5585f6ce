//! Row-wise helpers for the common case: one value in, one value out, nulls propagated.
//!
//! They work on whole arrays so the loops stay tight (and vectorise for numbers); an author
//! only writes the per-value closure.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, Float32Array, Float64Array, Int64Array, RecordBatch,
    StringArray, StructArray,
};
use arrow_buffer::{BooleanBufferBuilder, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
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

/// Any integer or float column as Float64 (nulls kept). Float64 input is not copied.
pub fn to_f64(array: &ArrayRef) -> Result<Float64Array, UdfError> {
    macro_rules! widen {
        ($t:ty) => {
            array
                .as_primitive::<$t>()
                .unary::<_, Float64Type>(|v| v as f64)
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
            array
                .as_primitive::<$t>()
                .unary::<_, Int64Type>(|v| v as i64)
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
    Ok(Arc::new(to_f64(array)?.unary::<_, Float64Type>(f)))
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
    let values: ScalarBuffer<f64> = a
        .values()
        .iter()
        .zip(b.values().iter())
        .map(|(x, y)| f(*x, *y))
        .collect();
    let nulls = NullBuffer::union(a.nulls(), b.nulls());
    Ok(Arc::new(Float64Array::new(values, nulls)))
}

/// `f` applied to each value of an integer column, as Int64.
pub fn map_i64(array: &ArrayRef, f: impl Fn(i64) -> i64) -> Result<ArrayRef, UdfError> {
    Ok(Arc::new(to_i64(array)?.unary::<_, Int64Type>(f)))
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
    // Cheap checks that make the unchecked constructor below sound even if `f` broke the
    // append-only rule: offsets must fit, never decrease, and sit on char boundaries.
    if values.len() > i32::MAX as usize {
        return Err(UdfError::new("string result larger than 2 GiB"));
    }
    if misuse || !offsets.iter().all(|&o| values.is_char_boundary(o as usize)) {
        return Err(UdfError::new(
            "map_str: the closure may only append to its String",
        ));
    }
    let nulls = NullBuffer::new(valid.finish());
    let nulls = (nulls.null_count() > 0).then_some(nulls);
    let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
    // SAFETY: checked above: offsets start at 0, never decrease (no row shrank the buffer),
    // end at values.len(), and are char boundaries of a String, so every row is valid UTF-8.
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
