//! Python UDF benchmark: prints numbers, asserts nothing.
//!
//!     bash scripts/build-python-runner.sh && plugins/build.sh &&
//!     cargo run -p lancet-udf --release --example python_bench
//!
//! The same functions as Python in the Wasm sandbox (CPython 3.14 in the runner component),
//! as native CPython (the machine's `python3`, in a child process timing itself over the same
//! values) two ways: the function alone in a list comprehension ("loop"), and the runner's own
//! code doing what it does in the sandbox, column buffers in and out ("runner",
//! `python_bench_native.py`); and, where an example plugin computes the same thing, as the Rust
//! SDK guest; per row, best of PASSES, in one run. Then the costs of a new function: the runner's
//! compile (first start on a machine), its load from the compiled cache (each server start),
//! and the first call of a new function on a running runtime.
//!
//! LANCET_PYTHON_RUNNER names the runner (default ~/.cache/lancet/python/runner.wasm);
//! LANCET_PLUGINS_DIR the plugins, as for udf_bench.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use lancet_udf::{
    ABI_NAME, Limits, Manifest, OnError, PythonRunnerConfig, PythonSpec, Runtime, RuntimeConfig,
    sha256_hex,
};

const BATCH: usize = 65_536;
const PASSES: usize = 5;

struct Case {
    name: &'static str,
    rows: usize,
    source: &'static str,
    entry: &'static str,
    output: DataType,
    /// The example plugin (and its entry) computing the same, if there is one.
    plugin: Option<(&'static str, &'static str)>,
    make: fn(usize, usize) -> Vec<(&'static str, ArrayRef)>,
}

const TRIPLE: &str = "def triple(id):\n    return id * 3 + 1\n";
const SCORE: &str = "def score(a, b):\n    return a * 0.7 + b * 0.3\n";
const SLUGIFY: &str = r#"
import re, unicodedata
_non_alnum = re.compile(r"[^a-z0-9]+")

def slugify(title):
    text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    return _non_alnum.sub("-", text.lower()).strip("-")
"#;
const EMAIL: &str = r#"
def email_parts(email):
    user, at, domain = email.partition("@")
    if not at or not user or "." not in domain:
        return None
    return {"user": user.lower(), "domain": domain.lower()}
"#;

const WORDS: [&str; 8] = [
    "Crème",
    "brûlée",
    "Lance",
    "vector",
    "search",
    "Déjà",
    "WebAssembly",
    "fox",
];

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "id * 3 + 1",
            rows: 1_000_000,
            source: TRIPLE,
            entry: "triple",
            output: DataType::Int64,
            plugin: None,
            make: |start, n| {
                let a: ArrayRef = Arc::new(Int64Array::from_iter_values(
                    (start..start + n).map(|i| i as i64),
                ));
                vec![("id", a)]
            },
        },
        Case {
            name: "score (2 floats)",
            rows: 500_000,
            source: SCORE,
            entry: "score",
            output: DataType::Float64,
            plugin: Some(("score", "score")),
            make: |start, n| {
                let a: ArrayRef = Arc::new(Float64Array::from_iter_values(
                    (start..start + n).map(|i| i as f64 * 0.5),
                ));
                let b: ArrayRef = Arc::new(Float64Array::from_iter_values(
                    (start..start + n).map(|i| (i % 1000) as f64),
                ));
                vec![("a", a), ("b", b)]
            },
        },
        Case {
            name: "slugify",
            rows: 200_000,
            source: SLUGIFY,
            entry: "slugify",
            output: DataType::Utf8,
            plugin: Some(("slugify", "slugify")),
            make: |start, n| {
                let t: ArrayRef =
                    Arc::new(StringArray::from_iter_values((start..start + n).map(|i| {
                        (0..5)
                            .map(|k| WORDS[(i * 7 + k * 3) % WORDS.len()])
                            .collect::<Vec<_>>()
                            .join(" ")
                    })));
                vec![("title", t)]
            },
        },
        Case {
            name: "email parts (struct)",
            rows: 200_000,
            source: EMAIL,
            entry: "email_parts",
            output: DataType::Struct(
                vec![
                    Field::new("user", DataType::Utf8, true),
                    Field::new("domain", DataType::Utf8, true),
                ]
                .into(),
            ),
            plugin: Some(("email_parts", "email_parts")),
            make: |start, n| {
                let e: ArrayRef = Arc::new(StringArray::from_iter_values((start..start + n).map(
                    |i| match i % 20 {
                        0 => format!("not an email {i}"),
                        _ => format!("User.{i}@Mail{}.Example.com", i % 100),
                    },
                )));
                vec![("email", e)]
            },
        },
    ]
}

