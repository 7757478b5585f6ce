//! Shared fixtures: the built plugin modules, a runtime shared by the tests, manifests.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arrow_array::{ArrayRef, RecordBatch};
use lancet_udf::{
    ABI_NAME, Limits, Manifest, OnError, PreparedUdf, Runtime, RuntimeConfig, UdfError, sha256_hex,
};

/// Where the plugin .wasm files are: `LANCET_PLUGINS_DIR`, or the plugins workspace's own
/// release output.
pub fn plugins_dir() -> PathBuf {
    match std::env::var_os("LANCET_PLUGINS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => repo_root().join("plugins/target/wasm32-unknown-unknown/release"),
    }
}

/// At run time (cargo sets it for tests): a test binary built in another checkout that shares
/// the target directory still finds this one.
fn repo_root() -> PathBuf {
    let manifest = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    PathBuf::from(manifest).join("..")
}

/// Builds the plugins once per test run (cargo makes that a no-op when they are current),
/// unless LANCET_PLUGINS_DIR points at prebuilt ones. Never lets a test pass without them.
fn ensure_built() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        if std::env::var_os("LANCET_PLUGINS_DIR").is_some() {
            return;
        }
        let script = repo_root().join("plugins/build.sh");
        let status = Command::new(&script)
            .env_remove("CARGO_TARGET_DIR")
            .status()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            status.success(),
            "building the plugins with {} failed ({status}); the UDF tests need them \
             (needs the wasm32-unknown-unknown target)",
            script.display()
        );
    });
}

/// The bytes of plugin `name` (e.g. "score", "misbehave").
pub fn wasm(name: &str) -> Vec<u8> {
    ensure_built();
    let path = plugins_dir().join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "plugin module {} is missing ({e}); run plugins/build.sh or set LANCET_PLUGINS_DIR",
            path.display()
        )
    })
}

pub fn manifest(module: &[u8], entry: &str, config: &[(&str, &str)]) -> Manifest {
    Manifest {
        abi: ABI_NAME.to_string(),
        module_sha256: sha256_hex(module),
        module_size: module.len() as u64,
        entry: entry.to_string(),
        config: config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        limits: None,
        on_error: OnError::Fail,
    }
}

/// Stores and prepares `entry` of plugin `plugin`.
pub fn define(
    rt: &Runtime,
    plugin: &str,
    entry: &str,
    config: &[(&str, &str)],
) -> Result<Arc<PreparedUdf>, UdfError> {
    let module = wasm(plugin);
    let m = manifest(&module, entry, config);
    rt.store_module(&m, Some(&module))?;
    rt.prepare(&m)
}

/// One runtime for the whole test binary. Its module store and precompiled cache live in
/// cargo's target tmp dir, so later runs load modules instead of compiling them again.
pub fn shared() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lancet-udf-tests");
        let mut cfg = RuntimeConfig::new(base.join("modules"), base.join("compiled"));
        cfg.default_limits = Limits {
            max_memory_bytes: 128 << 20,
            ..Limits::default()
        };
        Runtime::new(cfg).expect("runtime")
    })
}

/// Limits tight enough that hostile guests fail fast.
pub fn limits() -> Limits {
    Limits {
        timeout: Duration::from_millis(500),
        max_memory_bytes: 64 << 20,
        max_output_bytes: 1 << 20,
        ..Limits::default()
    }
}

pub fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    RecordBatch::try_from_iter(columns).expect("batch")
}
