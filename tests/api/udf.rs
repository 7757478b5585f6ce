//! Virtual columns backed by the example Wasm plugins (built by plugins/build.sh).

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{Value, json};

use crate::common::*;

pub fn plugin(name: &str) -> Vec<u8> {
    let dir = std::env::var("LANCET_PLUGINS_DIR")
        .unwrap_or_else(|_| repo_path("plugins/target/wasm32-unknown-unknown/release"));
    let path = format!("{dir}/{name}.wasm");
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{path}: {e}; build the plugins first (bash plugins/build.sh, or run scripts/test.sh)"
        )
    })
}

fn virtual_column(name: &str, entry: &str, inputs: &[&str]) -> Value {
    let wasm = plugin(name);
    let packaged = lancet_udf::package(&wasm, entry, BTreeMap::new()).unwrap();
    json!({
        "input_columns": inputs,
        "udf": base64::engine::general_purpose::STANDARD.encode(&wasm),
        "udf_name": entry,
        "udf_backend": "wasm",
        "manifest": packaged.manifest_text,
        "manifest_checksum": packaged.manifest_checksum,
        "auto_backfill": true,
    })
}

#[tokio::test]
async fn virtual_column_defined_described_and_auto_backfilled() {
    let s = Server::start().await;
    s.create_table("v", 3).await;
    let v = s.ok("/v1/table/v/add_columns", json!({"new_columns": [{"name": "slug", "virtual_column": virtual_column("slugify", "slugify", &["text"])}]})).await;
    assert_eq!(v["version"], 2);
    let d = s.ok("/v1/table/v/describe", json!({})).await;
    assert_eq!(d["virtual_columns"]["slug"]["udf_name"], "slugify");
    assert_eq!(
        d["virtual_columns"]["slug"]["input_columns"],
        json!(["text"])
    );
    // Existing rows: null until a backfill; new rows: computed in the same commit.
    let (status, w) = s.post_arrow("/v1/table/v/insert", &sample(3, 2)).await;
    assert_eq!(status, 200, "{w}");
    assert_eq!(w["version"], 3);
    let rows = s
        .query("v", json!({"columns": ["id", "slug"], "filter": "id >= 1"}))
        .await;
    let mut pairs: Vec<(i64, Option<String>)> =
        ids(&rows).into_iter().zip(strings(&rows, "slug")).collect();
    pairs.sort();
    assert_eq!(
        pairs,
        vec![
            (1, None),
            (2, None),
            (3, Some("row-3".into())),
            (4, Some("row-4".into()))
        ]
    );
    // Time travel sees the definition current at each version.
    let d1 = s.ok("/v1/table/v/describe", json!({"version": 1})).await;
    assert_eq!(d1["virtual_columns"], json!({}));
}

#[tokio::test]
async fn multi_output_virtual_column() {
    let s = Server::start().await;
    s.create_table("e", 2).await;
    let mut vc = virtual_column("email_parts", "email_parts", &["text"]);
    vc["outputs"] = json!([
        {"column": "user", "struct_field": "user", "data_type": {"type": "utf8"}, "nullable": true},
        {"column": "domain", "struct_field": "domain", "data_type": {"type": "utf8"}, "nullable": true},
    ]);
    let v = s
        .ok(
            "/v1/table/e/add_columns",
            json!({"new_columns": [{"name": "parts", "virtual_column": vc}]}),
        )
        .await;
    assert_eq!(v["version"], 2, "both outputs in one commit");
    let d = s.ok("/v1/table/e/describe", json!({})).await;
    assert_eq!(
        d["virtual_columns"]["domain"]["group"],
        json!(["user", "domain"])
    );
    // Several outputs each name their field, once; dropping one sibling alone is refused.
    for (outputs, says) in [
        (
            json!([{"column": "u", "struct_field": "user", "data_type": {"type": "utf8"}},
                   {"column": "d", "struct_field": "", "data_type": {"type": "utf8"}}]),
            "output 'd' needs its struct_field",
        ),
        (
            json!([{"column": "u", "struct_field": "user", "data_type": {"type": "utf8"}},
                   {"column": "u", "struct_field": "domain", "data_type": {"type": "utf8"}}]),
            "name column 'u' or struct_field 'domain' twice",
        ),
    ] {
        vc["outputs"] = outputs;
        let (st, b) = s
            .post(
                "/v1/table/e/add_columns",
                json!({"new_columns": [{"name": "u", "virtual_column": vc}]}),
            )
            .await;
        assert_error(st, &b, 400, 13);
        assert!(b["detail"].as_str().unwrap().contains(says), "{b}");
    }
    let (st, b) = s
        .post("/v1/table/e/drop_columns", json!({"columns": ["user"]}))
        .await;
    assert_error(st, &b, 400, 13);
    assert!(b["detail"].as_str().unwrap().contains("'domain'"), "{b}");
    s.ok(
        "/v1/table/e/drop_columns",
        json!({"columns": ["user", "domain"]}),
    )
    .await;
    assert_eq!(s.version("e").await, 3);
}

