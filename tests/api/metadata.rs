//! Table and field metadata: `schema_metadata/update` and `update_field_metadata`.

use serde_json::json;

use crate::common::*;

/// As the REST spec has it: the bare map in, replacing the table's; the bare map out.
#[tokio::test]
async fn schema_metadata_is_replaced_and_shown_by_describe() {
    let s = Server::start().await;
    s.create_table("m", 3).await;
    let v0 = s.version("m").await;
    let r = s
        .ok(
            "/v1/table/m/schema_metadata/update",
            json!({"owner": "ana", "team": "search"}),
        )
        .await;
    assert_eq!(r, json!({"owner": "ana", "team": "search"}));
    assert_eq!(s.version("m").await, v0 + 1);
    let r = s
        .ok("/v1/table/m/schema_metadata/update", json!({"owner": "bo"}))
        .await;
    assert_eq!(r, json!({"owner": "bo"}), "replaced, not merged");
    let d = s.ok("/v1/table/m/describe", json!({})).await;
    assert_eq!(d["metadata"], json!({"owner": "bo"}), "{d}");
    assert_eq!(s.count("m", json!({})).await, 3);
    let r = s.ok("/v1/table/m/schema_metadata/update", json!({})).await;
    assert_eq!(r, json!({}), "an empty map clears it");
    let (st, b) = s
        .post("/v1/table/m/schema_metadata/update", json!({"n": 1}))
        .await;
    assert_error(st, &b, 400, 13);
    let (st, b) = s
        .post("/v1/table/nope/schema_metadata/update", json!({"a": "b"}))
        .await;
    assert_error(st, &b, 404, 4);
}

#[tokio::test]
async fn field_metadata_is_merged_replaced_and_guarded() {
    let s = Server::start().await;
    s.create_table("f", 3).await;
    let r = s
        .ok(
            "/v1/table/f/update_field_metadata",
            json!({"updates": [{"path": "text", "metadata": {"lancedb:description": "words", "unit": "none"}}]}),
        )
        .await;
    assert_eq!(
        r["fields"]["text"],
        json!({"lancedb:description": "words", "unit": "none"}),
        "{r}"
    );
    let v = r["version"].as_u64().unwrap();
    let r = s
        .ok(
            "/v1/table/f/update_field_metadata",
            json!({"updates": [
                {"path": "text", "metadata": {"unit": null}},
                {"path": "id", "metadata": {"k": "v"}, "replace": true},
            ]}),
        )
        .await;
    assert_eq!(r["version"], v + 1, "one commit for all updates");
    assert_eq!(r["fields"]["text"], json!({"lancedb:description": "words"}));
    assert_eq!(r["fields"]["id"], json!({"k": "v"}));
    let r = s
        .ok(
            "/v1/table/f/update_field_metadata",
            json!({"updates": [{"path": "text", "metadata": {"only": "this"}, "replace": true}]}),
        )
        .await;
    assert_eq!(r["fields"]["text"], json!({"only": "this"}));
    for (body, needle) in [
        (json!({"updates": []}), "updates"),
        (
            json!({"updates": [{"path": "text", "metadata": {"lancet.udf.definition": "x"}}]}),
            "reserved",
        ),
    ] {
        let (st, b) = s.post("/v1/table/f/update_field_metadata", body).await;
        assert_error(st, &b, 400, 13);
        assert!(b["error"].as_str().unwrap().contains(needle), "{b}");
    }
    // An unresolvable field path is TableColumnNotFound (spec 2.4), as for every column call.
    let (st, b) = s
        .post(
            "/v1/table/f/update_field_metadata",
            json!({"updates": [{"path": "nope", "metadata": {"a": "b"}}]}),
        )
        .await;
    assert_error(st, &b, 400, 12);
    assert!(b["error"].as_str().unwrap().contains("nope"), "{b}");
}
