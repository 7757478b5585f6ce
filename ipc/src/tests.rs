use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, DictionaryArray, Int32Array, Int64Array, StringArray, StringViewArray, StructArray,
};
use arrow_buffer::NullBuffer;
use arrow_ipc::CompressionType;
use arrow_ipc::writer::{FileWriter, IpcWriteOptions, StreamWriter};
use flatbuffers::{FlatBufferBuilder, WIPOffset};

use super::*;
use crate::testing::{Kind, sites};

fn sample() -> RecordBatch {
    RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef),
        (
            "text",
            Arc::new(StringArray::from(vec!["a", "bb", "ccc"])) as ArrayRef,
        ),
    ])
    .unwrap()
}

fn stream_with(batch: &RecordBatch, options: IpcWriteOptions) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = StreamWriter::try_new_with_options(&mut out, &batch.schema(), options).unwrap();
    w.write(batch).unwrap();
    w.finish().unwrap();
    out
}

fn stream(batch: &RecordBatch) -> Vec<u8> {
    stream_with(batch, IpcWriteOptions::default())
}

fn compressed(batch: &RecordBatch, codec: CompressionType) -> Vec<u8> {
    let options = IpcWriteOptions::default()
        .try_with_compression(Some(codec))
        .unwrap();
    stream_with(batch, options)
}

fn file(batch: &RecordBatch) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = FileWriter::try_new(&mut out, &batch.schema()).unwrap();
    w.write(batch).unwrap();
    w.finish().unwrap();
    out
}

fn limits() -> Limits {
    Limits::new(1 << 30)
}

/// `bytes` with the `nth` field of `kind` set to `value`.
fn patched(bytes: &[u8], kind: Kind, nth: usize, value: i64) -> Vec<u8> {
    let site = sites(bytes)
        .unwrap()
        .into_iter()
        .filter(|s| s.kind == kind)
        .nth(nth)
        .unwrap();
    let mut out = bytes.to_vec();
    site.write(&mut out, value);
    out
}

fn refused(bytes: &[u8], want: &str) {
    let e = check(bytes, &limits()).expect_err(want).to_string();
    assert!(e.contains(want), "{e}\n(wanted: {want})");
    assert!(matches!(read(bytes, &limits()), Err(ReadError::Invalid(_))));
}

/// arrow's own reader panics (or aborts) on it: why the check exists.
fn arrow_panics(bytes: &[u8]) {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let reader = StreamReader::try_new(Cursor::new(bytes), None)?;
        reader.collect::<Result<Vec<_>, _>>()
    }));
    assert!(outcome.is_err(), "arrow did not panic: {outcome:?}");
}

#[test]
fn valid_bodies_pass_and_read_as_written() {
    let batch = sample();
    let dict: DictionaryArray<Int32Type> = vec!["x", "y", "x"].into_iter().collect();
    let views = StringViewArray::from(vec!["short", "a string longer than twelve bytes", "c"]);
    let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), 2);
    for i in 0..3 {
        vectors.values().append_slice(&[i as f32, 0.5]);
        vectors.append(true);
    }
    let other = RecordBatch::try_from_iter([
        ("d", Arc::new(dict) as ArrayRef),
        ("v", Arc::new(views) as ArrayRef),
        ("f", Arc::new(vectors.finish()) as ArrayRef),
    ])
    .unwrap();
    for b in [&batch, &other] {
        for bytes in [
            stream(b),
            file(b),
            compressed(b, CompressionType::LZ4_FRAME),
            compressed(b, CompressionType::ZSTD),
        ] {
            let (schema, batches) = read(&bytes, &limits()).unwrap();
            assert_eq!(schema, b.schema());
            assert_eq!(batches, vec![b.clone()]);
        }
    }
}

