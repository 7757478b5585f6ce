//! Arrow columns to and from the runner's typed lists. Scalars cross as themselves; nested
//! and other values (lists, structs, dates, decimals) as one JSON text per row, which the
//! runner turns into Python lists and dicts and back.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
};
use arrow_cast::{CastOptions, cast_with_options};
use arrow_schema::{DataType, Field, Schema};

use super::instance::{Column, Kind};

/// Casts that fail on a value that does not fit, rather than nulling it.
const STRICT: CastOptions<'static> = CastOptions {
    safe: false,
    format_options: arrow_cast::display::FormatOptions::new(),
};

/// The kind of list a column of `data_type` crosses as.
pub(crate) fn kind_for(data_type: &DataType) -> Kind {
    use DataType::*;
    match data_type {
        Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 => Kind::Ints,
        Float16 | Float32 | Float64 => Kind::Floats,
        Utf8 | LargeUtf8 | Utf8View => Kind::Texts,
        Binary | LargeBinary | BinaryView => Kind::Blobs,
        Boolean => Kind::Bools,
        _ => Kind::Json,
    }
}

pub(crate) fn to_wit(array: &ArrayRef) -> Result<Column, String> {
    let cast = |to: &DataType| cast_with_options(array, to, &STRICT).map_err(|e| e.to_string());
    Ok(match kind_for(array.data_type()) {
        Kind::Ints => Column::Ints(
            cast(&DataType::Int64)?
                .as_primitive::<Int64Type>()
                .iter()
                .collect(),
        ),
        Kind::Floats => Column::Floats(
            cast(&DataType::Float64)?
                .as_primitive::<Float64Type>()
                .iter()
                .collect(),
        ),
        Kind::Texts => Column::Texts(
            cast(&DataType::Utf8)?
                .as_string::<i32>()
                .iter()
                .map(|v| v.map(str::to_string))
                .collect(),
        ),
        Kind::Blobs => Column::Blobs(
            cast(&DataType::Binary)?
                .as_binary::<i32>()
                .iter()
                .map(|v| v.map(<[u8]>::to_vec))
                .collect(),
        ),
        Kind::Bools => Column::Bools(array.as_boolean().iter().collect()),
        Kind::Json => Column::Json(to_json(array)?),
    })
}

/// One JSON text per row (None for a null row), through arrow-json's writer.
fn to_json(array: &ArrayRef) -> Result<Vec<Option<String>>, String> {
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new(
            "v",
            array.data_type().clone(),
            true,
        )])),
        vec![array.clone()],
    )
    .map_err(|e| e.to_string())?;
    let mut writer = arrow_json::WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, arrow_json::writer::LineDelimited>(Vec::new());
    writer.write(&batch).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    let text = writer.into_inner();
    let mut out = Vec::with_capacity(array.len());
    for (row, line) in text
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let mut value: serde_json::Value =
            serde_json::from_slice(line).map_err(|e| e.to_string())?;
        let v = value["v"].take();
        out.push((!array.is_null(row) && !v.is_null()).then(|| v.to_string()));
    }
    if out.len() != array.len() {
        return Err(format!(
            "{} JSON rows for {} values",
            out.len(),
            array.len()
        ));
    }
    Ok(out)
}

/// The runner's result as an array of `expected`, `rows` long.
pub(crate) fn from_wit(
    column: Column,
    rows: usize,
    expected: &DataType,
) -> Result<ArrayRef, String> {
    let len = match &column {
        Column::Ints(v) => v.len(),
        Column::Floats(v) => v.len(),
        Column::Texts(v) => v.len(),
        Column::Blobs(v) => v.len(),
        Column::Bools(v) => v.len(),
        Column::Json(v) => v.len(),
    };
    if len != rows {
        return Err(format!("{len} values for {rows} rows"));
    }
    let array: ArrayRef = match column {
        Column::Ints(v) => Arc::new(Int64Array::from(v)),
        Column::Floats(v) => Arc::new(Float64Array::from(v)),
        Column::Texts(v) => Arc::new(StringArray::from(v)),
        Column::Blobs(v) => Arc::new(BinaryArray::from_iter(v)),
        Column::Bools(v) => Arc::new(BooleanArray::from(v)),
        Column::Json(v) => return from_json(&v, expected),
    };
    if array.data_type() == expected {
        return Ok(array);
    }
    cast_with_options(&array, expected, &STRICT)
        .map_err(|e| format!("a value does not fit {expected}: {e}"))
}

fn from_json(values: &[Option<String>], expected: &DataType) -> Result<ArrayRef, String> {
    let schema = Arc::new(Schema::new(vec![Field::new("v", expected.clone(), true)]));
    let mut decoder = arrow_json::ReaderBuilder::new(schema)
        .with_batch_size(values.len().max(1))
        .build_decoder()
        .map_err(|e| e.to_string())?;
    let mut text = String::new();
    for v in values {
        text.push_str("{\"v\":");
        text.push_str(v.as_deref().unwrap_or("null"));
        text.push_str("}\n");
    }
    decoder
        .decode(text.as_bytes())
        .map_err(|e| format!("a value does not fit {expected}: {e}"))?;
    let batch = decoder
        .flush()
        .map_err(|e| format!("a value does not fit {expected}: {e}"))?;
    match batch {
        Some(b) if b.num_rows() == values.len() => Ok(b.column(0).clone()),
        Some(b) => Err(format!("{} values for {} rows", b.num_rows(), values.len())),
        None if values.is_empty() => Ok(arrow_array::new_empty_array(expected)),
        None => Err("no values".into()),
    }
}

/// Bytes the result holds, for the output cap.
pub(crate) fn byte_size(column: &Column) -> usize {
    fn opt<T>(v: &[Option<T>], len: impl Fn(&T) -> usize) -> usize {
        v.iter().map(|x| x.as_ref().map_or(0, &len) + 1).sum()
    }
    match column {
        Column::Ints(v) => v.len() * 9,
        Column::Floats(v) => v.len() * 9,
        Column::Texts(v) | Column::Json(v) => opt(v, String::len),
        Column::Blobs(v) => opt(v, Vec::len),
        Column::Bools(v) => v.len() * 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, ListArray, types::Int32Type};

    #[test]
    fn scalars_cross_as_themselves_and_come_back_typed() {
        let a: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), None, Some(3)]));
        let Column::Ints(v) = to_wit(&a).unwrap() else {
            panic!("ints")
        };
        assert_eq!(v, vec![Some(1), None, Some(3)]);
        let back = from_wit(Column::Ints(v), 3, &DataType::Int32).unwrap();
        assert_eq!(back.as_ref(), a.as_ref());
        let too_big = from_wit(Column::Ints(vec![Some(1 << 40)]), 1, &DataType::Int32);
        assert!(too_big.unwrap_err().contains("does not fit"));
        assert!(from_wit(Column::Ints(vec![]), 1, &DataType::Int64).is_err());
    }

    #[test]
    fn nested_values_cross_as_json() {
        let list = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            None,
            Some(vec![]),
        ]);
        let a: ArrayRef = Arc::new(list);
        let Column::Json(v) = to_wit(&a).unwrap() else {
            panic!("json")
        };
        assert_eq!(v, vec![Some("[1,2]".into()), None, Some("[]".into())]);
        let back = from_wit(Column::Json(v), 3, a.data_type()).unwrap();
        assert_eq!(back.as_ref(), a.as_ref());
        assert!(from_wit(Column::Json(vec![Some("\"x\"".into())]), 1, a.data_type()).is_err());
    }
}
