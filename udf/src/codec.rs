//! Host-side Arrow IPC: encode the input batch for the guest, and decode and validate what the
//! guest returned. Everything from the guest is untrusted.

use std::panic::{AssertUnwindSafe, catch_unwind};

use arrow_array::{Array, ArrayRef, RecordBatch, make_array};
use arrow_buffer::Buffer;
use arrow_data::ArrayData;
use arrow_ipc::MetadataVersion;
use arrow_ipc::reader::StreamDecoder;
use arrow_ipc::writer::{
    CompressionContext, DictionaryTracker, EncodedData, IpcDataGenerator, IpcWriteOptions,
    write_message,
};
use arrow_schema::{ArrowError, DataType};
use std::io::Write;

use crate::result_reader::{self, EOS};
use crate::{Limits, UdfError};
use lancet_sdk::layout::{self as input_layout, DirectBatch};

/// An input batch encoded as IPC messages but not yet laid out as one stream: the stream is
/// assembled only once, directly in guest memory (one copy fewer than encoding into a host
/// buffer and copying that in).
pub(crate) struct EncodedInput {
    schema: EncodedData,
    batch: BatchMessage,
    len: usize,
}

/// The record batch, laid out from the batch's own buffers where possible.
enum BatchMessage {
    /// Header plus borrowed buffers: the data is copied once, into guest memory.
    Direct(DirectBatch),
    /// arrow's encoder (body already copied into a host buffer): dictionaries, then the batch.
    Encoded(Vec<EncodedData>),
}

/// Body alignment of the input stream (arrow's default, and enough for every Arrow type).
const ALIGNMENT: usize = 64;

/// Uncompressed (guests are built without IPC compression), V5, [`ALIGNMENT`]-aligned.
fn write_options() -> IpcWriteOptions {
    IpcWriteOptions::try_new(ALIGNMENT, false, MetadataVersion::V5)
        .expect("valid static IPC options")
}

/// Bytes a message takes in the stream. Mirrors arrow_ipc::writer::write_message: 8-byte
/// prefix + flatbuffer, padded to the alignment, then the (already padded) body.
fn framed(header_len: usize, body_len: usize) -> usize {
    (header_len + 8).next_multiple_of(ALIGNMENT) + body_len
}

pub(crate) fn encode_input(batch: &RecordBatch) -> Result<EncodedInput, UdfError> {
    let options = write_options();
    let generator = IpcDataGenerator::default();
    let mut tracker = DictionaryTracker::new(false);
    let schema =
        generator.schema_to_bytes_with_dictionary_tracker(&batch.schema(), &mut tracker, &options);
    let batch_message = match input_layout::lay_out(batch, ALIGNMENT) {
        Some(direct) => BatchMessage::Direct(direct),
        None => {
            let (dictionaries, data) = generator
                .encode(
                    batch,
                    &mut tracker,
                    &options,
                    &mut CompressionContext::default(),
                )
                .map_err(|e| UdfError::BadInput(e.to_string()))?;
            let mut messages = dictionaries;
            messages.push(data);
            BatchMessage::Encoded(messages)
        }
    };
    let body = match &batch_message {
        BatchMessage::Direct(d) => framed(d.header.len(), d.body_len),
        BatchMessage::Encoded(messages) => messages
            .iter()
            .map(|m| framed(m.ipc_message.len(), m.arrow_data.len()))
            .sum(),
    };
    let len = framed(schema.ipc_message.len(), 0) + body + EOS.len();
    Ok(EncodedInput {
        schema,
        batch: batch_message,
        len,
    })
}

impl EncodedInput {
    /// Bytes the stream occupies.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Writes the whole stream into `out`, which must be exactly [`len`](Self::len) bytes.
    pub(crate) fn write_to(self, out: &mut [u8]) -> Result<(), UdfError> {
        let options = write_options();
        let mut writer = SliceWriter { out, pos: 0 };
        let layout_error =
            |e: ArrowError| UdfError::Internal(format!("laying out the input stream: {e}"));
        write_message(&mut writer, self.schema, &options).map_err(layout_error)?;
        match self.batch {
            BatchMessage::Direct(direct) => {
                direct
                    .write_to(&mut writer, &options)
                    .map_err(layout_error)?;
            }
            BatchMessage::Encoded(messages) => {
                for message in messages {
                    write_message(&mut writer, message, &options).map_err(layout_error)?;
                }
            }
        }
        writer.put(&EOS)?;
        if writer.pos != writer.out.len() {
            return Err(UdfError::Internal("input stream length miscomputed".into()));
        }
        Ok(())
    }
}

