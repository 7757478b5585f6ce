use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn versions_restore_and_tags() {
    let s = Server::start().await;
    s.create_table("h", 3).await; // v1
    s.post_arrow("/v1/table/h/insert", &sample(3, 3)).await; // v2
    s.ok("/v1/table/h/delete", json!({"predicate": "id < 2"}))
        .await; // v3
    let v = s.ok("/v1/table/h/version/list", json!({})).await;
    let versions: Vec<u64> = v["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["version"].as_u64().unwrap())
        .collect();
    assert_eq!(versions, vec![1, 2, 3]);
    // Each version names its manifest file (its path in the object store, as upstream's
    // directory namespace answers it), with its size and e-tag.
    let location = s.ok("/v1/table/h/describe", json!({})).await["location"]
        .as_str()
        .unwrap()
        .to_string();
    for entry in v["versions"].as_array().unwrap() {
        let path = entry["manifest_path"].as_str().unwrap();
        let root = location
            .trim_start_matches("file://")
            .trim_start_matches('/');
        assert!(path.starts_with(&format!("{root}/_versions/")), "{entry}");
        let on_disk =
            std::fs::metadata(format!("/{path}")).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(entry["manifest_size"], on_disk.len(), "{entry}");
        assert!(entry["e_tag"].is_string(), "{entry}");
    }
    let d = s
        .ok("/v1/table/h/version/describe", json!({"version": 2}))
        .await;
    assert_eq!(d["version"]["version"], 2, "{d}");
    assert_eq!(
        d["version"]["manifest_path"],
        v["versions"][1]["manifest_path"]
    );
    let d = s.ok("/v1/table/h/version/describe", json!({})).await;
    assert_eq!(d["version"]["version"], 3, "the latest by default: {d}");
    let (st, b) = s
        .post("/v1/table/h/version/describe", json!({"version": 42}))
        .await;
    assert_error(st, &b, 404, 11);
    let p = s.ok("/v1/table/h/version/list", json!({"limit": 2})).await;
    assert_eq!(p["versions"].as_array().unwrap().len(), 2);
    let rest = s
        .ok(
            "/v1/table/h/version/list",
            json!({"limit": 2, "page_token": p["page_token"]}),
        )
        .await;
    assert_eq!(rest["versions"][0]["version"], 3);

    // Tags.
    s.ok(
        "/v1/table/h/tags/create",
        json!({"tag": "first", "version": 1}),
    )
    .await;
    let (status, body) = s
        .post(
            "/v1/table/h/tags/create",
            json!({"tag": "first", "version": 2}),
        )
        .await;
    assert_error(status, &body, 409, 9);
    assert_eq!(
        s.ok("/v1/table/h/tags/version", json!({"tag": "first"}))
            .await["version"],
        1
    );
    s.ok(
        "/v1/table/h/tags/update",
        json!({"tag": "first", "version": 2}),
    )
    .await;
    assert_eq!(
        s.ok("/v1/table/h/tags/version", json!({"tag": "first"}))
            .await["version"],
        2
    );
    let tags = s.ok("/v1/table/h/tags/list", json!({})).await;
    assert_eq!(tags["tags"]["first"]["version"], 2);
    // exists with a version or branch checks them too.
    let (st, _) = s.post("/v1/table/h/exists", json!({"version": 1})).await;
    assert_eq!(st, 200);
    let (st, b) = s.post("/v1/table/h/exists", json!({"version": 999})).await;
    assert_error(st, &b, 404, 11);
    let (st, b) = s
        .post("/v1/table/h/exists", json!({"branch": "nope"}))
        .await;
    assert_eq!(st, 404, "{b}");
    // Describe by tag answers the tagged version, not the latest.
    let latest = s.version("h").await;
    assert_ne!(latest, 2);
    let d = s.ok("/v1/table/h/describe", json!({"tag": "first"})).await;
    assert_eq!(d["version"], 2, "{d}");
    let (status, body) = s
        .post(
            "/v1/table/h/describe",
            json!({"tag": "first", "version": 1}),
        )
        .await;
    assert_error(status, &body, 400, 13);
    let (status, body) = s.post("/v1/table/h/describe", json!({"tag": "nope"})).await;
    assert_error(status, &body, 404, 8);
    let (status, body) = s
        .post(
            "/v1/table/h/tags/create",
            json!({"tag": "bad", "version": 99}),
        )
        .await;
    assert_error(status, &body, 404, 11);
    s.ok("/v1/table/h/tags/delete", json!({"tag": "first"}))
        .await;
    let (status, body) = s
        .post("/v1/table/h/tags/version", json!({"tag": "first"}))
        .await;
    assert_error(status, &body, 404, 8);

    // Restore to v1: a new version whose rows are v1's.
    assert_eq!(s.count("h", json!({})).await, 4);
    s.ok("/v1/table/h/restore", json!({"version": 1})).await;
    assert_eq!(s.version("h").await, 4);
    assert_eq!(s.count("h", json!({})).await, 3);
    let rows = s.query("h", json!({"columns": ["id"]})).await;
    let mut got = ids(&rows);
    got.sort();
    assert_eq!(got, vec![0, 1, 2]);
    let (status, body) = s.post("/v1/table/h/restore", json!({"version": 77})).await;
    assert_error(status, &body, 404, 11);
}

#[tokio::test]
async fn branches_are_isolated() {
    let s = Server::start().await;
    s.create_table("b", 3).await;
    s.ok("/v1/table/b/branches/create", json!({"name": "dev"}))
        .await;
    let (status, body) = s
        .post("/v1/table/b/branches/create", json!({"name": "dev"}))
        .await;
    assert_error(status, &body, 409, 23);

    // Writes on the branch, through body field and query parameter.
    let (status, v) = s
        .post_arrow("/v1/table/b/insert?branch=dev", &sample(3, 2))
        .await;
    assert_eq!(status, 200, "{v}");
    s.ok(
        "/v1/table/b/delete",
        json!({"predicate": "id = 0", "branch": "dev"}),
    )
    .await;
    s.ok(
        "/v1/table/b/update",
        json!({"updates": [["text", "'dev'"]], "branch": "dev"}),
    )
    .await;
    assert_eq!(s.count("b", json!({"branch": "dev"})).await, 4);
    assert_eq!(s.count("b", json!({})).await, 3, "main must not change");
    assert_eq!(s.version("b").await, 1);
    let main_rows = s.query("b", json!({"filter": "text = 'dev'"})).await;
    assert_eq!(main_rows.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
    let dev_rows = s
        .query("b", json!({"filter": "text = 'dev'", "branch": "dev"}))
        .await;
    assert_eq!(dev_rows.iter().map(|b| b.num_rows()).sum::<usize>(), 4);

    // Branch from a branch at a version.
    s.ok(
        "/v1/table/b/branches/create",
        json!({"name": "dev2", "from_branch": "dev", "from_version": 2}),
    )
    .await;
    assert_eq!(s.count("b", json!({"branch": "dev2"})).await, 5);

    let list = s.ok("/v1/table/b/branches/list", json!({})).await;
    assert_eq!(list["branches"].as_object().unwrap().len(), 2);
    assert_eq!(list["branches"]["dev2"]["parentVersion"], 2);
    assert_eq!(list["branches"]["dev2"]["parent_branch"], "dev");
    let page = s.ok("/v1/table/b/branches/list?limit=1", json!({})).await;
    assert_eq!(page["branches"].as_object().unwrap().len(), 1);
    assert_eq!(page["page_token"], "dev");

    s.ok("/v1/table/b/branches/delete", json!({"name": "dev2"}))
        .await;
    let (status, body) = s
        .post("/v1/table/b/count_rows", json!({"branch": "dev2"}))
        .await;
    assert_error(status, &body, 404, 22);
    let (status, body) = s
        .post("/v1/table/b/branches/delete", json!({"name": "nope"}))
        .await;
    assert_error(status, &body, 404, 22);
}

#[tokio::test]
async fn concurrent_branch_creation_yields_one_conflict() {
    let s = Server::start().await;
    s.create_table("r", 2).await;
    let a = s.post("/v1/table/r/branches/create", json!({"name": "x"}));
    let b = s.post("/v1/table/r/branches/create", json!({"name": "x"}));
    let ((sa, _), (sb, _)) = tokio::join!(a, b);
    let mut statuses = vec![sa, sb];
    statuses.sort();
    assert_eq!(statuses, vec![200, 409]);
}
