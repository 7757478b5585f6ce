//! Arrow columns to and from the runner's buffers: values as Arrow lays them out (fixed-width
//! little-endian numbers, bytes with u32 offsets, a null byte per row), so both sides convert a
//! column in bulk. Nested and other values (lists, structs, dates, decimals) cross as JSON text,
//! which the runner turns into Python lists and dicts and back.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_cast::{CastOptions, cast_with_options};
use arrow_schema::{DataType, Field, Schema};

use super::instance::{Column, Kind};

/// Casts that fail on a value that does not fit, rather than nulling it.
const STRICT: CastOptions<'static> = CastOptions {
    safe: false,
    format_options: arrow_cast::display::FormatOptions::new(),
};

/// The kind of buffer a column of `data_type` crosses as.
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

fn null_bytes(array: &dyn Array) -> Vec<u8> {
    match array.logical_nulls() {
        Some(n) if n.null_count() > 0 => n.iter().map(|valid| u8::from(!valid)).collect(),
        _ => Vec::new(),
    }
}

/// Values and u32 offsets of `values` (each row's bytes, in order).
fn pack<'a>(
    values: impl Iterator<Item = &'a [u8]>,
    rows: usize,
) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut data = Vec::new();
    let mut offsets = Vec::with_capacity((rows + 1) * 4);
    offsets.extend_from_slice(&0u32.to_le_bytes());
    for v in values {
        data.extend_from_slice(v);
        let end = u32::try_from(data.len()).map_err(|_| "a column over 4 GiB".to_string())?;
        offsets.extend_from_slice(&end.to_le_bytes());
    }
    Ok((data, offsets))
}

