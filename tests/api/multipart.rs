//! Multipart writes (the lancedb client's large inserts): parts staged, invisible until
//! `complete`, committed as one version; retries and aborts; parts through two replicas.

use serde_json::{Value, json};

use crate::common::*;

async fn begin(s: &Server, table: &str) -> String {
    let r = s
        .ok(
            &format!("/v1/table/{table}/multipart_write/create"),
            json!({}),
        )
        .await;
    r["upload_id"].as_str().expect("upload_id").to_string()
}

async fn part(s: &Server, table: &str, upload: &str, part: &str, start: i64, n: i64) -> Value {
    let (st, body) = s
        .post_arrow(
            &format!("/v1/table/{table}/insert?upload_id={upload}&upload_part_id={part}"),
            &sample(start, n),
        )
        .await;
    assert_eq!(st, 200, "{body}");
    body
}

#[tokio::test]
async fn parts_become_visible_together_at_complete_and_only_once() {
    let s = Server::start().await;
    s.create_table("t", 3).await;
    let v0 = s.version("t").await;
    let upload = begin(&s, "t").await;
    let p = part(&s, "t", &upload, "p1", 100, 5).await;
    assert_eq!(p["num_inserted_rows"], 5);
    // A retried part replaces the first try: its rows are not counted twice.
    part(&s, "t", &upload, "p2", 200, 4).await;
    part(&s, "t", &upload, "p2", 200, 4).await;
    assert_eq!(
        s.count("t", json!({})).await,
        3,
        "nothing visible before complete"
    );
    assert_eq!(s.version("t").await, v0);

    let done = s
        .ok(
            &format!("/v1/table/t/multipart_write/complete?upload_id={upload}"),
            json!({}),
        )
        .await;
    let version = done["version"].as_u64().unwrap();
    assert_eq!(version, v0 + 1, "one commit for every part");
    assert_eq!(s.count("t", json!({})).await, 12);
    let mut got = ids(&s.query("t", json!({"k": 100})).await);
    got.sort();
    let mut want: Vec<i64> = (0..3).chain(100..105).chain(200..204).collect();
    want.sort();
    assert_eq!(got, want);

    // Completing again answers the same version and writes nothing.
    let again = s
        .ok(
            &format!("/v1/table/t/multipart_write/complete?upload_id={upload}"),
            json!({}),
        )
        .await;
    assert_eq!(again["version"].as_u64(), Some(version));
    assert_eq!(s.version("t").await, version);
    // A completed upload takes no more parts and cannot be aborted.
    let (st, body) = s
        .post_arrow(
            &format!("/v1/table/t/insert?upload_id={upload}&upload_part_id=p3"),
            &sample(300, 1),
        )
        .await;
    assert_error(st, &body, 409, 14);
    let (st, body) = s
        .post(
            &format!("/v1/table/t/multipart_write/abort?upload_id={upload}"),
            json!({}),
        )
        .await;
    assert_error(st, &body, 409, 14);
    assert_eq!(s.count("t", json!({})).await, 12);
}

#[tokio::test]
async fn an_aborted_upload_leaves_the_table_as_it_was() {
    let s = Server::start().await;
    s.create_table("t", 3).await;
    let v0 = s.version("t").await;
    let upload = begin(&s, "t").await;
    part(&s, "t", &upload, "a", 10, 7).await;
    s.ok(
        &format!("/v1/table/t/multipart_write/abort?upload_id={upload}"),
        json!({}),
    )
    .await;
    assert_eq!(s.count("t", json!({})).await, 3);
    assert_eq!(s.version("t").await, v0);
    // The upload is gone: complete and further parts are 404 (code 10, as a transaction).
    let (st, body) = s
        .post(
            &format!("/v1/table/t/multipart_write/complete?upload_id={upload}"),
            json!({}),
        )
        .await;
    assert_error(st, &body, 404, 10);
    let (st, body) = s
        .post_arrow(
            &format!("/v1/table/t/insert?upload_id={upload}&upload_part_id=b"),
            &sample(20, 1),
        )
        .await;
    assert_error(st, &body, 404, 10);
}

