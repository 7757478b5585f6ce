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
async fn function_columns_are_declared_as_lancedb_bindings_and_refreshed() {
    let s = crate::functions::server().await;
    s.create_table("f", 3).await;
    let source = "def text_features(body):\n    text = body or ''\n    \
                  return {'normalized_text': text.upper(), 'token_count': len(text.split())}\n";
    let output = json!({"kind": "named_struct", "fields": [
        {"name": "normalized_text", "arrow_type": "utf8", "nullable": false},
        {"name": "token_count", "arrow_type": "int64", "nullable": false}
    ]});
    let built = crate::functions::build(
        &s,
        "text_features",
        crate::functions::registration(
            source,
            "text_features",
            json!([{"name": "body", "arrow_type": "utf8", "nullable": true}]),
            output.clone(),
        ),
    )
    .await;
    assert_eq!(built["job_state"], "DONE", "{built}");
    let v = &built["result"];
    let function = json!({
        "application": {
            "function": {"name": "text_features", "object_id": v["object_id"],
                         "location": v["location"], "version": v["version"],
                         "manifest_digest": v["image"]["manifest_digest"]},
            "inputs": [{"parameter": "body", "kind": "column", "value": {"path": "text"}}],
            "output": output,
            "columns": {"normalized_text": "search_text"}
        },
        "binding_metadata_version": 1,
        "input_bindings": [{"parameter": "body", "field_path": "text", "arrow_type": "utf8", "nullable": true}],
        "input_schema": {"fields": [{"name": "body", "nullable": true, "type": {"type": "utf8"}}]},
        "output_schema": {"fields": [
            {"name": "search_text", "nullable": true, "type": {"type": "utf8"}},
            {"name": "token_count", "nullable": true, "type": {"type": "int64"}}
        ]},
        "outputs": [
            {"result_field": "normalized_text", "output_name": "search_text", "output_ordinal": 0},
            {"result_field": "token_count", "output_name": "token_count", "output_ordinal": 1}
        ]
    });
    let columns = json!([{"name": "search_text", "all_null": true},
                         {"name": "token_count", "all_null": true}]);
    let before = s.version("f").await;
    s.ok(
        "/v1/table/f/add_columns",
        json!({"new_columns": columns, "function": function}),
    )
    .await;
    assert!(s.version("f").await > before);
    let d = s.ok("/v1/table/f/describe", json!({})).await;
    let meta = field_meta(&d["schema"], "token_count");
    assert_eq!(meta["computed_column.kind"], "function", "{d}");
    assert_eq!(meta["computed_column.function.output_ordinal"], "1");
    assert_eq!(meta["computed_column.inputs"], r#"["text"]"#);
    let binding = meta["computed_column.function.binding_id"]
        .as_str()
        .unwrap()
        .to_string();
    // lancedb's own envelope, which the client reads back and checks every write against.
    let envelope: Value = serde_json::from_str(
        d["schema"]["metadata"]["lancedb::function_bindings"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(envelope["version"], 1, "{envelope}");
    let b = &envelope["bindings"][0];
    assert_eq!(b["binding_id"], binding.as_str());
    assert_eq!(b["function"]["name"], "text_features");
    assert_eq!(b["inputs"][0]["field_path"], "text");
    assert_eq!(b["outputs"][1]["output_name"], "token_count");
    assert_eq!(b["outputs"][1]["nullable"], false);

    // Rows written later carry nulls there until a refresh.
    let (st, b) = s.post_arrow("/v1/table/f/insert", &sample(5, 1)).await;
    assert_eq!(st, 200, "{b}");
    for column in ["search_text", "token_count"] {
        let job = s.backfill("f", json!({"column": column})).await;
        let done = s.wait_job(&job).await;
        assert_eq!(done["job_state"], "DONE", "{done}");
        assert_eq!(done["result"]["rows_assigned"], 4, "{done}");
    }
    let rows = s
        .query(
            "f",
            json!({"columns": ["id", "search_text", "token_count"], "limit": 10}),
        )
        .await;
    let mut seen = 0;
    for batch in &rows {
        let ids = batch
            .column_by_name("id")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap();
        let texts = batch
            .column_by_name("search_text")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .unwrap();
        let counts = batch
            .column_by_name("token_count")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap();
        for i in 0..batch.num_rows() {
            assert_eq!(texts.value(i), format!("ROW {}", ids.value(i)));
            assert_eq!(counts.value(i), 2);
            seen += 1;
        }
    }
    assert_eq!(seen, 4);

    // A declaration naming a version the registry does not hold adds nothing.
    let v = s.version("f").await;
    let mut missing = function.clone();
    missing["application"]["function"]["version"] = json!("9");
    let (st, b) = s
        .post(
            "/v1/table/f/add_columns",
            json!({"new_columns": [{"name": "other", "all_null": true}], "function": missing}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    assert!(b["detail"].as_str().unwrap().contains("version 9"), "{b}");
    // A field Lancet does not know is refused by name, not dropped.
    let mut unknown = function.clone();
    unknown["application"]["retry_policy"] = json!("skip");
    let (st, b) = s
        .post(
            "/v1/table/f/add_columns",
            json!({"new_columns": columns, "function": unknown}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    assert!(
        b["detail"].as_str().unwrap().contains("retry_policy"),
        "{b}"
    );
    // Only some of a binding's outputs: lancedb would refuse every later write to the table.
    let mut partial = function.clone();
    partial["output_schema"]["fields"] = json!([
        {"name": "again", "nullable": true, "type": {"type": "int64"}}
    ]);
    partial["outputs"] = json!([
        {"result_field": "normalized_text", "output_name": "again_text", "output_ordinal": 0},
        {"result_field": "token_count", "output_name": "again", "output_ordinal": 1}
    ]);
    let (st, b) = s
        .post(
            "/v1/table/f/add_columns",
            json!({"new_columns": [{"name": "again", "all_null": true}], "function": partial}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    assert!(b["detail"].as_str().unwrap().contains("in order"), "{b}");
    assert_eq!(s.version("f").await, v);
}
