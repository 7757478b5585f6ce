//! Property tests: real IPC bodies of varied schemas (stream and file format, uncompressed,
//! LZ4 and ZSTD), corrupted in every length and offset field, by random byte flips and by
//! truncation. Whatever the corruption, the check followed by arrow's readers (and, for
//! streams, the `StreamDecoder` the UDF runtime uses) must return, never panic and never
//! abort; the tallies printed at the end say how many inputs each stage refused.
//!
//! Cases per property: proptest's default (256), or `PROPTEST_CASES`.
//! `cargo test -p lancet-ipc --test corrupt -- --nocapture` shows the tallies.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

use arrow_array::builder::{
    FixedSizeListBuilder, Float32Builder, Int32Builder, ListBuilder, MapBuilder, StringBuilder,
};
use arrow_array::types::{Int16Type, Int32Type};
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Decimal128Array, DictionaryArray, FixedSizeBinaryArray,
    Float64Array, Int32Array, Int64Array, LargeStringArray, RecordBatch, RunArray, StringArray,
    StringViewArray, StructArray, UnionArray,
};
use arrow_buffer::{NullBuffer, ScalarBuffer};
use arrow_ipc::CompressionType;
use arrow_ipc::reader::StreamDecoder;
use arrow_ipc::writer::{FileWriter, IpcWriteOptions, StreamWriter};
use arrow_schema::{DataType, Field, UnionFields};
use lancet_ipc::testing::{Site, sites};
use lancet_ipc::{Format, Limits, ReadError};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestRunner};

fn ints() -> RecordBatch {
    RecordBatch::try_from_iter([
        (
            "i64",
            Arc::new(Int64Array::from(vec![1, -2, 3, 4, 5])) as ArrayRef,
        ),
        (
            "i32",
            Arc::new(Int32Array::from(vec![
                Some(1),
                None,
                Some(3),
                None,
                Some(9),
            ])) as ArrayRef,
        ),
        (
            "f64",
            Arc::new(Float64Array::from(vec![0.5, 1.5, -2.0, 1e9, 0.0])) as ArrayRef,
        ),
        (
            "b",
            Arc::new(BooleanArray::from(vec![
                Some(true),
                None,
                Some(false),
                Some(true),
                None,
            ])) as ArrayRef,
        ),
    ])
    .unwrap()
}

fn strings() -> RecordBatch {
    RecordBatch::try_from_iter([
        (
            "s",
            Arc::new(StringArray::from(vec![
                Some("a"),
                None,
                Some("héllo"),
                Some(""),
                Some("zz"),
            ])) as ArrayRef,
        ),
        (
            "l",
            Arc::new(LargeStringArray::from(vec!["x", "yy", "", "zzz", "w"])) as ArrayRef,
        ),
        (
            "bin",
            Arc::new(BinaryArray::from(vec![
                &b"\x00\xff"[..],
                b"",
                b"abc",
                b"d",
                b"ef",
            ])) as ArrayRef,
        ),
    ])
    .unwrap()
}

fn nested() -> RecordBatch {
    let mut lists = ListBuilder::new(StringBuilder::new());
    for row in [
        vec!["a", "b"],
        vec![],
        vec!["c"],
        vec!["d", "e", "f"],
        vec!["g"],
    ] {
        for s in row {
            lists.values().append_value(s);
        }
        lists.append(true);
    }
    let lists: ArrayRef = Arc::new(lists.finish());
    let ints: ArrayRef = Arc::new(Int32Array::from(vec![
        Some(1),
        Some(2),
        None,
        Some(4),
        Some(5),
    ]));
    let structs = StructArray::try_new(
        vec![
            Field::new("a", DataType::Int32, true),
            Field::new("b", lists.data_type().clone(), true),
        ]
        .into(),
        vec![ints, lists],
        Some(NullBuffer::from(vec![true, false, true, true, true])),
    )
    .unwrap();
    let mut map = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
    for i in 0..5 {
        map.keys().append_value(format!("k{i}"));
        map.values().append_value(i);
        map.append(i != 2).unwrap();
    }
    RecordBatch::try_from_iter([
        ("st", Arc::new(structs) as ArrayRef),
        ("m", Arc::new(map.finish()) as ArrayRef),
    ])
    .unwrap()
}

fn dictionary() -> RecordBatch {
    let d: DictionaryArray<Int32Type> =
        vec![Some("red"), None, Some("blue"), Some("red"), Some("green")]
            .into_iter()
            .collect();
    let e: DictionaryArray<Int16Type> = vec!["x", "y", "x", "x", "y"].into_iter().collect();
    RecordBatch::try_from_iter([
        ("d", Arc::new(d) as ArrayRef),
        ("e", Arc::new(e) as ArrayRef),
    ])
    .unwrap()
}

fn vectors() -> RecordBatch {
    let mut v = FixedSizeListBuilder::new(Float32Builder::new(), 8);
    for i in 0..5 {
        v.values().append_slice(&[i as f32; 8]);
        v.append(i != 3);
    }
    RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from(vec![0, 1, 2, 3, 4])) as ArrayRef,
        ),
        ("v", Arc::new(v.finish()) as ArrayRef),
    ])
    .unwrap()
}

