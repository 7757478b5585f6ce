//! `GET /v1/openapi.json`: generated from the route table, so it lists every route with its
//! method, and its body schemas name the fields the handlers read.

use serde_json::{Value, json};

use crate::common::Server;

/// The schema a `$ref` points at, or the schema itself.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(r) => {
            let name = r.strip_prefix("#/components/schemas/").unwrap();
            &doc["components"]["schemas"][name]
        }
        None => schema,
    }
}

fn body_schema<'a>(doc: &'a Value, path: &str) -> &'a Value {
    let schema =
        &doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"];
    assert!(schema.is_object(), "no JSON body schema for {path}");
    resolve(doc, schema)
}

fn properties(doc: &Value, path: &str) -> Vec<String> {
    let mut names: Vec<String> = body_schema(doc, path)["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("{path}: no properties"))
        .keys()
        .cloned()
        .collect();
    names.sort();
    names
}

fn has_all(doc: &Value, path: &str, fields: &[&str]) {
    let names = properties(doc, path);
    for f in fields {
        assert!(
            names.iter().any(|n| n == f),
            "{path} body lacks '{f}': {names:?}"
        );
    }
}

#[tokio::test]
async fn openapi_lists_every_route_with_its_method() {
    let s = Server::start().await;
    let (status, doc) = s.get("/v1/openapi.json").await;
    assert_eq!(status, 200, "{doc}");
    let version = doc["openapi"].as_str().unwrap();
    assert!(version.starts_with("3.1."), "{version}");
    assert!(
        doc.get("context").is_none(),
        "no context key in the document"
    );
    let table = lancet::http::route_table();
    assert!(table.len() > 40);
    let mut documented = 0;
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            documented += 1;
            assert!(
                table
                    .iter()
                    .any(|r| r.path == path && r.method.eq_ignore_ascii_case(method)),
                "{method} {path} is documented but not routed"
            );
        }
    }
    for route in &table {
        let op = &doc["paths"][route.path][route.method.to_ascii_lowercase()];
        assert!(op.is_object(), "{} {} is missing", route.method, route.path);
        assert_eq!(op["x-lancet-role"], route.role.to_string());
        // Every {param} of the path is a documented path parameter.
        for seg in route.path.split('/') {
            if let Some(name) = seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                assert!(
                    op["parameters"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|p| p["name"] == name && p["in"] == "path"),
                    "{} {}: path parameter {name}",
                    route.method,
                    route.path
                );
            }
        }
        // Errors are the spec's shape.
        assert_eq!(
            op["responses"]["4XX"]["$ref"],
            "#/components/responses/Error"
        );
    }
    assert_eq!(documented, table.len());
    let error = &doc["components"]["schemas"]["Error"];
    for field in [
        "type", "title", "status", "detail", "instance", "code", "error",
    ] {
        assert!(
            error["required"]
                .as_array()
                .unwrap()
                .contains(&json!(field))
        );
    }
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["bearer"]["scheme"], "bearer");
    assert_eq!(schemes["apiKey"]["name"], "x-api-key");
}

