//! Backfill benchmark: prints numbers, asserts nothing.
//!
//!     plugins/build.sh && cargo run -p lancet --release --example backfill_bench
//!
//! 1M rows; for the numeric (`score`) and the embedding (`embed`) UDF, and for two
//! `max_checkpoint_size` settings, two runs, each in a fresh process on a freshly written table
//! (so peak RSS belongs to that run alone):
//! - floor: lance's own `Dataset::add_columns` with a `BatchUDF` running the same function
//!   compiled natively, in-process, batch size = the setting;
//! - lancet: a Lancet backfill job end to end (App in-process, no HTTP): plan, read, Wasm UDF,
//!   checkpoints, column files, DataReplacement commits.
//!
//! Rows/s and peak RSS (VmHWM) of each child, and lancet/floor ratios. Plugins are read from
//! LANCET_PLUGINS_DIR (default plugins/target/wasm32-unknown-unknown/release); `ROWS` in the
//! environment overrides the row count, `UDFS=score,embed` and `SETTINGS=4096,65536` pick cells,
//! `RUNS` (default 3) sets the runs per cell (the fastest is shown; CPU/wall > 1 means the run
//! used more than one core).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

// Both cells run in this binary, so both use the allocator the `lancet` binary ships with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use arrow_array::{Float64Array, RecordBatch, RecordBatchIterator, StringArray};
use arrow_schema::{DataType, Field, Schema};
use lance::Dataset;
use lance::dataset::{BatchUDF, NewColumnTransform, WriteParams};
use lance_namespace::models::CreateTableRequest;

const SETTINGS: [usize; 2] = [4_096, 65_536];
const UDFS: [&str; 2] = ["score", "embed"];

fn rows() -> usize {
    std::env::var("ROWS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1_000_000)
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

/// Deterministic pseudo-random inputs: two numbers and a short sentence per row.
fn data(n: usize) -> Vec<RecordBatch> {
    const WORDS: [&str; 12] = [
        "lance", "table", "vector", "column", "query", "index", "fragment", "version", "backfill",
        "wasm", "arrow", "search",
    ];
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Float64, false),
        Field::new("b", DataType::Float64, false),
        Field::new("text", DataType::Utf8, false),
    ]));
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state >> 33
    };
    let mut out = Vec::new();
    let mut start = 0;
    while start < n {
        let len = 65_536.min(n - start);
        let a: Vec<f64> = (0..len).map(|_| (next() % 10_000) as f64 / 7.0).collect();
        let b: Vec<f64> = (0..len).map(|_| (next() % 10_000) as f64 / 3.0).collect();
        let text: Vec<String> = (0..len)
            .map(|i| {
                let w = |k: u64| WORDS[(k % WORDS.len() as u64) as usize];
                format!(
                    "{} {} {} row {}",
                    w(next()),
                    w(next()),
                    w(next()),
                    start + i
                )
            })
            .collect();
        out.push(
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Float64Array::from(a)),
                    Arc::new(Float64Array::from(b)),
                    Arc::new(StringArray::from(text)),
                ],
            )
            .unwrap(),
        );
        start += len;
    }
    out
}

fn inputs(udf: &str) -> Vec<String> {
    match udf {
        "score" => vec!["a".into(), "b".into()],
        _ => vec!["text".into()],
    }
}

fn output_type(udf: &str) -> DataType {
    match udf {
        "score" => DataType::Float64,
        _ => DataType::FixedSizeList(
            Arc::new(Field::new("item", DataType::Float32, true)),
            embed::DIM as i32,
        ),
    }
}

fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// CPU time (user + system) this process has used so far, in seconds.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}

/// Wall and CPU seconds since `(started, cpu)`.
fn since(started: Instant, cpu: f64) -> (f64, f64) {
    (started.elapsed().as_secs_f64(), cpu_secs() - cpu)
}