fn misc() -> RecordBatch {
    let views = StringViewArray::from(vec![
        Some("tiny"),
        None,
        Some("a string longer than twelve"),
        Some(""),
        Some("x"),
    ]);
    let union = UnionArray::try_new(
        UnionFields::try_new(
            [0, 1],
            [
                Field::new("i", DataType::Int32, false),
                Field::new("s", DataType::Utf8, false),
            ],
        )
        .unwrap(),
        ScalarBuffer::from(vec![0i8, 1, 0, 1, 0]),
        Some(ScalarBuffer::from(vec![0i32, 0, 1, 1, 2])),
        vec![
            Arc::new(Int32Array::from(vec![1, 2, 3])),
            Arc::new(StringArray::from(vec!["p", "q"])),
        ],
    )
    .unwrap();
    let runs = RunArray::<Int32Type>::try_new(
        &Int32Array::from(vec![2, 5]),
        &StringArray::from(vec!["run", "other"]),
    )
    .unwrap();
    let decimals = Decimal128Array::from(vec![Some(12345), None, Some(-1), Some(0), Some(7)])
        .with_precision_and_scale(10, 2)
        .unwrap();
    let fsb = FixedSizeBinaryArray::try_from_iter([b"ab", b"cd", b"ef", b"gh", b"ij"].into_iter())
        .unwrap();
    RecordBatch::try_from_iter([
        ("views", Arc::new(views) as ArrayRef),
        ("union", Arc::new(union) as ArrayRef),
        ("runs", Arc::new(runs) as ArrayRef),
        ("dec", Arc::new(decimals) as ArrayRef),
        ("fsb", Arc::new(fsb) as ArrayRef),
    ])
    .unwrap()
}

fn stream(batches: &[RecordBatch], compression: Option<CompressionType>) -> Vec<u8> {
    let options = IpcWriteOptions::default()
        .try_with_compression(compression)
        .unwrap();
    let mut out = Vec::new();
    let mut w =
        StreamWriter::try_new_with_options(&mut out, &batches[0].schema(), options).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.finish().unwrap();
    out
}

fn file(batches: &[RecordBatch], compression: Option<CompressionType>) -> Vec<u8> {
    let options = IpcWriteOptions::default()
        .try_with_compression(compression)
        .unwrap();
    let mut out = Vec::new();
    let mut w = FileWriter::try_new_with_options(&mut out, &batches[0].schema(), options).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.finish().unwrap();
    out
}

/// Builds one corpus batch.
type Make = fn() -> RecordBatch;

struct Body {
    name: String,
    bytes: Vec<u8>,
    sites: Vec<Site>,
}

/// Every schema in every format: two batches each (a second batch exercises dictionary
/// reuse and more than one block).
static CORPUS: LazyLock<Vec<Body>> = LazyLock::new(|| {
    let mut out = Vec::new();
    let schemas: [(&str, Make); 6] = [
        ("ints", ints),
        ("strings", strings),
        ("nested", nested),
        ("dictionary", dictionary),
        ("vectors", vectors),
        ("misc", misc),
    ];
    for (name, make) in schemas {
        let batch = make();
        let batches = [batch.clone(), batch.slice(1, 3)];
        for (codec_name, codec) in [
            ("plain", None),
            ("lz4", Some(CompressionType::LZ4_FRAME)),
            ("zstd", Some(CompressionType::ZSTD)),
        ] {
            for (format, bytes) in [
                ("stream", stream(&batches, codec)),
                ("file", file(&batches, codec)),
            ] {
                let sites = sites(&bytes).expect("a valid body parses");
                out.push(Body {
                    name: format!("{name} {format} {codec_name}"),
                    bytes,
                    sites,
                });
            }
        }
    }
    out
});

fn limits() -> Limits {
    Limits::new(64 << 20)
}

#[derive(Default)]
struct Tally {
    refused_by_check: AtomicUsize,
    refused_by_arrow: AtomicUsize,
    decoded: AtomicUsize,
}

impl Tally {
    fn report(&self, name: &str) {
        let get = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        println!(
            "{name}: {} inputs, refused by the check {}, refused by arrow {}, decoded {}",
            get(&self.refused_by_check) + get(&self.refused_by_arrow) + get(&self.decoded),
            get(&self.refused_by_check),
            get(&self.refused_by_arrow),
            get(&self.decoded)
        );
    }
}

