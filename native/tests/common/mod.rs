//! What the native tier's test binaries share: the sandbox, the pyarrow/numpy environment and
//! batch helpers.

#![allow(dead_code)] // each test binary uses some of these

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::DataType;
use lancet_native::{
    Code, Environments, FunctionSpec, Interpreter, Limits, Mode, NativeError, Sandbox, Worker,
};

pub fn python() -> PathBuf {
    std::env::var_os("LANCET_NATIVE_PYTHON")
        .map_or_else(|| "/usr/bin/python3".into(), PathBuf::from)
}

pub fn bwrap() -> PathBuf {
    std::env::var_os("LANCET_BWRAP").map_or_else(|| "/usr/bin/bwrap".into(), PathBuf::from)
}

/// One environment (pyarrow, cloudpickle, numpy) for every test, built once.
pub fn environment() -> &'static PathBuf {
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

pub fn sandbox(limits: Limits) -> Arc<Sandbox> {
    let interpreter = Interpreter::probe(&python()).unwrap();
    Arc::new(Sandbox::new(&bwrap(), interpreter, limits).expect("bubblewrap works here"))
}

pub fn source(src: &str, entry: &str, mode: Mode, output: DataType) -> FunctionSpec {
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

pub fn ints(values: &[Option<i64>]) -> RecordBatch {
    let a: ArrayRef = Arc::new(Int64Array::from(values.to_vec()));
    RecordBatch::try_from_iter([("x", a)]).unwrap()
}

pub fn strings(a: &ArrayRef) -> Vec<Option<String>> {
    let s = a.as_any().downcast_ref::<StringArray>().unwrap();
    (0..s.len())
        .map(|i| s.is_valid(i).then(|| s.value(i).to_string()))
        .collect()
}

/// What a one-row call of `body` (a function of `x` returning a string) answered.
pub fn probe(sb: &Sandbox, body: &str) -> Result<String, NativeError> {
    let src = format!("import os, socket, ctypes\ndef f(x):\n{body}\n");
    let mut w = Worker::start(sb, &source(&src, "f", Mode::Row, DataType::Utf8))?;
    let out = w.call(&ints(&[Some(1)]))?.values;
    Ok(strings(&out)[0].clone().unwrap_or_default())
}
