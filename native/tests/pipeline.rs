//! Pipelined calls against a real bubblewrap and CPython: order, a raising batch, a worker that
//! dies or never loads, a long pipeline yielding its tenant slot and renewing its worker.

mod common;

use common::*;

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow_schema::DataType;
use lancet_native::{Limits, Mode, NativeError, Pool, WorkerKey};

/// `x * 2` of every value, or the error.
fn doubled(answer: Result<lancet_native::CallOutput, NativeError>) -> Result<Vec<i64>, String> {
    let out = answer.map_err(|e| e.to_string())?;
    let v = out.values.as_any().downcast_ref::<Int64Array>().unwrap();
    Ok(v.values().to_vec())
}

/// Waits (up to 10 s) until `pool` holds `n` idle workers.
fn idle_becomes(pool: &Pool, n: usize) -> bool {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while pool.idle() != n && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    pool.idle() == n
}

#[test]
fn a_pipeline_computes_batches_in_order_and_a_raising_one_does_not_stop_the_rest() {
    let pool = Arc::new(Pool::new(sandbox(Limits::default()), 1, 4, 8));
    let key = WorkerKey {
        tenant: "t".into(),
        function: "double".into(),
    };
    let spec = source(
        "import pyarrow.compute as pc\ndef f(x):\n    \
         if pc.all(pc.equal(x, 13)).as_py():\n        raise ValueError('13 is unlucky')\n    \
         return pc.multiply(x, 2)\n",
        "f",
        Mode::Batch,
        DataType::Int64,
    );
    let pipeline = pool.pipeline(&key, move || Ok(spec)).unwrap();
    // Small batches and ones larger than a pipe's buffer both ways (300,000 int64 values:
    // 2.4 MB), several in flight at once.
    let sizes = [3usize, 300_000, 5, 300_000, 1, 7];
    let batches: Vec<RecordBatch> = sizes
        .iter()
        .enumerate()
        .map(|(b, &n)| {
            let a: ArrayRef = Arc::new(Int64Array::from_iter_values(
                (0..n as i64).map(|i| if b == 2 { 13 } else { i + b as i64 }),
            ));
            RecordBatch::try_from_iter([("x", a)]).unwrap()
        })
        .collect();
    let pending: Vec<_> = batches.iter().map(|b| pipeline.submit(b.clone())).collect();
    for (b, (answer, &n)) in pending.into_iter().zip(&sizes).enumerate() {
        let got = doubled(answer.wait());
        if b == 2 {
            let err = got.unwrap_err();
            assert!(err.contains("ValueError: 13 is unlucky"), "{err}");
            continue;
        }
        let want: Vec<i64> = (0..n as i64).map(|i| (i + b as i64) * 2).collect();
        assert_eq!(got.unwrap(), want, "batch {b}");
    }
    // Dropped, it hands its worker back warm, and frees the tenant's one slot.
    drop(pipeline);
    assert!(idle_becomes(&pool, 1), "the worker went back to the pool");
    let spec = source("def f(x):\n    return x\n", "f", Mode::Row, DataType::Int64);
    let again = pool.call(&key, &spec, &ints(&[Some(4)])).unwrap();
    assert_eq!(
        doubled(Ok(again)).unwrap(),
        vec![8],
        "the warm worker, reused"
    );
}