/// The property: check, then arrow's readers, then (streams) the push decoder; none panics.
fn survive(bytes: &[u8], tally: &Tally) -> Result<(), TestCaseError> {
    let limits = limits();
    match lancet_ipc::read(bytes, &limits) {
        Err(ReadError::Panicked(m)) => {
            return Err(TestCaseError::fail(format!(
                "arrow panicked after the check passed: {m}"
            )));
        }
        Err(ReadError::Invalid(_)) => {
            tally.refused_by_check.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        Err(ReadError::Arrow(_)) => tally.refused_by_arrow.fetch_add(1, Ordering::Relaxed),
        Ok(_) => tally.decoded.fetch_add(1, Ordering::Relaxed),
    };
    if Format::of(bytes) == Format::Stream {
        let decoded = catch_unwind(AssertUnwindSafe(|| {
            let mut buffer = arrow_buffer::Buffer::from(bytes.to_vec());
            let mut decoder = StreamDecoder::new();
            while !buffer.is_empty() {
                if decoder.decode(&mut buffer).is_err() {
                    return;
                }
            }
            let _ = decoder.finish();
        }));
        prop_assert!(
            decoded.is_ok(),
            "StreamDecoder panicked after the check passed"
        );
    }
    Ok(())
}

/// A hostile value for a field that held `original`.
fn hostile(choice: u8, random: i64, original: i64, len: usize) -> i64 {
    match choice % 16 {
        0 => 0,
        1 => -1,
        2 => 1,
        3 => i32::MAX as i64,
        4 => i32::MIN as i64,
        5 => i64::MAX,
        6 => i64::MIN,
        7 => 1 << 50,
        8 => original.wrapping_add(1),
        9 => original.wrapping_sub(1),
        10 => original.wrapping_add(8),
        11 => original.wrapping_sub(8),
        12 => original.wrapping_mul(2),
        13 => len as i64,
        14 => random % (2 * len as i64 + 1),
        _ => random,
    }
}

fn runner() -> TestRunner {
    // Config::default() reads PROPTEST_CASES (256 when unset).
    TestRunner::new(Config {
        failure_persistence: None,
        ..Config::default()
    })
}

#[test]
fn corrupted_length_and_offset_fields() {
    let tally = Tally::default();
    let field = (any::<Index>(), any::<u8>(), any::<i64>());
    runner()
        .run(
            &(any::<Index>(), prop::collection::vec(field, 1..=3)),
            |(body, edits)| {
                let body = body.get(&CORPUS);
                let mut bytes = body.bytes.clone();
                for (site, choice, random) in edits {
                    let site = site.get(&body.sites);
                    let value = hostile(choice, random, site.read(&bytes), bytes.len());
                    site.write(&mut bytes, value);
                }
                survive(&bytes, &tally)
                    .map_err(|e| TestCaseError::fail(format!("{}: {e}", body.name)))
            },
        )
        .unwrap();
    tally.report("corrupted length and offset fields");
}

/// Each kind of field at least once per body, with each hostile value: a sweep rather than a
/// sample, so no kind of field is left out by chance.
#[test]
fn every_field_kind_with_every_hostile_value() {
    let tally = Tally::default();
    for body in CORPUS.iter() {
        let mut seen = std::collections::HashSet::new();
        for site in body
            .sites
            .iter()
            .filter(|s| seen.insert((s.kind, s.message.min(1))))
        {
            for choice in 0..16u8 {
                let mut bytes = body.bytes.clone();
                let value = hostile(choice, 0x5eed_5eed_5eed, site.read(&bytes), bytes.len());
                site.write(&mut bytes, value);
                if let Err(e) = survive(&bytes, &tally) {
                    panic!("{} {:?} = {value}: {e}", body.name, site.kind);
                }
            }
        }
    }
    tally.report("every field kind with every hostile value");
}

#[test]
fn random_byte_flips() {
    let tally = Tally::default();
    let flip = (any::<Index>(), any::<u8>());
    runner()
        .run(
            &(any::<Index>(), prop::collection::vec(flip, 1..=8)),
            |(body, flips)| {
                let body = body.get(&CORPUS);
                let mut bytes = body.bytes.clone();
                for (at, value) in flips {
                    let at = at.index(bytes.len());
                    bytes[at] = value;
                }
                survive(&bytes, &tally)
                    .map_err(|e| TestCaseError::fail(format!("{}: {e}", body.name)))
            },
        )
        .unwrap();
    tally.report("random byte flips");
}

#[test]
fn truncations_and_trailing_junk() {
    let tally = Tally::default();
    let junk = prop::collection::vec(any::<u8>(), 0..64);
    runner()
        .run(
            &(any::<Index>(), any::<Index>(), junk),
            |(body, cut, junk)| {
                let body = body.get(&CORPUS);
                let mut bytes = body.bytes[..cut.index(body.bytes.len() + 1)].to_vec();
                bytes.extend_from_slice(&junk);
                survive(&bytes, &tally)
                    .map_err(|e| TestCaseError::fail(format!("{}: {e}", body.name)))
            },
        )
        .unwrap();
    tally.report("truncations and trailing junk");
}

#[test]
fn the_uncorrupted_corpus_reads_back() {
    for body in CORPUS.iter() {
        let (_, batches) = lancet_ipc::read(&body.bytes, &limits())
            .unwrap_or_else(|e| panic!("{}: {e}", body.name));
        assert_eq!(batches.len(), 2, "{}", body.name);
    }
}
