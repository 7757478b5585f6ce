//! `/v1/transaction/{id}/{describe,alter}`: writes answer a `transaction_id` that describes
//! the version they made; jobs are transactions whose status follows the job and whose
//! properties a client sets.

use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn writes_answer_transactions_that_describe_their_version() {
    let s = Server::start().await;
    s.create_table("t", 3).await;
    let (st, r) = s.post_arrow("/v1/table/t/insert", &sample(3, 2)).await;
    assert_eq!(st, 200, "{r}");
    let tx = r["transaction_id"]
        .as_str()
        .expect("transaction_id")
        .to_string();
    let d = s
        .ok(&format!("/v1/transaction/{tx}/describe"), json!({}))
        .await;
    assert_eq!(d["status"], "Succeeded", "{d}");
    assert_eq!(d["properties"]["version"], r["version"].to_string());
    assert_eq!(d["properties"]["table"], "t");
    assert_eq!(d["properties"]["operation"], "Append", "{d}");

    let r = s
        .ok("/v1/table/t/delete", json!({"predicate": "id = 0"}))
        .await;
    let tx = r["transaction_id"].as_str().unwrap().to_string();
    let d = s
        .ok(&format!("/v1/transaction/{tx}/describe"), json!({}))
        .await;
    assert_eq!(d["properties"]["operation"], "Delete", "{d}");
    let r = s.ok("/v1/table/t/restore", json!({"version": 1})).await;
    assert!(r["transaction_id"].is_string(), "{r}");
    // Schema and index changes answer one too.
    for (path, body) in [
        (
            "add_columns",
            json!({"new_columns": [{"name": "dbl", "expression": "id * 2"}]}),
        ),
        ("drop_columns", json!({"columns": ["dbl"]})),
        (
            "create_scalar_index",
            json!({"column": "id", "name": "id_idx"}),
        ),
        (
            "update_field_metadata",
            json!({"updates": [{"path": "id", "metadata": {"k": "v"}}]}),
        ),
    ] {
        let r = s.ok(&format!("/v1/table/t/{path}"), body).await;
        let tx = r["transaction_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{path}: {r}"));
        let d = s
            .ok(&format!("/v1/transaction/{tx}/describe"), json!({}))
            .await;
        assert_eq!(
            d["properties"]["version"],
            r["version"].to_string(),
            "{path}: {d}"
        );
    }

    // A branch's creation is one too: its first version, on the branch.
    let r = s
        .ok("/v1/table/t/branches/create", json!({"name": "dev"}))
        .await;
    let btx = r["transaction_id"].as_str().unwrap().to_string();
    let d = s
        .ok(&format!("/v1/transaction/{btx}/describe"), json!({}))
        .await;
    assert_eq!(d["properties"]["branch"], "dev", "{d}");
    // A committed write cannot be altered; unknown ids are 404.
    let (st, b) = s
        .post(
            &format!("/v1/transaction/{tx}/alter"),
            json!({"actions": [{"set_property_action": {"key": "k", "value": "v"}}]}),
        )
        .await;
    assert_eq!(st, 409, "{b}");
    for id in ["tx-bm9wZQ", "nope", "job-0000000000000-deadbeef"] {
        let (st, b) = s
            .post(&format!("/v1/transaction/{id}/describe"), json!({}))
            .await;
        assert_eq!(st, 404, "{id}: {b}");
    }
}

#[tokio::test]
async fn a_job_is_a_transaction_that_can_be_altered_and_canceled() {
    let s = Server::start_with(
        tempfile::tempdir().unwrap(),
        &[
            ("LANCET_FAULT_INJECTION", "1"),
            ("LANCET_FAULT_UPKEEP_DELAY_MS", "60000"),
        ],
    )
    .await;
    s.create_table("t", 3).await;
    let job = s.ok("/v1/table/t/optimize", json!({})).await["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let path = |what: &str| format!("/v1/transaction/{job}/{what}");
    let d = s.ok(&path("describe"), json!({})).await;
    assert_eq!(d["status"], "Running", "{d}");
    assert_eq!(d["properties"]["job_type"], "optimize");
    let d = s
        .ok(
            &path("alter"),
            json!({"actions": [
                {"set_property_action": {"key": "owner", "value": "ana"}},
                {"set_property_action": {"key": "ticket", "value": "42"}},
            ]}),
        )
        .await;
    assert_eq!(d["properties"]["owner"], "ana", "{d}");
    // All or nothing: a Fail on an existing key changes nothing.
    let (st, b) = s
        .post(
            &path("alter"),
            json!({"actions": [
                {"unset_property_action": {"key": "ticket"}},
                {"set_property_action": {"key": "owner", "value": "bo", "mode": "Fail"}},
            ]}),
        )
        .await;
    assert_eq!(st, 409, "{b}");
    let d = s.ok(&path("describe"), json!({})).await;
    assert_eq!(
        (&d["properties"]["owner"], &d["properties"]["ticket"]),
        (&json!("ana"), &json!("42"))
    );
    let (st, b) = s
        .post(
            &path("alter"),
            json!({"actions": [{"set_status_action": {"status": "Succeeded"}}]}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    let d = s
        .ok(
            &path("alter"),
            json!({"actions": [
                {"unset_property_action": {"key": "ticket"}},
                {"set_status_action": {"status": "Canceled"}},
            ]}),
        )
        .await;
    assert_eq!(d["status"], "Canceled", "{d}");
    assert!(d["properties"].get("ticket").is_none(), "{d}");
    let job_state = s.describe_job(&job).await["job_state"].clone();
    assert_eq!(job_state, "CANCELLED");
    let (st, b) = s
        .post(
            &path("alter"),
            json!({"actions": [{"set_status_action": {"status": "canceled"}}]}),
        )
        .await;
    assert_eq!(st, 409, "{b}");
}