struct SliceWriter<'a> {
    out: &'a mut [u8],
    pos: usize,
}

impl SliceWriter<'_> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), UdfError> {
        self.write_all(bytes)
            .map_err(|_| UdfError::Internal("input stream length miscomputed".into()))
    }
}

impl Write for SliceWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let end = self.pos + buf.len();
        let dst = self
            .out
            .get_mut(self.pos..end)
            .ok_or(std::io::ErrorKind::WriteZero)?;
        dst.copy_from_slice(buf);
        self.pos = end;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Decodes the guest's result stream: exactly one batch with exactly one column of `rows`
/// rows, of type `expected` if given, and nothing after the end-of-stream marker. Decoding
/// may allocate no more than `limits.max_output_bytes` beyond the stream itself.
pub(crate) fn decode_output(
    stream: Buffer,
    rows: usize,
    expected: Option<&DataType>,
    limits: &Limits,
    udf: &str,
) -> Result<ArrayRef, UdfError> {
    let bad = |reason: String| UdfError::BadOutput {
        udf: udf.to_string(),
        reason,
    };
    // arrow-ipc validates what it decodes, but it is not hardened against every malformed
    // input; a panic in it must become this call's error, not take the server thread down.
    let batch = catch_unwind(AssertUnwindSafe(|| read_one_batch(stream, limits)))
        .map_err(|_| bad("the Arrow IPC decoder panicked on it".into()))?
        .map_err(bad)?;
    if batch.num_columns() != 1 {
        return Err(bad(format!(
            "{} columns; a UDF returns exactly one (a struct for several outputs)",
            batch.num_columns()
        )));
    }
    if batch.num_rows() != rows {
        return Err(bad(format!(
            "{} rows for {rows} input rows",
            batch.num_rows()
        )));
    }
    let column = batch.column(0).clone();
    match expected {
        None => Ok(column),
        Some(want) if column.data_type() == want => Ok(column),
        Some(want) => conform(column, want).ok_or_else(|| {
            bad(format!(
                "type {} where {want} was declared",
                batch.column(0).data_type()
            ))
        }),
    }
}

fn read_one_batch(stream: Buffer, limits: &Limits) -> Result<RecordBatch, String> {
    if let Some(read) = result_reader::read_direct(&stream) {
        return read;
    }
    read_with_arrow(stream, limits)
}

/// Any stream arrow can read (dictionaries, lists, views, ...), checked by arrow's validation.
/// arrow's decoder believes the sizes a stream declares (a compressed buffer claiming a
/// petabyte is allocated before decompression, and the failed allocation aborts the
/// process), so the stream is checked first: what decoding allocates, bodies included, must
/// fit the output cap plus the stream's own size.
fn read_with_arrow(mut stream: Buffer, limits: &Limits) -> Result<RecordBatch, String> {
    let budget = (stream.len() as u64).saturating_add(limits.max_output_bytes as u64);
    lancet_ipc::check_stream(stream.as_slice(), &lancet_ipc::Limits::new(budget))
        .map_err(|e| format!("malformed Arrow IPC stream: {e}"))?;
    let mut decoder = StreamDecoder::new();
    while !stream.is_empty() {
        let decoded = decoder
            .decode(&mut stream)
            .map_err(|e| format!("malformed Arrow IPC stream: {e}"))?;
        if let Some(batch) = decoded {
            return result_reader::check_stream_end(stream.as_slice()).map(|()| batch);
        }
    }
    match decoder.finish() {
        Err(e) => Err(format!("malformed Arrow IPC stream: truncated ({e})")),
        Ok(()) => Err("the Arrow IPC stream holds no record batch".into()),
    }
}

/// `column` relabelled as `want` when they differ only in nested field names, nullability
/// flags or metadata (e.g. a list's item field): the data is what was declared, so the
/// caller gets exactly the declared type. Struct child names must match, since outputs pick
/// children by name. `None` if the types really differ or the data breaks `want`'s rules.
fn conform(column: ArrayRef, want: &DataType) -> Option<ArrayRef> {
    let data = retype(column.to_data(), want)?;
    data.validate_full().ok()?;
    Some(make_array(data))
}

