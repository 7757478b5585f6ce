//! Table upkeep (issue 16): `optimize` on request and the background policy. Many small
//! writes, then upkeep: the same rows, fewer fragments, nothing unindexed, old versions gone
//! except tagged ones and a branch's; a writer racing compaction loses nothing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;

/// Every row as (id, text), sorted by id.
async fn all_rows(s: &Handle, table: &str, extra: Value) -> Vec<(i64, String)> {
    let mut body = json!({"columns": ["id", "text"], "k": 1_000_000});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let batches = s.query(table, body).await;
    let ids = ids(&batches);
    let texts = strings(&batches, "text");
    let mut rows: Vec<(i64, String)> = ids
        .into_iter()
        .zip(texts)
        .map(|(i, t)| (i, t.unwrap_or_default()))
        .collect();
    rows.sort();
    rows
}

async fn fragments(s: &Handle, table: &str) -> u64 {
    s.ok(&format!("/v1/table/{table}/describe"), json!({}))
        .await["stats"]["num_fragments"]
        .as_u64()
        .unwrap()
}

async fn versions(s: &Handle, table: &str) -> Vec<u64> {
    let v = s
        .ok(&format!("/v1/table/{table}/version/list"), json!({}))
        .await;
    let mut out: Vec<u64> = v["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect();
    out.sort();
    out
}

async fn index(s: &Handle, table: &str, name: &str) -> Value {
    let v = s
        .ok(&format!("/v1/table/{table}/index/list"), json!({}))
        .await;
    v["indexes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["index_name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no index {name} in {v}"))
}

async fn optimize(s: &Handle, table: &str, body: Value) -> Value {
    let v = s.ok(&format!("/v1/table/{table}/optimize"), body).await;
    let job = v["job_id"].as_str().expect("job_id").to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let d = s.ok("/v1/jobs/describe", json!({"job_id": job})).await;
        if d["job_state"] != "IN_PROGRESS" {
            assert_eq!(d["job_state"], "DONE", "{d}");
            return d;
        }
        assert!(Instant::now() < deadline, "optimize timed out: {d}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// 1 + `writes` small appends, an index, a tag and a branch on early versions; deletes the
/// rows with `id % 7 = 3`. Answers the tagged version and the one the branch started from.
async fn small_writes(s: &Server, table: &str, writes: i64) -> (u64, u64) {
    s.create_table(table, 10).await;
    s.ok(
        &format!("/v1/table/{table}/create_scalar_index"),
        json!({"column": "id", "index_type": "BTREE", "name": "id_idx"}),
    )
    .await;
    let tagged = s.version(table).await;
    s.ok(
        &format!("/v1/table/{table}/tags/create"),
        json!({"tag": "keep", "version": tagged}),
    )
    .await;
    let mut branch_base = 0;
    for i in 1..=writes {
        let (st, b) = s
            .post_arrow(&format!("/v1/table/{table}/insert"), &sample(i * 10, 10))
            .await;
        assert_eq!(st, 200, "{b}");
        if i == 2 {
            branch_base = s.version(table).await;
            s.ok(
                &format!("/v1/table/{table}/branches/create"),
                json!({"name": "exp"}),
            )
            .await;
        }
    }
    // Some deleted rows, for compaction to drop.
    s.ok(
        &format!("/v1/table/{table}/delete"),
        json!({"predicate": "id % 7 = 3"}),
    )
    .await;
    (tagged, branch_base)
}

fn live(ids: std::ops::Range<i64>) -> usize {
    ids.filter(|i| i % 7 != 3).count()
}

#[tokio::test]
async fn optimize_on_request_keeps_rows_and_removes_the_rest() {
    let s = Server::start().await;
    let (tagged, branch_base) = small_writes(&s, "t", 12).await;
    let before = all_rows(&s, "t", json!({})).await;
    assert_eq!(before.len(), live(0..130));
    let tag_rows = all_rows(&s, "t", json!({"version": tagged})).await;
    let branch_rows = all_rows(&s, "t", json!({"branch": "exp"})).await;
    assert_eq!(tag_rows.len(), 10);
    assert_eq!(branch_rows.len(), 30);
    let frags_before = fragments(&s, "t").await;
    assert_eq!(frags_before, 13);
    let idx = index(&s, "t", "id_idx").await;
    assert_eq!(idx["num_unindexed_rows"], live(10..130), "{idx}");
    assert_eq!(idx["num_indexed_rows"], live(0..10), "{idx}");
    // Background upkeep is off in this server: only a request would fold the rows in.
    assert_eq!(idx["status"], "PENDING", "{idx}");
    let versions_before = versions(&s, "t").await;

    let job = optimize(&s, "t", json!({"action": "all", "retention_seconds": 0})).await;
    assert_eq!(job["job_type"], "optimize");
    assert_eq!(job["progress"]["phases_done"], 3, "{job}");
    assert!(job["result"]["compact"]["report"]["fragments_removed"].as_u64() > Some(1));

    // The same rows, in fewer fragments, all indexed.
    assert_eq!(all_rows(&s, "t", json!({})).await, before);
    assert_eq!(fragments(&s, "t").await, 1);
    let idx = index(&s, "t", "id_idx").await;
    assert_eq!(idx["num_unindexed_rows"], 0, "{idx}");
    assert_eq!(idx["status"], "SUCCEEDED", "{idx}");
    let stats = s.ok("/v1/table/t/index/id_idx/stats", json!({})).await;
    assert_eq!(stats["num_unindexed_rows"], 0, "{stats}");
    // An indexed lookup still finds what the model says.
    assert_eq!(
        s.count("t", json!({"predicate": "id >= 100 AND id < 110"}))
            .await,
        live(100..110) as u64
    );

    // Old versions are gone, except the tagged one, the branch's base and the latest.
    let after = versions(&s, "t").await;
    let latest = *after.last().unwrap();
    assert!(after.len() < versions_before.len(), "{after:?}");
    assert!(after.contains(&tagged), "{after:?}");
    for v in &after {
        assert!(
            [tagged, branch_base, latest].contains(v),
            "version {v} survived: {after:?}"
        );
    }
    // Time travel to the tag, and the branch made from an old version, still read.
    assert_eq!(
        all_rows(&s, "t", json!({"version": tagged})).await,
        tag_rows
    );
    assert_eq!(
        all_rows(&s, "t", json!({"branch": "exp"})).await,
        branch_rows
    );
    let (st, b) = s
        .post("/v1/table/t/restore", json!({"version": tagged}))
        .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(all_rows(&s, "t", json!({})).await, tag_rows);
}

#[tokio::test]
async fn optimize_refuses_what_it_cannot_do() {
    let s = Server::start().await;
    s.create_table("t", 5).await;
    for (body, needle) in [
        (json!({"action": "defrag"}), "defrag"),
        (json!({"action": []}), "action"),
        (json!({"retention_seconds": -1}), "retention_seconds"),
        (
            json!({"target_rows_per_fragment": 0}),
            "target_rows_per_fragment",
        ),
        (json!({"vacuum": true}), "vacuum"),
    ] {
        let (st, b) = s.post("/v1/table/t/optimize", body).await;
        assert_error(st, &b, 400, 13);
        assert!(b["error"].as_str().unwrap().contains(needle), "{b}");
    }
    let (st, b) = s.post("/v1/table/nope/optimize", json!({})).await;
    assert_error(st, &b, 404, 4);
    let (st, b) = s
        .post("/v1/table/t/optimize", json!({"branch": "nope"}))
        .await;
    assert_eq!(st, 404, "{b}");
    // A read-only key may not start upkeep.
    let reader = s.new_key("default", "read", &[]).await;
    let (st, b) = s
        .with_key(&reader)
        .post("/v1/table/t/optimize", json!({}))
        .await;
    assert_eq!(st, 403, "{b}");
}

#[tokio::test]
async fn background_upkeep_follows_the_policy() {
    let s = Server::start_with(
        tempfile::tempdir().unwrap(),
        &[
            ("LANCET_UPKEEP", "true"),
            ("LANCET_UPKEEP_INTERVAL", "200ms"),
            ("LANCET_UPKEEP_MIN_SMALL_FRAGMENTS", "6"),
            ("LANCET_UPKEEP_RETENTION", "0s"),
            ("LANCET_UPKEEP_CLEANUP_INTERVAL", "1s"),
        ],
    )
    .await;
    let (tagged, _) = small_writes(&s, "t", 10).await;
    // Written just now: watched (it is forgotten once settled, cleaned and idle).
    let metrics = s.client.get(s.url("/metrics")).send().await.unwrap();
    let metrics = metrics.text().await.unwrap();
    assert!(
        metrics.contains("lancet_upkeep_watched_tables 1"),
        "{:?}",
        metrics
            .lines()
            .filter(|l| l.contains("upkeep"))
            .collect::<Vec<_>>()
    );
    let expected = all_rows(&s, "t", json!({})).await;
    // Upkeep runs by itself: compaction, the index caught up, versions cleaned.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let frags = fragments(&s, "t").await;
        let idx = index(&s, "t", "id_idx").await;
        let versions = versions(&s, "t").await;
        if frags <= 2 && idx["num_unindexed_rows"] == 0 && versions.len() <= 3 {
            assert_eq!(idx["status"], "SUCCEEDED");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "upkeep did not happen: {frags} fragments, {idx}, versions {versions:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(all_rows(&s, "t", json!({})).await, expected);
    assert_eq!(
        all_rows(&s, "t", json!({"version": tagged})).await.len(),
        10
    );
    // Counted by type in lancet_jobs.
    let metrics = s.client.get(s.url("/metrics")).send().await.unwrap();
    let metrics = metrics.text().await.unwrap();
    assert!(metrics.contains("\"optimize\""), "upkeep jobs are counted");
    let jobs = s.ok("/v1/jobs/list", json!({"table_id": ["t"]})).await;
    let upkeep: Vec<&Value> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["job_type"] == "optimize")
        .collect();
    assert!(!upkeep.is_empty(), "{jobs}");
    assert!(
        upkeep.iter().all(|j| j["spec"]["trigger"] == "policy"),
        "{jobs}"
    );
}

#[tokio::test]
async fn a_tenant_can_turn_upkeep_off_in_the_auth_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("_auth")).unwrap();
    std::fs::write(
        dir.path().join("_auth/auth.toml"),
        "[tenants.default.upkeep]\nenabled = false\n",
    )
    .unwrap();
    let s = Server::start_with(
        dir,
        &[
            ("LANCET_UPKEEP", "true"),
            ("LANCET_UPKEEP_INTERVAL", "100ms"),
            ("LANCET_UPKEEP_MIN_SMALL_FRAGMENTS", "2"),
        ],
    )
    .await;
    s.create_table("t", 10).await;
    for i in 1..6 {
        s.post_arrow("/v1/table/t/insert", &sample(i * 10, 10))
            .await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(fragments(&s, "t").await, 6);
    let jobs = s.ok("/v1/jobs/list", json!({})).await;
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 0, "{jobs}");
    // On request it still works.
    optimize(&s, "t", json!({"action": "compact"})).await;
    assert_eq!(fragments(&s, "t").await, 1);
}

#[tokio::test]
async fn writers_racing_compaction_lose_nothing() {
    let s = Server::start().await;
    s.create_table("t", 50).await;
    let writer = |w: i64| {
        let h: Handle = (*s).clone();
        async move {
            let mut acked = BTreeMap::new();
            for i in 0..25 {
                // Half updates of existing rows, half new rows.
                let ids = [w * 1000 + i, (i * 7 + w) % 50];
                let texts: Vec<String> = ids.iter().map(|id| format!("w{w} i{i} id{id}")).collect();
                let (st, b) = h
                    .post_arrow(
                        "/v1/table/t/merge_insert?on=id&when_matched_update_all=true&when_not_matched_insert_all=true",
                        &rows(&ids, &texts),
                    )
                    .await;
                if st == 200 {
                    for (id, t) in ids.iter().zip(texts) {
                        acked.insert(*id, (i, t));
                    }
                } else {
                    // A lost race may be refused, never half-applied or dropped silently.
                    assert!(st == 409 || st == 503, "{st} {b}");
                }
            }
            acked
        }
    };
    let compactor = async {
        let mut runs = 0;
        for _ in 0..6 {
            let (st, b) = s
                .post(
                    "/v1/table/t/optimize",
                    json!({"action": ["compact", "cleanup"], "retention_seconds": 0}),
                )
                .await;
            if st == 200 {
                let job = b["job_id"].as_str().unwrap().to_string();
                let d = s.wait_job(&job).await;
                // A compaction may lose its race (and say so); it never breaks the table.
                assert!(
                    d["job_state"] == "DONE" || d["job_state"] == "FAILED",
                    "{d}"
                );
                runs += 1;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        runs
    };
    let (a, b, runs) = tokio::join!(writer(1), writer(2), compactor);
    assert!(runs > 0);
    // Every acknowledged write is there: new rows exactly, updated rows with one writer's
    // last acknowledged text (writers 1 and 2 touch disjoint old ids only by chance).
    let rows = all_rows(&s, "t", json!({})).await;
    let by_id: BTreeMap<i64, String> = rows.iter().cloned().collect();
    assert_eq!(by_id.len(), rows.len(), "duplicate ids after compaction");
    for (id, (_, text)) in a.iter().chain(b.iter()) {
        if *id >= 1000 {
            assert_eq!(by_id.get(id), Some(text), "new row {id} lost");
        } else {
            let got = by_id.get(id).expect("old row lost");
            assert!(got.starts_with('w') || got == &format!("row {id}"), "{got}");
        }
    }
    for (id, text) in &by_id {
        if *id < 1000 {
            let last_a = a.get(id).map(|(_, t)| t);
            let last_b = b.get(id).map(|(_, t)| t);
            if last_a.is_some() || last_b.is_some() {
                assert!(
                    Some(text) == last_a || Some(text) == last_b,
                    "row {id} holds {text}, not a last acknowledged write ({last_a:?} / {last_b:?})"
                );
            }
        }
    }
    assert_eq!(
        rows.len(),
        50 + a.keys().chain(b.keys()).filter(|i| **i >= 1000).count()
    );
}

#[tokio::test]
async fn an_upkeep_job_can_be_cancelled_and_changes_nothing() {
    let s = Server::start_with(
        tempfile::tempdir().unwrap(),
        &[
            ("LANCET_FAULT_INJECTION", "1"),
            ("LANCET_FAULT_UPKEEP_DELAY_MS", "60000"),
        ],
    )
    .await;
    s.create_table("t", 10).await;
    for i in 1..4 {
        s.post_arrow("/v1/table/t/insert", &sample(i * 10, 10))
            .await;
    }
    let version = s.version("t").await;
    let job = s.ok("/v1/table/t/optimize", json!({})).await["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let d = s.describe_job(&job).await;
    assert_eq!(d["job_state"], "IN_PROGRESS", "{d}");
    assert_eq!(d["progress"]["phase"], "index", "{d}");
    assert_eq!(d["progress"]["phases_total"], 3, "{d}");
    // One upkeep job per table at a time.
    let (st, b) = s
        .post("/v1/table/t/optimize", json!({"action": "cleanup"}))
        .await;
    assert_error(st, &b, 409, 14);
    let d = s.ok("/v1/jobs/cancel", json!({"job_id": job})).await;
    assert_eq!(d["job_state"], "CANCELLED", "{d}");
    assert_eq!(d["progress"]["phases_done"], 0, "{d}");
    assert_eq!(s.version("t").await, version);
    assert_eq!(fragments(&s, "t").await, 4);
    let listed = s
        .ok("/v1/jobs/list", json!({"job_state": "CANCELLED"}))
        .await;
    assert_eq!(listed["jobs"][0]["job_type"], "optimize", "{listed}");
}

#[tokio::test]
async fn a_vector_index_is_retrained_on_request() {
    let s = Server::start().await;
    s.create_table("v", 300).await;
    s.ok(
        "/v1/table/v/create_index",
        json!({"column": "vec", "index_type": "IVF_PQ", "name": "vec_idx", "num_partitions": 2, "num_sub_vectors": 2}),
    )
    .await;
    s.post_arrow("/v1/table/v/insert", &sample(300, 300)).await;
    assert_eq!(index(&s, "v", "vec_idx").await["num_unindexed_rows"], 300);
    let job = optimize(&s, "v", json!({"action": "index", "retrain": true})).await;
    assert_eq!(
        job["result"]["index"]["indexes"]["vec_idx"]["action"], "retrain",
        "{job}"
    );
    let idx = index(&s, "v", "vec_idx").await;
    assert_eq!(
        (&idx["num_unindexed_rows"], &idx["num_segments"]),
        (&json!(0), &json!(1)),
        "{idx}"
    );
    let hits = s
        .query(
            "v",
            json!({"vector": [450.0, 0.0, 1.0, 0.0], "k": 1, "columns": ["id"], "nprobes": 2, "refine_factor": 600}),
        )
        .await;
    assert_eq!(ids(&hits), vec![450]);
}
