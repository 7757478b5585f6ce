//! Round trips through the ABI wrappers, natively (the wasm exports only add the raw pointers).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_buffer::Buffer;

use crate::abi::{self, STATUS_ERROR, STATUS_GATHERED, STATUS_OK};
use crate::prelude::*;

fn input(values: Vec<i64>) -> Buffer {
    let col: ArrayRef = Arc::new(Int64Array::from(values));
    let batch = RecordBatch::try_from_iter([("x", col)]).unwrap();
    Buffer::from_vec(crate::ipc::encode_batch(&batch).unwrap())
}

fn double(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    map_i64(arg(batch, 0)?, |x| x * 2)
}

fn fails(_: &RecordBatch) -> Result<ArrayRef, UdfError> {
    Err(udf_error!("nope {}", 42))
}

#[test]
fn entry_wrapper_returns_one_column_stream() {
    let packed = abi::run_entry(input(vec![1, 2, 3]), double);
    let out = abi::last_result();
    assert_eq!(packed as u64 & 0xffff_ffff, out.len() as u64);
    assert_eq!(out[0], STATUS_GATHERED);
    // Ranges: framing, the values buffer, its padding, the end marker (adjacent ones merged).
    assert_eq!((out.len() - 1) % 8, 0);
    assert!((out.len() - 1) / 8 >= 2, "{out:?}");
    let stream = abi::last_gathered_stream();
    let lengths: usize = out[1..]
        .chunks_exact(8)
        .map(|r| u32::from_le_bytes(r[4..].try_into().unwrap()) as usize)
        .sum();
    assert_eq!(lengths, stream.len());
    let batch = crate::ipc::decode_batch(Buffer::from_vec(stream)).unwrap();
    assert_eq!(batch.num_columns(), 1);
    let col = batch.column(0).as_primitive::<Int64Type>();
    assert_eq!(col.values(), &[2, 4, 6]);
}

#[test]
fn entry_wrapper_reports_errors_as_status_and_message() {
    abi::run_entry(input(vec![1]), fails);
    let out = abi::last_result();
    assert_eq!(out[0], STATUS_ERROR);
    assert_eq!(&out[1..], b"nope 42");
    abi::run_entry(Buffer::from_vec(b"garbage!".to_vec()), double);
    assert_eq!(abi::last_result()[0], STATUS_ERROR);
}

#[test]
fn init_wrapper_validates_and_stores_config() {
    let hook = |c: &Config| match c.parse::<f64>("w")? {
        Some(_) => Ok(()),
        None => Err(UdfError::new("w is required")),
    };
    abi::run_init(Buffer::from_vec(b"{}".to_vec()), hook);
    assert_eq!(
        abi::last_result(),
        [&[STATUS_ERROR][..], b"w is required"].concat()
    );
    abi::run_init(Buffer::from_vec(br#"{"w": "0.5"}"#.to_vec()), hook);
    assert_eq!(abi::last_result(), vec![STATUS_OK]);
    assert_eq!(config().get("w"), Some("0.5"));
    abi::run_init(Buffer::from_vec(br#"{"w": "1"}"#.to_vec()), hook);
    assert_eq!(
        abi::last_result()[0],
        STATUS_ERROR,
        "a second init is refused"
    );
}

#[test]
fn pack_puts_pointer_high_and_length_low() {
    assert_eq!(abi::pack(0x10, 0x20), 0x0000_0010_0000_0020);
    assert_eq!(abi::pack(0xffff_fff0, 5) as u64 >> 32, 0xffff_fff0);
}

/// Result streams from the copy-free layout, written or gathered, are byte for byte what
/// arrow's StreamWriter writes, for covered types (sliced and with nulls) and for the
/// fallback alike.
#[test]
fn encode_column_writes_arrows_bytes() {
    use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
    use arrow_array::{BooleanArray, DictionaryArray, Float64Array, StringArray, types::Int32Type};
    use arrow_ipc::writer::StreamWriter;
    use arrow_schema::{Field, Schema};

    let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), 2);
    for i in 0..5 {
        vectors.values().append_slice(&[i as f32, -1.0]);
        vectors.append(i != 2);
    }
    let dict: DictionaryArray<Int32Type> = vec!["a", "b", "a", "c", "b"].into_iter().collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Float64Array::from(vec![
            Some(1.5),
            None,
            Some(3.0),
            Some(4.0),
            None,
        ])),
        Arc::new(StringArray::from(vec![
            Some("x"),
            None,
            Some("yé"),
            Some(""),
            Some("z"),
        ])),
        Arc::new(BooleanArray::from(vec![true, false, true, true, false])),
        Arc::new(vectors.finish()),
        Arc::new(dict),
    ];
    for column in columns {
        for (offset, len) in [(0, 5), (1, 3), (4, 1), (0, 0)] {
            let column = column.slice(offset, len);
            let mut ours = vec![STATUS_OK];
            crate::ipc::encode_column(&column, &mut ours).unwrap();
            let field = Field::new(crate::ipc::RESULT_FIELD, column.data_type().clone(), true);
            let batch =
                RecordBatch::try_new(Arc::new(Schema::new(vec![field])), vec![column.clone()])
                    .unwrap();
            let mut reference = vec![STATUS_OK];
            let mut w = StreamWriter::try_new(&mut reference, &batch.schema()).unwrap();
            w.write(&batch).unwrap();
            w.finish().unwrap();
            assert_eq!(ours, reference, "{} {offset}+{len}", column.data_type());
            let mut gathered = crate::ipc::GatheredStream::default();
            gathered.describe(&column).unwrap();
            assert_eq!(
                gathered.to_vec(),
                reference[1..],
                "gathered {} {offset}+{len}",
                column.data_type()
            );
        }
    }
}
