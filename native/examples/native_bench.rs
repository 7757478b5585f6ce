//! Speed of the native tier against the same CPython outside the sandbox, in one run: a
//! worker's cold start (sandbox + interpreter + pyarrow import + load), then a row-at-a-time
//! function and two pyarrow batch functions (arithmetic, string work) over the same rows, in
//! the same batches, both ways (the fastest of several passes), and the fixed cost of one call
//! (a function returning its input). The sandboxed side runs twice: one call at a time, and
//! pipelined (the next batch written while the worker computes, as a backfill drives it).
//! Beside them, the floor of any worker that takes Arrow IPC through shared memory: its own
//! steps per batch timed in-process, with no sandbox, host or pipe (see [`outside`]).
//! Prints numbers; asserts nothing.
//!
//! `cargo run --release -p lancet-native --example native_bench [rows] [batch]` (default
//! 1,000,000 rows in batches of 8,192; a backfill's calls grow to 16,384 rows by default).
//! Needs bwrap, /usr/bin/python3 and a Python with pip (`$LANCET_VENV/bin/python`, else
//! `python3`) to build the pyarrow environment.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::DataType;
use lancet_native::{
    CallOutput, Code, Environments, FunctionSpec, Interpreter, Limits, Mode, Pending, Pipeline,
    Sandbox, Worker,
};

const ROW_FN: &str = "def f(x):\n    return x * 2 + 1\n";
/// Timed passes over the rows, each way; the fastest is reported (this machine's noise only adds).
const PASSES: usize = 9;
/// Batches in flight in the pipelined passes (as a backfill keeps them).
const WINDOW: usize = Pipeline::DEPTH;
const BATCH_FN: &str =
    "import pyarrow.compute as pc\ndef f(x):\n    return pc.add(pc.multiply(x, 2), 1)\n";
/// A batch function doing string work per value (format, upper-case, measure): costlier per
/// row than the arithmetic one, as most real batch UDFs are.
const STRING_FN: &str = "import pyarrow as pa\nimport pyarrow.compute as pc\ndef f(x):\n    \
    s = pc.utf8_upper(pc.binary_join_element_wise(pc.cast(x, pa.string()), 'row-', '-'))\n    \
    return pc.cast(pc.add(pc.utf8_length(s), pc.count_substring(s, '1')), pa.int64())\n";

