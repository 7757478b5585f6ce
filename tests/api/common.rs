//! Test harness: a real `lancet serve` process on a free loopback port, and a small client.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use arrow_array::{Array, FixedSizeListArray, Float32Array, Int64Array, RecordBatch, StringArray};
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, Field, Schema};
use serde_json::{Value, json};

/// `rel` under the repository's root. The checkout is found at run time (cargo sets
/// `CARGO_MANIFEST_DIR` for the tests it runs): a test binary built in another checkout that
/// shares the cargo target directory (CI's and a developer's, say) still finds this one.
pub fn repo_path(rel: &str) -> String {
    let host = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    format!("{host}/../{rel}")
}

/// The admin key of tenant `default` every test server starts with (`LANCET_BOOTSTRAP_KEY`).
pub const ADMIN_KEY: &str = "test-bootstrap-admin-key";

/// A client that sends `key` as a bearer token on every request.
pub fn client_with_key(key: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        reqwest::header::HeaderValue::from_str(&format!("Bearer {key}")).unwrap(),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap()
}

pub struct Server {
    child: Child,
    /// The environment it was started with, kept for restarts.
    env: Vec<(String, String)>,
    data: Option<tempfile::TempDir>,
    /// A node cache folder the server owns (removed with it).
    cache: Option<tempfile::TempDir>,
    /// Lines the server printed before it started listening (e.g. a generated key).
    pub banner: Vec<String>,
    /// Requests as the bootstrap admin of tenant `default`.
    handle: Handle,
}

/// A server's address plus the credential requests carry; `Server` derefs to its admin handle,
/// `Server::with_key` makes one for another credential.
#[derive(Clone)]
pub struct Handle {
    pub base: String,
    pub client: reqwest::Client,
}

impl std::ops::Deref for Server {
    type Target = Handle;
    fn deref(&self) -> &Handle {
        &self.handle
    }
}

impl Server {
    pub async fn start() -> Server {
        Self::start_with(tempfile::tempdir().unwrap(), &[]).await
    }

    pub async fn start_with(data: tempfile::TempDir, env: &[(&str, &str)]) -> Server {
        let mut server = Self::start_on(data.path().to_str().unwrap(), env).await;
        server.data = Some(data);
        server
    }

    /// A server on a directory it does not own (e.g. a second process on another's data).
    pub async fn start_at(dir: &std::path::Path, env: &[(&str, &str)]) -> Server {
        // Another node: a name of its own (two nodes must never share one).
        let node = format!(
            "test-other-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let mut env = env.to_vec();
        if !env.iter().any(|(k, _)| *k == "LANCET_NODE_ID") {
            env.insert(0, ("LANCET_NODE_ID", node.as_str()));
        }
        Self::start_on(dir.as_os_str().to_str().unwrap(), &env).await
    }

    /// A server on data root `root` (a directory or an object-store URI). Its node id is
    /// derived from the root, so a restart on the same root takes its jobs back at once (as a
    /// node with a stable `--node-id` does); replicas of one root pass their own.
    pub async fn start_on(root: &str, env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lancet"));
        let node = format!("test-{:x}", {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            root.hash(&mut h);
            h.finish()
        });
        cmd.args(["serve", "--addr", "127.0.0.1:0", "--data", root])
            .env("LANCET_NODE_ID", node)
            .env("LANCET_BOOTSTRAP_KEY", ADMIN_KEY)
            // Background upkeep commits on its own schedule; tests that count versions or
            // fragments would race it. The upkeep tests turn it back on.
            .env("LANCET_UPKEEP", "false")
            // Jobs at normal CPU priority: the suite runs many servers side by side, and at
            // nice 19 one test's jobs get ~1.5% of a core another test's server keeps busy, so
            // its deadlines fail for load it did not make (seen in CI). Priority is a policy
            // between one server's requests and its own jobs, tested in host/src/background.rs.
            .env("LANCET_BACKGROUND_PRIORITY", "normal")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start lancet");
        let stdout = child.stdout.take().unwrap();
        let lines = tokio::task::spawn_blocking(move || {
            let mut reader = BufReader::new(stdout);
            let mut lines = Vec::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 {
                    panic!("lancet exited before listening; it printed {lines:?}");
                }
                let done = line.starts_with("listening on ");
                lines.push(line.trim_end().to_string());
                if done {
                    // Keep draining so the server never blocks on a full pipe.
                    std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
                    return lines;
                }
            }
        })
        .await
        .unwrap();
        let (last, banner) = lines.split_last().unwrap();
        let base = last.strip_prefix("listening on ").unwrap().to_string();
        Server {
            child,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            data: None,
            cache: None,
            banner: banner.to_vec(),
            handle: Handle {
                base,
                client: client_with_key(ADMIN_KEY),
            },
        }
    }

    /// The same server, with requests carrying `key`.
    pub fn with_key(&self, key: &str) -> Handle {
        Handle {
            base: self.handle.base.clone(),
            client: client_with_key(key),
        }
    }

