//! The native tier against a real bubblewrap and CPython: values, warm stateful workers, and the
//! hostile suite (network, host files, writes outside /tmp, fork and memory bombs, endless
//! loops, ptrace, a pickle that runs a shell command as it loads): each contained with a clear
//! error or a harmless value, and the next call still works.
//!
//! Needs `bwrap` and a Debian `python3` (scripts/setup.sh installs both) and a Python with pip
//! to build the environment (`$LANCET_VENV/bin/python`, else `python3`).

mod common;

use common::*;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch};
use arrow_schema::DataType;
use lancet_native::{Code, FunctionSpec, Limits, Mode, NativeError, Pool, Worker, WorkerKey};

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
fn a_calls_processes_do_not_outlive_the_call() {
    // Call 1 forks 40 children that exit at once (zombies of the warm worker, before issue 70:
    // nothing waited for them) and a daemon that double-forks a sleeper; call 2 counts what is
    // left in the sandbox; call 3 forks 40 again, which a root server's limit of 64 processes
    // per worker refuses while the first 40 still count.
    let src = "import os, time
def f(x):
    if x in (1, 3):
        for _ in range(40):
            if os.fork() == 0:
                os._exit(0)
        if x == 1 and os.fork() == 0:
            if os.fork() == 0:
                time.sleep(600)
            os._exit(0)
        time.sleep(0.3)
        return 40
    return len([p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, os.getpid())])
";
    let sb = sandbox(Limits::default());
    let mut w = Worker::start(&sb, &source(src, "f", Mode::Row, DataType::Int64)).unwrap();
    let mut call = |x: i64| {
        let out = w.call(&ints(&[Some(x)])).unwrap().values;
        out.as_any().downcast_ref::<Int64Array>().unwrap().value(0)
    };
    assert_eq!(call(1), 40);
    assert_eq!(call(2), 0, "processes of the first call outlived it");
    assert_eq!(call(3), 40, "the second wave could not fork");
    assert_eq!(call(2), 0);

    // What a class starts while it is set up (a pool, here one sleeper) is its state: kept.
    let src = "import os, time
class F:
    def __init__(self):
        self.child = os.fork()
        if self.child == 0:
            time.sleep(600)
            os._exit(0)
    def __call__(self, x):
        alive = [p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, os.getpid())]
        return len(alive) * 100 + int(str(self.child) in alive)
";
    let mut w = Worker::start(&sb, &source(src, "F", Mode::Row, DataType::Int64)).unwrap();
    for _ in 0..2 {
        let out = w.call(&ints(&[Some(1)])).unwrap().values;
        let got = out.as_any().downcast_ref::<Int64Array>().unwrap().value(0);
        assert_eq!(got, 101, "the setup's process was ended");
    }
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
