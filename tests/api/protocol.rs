//! Context mapping (spec 2.3), batch-commit's version operations, branch-aware schema changes
//! and merges, graceful shutdown.

use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn context_maps_to_headers_both_ways() {
    let s = Server::start().await;
    s.create_table("c", 2).await;
    let r = s
        .client
        .post(s.url("/v1/table/c/describe"))
        .json(
            &json!({"context": {"header.x-request-id": "req-42", "header.x-api-key": "smuggled"}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["x-request-id"],
        "req-42",
        "request context header.* must become a request header"
    );
    assert_eq!(
        r.headers()["phalanx-version"],
        lancet::http::PHALANX_VERSION
    );
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        body["context"]["header.x-request-id"], "req-42",
        "response headers must come back in context"
    );
    assert_eq!(
        body["context"]["header.phalanx-version"],
        lancet::http::PHALANX_VERSION
    );
    assert!(body["context"].get("header.x-api-key").is_none());
}

#[tokio::test]
async fn batch_commit_version_operations() {
    let s = Server::start().await;
    s.create_table("v", 2).await; // v1
    s.post_arrow("/v1/table/v/insert", &sample(2, 2)).await; // v2
    s.post_arrow("/v1/table/v/insert", &sample(4, 2)).await; // v3
    // A create_table_version whose staged manifest does not exist fails the whole batch.
    let (st, body) = s
        .post("/v1/table/batch-commit", json!({"operations": [
            {"declare_table": {"id": ["newt"]}},
            {"create_table_version": {"id": ["v"], "version": 4, "manifest_path": "nowhere/staged.manifest"}},
        ]}))
        .await;
    assert!(st == 400 || st == 404 || st == 409, "{st} {body}");
    let (st, _) = s.post("/v1/table/newt/exists", json!({})).await;
    assert_eq!(st, 404, "the declare of a failed batch was left applied");
    assert_eq!(s.version("v").await, 3);

    // Delete version 1 together with a declare: both applied.
    let done = s
        .ok("/v1/table/batch-commit", json!({"operations": [
            {"delete_table_versions": {"id": ["v"], "ranges": [{"start_version": 1, "end_version": 2}]}},
            {"declare_table": {"id": ["newt"]}},
        ]}))
        .await;
    assert_eq!(
        done["results"][0]["delete_table_versions"]["deleted_count"], 1,
        "{done}"
    );
    assert!(done["results"][1]["declare_table"]["location"].is_string());
    let list = s.ok("/v1/table/v/version/list", json!({})).await;
    let versions: Vec<u64> = list["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect();
    assert_eq!(versions, vec![2, 3]);
    assert_eq!(s.count("v", json!({})).await, 6);
    let (st, body) = s.post("/v1/table/batch-commit", json!({"operations": [{"delete_table_versions": {"id": ["v"], "ranges": [{"start_version": 3, "end_version": 2}]}}]})).await;
    assert_error(st, &body, 400, 13);
}

#[tokio::test]
async fn schema_changes_and_merges_on_a_branch_leave_main_alone() {
    let s = Server::start().await;
    s.create_table("b", 3).await;
    s.ok("/v1/table/b/branches/create", json!({"name": "dev"}))
        .await;
    s.ok(
        "/v1/table/b/add_columns",
        json!({"new_columns": [{"name": "double", "expression": "id * 2"}], "branch": "dev"}),
    )
    .await;
    s.ok(
        "/v1/table/b/alter_columns",
        json!({"alterations": [{"path": "double", "rename": "twice"}], "branch": "dev"}),
    )
    .await;
    s.ok(
        "/v1/table/b/drop_columns",
        json!({"columns": ["text"], "branch": "dev"}),
    )
    .await;
    let dev = s.ok("/v1/table/b/describe", json!({"branch": "dev"})).await;
    let dev_fields: Vec<&str> = dev["schema"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(dev_fields, ["id", "vec", "twice"]);
    let main = s.ok("/v1/table/b/describe", json!({})).await;
    let main_fields: Vec<&str> = main["schema"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(main_fields, ["id", "text", "vec"]);
    assert_eq!(main["version"], 1);

    s.ok("/v1/table/b/branches/create", json!({"name": "m"}))
        .await;
    let (st, v) = s.post_arrow("/v1/table/b/merge_insert?on=id&branch=m&when_matched_update_all=true&when_not_matched_insert_all=true", &sample(2, 3)).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (
            v["num_updated_rows"].as_u64(),
            v["num_inserted_rows"].as_u64()
        ),
        (Some(1), Some(2))
    );
    assert_eq!(s.count("b", json!({"branch": "m"})).await, 5);
    assert_eq!(s.count("b", json!({})).await, 3);

    // Deleted rows show in describe's stats.
    s.ok("/v1/table/b/delete", json!({"predicate": "id = 0"}))
        .await;
    assert_eq!(
        s.ok("/v1/table/b/describe", json!({})).await["stats"]["num_deleted_rows"],
        1
    );
}

#[tokio::test]
async fn sigterm_finishes_writes_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start_with(dir, &[]).await;
    s.create_table("g", 1).await;
    let big = ipc_stream(&sample(1, 200_000));
    let url = s.url("/v1/table/g/insert");
    let client = s.client.clone();
    let write = tokio::spawn(async move {
        let r = client
            .post(url)
            .header("content-type", "application/vnd.apache.arrow.stream")
            .body(big)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    });
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    let pid = s.pid().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let (status, body) = write.await.unwrap();
    assert_eq!(status, 200, "the write in flight must finish: {body}");
    let exit = tokio::task::spawn_blocking(move || {
        let code = s.wait();
        (code, s)
    })
    .await
    .unwrap();
    assert!(exit.0.success(), "graceful exit, got {:?}", exit.0);
    // Restart on the same directory: the write is there.
    let (_, mut stopped) = exit;
    let data = stopped.take_data();
    drop(stopped);
    let s2 = Server::start_with(data, &[]).await;
    assert_eq!(s2.count("g", json!({})).await, 200_001);
}

#[tokio::test]
async fn batch_commit_publishes_a_staged_manifest() {
    let s = Server::start().await;
    s.create_table("p", 2).await; // v1
    s.post_arrow("/v1/table/p/insert", &sample(2, 3)).await; // v2
    // Stage version 3's manifest the way a client with managed versioning stages its next
    // version: written by lance (an insert), then taken out of the history.
    s.post_arrow("/v1/table/p/insert", &sample(5, 1)).await; // v3
    let staged_path = crate::table_versions::stage(&s, "p", "staged.manifest").await;
    s.ok(
        "/v1/table/p/version/delete",
        json!({"ranges": [{"start_version": 3, "end_version": 4}]}),
    )
    .await;
    let staged = std::path::PathBuf::from(format!("/{staged_path}"));
    let done = s
        .ok(
            "/v1/table/batch-commit",
            json!({"operations": [
                {"create_table_version": {"id": ["p"], "version": 3, "manifest_path": staged_path}},
                {"declare_table": {"id": ["other"]}},
            ]}),
        )
        .await;
    assert_eq!(
        done["results"][0]["create_table_version"]["version"]["version"], 3,
        "{done}"
    );
    s.ok("/v1/table/other/exists", json!({})).await;
    // The batch's transaction describes what it did, and cannot be altered.
    let tx = done["transaction_id"].as_str().unwrap();
    assert!(tx.starts_with("txb-"), "{done}");
    let d = s
        .ok(&format!("/v1/transaction/{tx}/describe"), json!({}))
        .await;
    assert_eq!(d["status"], "Succeeded", "{d}");
    assert_eq!(d["properties"]["operations"], "2");
    assert_eq!(
        d["properties"]["operation.0"],
        "create_table_version p version 3"
    );
    assert_eq!(d["properties"]["operation.1"], "declare_table other");
    let (st, b) = s
        .post(
            &format!("/v1/transaction/{tx}/alter"),
            json!({"actions": [{"set_property_action": {"key": "k", "value": "v"}}]}),
        )
        .await;
    assert_error(st, &b, 409, 19);
    let (st, b) = s
        .post("/v1/transaction/txb-bm90LWpzb24/describe", json!({}))
        .await;
    assert_error(st, &b, 404, 10);
    let list = s.ok("/v1/table/p/version/list", json!({})).await;
    assert_eq!(list["versions"].as_array().unwrap().len(), 3, "{list}");
    assert_eq!(s.count("p", json!({})).await, 6);
    // Publishing the same version again with other bytes is a conflict, and nothing is applied.
    std::fs::write(&staged, b"not the same manifest").unwrap();
    let (st, body) = s
        .post("/v1/table/batch-commit", json!({"operations": [
            {"declare_table": {"id": ["third"]}},
            {"create_table_version": {"id": ["p"], "version": 3, "manifest_path": staged.to_str().unwrap().trim_start_matches('/')}},
        ]}))
        .await;
    assert!(st == 409 || st == 400, "{st} {body}");
    let (st, _) = s.post("/v1/table/third/exists", json!({})).await;
    assert_eq!(st, 404);
}

/// Answers of known size carry `content-length` (one write, no chunk framing), through every
/// layer that wraps bodies (the metrics byte counters, the context mapping), and the bytes are
/// still counted.
#[tokio::test]
async fn answers_of_known_size_carry_their_length() {
    let s = Server::start().await;
    s.create_table("len", 5).await;
    let sent = |r: &reqwest::Response| {
        assert!(
            r.headers().get("transfer-encoding").is_none(),
            "{:?}",
            r.headers()
        );
        r.headers()["content-length"]
            .to_str()
            .unwrap()
            .parse::<usize>()
            .unwrap()
    };
    let response_bytes = |metrics: &str, route: &str| -> u64 {
        metrics
            .lines()
            .filter(|l| l.starts_with("lancet_http_response_bytes_total"))
            .filter(|l| l.contains(&format!("route=\"{route}\"")))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum()
    };

    // A bare JSON value (count_rows) and a JSON object the context layer rewrites (describe).
    let r = s
        .client
        .post(s.url("/v1/table/len/count_rows"))
        .json(&json!({"predicate": "id >= 2"}))
        .send()
        .await
        .unwrap();
    let count_length = sent(&r);
    let body = r.text().await.unwrap();
    assert_eq!((count_length, body.trim()), (body.len(), "3"));
    let r = s
        .client
        .post(s.url("/v1/table/len/describe"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let length = sent(&r);
    let body = r.bytes().await.unwrap();
    assert_eq!(length, body.len());
    let described: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(described["context"].is_object(), "{described}");

    // A small Arrow answer is encoded whole.
    let r = s
        .client
        .post(s.url("/v1/table/len/query"))
        .header("accept", "application/vnd.apache.arrow.stream")
        .json(&json!({"filter": "id < 3", "k": 10, "vector": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let length = sent(&r);
    let body = r.bytes().await.unwrap();
    assert_eq!(length, body.len());
    let rows: usize = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(body), None)
        .unwrap()
        .map(|b| b.unwrap().num_rows())
        .sum();
    assert_eq!(rows, 3);

    let metrics = s
        .client
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        response_bytes(&metrics, "/v1/table/{id}/count_rows") as usize,
        count_length,
        "the count's answer bytes are counted: {metrics}"
    );
    assert!(response_bytes(&metrics, "/v1/table/{id}/query") as usize >= length);
}