#[tokio::test]
async fn bad_virtual_columns_leave_the_table_unchanged() {
    let s = Server::start().await;
    s.create_table("x", 3).await;
    let add = |vc: Value| json!({"new_columns": [{"name": "slug", "virtual_column": vc}]});
    let good = virtual_column("slugify", "slugify", &["text"]);

    let mut bad = good.clone();
    bad["manifest_checksum"] = json!("00".repeat(32));
    let (st, b) = s.post("/v1/table/x/add_columns", add(bad)).await;
    assert_error(st, &b, 400, 13);

    let mut bad = good.clone();
    bad["udf"] = json!("!!!not base64!!!");
    let (st, b) = s.post("/v1/table/x/add_columns", add(bad)).await;
    assert_error(st, &b, 400, 13);

    let mut bad = good.clone();
    bad["udf"] = json!(base64::engine::general_purpose::STANDARD.encode(b"definitely not wasm"));
    let (st, b) = s.post("/v1/table/x/add_columns", add(bad)).await;
    assert_error(st, &b, 400, 13);

    let mut bad = good.clone();
    bad["udf_backend"] = json!("docker");
    let (st, b) = s.post("/v1/table/x/add_columns", add(bad)).await;
    assert_error(st, &b, 400, 13);
    assert!(b["detail"].as_str().unwrap().contains("wasm"), "{b}");

    let mut bad = good.clone();
    bad["input_columns"] = json!(["nosuch"]);
    let (st, b) = s.post("/v1/table/x/add_columns", add(bad)).await;
    assert_error(st, &b, 400, 12);

    let mut bad = good.clone();
    bad["outputs"] = json!([{"column": "slug", "struct_field": "", "data_type": {"type": "int64"}, "nullable": true}]);
    let (st, b) = s.post("/v1/table/x/add_columns", add(bad)).await;
    assert_error(st, &b, 400, 13);

    for hostile in ["wasi_import", "unknown_import", "wrong_abi", "no_entry"] {
        let vc = virtual_column_raw(hostile, "udf", &["text"]);
        let (st, b) = s.post("/v1/table/x/add_columns", add(vc)).await;
        assert_error(st, &b, 400, 13);
    }
    assert_eq!(s.version("x").await, 1);
    assert_eq!(
        s.ok("/v1/table/x/describe", json!({})).await["virtual_columns"],
        json!({})
    );
}

/// A definition for a module `package` would refuse: the manifest is written by hand.
fn virtual_column_raw(name: &str, entry: &str, inputs: &[&str]) -> Value {
    let wasm = plugin(name);
    let manifest = json!({"abi": "lancet-udf/1", "module_sha256": lancet_udf::sha256_hex(&wasm), "module_size": wasm.len(), "entry": entry}).to_string();
    json!({
        "input_columns": inputs,
        "udf": base64::engine::general_purpose::STANDARD.encode(&wasm),
        "manifest_checksum": lancet_udf::sha256_hex(manifest.as_bytes()),
        "manifest": manifest,
    })
}

fn misbehaving(entry: &str, inputs: &[&str], auto_backfill: bool) -> Value {
    let wasm = plugin("misbehave");
    let packaged = lancet_udf::package(&wasm, entry, BTreeMap::new()).unwrap();
    json!({
        "input_columns": inputs,
        "udf": base64::engine::general_purpose::STANDARD.encode(&wasm),
        "manifest": packaged.manifest_text,
        "manifest_checksum": packaged.manifest_checksum,
        "auto_backfill": auto_backfill,
    })
}

