//! The lancedb client's declared columns on add_columns: all-null columns from an Arrow
//! schema, SQL computed columns (filled by a backfill job), Function columns (declared and
//! stored; no runtime here, and a backfill says so).

use serde_json::{Value, json};

use crate::common::*;

fn schema_stream(fields: Vec<arrow_schema::Field>) -> Vec<u8> {
    let schema = arrow_schema::Schema::new(fields);
    let mut out = Vec::new();
    let w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &schema).unwrap();
    w.into_inner().unwrap();
    // A schema-only stream: the schema message and the end-of-stream marker.
    out.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
    out
}

fn field_meta(schema: &Value, name: &str) -> Value {
    schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no field {name} in {schema}"))["metadata"]
        .clone()
}

#[tokio::test]
async fn null_and_computed_columns_are_added_and_computed_ones_backfilled() {
    let s = Server::start().await;
    s.create_table("t", 3).await;
    let body = schema_stream(vec![arrow_schema::Field::new(
        "extra",
        arrow_schema::DataType::Int32,
        false,
    )]);
    let (st, b) = s.post_bytes("/v1/table/t/add_columns", body).await;
    assert_eq!(st, 200, "{b}");
    s.ok(
        "/v1/table/t/add_columns",
        json!({"new_columns": [{"name": "twice", "computed": "id * 2"}]}),
    )
    .await;
    let d = s.ok("/v1/table/t/describe", json!({})).await;
    let meta = field_meta(&d["schema"], "twice");
    assert_eq!(meta["computed_column.kind"], "sql", "{d}");
    assert_eq!(meta["computed_column.expression"], "id * 2");
    // Written rows get nulls; the backfill computes every row.
    let (st, b) = s.post_arrow("/v1/table/t/insert", &sample(10, 2)).await;
    assert_eq!(st, 200, "{b}");
    let job = s.backfill("t", json!({"column": "twice"})).await;
    let done = s.wait_job(&job).await;
    assert_eq!(done["job_state"], "DONE", "{done}");
    assert_eq!(done["result"]["rows_assigned"], 5, "{done}");
    let rows = s
        .query("t", json!({"columns": ["id", "twice", "extra"], "k": 100}))
        .await;
    for b in &rows {
        assert_eq!(
            b.column_by_name("extra").unwrap().null_count(),
            b.num_rows()
        );
    }
    let pairs: Vec<(i64, i64)> = crate::jobs::int_pairs(&rows, "twice")
        .into_iter()
        .map(|(id, v)| (id, v.unwrap()))
        .collect();
    assert_eq!(pairs, vec![(0, 0), (1, 2), (2, 4), (10, 20), (11, 22)]);

    for (body, needle) in [
        (
            json!({"new_columns": [{"name": "bad", "computed": "nope + 1"}]}),
            "nope",
        ),
        (
            json!({"new_columns": [{"name": "bad", "computed": "1 + 1"}]}),
            "reads no column",
        ),
        (
            json!({"new_columns": [{"name": "bad", "computed": "id", "expression": "id"}]}),
            "more than one",
        ),
        (
            json!({"new_columns": [{"name": "bad", "all_null": true}]}),
            "function",
        ),
        (
            json!({"new_columns": [{"name": "bad"}]}),
            "computed or all_null",
        ),
    ] {
        let (st, b) = s.post("/v1/table/t/add_columns", body).await;
        assert_error(st, &b, 400, 13);
        assert!(
            b["detail"].as_str().unwrap().contains(needle),
            "{needle}: {b}"
        );
    }
    let (st, b) = s.post_bytes("/v1/table/t/add_columns", vec![1, 2, 3]).await;
    assert_error(st, &b, 400, 13);
}

#[tokio::test]
async fn function_columns_are_declared_and_a_backfill_names_the_missing_runtime() {
    let s = Server::start().await;
    s.create_table("f", 3).await;
    let function = json!({
        "application": {
            "function": {"name": "text_features", "version": "1"},
            "inputs": [{"parameter": "body", "kind": "column", "value": {"path": "text"}}]
        },
        "binding_metadata_version": 1,
        "input_bindings": [{"parameter": "body", "field_path": "text", "arrow_type": "utf8", "nullable": true}],
        "input_schema": {"fields": [{"name": "text", "nullable": true, "type": {"type": "utf8"}}]},
        "output_schema": {"fields": [
            {"name": "search_text", "nullable": true, "type": {"type": "utf8"}},
            {"name": "token_count", "nullable": true, "type": {"type": "int64"}}
        ]},
        "outputs": [
            {"result_field": "normalized_text", "output_name": "search_text", "output_ordinal": 0},
            {"result_field": "token_count", "output_name": "token_count", "output_ordinal": 1}
        ]
    });
    let before = s.version("f").await;
    s.ok(
        "/v1/table/f/add_columns",
        json!({"new_columns": [{"name": "search_text", "all_null": true},
                               {"name": "token_count", "all_null": true}],
               "function": function}),
    )
    .await;
    assert!(s.version("f").await > before);
    let d = s.ok("/v1/table/f/describe", json!({})).await;
    let meta = field_meta(&d["schema"], "token_count");
    assert_eq!(meta["computed_column.kind"], "function", "{d}");
    assert_eq!(meta["computed_column.function.output_ordinal"], "1");
    let binding = meta["computed_column.function.binding_id"]
        .as_str()
        .unwrap()
        .to_string();
    let bindings: Value = serde_json::from_str(
        d["schema"]["metadata"]["lancedb::function_bindings"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        bindings[&binding]["application"]["function"]["name"],
        "text_features"
    );
    // Rows written later carry nulls there.
    let (st, b) = s.post_arrow("/v1/table/f/insert", &sample(5, 1)).await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(
        s.count("f", json!({"predicate": "token_count IS NULL"}))
            .await,
        4
    );
    let (st, b) = s
        .post(
            "/v1/table/f/backfill_column",
            json!({"column": "token_count"}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    assert!(b["detail"].as_str().unwrap().contains("Function"), "{b}");
    // A declaration whose outputs are not in output_schema is refused and adds nothing.
    let v = s.version("f").await;
    let (st, b) = s
        .post(
            "/v1/table/f/add_columns",
            json!({"new_columns": [{"name": "other", "all_null": true}], "function": function}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    assert_eq!(s.version("f").await, v);
}