fn batches(case: &Case) -> Vec<RecordBatch> {
    (0..case.rows)
        .step_by(BATCH)
        .map(|start| {
            let cols = (case.make)(start, BATCH.min(case.rows - start));
            let schema = Schema::new(
                cols.iter()
                    .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
                    .collect::<Vec<_>>(),
            );
            RecordBatch::try_new(Arc::new(schema), cols.into_iter().map(|(_, a)| a).collect())
                .unwrap()
        })
        .collect()
}

fn cache_base() -> PathBuf {
    std::env::var_os("LANCET_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/lancet"))
}

fn runner_path() -> PathBuf {
    std::env::var_os("LANCET_PYTHON_RUNNER")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_base().join("python/runner.wasm"))
}

fn plugins_dir() -> PathBuf {
    std::env::var_os("LANCET_PLUGINS_DIR").map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../plugins/target/wasm32-unknown-unknown/release")
        },
        PathBuf::from,
    )
}

fn runtime(dir: &std::path::Path, python_cache: PathBuf) -> Runtime {
    let mut cfg = RuntimeConfig::new(dir.join("modules"), dir.join("cache"));
    cfg.default_limits = Limits {
        timeout: Duration::from_secs(60),
        ..Limits::default()
    };
    cfg.python = Some(PythonRunnerConfig {
        component: runner_path(),
        cache_dir: python_cache,
    });
    Runtime::new(cfg).unwrap()
}

fn best(mut pass: impl FnMut()) -> Duration {
    pass(); // warm-up
    (0..PASSES)
        .map(|_| {
            let t = Instant::now();
            pass();
            t.elapsed()
        })
        .min()
        .unwrap()
}