#[test]
fn refuses_a_body_longer_than_what_remains() {
    // The schema message has no body, so its bodyLength is left out: field 0 is the batch's.
    let bytes = patched(&stream(&sample()), Kind::BodyLength, 0, 1 << 50);
    refused(
        &bytes,
        "record batch 0 declares a body of 1125899906842624 bytes but only",
    );
    let bytes = patched(&stream(&sample()), Kind::MetadataLength, 1, i32::MAX as i64);
    refused(
        &bytes,
        "message 1 declares 2147483647 bytes of metadata but only",
    );
    let bytes = patched(&stream(&sample()), Kind::MetadataLength, 0, -8);
    refused(&bytes, "negative metadata length (-8)");
}

#[test]
fn refuses_buffers_outside_the_body() {
    let good = stream(&sample());
    let body_bytes = sites(&good)
        .unwrap()
        .into_iter()
        .find(|s| s.kind == Kind::BodyLength && s.message == 1);
    let body = body_bytes.unwrap().read(&good);
    let bytes = patched(&good, Kind::BufferOffset, 1, body);
    refused(
        &bytes,
        &format!("buffer 1 (offset {body}, length 24) lies outside the {body}-byte body"),
    );
    arrow_panics(&bytes);
    refused(&patched(&good, Kind::BufferLength, 3, i64::MAX), "buffer 3");
    refused(
        &patched(&good, Kind::BufferOffset, 0, -1),
        "buffer 0 (offset -1",
    );
}

#[test]
fn refuses_compressed_buffers_claiming_too_much() {
    for codec in [CompressionType::LZ4_FRAME, CompressionType::ZSTD] {
        let good = compressed(&sample(), codec);
        let bytes = patched(&good, Kind::UncompressedLength, 0, 1 << 50);
        refused(
            &bytes,
            "declares 1125899906842624 bytes decompressed, over the limit",
        );
        refused(
            &patched(&good, Kind::UncompressedLength, 0, -2),
            "decompressed length of -2",
        );
    }
}

#[test]
fn refuses_an_lz4_frame_that_outgrows_its_declared_size() {
    let zeros = RecordBatch::try_from_iter([(
        "z",
        Arc::new(Int64Array::from(vec![0; 100_000])) as ArrayRef,
    )])
    .unwrap();
    let good = compressed(&zeros, CompressionType::LZ4_FRAME);
    let data = sites(&good)
        .unwrap()
        .into_iter()
        .find(|s| s.kind == Kind::UncompressedLength)
        .unwrap();
    assert_eq!(data.read(&good), 800_000);
    refused(
        &patched(&good, Kind::UncompressedLength, 0, 64),
        "decompresses to more than the 64 bytes it declares",
    );
}

#[test]
fn refuses_hostile_field_nodes() {
    let good = stream(&sample());
    refused(
        &patched(&good, Kind::NodeLength, 0, -1),
        "field `id` has a length of -1",
    );
    refused(
        &patched(&good, Kind::NodeLength, 1, 1 << 40),
        "field `text` declares 1099511627776 values",
    );
    refused(
        &patched(&good, Kind::NullCount, 0, 4),
        "field `id` declares 4 nulls in 3 values",
    );
    refused(
        &patched(&good, Kind::BatchLength, 0, -3),
        "a length of -3 rows",
    );
}

#[test]
fn refuses_fixed_size_lists_that_overflow() {
    let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), 1 << 20);
    vectors.values().append_slice(&vec![0.0; 1 << 20]);
    vectors.append(true);
    let batch =
        RecordBatch::try_from_iter([("v", Arc::new(vectors.finish()) as ArrayRef)]).unwrap();
    let bytes = patched(&stream(&batch), Kind::NodeLength, 0, 1 << 45);
    let limits = Limits {
        max_decoded_bytes: 1 << 30,
        max_rows: u64::MAX,
    };
    let e = check(&bytes, &limits).unwrap_err().to_string();
    assert!(e.contains("35184372088832 lists of 1048576 values"), "{e}");
}

