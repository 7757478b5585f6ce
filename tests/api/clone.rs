//! `/v1/table/{id}/clone`: shallow and deep clones of a table at a version or tag.

use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn clones_are_new_tables_at_the_source_version_and_write_apart() {
    let s = Server::start().await;
    s.create_table("src", 3).await;
    let (st, b) = s.post_arrow("/v1/table/src/insert", &sample(3, 2)).await;
    assert_eq!(st, 200, "{b}");
    s.ok(
        "/v1/table/src/tags/create",
        json!({"tag": "first", "version": 1}),
    )
    .await;
    let location = s.ok("/v1/table/src/describe", json!({})).await["location"]
        .as_str()
        .unwrap()
        .to_string();

    // By id at a version, by location at the latest, by tag; shallow by default.
    s.ok(
        "/v1/table/at1/clone",
        json!({"source_location": "src", "source_version": 1, "is_shallow": true}),
    )
    .await;
    s.ok(
        "/v1/table/latest/clone",
        json!({"source_location": location}),
    )
    .await;
    s.ok(
        "/v1/table/tagged/clone",
        json!({"source_location": "src", "source_tag": "first"}),
    )
    .await;
    s.ok(
        "/v1/table/deep/clone",
        json!({"source_location": "src", "is_shallow": false}),
    )
    .await;
    for (table, rows) in [("at1", 3), ("latest", 5), ("tagged", 3), ("deep", 5)] {
        assert_eq!(s.count(table, json!({})).await, rows, "{table}");
    }
    let mut got = ids(&s.query("at1", json!({"k": 10})).await);
    got.sort();
    assert_eq!(got, vec![0, 1, 2]);

    // A clone is a table of its own: writes to it leave the source alone, and back.
    let (st, b) = s.post_arrow("/v1/table/at1/insert", &sample(100, 1)).await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(s.count("at1", json!({})).await, 4);
    assert_eq!(s.count("src", json!({})).await, 5);
    s.ok("/v1/table/src/delete", json!({"predicate": "id < 2"}))
        .await;
    assert_eq!(s.count("latest", json!({})).await, 5);
    assert_eq!(s.count("deep", json!({})).await, 5);
    // A deep clone outlives its source.
    s.ok("/v1/table/src/drop", json!({})).await;
    assert_eq!(s.count("deep", json!({})).await, 5);
}

#[tokio::test]
async fn bad_clones_are_refused_and_leave_no_table() {
    let s = Server::start().await;
    s.create_table("src", 3).await;
    s.create_table("taken", 1).await;
    let cases = [
        (json!({}), 400, 13),
        (
            json!({"source_location": "src", "source_version": 1, "source_tag": "x"}),
            400,
            13,
        ),
        (
            json!({"source_location": "src", "unknown_field": 1}),
            400,
            13,
        ),
        (json!({"source_location": "missing"}), 404, 4),
        (json!({"source_location": "/etc"}), 404, 4),
        (
            json!({"source_location": "src", "source_version": 99}),
            404,
            11,
        ),
        (
            json!({"source_location": "src", "source_tag": "nope"}),
            404,
            8,
        ),
    ];
    for (body, status, code) in cases {
        let (st, b) = s.post("/v1/table/new/clone", body.clone()).await;
        assert_error(st, &b, status, code);
        let (st, _) = s.post("/v1/table/new/exists", json!({})).await;
        assert_eq!(st, 404, "{body}: the failed clone left a table");
    }
    let (st, b) = s
        .post("/v1/table/taken/clone", json!({"source_location": "src"}))
        .await;
    assert_eq!(st, 409, "{b}");
    assert_eq!(s.count("taken", json!({})).await, 1);
    // Another tenant cannot clone from this one, by id or by location.
    let location = s.ok("/v1/table/src/describe", json!({})).await["location"]
        .as_str()
        .unwrap()
        .to_string();
    let other = s.with_key(&s.new_key("other", "write", &[]).await);
    for source in ["src", location.as_str()] {
        let r = other
            .client
            .post(other.url("/v1/table/mine/clone"))
            .json(&json!({"source_location": source}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 404, "{source}");
    }
}