/// Native CPython's ns/row for `case`, two ways, each timed by the interpreter itself over the
/// same values (handed over as JSON): the function called once per row in a list
/// comprehension (the interpreter alone), and the runner's own code (`python_bench_native.py`:
/// column buffers in, the function per row, buffers out, as in the sandbox).
fn native_cpython(case: &Case, batches: &[RecordBatch], dir: &std::path::Path) -> Native {
    let mut columns: Vec<(&str, Vec<serde_json::Value>)> = Vec::new();
    for (i, _) in batches[0].schema().fields().iter().enumerate() {
        let mut col = Vec::new();
        let mut kind = "texts";
        for b in batches {
            let a = b.column(i);
            if let Some(x) = a.as_any().downcast_ref::<Int64Array>() {
                kind = "ints";
                col.extend(x.values().iter().map(|v| serde_json::json!(v)));
            } else if let Some(x) = a.as_any().downcast_ref::<Float64Array>() {
                kind = "floats";
                col.extend(x.values().iter().map(|v| serde_json::json!(v)));
            } else if let Some(x) = a.as_any().downcast_ref::<StringArray>() {
                col.extend(x.iter().map(|v| serde_json::json!(v)));
            }
        }
        columns.push((kind, col));
    }
    let kind_of = |t: &DataType| match t {
        DataType::Int64 => "ints",
        DataType::Float64 => "floats",
        _ => "texts",
    };
    let fields: Vec<(String, &str)> = match &case.output {
        DataType::Struct(fs) => fs
            .iter()
            .map(|f| (f.name().clone(), kind_of(f.data_type())))
            .collect(),
        _ => Vec::new(),
    };
    let data = dir.join(format!("{}.json", case.entry));
    let spec = serde_json::json!({
        "columns": columns,
        "batch": BATCH,
        "returns": kind_of(&case.output),
        "fields": fields,
        "source": case.source,
        "entry": case.entry,
        "passes": PASSES,
    });
    std::fs::write(&data, serde_json::to_vec(&spec).unwrap()).unwrap();
    let loop_script = format!(
        r#"
import json, sys, time
spec = json.load(open({data:?}))
cols = [values for _, values in spec["columns"]]
exec(spec["source"])
f = {entry}
best = None
for _ in range({passes} + 1):
    t = time.perf_counter()
    out = [f(*row) for row in zip(*cols)]
    dt = time.perf_counter() - t
    best = dt if best is None else min(best, dt)
print(best / len(cols[0]) * 1e9, sys.version.split()[0])
"#,
        data = data.display().to_string(),
        entry = case.entry,
        passes = PASSES,
    );
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let runner_script = manifest.join("examples/python_bench_native.py");
    let runner = manifest.join("python/runner/lancet_runner.py");
    let run = |args: &[&std::ffi::OsStr]| -> Option<f64> {
        let out = std::process::Command::new("python3")
            .args(args)
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            eprintln!(
                "  native run failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut parts = text.split_whitespace();
        let ns = parts.next()?.parse().ok()?;
        eprintln!("  (native: python3 {})", parts.next().unwrap_or("?"));
        Some(ns)
    };
    Native {
        call_loop: run(&["-c".as_ref(), loop_script.as_ref()]),
        runner: run(&[
            runner_script.as_os_str(),
            runner.as_os_str(),
            data.as_os_str(),
        ]),
    }
}

struct Native {
    call_loop: Option<f64>,
    runner: Option<f64>,
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let python_cache = cache_base().join("python");

    // The runner's costs: compile (first start on a machine, into an empty cache) and load
    // from the compiled cache (every later start).
    let cold = tempfile::tempdir().unwrap();
    let t = Instant::now();
    runtime(dir.path(), cold.path().to_path_buf())
        .warm_python()
        .unwrap();
    let compile = t.elapsed();
    runtime(dir.path(), python_cache.clone())
        .warm_python()
        .unwrap(); // fills the cache
    let t = Instant::now();
    let rt = runtime(dir.path(), python_cache);
    rt.warm_python().unwrap();
    let load = t.elapsed();
    println!(
        "python runner: compile {compile:.2?} (first start on a machine), load from cache {load:.2?} (each start)"
    );

    // First call of a new function on a running runtime: compile its source in a fresh
    // interpreter, then one call in a new instance.
    let t = Instant::now();
    let udf = rt
        .prepare_python(&PythonSpec {
            files: Vec::new(),
            source: "def first(x):\n    return x + 41\n".into(),
            entry: "first".into(),
            env: vec![],
            init: None,
            on_error: OnError::Fail,
            limits: None,
        })
        .unwrap();
    let one = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)])),
        vec![Arc::new(Int64Array::from(vec![1]))],
    )
    .unwrap();
    rt.invoke_python(&udf, "bench", &one, &DataType::Int64, &Limits::default())
        .unwrap();
    println!(
        "first call of a new function: {:.1?} (target <= 100 ms)",
        t.elapsed()
    );

    println!();
    println!(
        "{:<22} {:>8} {:>8} {:>13} {:>7} {:>15} {:>7} {:>10}",
        "function (ns/row)",
        "rows",
        "wasm-py",
        "cpython loop",
        "ratio",
        "cpython runner",
        "ratio",
        "rust-guest"
    );
    let limits = Limits {
        timeout: Duration::from_secs(60),
        ..Limits::default()
    };
    for case in cases() {
        let batches = batches(&case);
        let udf = rt
            .prepare_python(&PythonSpec {
                files: Vec::new(),
                source: case.source.into(),
                entry: case.entry.into(),
                env: vec![],
                init: None,
                on_error: OnError::Fail,
                limits: None,
            })
            .unwrap();
        let wasm_py = best(|| {
            for b in &batches {
                rt.invoke_python(&udf, "bench", b, &case.output, &limits)
                    .unwrap();
            }
        });
        let wasm_py = wasm_py.as_nanos() as f64 / case.rows as f64;
        let native = native_cpython(&case, &batches, dir.path());
        let rust = case.plugin.and_then(|(plugin, entry)| {
            let module = std::fs::read(plugins_dir().join(format!("{plugin}.wasm"))).ok()?;
            let manifest = Manifest {
                abi: ABI_NAME.into(),
                module_sha256: sha256_hex(&module),
                module_size: module.len() as u64,
                entry: entry.into(),
                config: Default::default(),
                limits: None,
                on_error: OnError::Fail,
            };
            rt.store_module(&manifest, Some(&module)).ok()?;
            let prepared = rt.prepare(&manifest).ok()?;
            let d = best(|| {
                for b in &batches {
                    rt.invoke(&prepared, "bench", b, None, &limits).unwrap();
                }
            });
            Some(d.as_nanos() as f64 / case.rows as f64)
        });
        let ns = |n: Option<f64>| n.map_or("-".into(), |n| format!("{n:.0}"));
        let ratio = |n: Option<f64>| n.map_or("-".into(), |n| format!("{:.2}x", wasm_py / n));
        println!(
            "{:<22} {:>8} {:>8.0} {:>13} {:>7} {:>15} {:>7} {:>10}",
            case.name,
            case.rows,
            wasm_py,
            ns(native.call_loop),
            ratio(native.call_loop),
            ns(native.runner),
            ratio(native.runner),
            rust.map_or("-".into(), |r| format!("{r:.1}")),
        );
    }
}
