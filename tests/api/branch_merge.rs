//! `branches/diff` and `branches/cherry_pick`: a column computed on a branch, compared with
//! main and promoted into it.

use serde_json::{Value, json};

use crate::common::*;

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

fn error_codes(diff: &Value) -> Vec<String> {
    diff["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_column_added_on_a_branch_is_diffed_and_picked_into_main() {
    let s = Server::start().await;
    s.create_table("t", 4).await;
    s.ok("/v1/table/t/delete", json!({"predicate": "id = 3"}))
        .await;
    s.ok("/v1/table/t/branches/create", json!({"name": "feat"}))
        .await;
    s.ok(
        "/v1/table/t/add_columns",
        json!({"branch": "feat", "new_columns": [{"name": "dbl", "expression": "id * 2"}]}),
    )
    .await;
    let main_version = s.version("t").await;

    let diff = s
        .ok("/v1/table/t/branches/diff", json!({"from_branch": "feat"}))
        .await;
    assert_eq!(names(&diff["addedColumns"]), vec!["dbl"], "{diff}");
    assert_eq!(diff["baseMoved"], false);
    assert_eq!(diff["mainVersion"], main_version);
    assert_eq!(diff["parentVersion"], main_version);
    assert_eq!(diff["rowCountMain"], 3);
    assert_eq!(diff["rowCountBranch"], 3);
    assert_eq!(diff["rowSummary"]["unchanged"], 3);
    assert_eq!(error_codes(&diff), Vec::<String>::new());

    let dry = s
        .ok(
            "/v1/table/t/branches/cherry_pick",
            json!({"from_branch": "feat", "dry_run": true}),
        )
        .await;
    assert_eq!(dry["status"], "ready", "{dry}");
    assert_eq!(dry["preview"]["promotedColumns"], json!(["dbl"]));
    assert_eq!(
        s.version("t").await,
        main_version,
        "a dry run changes nothing"
    );

    let done = s
        .ok(
            "/v1/table/t/branches/cherry_pick",
            json!({"from_branch": "feat"}),
        )
        .await;
    assert_eq!(done["status"], "cherryPicked", "{done}");
    assert_eq!(done["mainVersionAfter"], main_version + 1);
    let rows = s
        .query("t", json!({"columns": ["id", "dbl"], "k": 10}))
        .await;
    let pairs = crate::jobs::int_pairs(&rows, "dbl");
    assert_eq!(pairs, vec![(0, Some(0)), (1, Some(2)), (2, Some(4))]);
    // Nothing left to pick.
    let diff = s
        .ok("/v1/table/t/branches/diff", json!({"from_branch": "feat"}))
        .await;
    assert!(
        error_codes(&diff).contains(&"nothingToApply".to_string()),
        "{diff}"
    );
}

#[tokio::test]
async fn a_pick_after_main_moved_is_refused_with_its_result() {
    let s = Server::start().await;
    s.create_table("m", 3).await;
    s.ok("/v1/table/m/branches/create", json!({"name": "late"}))
        .await;
    s.ok(
        "/v1/table/m/add_columns",
        json!({"branch": "late", "new_columns": [{"name": "sq", "expression": "id * id"}]}),
    )
    .await;
    let (st, b) = s.post_arrow("/v1/table/m/insert", &sample(3, 2)).await;
    assert_eq!(st, 200, "{b}");
    let before = s.version("m").await;
    let (st, body) = s
        .post(
            "/v1/table/m/branches/cherry_pick",
            json!({"from_branch": "late"}),
        )
        .await;
    assert_eq!(st, 409, "{body}");
    assert_eq!(body["status"], "failed");
    assert_eq!(body["code"], 14, "the spec's error fields too: {body}");
    let codes = error_codes(&body["diff"]);
    assert!(codes.contains(&"baseMoved".to_string()), "{codes:?}");
    assert!(codes.contains(&"rowsChanged".to_string()), "{codes:?}");
    assert_eq!(body["diff"]["rowSummary"]["newOnBase"], 2);
    assert_eq!(s.version("m").await, before, "nothing was applied");

    let (st, b) = s
        .post("/v1/table/m/branches/diff", json!({"from_branch": "nope"}))
        .await;
    assert_error(st, &b, 404, 22);
    let (st, b) = s.post("/v1/table/m/branches/diff", json!({})).await;
    assert_error(st, &b, 400, 13);
}
