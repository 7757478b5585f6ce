//! all-MiniLM-L6-v2 (int8) through the crate, and every way a model or a call can be wrong.
//!
//! Needs what `scripts/models.sh` fetches: ONNX Runtime and the model's files, in
//! `LANCET_MODELS_DIR` (default `~/.cache/lancet/models`). scripts/test.sh runs it first.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use lancet_models::{
    CallLimits, LoadOptions, MODEL_FILE, Manifest, Model, ModelCache, ModelError, TOKENIZER_FILE,
};
use sha2::{Digest, Sha256};

fn dir() -> PathBuf {
    std::env::var_os("LANCET_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/lancet/models")
        })
}

struct Files {
    onnx: Vec<u8>,
    tokenizer: Vec<u8>,
}

fn files() -> &'static Files {
    static FILES: OnceLock<Files> = OnceLock::new();
    FILES.get_or_init(|| {
        let d = dir();
        let read = |p: PathBuf| {
            std::fs::read(&p).unwrap_or_else(|e| {
                panic!("{}: {e} (run `bash scripts/models.sh` first)", p.display())
            })
        };
        lancet_models::runtime::init(&d.join("libonnxruntime.so.1.31.1")).unwrap();
        Files {
            onnx: read(d.join("minilm/model.onnx")),
            tokenizer: read(d.join("minilm/tokenizer.json")),
        }
    })
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn manifest_for(onnx: &[u8], tokenizer: &[u8]) -> Manifest {
    let json = serde_json::json!({
        "name": "minilm",
        "files": {MODEL_FILE: sha(onnx), TOKENIZER_FILE: sha(tokenizer)},
        "dimension": 384, "max_tokens": 256, "pooling": "mean", "normalize": true,
        "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                   "token_type_ids": "token_type_ids"},
        "output": "last_hidden_state"
    });
    Manifest::from_json(json.to_string().as_bytes()).unwrap()
}

fn model() -> Arc<Model> {
    static MODEL: OnceLock<Arc<Model>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let f = files();
            Arc::new(
                Model::load(
                    manifest_for(&f.onnx, &f.tokenizer),
                    &f.onnx,
                    &f.tokenizer,
                    LoadOptions::default(),
                )
                .unwrap(),
            )
        })
        .clone()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

fn invalid(e: ModelError, words: &str) {
    assert!(
        matches!(e, ModelError::Invalid(_)) && e.to_string().contains(words),
        "expected an Invalid error saying '{words}', got {e:?}"
    );
}

#[test]
fn embeds_with_meaning_and_batch_independence() {
    let m = model();
    let texts = [
        "A cat sits on the mat.",
        "A kitten is resting on a rug.",
        "The stock market fell sharply today.",
    ];
    let all = m.embed(&texts, &CallLimits::default()).unwrap();
    assert_eq!((all.vectors(), all.dimension()), (3, 384));
    for i in 0..3 {
        let norm: f32 = all.row(i).iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "row {i} not normalised: {norm}");
        // Padding to the batch's longest text must not change a row's vector.
        let alone = m.embed(&texts[i..=i], &CallLimits::default()).unwrap();
        let c = cosine(all.row(i), alone.row(0));
        assert!(c > 0.99999, "row {i}: batched vs alone cosine {c}");
    }
    let similar = cosine(all.row(0), all.row(1));
    let unrelated = cosine(all.row(0), all.row(2));
    assert!(
        similar > 0.5 && similar > unrelated + 0.3,
        "cat/kitten {similar}, cat/market {unrelated}"
    );
    assert!(all.tokens() > 20, "tokens counted: {}", all.tokens());
}

#[test]
fn long_text_is_cut_to_max_tokens() {
    let m = model();
    let long = "word ".repeat(5000);
    let e = m.embed(&[long.as_str()], &CallLimits::default()).unwrap();
    assert_eq!(e.tokens(), 256);
}

#[test]
fn bad_calls_are_refused_before_running() {
    let m = model();
    invalid(
        m.embed::<&str>(&[], &CallLimits::default()).unwrap_err(),
        "at least one text",
    );
    let limits = CallLimits {
        max_rows: 2,
        ..Default::default()
    };
    invalid(m.embed(&["a", "b", "c"], &limits).unwrap_err(), "3 texts");
    let huge = "x".repeat(2 << 20);
    invalid(
        m.embed(&["ok", huge.as_str()], &CallLimits::default())
            .unwrap_err(),
        "text 1 holds 2097152 bytes",
    );
}

#[test]
fn a_deadline_stops_a_running_model() {
    let m = model();
    let texts: Vec<String> = (0..256)
        .map(|i| format!("{i} {}", "many words in a long sentence ".repeat(12)))
        .collect();
    let limits = CallLimits {
        max_rows: 1024,
        deadline: Duration::from_millis(5),
        ..Default::default()
    };
    let started = Instant::now();
    let e = m.embed(&texts, &limits).unwrap_err();
    assert!(matches!(e, ModelError::Deadline { millis: 5, .. }), "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped after {:?}",
        started.elapsed()
    );
    // The session is usable again afterwards.
    m.embed(&["after"], &CallLimits::default()).unwrap();
}

