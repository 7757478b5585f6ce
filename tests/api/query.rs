use serde_json::json;

use crate::common::*;

/// Answers past the 1 MiB the handler sends whole are streamed batch by batch: every row must
/// still arrive, once, in both IPC formats.
#[tokio::test]
async fn large_answers_stream_every_row_in_both_formats() {
    let s = Server::start().await;
    let n = 60_000;
    s.create_table("big", n).await;
    let rows = s.query("big", json!({})).await;
    let mut got = ids(&rows);
    assert!(rows.len() > 1, "a {n}-row answer comes in several batches");
    got.sort();
    assert_eq!(got, (0..n).collect::<Vec<_>>());
    let (batches, size) = s.query_stream("big", json!({"filter": "id >= 100"})).await;
    assert!(size > 1 << 20, "the answer is {size} bytes");
    let mut got = ids(&batches);
    got.sort();
    assert_eq!(got, (100..n).collect::<Vec<_>>());
}

#[tokio::test]
async fn filtered_scan_and_vector_search() {
    let s = Server::start().await;
    s.create_table("q", 20).await;
    let rows = s.query("q", json!({"filter": "id < 5", "columns": {"column_names": ["id", "text"]}, "k": 100, "vector": {}})).await;
    let mut got = ids(&rows);
    got.sort();
    assert_eq!(got, vec![0, 1, 2, 3, 4]);
    assert_eq!(rows[0].num_columns(), 2);

    // Nearest to (7, 0, 1, 1): id 7 first.
    let rows = s.query("q", json!({"vector": {"single_vector": [7.0, 0.0, 1.0, 1.0]}, "k": 3, "vector_column": "vec"})).await;
    let got = ids(&rows);
    assert_eq!(got.len(), 3);
    assert_eq!(got[0], 7);
    // lancedb dialect: bare vector, filter, row ids, aliases.
    let rows = s
        .query("q", json!({"vector": [7.0, 0.0, 1.0, 1.0], "k": 2, "filter": "id > 7", "prefilter": true, "with_row_id": true, "columns": {"ident": "id", "t": "text"}, "ef": null}))
        .await;
    assert!(rows[0].column_by_name("_rowid").is_some());
    assert!(rows[0].column_by_name("ident").is_some());
    let (st, b) = s
        .post("/v1/table/q/query", json!({"vector": [1.0, 2.0], "k": 3}))
        .await;
    assert_eq!(st, 400, "wrong dimension: {b}");
    // Stream format on request.
    let (batches, _) = s.query_stream("q", json!({"filter": "id = 3"})).await;
    assert_eq!(ids(&batches), vec![3]);
    // Time travel.
    s.ok("/v1/table/q/delete", json!({"predicate": "true"}))
        .await;
    let rows = s
        .query("q", json!({"version": 1, "filter": "id = 3"}))
        .await;
    assert_eq!(ids(&rows), vec![3]);
}

/// Exact search on a column without an index is answered from decoded vectors kept in memory:
/// its answers must equal lance's own scan (a query with a filter always takes that path), and
/// follow deletes and inserts.
#[tokio::test]
async fn exact_search_from_memory_matches_lance_and_follows_writes() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float32Type, UInt64Type};
    let s = Server::start().await;
    s.create_table("flat", 300).await;
    let both = |q: Vec<f32>, k: usize| {
        let cached = json!({"vector": {"single_vector": q}, "k": k, "with_row_id": true});
        let mut scanned = cached.clone();
        scanned["filter"] = json!("id >= 0");
        scanned["prefilter"] = json!(true);
        (cached, scanned)
    };
    let answer = |rows: &[arrow_array::RecordBatch]| {
        let mut out = Vec::new();
        for b in rows {
            let d = b
                .column_by_name("_distance")
                .unwrap()
                .as_primitive::<Float32Type>();
            let r = b
                .column_by_name("_rowid")
                .unwrap()
                .as_primitive::<UInt64Type>();
            for i in 0..b.num_rows() {
                out.push((r.value(i), d.value(i)));
            }
        }
        out
    };
    let check = |label: &'static str, q: Vec<f32>, k: usize| {
        let (cached, scanned) = both(q, k);
        let s = &s;
        async move {
            let a = s.query("flat", cached).await;
            let b = s.query("flat", scanned).await;
            assert_eq!(answer(&a), answer(&b), "{label}");
            assert_eq!(
                a[0].schema().fields().len(),
                5,
                "{label}: id, text, vec, _distance, _rowid"
            );
            ids(&a)
        }
    };
    let got = check("fresh", vec![50.2, 0.0, 1.0, 2.0], 4).await;
    assert_eq!(got, vec![50, 49, 52, 51]);
    s.ok(
        "/v1/table/flat/delete",
        json!({"predicate": "id >= 49 AND id <= 51"}),
    )
    .await;
    let got = check("after delete", vec![50.2, 0.0, 1.0, 2.0], 4).await;
    assert_eq!(got, vec![52, 53, 48, 47]);
    let (st, b) = s
        .post_arrow("/v1/table/flat/insert", &sample(1000, 10))
        .await;
    assert_eq!(st, 200, "{b}");
    let got = check("after insert", vec![1004.9, 0.0, 1.0, 2.0], 3).await;
    assert_eq!(got, vec![1004, 1006, 1005]);
    // Time travel reads the version asked for.
    let rows = s
        .query(
            "flat",
            json!({"vector": {"single_vector": [50.2, 0.0, 1.0, 2.0]}, "k": 2, "version": 1}),
        )
        .await;
    assert_eq!(ids(&rows), vec![50, 49]);
}

/// `limit` is `k` by another name; two that disagree are refused, not one of them dropped.
#[tokio::test]
async fn limit_is_k_by_another_name() {
    let s = Server::start().await;
    s.create_table("l", 20).await;
    let rows = s.query("l", json!({"filter": "id >= 5", "limit": 3})).await;
    assert_eq!(ids(&rows).len(), 3);
    let (status, body) = s
        .post("/v1/table/l/query", json!({"k": 3, "limit": 4}))
        .await;
    assert_error(status, &body, 400, 13);
    assert!(
        body["detail"].as_str().unwrap().contains("disagree"),
        "{body}"
    );
}

/// Lance sizes a vector search's buffers by `k`: a `k` of 2^53 made it allocate that many
/// slots and abort the process. `k` (and the refine window) is cut to the table's rows.
#[tokio::test]
async fn a_huge_k_answers_every_row_instead_of_aborting() {
    let s = Server::start().await;
    s.create_table("q", 7).await;
    for body in [
        json!({"vector": [1.0, 0.0, 1.0, 1.0], "k": 1u64 << 53, "vector_column": "vec"}),
        json!({"vector": [1.0, 0.0, 1.0, 1.0], "k": 1u64 << 60, "refine_factor": 1u64 << 31}),
        json!({"vector": [[1.0, 0.0, 1.0, 1.0], [2.0, 0.0, 1.0, 1.0]], "k": 1u64 << 53}),
    ] {
        let rows = s.query("q", body.clone()).await;
        let n: usize = rows.iter().map(|b| b.num_rows()).sum();
        assert!(n == 7 || n == 14, "{body}: {n} rows");
    }
    assert_eq!(s.count("q", json!({})).await, 7);
}