/// Child: lance's add_columns with the native function.
async fn run_floor(dir: &Path, udf: &str, batch: usize) -> (f64, f64) {
    let mut ds = Dataset::open(dir.to_str().unwrap()).await.unwrap();
    let native: fn(&RecordBatch) -> Result<arrow_array::ArrayRef, lancet_sdk::UdfError> = match udf
    {
        "score" => score::score,
        _ => embed::embed,
    };
    let out_schema = Arc::new(Schema::new(vec![Field::new("out", output_type(udf), true)]));
    let schema = out_schema.clone();
    let mapper = move |b: &RecordBatch| -> lance_core::Result<RecordBatch> {
        let array =
            native(b).map_err(|e| lance_core::Error::invalid_input(e.message().to_string()))?;
        Ok(RecordBatch::try_new(schema.clone(), vec![array])?)
    };
    let (started, cpu) = (Instant::now(), cpu_secs());
    ds.add_columns(
        NewColumnTransform::BatchUDF(BatchUDF {
            mapper: Box::new(mapper),
            output_schema: out_schema,
            result_checkpoint: None,
        }),
        Some(inputs(udf)),
        Some(batch as u32),
    )
    .await
    .unwrap();
    since(started, cpu)
}

fn serve_config(dir: &Path) -> lancet::config::ServeConfig {
    // A key in the auth file, so the server does not create (and print) one.
    let auth_file = dir.join("_auth/auth.toml");
    if !auth_file.exists() {
        let mut file = lancet::auth::AuthFile::default();
        file.create_key("default", lancet::auth::Role::Admin, vec![], "bench")
            .unwrap();
        file.save(&auth_file).unwrap();
    }
    let mut config = lancet::config::ServeConfig::from_args(["--addr", "127.0.0.1:0"]).unwrap();
    config.data = dir.to_string_lossy().to_string();
    config.udf_timeout_ms = 60_000;
    config.udf_max_output_mb = 256;
    config.auth_file = Some(auth_file);
    config.vector_cache_mb = 0;
    config
}

/// Child: a Lancet backfill job.
async fn run_lancet(dir: &Path, max_checkpoint: usize) -> (f64, f64) {
    let app = lancet::server::build_app(&serve_config(dir)).await.unwrap();
    let id = vec!["bench".to_string()];
    let catalog = app.tenants.catalog("default").await.unwrap();
    let location = catalog.locate(&id).await.unwrap();
    let options = lancet::jobs::kinds::backfill::BackfillOptions {
        column: "out".into(),
        max_checkpoint_size: Some(max_checkpoint as i64),
        checkpoint_size: Some(max_checkpoint.min(16_384) as i64),
        ..Default::default()
    };
    let (started, cpu) = (Instant::now(), cpu_secs());
    let job =
        lancet::jobs::kinds::backfill::submit(&app, "default", id, location, None, options, None)
            .await
            .unwrap();
    loop {
        let d = app.jobs.describe("default", &job).await.unwrap();
        match d["job_state"].as_str() {
            // Polled often: a 20 ms poll would add up to 20% to a 0.1 s job.
            Some("IN_PROGRESS") => tokio::time::sleep(Duration::from_millis(1)).await,
            Some("DONE") => break,
            _ => panic!("backfill did not finish: {d}"),
        }
    }
    since(started, cpu)
}

