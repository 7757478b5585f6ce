//! Operability and overload control: `/metrics`, request ids in answers and JSON logs, a
//! panicking handler answered 500 while the server keeps serving, in-flight bounds (global and
//! per tenant) answered 503 with `Retry-After`, the body-memory budget, and timeouts for
//! clients that stall.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;

async fn metrics_text(server: &Server) -> String {
    let r = reqwest::get(server.url("/metrics")).await.unwrap();
    assert_eq!(r.status(), 200);
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    r.text().await.unwrap()
}

/// The value of the sample whose line starts with `prefix` (name and labels), if any.
pub fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test]
async fn metrics_count_requests_latency_bytes_and_datasets_by_route_and_tenant() {
    let server = Server::start().await;
    server.create_table("m", 10).await;
    for _ in 0..3 {
        assert_eq!(server.count("m", json!({})).await, 10);
    }
    let (status, _) = server.post("/v1/table/missing/describe", json!({})).await;
    assert_eq!(status, 404);
    // Refused before the router (no credential): still counted under its route's pattern,
    // trailing slash and all; a path no route has, under "unmatched".
    let r = reqwest::Client::new()
        .post(server.url("/v1/table/m/count_rows/"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let (status, _) = server.post("/v1/table/m/no_such_route", json!({})).await;
    assert_eq!(status, 404);
    let text = metrics_text(&server).await;
    let refused = r#"lancet_http_requests_total{route="/v1/table/{id}/count_rows",method="POST",status="401","#;
    assert_eq!(metric(&text, refused), Some(1.0), "{text}");
    let unmatched = r#"lancet_http_requests_total{route="unmatched",method="POST",status="404","#;
    assert_eq!(metric(&text, unmatched), Some(1.0), "{text}");
    let count_rows = r#"lancet_http_requests_total{route="/v1/table/{id}/count_rows",method="POST",status="200",tenant="default"}"#;
    assert_eq!(metric(&text, count_rows), Some(3.0), "{text}");
    let missing = r#"lancet_http_requests_total{route="/v1/table/{id}/describe",method="POST",status="404",tenant="default"}"#;
    assert_eq!(metric(&text, missing), Some(1.0), "{text}");
    let latency = r#"lancet_http_request_duration_seconds_count{route="/v1/table/{id}/count_rows",method="POST",tenant="default"}"#;
    assert_eq!(metric(&text, latency), Some(3.0), "{text}");
    let bytes_in = r#"lancet_http_request_bytes_total{route="/v1/table/{id}/create",method="POST",tenant="default"}"#;
    assert!(metric(&text, bytes_in).unwrap() > 100.0, "{text}");
    let bytes_out = r#"lancet_http_response_bytes_total{route="/v1/table/{id}/count_rows",method="POST",tenant="default"}"#;
    assert!(metric(&text, bytes_out).unwrap() >= 3.0 * 2.0, "{text}");
    assert!(
        metric(&text, "lancet_datasets_cached ").unwrap() >= 1.0,
        "{text}"
    );
    assert_eq!(metric(&text, "lancet_panics_total "), Some(0.0), "{text}");
    // The scrape itself is in flight.
    assert_eq!(
        metric(&text, "lancet_http_requests_in_flight "),
        Some(1.0),
        "{text}"
    );
    // Job and UDF families: see jobs::udf_failures_fail_the_job_or_become_nulls.
}

/// `/metrics` text, for other tests' checks.
pub async fn scrape(server: &Server) -> String {
    metrics_text(server).await
}

#[tokio::test]
async fn every_answer_carries_a_request_id_and_a_given_one_is_kept() {
    let server = Server::start().await;
    let r = server
        .client
        .post(server.url("/v1/namespace/$/list"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let generated = r.headers()["x-request-id"].to_str().unwrap().to_string();
    assert_eq!(generated.len(), 36, "{generated}");
    let r = server
        .client
        .post(server.url("/v1/table/nope/describe"))
        .header("x-request-id", "client-chosen-42")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.headers()["x-request-id"], "client-chosen-42");
}

/// A server with its stderr in a file, for reading its logs.
struct Logged {
    child: std::process::Child,
    base: String,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Logged {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Logged {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("stderr.log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lancet"));
        cmd.args(["serve", "--addr", "127.0.0.1:0", "--data"])
            .arg(dir.path().join("data"))
            .args(args)
            .env("LANCET_BOOTSTRAP_KEY", ADMIN_KEY)
            // As `common::Server` (why there).
            .env("LANCET_BACKGROUND_PRIORITY", "normal")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let base = loop {
            let mut line = String::new();
            assert!(reader.read_line(&mut line).unwrap() > 0, "server exited");
            if let Some(b) = line.trim().strip_prefix("listening on ") {
                break b.to_string();
            }
        };
        std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
        Logged {
            child,
            base,
            log,
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    fn log_lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn json_logs_carry_the_request_id_and_an_injected_panic_is_a_500_the_server_survives() {
    let server = Logged::start(
        &["--log-format", "json", "--access-log", "true"],
        &[("LANCET_FAULT_INJECTION", "1")],
    );
    let client = client_with_key(ADMIN_KEY);
    let r = client
        .post(server.url("/v1/namespace/$/list"))
        .header("x-request-id", "rid-quiet-1")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let r = client
        .post(server.url("/v1/namespace/$/list"))
        .header("x-request-id", "rid-panic-2")
        .header("x-lancet-fault", "panic")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    assert_eq!(r.headers()["x-request-id"], "rid-panic-2");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["type"], "/errors/server-error");
    assert_eq!(body["status"], 500);
    assert_eq!(body["instance"], "/v1/namespace/$/list");
    assert!(body["detail"].as_str().unwrap().contains("internal fault"));

    // Still serving, on the same and on new connections.
    for _ in 0..3 {
        let r = client
            .post(server.url("/v1/namespace/$/list"))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let metrics = reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(metric(&metrics, "lancet_panics_total "), Some(1.0));

    // Logs flush as they are written; give the writer a moment.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lines = server.log_lines();
    let mut json_lines = 0;
    for line in &lines {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("log line is not JSON ({e}): {line}"));
        json_lines += 1;
        assert!(
            v["timestamp"].is_string() && v["level"].is_string(),
            "{line}"
        );
    }
    assert!(json_lines >= 5, "{lines:?}");
    let with = |rid: &str| -> Vec<Value> {
        lines
            .iter()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["span"]["request_id"] == rid)
            .collect()
    };
    let quiet = with("rid-quiet-1");
    assert!(!quiet.is_empty(), "no log line of rid-quiet-1 in {lines:?}");
    assert!(quiet.iter().all(|v| v["span"]["tenant"] == "default"));
    let panic_lines = with("rid-panic-2");
    let panic_line = panic_lines
        .iter()
        .find(|v| v["fields"]["message"] == "panic")
        .unwrap_or_else(|| panic!("no panic line with the request id: {lines:?}"));
    assert!(
        panic_line["fields"]["panic"]
            .as_str()
            .unwrap()
            .contains("fault injected"),
        "{panic_line}"
    );
    assert_eq!(panic_line["level"], "ERROR");
}

/// Text lines as a file gets them: no colour codes, the request id once per line; a line per
/// answered request only with `--access-log`, a failed one either way.
#[tokio::test]
async fn access_lines_only_when_asked_and_plain_text_in_a_file() {
    let client = client_with_key(ADMIN_KEY);
    let send = |server: &Logged, rid: &'static str, fault: bool| {
        let mut request = client
            .post(server.url("/v1/namespace/$/list"))
            .header("x-request-id", rid)
            .json(&json!({}));
        if fault {
            request = request.header("x-lancet-fault", "panic");
        }
        request.send()
    };
    let quiet = Logged::start(&[], &[("LANCET_FAULT_INJECTION", "1")]);
    let loud = Logged::start(
        &["--access-log", "true"],
        &[("LANCET_FAULT_INJECTION", "1")],
    );
    for server in [&quiet, &loud] {
        assert_eq!(send(server, "rid-ok-1", false).await.unwrap().status(), 200);
        assert_eq!(
            send(server, "rid-fail-2", true).await.unwrap().status(),
            500
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for (server, lines_per_ok) in [(&quiet, 0), (&loud, 1)] {
        let lines = server.log_lines();
        assert!(lines.iter().all(|l| !l.contains('\u{1b}')), "{lines:?}");
        let of = |rid: &str| -> Vec<&String> { lines.iter().filter(|l| l.contains(rid)).collect() };
        let ok = of("rid-ok-1");
        assert_eq!(ok.len(), lines_per_ok, "{lines:?}");
        assert!(
            ok.iter().all(|l| l.matches("rid-ok-1").count() == 1),
            "{ok:?}"
        );
        let failed = of("rid-fail-2");
        assert!(
            failed.iter().any(|l| l.contains("ERROR")),
            "no error line of the failed request: {lines:?}"
        );
    }
}

async fn sleepy(handle: &Handle, ms: u64) -> reqwest::Response {
    handle
        .client
        .post(handle.url("/v1/namespace/$/list"))
        .header("x-lancet-fault", format!("sleep-ms={ms}"))
        .json(&json!({}))
        .send()
        .await
        .unwrap()
}

/// `n` requests of `handle` held 1.5 s in the server, once they are surely in.
async fn hold(handle: &Handle, n: usize) -> Vec<tokio::task::JoinHandle<reqwest::StatusCode>> {
    let busy = (0..n)
        .map(|_| {
            let h = handle.clone();
            tokio::spawn(async move { sleepy(&h, 1500).await.status() })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(400)).await;
    busy
}

/// A server with fault injection on and `env` set.
async fn faulty(env: &[(&str, &str)]) -> Server {
    let mut all = vec![("LANCET_FAULT_INJECTION", "1")];
    all.extend_from_slice(env);
    Server::start_with(tempfile::tempdir().unwrap(), &all).await
}

async fn assert_slow_down(r: reqwest::Response, reason: &str) {
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["type"], "/errors/service-unavailable");
    assert_eq!(body["title"], "Slow down");
    assert!(body["detail"].as_str().unwrap().contains(reason), "{body}");
}

#[tokio::test]
async fn a_tenant_over_its_in_flight_limit_gets_503_and_another_tenant_does_not() {
    let server = faulty(&[("LANCET_TENANT_MAX_IN_FLIGHT", "2")]).await;
    let other = server.with_key(&server.new_key("other", "write", &[]).await);
    let busy = hold(&server, 2).await;
    assert_slow_down(sleepy(&server, 0).await, "tenant 'default'").await;
    // Another tenant is untouched.
    let (status, _) = other.post("/v1/namespace/$/list", json!({})).await;
    assert_eq!(status, 200);
    for b in busy {
        assert_eq!(b.await.unwrap(), 200);
    }
    // Slots are given back.
    let (status, _) = server.post("/v1/namespace/$/list", json!({})).await;
    assert_eq!(status, 200);
    let text = metrics_text(&server).await;
    let rejected = r#"lancet_overload_rejections_total{reason="tenant",tenant="default"}"#;
    assert_eq!(metric(&text, rejected), Some(1.0), "{text}");
}

#[tokio::test]
async fn the_auth_file_sets_a_tenants_own_in_flight_limit() {
    let mut server = faulty(&[]).await;
    let key = server.new_key("small", "write", &[]).await;
    let small = server.with_key(&key);
    let auth = server.data_dir().join("_auth/auth.toml");
    let mut text = std::fs::read_to_string(&auth).unwrap();
    text.push_str("\n[tenants.small]\nmax_in_flight = 1\n");
    std::fs::write(&auth, text).unwrap();
    // Restart so the setting is certainly read (a running server reloads within a second).
    let data = server.take_data();
    server.kill();
    let server = Server::start_with(data, &[("LANCET_FAULT_INJECTION", "1")]).await;
    let small = Handle {
        base: server.base.clone(),
        client: small.client,
    };
    let busy = hold(&small, 1).await;
    assert_slow_down(sleepy(&small, 0).await, "tenant 'small'").await;
    // The default tenant keeps the server's default limit.
    assert_eq!(sleepy(&server, 0).await.status(), 200);
    for b in busy {
        assert_eq!(b.await.unwrap(), 200);
    }
}

#[tokio::test]
async fn the_whole_server_in_flight_limit_answers_503_and_healthz_still_answers() {
    let server = faulty(&[("LANCET_MAX_IN_FLIGHT", "2")]).await;
    let busy = hold(&server, 2).await;
    assert_slow_down(sleepy(&server, 0).await, "server").await;
    let health = reqwest::get(server.url("/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);
    for b in busy {
        assert_eq!(b.await.unwrap(), 200);
    }
    assert_eq!(sleepy(&server, 0).await.status(), 200);
}

#[tokio::test]
async fn a_body_over_the_memory_budget_is_503_and_the_budget_is_given_back() {
    let server = Server::start_with(
        tempfile::tempdir().unwrap(),
        &[("LANCET_MAX_BODY_MEMORY_MB", "1")],
    )
    .await;
    // A 1.4 MiB body, over the 1 MiB budget (far under the 512 MiB body limit), is refused
    // by its Content-Length before a byte of it is read: headers alone get the answer.
    let s = std::sync::Arc::new(server);
    let s2 = s.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let mut conn = raw(&s2);
        let head = format!(
            "POST /v1/table/big/create HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ADMIN_KEY}\r\ncontent-type: application/vnd.apache.arrow.stream\r\ncontent-length: {}\r\n\r\n",
            1_400_000
        );
        conn.write_all(head.as_bytes()).unwrap();
        let mut buf = [0u8; 4096];
        let n = conn.read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).to_string()
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );
    assert!(answer.contains("too much request data"), "{answer}");
    let server = &*s;
    let (status, _) = server.post("/v1/table/big/exists", json!({})).await;
    assert_eq!(status, 404, "nothing was created");
    // Small bodies, one after another, each fit once the previous gave its share back.
    for i in 0..5 {
        server.create_table(&format!("small{i}"), 100).await;
    }
    // A body of unknown length is charged piece by piece and refused the same way. The client
    // may see the 503, or the connection closed while it is still sending (the server does
    // not read the rest of a body it refused): either way the refusal is counted.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..24).map(|_| Ok(vec![b' '; 64 * 1024])).collect();
    let r = server
        .client
        .post(server.url("/v1/namespace/$/list"))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await;
    if let Ok(r) = r {
        assert_slow_down(r, "too much request data").await;
    }
    let text = metrics_text(server).await;
    let refused = r#"lancet_overload_rejections_total{reason="body_memory",tenant="none"}"#;
    assert_eq!(metric(&text, refused), Some(2.0), "{text}");
    let (status, _) = server.post("/v1/namespace/$/list", json!({})).await;
    assert_eq!(status, 200);
}

/// A raw connection for clients that misbehave below HTTP.
fn raw(server: &Server) -> std::net::TcpStream {
    let addr = server.base.trim_start_matches("http://").to_string();
    let s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

#[tokio::test]
async fn stalled_clients_time_out_headers_and_bodies() {
    let server = Server::start_with(
        tempfile::tempdir().unwrap(),
        &[
            ("LANCET_HEADER_TIMEOUT_SECS", "1"),
            ("LANCET_BODY_TIMEOUT_SECS", "1"),
        ],
    )
    .await;
    let server = std::sync::Arc::new(server);
    let s = server.clone();
    tokio::task::spawn_blocking(move || {
        // Headers that never end: the connection is closed.
        let mut conn = raw(&s);
        let start = Instant::now();
        conn.write_all(b"POST /v1/namespace/$/list HTTP/1.1\r\nhost: x\r\n")
            .unwrap();
        let mut buf = Vec::new();
        let _ = conn.read_to_end(&mut buf);
        let waited = start.elapsed();
        assert!(waited < Duration::from_secs(10), "{waited:?}");

        // A body that stalls half-way: 408 in the spec's shape.
        let mut conn = raw(&s);
        let start = Instant::now();
        let head = format!(
            "POST /v1/namespace/$/list HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ADMIN_KEY}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"a\":"
        );
        conn.write_all(head.as_bytes()).unwrap();
        let mut buf = Vec::new();
        let _ = conn.read_to_end(&mut buf);
        let answer = String::from_utf8_lossy(&buf).to_string();
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("/errors/request-timeout"), "{answer}");
        assert!(start.elapsed() < Duration::from_secs(10));
    })
    .await
    .unwrap();
    // The server is fine.
    let (status, _) = server.post("/v1/namespace/$/list", json!({})).await;
    assert_eq!(status, 200);
}

/// `lancet_object_store_requests_total{op,area}` of a scrape, summed over both areas.
pub fn object_requests(text: &str, op: &str) -> u64 {
    ["tables", "server"]
        .iter()
        .map(|area| object_requests_in(text, op, area))
        .sum()
}

/// `lancet_object_store_requests_total{op,area}` of a scrape.
pub fn object_requests_in(text: &str, op: &str, area: &str) -> u64 {
    let needle = format!("lancet_object_store_requests_total{{op=\"{op}\",area=\"{area}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&needle))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {needle} in {text}"))
}

#[tokio::test]
async fn object_store_requests_are_counted_by_operation() {
    let server = Server::start().await;
    server.create_table("t", 10).await;
    let before = scrape(&server).await;
    let (put0, get0) = (
        object_requests(&before, "put"),
        object_requests(&before, "get"),
    );
    assert!(put0 > 0, "creating a table wrote objects: {before}");
    let (st, b) = server
        .post_arrow("/v1/table/t/insert", &sample(10, 5))
        .await;
    assert_eq!(st, 200, "{b}");
    let rows = server.query("t", json!({"limit": 100})).await;
    assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 15);
    let after = scrape(&server).await;
    assert!(
        object_requests(&after, "put") > put0,
        "an insert writes: {after}"
    );
    assert!(
        object_requests(&after, "get") > get0,
        "a query reads: {after}"
    );
    for op in ["head", "list", "delete", "copy", "rename", "multipart"] {
        object_requests(&after, op);
    }
}
