//! Test harness: a real `lancet serve` process on a free loopback port, and a small client.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use arrow_array::{Array, FixedSizeListArray, Float32Array, Int64Array, RecordBatch, StringArray};
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, Field, Schema};
use serde_json::{Value, json};

pub struct Server {
    child: Child,
    pub base: String,
    data: Option<tempfile::TempDir>,
    pub client: reqwest::Client,
}

impl Server {
    pub async fn start() -> Server {
        Self::start_with(tempfile::tempdir().unwrap(), &[]).await
    }

    pub async fn start_with(data: tempfile::TempDir, env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lancet"));
        cmd.args(["serve", "--addr", "127.0.0.1:0", "--data"])
            .arg(data.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start lancet");
        let stdout = child.stdout.take().unwrap();
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).unwrap();
            line
        })
        .await
        .unwrap();
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_string();
        Server {
            child,
            base,
            data: Some(data),
            client: reqwest::Client::new(),
        }
    }

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

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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

    /// Kill this server hard and start a new one on the same data directory.
    pub async fn restart(mut self) -> Server {
        self.kill_hard();
        let data = self.take_data();
        Server::start_with(data, &[]).await
    }

    pub async fn describe_job(&self, job_id: &str) -> Value {
        self.ok("/v1/jobs/describe", json!({ "job_id": job_id }))
            .await
    }

    /// Start a backfill that must be accepted; returns its job id.
    pub async fn backfill(&self, table: &str, body: Value) -> String {
        let v = self
            .ok(&format!("/v1/table/{table}/backfill_column"), body)
            .await;
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
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(texts)),
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
}
