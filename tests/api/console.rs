//! The web console's page files at `/console`, and the API calls it relies on that no other
//! test covers: `/v1/whoami`, JSON query and event answers, live row counts in `stats`, and
//! each version's operation. The pages themselves are driven in a browser by
//! tests/python/test_console.py.

use serde_json::{Value, json};

use crate::common::*;

async fn raw(s: &Server, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = reqwest::Client::new().get(s.url(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn console_files_are_served_with_etags_and_a_strict_policy() {
    let s = Server::start().await;
    // The page needs no key: it holds no data.
    let r = raw(&s, "/console", &[]).await;
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert_eq!(h["content-type"], "text/html; charset=utf-8");
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(csp.starts_with("default-src 'self'"), "{csp}");
    assert!(!csp.contains("unsafe"), "{csp}");
    assert_eq!(h["x-content-type-options"], "nosniff");
    let etag = h["etag"].to_str().unwrap().to_string();
    let body = r.text().await.unwrap();
    assert!(body.contains("/console/app.js"), "{body}");
    // Revalidation costs no body.
    let r = raw(&s, "/console", &[("if-none-match", &etag)]).await;
    assert_eq!(r.status(), 304);
    assert!(r.bytes().await.unwrap().is_empty());
    // Modules, with their own type and tag.
    let r = raw(&s, "/console/pages/jobs.js", &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    assert_ne!(r.headers()["etag"].to_str().unwrap(), etag);
    assert!(r.text().await.unwrap().contains("export function jobsPage"));
    // A missing asset is a 404; any other console address is the page (reloads work).
    assert_eq!(raw(&s, "/console/nope.js", &[]).await.status(), 404);
    let r = raw(&s, "/console/tables/anything", &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["etag"].to_str().unwrap(), etag);
    // The root leads to the console.
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(s.url("/"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/console");
}

#[tokio::test]
async fn console_false_serves_no_console() {
    let s = Server::start_with(tempfile::tempdir().unwrap(), &[("LANCET_CONSOLE", "false")]).await;
    assert_eq!(raw(&s, "/console", &[]).await.status(), 404);
    assert_eq!(raw(&s, "/console/app.js", &[]).await.status(), 404);
    // The API is unaffected.
    assert_eq!(s.get("/v1/whoami").await.0, 200);
}

#[tokio::test]
async fn whoami_names_the_tenant_and_role_of_the_credential() {
    let s = Server::start().await;
    let (st, me) = s.get("/v1/whoami").await;
    assert_eq!(st, 200, "{me}");
    assert_eq!(
        (
            me["tenant"].clone(),
            me["role"].clone(),
            me["scope"].clone()
        ),
        (json!("default"), json!("admin"), json!([]))
    );
    assert!(!me.to_string().contains(ADMIN_KEY));
    let key = s.new_key("acme", "read", &["sales"]).await;
    let (st, me) = s.with_key(&key).get("/v1/whoami").await;
    assert_eq!(st, 200, "{me}");
    assert_eq!(
        (
            me["tenant"].clone(),
            me["role"].clone(),
            me["scope"].clone()
        ),
        (json!("acme"), json!("read"), json!(["sales"]))
    );
    let (st, body) = s.with_key("wrong").get("/v1/whoami").await;
    assert_error(st, &body, 401, 16);
}

async fn json_post(s: &Server, path: &str, body: Value) -> (u16, Value) {
    let r = s
        .client
        .post(s.url(path))
        .header("accept", "application/vnd.lancet.rows+json")
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn queries_answer_json_rows_on_request() {
    let s = Server::start().await;
    s.create_table("t", 30).await;
    let (st, out) = json_post(
        &s,
        "/v1/table/t/query",
        json!({"filter": "id >= 10", "k": 3, "offset": 2, "with_row_id": true}),
    )
    .await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["num_rows"], 3);
    let ids: Vec<i64> = out["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![12, 13, 14]);
    assert_eq!(out["rows"][0]["text"], "row 12");
    assert_eq!(out["rows"][0]["vec"].as_array().unwrap().len(), 4);
    assert!(out["rows"][0]["_rowid"].is_u64());
    let names: Vec<&str> = out["schema"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["id", "text", "vec", "_rowid"]);
    // No rows: still the schema.
    let (_, out) = json_post(&s, "/v1/table/t/query", json!({"filter": "id < 0"})).await;
    assert_eq!(
        (out["num_rows"].clone(), out["rows"].clone()),
        (json!(0), json!([]))
    );
    assert_eq!(out["schema"]["fields"][0]["name"], "id");
    // Errors keep their JSON shape.
    let (st, body) = json_post(&s, "/v1/table/t/query", json!({"filter": "nope > 1"})).await;
    assert_error(st, &body, 400, 12);
    // Without the header: Arrow, as ever.
    assert_eq!(s.query("t", json!({"k": 5})).await[0].num_rows(), 5);
    // A plain JSON Accept (what the spec's generated client sends on every query) keeps the
    // spec's Arrow answer.
    let r = s
        .client
        .post(s.url("/v1/table/t/query"))
        .header(
            "accept",
            "application/vnd.apache.arrow.file, application/json",
        )
        .json(&json!({"k": 4}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "application/vnd.apache.arrow.file"
    );
    let bytes = r.bytes().await.unwrap();
    let reader = arrow_ipc::reader::FileReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
    let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rows, 4);
}

#[tokio::test]
async fn stats_count_live_rows_and_versions_name_their_operation() {
    let s = Server::start().await;
    s.create_table("t", 20).await;
    s.ok("/v1/table/t/delete", json!({"predicate": "id < 5"}))
        .await;
    let stats = s.ok("/v1/table/t/stats", json!({})).await;
    assert_eq!(stats["num_rows"], 15, "{stats}");
    assert_eq!(s.count("t", json!({})).await, 15);
    s.ok(
        "/v1/table/t/create_scalar_index",
        json!({"column": "id", "index_type": "BTREE"}),
    )
    .await;
    let list = s
        .ok(
            "/v1/table/t/version/list?descending=true",
            json!({"with_operations": true}),
        )
        .await;
    let ops: Vec<(u64, String)> = list["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_u64().unwrap(),
                v["operation"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect();
    assert_eq!(
        ops,
        [
            (3, "CreateIndex".to_string()),
            (2, "Delete".to_string()),
            (1, "Overwrite".to_string())
        ]
    );
    // Not asked for: not read.
    let list = s.ok("/v1/table/t/version/list", json!({})).await;
    assert!(list["versions"][0].get("operation").is_none(), "{list}");
}

#[tokio::test]
async fn job_events_answer_json_rows_on_request() {
    let s = Server::start().await;
    s.create_table("t", 10).await;
    let job = s.ok("/v1/table/t/optimize", json!({})).await["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    s.wait_job(&job).await;
    let (st, out) = json_post(&s, "/v1/jobs/query_events", json!({"job_id": job})).await;
    assert_eq!(st, 200, "{out}");
    let rows = out["rows"].as_array().unwrap();
    assert!(rows.len() >= 2, "{out}");
    assert!(rows.iter().all(|r| r["job_id"] == job.as_str()), "{out}");
    assert_eq!(rows.last().unwrap()["state"], "done", "{out}");
}
