use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn insert_update_delete_count() {
    let s = Server::start().await;
    s.create_table("t", 10).await;
    let (status, v) = s.post_arrow("/v1/table/t/insert", &sample(10, 5)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["version"], 2);
    assert_eq!(v["num_inserted_rows"], 5);
    assert_eq!(s.count("t", json!({})).await, 15);
    assert_eq!(s.count("t", json!({"predicate": "id >= 12"})).await, 3);
    assert_eq!(s.count("t", json!({"version": 1})).await, 10);
    // Bare integer also when lancedb sends version null.
    assert_eq!(s.count("t", json!({"version": null})).await, 15);

    let u = s
        .ok(
            "/v1/table/t/update",
            json!({"updates": [["text", "'changed'"]], "predicate": "id < 3"}),
        )
        .await;
    assert_eq!(u["updated_rows"], 3);
    assert_eq!(u["version"], 3);
    let rows = s
        .query(
            "t",
            json!({"filter": "text = 'changed'", "columns": ["id"]}),
        )
        .await;
    let mut got = ids(&rows);
    got.sort();
    assert_eq!(got, vec![0, 1, 2]);

    let d = s
        .ok("/v1/table/t/delete", json!({"predicate": "id >= 10"}))
        .await;
    assert_eq!(d["version"], 4);
    assert_eq!(s.count("t", json!({})).await, 10);

    let (status, v) = s
        .post_arrow("/v1/table/t/insert?mode=overwrite", &sample(50, 2))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(s.count("t", json!({})).await, 2);
}

#[tokio::test]
async fn merge_insert_all_flags() {
    let s = Server::start().await;
    s.create_table("m", 5).await; // ids 0..5
    // Upsert 3..8: 2 updated (3,4), 3 inserted (5,6,7).
    let (status, v) = s.post_arrow("/v1/table/m/merge_insert?on=id&when_matched_update_all=true&when_not_matched_insert_all=true", &sample(3, 5)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (
            v["num_updated_rows"].as_u64(),
            v["num_inserted_rows"].as_u64(),
            v["num_deleted_rows"].as_u64()
        ),
        (Some(2), Some(3), Some(0))
    );
    assert_eq!(s.count("m", json!({})).await, 8);

    // Insert-only: matched rows untouched.
    let (_, v) = s.post_arrow("/v1/table/m/merge_insert?on=id&when_matched_update_all=false&when_not_matched_insert_all=true", &sample(6, 4)).await;
    assert_eq!(
        (
            v["num_updated_rows"].as_u64(),
            v["num_inserted_rows"].as_u64()
        ),
        (Some(0), Some(2))
    );

    // Conditional update: only where target.id < 2.
    let (status, v) = s
        .post_arrow("/v1/table/m/merge_insert?on=id&when_matched_update_all=true&when_matched_update_all_filt=target.id%20%3C%202&when_not_matched_insert_all=false", &sample(0, 4))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["num_updated_rows"], 2);

    // Delete target rows not in the source, filtered: removes ids >= 8 only... (source 0..2)
    let (status, v) = s
        .post_arrow("/v1/table/m/merge_insert?on=id&when_not_matched_insert_all=false&when_not_matched_by_source_delete=true&when_not_matched_by_source_delete_filt=id%20%3E%3D%208", &sample(0, 2))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["num_deleted_rows"], 2);
    assert_eq!(s.count("m", json!({})).await, 8);

    // Unconditional delete-by-source plus a timeout parameter.
    let (status, v) = s
        .post_arrow("/v1/table/m/merge_insert?on=id&when_matched_update_all=true&when_not_matched_insert_all=true&when_not_matched_by_source_delete=true&timeout=30s", &sample(0, 3))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["num_deleted_rows"], 5);
    assert_eq!(s.count("m", json!({})).await, 3);
}

#[tokio::test]
async fn merge_insert_composite_key() {
    let s = Server::start().await;
    s.create_table("c", 4).await;
    // Same ids, texts differ except row 0 -> composite key (id, text) matches one row.
    let (status, v) = s.post_arrow("/v1/table/c/merge_insert?on=id&on=text&when_matched_update_all=true&when_not_matched_insert_all=true", &sample(0, 1)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["num_updated_rows"], 1);
    assert_eq!(v["num_inserted_rows"], 0);
}

#[tokio::test]
async fn schema_changes() {
    let s = Server::start().await;
    s.create_table("s", 3).await;
    let v = s
        .ok(
            "/v1/table/s/add_columns",
            json!({"new_columns": [{"name": "double", "expression": "id * 2"}]}),
        )
        .await;
    assert_eq!(v["version"], 2);
    let rows = s
        .query(
            "s",
            json!({"columns": ["id", "double"], "filter": "id = 2"}),
        )
        .await;
    let col = rows[0].column_by_name("double").unwrap();
    assert_eq!(
        arrow_cast::display::array_value_to_string(col, 0).unwrap(),
        "4"
    );

    let v = s.ok("/v1/table/s/alter_columns", json!({"alterations": [{"path": "double", "rename": "twice"}, {"path": "id", "data_type": {"type": "int32"}}]})).await;
    assert_eq!(v["version"], 3);
    let d = s.ok("/v1/table/s/describe", json!({})).await;
    let fields = d["schema"]["fields"].as_array().unwrap();
    assert!(fields.iter().any(|f| f["name"] == "twice"));
    let id = fields.iter().find(|f| f["name"] == "id").unwrap();
    assert_eq!(id["type"]["type"], "int32");

    let v = s
        .ok(
            "/v1/table/s/alter_columns",
            json!({"alterations": [{"path": "text", "nullable": true}]}),
        )
        .await;
    assert_eq!(v["version"], 4);
    let v = s
        .ok("/v1/table/s/drop_columns", json!({"columns": ["twice"]}))
        .await;
    assert_eq!(v["version"], 5);
    let d = s.ok("/v1/table/s/describe", json!({})).await;
    assert!(
        !d["schema"]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["name"] == "twice")
    );
}