fn main() {
    let rows: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let batch: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(8192);
    let python = PathBuf::from("/usr/bin/python3");
    let interpreter = Interpreter::probe(&python).expect("python3");
    let installer = std::env::var_os("LANCET_VENV")
        .map(|v| Path::new(&v).join("bin/python"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| "python3".into());
    let root = std::env::temp_dir().join("lancet-native-bench-envs");
    let envs = Environments::new(
        &root,
        &installer,
        interpreter.minor(),
        None,
        vec!["pyarrow".into()],
    )
    .expect("environments");
    let env = envs.ensure(&[]).expect("pip installs pyarrow");
    let sandbox = Arc::new(
        Sandbox::new(Path::new("/usr/bin/bwrap"), interpreter, Limits::default()).unwrap(),
    );
    let spec = |src: &str, mode| FunctionSpec {
        code: Code::Source {
            source: src.into(),
            entry: "f".into(),
        },
        mode,
        output: DataType::Int64,
        environment: vec![env.clone()],
        env: vec![],
        null_on_error: false,
        init: None,
        files: Vec::new(),
        load_only: false,
        pass_nulls: false,
    };

    let mut starts = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let w = Worker::start(&sandbox, &spec(ROW_FN, Mode::Row)).unwrap();
        starts.push(t.elapsed().as_secs_f64() * 1000.0);
        drop(w);
    }
    starts.sort_by(f64::total_cmp);
    println!(
        "worker cold start (sandbox + CPython + pyarrow + load), median of 5: {:.0} ms",
        starts[2]
    );

    let batches: Vec<RecordBatch> = (0..rows)
        .step_by(batch)
        .map(|start| {
            let n = batch.min(rows - start);
            let a: ArrayRef = Arc::new(Int64Array::from_iter_values(
                (start..start + n).map(|i| (i % 1000) as i64),
            ));
            RecordBatch::try_from_iter([("x", a)]).unwrap()
        })
        .collect();
    // Before and after, in one run: the worker's pipes alone (as before shared memory), and
    // with the shared memory file (the default).
    let pipes_only = Arc::new(
        Sandbox::new(
            Path::new("/usr/bin/bwrap"),
            Interpreter::probe(&python).unwrap(),
            Limits {
                shared_slot_bytes: 0,
                ..Limits::default()
            },
        )
        .unwrap(),
    );
    for (name, src, mode) in [
        ("row", ROW_FN, Mode::Row),
        ("batch", BATCH_FN, Mode::Batch),
        ("string batch", STRING_FN, Mode::Batch),
        ("identity", "def f(x):\n    return x\n", Mode::Batch),
    ] {
        // `NATIVE_BENCH_ONLY=batch` runs one function (for a profiler).
        if std::env::var("NATIVE_BENCH_ONLY").is_ok_and(|only| only != name) {
            continue;
        }
        let f = spec(src, mode);
        let [p1, pp] = measure(&pipes_only, &f, &batches, false);
        let [s1, sp] = measure(&sandbox, &f, &batches, true);
        let per_call = |t: f64| t * 1e6 / batches.len() as f64;
        if name == "identity" {
            println!(
                "per-call cost (identity function, {batch}-row int64 batches), us: pipes one at a time {:.0}, pipes pipelined {:.0}, shared memory one at a time {:.0}, shared memory pipelined {:.0}",
                per_call(p1),
                per_call(pp),
                per_call(s1),
                per_call(sp),
            );
            continue;
        }
        let [outside, floor] = outside(&python, &env, src, mode == Mode::Row, rows, batch);
        let ns = |t: f64| t * 1e9 / rows as f64;
        println!(
            "{name} function, {rows} rows in {batch}-row batches: CPython outside {:.0} ns/row; a worker's own steps in-process (no sandbox, no host) {:.0} ({:.2}x); sandboxed ns/row (throughput vs outside): pipes one at a time {:.0} ({:.2}x), pipes pipelined {:.0} ({:.2}x), shared memory one at a time {:.0} ({:.2}x), shared memory pipelined {:.0} ({:.2}x)",
            ns(outside),
            ns(floor),
            outside / floor,
            ns(p1),
            outside / p1,
            ns(pp),
            outside / pp,
            ns(s1),
            outside / s1,
            ns(sp),
            outside / sp,
        );
    }
}

/// The fastest of [`PASSES`] passes over `batches` in a worker of `sandbox`: one call at a
/// time (the host waits for each answer before it sends the next batch), then pipelined as a
/// backfill drives a native column (the next batch written while the worker computes the
/// last, at most [`WINDOW`] in flight). Results are checked against the first pass.
fn measure(sandbox: &Sandbox, spec: &FunctionSpec, batches: &[RecordBatch], shm: bool) -> [f64; 2] {
    let mut w = Worker::start(sandbox, spec).unwrap();
    assert_eq!(w.shared_memory(), shm, "shared memory as asked");
    let first = |out: CallOutput| {
        out.values
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .value(0)
    };
    let want: Vec<i64> = batches.iter().map(|b| first(w.call(b).unwrap())).collect();
    let fastest = |passes: &mut Vec<f64>| {
        passes.sort_by(f64::total_cmp);
        passes[0]
    };
    let mut one_at_a_time: Vec<f64> = (0..PASSES)
        .map(|_| {
            let t = Instant::now();
            for (b, want) in batches.iter().zip(&want) {
                assert_eq!(first(w.call(b).unwrap()), *want);
            }
            t.elapsed().as_secs_f64()
        })
        .collect();
    let (back, returned) = std::sync::mpsc::channel();
    let pipeline = Pipeline::start(w, move |w| back.send(w).unwrap()).unwrap();
    let mut pipelined: Vec<f64> = (0..PASSES)
        .map(|_| {
            let t = Instant::now();
            let mut pending = std::collections::VecDeque::new();
            let mut got = Vec::with_capacity(batches.len());
            for b in batches {
                if pending.len() == WINDOW {
                    got.push(first(
                        pending.pop_front().map(Pending::wait).unwrap().unwrap(),
                    ));
                }
                pending.push_back(pipeline.submit(b.clone()));
            }
            got.extend(pending.into_iter().map(|p| first(p.wait().unwrap())));
            let took = t.elapsed().as_secs_f64();
            assert_eq!(got, want);
            took
        })
        .collect();
    drop(pipeline);
    assert!(returned.recv().unwrap().is_some(), "the worker survives");
    [fastest(&mut one_at_a_time), fastest(&mut pipelined)]
}