/// Parent: a fresh table for one run (outside the measured child).
async fn prepare(mode: &str, udf: &str, dir: &Path, n: usize) {
    let batches = data(n);
    let schema = batches[0].schema();
    if mode == "floor" {
        let reader = RecordBatchIterator::new(batches.into_iter().map(Ok), schema);
        Dataset::write(reader, dir.to_str().unwrap(), Some(WriteParams::default()))
            .await
            .unwrap();
        return;
    }
    let app = lancet::server::build_app(&serve_config(dir)).await.unwrap();
    let mut body = Vec::new();
    {
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut body, &schema).unwrap();
        for b in &batches {
            w.write(b).unwrap();
        }
        w.finish().unwrap();
    }
    let request = CreateTableRequest {
        id: Some(vec!["bench".into()]),
        ..Default::default()
    };
    let catalog = app.tenants.catalog("default").await.unwrap();
    catalog
        .ns()
        .create_table(request, bytes::Bytes::from(body))
        .await
        .unwrap();
    let location = catalog.locate(&["bench".to_string()]).await.unwrap();
    let wasm = std::fs::read(plugins_dir().join(format!("{udf}.wasm"))).unwrap();
    let packaged = lancet_udf::package(&wasm, udf, Default::default()).unwrap();
    use base64::Engine;
    let def = lancet::virtual_columns::NewVirtual {
        input_columns: inputs(udf),
        udf: Some(base64::engine::general_purpose::STANDARD.encode(&wasm)),
        manifest: Some(packaged.manifest_text),
        manifest_checksum: Some(packaged.manifest_checksum),
        ..Default::default()
    };
    app.virtual_columns
        .add(
            &app.store,
            "bench",
            &location,
            None,
            vec![("out".into(), def)],
        )
        .await
        .unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if args.get(1).map(String::as_str) == Some("child") {
        let (mode, udf, setting, dir) = (
            &args[2],
            &args[3],
            args[4].parse().unwrap(),
            Path::new(&args[5]),
        );
        let (wall, cpu) = rt.block_on(async {
            match mode.as_str() {
                "floor" => run_floor(dir, udf, setting).await,
                _ => run_lancet(dir, setting).await,
            }
        });
        println!("{wall} {} {cpu}", peak_rss_kb());
        return;
    }
    let n = rows();
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    println!(
        "backfill of {n} rows; per cell the fastest of {runs} runs (RSS: the highest), each run in a fresh process\n"
    );
    println!(
        "| UDF | max_checkpoint_size | floor rows/s | lancet rows/s | time lancet/floor | floor CPU/wall | lancet CPU/wall | floor peak RSS MiB | lancet peak RSS MiB | RSS lancet/floor |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let only = |var: &str, value: &str| {
        std::env::var(var).map_or(true, |v| v.split(',').any(|x| x == value))
    };
    for udf in UDFS.into_iter().filter(|u| only("UDFS", u)) {
        for setting in SETTINGS
            .into_iter()
            .filter(|s| only("SETTINGS", &s.to_string()))
        {
            // (wall s, cpu s of the fastest run, highest peak RSS MiB) for floor and lancet.
            let mut cell = [(f64::MAX, 0.0, 0.0f64); 2];
            for _ in 0..runs {
                for (slot, mode) in ["floor", "lancet"].into_iter().enumerate() {
                    let tmp = tempfile::tempdir().unwrap();
                    let dir = tmp.path().join("data");
                    rt.block_on(prepare(mode, udf, &dir, n));
                    let out = std::process::Command::new(std::env::current_exe().unwrap())
                        .args(["child", mode, udf, &setting.to_string()])
                        .arg(&dir)
                        .output()
                        .unwrap();
                    assert!(
                        out.status.success(),
                        "{}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    let text = String::from_utf8_lossy(&out.stdout);
                    let v: Vec<f64> = text
                        .split_whitespace()
                        .map(|x| x.parse().unwrap())
                        .collect();
                    let (wall, rss, cpu) = (v[0], v[1] / 1024.0, v[2]);
                    let c = &mut cell[slot];
                    if wall < c.0 {
                        (c.0, c.1) = (wall, cpu);
                    }
                    c.2 = c.2.max(rss);
                }
            }
            let (f, l) = (cell[0], cell[1]);
            println!(
                "| {udf} | {setting} | {:.0} | {:.0} | {:.2}x | {:.2} | {:.2} | {:.0} | {:.0} | {:.2}x |",
                n as f64 / f.0,
                n as f64 / l.0,
                l.0 / f.0,
                f.1 / f.0,
                l.1 / l.0,
                f.2,
                l.2,
                l.2 / f.2
            );
        }
    }
}
