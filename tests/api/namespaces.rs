use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn namespace_lifecycle_and_pagination() {
    let s = Server::start().await;
    for ns in ["a", "b", "c"] {
        s.ok(&format!("/v1/namespace/{ns}/create"), json!({})).await;
    }
    let (status, body) = s.post("/v1/namespace/a/create", json!({})).await;
    assert_error(status, &body, 409, 2);
    // ExistOk keeps it (and its properties); Overwrite drops its contents and recreates it.
    s.ok(
        "/v1/namespace/m/create",
        json!({"properties": {"owner": "ana"}}),
    )
    .await;
    s.create_table("m$t", 3).await;
    let r = s
        .ok(
            "/v1/namespace/m/create",
            json!({"mode": "ExistOk", "properties": {"owner": "bo"}}),
        )
        .await;
    assert_eq!(r["properties"], json!({"owner": "ana"}), "{r}");
    let (st, _) = s.post("/v1/table/m$t/exists", json!({})).await;
    assert_eq!(st, 200);
    s.ok(
        "/v1/namespace/m/create?mode=overwrite",
        json!({"properties": {"owner": "cy"}}),
    )
    .await;
    let d = s.ok("/v1/namespace/m/describe", json!({})).await;
    assert_eq!(d["properties"], json!({"owner": "cy"}), "{d}");
    let (st, _) = s.post("/v1/table/m$t/exists", json!({})).await;
    assert_eq!(st, 404, "overwrite drops the namespace's tables");
    let (st, b) = s
        .post("/v1/namespace/m/create", json!({"mode": "replace"}))
        .await;
    assert_error(st, &b, 400, 13);
    s.ok("/v1/namespace/m/drop", json!({})).await;

    let (_, page1) = s.get("/v1/namespace/$/list?limit=2").await;
    assert_eq!(page1["namespaces"], json!(["a", "b"]));
    let token = page1["page_token"]
        .as_str()
        .expect("a page token when more remain");
    let (_, page2) = s
        .get(&format!("/v1/namespace/$/list?limit=2&page_token={token}"))
        .await;
    assert_eq!(page2["namespaces"], json!(["c"]));
    assert!(page2["page_token"].is_null() || page2["page_token"] == "");

    s.ok("/v1/namespace/a/exists", json!({})).await;
    let (status, body) = s.post("/v1/namespace/zzz/exists", json!({})).await;
    assert_error(status, &body, 404, 1);
    s.ok("/v1/namespace/a/describe", json!({})).await;

    // Nested namespace and a table inside it: dropping the parent needs cascade.
    s.ok("/v1/namespace/a$inner/create", json!({})).await;
    let (status, v) = s
        .post_arrow("/v1/table/a$inner$t/create", &sample(0, 3))
        .await;
    assert_eq!(status, 200, "{v}");
    let (_, tables) = s.get("/v1/namespace/a$inner/table/list").await;
    assert_eq!(tables["tables"], json!(["t"]));
    let (status, body) = s.post("/v1/namespace/a/drop", json!({})).await;
    assert_error(status, &body, 409, 3);
    s.ok("/v1/namespace/a/drop", json!({"behavior": "Cascade"}))
        .await;
    let (status, _) = s.post("/v1/namespace/a/exists", json!({})).await;
    assert_eq!(status, 404);
    let (status, body) = s.post("/v1/table/a$inner$t/describe", json!({})).await;
    assert_error(status, &body, 404, 4);
    // Other delimiter.
    s.ok("/v1/namespace/b.x/create?delimiter=.", json!({}))
        .await;
    s.ok("/v1/namespace/b$x/exists", json!({})).await;
}