#[tokio::test]
async fn bad_uploads_are_refused_with_their_field_named() {
    let s = Server::start().await;
    s.create_table("t", 3).await;
    s.create_table("u", 3).await;
    let upload = begin(&s, "t").await;
    for (path, field) in [
        (
            format!("/v1/table/t/insert?upload_id={upload}"),
            "upload_part_id",
        ),
        (
            "/v1/table/t/insert?upload_part_id=x".to_string(),
            "upload_part_id",
        ),
        (
            format!("/v1/table/t/insert?upload_id={upload}&upload_part_id=../x"),
            "upload_part_id",
        ),
        // Another table's upload.
        (
            format!("/v1/table/u/insert?upload_id={upload}&upload_part_id=x"),
            "belongs to table",
        ),
    ] {
        let (st, body) = s.post_arrow(&path, &sample(50, 1)).await;
        assert_error(st, &body, 400, 13);
        assert!(
            body["detail"].as_str().unwrap().contains(field),
            "{path}: {body}"
        );
    }
    let (st, body) = s
        .post("/v1/table/t/multipart_write/complete", json!({}))
        .await;
    assert_error(st, &body, 400, 13);
    assert!(body["detail"].as_str().unwrap().contains("upload_id"));
    let (st, body) = s
        .post(
            "/v1/table/t/multipart_write/complete?upload_id=not-an-upload",
            json!({}),
        )
        .await;
    assert_error(st, &body, 404, 10);
    // Rows that do not fit the table are refused when the part arrives.
    let other = arrow_array::RecordBatch::try_new(
        std::sync::Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "other",
            arrow_schema::DataType::Utf8,
            false,
        )])),
        vec![std::sync::Arc::new(arrow_array::StringArray::from(vec![
            "x",
        ]))],
    )
    .unwrap();
    let (st, _) = s
        .post_arrow(
            &format!("/v1/table/t/insert?upload_id={upload}&upload_part_id=x"),
            &other,
        )
        .await;
    assert_eq!(st, 400);
    // Mixing append and overwrite parts is refused at complete, and nothing is written.
    part(&s, "t", &upload, "a", 60, 2).await;
    let (st, body) = s
        .post_arrow(
            &format!("/v1/table/t/insert?upload_id={upload}&upload_part_id=b&mode=overwrite"),
            &sample(70, 2),
        )
        .await;
    assert_eq!(st, 200, "{body}");
    let (st, body) = s
        .post(
            &format!("/v1/table/t/multipart_write/complete?upload_id={upload}"),
            json!({}),
        )
        .await;
    assert_error(st, &body, 400, 13);
    assert!(body["detail"].as_str().unwrap().contains("mix"), "{body}");
    assert_eq!(s.count("t", json!({})).await, 3);
}

#[tokio::test]
async fn an_overwrite_in_parts_replaces_the_rows_at_once() {
    let s = Server::start().await;
    s.create_table("t", 3).await;
    let upload = begin(&s, "t").await;
    for (name, start) in [("a", 500), ("b", 600)] {
        let (st, body) = s
            .post_arrow(
                &format!(
                    "/v1/table/t/insert?upload_id={upload}&upload_part_id={name}&mode=overwrite"
                ),
                &sample(start, 2),
            )
            .await;
        assert_eq!(st, 200, "{body}");
    }
    assert_eq!(s.count("t", json!({})).await, 3);
    s.ok(
        &format!("/v1/table/t/multipart_write/complete?upload_id={upload}"),
        json!({}),
    )
    .await;
    let mut got = ids(&s.query("t", json!({"k": 100})).await);
    got.sort();
    assert_eq!(got, vec![500, 501, 600, 601]);
}

#[tokio::test]
async fn parts_sent_to_two_replicas_commit_as_one_upload() {
    // Two processes on one local root: B sees A's catalog changes by itself (no flag).
    let a = Server::start_with(tempfile::tempdir().unwrap(), &[]).await;
    let b = Server::start_at(a.data_dir(), &[]).await;
    a.create_table("t", 3).await;
    let upload = begin(&a, "t").await;
    part(&a, "t", &upload, "one", 100, 3).await;
    part(&b, "t", &upload, "two", 200, 3).await;
    let done = b
        .ok(
            &format!("/v1/table/t/multipart_write/complete?upload_id={upload}"),
            json!({}),
        )
        .await;
    assert!(done["version"].as_u64().is_some());
    assert_eq!(a.count("t", json!({})).await, 9);
    assert_eq!(b.count("t", json!({})).await, 9);
}
