//! Versions published and removed through the namespace: `version/create`, `version/delete`,
//! `version/batch-create` (a client that manages a table's versions stages a manifest in the
//! table's directory and asks for it to become the next version).

use serde_json::json;

use crate::common::*;

/// A copy of `table`'s latest manifest staged in its directory; answers its object-store path.
pub(crate) async fn stage(s: &Handle, table: &str, name: &str) -> String {
    let location = s
        .ok(&format!("/v1/table/{table}/describe"), json!({}))
        .await["location"]
        .as_str()
        .unwrap()
        .trim_start_matches("file://")
        .to_string();
    let versions = std::path::Path::new(&location).join("_versions");
    let newest = std::fs::read_dir(&versions)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "manifest"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap())
        .unwrap();
    let staged = std::path::Path::new(&location).join(name);
    std::fs::copy(&newest, &staged).unwrap();
    staged.to_str().unwrap().trim_start_matches('/').to_string()
}

/// Take `table`'s latest version away and stage its manifest: the next `version/create`
/// puts it back (a staged manifest must carry the version number it is published as).
async fn take_latest(s: &Handle, table: &str, name: &str) -> (u64, String) {
    let v = s.version(table).await;
    let staged = stage(s, table, name).await;
    let r = s
        .ok(
            &format!("/v1/table/{table}/version/delete"),
            json!({"ranges": [{"start_version": v, "end_version": v + 1}]}),
        )
        .await;
    assert_eq!(r["deleted_count"], 1, "{r}");
    assert_eq!(s.version(table).await, v - 1);
    (v, staged)
}

#[tokio::test]
async fn versions_are_created_and_deleted_through_the_namespace() {
    let s = Server::start().await;
    s.create_table("a", 3).await; // v1
    s.post_arrow("/v1/table/a/insert", &sample(3, 2)).await; // v2
    s.post_arrow("/v1/table/a/insert", &sample(5, 2)).await; // v3
    let (v, staged) = take_latest(&s, "a", "next.manifest").await;
    assert_eq!(s.count("a", json!({})).await, 5);
    // A manifest staged for version 3 cannot be published as version 4.
    let (st, b) = s
        .post(
            "/v1/table/a/version/create",
            json!({"version": v + 1, "manifest_path": staged}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    assert!(
        b["detail"].as_str().unwrap().contains("is version 3"),
        "{b}"
    );
    assert_eq!(s.version("a").await, 2);
    let r = s
        .ok(
            "/v1/table/a/version/create",
            json!({"version": v, "manifest_path": staged}),
        )
        .await;
    assert_eq!(r["version"]["version"], 3, "{r}");
    assert_eq!(s.version("a").await, 3);
    assert_eq!(s.count("a", json!({})).await, 7);
    // The same version again is a conflict.
    let (st, b) = s
        .post(
            "/v1/table/a/version/create",
            json!({"version": 2, "manifest_path": staged}),
        )
        .await;
    assert!(st == 409 || st == 400, "{st} {b}");

    // A manifest outside the table's own directory is refused (it could be any object).
    let (st, b) = s
        .post(
            "/v1/table/a/version/create",
            json!({"version": 4, "manifest_path": "etc/passwd"}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    assert!(b["error"].as_str().unwrap().contains("not inside"), "{b}");
    assert_eq!(s.version("a").await, 3);

    let r = s
        .ok(
            "/v1/table/a/version/delete",
            json!({"ranges": [{"start_version": 1, "end_version": 2}]}),
        )
        .await;
    assert_eq!(r["deleted_count"], 1, "{r}");
    let list = s.ok("/v1/table/a/version/list", json!({})).await;
    let left: Vec<u64> = list["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect();
    assert_eq!(left, vec![2, 3]);
    // Ranges past the table's versions are cut to them before anything is committed: lance
    // refuses a range over a million versions, and a deletion failing after the commit was
    // retried (and failed) before every later batch-commit.
    let r = s
        .ok(
            "/v1/table/a/version/delete",
            json!({"ranges": [{"start_version": 1i64 << 61, "end_version": 1i64 << 62}]}),
        )
        .await;
    assert_eq!(r["deleted_count"], 0, "{r}");
    s.create_table("d", 1).await;
    s.post_arrow("/v1/table/d/insert", &sample(1, 1)).await;
    s.post_arrow("/v1/table/d/insert", &sample(2, 1)).await;
    let r = s
        .ok(
            "/v1/table/d/version/delete",
            json!({"ranges": [{"start_version": 1, "end_version": 1i64 << 62}]}),
        )
        .await;
    assert_eq!(r["deleted_count"], 3, "{r}");
    // ... and a later batch-commit has nothing left over to retry.
    let r = s
        .ok(
            "/v1/table/a/version/delete",
            json!({"ranges": [{"start_version": 2, "end_version": 3}]}),
        )
        .await;
    assert_eq!(r["deleted_count"], 1, "{r}");

    // batch-create: two tables, all or nothing.
    s.post_arrow("/v1/table/a/insert", &sample(7, 1)).await; // a v4
    let (va, sa) = take_latest(&s, "a", "a4.manifest").await;
    s.create_table("b", 2).await;
    s.post_arrow("/v1/table/b/insert", &sample(2, 2)).await; // b v2
    let (vb, sb) = take_latest(&s, "b", "b2.manifest").await;
    // One bad entry: neither is applied.
    let (st, b) = s
        .post(
            "/v1/table/version/batch-create",
            json!({"entries": [
                {"id": ["a"], "version": va, "manifest_path": sa},
                {"id": ["missing"], "version": 1, "manifest_path": "x/y.manifest"},
            ]}),
        )
        .await;
    assert!(st == 404 || st == 400, "{st} {b}");
    assert_eq!(s.version("a").await, 3);
    let r = s
        .ok(
            "/v1/table/version/batch-create",
            json!({"entries": [
                {"id": ["a"], "version": va, "manifest_path": sa},
                {"id": ["b"], "version": vb, "manifest_path": sb},
            ]}),
        )
        .await;
    let got: Vec<u64> = r["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect();
    assert_eq!(got, vec![4, 2], "{r}");
    assert_eq!((s.version("a").await, s.version("b").await), (4, 2));
    assert_eq!(s.count("a", json!({})).await, 8);
    assert_eq!(s.count("b", json!({})).await, 4);
    let (st, b) = s
        .post("/v1/table/version/batch-create", json!({"entries": []}))
        .await;
    assert_error(st, &b, 400, 13);
}
