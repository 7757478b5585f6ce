//! The native tier against a real bubblewrap and CPython: values, warm stateful workers, and the
//! hostile suite (network, host files, writes outside /tmp, fork and memory bombs, endless
//! loops, ptrace, a pickle that runs a shell command as it loads): each contained with a clear
//! error or a harmless value, and the next call still works.
//!
//! Needs `bwrap` and a Debian `python3` (scripts/setup.sh installs both) and a Python with pip
//! to build the environment (`$LANCET_VENV/bin/python`, else `python3`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arrow_array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::DataType;
use lancet_native::{
    Code, Environments, FunctionSpec, Interpreter, Limits, Mode, NativeError, Pool, Sandbox,
    Worker, WorkerKey,
};

fn python() -> PathBuf {
    std::env::var_os("LANCET_NATIVE_PYTHON")
        .map_or_else(|| "/usr/bin/python3".into(), PathBuf::from)
}

fn bwrap() -> PathBuf {
    std::env::var_os("LANCET_BWRAP").map_or_else(|| "/usr/bin/bwrap".into(), PathBuf::from)
}

/// One environment (pyarrow, cloudpickle, numpy) for every test, built once.
fn environment() -> &'static PathBuf {
    static ENV: OnceLock<PathBuf> = OnceLock::new();
    ENV.get_or_init(|| {
        let interpreter = Interpreter::probe(&python()).expect("a python3 for the sandbox");
        let installer = std::env::var_os("LANCET_VENV")
            .map(|v| Path::new(&v).join("bin/python"))
            .filter(|p| p.exists())
            .unwrap_or_else(|| "python3".into());
        // Kept between runs: environments are named by the hash of what they hold.
        let root = std::env::temp_dir().join("lancet-native-test-envs");
        let envs = Environments::new(
            &root,
            &installer,
            interpreter.minor(),
            None,
            vec!["pyarrow".into(), "cloudpickle".into()],
        )
        .unwrap();
        envs.ensure(&["numpy".into()])
            .expect("pip installs the test environment")
    })
}

fn sandbox(limits: Limits) -> Arc<Sandbox> {
    let interpreter = Interpreter::probe(&python()).unwrap();
    Arc::new(Sandbox::new(&bwrap(), interpreter, limits).expect("bubblewrap works here"))
}

fn source(src: &str, entry: &str, mode: Mode, output: DataType) -> FunctionSpec {
    FunctionSpec {
        code: Code::Source {
            source: src.into(),
            entry: entry.into(),
        },
        mode,
        output,
        environment: vec![environment().clone()],
        env: vec![("GREETING".into(), "hello".into())],
        null_on_error: false,
        init: None,
        files: Vec::new(),
        load_only: false,
        pass_nulls: false,
    }
}

fn ints(values: &[Option<i64>]) -> RecordBatch {
    let a: ArrayRef = Arc::new(Int64Array::from(values.to_vec()));
    RecordBatch::try_from_iter([("x", a)]).unwrap()
}

fn strings(a: &ArrayRef) -> Vec<Option<String>> {
    let s = a.as_any().downcast_ref::<StringArray>().unwrap();
    (0..s.len())
        .map(|i| s.is_valid(i).then(|| s.value(i).to_string()))
        .collect()
}

/// What a one-row call of `body` (a function of `x` returning a string) answered.
fn probe(sb: &Sandbox, body: &str) -> Result<String, NativeError> {
    let src = format!("import os, socket, ctypes\ndef f(x):\n{body}\n");
    let mut w = Worker::start(sb, &source(&src, "f", Mode::Row, DataType::Utf8))?;
    let out = w.call(&ints(&[Some(1)]))?.values;
    Ok(strings(&out)[0].clone().unwrap_or_default())
}

