//! Materialized views: `/v1/materialized_view/{id}/{create,describe,refresh,drop}` and
//! `GET /v1/namespace/{id}/materialized_view/list`.

use serde_json::{Value, json};

use crate::common::*;

async fn post_status(s: &Handle, path: &str, body: Value) -> (u16, Value) {
    s.post(path, body).await
}

#[tokio::test]
async fn a_view_is_created_refreshed_described_and_dropped() {
    let s = Server::start().await;
    s.create_table("src", 10).await;
    let (st, b) = post_status(
        &s,
        "/v1/materialized_view/v/create",
        json!({"query": "SELECT id, id * 10 AS tens FROM src WHERE id >= 4", "with_no_data": false}),
    )
    .await;
    assert_eq!(st, 202, "{b}");
    let job = s.wait_job(b["job_id"].as_str().unwrap()).await;
    assert_eq!(job["job_state"], "DONE", "{job}");
    assert_eq!(job["job_type"], "materialized_view_refresh", "{job}");
    assert_eq!(job["result"]["rows_written"], 6, "{job}");
    assert_eq!(job["result"]["source_version"], 1, "{job}");
    assert_eq!(job["result"]["mode"], "rebuild", "{job}");
    assert_eq!(s.count("v", json!({})).await, 6);
    let batches = s.query("v", json!({"filter": "id = 7", "k": 10})).await;
    let tens = batches[0]
        .column_by_name("tens")
        .unwrap()
        .as_any()
        .downcast_ref::<arrow_array::Int64Array>()
        .unwrap()
        .value(0);
    assert_eq!(tens, 70);

    let d = s.ok("/v1/materialized_view/v/describe", json!({})).await;
    assert_eq!(d["source_table"], "src", "{d}");
    assert_eq!(d["filter"], "id >= 4", "{d}");
    assert_eq!(d["projections"][1]["output_column"], "tens", "{d}");
    assert_eq!(d["refreshed_source_version"], 1, "{d}");
    let incarnation = d["incarnation"].as_str().unwrap().to_string();

    // The source moves on; a refresh follows it (and a wrong incarnation is refused).
    let (st, b) = s.post_arrow("/v1/table/src/insert", &sample(100, 3)).await;
    assert_eq!(st, 200, "{b}");
    let (st, b) = post_status(
        &s,
        "/v1/materialized_view/v/refresh",
        json!({"expected_incarnation": "another"}),
    )
    .await;
    assert_error(st, &b, 409, 14);
    let (st, b) = post_status(
        &s,
        "/v1/materialized_view/v/refresh",
        json!({"full": true, "expected_incarnation": incarnation}),
    )
    .await;
    assert_eq!(st, 202, "{b}");
    let job = s.wait_job(b["job_id"].as_str().unwrap()).await;
    assert_eq!(job["result"]["rows_written"], 9, "{job}");
    assert_eq!(job["result"]["source_version"], 2, "{job}");
    assert_eq!(s.count("v", json!({})).await, 9);

    let (st, list) = s.get("/v1/namespace/$/materialized_view/list").await;
    assert_eq!(st, 200, "{list}");
    assert_eq!(list["views"], json!(["v"]), "{list}");

    // A plain table is no view: describe, refresh and drop answer 404 and leave it alone.
    for op in ["describe", "refresh", "drop"] {
        let (st, b) = post_status(&s, &format!("/v1/materialized_view/src/{op}"), json!({})).await;
        assert_error(st, &b, 404, 4);
    }
    assert_eq!(s.count("src", json!({})).await, 13);
    s.ok("/v1/materialized_view/v/drop", json!({})).await;
    let (st, _) = post_status(&s, "/v1/table/v/describe", json!({})).await;
    assert_eq!(st, 404);
}

#[tokio::test]
async fn view_requests_lancet_cannot_honour_are_refused_by_name() {
    let s = Server::start().await;
    s.create_table("src", 5).await;
    let create = |body: Value| {
        let s = &s;
        async move { post_status(s, "/v1/materialized_view/v/create", body).await }
    };
    for (body, named) in [
        (
            json!({"query": "SELECT id FROM src GROUP BY id"}),
            "GROUP BY",
        ),
        (json!({"query": "SELECT nope FROM src"}), "nope"),
        (
            json!({"query": "SELECT id FROM src WHERE"}),
            "materialized view query",
        ),
        (
            json!({"kind": "udtf", "source_query": "SELECT id FROM src", "output_schema": ""}),
            "udtf",
        ),
        (
            json!({"query": "SELECT id FROM src", "auto_refresh": true}),
            "auto_refresh",
        ),
        (json!({"query": "SELECT id FROM src", "shape": 1}), "shape"),
        (
            json!({"source_query": "SELECT id FROM src", "output_schema": "%%%"}),
            "output_schema",
        ),
        // A schema message declaring 2 GiB of metadata in 8 bytes: checked, never allocated.
        (
            json!({"source_query": "SELECT id FROM src", "output_schema": "/////////38="}),
            "declares 2147483647 bytes",
        ),
        (json!({}), "needs a 'query'"),
    ] {
        let (st, b) = create(body.clone()).await;
        assert_error(st, &b, 400, 13);
        assert!(b["error"].as_str().unwrap().contains(named), "{body}: {b}");
    }
    let (st, b) = create(json!({"query": "SELECT id FROM missing"})).await;
    assert_error(st, &b, 404, 4);
    let (st, b) = create(json!({"query": "SELECT id FROM src", "with_no_data": true})).await;
    assert_eq!(st, 200, "{b}");
    assert!(b["job_id"].is_null(), "{b}");
    assert_eq!(s.count("v", json!({})).await, 0);
    let (st, b) = create(json!({"query": "SELECT id FROM src"})).await;
    assert_error(st, &b, 409, 5);

    let refresh = |body: Value| {
        let s = &s;
        async move { post_status(s, "/v1/materialized_view/v/refresh", body).await }
    };
    // Worker bounds are checked (a refresh is one scan, within any bound from 1 to 64).
    let (st, b) = refresh(json!({"concurrency": 0})).await;
    assert_error(st, &b, 400, 13);
    assert!(b["error"].as_str().unwrap().contains("concurrency"), "{b}");
    let (st, b) = refresh(json!({"intra_applier_concurrency": 65})).await;
    assert_error(st, &b, 400, 13);
    assert!(
        b["error"]
            .as_str()
            .unwrap()
            .contains("intra_applier_concurrency"),
        "{b}"
    );
    let (st, b) = refresh(json!({"output_limit": 5})).await;
    assert_error(st, &b, 400, 13);
    assert!(b["error"].as_str().unwrap().contains("output_limit"), "{b}");
    let (st, b) = refresh(json!({"source_version": 9})).await;
    assert_error(st, &b, 404, 11);
    let (st, b) = refresh(json!({"cluster": "gpu"})).await;
    assert_error(st, &b, 400, 13);
    let (st, b) = post_status(&s, "/v1/materialized_view/nope/refresh", json!({})).await;
    assert_error(st, &b, 404, 4);
}