fn retype(data: ArrayData, want: &DataType) -> Option<ArrayData> {
    use DataType::*;
    let children: Vec<&DataType> = match (data.data_type(), want) {
        (List(_), List(w)) | (LargeList(_), LargeList(w)) | (Map(_, _), Map(w, _)) => {
            vec![w.data_type()]
        }
        (FixedSizeList(_, n), FixedSizeList(w, m)) if n == m => vec![w.data_type()],
        (Struct(have), Struct(w))
            if have.len() == w.len() && have.iter().zip(w).all(|(a, b)| a.name() == b.name()) =>
        {
            w.iter().map(|f| f.data_type()).collect()
        }
        (have, w) if have == w => return Some(data),
        _ => return None,
    };
    if let (Map(_, a), Map(_, b)) = (data.data_type(), want)
        && a != b
    {
        return None;
    }
    let child_data = data
        .child_data()
        .iter()
        .zip(children)
        .map(|(c, w)| retype(c.clone(), w))
        .collect::<Option<Vec<_>>>()?;
    data.into_builder()
        .data_type(want.clone())
        .child_data(child_data)
        .build()
        .ok()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{FixedSizeListArray, Float32Array, Int64Array};
    use arrow_schema::Field;

    use super::*;

    fn stream_of(column: ArrayRef) -> Vec<u8> {
        let batch = RecordBatch::try_from_iter([("r", column)]).unwrap();
        encoded_like_arrow(&batch, "")
    }

    /// `batch` through `encode_input`, checked to be the bytes arrow's own StreamWriter writes.
    fn encoded_like_arrow(batch: &RecordBatch, what: &str) -> Vec<u8> {
        let encoded = encode_input(batch).unwrap();
        let mut out = vec![0xAA; encoded.len()];
        encoded.write_to(&mut out).unwrap();
        let mut reference = Vec::new();
        let mut w =
            arrow_ipc::writer::StreamWriter::try_new(&mut reference, &batch.schema()).unwrap();
        w.write(batch).unwrap();
        w.finish().unwrap();
        assert_eq!(out, reference, "{what}");
        out
    }

    #[test]
    fn accepts_one_column_and_rejects_trailing_bytes() {
        let bytes = stream_of(Arc::new(Int64Array::from(vec![1, 2])));
        let col = decode_output(
            Buffer::from_vec(bytes.clone()),
            2,
            Some(&DataType::Int64),
            &Limits::default(),
            "t",
        )
        .unwrap();
        assert_eq!(col.len(), 2);
        let err = decode_output(
            Buffer::from_vec(bytes.clone()),
            3,
            None,
            &Limits::default(),
            "t",
        )
        .unwrap_err();
        assert!(err.to_string().contains("2 rows for 3"), "{err}");
        let err = decode_output(
            Buffer::from_vec(bytes.clone()),
            2,
            Some(&DataType::Utf8),
            &Limits::default(),
            "t",
        )
        .unwrap_err();
        assert!(err.to_string().contains("declared"), "{err}");
        let mut trailing = bytes.clone();
        trailing.extend_from_slice(b"junk");
        let err = decode_output(Buffer::from_vec(trailing), 2, None, &Limits::default(), "t")
            .unwrap_err();
        assert!(err.to_string().contains("4 trailing bytes"), "{err}");
        let err = decode_output(
            Buffer::from_vec(b"\x01\x02garbage".to_vec()),
            2,
            None,
            &Limits::default(),
            "t",
        )
        .unwrap_err();
        assert!(matches!(err, UdfError::BadOutput { .. }), "{err}");
        let truncated = bytes[..bytes.len() / 2].to_vec();
        assert!(
            decode_output(
                Buffer::from_vec(truncated),
                2,
                None,
                &Limits::default(),
                "t"
            )
            .is_err()
        );
    }

    /// The direct layout must produce arrow's bytes for every type it covers, including
    /// sliced columns (batches are split into calls) and nulls.
    #[test]
    fn direct_layout_matches_arrow_bytes() {
        use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
        use arrow_array::{BooleanArray, LargeStringArray, StringArray, StructArray};
        let strings: ArrayRef = Arc::new(StringArray::from(vec![
            Some("a"),
            None,
            Some("héllo"),
            Some(""),
            Some("xyz"),
            None,
            Some("last"),
            Some("0123456789"),
            Some("z"),
        ]));
        let large: ArrayRef = Arc::new(LargeStringArray::from(vec![Some("l"); 9]));
        let ints: ArrayRef = Arc::new(Int64Array::from((0..9).collect::<Vec<i64>>()));
        let nullable: ArrayRef = Arc::new(Int64Array::from(vec![
            Some(1),
            None,
            Some(3),
            None,
            Some(5),
            Some(6),
            None,
            Some(8),
            Some(9),
        ]));
        let bools: ArrayRef = Arc::new(BooleanArray::from(vec![
            Some(true),
            Some(false),
            None,
            Some(true),
            Some(true),
            Some(false),
            Some(true),
            None,
            Some(false),
        ]));
        let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), 3);
        for i in 0..9 {
            vectors.values().append_slice(&[i as f32, 1.0, 2.0]);
            vectors.append(i % 4 != 1);
        }
        let vectors: ArrayRef = Arc::new(vectors.finish());
        let structs: ArrayRef = Arc::new(StructArray::from(vec![
            (
                Arc::new(Field::new("s", DataType::Utf8, true)),
                strings.clone(),
            ),
            (
                Arc::new(Field::new("i", DataType::Int64, true)),
                nullable.clone(),
            ),
        ]));
        let batch = RecordBatch::try_from_iter([
            ("strings", strings),
            ("large", large),
            ("ints", ints),
            ("nullable", nullable),
            ("bools", bools),
            ("vectors", vectors),
            ("structs", structs),
        ])
        .unwrap();
        for (offset, len) in [(0, 9), (0, 4), (3, 5), (1, 0), (8, 1)] {
            let part = batch.slice(offset, len);
            assert!(input_layout::lay_out(&part, ALIGNMENT).is_some());
            encoded_like_arrow(&part, &format!("slice {offset}+{len}"));
        }
    }

    #[test]
    fn uncovered_types_fall_back_to_arrows_encoder() {
        use arrow_array::{DictionaryArray, types::Int32Type};
        let dict: DictionaryArray<Int32Type> = vec!["a", "b", "a"].into_iter().collect();
        let batch = RecordBatch::try_from_iter([("d", Arc::new(dict) as ArrayRef)]).unwrap();
        assert!(input_layout::lay_out(&batch, ALIGNMENT).is_none());
        stream_of(batch.column(0).clone());
    }

    /// A compressed result claiming a petabyte decompressed: arrow would allocate it before
    /// decompressing (and abort the process); the check refuses it first.
    #[test]
    fn refuses_a_result_claiming_more_than_the_output_cap() {
        use arrow_ipc::CompressionType;
        let batch = RecordBatch::try_from_iter([(
            "r",
            Arc::new(Int64Array::from(vec![0; 100_000])) as ArrayRef,
        )])
        .unwrap();
        let options = IpcWriteOptions::default()
            .try_with_compression(Some(CompressionType::LZ4_FRAME))
            .unwrap();
        let mut bytes = Vec::new();
        let mut w = arrow_ipc::writer::StreamWriter::try_new_with_options(
            &mut bytes,
            &batch.schema(),
            options,
        )
        .unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();
        let ok = decode_output(
            Buffer::from_vec(bytes.clone()),
            100_000,
            None,
            &Limits::default(),
            "t",
        );
        assert_eq!(ok.unwrap().len(), 100_000);
        // The values buffer's 8-byte uncompressed length, 800,000.
        let at = bytes
            .windows(8)
            .position(|w| w == 800_000i64.to_le_bytes())
            .unwrap();
        bytes[at..at + 8].copy_from_slice(&(1i64 << 50).to_le_bytes());
        let err = decode_output(
            Buffer::from_vec(bytes),
            100_000,
            None,
            &Limits::default(),
            "t",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("1125899906842624 bytes decompressed, over the limit"),
            "{err}"
        );
    }

    #[test]
    fn conforms_nested_field_flags_to_the_declared_type() {
        let item = Arc::new(Field::new("item", DataType::Float32, true));
        let values = Arc::new(Float32Array::from(vec![1.0, 2.0]));
        let list = FixedSizeListArray::try_new(item, 2, values, None).unwrap();
        let bytes = stream_of(Arc::new(list));
        let want =
            DataType::FixedSizeList(Arc::new(Field::new("element", DataType::Float32, false)), 2);
        let col = decode_output(
            Buffer::from_vec(bytes.clone()),
            1,
            Some(&want),
            &Limits::default(),
            "t",
        )
        .unwrap();
        assert_eq!(col.data_type(), &want);
        let wrong =
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), 3);
        assert!(
            decode_output(
                Buffer::from_vec(bytes),
                1,
                Some(&wrong),
                &Limits::default(),
                "t"
            )
            .is_err()
        );
    }
}