#[test]
fn row_batch_and_numpy_functions_compute_real_values() {
    let sb = sandbox(Limits::default());
    let mut w = Worker::start(
        &sb,
        &source(
            "def double(x):\n    return x * 2\n",
            "double",
            Mode::Row,
            DataType::Int64,
        ),
    )
    .unwrap();
    assert!(
        w.python_version().starts_with("3."),
        "{}",
        w.python_version()
    );
    let out = w.call(&ints(&[Some(1), None, Some(-4)])).unwrap().values;
    let out = out.as_any().downcast_ref::<Int64Array>().unwrap();
    assert_eq!(
        out.iter().collect::<Vec<_>>(),
        vec![Some(2), None, Some(-8)]
    );

    let numpy = "import numpy as np\nimport pyarrow as pa\n\
                 def norm(x):\n    v = x.to_numpy(zero_copy_only=False).astype('float64')\n    return pa.array(np.sqrt(v))\n";
    let mut w = Worker::start(&sb, &source(numpy, "norm", Mode::Batch, DataType::Float64)).unwrap();
    let out = w.call(&ints(&[Some(4), Some(9), Some(2)])).unwrap().values;
    let out = out.as_any().downcast_ref::<Float64Array>().unwrap();
    assert_eq!(out.values().to_vec(), vec![2.0, 3.0, 2f64.sqrt()]);

    // A RecordBatch function, and the environment variables the spec gives.
    let rb = "import os\ndef f(batch):\n    return [os.environ['GREETING'] + str(v) for v in batch.column('x').to_pylist()]\n";
    let mut w = Worker::start(&sb, &source(rb, "f", Mode::RecordBatch, DataType::Utf8)).unwrap();
    let out = w.call(&ints(&[Some(1), Some(2)])).unwrap().values;
    assert_eq!(
        strings(&out),
        vec![Some("hello1".into()), Some("hello2".into())]
    );
}

#[test]
fn a_stateful_function_is_set_up_once_per_worker_and_reused() {
    let pool = Pool::new(sandbox(Limits::default()), 2, 2, 8);
    let src = "import os\nSETUPS = []\nclass Model:\n    def __init__(self):\n        SETUPS.append(os.getpid())\n        self.weight = 10\n    def __call__(self, x):\n        return x * self.weight + len(SETUPS) * 1000\n";
    let spec = source(src, "Model", Mode::Row, DataType::Int64);
    let key = WorkerKey {
        tenant: "t1".into(),
        function: "model".into(),
    };
    for _ in 0..3 {
        let out = pool
            .call(&key, &spec, &ints(&[Some(1), Some(2)]))
            .unwrap()
            .values;
        let out = out.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(out.values().to_vec(), vec![1010, 1020]);
    }
    assert_eq!(pool.idle(), 1);
    // Another tenant never gets that worker.
    let other = WorkerKey {
        tenant: "t2".into(),
        function: "model".into(),
    };
    pool.call(&other, &spec, &ints(&[Some(1)])).unwrap();
    assert_eq!(pool.idle(), 2);
    pool.forget(&key);
    assert_eq!(pool.idle(), 1);
}