    /// `lancet keys <args>` on this server's data directory; returns stdout.
    pub fn keys_cli(&self, args: &[&str]) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_lancet"))
            .arg("keys")
            .arg("--data")
            .arg(self.data_dir())
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "lancet keys {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// A new key made with the CLI, returned once the running server accepts it.
    pub async fn new_key(&self, tenant: &str, role: &str, namespace: &[&str]) -> String {
        let mut args = vec!["create", "--tenant", tenant, "--role", role];
        for level in namespace {
            args.extend(["--namespace", level]);
        }
        let key = self.keys_cli(&args).trim().to_string();
        assert!(key.starts_with("lk_"), "{key}");
        let handle = self.with_key(&key);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let (status, _) = handle.post("/v1/namespace/$/exists", json!({})).await;
            if status != 401 {
                return key;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "server never accepted the new key"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Hand the server the node cache folder it was started with, to remove with it.
    pub fn own_cache(&mut self, cache: tempfile::TempDir) {
        self.cache = Some(cache);
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn data_dir(&self) -> &std::path::Path {
        self.data.as_ref().expect("data directory taken").path()
    }

    /// Keep the data directory beyond this server (to restart another on it).
    pub fn take_data(&mut self) -> tempfile::TempDir {
        self.data.take().expect("data directory already taken")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().unwrap()
    }

    /// SIGKILL the server: no shutdown handling, whatever was in flight is cut off.
    pub fn kill_hard(&mut self) {
        self.kill();
    }

    /// Kill this server hard and start a new one on the same data directory (with the
    /// default environment: a test's fault settings are not carried over).
    pub async fn restart(mut self) -> Server {
        self.kill_hard();
        let data = self.take_data();
        Server::start_with(data, &[]).await
    }

    /// As `restart`, with the environment this server was started with.
    pub async fn restart_same(mut self) -> Server {
        self.kill_hard();
        let data = self.take_data();
        let env = std::mem::take(&mut self.env);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Server::start_with(data, &env).await
    }
}

impl Handle {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .client
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// POST that must succeed; returns the JSON body.
    pub async fn ok(&self, path: &str, body: Value) -> Value {
        let (status, v) = self.post(path, body).await;
        assert_eq!(status, 200, "POST {path} failed: {v}");
        v
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.client.get(self.url(path)).send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn post_arrow(&self, path: &str, batch: &RecordBatch) -> (u16, Value) {
        self.post_bytes(path, ipc_stream(batch)).await
    }

    pub async fn post_bytes(&self, path: &str, bytes: Vec<u8>) -> (u16, Value) {
        let r = self
            .client
            .post(self.url(path))
            .header("content-type", "application/vnd.apache.arrow.stream")
            .body(bytes)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Run a query; returns the decoded rows.
    pub async fn query(&self, table: &str, body: Value) -> Vec<RecordBatch> {
        let r = self
            .client
            .post(self.url(&format!("/v1/table/{table}/query")))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let bytes = r.bytes().await.unwrap();
        assert_eq!(
            status,
            200,
            "query failed: {}",
            String::from_utf8_lossy(&bytes)
        );
        let reader = FileReader::try_new(std::io::Cursor::new(bytes.to_vec()), None).unwrap();
        reader.collect::<Result<Vec<_>, _>>().unwrap()
    }

    /// A query answered in the Arrow stream format (asked for with `Accept`): its batches and
    /// its size in bytes; checks the content type.
    pub async fn query_stream(&self, table: &str, body: Value) -> (Vec<RecordBatch>, usize) {
        let r = self
            .client
            .post(self.url(&format!("/v1/table/{table}/query")))
            .header("accept", "application/vnd.apache.arrow.stream")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        assert_eq!(
            r.headers()["content-type"],
            "application/vnd.apache.arrow.stream"
        );
        let bytes = r.bytes().await.unwrap();
        let reader =
            arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes.to_vec()), None)
                .unwrap();
        (reader.collect::<Result<_, _>>().unwrap(), bytes.len())
    }

    pub async fn count(&self, table: &str, body: Value) -> u64 {
        let v = self
            .ok(&format!("/v1/table/{table}/count_rows"), body)
            .await;
        v.as_u64()
            .unwrap_or_else(|| panic!("count_rows answered {v}, not a bare integer"))
    }

    pub async fn version(&self, table: &str) -> u64 {
        self.ok(&format!("/v1/table/{table}/describe"), json!({}))
            .await["version"]
            .as_u64()
            .unwrap()
    }

    /// Create table `name` (root namespace) with rows id 0..n, text "row i", 4-d vectors.
    pub async fn create_table(&self, name: &str, n: i64) {
        let (status, v) = self
            .post_arrow(&format!("/v1/table/{name}/create"), &sample(0, n))
            .await;
        assert_eq!(status, 200, "create {name}: {v}");
    }

    pub async fn describe_job(&self, job_id: &str) -> Value {
        self.ok("/v1/jobs/describe", json!({ "job_id": job_id }))
            .await
    }

    /// Start a backfill that must be accepted (202, as the spec's clients expect); returns its
    /// job id.
    pub async fn backfill(&self, table: &str, body: Value) -> String {
        let (status, v) = self
            .post(&format!("/v1/table/{table}/backfill_column"), body)
            .await;
        assert_eq!(status, 202, "backfill_column: {v}");
        v["job_id"].as_str().expect("job_id").to_string()
    }

    /// Poll describe until `done(description)` holds (panics after `secs` seconds).
    pub async fn wait_job_until(
        &self,
        job_id: &str,
        secs: u64,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            let d = self.describe_job(job_id).await;
            if done(&d) {
                return d;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "job {job_id} timed out: {d}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Wait until the job leaves IN_PROGRESS.
    pub async fn wait_job(&self, job_id: &str) -> Value {
        self.wait_job_until(job_id, 120, |d| d["job_state"] != "IN_PROGRESS")
            .await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn sample_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("text", DataType::Utf8, true),
        Field::new(
            "vec",
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), 4),
            true,
        ),
    ]))
}

/// Rows with ids start..start+n.
pub fn sample(start: i64, n: i64) -> RecordBatch {
    let ids: Vec<i64> = (start..start + n).collect();
    let texts: Vec<String> = ids.iter().map(|i| format!("row {i}")).collect();
    rows(&ids, &texts)
}

/// Rows with these ids and texts in the sample schema (`vec` derived from the id).
pub fn rows(ids: &[i64], texts: &[String]) -> RecordBatch {
    let values: Vec<f32> = ids
        .iter()
        .flat_map(|i| [*i as f32, 0.0, 1.0, (*i % 3) as f32])
        .collect();
    let vec = FixedSizeListArray::try_new(
        Arc::new(Field::new("item", DataType::Float32, true)),
        4,
        Arc::new(Float32Array::from(values)),
        None,
    )
    .unwrap();
    RecordBatch::try_new(
        sample_schema(),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from(texts.to_vec())),
            Arc::new(vec),
        ],
    )
    .unwrap()
}