#[test]
fn refuses_a_short_struct_validity_bitmap() {
    let ints: ArrayRef = Arc::new(Int32Array::from(vec![1; 100]));
    let nulls = NullBuffer::from((0..100).map(|i| i % 3 != 0).collect::<Vec<_>>());
    let s = StructArray::try_new(
        vec![Field::new("i", DataType::Int32, false)].into(),
        vec![ints],
        Some(nulls),
    )
    .unwrap();
    let good = stream(&RecordBatch::try_from_iter([("s", Arc::new(s) as ArrayRef)]).unwrap());
    let bytes = patched(&good, Kind::BufferLength, 0, 8);
    refused(
        &bytes,
        "field `s` declares 34 nulls but has a validity bitmap of 8 bytes for 100 values",
    );
    arrow_panics(&bytes);
}

/// A framed message (continuation, length, flatbuffer padded to 8) and its body.
fn frame(meta: &[u8], body: &[u8]) -> Vec<u8> {
    let padded = meta.len().next_multiple_of(8);
    let mut out = CONTINUATION.to_vec();
    out.extend_from_slice(&(padded as i32).to_le_bytes());
    out.extend_from_slice(meta);
    out.resize(8 + padded, 0);
    out.extend_from_slice(body);
    out
}

fn message_bytes<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    kind: MessageHeader,
    header: WIPOffset<flatbuffers::UnionWIPOffset>,
    body_len: i64,
) -> Vec<u8> {
    let mut m = arrow_ipc::MessageBuilder::new(fbb);
    m.add_version(MetadataVersion::V5);
    m.add_header_type(kind);
    m.add_header(header);
    m.add_bodyLength(body_len);
    let m = m.finish();
    fbb.finish(m, None);
    fbb.finished_data().to_vec()
}

/// A stream whose schema has the one field `make` builds.
fn schema_stream(
    make: impl for<'a> FnOnce(&mut FlatBufferBuilder<'a>) -> WIPOffset<arrow_ipc::Field<'a>>,
) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    let field = make(&mut fbb);
    let fields = fbb.create_vector(&[field]);
    let mut s = arrow_ipc::SchemaBuilder::new(&mut fbb);
    s.add_fields(fields);
    let schema = s.finish().as_union_value();
    let mut out = frame(
        &message_bytes(&mut fbb, MessageHeader::Schema, schema, 0),
        &[],
    );
    out.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
    out
}

fn field<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    ty: arrow_ipc::Type,
    type_: Option<WIPOffset<flatbuffers::UnionWIPOffset>>,
    children: &[WIPOffset<arrow_ipc::Field<'a>>],
) -> WIPOffset<arrow_ipc::Field<'a>> {
    let name = fbb.create_string("f");
    let children = fbb.create_vector(children);
    let mut f = arrow_ipc::FieldBuilder::new(fbb);
    f.add_name(name);
    f.add_type_type(ty);
    if let Some(t) = type_ {
        f.add_type_(t);
    }
    f.add_children(children);
    f.finish()
}

fn null_field<'a>(fbb: &mut FlatBufferBuilder<'a>) -> WIPOffset<arrow_ipc::Field<'a>> {
    let null = arrow_ipc::NullBuilder::new(fbb).finish().as_union_value();
    field(fbb, arrow_ipc::Type::Null, Some(null), &[])
}

fn int<'a>(fbb: &mut FlatBufferBuilder<'a>, bits: i32) -> WIPOffset<arrow_ipc::Int<'a>> {
    let mut i = arrow_ipc::IntBuilder::new(fbb);
    i.add_bitWidth(bits);
    i.add_is_signed(true);
    i.finish()
}

