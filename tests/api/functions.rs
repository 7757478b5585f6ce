//! lancedb's Function registry and secrets over HTTP, as the 0.40 client sends them: secrets
//! sealed under the server key, `create_function` as a build job, the registry's answers, and
//! a Function-backed column declared, refreshed and checked value by value.

use base64::Engine;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::common::*;

const SECRET_KEY: &str = "api-tests-secret-key-0123456789";

/// A server with a secret key, and its data directory.
async fn server_at() -> (Server, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let s = Server::start_with(dir, &[("LANCET_SECRET_KEY", SECRET_KEY)]).await;
    (s, path)
}

pub async fn server() -> Server {
    server_at().await.0
}

/// A registration as `lancedb.udf` builds it for `source`'s `entry`.
pub fn registration(source: &str, entry: &str, inputs: Value, output: Value) -> Value {
    json!({
        "artifact": {
            "kind": "python_callable",
            "digest": format!("sha256:{}", hex::encode(Sha256::digest(source.as_bytes()))),
            "entrypoint": entry,
            "content": {
                "encoding": "base64",
                "data": base64::engine::general_purpose::STANDARD.encode(source),
            },
            "adapter": {"kind": "scalar_to_arrow_batch", "version": 1},
        },
        "signature": {"inputs": inputs, "output": output},
        "runtime": {"kind": "python", "python_version": "3.11", "environment": {"kind": "pip"}},
    })
}

/// Register and wait for the build; the job's description.
pub async fn build(s: &Handle, id: &str, body: Value) -> Value {
    let v = s.ok(&format!("/v1/function/{id}/create"), body).await;
    s.wait_job(v["job_id"].as_str().expect("job_id")).await
}

