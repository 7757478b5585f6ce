//! Hostile Python: each is contained with a clear error, and the runtime serves on.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int64Array};
use arrow_schema::DataType;
use lancet_udf::UdfError;

use crate::{batch, call, prepare, runtime, spec};

fn one_row() -> arrow_array::RecordBatch {
    batch(vec![("x", Arc::new(Int64Array::from(vec![1])) as ArrayRef)])
}

fn fails_with(source: &str, ty: DataType) -> UdfError {
    let udf = prepare(source, "f");
    call(&udf, "hostile", &one_row(), &ty).unwrap_err()
}

/// After each hostile function, an ordinary one still runs.
fn still_serving() {
    let udf = prepare("def ok(x):\n    return x + 1\n", "ok");
    let out = call(&udf, "other", &one_row(), &DataType::Int64).unwrap();
    assert_eq!(out.array.as_primitive::<Int64Type>().value(0), 2);
}

#[test]
fn an_endless_loop_hits_the_time_limit() {
    let start = Instant::now();
    let err = fails_with(
        "def f(x):\n    while True:\n        pass\n",
        DataType::Int64,
    );
    assert!(matches!(err, UdfError::Timeout { .. }), "{err}");
    assert!(start.elapsed().as_secs() < 10);
    still_serving();
}

#[test]
fn a_huge_allocation_hits_the_memory_limit() {
    // 10 GB is more than a 32-bit address space: Python itself refuses it.
    let err = fails_with(
        "def f(x):\n    return len(bytearray(10 * 1024**3))\n",
        DataType::Int64,
    );
    assert!(err.to_string().contains("OverflowError"), "{err}");
    // 1.5 GB fits the address space but not the memory cap.
    let err = fails_with(
        "def f(x):\n    return len(bytearray(1536 * 1024**2))\n",
        DataType::Int64,
    );
    assert!(
        matches!(err, UdfError::MemoryLimit { .. }) || err.to_string().contains("MemoryError"),
        "{err}"
    );
    still_serving();
}

#[test]
fn infinite_recursion_is_a_recursion_error() {
    let err = fails_with("def f(x):\n    return f(x)\n", DataType::Int64);
    assert!(err.to_string().contains("RecursionError"), "{err}");
    still_serving();
}

#[test]
fn files_sockets_processes_and_ctypes_are_refused() {
    for (source, expect) in [
        (
            "def f(x):\n    return len(open('/etc/passwd').read())\n",
            "PermissionError",
        ),
        (
            "import os\ndef f(x):\n    return len(os.listdir('/'))\n",
            "PermissionError",
        ),
        (
            "def f(x):\n    import socket\n    socket.create_connection(('127.0.0.1', 80))\n    return 1\n",
            "ModuleNotFoundError: module 'socket' is not available in Lancet's UDF sandbox",
        ),
        (
            "def f(x):\n    import ctypes\n    return 1\n",
            "ModuleNotFoundError: module 'ctypes'",
        ),
        ("import sys\ndef f(x):\n    sys.exit(3)\n", "SystemExit"),
        (
            "import time\ndef f(x):\n    return int(time.time())\n",
            "PermissionError: time.time",
        ),
        (
            "import subprocess\ndef f(x):\n    return 1\n",
            "ModuleNotFoundError: module 'subprocess'",
        ),
    ] {
        let err = match runtime().prepare_python(&spec(source, "f")) {
            Err(e) => e,
            Ok(udf) => call(&udf, "hostile", &one_row(), &DataType::Int64).unwrap_err(),
        };
        assert!(err.to_string().contains(expect), "{source}: {err}");
        still_serving();
    }
}

#[test]
fn a_stubbed_host_call_traps_and_only_that_instance_goes() {
    // datetime.now() reads the clock in C, past the runner's Python-level guards: the stubbed
    // WASI call traps. The instance is dropped; the next call gets a fresh one.
    let source = "import datetime\ndef f(x):\n    return datetime.datetime.now().year\n";
    let udf = prepare(source, "f");
    for _ in 0..2 {
        let err = call(&udf, "hostile", &one_row(), &DataType::Int64).unwrap_err();
        assert!(matches!(err, UdfError::Trap { .. }), "{err}");
    }
    still_serving();
}

#[test]
fn the_environment_is_only_what_was_bound() {
    let source = "import os\ndef f(x):\n    return ','.join(sorted(os.environ))\n";
    let mut with_env = spec(source, "f");
    with_env.env = vec![("API_TOKEN".into(), "s3cret".into())];
    let udf = runtime().prepare_python(&with_env).unwrap();
    let out = call(&udf, "t1", &one_row(), &DataType::Utf8).unwrap();
    assert_eq!(out.array.as_string::<i32>().value(0), "API_TOKEN");
    let bare = prepare(source, "f");
    let out = call(&bare, "t1", &one_row(), &DataType::Utf8).unwrap();
    assert_eq!(out.array.as_string::<i32>().value(0), "");
}

#[test]
fn a_huge_result_hits_a_limit() {
    let err = fails_with(
        "def f(x):\n    return 'x' * (200 * 1024 * 1024)\n",
        DataType::Utf8,
    );
    assert!(
        matches!(
            err,
            UdfError::MemoryLimit { .. } | UdfError::OutputTooLarge { .. }
        ) || err.to_string().contains("MemoryError"),
        "{err}"
    );
    let err = fails_with(
        "def f(x):\n    return 'x' * (20 * 1024 * 1024)\n",
        DataType::Utf8,
    );
    assert!(matches!(err, UdfError::OutputTooLarge { .. }), "{err}");
    still_serving();
}

#[test]
fn an_oversized_source_is_refused_before_the_sandbox() {
    let source = format!("x = '{}'\ndef f(x):\n    return 1\n", "a".repeat(50 << 20));
    let err = runtime().prepare_python(&spec(&source, "f")).unwrap_err();
    assert!(err.to_string().contains("limit"), "{err}");
}

#[test]
fn a_function_that_rewrites_the_runner_gets_its_output_checked() {
    // UDF code shares the interpreter with the runner: it can replace the runner's packing.
    // The host checks what comes back like any guest output.
    let source = "import lancet_runner\nfrom wit_world.imports import types as t\n\
        lancet_runner._column = lambda results, kind, failed: t.Column(kind=kind, data=b'\\x01', offsets=b'', nulls=b'')\n\
        def f(x):\n    return x\n";
    let udf = prepare(source, "f");
    let err = call(&udf, "hostile", &one_row(), &DataType::Int64).unwrap_err();
    assert!(matches!(err, UdfError::BadOutput { .. }), "{err}");
    still_serving();
}
