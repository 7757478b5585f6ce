//! Python UDFs through the REST API: the spec's own payload (`udf` = base64 Python source,
//! `udf_name`, `image` "python:3.X"), backfilled, auto-backfilled and described, and the
//! definition errors Python's own messages make.

use base64::Engine;
use serde_json::{Value, json};

use crate::common::*;
use crate::jobs::int_pairs;

fn b64(source: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(source)
}

fn python_column(source: &str, name: &str, inputs: &[&str]) -> Value {
    json!({
        "input_columns": inputs,
        "udf": b64(source),
        "udf_name": name,
        "udf_version": "1",
        "image": "python:3.11-slim",
    })
}

async fn add(s: &Handle, table: &str, column: &str, vc: Value) -> (u16, Value) {
    s.post(
        &format!("/v1/table/{table}/add_columns"),
        json!({"new_columns": [{"name": column, "virtual_column": vc}]}),
    )
    .await
}

#[tokio::test]
async fn the_seed_payload_is_backfilled_with_f_of_every_row() {
    let s = Server::start().await;
    let (st, b) = s.post_arrow("/v1/table/p/create", &sample(0, 500)).await;
    assert_eq!(st, 200, "{b}");
    let mut vc = python_column("def doubled(id):\n    return id * 2\n", "doubled", &["id"]);
    vc["outputs"] =
        json!([{"column": "doubled", "data_type": {"type": "int64"}, "nullable": true}]);
    let (st, b) = add(&s, "p", "doubled", vc).await;
    assert_eq!(st, 200, "{b}");
    let d = s.ok("/v1/table/p/describe", json!({})).await;
    let def = &d["virtual_columns"]["doubled"];
    assert_eq!(def["udf_backend"], "python", "{def}");
    assert_eq!(def["udf_name"], "doubled");
    assert_eq!(def["python"]["requested_version"], "3.11");
    assert!(
        def["python"]["python_version"]
            .as_str()
            .unwrap()
            .starts_with("3."),
        "{def}"
    );

    let job = s.backfill("p", json!({"column": "doubled"})).await;
    let done = s.wait_job(&job).await;
    assert_eq!(done["job_state"], "DONE", "{done}");
    let rows = s
        .query("p", json!({"columns": ["id", "doubled"], "limit": 1000}))
        .await;
    let pairs = int_pairs(&rows, "doubled");
    assert_eq!(pairs.len(), 500);
    for (id, v) in pairs {
        assert_eq!(v, Some(id * 2), "id {id}");
    }
}

#[tokio::test]
async fn an_annotated_function_needs_no_outputs_and_computes_on_write() {
    let s = Server::start().await;
    s.create_table("a", 3).await;
    let source = "import re\n\ndef slug(text: str) -> str:\n    return re.sub(r'[^a-z0-9]+', '-', text.lower())\n";
    let mut vc = python_column(source, "slug", &["text"]);
    vc["auto_backfill"] = json!(true);
    let (st, b) = add(&s, "a", "slug", vc).await;
    assert_eq!(st, 200, "{b}");
    let (st, w) = s.post_arrow("/v1/table/a/insert", &sample(10, 2)).await;
    assert_eq!(st, 200, "{w}");
    let rows = s
        .query(
            "a",
            json!({"columns": ["id", "slug"], "filter": "id >= 10"}),
        )
        .await;
    let mut got: Vec<(i64, Option<String>)> =
        ids(&rows).into_iter().zip(strings(&rows, "slug")).collect();
    got.sort();
    assert_eq!(
        got,
        vec![(10, Some("row-10".into())), (11, Some("row-11".into()))]
    );
}