#[test]
fn a_class_is_set_up_with_its_keyword_arguments_and_shipped_modules_import() {
    // A module shipped with the function (lancedb's `code=[...]`), imported by the source.
    let src = "from helpers.scale import times\nclass Scale:\n    def __init__(self, factor, offset=0):\n        self.factor, self.offset = factor, offset\n    def __call__(self, x):\n        return times(x, self.factor) + self.offset\n";
    let files = vec![
        ("helpers/__init__.py".to_string(), Vec::new()),
        (
            "helpers/scale.py".to_string(),
            b"def times(x, k):\n    return x * k\n".to_vec(),
        ),
    ];
    let mut init = serde_json::Map::new();
    init.insert("factor".into(), 7.into());
    init.insert("offset".into(), 1.into());
    let spec = FunctionSpec {
        init: Some(init),
        files: files.clone(),
        ..source(src, "Scale", Mode::Row, DataType::Int64)
    };
    let sb = sandbox(Limits::default());
    let out = Worker::start(&sb, &spec)
        .unwrap()
        .call(&ints(&[Some(2), None, Some(3)]))
        .unwrap()
        .values;
    let out = out.as_any().downcast_ref::<Int64Array>().unwrap();
    assert_eq!(
        out.iter().collect::<Vec<_>>(),
        vec![Some(15), None, Some(22)]
    );

    // Loaded only (a check before a function is stored): the class is not set up (it would
    // need its arguments), and the worker says what its calls take.
    let check = FunctionSpec {
        init: None,
        load_only: true,
        ..spec.clone()
    };
    let worker = Worker::start(&sb, &check).unwrap();
    assert_eq!(worker.params(), ["x"]);
    assert_eq!(worker.required_params(), 1);
    assert!(worker.python_version().starts_with("3."));

    // A function that takes nulls is called with None for them.
    let takes_nulls = FunctionSpec {
        pass_nulls: true,
        ..source(
            "def f(x):\n    return -1 if x is None else x\n",
            "f",
            Mode::Row,
            DataType::Int64,
        )
    };
    let out = Worker::start(&sb, &takes_nulls)
        .unwrap()
        .call(&ints(&[Some(4), None]))
        .unwrap()
        .values;
    let out = out.as_any().downcast_ref::<Int64Array>().unwrap();
    assert_eq!(out.iter().collect::<Vec<_>>(), vec![Some(4), Some(-1)]);

    // A shipped path may not leave its directory.
    let escaping = FunctionSpec {
        files: vec![("../../etc/evil.py".to_string(), b"x = 1".to_vec())],
        ..spec
    };
    match Worker::start(&sb, &escaping) {
        Err(NativeError::Load(m)) => assert!(m.contains("outside its directory"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_raising_function_names_its_row_and_the_worker_lives_on() {
    let pool = Pool::new(sandbox(Limits::default()), 2, 2, 8);
    let spec = source(
        "def f(x):\n    return 10 // x\n",
        "f",
        Mode::Row,
        DataType::Int64,
    );
    let key = WorkerKey {
        tenant: "t".into(),
        function: "f".into(),
    };
    match pool.call(&key, &spec, &ints(&[Some(5), Some(0)])) {
        Err(NativeError::Guest {
            row: Some(1),
            message,
        }) => {
            assert!(message.contains("ZeroDivisionError"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(pool.idle(), 1);
    // Or, asked for, the raising row becomes null and is counted.
    let nulling = FunctionSpec {
        null_on_error: true,
        ..spec.clone()
    };
    let out = Worker::start(pool.sandbox(), &nulling)
        .unwrap()
        .call(&ints(&[Some(5), Some(0), Some(2)]))
        .unwrap();
    assert_eq!(out.nulled, 1);
    assert_eq!(out.failures.len(), 1);
    assert_eq!(out.failures[0].0, 1);
    assert!(
        out.failures[0].1.starts_with("ZeroDivisionError"),
        "{:?}",
        out.failures
    );
    let v = out.values.as_any().downcast_ref::<Int64Array>().unwrap();
    assert_eq!(v.iter().collect::<Vec<_>>(), vec![Some(2), None, Some(5)]);
    // A result of the wrong type is refused by the worker's cast, not stored.
    let bad = source(
        "def f(x):\n    return 'text'\n",
        "f",
        Mode::Row,
        DataType::Int64,
    );
    assert!(
        Worker::start(pool.sandbox(), &bad)
            .unwrap()
            .call(&ints(&[Some(1)]))
            .is_err()
    );
    // A function that is not there, or a syntax error, fails the start with Python's words.
    let missing = source("def g(x):\n    return x\n", "f", Mode::Row, DataType::Int64);
    let err = Worker::start(pool.sandbox(), &missing)
        .unwrap_err()
        .to_string();
    assert!(err.contains("defines no 'f'"), "{err}");
    let broken = source("def f(x) return x\n", "f", Mode::Row, DataType::Int64);
    let err = Worker::start(pool.sandbox(), &broken)
        .unwrap_err()
        .to_string();
    assert!(err.contains("SyntaxError"), "{err}");
}

#[test]
fn batches_of_a_new_schema_are_read_with_it_even_after_a_failed_call() {
    // After a schema's first batch, its batches travel without it; a call with another schema
    // that fails must not leave the two sides disagreeing about which schema is current.
    let spec = source(
        "import pyarrow as pa\nimport pyarrow.compute as pc\ndef f(x):\n    \
         if pa.types.is_floating(x.type):\n        raise ValueError('no floats')\n    \
         return pc.add(x, 1)\n",
        "f",
        Mode::Batch,
        DataType::Int64,
    );
    let sb = sandbox(Limits::default());
    let mut w = Worker::start(&sb, &spec).unwrap();
    // x + 1, each batch holding a null too (so all have one schema: a batch without nulls
    // has a non-nullable field).
    fn plus_one(w: &mut Worker, x: i64) {
        let out = w.call(&ints(&[Some(x), None])).unwrap();
        let v = out.values.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(v.iter().collect::<Vec<_>>(), vec![Some(x + 1), None]);
    }
    plus_one(&mut w, 1);
    plus_one(&mut w, 5);
    let floats: ArrayRef = Arc::new(Float64Array::from(vec![Some(1.5), None]));
    let other = RecordBatch::try_from_iter([("x", floats)]).unwrap();
    match w.call(&other) {
        Err(NativeError::Guest { message, .. }) => assert!(message.contains("no floats")),
        other => panic!("{other:?}"),
    }
    plus_one(&mut w, 7);
    plus_one(&mut w, 9);
}

#[test]
fn no_network_no_host_files_no_writes_outside_tmp() {
    let sb = sandbox(Limits::default());
    let secret = std::env::temp_dir().join(format!("lancet-secret-{}", std::process::id()));
    std::fs::write(&secret, "secret").unwrap();
    let net = probe(&sb, "    s = socket.socket()\n    try:\n        s.connect(('1.1.1.1', 80))\n        return 'connected'\n    except OSError as e:\n        return str(e)").unwrap();
    assert!(net.contains("unreachable"), "{net}");
    // A port the host listens on: reachable from outside the sandbox, not from inside.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let lo = probe(&sb, &format!("    s = socket.socket()\n    try:\n        s.connect(('127.0.0.1', {port}))\n        return 'connected'\n    except OSError as e:\n        return type(e).__name__")).unwrap();
    assert_eq!(lo, "ConnectionRefusedError");
    drop(listener);
    for path in [
        "/etc/shadow",
        "/etc/passwd",
        "/root",
        secret.to_str().unwrap(),
        "/proc/1/environ",
    ] {
        let got = probe(&sb, &format!("    try:\n        return 'read: ' + open({path:?}).read(100)\n    except OSError as e:\n        return type(e).__name__")).unwrap();
        assert!(
            !got.starts_with("read: ") || path == "/proc/1/environ",
            "{path}: {got}"
        );
        assert!(!got.contains("secret"), "{path}: {got}");
    }
    for path in ["/usr/lancet-x", "/env/0/x", "/lancet/x", "/x"] {
        let got = probe(&sb, &format!("    try:\n        open({path:?}, 'w').write('x')\n        return 'wrote'\n    except OSError as e:\n        return type(e).__name__")).unwrap();
        assert_ne!(got, "wrote", "{path}");
    }
    // The private /tmp takes writes, and they stay inside.
    let got = probe(
        &sb,
        "    open('/tmp/mine', 'w').write('x')\n    return open('/tmp/mine').read()",
    )
    .unwrap();
    assert_eq!(got, "x");
    let _ = std::fs::remove_file(secret);
}

#[test]
fn a_worker_shares_memory_with_the_host_only() {
    // Two workers of one sandbox: each maps a memory file of its own, and holds no other
    // (the other's is close-on-exec in the host, never inherited).
    let sb = sandbox(Limits::default());
    let src = "import os\ndef f(x):\n    files = set()\n    \
               for d in os.listdir('/proc/self/fd'):\n        try:\n            \
               if os.readlink('/proc/self/fd/' + d).startswith('/memfd:'):\n                \
               files.add(os.fstat(int(d)).st_ino)\n        except OSError:\n            \
               pass\n    return str(len(files))\n";
    let spec = source(src, "f", Mode::Row, DataType::Utf8);
    // Sealed at its size: the worker can neither grow it (memory the host keeps) nor shrink
    // it under the host's reads.
    let resize = source(
        "import os\ndef f(x):\n    out = []\n    for d in os.listdir('/proc/self/fd'):\n        try:\n            \
         if os.readlink('/proc/self/fd/' + d).startswith('/memfd:'):\n                \
         n = os.fstat(int(d)).st_size\n                for size in (n + 4096, n // 2):\n                    try:\n                        \
         os.ftruncate(int(d), size)\n                        out.append('resized')\n                    \
         except OSError as e:\n                        out.append(type(e).__name__)\n        \
         except OSError:\n            pass\n    return ','.join(sorted(set(out)))\n",
        "f",
        Mode::Row,
        DataType::Utf8,
    );
    let mut w = Worker::start(&sb, &resize).unwrap();
    let out = w.call(&ints(&[Some(1)])).unwrap().values;
    assert_eq!(strings(&out), vec![Some("PermissionError".to_string())]);
    let mut first = Worker::start(&sb, &spec).unwrap();
    let mut second = Worker::start(&sb, &spec).unwrap();
    for w in [&mut first, &mut second] {
        assert!(w.shared_memory());
        let out = w.call(&ints(&[Some(1)])).unwrap().values;
        assert_eq!(strings(&out), vec![Some("1".to_string())]);
    }
    // Without it (slot size 0) everything goes through the pipes, with the same values.
    let pipes = sandbox(Limits {
        shared_slot_bytes: 0,
        ..Limits::default()
    });
    let mut w = Worker::start(&pipes, &spec).unwrap();
    assert!(!w.shared_memory());
    let out = w.call(&ints(&[Some(1)])).unwrap().values;
    assert_eq!(strings(&out), vec![Some("0".to_string())]);
}

#[test]
fn ptrace_and_namespaces_are_refused_by_seccomp() {
    let sb = sandbox(Limits::default());
    // PTRACE_TRACEME on itself: EPERM (1) from the filter.
    let got = probe(&sb, "    libc = ctypes.CDLL(None, use_errno=True)\n    r = libc.ptrace(0, 0, 0, 0)\n    return f'{r} {ctypes.get_errno()}'").unwrap();
    assert_eq!(got, "-1 1");
    // unshare(CLONE_NEWNET): EPERM too.
    let got = probe(&sb, "    libc = ctypes.CDLL(None, use_errno=True)\n    r = libc.unshare(0x40000000)\n    return f'{r} {ctypes.get_errno()}'").unwrap();
    assert_eq!(got, "-1 1");
}

#[test]
fn fork_and_memory_bombs_are_contained() {
    let limits = Limits {
        processes: 32,
        memory_bytes: 1 << 30,
        ..Limits::default()
    };
    let sb = sandbox(limits);
    let got = probe(&sb, "    n = 0\n    try:\n        while n < 300:\n            if os.fork() == 0:\n                import time\n                time.sleep(30)\n                os._exit(0)\n            n += 1\n    except OSError as e:\n        return f'stopped after {n}: {type(e).__name__}'\n    return f'forked {n}'").unwrap();
    // The process limit needs a uid per worker, which only a root server can give.
    if is_root() {
        assert!(got.starts_with("stopped after"), "{got}");
    }
    let got = probe(&sb, "    try:\n        b = bytearray(8 << 30)\n        return 'allocated'\n    except MemoryError:\n        return 'MemoryError'").unwrap();
    assert_eq!(got, "MemoryError");
    // The sandbox still starts workers afterwards.
    assert_eq!(probe(&sb, "    return 'fine'").unwrap(), "fine");
}

#[test]
fn an_endless_function_is_stopped_by_the_wall_clock_or_cpu_limit() {
    let limits = Limits {
        call_timeout: Duration::from_secs(2),
        ..Limits::default()
    };
    let sb = sandbox(limits);
    let started = std::time::Instant::now();
    match probe(&sb, "    while True:\n        pass") {
        Err(NativeError::Timeout(d)) => assert_eq!(d, Duration::from_secs(2)),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(20));
    let limits = Limits {
        cpu_seconds: 1,
        call_timeout: Duration::from_secs(60),
        ..Limits::default()
    };
    let sb = sandbox(limits);
    match probe(&sb, "    while True:\n        pass") {
        Err(e @ NativeError::Killed { .. }) => assert!(e.to_string().contains("died"), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_pickle_that_runs_a_shell_command_as_it_loads_stays_inside() {
    let sb = sandbox(Limits::default());
    let marker = std::env::temp_dir().join(format!("lancet-pwned-{}", std::process::id()));
    let cmd = format!(
        "echo pwned > {} ; cat /etc/shadow > /tmp/shadow",
        marker.display()
    );
    let pickle = format!("cos\nsystem\n(S'{cmd}'\ntR.");
    let spec = FunctionSpec {
        code: Code::Pickle {
            bytes: pickle.into_bytes(),
        },
        mode: Mode::Row,
        output: DataType::Int64,
        environment: vec![environment().clone()],
        env: vec![],
        null_on_error: false,
        init: None,
        files: Vec::new(),
        load_only: false,
        pass_nulls: false,
    };
    // os.system's answer is an int, not a function: the load fails, and nothing reached the host.
    let err = Worker::start(&sb, &spec).unwrap_err().to_string();
    assert!(err.contains("not callable"), "{err}");
    assert!(!marker.exists(), "the pickle wrote on the host");
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

#[test]
fn a_tenant_runs_at_most_its_share_of_batches_at_once() {
    // One slot: three concurrent calls run one after another in one warm worker; without the
    // limit they would start three sandboxes (all kept idle here: up to 4 per function).
    let pool = Arc::new(Pool::new(sandbox(Limits::default()), 1, 4, 8));
    let spec = source(
        "import time\ndef f(x):\n    time.sleep(0.3)\n    return x\n",
        "f",
        Mode::Row,
        DataType::Int64,
    );
    let key = WorkerKey {
        tenant: "flood".into(),
        function: "f".into(),
    };
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let (pool, spec, key) = (pool.clone(), spec.clone(), key.clone());
            std::thread::spawn(move || pool.call(&key, &spec, &ints(&[Some(1)])).unwrap())
        })
        .collect();
    for c in calls {
        c.join().unwrap();
    }
    assert_eq!(pool.idle(), 1);
}

#[test]
fn a_worker_forging_protocol_frames_is_refused_and_replaced() {
    let pool = Pool::new(sandbox(Limits::default()), 2, 2, 8);
    let key = WorkerKey {
        tenant: "t".into(),
        function: "forger".into(),
    };
    // Its code writes to the protocol pipe itself: a frame claiming ~4 GiB, then garbage
    // that is no Arrow stream. Neither is allocated or decoded on trust.
    for (payload, words) in [
        ("struct.pack('<cI', b'O', 0xFFFFFFF0)", "over the"),
        (
            "struct.pack('<cI', b'O', 12) + b'\\xff' * 12",
            "not a readable Arrow IPC stream",
        ),
        // Results in the shared memory file: a slot that is not a result slot, a length
        // beyond a slot, garbage in a real result slot.
        (
            "struct.pack('<cI', b'v', 8) + struct.pack('<II', 0, 16)",
            "shared slot 0 with 16 bytes",
        ),
        (
            "struct.pack('<cI', b'v', 8) + struct.pack('<II', __main__.WAYS, 1 << 30)",
            "with 1073741824 bytes",
        ),
        (
            "(__main__.SHM.__setitem__(slice(__main__.WAYS * __main__.SLOT,              __main__.WAYS * __main__.SLOT + 12), b'\\xff' * 12),              struct.pack('<cI', b'v', 8) + struct.pack('<II', __main__.WAYS, 12))[1]",
            "not a readable Arrow IPC stream",
        ),
    ] {
        let src = format!(
            "import __main__, struct, time\ndef f(x):\n    __main__.OUT.write({payload})\n    time.sleep(30)\n"
        );
        let spec = source(&src, "f", Mode::Row, DataType::Int64);
        match pool.call(&key, &spec, &ints(&[Some(1)])) {
            Err(e @ NativeError::Result(_)) => assert!(e.to_string().contains(words), "{e}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            pool.idle(),
            0,
            "a worker that broke the protocol is not kept"
        );
    }
    let honest = source(
        "def f(x):\n    return x + 1\n",
        "f",
        Mode::Row,
        DataType::Int64,
    );
    let out = pool.call(&key, &honest, &ints(&[Some(1)])).unwrap().values;
    assert_eq!(
        out.as_any().downcast_ref::<Int64Array>().unwrap().value(0),
        2
    );
}

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