#[test]
fn refuses_schemas_arrow_would_panic_on() {
    use arrow_ipc::Type;
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            schema_stream(|fbb| {
                let i = int(fbb, 7).as_union_value();
                field(fbb, Type::Int, Some(i), &[])
            }),
            "field `f`: an integer of 7 bits",
        ),
        (
            schema_stream(|fbb| {
                let l = arrow_ipc::ListBuilder::new(fbb).finish().as_union_value();
                field(fbb, Type::List, Some(l), &[])
            }),
            "type List with 0 children instead of 1",
        ),
        (
            schema_stream(|fbb| {
                let mut l = arrow_ipc::FixedSizeListBuilder::new(fbb);
                l.add_listSize(-4);
                let l = l.finish().as_union_value();
                let child = null_field(fbb);
                field(fbb, Type::FixedSizeList, Some(l), &[child])
            }),
            // arrow takes this schema; refused anyway, as no data can match it.
            "a fixed-size list of size -4",
        ),
        (
            schema_stream(|fbb| {
                let mut d = arrow_ipc::DecimalBuilder::new(fbb);
                d.add_precision(300);
                d.add_scale(2);
                d.add_bitWidth(128);
                let d = d.finish().as_union_value();
                field(fbb, Type::Decimal, Some(d), &[])
            }),
            "a decimal of precision 300 and scale 2",
        ),
        (
            schema_stream(|fbb| {
                let members: Vec<_> = (0..200).map(|_| null_field(fbb)).collect();
                let mut u = arrow_ipc::UnionBuilder::new(fbb);
                u.add_mode(arrow_ipc::UnionMode::Sparse);
                let u = u.finish().as_union_value();
                field(fbb, Type::Union, Some(u), &members)
            }),
            "a union of 200 members",
        ),
        (
            schema_stream(|fbb| {
                let mut d = arrow_ipc::DictionaryEncodingBuilder::new(fbb);
                d.add_id(1);
                let d = d.finish();
                let utf8 = arrow_ipc::Utf8Builder::new(fbb).finish().as_union_value();
                let name = fbb.create_string("f");
                let mut f = arrow_ipc::FieldBuilder::new(fbb);
                f.add_name(name);
                f.add_type_type(Type::Utf8);
                f.add_type_(utf8);
                f.add_dictionary(d);
                f.finish()
            }),
            "a dictionary without an index type",
        ),
        (
            schema_stream(|fbb| field(fbb, Type::NONE, None, &[])),
            "type NONE, which arrow cannot read",
        ),
    ];
    for (bytes, want) in cases {
        refused(&bytes, want);
        if !want.contains("fixed-size list") {
            arrow_panics(&bytes);
        }
    }
}

/// The sample's schema message, then a record batch message built from these parts.
fn batch_stream(
    nodes: &[(i64, i64)],
    buffers: &[(i64, i64)],
    variadic: Option<&[i64]>,
    body: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    StreamWriter::try_new(&mut out, &sample().schema())
        .unwrap()
        .finish()
        .unwrap();
    out.truncate(out.len() - 8);
    let mut fbb = FlatBufferBuilder::new();
    let nodes: Vec<_> = nodes
        .iter()
        .map(|&(l, n)| arrow_ipc::FieldNode::new(l, n))
        .collect();
    let buffers: Vec<_> = buffers
        .iter()
        .map(|&(o, l)| arrow_ipc::Buffer::new(o, l))
        .collect();
    let nodes = fbb.create_vector(&nodes);
    let buffers = fbb.create_vector(&buffers);
    let variadic = variadic.map(|v| fbb.create_vector(v));
    let mut b = arrow_ipc::RecordBatchBuilder::new(&mut fbb);
    b.add_length(3);
    b.add_nodes(nodes);
    b.add_buffers(buffers);
    if let Some(v) = variadic {
        b.add_variadicBufferCounts(v);
    }
    let b = b.finish().as_union_value();
    out.extend(frame(
        &message_bytes(&mut fbb, MessageHeader::RecordBatch, b, body.len() as i64),
        body,
    ));
    out
}

#[test]
fn refuses_unused_or_missing_variadic_counts_and_buffers() {
    let body = [0u8; 64];
    let buffers = [(0, 0), (0, 24), (0, 0), (24, 16), (40, 6)];
    let good = batch_stream(&[(3, 0), (3, 0)], &buffers, None, &body);
    assert!(check(&good, &limits()).is_ok());
    let extra = batch_stream(&[(3, 0), (3, 0)], &buffers, Some(&[1]), &body);
    refused(
        &extra,
        "1 variadic buffer counts more than its view columns use",
    );
    arrow_panics(&extra);
    refused(
        &batch_stream(&[(3, 0)], &buffers, None, &body),
        "1 field nodes, fewer than the schema needs (none left for `text`)",
    );
    refused(
        &batch_stream(&[(3, 0), (3, 0)], &buffers[..4], None, &body),
        "4 buffers, fewer than the schema needs",
    );
}