#[tokio::test]
async fn failing_rows_are_null_and_listed_under_on_error_null() {
    let s = Server::start().await;
    let (st, b) = s.post_arrow("/v1/table/f/create", &sample(-3, 10)).await;
    assert_eq!(st, 200, "{b}");
    let source = "def inverse(id: int) -> int:\n    return 100 // id\n";
    let manifest = json!({"on_error": "null"}).to_string();
    let mut vc = python_column(source, "inverse", &["id"]);
    vc["manifest"] = json!(manifest);
    vc["manifest_checksum"] = json!(lancet_udf::sha256_hex(manifest.as_bytes()));
    let (st, b) = add(&s, "f", "inverse", vc).await;
    assert_eq!(st, 200, "{b}");
    let job = s.backfill("f", json!({"column": "inverse"})).await;
    let d = s.wait_job(&job).await;
    assert_eq!(d["job_state"], "DONE", "{d}");
    assert_eq!(d["result"]["rows_nulled"], 1, "{d}");
    let rows = s
        .query("f", json!({"columns": ["id", "inverse"], "limit": 100}))
        .await;
    for (id, v) in int_pairs(&rows, "inverse") {
        // Python floors: 100 // -3 == -34.
        let floor = |id: i64| (100.0 / id as f64).floor() as i64;
        assert_eq!(v, (id != 0).then(|| floor(id)), "id {id}");
    }
    let errs = s.ok("/v1/table/f/errors", json!({})).await;
    let recs = errs["records"].as_array().unwrap();
    assert_eq!(recs.len(), 1, "{errs}");
    assert_eq!(recs[0]["row_offset"], 3, "{errs}");
    let message = recs[0]["error_message"].as_str().unwrap();
    assert!(
        message.contains("ZeroDivisionError: division by zero (line 2)"),
        "{message}"
    );

    // Without on_error the first failing row fails the job, with Python's message.
    let mut vc = python_column(source, "inverse", &["id"]);
    vc["outputs"] = json!([{"column": "strict", "data_type": {"type": "int64"}, "nullable": true}]);
    let (st, b) = add(&s, "f", "strict", vc).await;
    assert_eq!(st, 200, "{b}");
    let job = s.backfill("f", json!({"column": "strict"})).await;
    let d = s.wait_job(&job).await;
    assert_eq!(d["job_state"], "FAILED", "{d}");
    assert!(d.to_string().contains("ZeroDivisionError"), "{d}");
}

#[tokio::test]
async fn bad_definitions_are_400s_with_pythons_message() {
    let s = Server::start().await;
    s.create_table("b", 2).await;
    let cases = [
        (
            python_column("def f(id):\n    return id +\n", "f", &["id"]),
            "SyntaxError",
        ),
        (
            python_column("def f(id) -> int:\n    return id\n", "g", &["id"]),
            "defines no 'g'",
        ),
        (
            python_column("def f(id):\n    return id\n", "f", &["id"]),
            "annotate the function's return type",
        ),
        (
            python_column("def f(a, b) -> int:\n    return a\n", "f", &["id"]),
            "takes (a, b)",
        ),
        (
            {
                let mut v = python_column("def f(id) -> int:\n    return id\n", "f", &["id"]);
                v["image"] = json!("ubuntu:22.04");
                v
            },
            "ubuntu:22.04",
        ),
        (
            {
                let mut v = python_column("def f(id) -> int:\n    return id\n", "f", &["id"]);
                v["udf"] = json!(base64::engine::general_purpose::STANDARD.encode([0xff, 0xfe]));
                v
            },
            "not UTF-8",
        ),
        (
            {
                let mut v = python_column("def f(id) -> int:\n    return id\n", "f", &["id"]);
                v["udf_backend"] = json!("docker");
                v
            },
            "udf_backend 'docker'",
        ),
    ];
    for (vc, expect) in cases {
        let (st, b) = add(&s, "b", "c", vc).await;
        assert_error(st, &b, 400, 13);
        assert!(b.to_string().contains(expect), "{expect}: {b}");
    }
    // Nothing was added by any of them.
    let d = s.ok("/v1/table/b/describe", json!({})).await;
    assert_eq!(d["version"], 1, "{d}");
}