#[tokio::test]
async fn a_view_of_a_virtual_column_holds_plain_values() {
    use crate::jobs::{add_virtual, int_pairs, slow};
    let s = Server::start().await;
    s.create_table("src", 6).await;
    add_virtual(&s, "src", "dbl", slow("1")).await;
    let job = s.backfill("src", json!({"column": "dbl"})).await;
    assert_eq!(s.wait_job(&job).await["job_state"], "DONE");
    let (st, b) = post_status(
        &s,
        "/v1/materialized_view/v/create",
        json!({"query": "SELECT * FROM src", "with_no_data": false}),
    )
    .await;
    assert_eq!(st, 202, "{b}");
    let done = s.wait_job(b["job_id"].as_str().unwrap()).await;
    assert_eq!(done["job_state"], "DONE", "{done}");
    let rows = s
        .query("v", json!({"columns": ["id", "dbl"], "k": 100}))
        .await;
    let mut pairs = int_pairs(&rows, "dbl");
    pairs.sort();
    assert_eq!(pairs, (0..6).map(|i| (i, Some(2 * i))).collect::<Vec<_>>());
    // The view's column is no virtual column: there is nothing to backfill.
    let (st, b) = s
        .post("/v1/table/v/backfill_column", json!({"column": "dbl"}))
        .await;
    assert_error(st, &b, 400, 13);
}

#[tokio::test]
async fn named_views_record_their_query_and_schema() {
    let s = Server::start().await;
    s.create_table("src", 3).await;
    s.ok("/v1/namespace/ns/create", json!({})).await;
    let made = s
        .ok(
            "/v1/view/ns$v/create",
            json!({"query": "SELECT id, count(*) AS n FROM src GROUP BY id"}),
        )
        .await;
    assert_eq!(made["name"], "v", "{made}");
    assert_eq!(made["namespace"], json!(["ns"]), "{made}");
    let fields: Vec<&str> = made["schema"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["id", "n"], "{made}");
    let d = s.ok("/v1/view/ns$v/describe", json!({})).await;
    assert_eq!(d["query"], made["query"]);
    let (st, list) = s.get("/v1/namespace/ns/view/list").await;
    assert_eq!((st, &list["views"]), (200, &json!(["v"])), "{list}");
    let (st, list) = s.get("/v1/namespace/$/view/list").await;
    assert_eq!((st, &list["views"]), (200, &json!([])), "{list}");

    let (st, b) = s
        .post(
            "/v1/view/ns$v/create",
            json!({"query": "SELECT id FROM src"}),
        )
        .await;
    assert_error(st, &b, 409, 5);
    let (st, b) = s
        .post(
            "/v1/view/ns$w/create",
            json!({"query": "SELECT id FROM nope"}),
        )
        .await;
    assert_error(st, &b, 404, 4);
    for bad in ["DELETE FROM src", "SELECT nope FROM src", "SELEC"] {
        let (st, b) = s.post("/v1/view/w/create", json!({"query": bad})).await;
        assert_error(st, &b, 400, 13);
    }
    // Any name: the record's key is a hash of the id (a 5000-character name was a 500).
    let long = "v".repeat(5000);
    s.ok(
        &format!("/v1/view/{long}/create"),
        json!({"query": "SELECT id FROM src"}),
    )
    .await;
    let d = s.ok(&format!("/v1/view/{long}/describe"), json!({})).await;
    assert_eq!(d["name"].as_str().unwrap().len(), 5000);
    s.ok("/v1/view/ns$v/drop", json!({})).await;
    for op in ["describe", "drop"] {
        let (st, b) = s.post(&format!("/v1/view/ns$v/{op}"), json!({})).await;
        assert_error(st, &b, 404, 4);
    }
    // A view names no table: the source is untouched throughout.
    assert_eq!(s.count("src", json!({})).await, 3);
}