#[test]
fn a_pipeline_reports_a_worker_that_dies_or_never_loads_and_starts_none_unasked() {
    let pool = Arc::new(Pool::new(sandbox(Limits::default()), 1, 4, 8));
    let key = |f: &str| WorkerKey {
        tenant: "t".into(),
        function: f.into(),
    };
    // Dies at the second batch: that one and every later one say so; nothing returns to the
    // pool.
    let spec = source(
        "import os\ndef f(x):\n    if x == 13:\n        os._exit(3)\n    return x * 2\n",
        "f",
        Mode::Row,
        DataType::Int64,
    );
    let pipeline = pool.pipeline(&key("dies"), move || Ok(spec)).unwrap();
    let answers: Vec<_> = [1, 13, 2, 3]
        .map(|x| pipeline.submit(ints(&[Some(x)])))
        .into_iter()
        .map(|p| doubled(p.wait()))
        .collect();
    assert_eq!(answers[0], Ok(vec![2]));
    let died = answers[1].as_ref().unwrap_err();
    assert!(died.contains("worker died"), "{died}");
    for later in &answers[2..] {
        let e = later.as_ref().unwrap_err();
        assert!(e.contains("at an earlier batch"), "{e}");
    }
    drop(pipeline);
    // A function that does not load: every batch answers why.
    let broken = source("def f(x) return x\n", "f", Mode::Row, DataType::Int64);
    let pipeline = pool.pipeline(&key("broken"), move || Ok(broken)).unwrap();
    let answers: Vec<_> = (0..3).map(|x| pipeline.submit(ints(&[Some(x)]))).collect();
    for a in answers {
        let e = doubled(a.wait()).unwrap_err();
        assert!(e.contains("SyntaxError"), "{e}");
    }
    drop(pipeline);
    // Never given a batch: no spec made, no worker started (the slot is free for a call).
    let asked = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = asked.clone();
    let unused = pool
        .pipeline(&key("unused"), move || {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            Err(NativeError::Load("not wanted".into()))
        })
        .unwrap();
    drop(unused);
    std::thread::sleep(Duration::from_millis(200));
    assert!(!asked.load(std::sync::atomic::Ordering::SeqCst));
    let spec = source(
        "def f(x):\n    return x + 1\n",
        "f",
        Mode::Row,
        DataType::Int64,
    );
    let out = pool.call(&key("after"), &spec, &ints(&[Some(1)])).unwrap();
    assert_eq!(doubled(Ok(out)).unwrap(), vec![2]);
    assert!(idle_becomes(&pool, 1));
}

#[test]
fn a_long_pipeline_gives_its_slot_to_a_waiting_call_of_its_tenant() {
    // One slot for the tenant: a backfill-like pipeline of 20 slow batches holds it; a call of
    // the same tenant (an insert's) gets it while the pipeline still has batches to run,
    // rather than after all of them.
    let pool = Arc::new(Pool::new(sandbox(Limits::default()), 1, 4, 8));
    let key = |f: &str| WorkerKey {
        tenant: "t".into(),
        function: f.into(),
    };
    let slow = source(
        "import time\ndef f(x):\n    time.sleep(0.2)\n    return x * 2\n",
        "f",
        Mode::Row,
        DataType::Int64,
    );
    let pipeline = pool.pipeline(&key("slow"), move || Ok(slow)).unwrap();
    let pending: Vec<_> = (0..20).map(|x| pipeline.submit(ints(&[Some(x)]))).collect();
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let call = {
        let (pool, answered) = (pool.clone(), answered.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let quick = source(
                "def f(x):\n    return x + 1\n",
                "f",
                Mode::Row,
                DataType::Int64,
            );
            let out = pool.call(&key("quick"), &quick, &ints(&[Some(1)])).unwrap();
            (
                doubled(Ok(out)).unwrap(),
                answered.load(std::sync::atomic::Ordering::SeqCst),
            )
        })
    };
    for (x, p) in pending.into_iter().enumerate() {
        assert_eq!(doubled(p.wait()).unwrap(), vec![2 * x as i64]);
        answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    drop(pipeline);
    let (value, pipeline_answers_then) = call.join().unwrap();
    assert_eq!(value, vec![2]);
    assert!(
        pipeline_answers_then < 20,
        "the call waited for the whole pipeline ({pipeline_answers_then} answers)"
    );
}

#[test]
fn a_long_pipeline_replaces_its_worker_before_the_cpu_limit_could_end_it() {
    // CPU limit 2 s: workers are retired at 1 s of age. A pipeline of batches spanning ~3 s
    // changes workers between batches (each loads the function anew: a token of its own) and
    // every batch is answered.
    let pool = Arc::new(Pool::new(
        sandbox(Limits {
            cpu_seconds: 2,
            ..Limits::default()
        }),
        1,
        4,
        8,
    ));
    let key = WorkerKey {
        tenant: "t".into(),
        function: "token".into(),
    };
    let spec = source(
        "import os, time\nTOKEN = os.urandom(8).hex()\ndef f(x):\n    time.sleep(0.25)\n    \
         return TOKEN\n",
        "f",
        Mode::Row,
        DataType::Utf8,
    );
    let pipeline = pool.pipeline(&key, move || Ok(spec)).unwrap();
    let pending: Vec<_> = (0..12).map(|x| pipeline.submit(ints(&[Some(x)]))).collect();
    let tokens: std::collections::HashSet<String> = pending
        .into_iter()
        .map(|p| strings(&p.wait().unwrap().values)[0].clone().unwrap())
        .collect();
    assert!(tokens.len() >= 2, "one worker for ~3 s: {tokens:?}");
}