#[tokio::test]
async fn altering_swaps_the_source_and_switches_language() {
    let s = Server::start().await;
    let (st, b) = s.post_arrow("/v1/table/al/create", &sample(0, 20)).await;
    assert_eq!(st, 200, "{b}");
    let vc = python_column("def f(id) -> int:\n    return id + 1\n", "f", &["id"]);
    let (st, b) = add(&s, "al", "c", vc).await;
    assert_eq!(st, 200, "{b}");
    // New source, same function name: only `udf` is sent.
    let v = s
        .ok(
            "/v1/table/al/alter_columns",
            json!({"alterations": [{"path": "c", "virtual_column": {
                "udf": b64("def f(id) -> int:\n    return id * 10\n")}}]}),
        )
        .await;
    assert_eq!(v["version"], 3, "{v}");
    let job = s.backfill("al", json!({"column": "c"})).await;
    assert_eq!(s.wait_job(&job).await["job_state"], "DONE");
    let rows = s
        .query("al", json!({"columns": ["id", "c"], "limit": 100}))
        .await;
    for (id, v) in int_pairs(&rows, "c") {
        assert_eq!(v, Some(id * 10), "id {id}");
    }
    // A new source that no longer fits the column is refused and changes nothing.
    let (st, b) = s
        .post(
            "/v1/table/al/alter_columns",
            json!({"alterations": [{"path": "c", "virtual_column": {
                "udf": b64("def f(id) -> int:\n    return id +\n")}}]}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    assert!(b.to_string().contains("SyntaxError"), "{b}");
    // Switching to Wasm: the Wasm fields replace the Python ones whole.
    let wasm = crate::udf::plugin("identity_i64");
    let packaged =
        lancet_udf::package(&wasm, "identity_i64", std::collections::BTreeMap::new()).unwrap();
    let v = s
        .ok(
            "/v1/table/al/alter_columns",
            json!({"alterations": [{"path": "c", "virtual_column": {
                "udf_backend": "wasm",
                "udf": base64::engine::general_purpose::STANDARD.encode(&wasm),
                "manifest": packaged.manifest_text,
                "manifest_checksum": packaged.manifest_checksum}}]}),
        )
        .await;
    assert_eq!(v["version"], 5, "{v}"); // 4 was the backfill's commit
    let d = s.ok("/v1/table/al/describe", json!({})).await;
    assert_eq!(d["virtual_columns"]["c"]["udf_backend"], "wasm", "{d}");
    assert!(d["virtual_columns"]["c"].get("python").is_none(), "{d}");
}

#[tokio::test]
async fn a_backfill_at_an_older_read_version_computes_with_the_current_udf() {
    let s = Server::start().await;
    let (st, b) = s.post_arrow("/v1/table/rv/create", &sample(0, 20)).await;
    assert_eq!(st, 200, "{b}");
    let vc = python_column("def f(id) -> int:\n    return id + 1\n", "f", &["id"]);
    let (st, b) = add(&s, "rv", "c", vc).await;
    assert_eq!(st, 200, "{b}");
    let before = s.ok("/v1/table/rv/describe", json!({})).await["version"].clone();
    s.ok(
        "/v1/table/rv/alter_columns",
        json!({"alterations": [{"path": "c", "virtual_column": {
            "udf": b64("def f(id) -> int:\n    return id * 10\n")}}]}),
    )
    .await;
    // The inputs are read at `read_version` (before the alter, as a client that has not
    // re-read the table sends it); the UDF is the column's definition when the job is asked
    // for, not the one `read_version` had.
    let job = s
        .backfill("rv", json!({"column": "c", "read_version": before}))
        .await;
    let d = s.wait_job(&job).await;
    assert_eq!(d["job_state"], "DONE", "{d}");
    assert_eq!(d["spec"]["read_version"], before);
    let rows = s
        .query("rv", json!({"columns": ["id", "c"], "limit": 100}))
        .await;
    for (id, v) in int_pairs(&rows, "c") {
        assert_eq!(v, Some(id * 10), "id {id}");
    }
}

#[tokio::test]
async fn a_hostile_python_function_is_contained_per_tenant() {
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("_auth")).unwrap();
    std::fs::write(
        data.path().join("_auth/auth.toml"),
        "[tenants.mallory.udf]\ntimeout_ms = 300\n",
    )
    .unwrap();
    let s = Server::start_with(data, &[]).await;
    let mallory = s.with_key(&s.new_key("mallory", "write", &[]).await);
    let alice = s.with_key(&s.new_key("alice", "write", &[]).await);
    for h in [&mallory, &alice] {
        let (st, b) = h.post_arrow("/v1/table/t/create", &sample(0, 50)).await;
        assert_eq!(st, 200, "{b}");
    }
    let spin = python_column(
        "def spin(id) -> int:\n    while True:\n        pass\n",
        "spin",
        &["id"],
    );
    let (st, b) = add(&mallory, "t", "spin", spin).await;
    assert_eq!(st, 200, "{b}");
    let job = mallory.backfill("t", json!({"column": "spin"})).await;
    let ok = python_column("def inc(id) -> int:\n    return id + 1\n", "inc", &["id"]);
    let (st, b) = add(&alice, "t", "inc", ok).await;
    assert_eq!(st, 200, "{b}");
    let theirs = alice.backfill("t", json!({"column": "inc"})).await;
    let d = mallory.wait_job(&job).await;
    assert_eq!(d["job_state"], "FAILED", "{d}");
    assert!(d.to_string().contains("time limit"), "{d}");
    let d = alice.wait_job(&theirs).await;
    assert_eq!(d["job_state"], "DONE", "{d}");
    let rows = alice
        .query("t", json!({"columns": ["id", "inc"], "limit": 100}))
        .await;
    for (id, v) in int_pairs(&rows, "inc") {
        assert_eq!(v, Some(id + 1), "id {id}");
    }
}
