//! An S3-compatible store on loopback for the object-store tests: moto's server (from PyPI;
//! `scripts/test.sh` installs it in the test venv), started through `tests/s3/moto_server.py`,
//! which makes its conditional writes atomic as S3's are (see there). `LANCET_TEST_S3_ENDPOINT` names a running
//! one; otherwise one is started from the venv's python (`LANCET_VENV`, default
//! `~/.cache/lancet-venv`) and stopped when this test process exits. Without either the tests
//! fail: they are not skipped.

use std::sync::OnceLock;
use std::time::Duration;

use crate::common::{Server, repo_path};

static ENDPOINT: OnceLock<String> = OnceLock::new();

#[allow(clippy::zombie_processes)]
fn start_moto() -> String {
    let venv = std::env::var("LANCET_VENV").unwrap_or_else(|_| {
        format!(
            "{}/.cache/lancet-venv",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    let python = format!("{venv}/bin/python");
    assert!(
        std::path::Path::new(&python).exists(),
        "no S3 server: set LANCET_TEST_S3_ENDPOINT or run scripts/test.sh (it installs moto in {venv})"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // A watchdog shell stops moto once this test process is gone (statics are never dropped);
    // it is never waited on: it outlives every test and ends by itself.
    let launcher = repo_path("tests/s3/moto_server.py");
    let script = format!(
        "{python} {launcher} -H 127.0.0.1 -p {port} >/dev/null 2>&1 & m=$!; \
         while kill -0 {pid} 2>/dev/null; do sleep 1; done; kill $m",
        pid = std::process::id()
    );
    std::process::Command::new("sh")
        .args(["-c", &script])
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("start moto");
    let endpoint = format!("http://127.0.0.1:{port}");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "moto did not start on port {port}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    endpoint
}

pub fn endpoint() -> String {
    ENDPOINT
        .get_or_init(|| std::env::var("LANCET_TEST_S3_ENDPOINT").unwrap_or_else(|_| start_moto()))
        .clone()
}

/// The variables a server (or `lancet keys`) needs for the test store. moto accepts any
/// signed request; requests are signed with this made-up key pair.
pub fn env() -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT", endpoint()),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("AWS_ACCESS_KEY_ID", "lancet-test".into()),
        ("AWS_SECRET_ACCESS_KEY", "lancet-test-secret".into()),
        ("AWS_REGION", "us-east-1".into()),
    ]
}

/// A new bucket; returns its `s3://` root.
pub async fn bucket() -> String {
    let name = format!(
        "lancet-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let status = reqwest::Client::new()
        .put(format!("{}/{name}", endpoint()))
        .send()
        .await
        .unwrap()
        .status();
    assert!(status.is_success(), "creating bucket {name}: {status}");
    format!("s3://{name}/root")
}

/// A server on `root` with the store's variables plus `extra`. Reads check the store on every
/// request (`LANCET_READ_CONSISTENCY_INTERVAL=0`, unless `extra` says otherwise), so a write on
/// one node is seen by the next request to another; `object_store.rs` tests the default
/// interval.
pub async fn server(root: &str, extra: &[(&str, &str)]) -> Server {
    let env = env();
    let mut all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    all.push(("LANCET_READ_CONSISTENCY_INTERVAL", "0"));
    // A node keeps a cache folder per object-store root: unless the test says where, one of
    // the server's own, removed with it (not the user's ~/.cache, one folder per test bucket),
    // sharing only the machine's compiled Python runner.
    let cache = (!extra.iter().any(|(k, _)| *k == "LANCET_CACHE_DIR")).then(node_cache);
    let cache_path = cache
        .as_ref()
        .map(|c| c.path().to_str().unwrap().to_string());
    if let Some(path) = &cache_path {
        all.push(("LANCET_CACHE_DIR", path));
    }
    all.extend_from_slice(extra);
    let mut server = Server::start_on(root, &all).await;
    if let Some(cache) = cache {
        server.own_cache(cache);
    }
    server
}

/// A node cache folder whose `python/` is the machine's (where the compiled runner is).
fn node_cache() -> tempfile::TempDir {
    let cache = tempfile::tempdir().unwrap();
    let machine = std::env::var_os("LANCET_CACHE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/lancet")
        })
        .join("python");
    std::fs::create_dir_all(&machine).unwrap();
    std::os::unix::fs::symlink(&machine, cache.path().join("python")).unwrap();
    cache
}

/// `lancet keys <args>` against `root`; returns stdout.
pub fn keys_cli(root: &str, args: &[&str]) -> String {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_lancet"));
    cmd.args(["keys", "--data", root]).args(args);
    for (k, v) in env() {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "lancet keys {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