#[tokio::test]
async fn secrets_are_sealed_rotated_listed_and_never_returned() {
    let (s, data) = server_at().await;
    s.ok("/v1/secret/openai/create", json!({"value": "sk-live-1"}))
        .await;
    let d = s.ok("/v1/secret/openai/describe", json!({})).await;
    assert_eq!(d["name"], "openai");
    assert!(d.get("value").is_none(), "{d}");
    let created = d["created_at_millis"].as_i64().unwrap();
    s.ok("/v1/secret/openai/alter", json!({"value": "sk-live-2"}))
        .await;
    let d = s.ok("/v1/secret/openai/describe", json!({})).await;
    assert!(d["updated_at_millis"].as_i64().unwrap() > created, "{d}");
    s.ok("/v1/namespace/team/create", json!({})).await;
    s.ok("/v1/secret/team$db/create", json!({"value": "x"}))
        .await;
    let l = s.ok("/v1/namespace/$/secret/list", json!({})).await;
    assert_eq!(l["secrets"], json!([{"name": "openai"}]), "{l}");
    let l = s.ok("/v1/namespace/team/secret/list", json!({})).await;
    assert_eq!(l["secrets"], json!([{"name": "db"}]), "{l}");

    let (st, b) = s
        .post("/v1/secret/openai/create", json!({"value": "again"}))
        .await;
    assert_eq!(st, 409, "{b}");
    for (path, body, status, needle) in [
        (
            "/v1/secret/nope/alter",
            json!({"value": "v"}),
            404,
            "does not exist",
        ),
        (
            "/v1/secret/a%20b/create",
            json!({"value": "v"}),
            400,
            "invalid secret name",
        ),
        (
            "/v1/secret/x/create",
            json!({"value": "v", "ttl": 3}),
            400,
            "ttl",
        ),
        ("/v1/secret/x/create", json!({}), 400, "value is required"),
    ] {
        let (st, b) = s.post(path, body).await;
        assert_eq!(st, status, "{path}: {b}");
        assert!(
            b["detail"].as_str().unwrap().contains(needle),
            "{path}: {b}"
        );
    }
    s.ok("/v1/secret/openai/drop", json!({})).await;
    let (st, _) = s.post("/v1/secret/openai/describe", json!({})).await;
    assert_eq!(st, 404);
    // Sealed at rest: no stored byte holds the values.
    for entry in walk(&data) {
        let bytes = std::fs::read(&entry).unwrap();
        for value in [b"sk-live-1".as_slice(), b"sk-live-2"] {
            assert!(
                !bytes.windows(value.len()).any(|w| w == value),
                "{entry:?} holds a secret"
            );
        }
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test]
async fn without_a_server_key_secrets_are_refused_with_the_reason() {
    let s = Server::start().await;
    let (st, b) = s
        .post("/v1/secret/openai/create", json!({"value": "v"}))
        .await;
    assert_error(st, &b, 400, 13);
    assert!(
        b["detail"].as_str().unwrap().contains("--secret-key"),
        "{b}"
    );
}

#[tokio::test]
async fn registrations_are_checked_built_listed_and_dropped() {
    let s = server().await;
    let src = "def tripled(x):\n    return x * 3 + 1\n";
    let scalar = json!({"kind": "scalar", "arrow_type": "int64", "nullable": false});
    let x = json!([{"name": "x", "arrow_type": "int64", "nullable": false}]);
    let good = registration(src, "tripled", x.clone(), scalar.clone());

    let mut bad_digest = good.clone();
    bad_digest["artifact"]["digest"] = json!("sha256:00");
    let mut pip = good.clone();
    pip["runtime"]["environment"]["packages"] = json!(["numpy==2.2.0"]);
    let mut gpu = good.clone();
    gpu["runtime"]["kind"] = json!("python_v2");
    let mut unknown = good.clone();
    unknown["artifact"]["signing_key"] = json!("k");
    let mut missing_secret = good.clone();
    missing_secret["secret_bindings"] =
        json!([{"kind": "env", "variable": "K", "secret_ref": {"name": "absent"}}]);
    let huge = registration(
        &format!("def tripled(x):\n    return x\n# {}\n", "x".repeat(2 << 20)),
        "tripled",
        x.clone(),
        scalar.clone(),
    );
    let mut not_utf8 = good.clone();
    not_utf8["artifact"]["content"]["data"] = json!("/w==");
    not_utf8["artifact"]["digest"] =
        json!(format!("sha256:{}", hex::encode(Sha256::digest([0xffu8]))));
    let bundle = |files: Value| {
        let text = files.to_string();
        let mut b = registration(&text, "tripled", x.clone(), scalar.clone());
        b["artifact"]["kind"] = json!("python_bundle");
        b
    };
    let escaping = bundle(json!({"files": {"user_function.py": src, "../up.py": ""}}));
    let no_entry = bundle(json!({"files": {"helpers.py": src}}));
    let not_a_bundle = bundle(json!({"modules": {}}));
    for (body, needle) in [
        (escaping, "not a relative file path"),
        (no_entry, "no user_function.py"),
        (not_a_bundle, "not a python_bundle"),
        (huge, "over the limit"),
        (not_utf8, "not UTF-8"),
        (bad_digest, "does not match the content"),
        (pip, "--package-index"),
        (gpu, "gpu"),
        (unknown, "signing_key"),
        (missing_secret, "'absent'"),
    ] {
        let (st, b) = s.post("/v1/function/tripled/create", body).await;
        assert_error(st, &b, 400, 13);
        assert!(
            b["detail"].as_str().unwrap().contains(needle),
            "{needle}: {b}"
        );
    }

    // Python's own errors fail the build job.
    let broken = registration(
        "def tripled(x)\n    return x\n",
        "tripled",
        x.clone(),
        scalar.clone(),
    );
    let done = build(&s, "tripled", broken).await;
    assert_eq!(done["job_state"], "FAILED", "{done}");
    assert!(done.to_string().contains("SyntaxError"), "{done}");
    let wrong = registration(
        "def tripled(y):\n    return y\n",
        "tripled",
        x.clone(),
        scalar.clone(),
    );
    let done = build(&s, "tripled", wrong).await;
    assert_eq!(done["job_state"], "FAILED", "{done}");
    assert!(done.to_string().contains("declares inputs (x)"), "{done}");

    let done = build(&s, "tripled", good.clone()).await;
    assert_eq!(done["job_state"], "DONE", "{done}");
    let v = &done["result"];
    assert_eq!(v["name"], "tripled");
    assert_eq!(v["version"], "1");
    assert_eq!(v["image"]["manifest_digest"], good["artifact"]["digest"]);
    // The same registration again: the same version.
    let again = build(&s, "tripled", good.clone()).await;
    assert_eq!(again["result"]["version"], "1", "{again}");
    let d = s
        .ok("/v1/function/tripled/describe", json!({"version": "1"}))
        .await;
    assert_eq!(d["object_id"], v["object_id"]);
    assert!(
        d.get("source").is_none() && !d.to_string().contains("x * 3"),
        "{d}"
    );
    let l = s
        .ok(
            "/v1/namespace/$/function/list?include_definition=true",
            json!({}),
        )
        .await;
    assert_eq!(l["functions"].as_array().unwrap().len(), 1, "{l}");
    assert_eq!(l["functions"][0]["definition"]["version"], "1");

    let (st, b) = s
        .post("/v1/function/tripled/describe", json!({"version": "7"}))
        .await;
    assert_eq!(st, 404, "{b}");
    let dropped = s
        .ok("/v1/function/tripled/drop", json!({"version": "1"}))
        .await;
    assert_eq!(dropped["dropped"], true);
    let cleanup = s.wait_job(dropped["job_id"].as_str().unwrap()).await;
    assert_eq!(cleanup["job_state"], "DONE", "{cleanup}");
    let again = s
        .ok("/v1/function/tripled/drop", json!({"version": "1"}))
        .await;
    assert_eq!(again["dropped"], false);
}
