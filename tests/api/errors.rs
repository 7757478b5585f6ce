use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use serde_json::json;

use crate::common::*;

/// After every rejected write, the table's version and rows are unchanged.
async fn unchanged(s: &Server, table: &str, version: u64, rows: u64) {
    assert_eq!(
        s.version(table).await,
        version,
        "a rejected write changed the version"
    );
    assert_eq!(
        s.count(table, json!({})).await,
        rows,
        "a rejected write changed the rows"
    );
}

#[tokio::test]
async fn not_found_everywhere() {
    let s = Server::start().await;
    s.create_table("t", 3).await;
    let (st, b) = s.post("/v1/table/nope/describe", json!({})).await;
    assert_error(st, &b, 404, 4);
    let (st, b) = s.post("/v1/table/ghost$nope/count_rows", json!({})).await;
    assert_error(st, &b, 404, 4);
    let (st, b) = s.post("/v1/namespace/ghost/describe", json!({})).await;
    assert_error(st, &b, 404, 1);
    let (st, b) = s
        .post("/v1/table/t/count_rows", json!({"branch": "nobranch"}))
        .await;
    assert_error(st, &b, 404, 22);
    let (st, b) = s
        .post("/v1/table/t/count_rows", json!({"version": 42}))
        .await;
    assert_error(st, &b, 404, 11);
    let (st, b) = s
        .post("/v1/table/t/tags/version", json!({"tag": "none"}))
        .await;
    assert_error(st, &b, 404, 8);
    assert_eq!(b["instance"], "/v1/table/t/tags/version");
    assert_eq!(b["type"], "/errors/not-found-error");
    // The title is the status's (Part 7); what was not found is in the detail.
    assert_eq!(b["title"], "Not found Error");
    assert!(b["detail"].as_str().unwrap().contains("none"), "{b}");
}

#[tokio::test]
async fn bad_paths_and_sql() {
    let s = Server::start().await;
    s.create_table("t", 3).await;
    let (st, b) = s
        .post(
            "/v1/table/t/alter_columns",
            json!({"alterations": [{"path": "a.`b", "rename": "x"}]}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    let (st, b) = s
        .post(
            "/v1/table/t/alter_columns",
            json!({"alterations": [{"path": "nosuch", "rename": "x"}]}),
        )
        .await;
    assert_error(st, &b, 400, 12);
    let (st, b) = s
        .post("/v1/table/t/drop_columns", json!({"columns": ["nosuch"]}))
        .await;
    assert_error(st, &b, 400, 12);
    let (st, b) = s
        .post("/v1/table/t/count_rows", json!({"predicate": "id >>>= 3"}))
        .await;
    assert_eq!(st, 400, "{b}");
    let (st, b) = s
        .post("/v1/table/t/delete", json!({"predicate": "id = = 1"}))
        .await;
    assert_eq!(st, 400, "{b}");
    let (st, b) = s
        .post("/v1/table/t/update", json!({"updates": [["id", "id +"]]}))
        .await;
    assert_eq!(st, 400, "{b}");
    let (st, b) = s
        .post(
            "/v1/table/t/add_columns",
            json!({"new_columns": [{"name": "z", "expression": "nosuch + 1"}]}),
        )
        .await;
    assert!(st == 400 || st == 404, "{st} {b}");
    unchanged(&s, "t", 1, 3).await;
}

#[tokio::test]
async fn bad_bodies_leave_table_unchanged() {
    let s = Server::start().await;
    s.create_table("t", 3).await;
    // Arrow schema that does not match the table.
    let other = Arc::new(Schema::new(vec![Field::new(
        "other",
        DataType::Int64,
        false,
    )]));
    let batch = RecordBatch::try_new(other, vec![Arc::new(Int64Array::from(vec![1, 2]))]).unwrap();
    let (st, b) = s.post_arrow("/v1/table/t/insert", &batch).await;
    assert_eq!(st, 400, "{b}");
    let (st, b) = s.post_arrow("/v1/table/t/merge_insert?on=id", &batch).await;
    assert!(st == 400 || st == 404, "{st} {b}");
    // Truncated and non-Arrow bodies.
    let bytes = ipc_stream(&sample(0, 5));
    let (st, b) = s
        .post_bytes("/v1/table/t/insert", bytes[..bytes.len() / 2].to_vec())
        .await;
    assert_error(st, &b, 400, 13);
    let (st, b) = s
        .post_bytes("/v1/table/t/insert", b"hello, not arrow".to_vec())
        .await;
    assert_error(st, &b, 400, 13);
    let (st, b) = s.post_bytes("/v1/table/t/merge_insert?on=id", vec![]).await;
    assert_error(st, &b, 400, 13);
    let (st, b) = s
        .post_arrow("/v1/table/t/merge_insert", &sample(0, 1))
        .await;
    assert_error(st, &b, 400, 13);
    let (st, b) = s
        .post_arrow("/v1/table/t/insert?mode=sideways", &sample(0, 1))
        .await;
    assert_error(st, &b, 400, 13);
    // Body id disagreeing with the path.
    let (st, b) = s
        .post(
            "/v1/table/t/delete",
            json!({"id": ["other"], "predicate": "true"}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    // Malformed JSON.
    let r = s
        .client
        .post(s.url("/v1/table/t/delete"))
        .header("content-type", "application/json")
        .body("{\"predicate\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_error(400, &body, 400, 13);
    unchanged(&s, "t", 1, 3).await;
}

#[tokio::test]
async fn unknown_routes_methods_and_oversize_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_with(dir, &[("LANCET_MAX_BODY_MB", "1")]).await;
    s.create_table("t", 3).await;
    let (st, b) = s.post("/v1/table/t/frobnicate", json!({})).await;
    assert_eq!(st, 404);
    assert_eq!(b["type"], "/errors/not-found-error");
    let (st, b) = s.get("/v1/table/t/describe").await;
    assert_eq!(st, 405);
    assert!(b["type"].as_str().unwrap().starts_with("/errors/"), "{b}");
    let big = ipc_stream(&sample(0, 40_000));
    assert!(big.len() > 1024 * 1024);
    let (st, b) = s.post_bytes("/v1/table/t/insert", big).await;
    assert_eq!(st, 413, "{b}");
    assert_eq!(b["status"], 413);
    // Trailing slashes are ignored.
    let (st, _) = s.post("/v1/table/t/count_rows/", json!({})).await;
    assert_eq!(st, 200);
    unchanged(&s, "t", 1, 3).await;
    let (st, _) = s.get("/healthz").await;
    assert_eq!(st, 200);
}