/// Seconds the same CPython takes for the same work in-process (no sandbox, no IPC): per batch,
/// Python values out, the function, an int64 array back (row); or the function on the array.
/// Second, the floor of any worker fed Arrow IPC through shared memory: the same CPython, no
/// sandbox, no host, no pipes, timing only a worker's own steps per batch (copy the message
/// out of a memory file, read it, the function, serialize the result, copy it into the file),
/// the messages having been put there untimed.
fn outside(python: &Path, env: &Path, src: &str, row: bool, rows: usize, batch: usize) -> [f64; 2] {
    let script = format!(
        "import sys, time, mmap, os\nsys.path.insert(0, {env:?})\nimport pyarrow as pa\n{src}\n\
         batches = [pa.array([i % 1000 for i in range(s, min(s + {batch}, {rows}))], pa.int64()) for s in range(0, {rows}, {batch})]\n\
         def run(b):\n\
         \x20   return pa.array([None if v is None else f(v) for v in b.to_pylist()], pa.int64()) if {row} else f(b)\n\
         passes = []\n\
         for _ in range({PASSES}):\n\
         \x20   t = time.perf_counter()\n\
         \x20   for b in batches:\n\
         \x20       out = run(b)\n\
         \x20   passes.append(time.perf_counter() - t)\n\
         print(min(passes))\n\
         schema = pa.schema([('x', pa.int64())])\n\
         out_schema = pa.schema([('out', pa.int64())])\n\
         msgs = [pa.RecordBatch.from_arrays([b], schema=schema).serialize() for b in batches]\n\
         slot = max(m.size for m in msgs) * 2\n\
         fd = os.memfd_create('bench')\n\
         os.ftruncate(fd, 8 * slot)\n\
         shm = memoryview(mmap.mmap(fd, 8 * slot))\n\
         passes = []\n\
         for _ in range({PASSES}):\n\
         \x20   took = 0.0\n\
         \x20   for i, m in enumerate(msgs):\n\
         \x20       at = i % 4 * slot\n\
         \x20       shm[at:at + m.size] = memoryview(m).cast('B')\n\
         \x20       t = time.perf_counter()\n\
         \x20       b = pa.ipc.read_record_batch(pa.py_buffer(bytearray(shm[at:at + m.size])), schema)\n\
         \x20       data = pa.RecordBatch.from_arrays([run(b.column(0))], schema=out_schema).serialize()\n\
         \x20       back = (4 + i % 4) * slot\n\
         \x20       shm[back:back + data.size] = memoryview(data).cast('B')\n\
         \x20       took += time.perf_counter() - t\n\
         \x20   passes.append(took)\n\
         print(min(passes))\n",
        env = env.display().to_string(),
        row = if row { "True" } else { "False" },
    );
    let out = Command::new(python)
        .args(["-S", "-E", "-s", "-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut seconds = text.lines().map(|l| l.trim().parse::<f64>().unwrap());
    [seconds.next().unwrap(), seconds.next().unwrap()]
}