#[test]
fn refuses_a_dictionary_batch_without_data() {
    let dict: DictionaryArray<Int32Type> = vec!["x", "y"].into_iter().collect();
    let batch = RecordBatch::try_from_iter([("d", Arc::new(dict) as ArrayRef)]).unwrap();
    let mut out = Vec::new();
    StreamWriter::try_new(&mut out, &batch.schema())
        .unwrap()
        .finish()
        .unwrap();
    out.truncate(out.len() - 8);
    let mut fbb = FlatBufferBuilder::new();
    let mut d = arrow_ipc::DictionaryBatchBuilder::new(&mut fbb);
    d.add_id(0);
    let d = d.finish().as_union_value();
    out.extend(frame(
        &message_bytes(&mut fbb, MessageHeader::DictionaryBatch, d, 0),
        &[],
    ));
    refused(&out, "dictionary batch 0 holds no record batch");
    arrow_panics(&out);
}

#[test]
fn refuses_broken_files() {
    let good = file(&sample());
    assert_eq!(check(&good, &limits()), Ok(Format::File));
    let n = good.len();
    refused(
        &patched(&good, Kind::FooterLength, 0, -1),
        "the file footer declares -1 bytes",
    );
    refused(
        &patched(&good, Kind::FooterLength, 0, i32::MAX as i64),
        "the file footer declares 2147483647 bytes but only",
    );
    refused(
        &good[..n - 3],
        "does not end with a footer length and ARROW1",
    );
    refused(
        &patched(&good, Kind::BlockOffset, 0, 1 << 40),
        "record batch block 0 (offset 1099511627776",
    );
    refused(
        &patched(&good, Kind::BlockBodyLength, 0, 1 << 50),
        "lies outside the file's",
    );
    refused(
        &patched(&good, Kind::BlockMetaDataLength, 0, 2),
        "too few for its 8-byte length prefix",
    );
    // The footer's own bytes as a flatbuffer: garbage in, an error out.
    let mut bad = good.clone();
    let footer_len = i32::from_le_bytes(bad[n - 10..n - 6].try_into().unwrap()) as usize;
    bad[n - 10 - footer_len..n - 10].fill(0xEE);
    refused(&bad, "the file footer is not a valid flatbuffer");
}

#[test]
fn counts_what_decoding_allocates_against_the_budget() {
    let bytes = stream(&sample());
    let e = check(&bytes, &Limits::new(16)).unwrap_err().to_string();
    assert!(e.contains("over the limit of 16 bytes"), "{e}");
    let bytes = file(&sample());
    let e = check(&bytes, &Limits::new(100)).unwrap_err().to_string();
    assert!(e.contains("record batch block 0"), "{e}");
    // 800,000 bytes of zeros compress to a few hundred: the body alone fits the budget,
    // its decompression does not.
    let zeros = RecordBatch::try_from_iter([(
        "z",
        Arc::new(Int64Array::from(vec![0; 100_000])) as ArrayRef,
    )])
    .unwrap();
    let bytes = compressed(&zeros, CompressionType::ZSTD);
    assert!(check(&bytes, &Limits::new(800_000 + 4096)).is_ok());
    let e = check(&bytes, &Limits::new(100_000))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("800000 bytes decompressed, over the limit"),
        "{e}"
    );
}

#[test]
fn ignores_what_follows_the_end_of_the_stream() {
    let mut bytes = stream(&sample());
    bytes.extend_from_slice(b"anything at all");
    assert!(check(&bytes, &limits()).is_ok());
    refused(&[], "the stream holds no schema message");
    refused(
        &[0xff, 0xff, 0xff, 0xff, 1],
        "continuation marker but no length",
    );
}