#[test]
fn bad_files_and_manifests_are_refused_by_name() {
    let f = files();
    let load = |manifest: Manifest, onnx: &[u8], tok: &[u8]| {
        Model::load(manifest, onnx, tok, LoadOptions::default()).unwrap_err()
    };
    // Checksum mismatch.
    let mut tampered = f.onnx.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    invalid(
        load(manifest_for(&f.onnx, &f.tokenizer), &tampered, &f.tokenizer),
        "model.onnx has sha256",
    );
    // A truncated file, and one that is no model, each with its own (matching) checksum.
    let truncated = &f.onnx[..f.onnx.len() / 2];
    invalid(
        load(
            manifest_for(truncated, &f.tokenizer),
            truncated,
            &f.tokenizer,
        ),
        "not a model ONNX Runtime can load",
    );
    let text = b"hello, I am not a graph";
    invalid(
        load(manifest_for(text, &f.tokenizer), text, &f.tokenizer),
        "not a model ONNX Runtime can load",
    );
    invalid(
        load(manifest_for(&f.onnx, b"{}"), &f.onnx, b"{}"),
        "not a tokenizers file",
    );
    // Names that do not match the graph.
    let mut m = manifest_for(&f.onnx, &f.tokenizer);
    m.output = "pooled".into();
    invalid(load(m, &f.onnx, &f.tokenizer), "no output 'pooled'");
    let mut m = manifest_for(&f.onnx, &f.tokenizer);
    m.inputs.token_type_ids = None;
    invalid(
        load(m, &f.onnx, &f.tokenizer),
        "input 'token_type_ids' is not named",
    );
    let mut m = manifest_for(&f.onnx, &f.tokenizer);
    m.inputs.attention_mask = "mask".into();
    invalid(load(m, &f.onnx, &f.tokenizer), "names input 'mask'");
    // A dimension the graph does not give.
    let mut m = manifest_for(&f.onnx, &f.tokenizer);
    m.dimension = 512;
    invalid(load(m, &f.onnx, &f.tokenizer), "has shape");
    // Pooling that needs another rank.
    let mut m = manifest_for(&f.onnx, &f.tokenizer);
    m.pooling = lancet_models::Pooling::None;
    invalid(load(m, &f.onnx, &f.tokenizer), "needs 2");
}

#[test]
fn the_cache_loads_once_and_keeps_its_bound() {
    let f = files();
    let manifest = manifest_for(&f.onnx, &f.tokenizer);
    let size = f.onnx.len() + f.tokenizer.len();
    let cache = ModelCache::new(LoadOptions::default(), size + 1);
    let mut loads = 0;
    let a = cache
        .get_or_load(&manifest, || {
            loads += 1;
            Ok((f.onnx.clone(), f.tokenizer.clone()))
        })
        .unwrap();
    let b = cache
        .get_or_load(&manifest, || {
            loads += 1;
            Ok((f.onnx.clone(), f.tokenizer.clone()))
        })
        .unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(loads, 1);
    assert_eq!(cache.memory_bytes(), size);
    // Another model while this one is in use does not fit.
    let mut other = manifest.clone();
    other.max_tokens = 128;
    let e = cache
        .get_or_load(&other, || Ok((f.onnx.clone(), f.tokenizer.clone())))
        .unwrap_err();
    assert!(matches!(e, ModelError::Unavailable(_)), "{e:?}");
    // Once no caller holds it, it makes room.
    drop((a, b));
    let c = cache
        .get_or_load(&other, || Ok((f.onnx.clone(), f.tokenizer.clone())))
        .unwrap();
    assert_eq!(c.manifest().max_tokens, 128);
    assert_eq!(cache.memory_bytes(), size);
    // Too big for the bound at all: refused as the caller's problem.
    let tiny = ModelCache::new(LoadOptions::default(), 1000);
    invalid(
        tiny.get_or_load(&manifest, || Ok((f.onnx.clone(), f.tokenizer.clone())))
            .unwrap_err(),
        "model memory limit",
    );
}

#[test]
fn large_calls_run_in_length_sorted_runs_and_keep_order() {
    let m = model();
    let texts: Vec<String> = (0..150)
        .map(|i| format!("text {i} {}", "word ".repeat(i % 17)))
        .collect();
    let all = m.embed(&texts, &CallLimits::default()).unwrap();
    assert_eq!(all.vectors(), 150);
    for i in [0, 1, 63, 64, 99, 149] {
        let alone = m.embed(&texts[i..=i], &CallLimits::default()).unwrap();
        let c = cosine(all.row(i), alone.row(0));
        assert!(c > 0.99999, "row {i}: {c}");
    }
    let too_long = vec!["x".repeat(70_000); 100];
    invalid(
        m.embed(&too_long, &CallLimits::default()).unwrap_err(),
        "text 0 holds 70000 bytes",
    );
}