pub fn ipc_stream(batch: &RecordBatch) -> Vec<u8> {
    let mut w = StreamWriter::try_new(Vec::new(), &batch.schema()).unwrap();
    w.write(batch).unwrap();
    w.finish().unwrap();
    w.into_inner().unwrap()
}

pub fn ids(batches: &[RecordBatch]) -> Vec<i64> {
    let mut out = Vec::new();
    for b in batches {
        let col = b.column_by_name("id").expect("id column");
        let col = col.as_any().downcast_ref::<Int64Array>().unwrap();
        out.extend(col.values().iter().copied());
    }
    out
}

pub fn strings(batches: &[RecordBatch], column: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for b in batches {
        let col = b
            .column_by_name(column)
            .unwrap_or_else(|| panic!("no column {column}"));
        let col = col.as_any().downcast_ref::<StringArray>().unwrap();
        out.extend((0..col.len()).map(|i| col.is_valid(i).then(|| col.value(i).to_string())));
    }
    out
}

/// Assert an error answer has the spec shape, the status and the upstream code.
pub fn assert_error(status: u16, body: &Value, want_status: u16, want_code: u32) {
    assert_eq!(status, want_status, "unexpected status; body: {body}");
    for key in [
        "type", "title", "status", "detail", "instance", "code", "error",
    ] {
        assert!(body.get(key).is_some(), "error body lacks '{key}': {body}");
    }
    assert!(
        body["type"].as_str().unwrap().starts_with("/errors/"),
        "{body}"
    );
    assert_eq!(
        body["status"].as_u64().unwrap(),
        want_status as u64,
        "{body}"
    );
    assert_eq!(
        body["code"].as_u64().unwrap(),
        want_code as u64,
        "wrong code: {body}"
    );
    assert_part7(status, body);
}

/// SEED-SPEC.md Part 7, as written there: the `type` and `title` of every status it names.
/// Normative: what happened goes in `detail`, `error` and `code`, never in the title.
pub const PART7: [(u16, &str, &str); 7] = [
    (400, "/errors/bad-request", "Malformed request"),
    (
        401,
        "/errors/unauthorized-request",
        "No valid authentication credentials for the operation",
    ),
    (
        403,
        "/errors/forbidden-request",
        "Not authorized to make this request",
    ),
    (404, "/errors/not-found-error", "Not found Error"),
    (
        409,
        "/errors/conflict",
        "The namespace has been concurrently modified",
    ),
    (500, "/errors/server-error", "Internal Server Error"),
    (503, "/errors/service-unavailable", "Slow down"),
];

/// An error answer of a status Part 7 names has exactly its `type` and `title`.
pub fn assert_part7(status: u16, body: &Value) {
    if let Some((_, kind, title)) = PART7.iter().find(|(s, _, _)| *s == status) {
        assert_eq!(
            (body["type"].as_str(), body["title"].as_str()),
            (Some(*kind), Some(*title)),
            "status {status} must have Part 7's type and title: {body}"
        );
    }
}