#[tokio::test]
async fn hostile_guests_are_stopped_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_with(
        dir,
        &[
            ("LANCET_UDF_TIMEOUT_MS", "1000"),
            ("LANCET_UDF_MEMORY_MB", "64"),
            ("LANCET_UDF_MAX_OUTPUT_MB", "1"),
        ],
    )
    .await;
    s.create_table("h", 3).await;

    // Runaway guests misbehave even on the zero-row dry run: rejected at definition, with the
    // UDF named, while another request is answered meanwhile.
    for entry in [
        "spin",
        "bomb",
        "recurse",
        "wrong_rows",
        "trap",
        "panics",
        "guest_error",
    ] {
        let add = async {
            let r = s.post("/v1/table/h/add_columns", json!({"new_columns": [{"name": "bad", "virtual_column": misbehaving(entry, &["id"], false)}]})).await;
            (r, std::time::Instant::now())
        };
        let other = async {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let n = s.count("h", json!({})).await;
            (n, std::time::Instant::now())
        };
        let (((st, body), add_done), (n, other_done)) = tokio::join!(add, other);
        assert_error(st, &body, 400, 13);
        assert!(
            body["detail"].as_str().unwrap().contains(entry),
            "{entry}: error does not name the UDF: {body}"
        );
        assert_eq!(n, 3);
        if entry == "spin" {
            assert!(
                other_done < add_done,
                "the server stopped answering while the guest spun"
            );
        }
    }
    assert_eq!(s.version("h").await, 1);

    // Failures at run time: the write fails, naming the UDF, and changes nothing.
    s.ok("/v1/table/h/add_columns", json!({"new_columns": [{"name": "checked", "virtual_column": misbehaving("fail_negative", &["id"], true)}]})).await;
    s.ok("/v1/table/h/add_columns", json!({"new_columns": [{"name": "big", "virtual_column": misbehaving("huge_output", &["text"], false)}]})).await;
    assert_eq!(s.version("h").await, 3);
    let (st, body) = s.post_arrow("/v1/table/h/insert", &sample(-5, 2)).await;
    assert_error(st, &body, 400, 13);
    assert!(
        body["detail"].as_str().unwrap().contains("fail_negative"),
        "{body}"
    );
    assert_eq!(s.version("h").await, 3);
    assert_eq!(s.count("h", json!({})).await, 3);
    let (st, body) = s.post_arrow("/v1/table/h/insert", &sample(10, 1)).await;
    assert_eq!(st, 200, "{body}");
    let rows = s
        .query(
            "h",
            json!({"columns": ["id", "checked"], "filter": "id = 10"}),
        )
        .await;
    let checked = rows[0].column_by_name("checked").unwrap();
    assert_eq!(
        arrow_cast::display::array_value_to_string(checked, 0).unwrap(),
        "10"
    );

    // An auto-backfilled column whose UDF returns more than the output cap.
    let vc = misbehaving("huge_output", &["text"], true);
    s.ok("/v1/table/h/drop_columns", json!({"columns": ["big"]}))
        .await;
    s.ok(
        "/v1/table/h/add_columns",
        json!({"new_columns": [{"name": "big", "virtual_column": vc}]}),
    )
    .await;
    let before = s.version("h").await;
    let (st, body) = s.post_arrow("/v1/table/h/insert", &sample(20, 1)).await;
    assert_error(st, &body, 400, 13);
    assert!(
        body["detail"].as_str().unwrap().contains("huge_output"),
        "{body}"
    );
    assert_eq!(s.version("h").await, before);
}

#[tokio::test]
async fn udf_limits_and_instances_are_per_tenant() {
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("_auth")).unwrap();
    std::fs::write(
        data.path().join("_auth/auth.toml"),
        "[tenants.tight.udf]\ntimeout_ms = 300\nmax_rows_per_call = 1\n",
    )
    .unwrap();
    let s = Server::start_with(data, &[]).await;
    let mut calls = BTreeMap::new();
    for tenant in ["tight", "roomy"] {
        let h = s.with_key(&s.new_key(tenant, "write", &[]).await);
        let (status, v) = h.post_arrow("/v1/table/t/create", &sample(0, 2)).await;
        assert_eq!(status, 200, "{v}");
        let vc = virtual_column("misbehave", "count_calls", &["id"]);
        let v = h
            .ok(
                "/v1/table/t/add_columns",
                json!({"new_columns": [{"name": "calls", "virtual_column": vc}]}),
            )
            .await;
        assert_eq!(v["version"], 2);
        let (status, v) = h.post_arrow("/v1/table/t/insert", &sample(2, 3)).await;
        assert_eq!(status, 200, "{v}");
        let rows = h
            .query(
                "t",
                json!({"columns": ["id", "calls"], "filter": "id >= 2"}),
            )
            .await;
        let mut pairs: Vec<(i64, i64)> = Vec::new();
        for b in &rows {
            let id = b
                .column_by_name("id")
                .unwrap()
                .as_any()
                .downcast_ref::<arrow_array::Int64Array>()
                .unwrap();
            let c = b
                .column_by_name("calls")
                .unwrap()
                .as_any()
                .downcast_ref::<arrow_array::Int64Array>()
                .unwrap();
            pairs.extend((0..b.num_rows()).map(|i| (id.value(i), c.value(i))));
        }
        pairs.sort();
        calls.insert(
            tenant,
            pairs.into_iter().map(|(_, c)| c).collect::<Vec<_>>(),
        );
    }
    // tight: one row per call, on one reused instance (1, 2, 3); roomy: all rows in one call on
    // an instance of its own (tight's calls did not advance it).
    assert_eq!(calls["tight"], vec![1, 2, 3]);
    assert_eq!(calls["roomy"], vec![1, 1, 1]);

    // tight's time limit is its own: a spinning UDF fails at 300 ms of CPU, naming the limit.
    let h = s.with_key(&s.new_key("tight", "write", &[]).await);
    let vc = virtual_column("misbehave", "spin", &["id"]);
    let (status, v) = h
        .post(
            "/v1/table/t/add_columns",
            json!({"new_columns": [{"name": "spun", "virtual_column": vc}]}),
        )
        .await;
    if status == 200 {
        let started = std::time::Instant::now();
        let (status, v) = h.post_arrow("/v1/table/t/insert", &sample(10, 1)).await;
        assert_eq!(status, 400, "{v}");
        let detail = v["detail"].as_str().unwrap();
        assert!(detail.contains("300"), "{detail}");
        eprintln!("tight tenant's spin stopped after {:?}", started.elapsed());
        assert_eq!(h.count("t", json!({})).await, 5);
    } else {
        // Defining it already ran the UDF (zero rows) and was refused: also acceptable.
        assert_eq!(status, 400, "{v}");
    }
}