pub(crate) fn to_wit(array: &ArrayRef) -> Result<Column, String> {
    let cast = |to: &DataType| cast_with_options(array, to, &STRICT).map_err(|e| e.to_string());
    let kind = kind_for(array.data_type());
    let rows = array.len();
    let (data, offsets) = match kind {
        Kind::Ints => {
            let a = cast(&DataType::Int64)?;
            let v = a.as_primitive::<Int64Type>().values();
            (v.iter().flat_map(|x| x.to_le_bytes()).collect(), Vec::new())
        }
        Kind::Floats => {
            let a = cast(&DataType::Float64)?;
            let v = a.as_primitive::<Float64Type>().values();
            (v.iter().flat_map(|x| x.to_le_bytes()).collect(), Vec::new())
        }
        Kind::Bools => {
            let a = array.as_boolean();
            (a.values().iter().map(u8::from).collect(), Vec::new())
        }
        Kind::Texts => {
            let a = cast(&DataType::Utf8)?;
            let a = a.as_string::<i32>();
            pack((0..rows).map(|i| a.value(i).as_bytes()), rows)?
        }
        Kind::Blobs => {
            let a = cast(&DataType::Binary)?;
            let a = a.as_binary::<i32>();
            pack((0..rows).map(|i| a.value(i)), rows)?
        }
        Kind::Json => {
            let texts = to_json(array)?;
            pack(
                texts
                    .iter()
                    .map(|t| t.as_deref().unwrap_or("null").as_bytes()),
                rows,
            )?
        }
    };
    Ok(Column {
        kind,
        data,
        offsets,
        nulls: null_bytes(array.as_ref()),
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

/// The runner's result as an array of `expected`, `rows` long. Everything in it is checked:
/// lengths, offsets, UTF-8.
pub(crate) fn from_wit(
    column: Column,
    rows: usize,
    expected: &DataType,
) -> Result<ArrayRef, String> {
    if column.kind != kind_for(expected) {
        return Err(format!("a {:?} column for a {expected} one", column.kind));
    }
    let nulls = match column.nulls.len() {
        0 => None,
        n if n == rows => Some(NullBuffer::from_iter(column.nulls.iter().map(|b| *b == 0))),
        n => return Err(format!("{n} null flags for {rows} rows")),
    };
    let fixed = |width: usize| {
        (column.data.len() == rows * width)
            .then_some(())
            .ok_or_else(|| format!("{} bytes for {rows} values of {width}", column.data.len()))
    };
    let array: ArrayRef = match column.kind {
        Kind::Ints => {
            fixed(8)?;
            let v: Vec<i64> = column
                .data
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            Arc::new(Int64Array::new(ScalarBuffer::from(v), nulls))
        }
        Kind::Floats => {
            fixed(8)?;
            let v: Vec<f64> = column
                .data
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            Arc::new(Float64Array::new(ScalarBuffer::from(v), nulls))
        }
        Kind::Bools => {
            fixed(1)?;
            if column.data.iter().any(|b| *b > 1) {
                return Err("a boolean byte other than 0 or 1".into());
            }
            Arc::new(BooleanArray::new(
                column.data.iter().map(|b| *b == 1).collect(),
                nulls,
            ))
        }
        Kind::Texts | Kind::Blobs | Kind::Json => {
            let offsets = offsets(&column.offsets, rows, column.data.len())?;
            let data = Buffer::from_vec(column.data);
            if column.kind == Kind::Blobs {
                Arc::new(BinaryArray::try_new(offsets, data, nulls).map_err(|e| e.to_string())?)
            } else {
                let texts =
                    StringArray::try_new(offsets, data, nulls).map_err(|e| e.to_string())?;
                if column.kind == Kind::Json {
                    return from_json(&texts, expected);
                }
                Arc::new(texts)
            }
        }
    };
    if array.data_type() == expected {
        return Ok(array);
    }
    cast_with_options(&array, expected, &STRICT)
        .map_err(|e| format!("a value does not fit {expected}: {e}"))
}

/// `rows + 1` little-endian u32 offsets, checked to rise and to stay within `len` bytes.
fn offsets(bytes: &[u8], rows: usize, len: usize) -> Result<OffsetBuffer<i32>, String> {
    if bytes.len() != (rows + 1) * 4 {
        return Err(format!("{} offset bytes for {rows} rows", bytes.len()));
    }
    let mut out = Vec::with_capacity(rows + 1);
    let mut last = 0;
    for c in bytes.chunks_exact(4) {
        let o = u32::from_le_bytes(c.try_into().expect("4 bytes")) as usize;
        if o < last || o > len || o > i32::MAX as usize {
            return Err(format!("offset {o} out of order or past {len} bytes"));
        }
        last = o;
        out.push(o as i32);
    }
    Ok(OffsetBuffer::new(ScalarBuffer::from(out)))
}

fn from_json(texts: &StringArray, expected: &DataType) -> Result<ArrayRef, String> {
    let schema = Arc::new(Schema::new(vec![Field::new("v", expected.clone(), true)]));
    let mut decoder = arrow_json::ReaderBuilder::new(schema)
        .with_batch_size(texts.len().max(1))
        .build_decoder()
        .map_err(|e| e.to_string())?;
    let mut text = String::new();
    for v in texts.iter() {
        text.push_str("{\"v\":");
        text.push_str(v.unwrap_or("null"));
        text.push_str("}\n");
    }
    decoder
        .decode(text.as_bytes())
        .map_err(|e| format!("a value does not fit {expected}: {e}"))?;
    let batch = decoder
        .flush()
        .map_err(|e| format!("a value does not fit {expected}: {e}"))?;
    match batch {
        Some(b) if b.num_rows() == texts.len() => Ok(b.column(0).clone()),
        Some(b) => Err(format!("{} values for {} rows", b.num_rows(), texts.len())),
        None if texts.is_empty() => Ok(arrow_array::new_empty_array(expected)),
        None => Err("no values".into()),
    }
}

/// A struct of scalar fields crosses as one column per field (the function returns a dict):
/// the fields' names and kinds. Empty for any other type (a struct with nested fields
/// crosses whole as JSON).
pub(crate) fn struct_fields(data_type: &DataType) -> Vec<(String, Kind)> {
    let DataType::Struct(fields) = data_type else {
        return Vec::new();
    };
    let kinds: Vec<(String, Kind)> = fields
        .iter()
        .map(|f| (f.name().clone(), kind_for(f.data_type())))
        .collect();
    if kinds.is_empty() || kinds.iter().any(|(_, k)| *k == Kind::Json) {
        return Vec::new();
    }
    kinds
}

/// The runner's output as an array of `expected`: its one column, or a struct of its field
/// columns and nulls.
pub(crate) fn from_output(
    mut values: Vec<Column>,
    nulls: Vec<u8>,
    rows: usize,
    expected: &DataType,
) -> Result<ArrayRef, String> {
    let fields = match expected {
        DataType::Struct(fields) if !struct_fields(expected).is_empty() => fields.clone(),
        _ => {
            if values.len() != 1 || !nulls.is_empty() {
                return Err(format!("{} columns for one", values.len()));
            }
            return from_wit(values.pop().expect("one column"), rows, expected);
        }
    };
    if values.len() != fields.len() {
        return Err(format!(
            "{} columns for {} fields",
            values.len(),
            fields.len()
        ));
    }
    let children = values
        .into_iter()
        .zip(fields.iter())
        .map(|(c, f)| {
            from_wit(c, rows, f.data_type()).map_err(|e| format!("field '{}': {e}", f.name()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let nulls = match nulls.len() {
        0 => None,
        n if n == rows => Some(NullBuffer::from_iter(nulls.iter().map(|b| *b == 0))),
        n => return Err(format!("{n} null flags for {rows} rows")),
    };
    // A non-nullable field may not hold nulls, not even under a null row.
    let fields = arrow_schema::Fields::from(
        fields
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    );
    let array =
        arrow_array::StructArray::try_new(fields, children, nulls).map_err(|e| e.to_string())?;
    let array: ArrayRef = Arc::new(array);
    if array.data_type() == expected {
        return Ok(array);
    }
    cast_with_options(&array, expected, &STRICT).map_err(|e| format!("{e}"))
}

/// Bytes the result holds, for the output cap.
pub(crate) fn byte_size(column: &Column) -> usize {
    column.data.len() + column.offsets.len() + column.nulls.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, ListArray, types::Int32Type};

    #[test]
    fn scalars_cross_as_buffers_and_come_back_typed() {
        let a: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), None, Some(3)]));
        let c = to_wit(&a).unwrap();
        assert_eq!((c.data.len(), c.nulls.clone()), (24, vec![0, 1, 0]));
        let back = from_wit(c, 3, &DataType::Int32).unwrap();
        assert_eq!(back.as_ref(), a.as_ref());
        let big = Column {
            kind: Kind::Ints,
            data: (1i64 << 40).to_le_bytes().to_vec(),
            offsets: vec![],
            nulls: vec![],
        };
        assert!(
            from_wit(big, 1, &DataType::Int32)
                .unwrap_err()
                .contains("does not fit")
        );
        let s: ArrayRef = Arc::new(StringArray::from(vec![Some("é"), None, Some("")]).slice(0, 3));
        let back = from_wit(to_wit(&s).unwrap(), 3, &DataType::Utf8).unwrap();
        assert_eq!(back.as_ref(), s.as_ref());
    }

    #[test]
    fn hostile_buffers_are_refused_not_trusted() {
        let col = |kind, data: Vec<u8>, offsets: Vec<u32>, nulls: Vec<u8>| Column {
            kind,
            data,
            offsets: offsets.iter().flat_map(|o| o.to_le_bytes()).collect(),
            nulls,
        };
        let bad = [
            (col(Kind::Ints, vec![0; 7], vec![], vec![]), DataType::Int64),
            (
                col(Kind::Texts, b"ab".to_vec(), vec![0, 3], vec![]),
                DataType::Utf8,
            ),
            (
                col(Kind::Texts, b"ab".to_vec(), vec![2, 1], vec![]),
                DataType::Utf8,
            ),
            (
                col(Kind::Texts, vec![0xff], vec![0, 1], vec![]),
                DataType::Utf8,
            ),
            (
                col(Kind::Texts, b"a".to_vec(), vec![0, 1], vec![0, 0]),
                DataType::Utf8,
            ),
            (col(Kind::Bools, vec![2], vec![], vec![]), DataType::Boolean),
            (col(Kind::Ints, vec![0; 8], vec![], vec![]), DataType::Utf8),
        ];
        for (c, t) in bad {
            assert!(from_wit(c, 1, &t).is_err(), "{t}");
        }
    }

    #[test]
    fn nested_values_cross_as_json() {
        let list = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            None,
            Some(vec![]),
        ]);
        let a: ArrayRef = Arc::new(list);
        let c = to_wit(&a).unwrap();
        assert_eq!(c.kind, Kind::Json);
        assert_eq!(c.data, b"[1,2]null[]");
        let back = from_wit(c, 3, a.data_type()).unwrap();
        assert_eq!(back.as_ref(), a.as_ref());
        let wrong = Column {
            kind: Kind::Json,
            data: b"\"x\"".to_vec(),
            offsets: [0u32, 3].iter().flat_map(|o| o.to_le_bytes()).collect(),
            nulls: vec![],
        };
        assert!(from_wit(wrong, 1, a.data_type()).is_err());
    }
}
