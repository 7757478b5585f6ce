use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn batch_commit_is_all_or_nothing() {
    let s = Server::start().await;
    s.create_table("keep", 2).await;
    let ok = s
        .ok(
            "/v1/table/batch-commit",
            json!({"operations": [
                {"declare_table": {"id": ["d1"]}},
                {"declare_table": {"id": ["d2"]}},
            ]}),
        )
        .await;
    assert_eq!(ok["results"].as_array().unwrap().len(), 2);
    assert!(
        ok["results"][0]["declare_table"]["location"]
            .as_str()
            .unwrap()
            .contains("d1")
    );
    s.ok("/v1/table/d1/exists", json!({})).await;

    // The second operation fails (d1 exists): the first (declare d3) must not be applied.
    let (status, body) = s
        .post(
            "/v1/table/batch-commit",
            json!({"operations": [
                {"declare_table": {"id": ["d3"]}},
                {"declare_table": {"id": ["d1"]}},
            ]}),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    let (status, _) = s.post("/v1/table/d3/exists", json!({})).await;
    assert_eq!(status, 404, "a failed batch left d3 declared");

    // Deregister + declare in one batch; a missing table in the batch fails the whole batch.
    let (status, body) = s
        .post(
            "/v1/table/batch-commit",
            json!({"operations": [
                {"deregister_table": {"id": ["keep"]}},
                {"deregister_table": {"id": ["missing"]}},
            ]}),
        )
        .await;
    assert_error(status, &body, 404, 4);
    assert_eq!(s.count("keep", json!({})).await, 2);
    let done = s.ok("/v1/table/batch-commit", json!({"operations": [{"deregister_table": {"id": ["keep"]}}, {"declare_table": {"id": ["d4"]}}]})).await;
    assert!(done["results"][0]["deregister_table"].is_object());
    let (status, _) = s.post("/v1/table/keep/exists", json!({})).await;
    assert_eq!(status, 404);

    let (status, body) = s.post("/v1/table/batch-commit", json!({"operations": [{"declare_table": {"id": ["x"]}, "deregister_table": {"id": ["y"]}}]})).await;
    assert_error(status, &body, 400, 13);
}