#[tokio::test]
async fn table_catalog_lifecycle() {
    let s = Server::start().await;
    // Per-table storage options would be ignored: refused, naming the field.
    let (st, b) = s
        .post_arrow(
            "/v1/table/t0/create?storage_options=%7B%22region%22%3A%22x%22%7D",
            &sample(0, 2),
        )
        .await;
    assert_error(st, &b, 400, 13);
    assert!(
        b["error"].as_str().unwrap().contains("storage_options"),
        "{b}"
    );
    let (st, _) = s.post("/v1/table/t0/exists", json!({})).await;
    assert_eq!(st, 404);
    let (st, b) = s
        .post_arrow("/v1/table/t0/create?storage_options=%7B%7D", &sample(0, 2))
        .await;
    assert_eq!(st, 200, "empty options are fine: {b}");
    s.ok("/v1/table/t0/drop", json!({})).await;
    s.create_table("t1", 5).await;
    let d = s.ok("/v1/table/t1/describe", json!({})).await;
    assert_eq!(d["version"], 1);
    let names: Vec<&str> = d["schema"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["id", "text", "vec"]);
    assert!(d["location"].as_str().unwrap().contains("t1"));
    // lancedb sends describe with no body at all.
    let r = s
        .client
        .post(s.url("/v1/table/t1/describe/"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    s.ok("/v1/table/t1/exists", json!({})).await;

    // Modes: create on an existing table is a 400 that says "already exists" (what the lancedb
    // SDKs recognise); exist_ok keeps it; overwrite replaces it.
    let (status, body) = s.post_arrow("/v1/table/t1/create", &sample(0, 2)).await;
    assert_error(status, &body, 400, 5);
    assert!(
        body["detail"].as_str().unwrap().contains("already exists"),
        "{body}"
    );
    assert_eq!(
        body["title"], "Malformed request",
        "Part 7's, whatever happened"
    );
    let (status, _) = s
        .post_arrow("/v1/table/t1/create?mode=exist_ok", &sample(0, 2))
        .await;
    assert_eq!(status, 200);
    assert_eq!(s.count("t1", json!({})).await, 5);
    let (status, _) = s
        .post_arrow("/v1/table/t1/create?mode=overwrite", &sample(100, 2))
        .await;
    assert_eq!(status, 200);
    assert_eq!(s.count("t1", json!({})).await, 2);

    for name in ["t2", "t3"] {
        s.create_table(name, 1).await;
    }
    let (_, p1) = s.get("/v1/namespace/$/table/list?limit=2").await;
    assert_eq!(p1["tables"], json!(["t1", "t2"]));
    let (_, p2) = s
        .get(&format!(
            "/v1/namespace/$/table/list?limit=2&page_token={}",
            p1["page_token"].as_str().unwrap()
        ))
        .await;
    assert_eq!(p2["tables"], json!(["t3"]));
    let (_, all) = s.get("/v1/table/").await;
    assert_eq!(all["tables"], json!(["t1", "t2", "t3"]));

    // Deregister keeps the data; register brings it back under a new name.
    let dereg = s.ok("/v1/table/t2/deregister", json!({})).await;
    let location = dereg["location"].as_str().unwrap().to_string();
    let (status, _) = s.post("/v1/table/t2/exists", json!({})).await;
    assert_eq!(status, 404);
    s.ok("/v1/table/t2b/register", json!({"location": location}))
        .await;
    assert_eq!(s.count("t2b", json!({})).await, 1);

    s.ok("/v1/table/t3/drop", json!({})).await;
    let (status, body) = s.post("/v1/table/t3/count_rows", json!({})).await;
    assert_error(status, &body, 404, 4);
}

#[tokio::test]
async fn declared_table_is_created_by_merge_insert() {
    let s = Server::start().await;
    s.ok("/v1/table/decl/declare", json!({})).await;
    let d = s.ok("/v1/table/decl/describe", json!({})).await;
    assert_eq!(d["is_only_declared"], true);
    let (status, v) = s.post_arrow("/v1/table/decl/merge_insert?on=id&when_matched_update_all=true&when_not_matched_insert_all=true", &sample(0, 4)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["num_inserted_rows"], 4);
    assert_eq!(s.count("decl", json!({})).await, 4);
    assert_eq!(
        s.ok("/v1/table/decl/describe", json!({})).await["is_only_declared"],
        false
    );
}

#[tokio::test]
async fn rename_moves_a_table_between_namespaces_and_keeps_its_data() {
    let s = Server::start().await;
    s.ok("/v1/namespace/a/create", json!({})).await;
    s.ok("/v1/namespace/b/create", json!({})).await;
    s.create_table("a$t", 4).await;
    s.create_table("a$taken", 1).await;
    s.ok("/v1/table/a$t/rename", json!({"new_table_name": "u"}))
        .await;
    assert_eq!(s.count("a$u", json!({})).await, 4);
    let (status, _) = s.post("/v1/table/a$t/describe", json!({})).await;
    assert_eq!(status, 404);
    s.ok(
        "/v1/table/a$u/rename",
        json!({"new_table_name": "v", "new_namespace_id": ["b"]}),
    )
    .await;
    assert_eq!(s.count("b$v", json!({})).await, 4);
    assert_eq!(s.version("b$v").await, 1);
    // Writes keep working under the new name.
    let (status, v) = s.post_arrow("/v1/table/b$v/insert", &sample(10, 2)).await;
    assert_eq!((status, v["version"].as_u64()), (200, Some(2)));
    // Bad renames change nothing.
    let (status, body) = s
        .post(
            "/v1/table/b$v/rename",
            json!({"new_table_name": "taken", "new_namespace_id": ["a"]}),
        )
        .await;
    assert_error(status, &body, 409, 5);
    let (status, body) = s
        .post(
            "/v1/table/b$v/rename",
            json!({"new_table_name": "w", "new_namespace_id": ["nope"]}),
        )
        .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = s
        .post("/v1/table/b$missing/rename", json!({"new_table_name": "w"}))
        .await;
    assert_error(status, &body, 404, 4);
    assert_eq!(s.count("b$v", json!({})).await, 6);
    assert_eq!(s.count("a$taken", json!({})).await, 1);
}

#[tokio::test]
async fn list_all_tables_walks_every_namespace() {
    let s = Server::start().await;
    s.ok("/v1/namespace/a/create", json!({})).await;
    s.ok("/v1/namespace/a$b/create", json!({})).await;
    s.ok("/v1/namespace/c/create", json!({})).await;
    for t in ["top", "a$t1", "a$b$t2", "c$t3"] {
        s.create_table(t, 1).await;
    }
    s.ok("/v1/table/c$declared/declare", json!({})).await;
    // Declared tables are included unless asked not to (the spec's default).
    let (st, all) = s.get("/v1/table").await;
    assert_eq!(st, 200, "{all}");
    assert_eq!(
        all["tables"],
        json!(["a$b$t2", "a$t1", "c$declared", "c$t3", "top"])
    );
    let (_, created) = s.get("/v1/table?include_declared=false").await;
    assert_eq!(created["tables"], json!(["a$b$t2", "a$t1", "c$t3", "top"]));
    let (_, dotted) = s.get("/v1/table?delimiter=.&include_declared=false").await;
    assert_eq!(dotted["tables"], json!(["a.b.t2", "a.t1", "c.t3", "top"]));
    let (_, page1) = s.get("/v1/table?limit=2&include_declared=false").await;
    assert_eq!(page1["tables"], json!(["a$b$t2", "a$t1"]));
    let token = page1["page_token"].as_str().unwrap();
    let (_, page2) = s
        .get(&format!(
            "/v1/table?limit=2&page_token={token}&include_declared=false"
        ))
        .await;
    assert_eq!(page2["tables"], json!(["c$t3", "top"]));
    // The same from the catalog snapshot (declared tables included): delimiter and pages.
    let (_, dotted) = s.get("/v1/table?delimiter=.").await;
    assert_eq!(
        dotted["tables"],
        json!(["a.b.t2", "a.t1", "c.declared", "c.t3", "top"])
    );
    let (_, page1) = s.get("/v1/table?limit=3").await;
    assert_eq!(page1["tables"], json!(["a$b$t2", "a$t1", "c$declared"]));
    let token = page1["page_token"].as_str().unwrap();
    let (_, page2) = s
        .get(&format!("/v1/table?limit=3&page_token={token}"))
        .await;
    assert_eq!(page2["tables"], json!(["c$t3", "top"]));
    assert!(page2["page_token"].is_null(), "{page2}");
    // A database's own view: the tables below namespace `a`, named from there.
    let r = s
        .client
        .get(s.url("/v1/table"))
        .header("x-lancedb-database", "a")
        .send()
        .await
        .unwrap();
    let below: serde_json::Value = r.json().await.unwrap();
    assert_eq!(below["tables"], json!(["b$t2", "t1"]), "{below}");
}
