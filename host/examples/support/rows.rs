//! The benchmarks' table rows: `id`, `category`, `text` (three words and the id) and a 32-d
//! `vec`, generated deterministically so every server in a run sees the same rows.

use std::sync::Arc;

use arrow_array::{FixedSizeListArray, Float32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

pub const DIM: usize = 32;
pub const WORDS: &[&str] = &[
    "amber", "birch", "cedar", "delta", "ember", "fjord", "glade", "heath", "inlet", "jetty",
    "knoll", "larch", "marsh", "niche", "oasis", "prism", "quartz", "ridge", "spire", "tundra",
];

pub fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(default)
}

pub fn vector(id: i64, salt: i64) -> Vec<f32> {
    // Deterministic pseudo-random values (splitmix-style), so both servers see the same rows.
    let mut x = (id as u64) ^ ((salt as u64) << 32) ^ 0x9E37_79B9_7F4A_7C15;
    (0..DIM)
        .map(|_| {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) % 10_000) as f32 / 10_000.0
        })
        .collect()
}

/// Rows `ids` in the bench schema; `salt` changes the text and vector of an updated row.
pub fn batch(ids: &[i64], salt: i64) -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("category", DataType::Int64, false),
        Field::new("text", DataType::Utf8, false),
        Field::new(
            "vec",
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), 32),
            false,
        ),
    ]));
    let values: Vec<f32> = ids.iter().flat_map(|i| vector(*i, salt)).collect();
    let vec = FixedSizeListArray::try_new(
        Arc::new(Field::new("item", DataType::Float32, true)),
        DIM as i32,
        Arc::new(Float32Array::from(values)),
        None,
    )
    .unwrap();
    let text = ids.iter().map(|i| {
        let w = |k: i64| WORDS[((i * 7 + k * 13 + salt) as usize) % WORDS.len()];
        format!("{} {} {} item {i}", w(0), w(1), w(2))
    });
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(Int64Array::from_iter_values(ids.iter().map(|i| i % 10))),
            Arc::new(StringArray::from_iter_values(text)),
            Arc::new(vec),
        ],
    )
    .unwrap();
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &schema).unwrap();
    w.write(&b).unwrap();
    w.finish().unwrap();
    drop(w);
    out
}