#[tokio::test]
async fn openapi_body_schemas_name_the_fields_handlers_read() {
    let s = Server::start().await;
    let (_, doc) = s.get("/v1/openapi.json").await;
    // Lancet's own structs (schemars).
    has_all(
        &doc,
        "/v1/table/{id}/update",
        &["updates", "predicate", "branch", "id"],
    );
    has_all(
        &doc,
        "/v1/table/{id}/count_rows",
        &["version", "predicate", "branch"],
    );
    has_all(
        &doc,
        "/v1/table/{id}/create_index",
        &[
            "column",
            "index_type",
            "distance_type",
            "num_partitions",
            "replace",
        ],
    );
    has_all(
        &doc,
        "/v1/table/{id}/backfill_column",
        &["column", "where", "concurrency"],
    );
    has_all(&doc, "/v1/table/{id}/alter_columns", &["alterations"]);
    // The query parser's fields, dialect-tolerant types.
    has_all(
        &doc,
        "/v1/table/{id}/query",
        &[
            "vector",
            "k",
            "filter",
            "columns",
            "full_text_query",
            "version",
            "nprobes",
        ],
    );
    // Upstream models, traced from their Deserialize impls: every field, required ones marked.
    has_all(
        &doc,
        "/v1/table/{id}/rename",
        &[
            "new_table_name",
            "new_namespace_id",
            "identity",
            "context",
            "id",
        ],
    );
    let rename = body_schema(&doc, "/v1/table/{id}/rename");
    assert_eq!(rename["required"], json!(["new_table_name"]));
    assert_eq!(rename["properties"]["new_table_name"]["type"], "string");
    has_all(&doc, "/v1/namespace/{id}/drop", &["mode", "behavior"]);
    has_all(&doc, "/v1/table/{id}/register", &["location"]);
    // Query parameters and body kinds.
    let merge = &doc["paths"]["/v1/table/{id}/merge_insert"]["post"];
    let on = merge["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "on")
        .expect("merge_insert's `on`");
    assert_eq!(on["required"], true);
    assert!(
        merge["requestBody"]["content"]["application/vnd.apache.arrow.stream"].is_object(),
        "{merge}"
    );
    let count = &doc["paths"]["/v1/table/{id}/count_rows"]["post"]["responses"]["200"];
    assert_eq!(
        count["content"]["application/json"]["schema"]["type"],
        "integer"
    );
    let query = &doc["paths"]["/v1/table/{id}/query"]["post"]["responses"]["200"];
    assert!(query["content"]["application/vnd.apache.arrow.file"].is_object());
    // The document itself needs a credential, like every /v1 route.
    let (status, _) = crate::common::Handle {
        base: s.base.clone(),
        client: reqwest::Client::new(),
    }
    .get("/v1/openapi.json")
    .await;
    assert_eq!(status, 401);
}

/// Found by the schema-driven fuzzer (tests/python/test_fuzz.py): a namespace or database name
/// with a single quote broke the catalog's listing query (a 500 leaking the SQL). Now a 400,
/// in the spec's error shape, before anything is created.
#[tokio::test]
async fn quoted_namespace_names_are_refused_not_a_server_error() {
    let s = Server::start().await;
    for path in [
        "/v1/namespace/q'x/create",
        "/v1/namespace/q'x/list",
        "/v1/namespace/q'x/table/list",
    ] {
        let (status, body) = s.post(path, json!({})).await;
        crate::common::assert_error(status, &body, 400, 13);
        assert_eq!(body["type"], "/errors/bad-request");
    }
    let r = s
        .client
        .get(s.url("/v1/tables"))
        .header("x-service-database", "a'b")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let (status, body) = s.post("/v1/namespace/$/list", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["namespaces"], json!([]));
}

/// Found by the fuzzer: a table id whose (percent-encoded) directory name passes the file
/// system's 255-byte limit was a 500 from batch-commit and declare, and a table created under
/// one could not be dropped. Now refused with a 400 before anything is written; long plain
/// names still work end to end.
#[tokio::test]
async fn table_ids_too_long_for_the_storage_are_refused() {
    let s = Server::start().await;
    let long = "é".repeat(100);
    let (status, body) = s
        .post(&format!("/v1/table/{long}/declare"), json!({}))
        .await;
    crate::common::assert_error(status, &body, 400, 13);
    let (status, body) = s
        .post(
            "/v1/table/batch-commit",
            json!({"operations": [{"declare_table": {"id": [long]}}]}),
        )
        .await;
    crate::common::assert_error(status, &body, 400, 13);
    let batch = crate::common::sample(0, 2);
    let (status, body) = s
        .post_arrow(&format!("/v1/table/{long}/create"), &batch)
        .await;
    crate::common::assert_error(status, &body, 400, 13);
    let plain = "a".repeat(240);
    let (status, body) = s
        .post_arrow(&format!("/v1/table/{plain}/create"), &batch)
        .await;
    assert_eq!(status, 200, "{body}");
    s.ok(&format!("/v1/table/{plain}/drop"), json!({})).await;
}

/// Found while checking the long-id fix: dropping a table created under an id with characters a
/// URL escapes was a 500 that left its directory behind (lance-namespace encodes the stored
/// location a second time). Now the drop succeeds, the files go, and the name can be reused.
#[tokio::test]
async fn tables_with_escaped_names_drop_cleanly() {
    let s = Server::start().await;
    let batch = crate::common::sample(0, 3);
    for name in ["éé", "{x}"] {
        let path = format!("/v1/table/{}", urlencode(name));
        let (status, body) = s.post_arrow(&format!("{path}/create"), &batch).await;
        assert_eq!(status, 200, "{body}");
        s.ok(&format!("{path}/drop"), json!({})).await;
        let (status, _) = s.post(&format!("{path}/exists"), json!({})).await;
        assert_eq!(status, 404);
        let (status, body) = s.post_arrow(&format!("{path}/create"), &batch).await;
        assert_eq!(status, 200, "{body}");
    }
    let tenant = s.data_dir().join("tenants").join("default");
    let dirs = std::fs::read_dir(&tenant)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            !name.to_string_lossy().starts_with('_')
        })
        .count();
    assert_eq!(
        dirs, 2,
        "a dropped table's directory was left in {tenant:?}"
    );
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
