//! Lancet on an S3 root (moto on loopback, see `s3.rs`): one server through the whole table
//! lifecycle, then several replicas sharing the root.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::*;
use crate::jobs::{add_virtual, doubled, slow, table_with_fragments, vc};
use crate::s3;

fn total_ids(batches: &[arrow_array::RecordBatch]) -> Vec<i64> {
    let mut v = ids(batches);
    v.sort();
    v
}

#[tokio::test]
async fn an_s3_root_serves_tables_branches_tags_batches_and_backfills() {
    let root = s3::bucket().await;
    let cache = tempfile::tempdir().unwrap();
    let cache_env = cache.path().to_str().unwrap().to_string();
    let s = s3::server(&root, &[("LANCET_CACHE_DIR", &cache_env)]).await;

    s.create_table("t", 10).await;
    let (st, b) = s.post_arrow("/v1/table/t/insert", &sample(10, 10)).await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(s.count("t", json!({})).await, 20);
    let d = s.ok("/v1/table/t/describe", json!({})).await;
    assert!(
        d["location"].as_str().unwrap().starts_with(&root),
        "the table lives on the store: {d}"
    );
    assert_eq!(d["version"], 2);

    // Tags and branches.
    s.ok(
        "/v1/table/t/tags/create",
        json!({"tag": "first", "version": 1}),
    )
    .await;
    assert_eq!(s.count("t", json!({"version": 1})).await, 10);
    s.ok("/v1/table/t/branches/create", json!({"name": "dev"}))
        .await;
    let (st, b) = s
        .post_arrow("/v1/table/t/insert?branch=dev", &sample(20, 5))
        .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(s.count("t", json!({"branch": "dev"})).await, 25);
    assert_eq!(s.count("t", json!({})).await, 20);

    // A batch-commit and a rename, both through the catalog lock on the store.
    s.ok(
        "/v1/table/batch-commit",
        json!({"operations": [{"declare_table": {"id": ["d1"]}}, {"declare_table": {"id": ["d2"]}}]}),
    )
    .await;
    let list = s.ok("/v1/namespace/$/table/list", json!({})).await;
    let mut names: Vec<&str> = list["tables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    names.sort();
    assert_eq!(names, ["d1", "d2", "t"]);
    s.ok("/v1/table/t/rename", json!({"new_table_name": "t2"}))
        .await;
    assert_eq!(s.count("t2", json!({})).await, 20);
    let (st, body) = s.post("/v1/table/t/count_rows", json!({})).await;
    assert_error(st, &body, 404, 4);

    // A virtual column and a backfill.
    table_with_fragments(&s, "v", 3, 20).await;
    add_virtual(
        &s,
        "v",
        "dbl",
        vc("misbehave", "slow_double", &["id"], &[("spin", "0")]),
    )
    .await;
    let job = s
        .backfill("v", json!({"column": "dbl", "commit_granularity": 1}))
        .await;
    let d = s.wait_job(&job).await;
    assert_eq!(d["job_state"], "DONE", "{d}");
    let values = doubled(&s, "v").await;
    assert_eq!(values.len(), 60);
    assert!(
        values.iter().all(|(id, v)| *v == Some(2 * id)),
        "{values:?}"
    );

    // Nothing durable stayed on this node: another node with an empty cache directory sees
    // the job, fetches the UDF module from the store and computes with it.
    let cache2 = tempfile::tempdir().unwrap();
    let cache2_env = cache2.path().to_str().unwrap().to_string();
    let other = s3::server(
        &root,
        &[
            ("LANCET_CACHE_DIR", &cache2_env),
            ("LANCET_NODE_ID", "other"),
        ],
    )
    .await;
    let d = other.describe_job(&job).await;
    assert_eq!(d["job_state"], "DONE", "{d}");
    assert_eq!(d["result"]["rows_written"], 60, "{d}");
    let (st, b) = other
        .post_arrow("/v1/table/v/insert", &sample(60, 10))
        .await;
    assert_eq!(st, 200, "{b}");
    let job2 = other.backfill("v", json!({"column": "dbl"})).await;
    let d = other.wait_job(&job2).await;
    assert_eq!(d["job_state"], "DONE", "{d}");
    let values = doubled(&s, "v").await;
    assert_eq!(values.len(), 70);
    assert!(values.iter().all(|(id, v)| *v == Some(2 * id)));
    assert!(
        std::fs::read_dir(cache2.path()).unwrap().count() > 0,
        "the module was cached on the second node"
    );
}

#[tokio::test]
async fn replicas_share_writes_catalog_changes_branches_and_keys() {
    let root = s3::bucket().await;
    let a = s3::server(&root, &[("LANCET_NODE_ID", "a")]).await;
    let b = s3::server(&root, &[("LANCET_NODE_ID", "b")]).await;
    let c = s3::server(&root, &[("LANCET_NODE_ID", "c")]).await;
    let nodes = [&a, &b, &c];
    a.create_table("w", 0).await;

    // Writers spread over the three nodes at once: every acknowledged row is there, once.
    let mut tasks = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        for k in 0..2 {
            let h = node.with_key(ADMIN_KEY);
            let start = ((n * 2 + k) * 1000) as i64;
            tasks.push(tokio::spawn(async move {
                let mut acked = Vec::new();
                for i in 0..6 {
                    let first = start + i * 10;
                    let (st, body) = h.post_arrow("/v1/table/w/insert", &sample(first, 10)).await;
                    match st {
                        200 => acked.extend(first..first + 10),
                        // A lost commit race the server could not settle: nothing was written.
                        409 | 503 => {}
                        _ => panic!("insert answered {st}: {body}"),
                    }
                }
                acked
            }));
        }
    }
    let mut acked = Vec::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    acked.sort();
    assert!(!acked.is_empty());
    for node in nodes {
        let rows = node
            .query("w", json!({"columns": ["id"], "limit": 100000}))
            .await;
        assert_eq!(
            total_ids(&rows),
            acked,
            "every acknowledged row, once, on every node"
        );
    }

    // Read your write on another node, at once.
    let (st, body) = a.post_arrow("/v1/table/w/insert", &sample(99_000, 1)).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(b.count("w", json!({"predicate": "id = 99000"})).await, 1);

    // Catalog changes made on one node are seen by the others' cached locations.
    b.count("w", json!({})).await;
    a.ok("/v1/table/w/rename", json!({"new_table_name": "w2"}))
        .await;
    let (st, body) = b.post("/v1/table/w/count_rows", json!({})).await;
    assert_error(st, &body, 404, 4);
    assert_eq!(c.count("w2", json!({})).await as usize, acked.len() + 1);
    a.ok("/v1/table/w2/drop", json!({})).await;
    a.create_table("w2", 3).await;
    assert_eq!(b.count("w2", json!({})).await, 3, "the re-created table");

    // Racing branch creates: exactly one wins.
    for round in 0..3 {
        let name = format!("race{round}");
        let (x, y) = tokio::join!(
            a.post("/v1/table/w2/branches/create", json!({"name": name})),
            b.post("/v1/table/w2/branches/create", json!({"name": name})),
        );
        let mut statuses = [x.0, y.0];
        statuses.sort();
        assert_eq!(statuses, [200, 409], "{x:?} {y:?}");
    }
    let branches = c.ok("/v1/table/w2/branches/list", json!({})).await;
    assert_eq!(branches["branches"].as_object().unwrap().len(), 3);

    // A key made with the CLI on the store works on every node; revoked, on none.
    let key = s3::keys_cli(&root, &["create", "--tenant", "default", "--role", "read"])
        .trim()
        .to_string();
    for node in nodes {
        wait_for_status(&node.with_key(&key), 200).await;
    }
    let id = s3::keys_cli(&root, &["list"])
        .lines()
        .find(|l| l.contains("role=read"))
        .and_then(|l| l.split('\t').next())
        .unwrap()
        .to_string();
    s3::keys_cli(&root, &["revoke", &id]);
    for node in nodes {
        wait_for_status(&node.with_key(&key), 401).await;
    }
}

/// Poll an authenticated call until it answers `want` (keys reload within seconds).
async fn wait_for_status(h: &Handle, want: u16) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (st, _) = h.post("/v1/table/w2/count_rows", json!({})).await;
        if st == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still {st}, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Nodes `a` and `b` on a new root (job leases of `ttl`), and a slow backfill of `frags`
/// fragments of 20 rows started on `a`, returned once one of its commits landed: (root, a, b,
/// job id, the table's version before the job).
async fn backfill_in_progress(ttl: &str, frags: i64) -> (String, Server, Server, String, u64) {
    let root = s3::bucket().await;
    let ttl = ("LANCET_JOB_LEASE_TTL", ttl);
    let a = s3::server(&root, &[ttl, ("LANCET_NODE_ID", "a")]).await;
    let b = s3::server(&root, &[ttl, ("LANCET_NODE_ID", "b")]).await;
    table_with_fragments(&a, "k", frags, 20).await;
    add_virtual(&a, "k", "dbl", slow("150000")).await;
    let before = a.version("k").await;
    let job = a
        .backfill(
            "k",
            json!({"column": "dbl", "commit_granularity": 1, "checkpoint_size": 5,
                   "max_checkpoint_size": 5, "concurrency": 1}),
        )
        .await;
    let d = a
        .wait_job_until(&job, 120, |d| {
            d["job_state"] != "IN_PROGRESS" || d["progress"]["commits"].as_u64() >= Some(1)
        })
        .await;
    assert_eq!(d["job_state"], "IN_PROGRESS", "finished too early: {d}");
    (root, a, b, job, before)
}

/// The job ended DONE on `b` with every row computed once: every fragment committed once,
/// one table version per commit.
async fn finished_exactly_once(b: &Server, job: &str, frags: i64, before: u64) {
    let d = b.wait_job(job).await;
    assert_eq!(d["job_state"], "DONE", "{d}");
    assert_eq!(d["result"]["rows_written"], frags * 20, "{d}");
    assert_eq!(d["result"]["fragments_skipped"], json!([]));
    assert_eq!(d["result"]["fragments_committed"], frags);
    let values = doubled(b, "k").await;
    assert_eq!(values.len() as i64, frags * 20);
    assert!(
        values.iter().all(|(id, v)| *v == Some(2 * id)),
        "{values:?}"
    );
    let commits = d["result"]["commits"].as_u64().unwrap();
    assert_eq!(
        b.version("k").await,
        before + commits,
        "no fragment committed twice"
    );
}

#[tokio::test]
async fn a_killed_nodes_backfill_is_finished_by_another_exactly_once() {
    let (root, mut a, b, job, before) = backfill_in_progress("3s", 6).await;
    a.kill_hard();
    // b sees the job at once and takes it over once a's lease expires.
    assert_eq!(b.describe_job(&job).await["job_state"], "IN_PROGRESS");
    finished_exactly_once(&b, &job, 6, before).await;

    // A node killed in the middle of writes leaves a table every node opens.
    let mut c = s3::server(&root, &[("LANCET_NODE_ID", "c")]).await;
    let h = c.with_key(ADMIN_KEY);
    let writer = tokio::spawn(async move {
        for i in 0..50 {
            h.post_arrow("/v1/table/k/insert", &sample(10_000 + i * 100, 100))
                .await;
        }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    c.kill_hard();
    let _ = writer.await;
    let n = b.count("k", json!({})).await;
    assert!(n >= 120 && (n - 120) % 100 == 0, "whole inserts only: {n}");
    let fresh = s3::server(&root, &[("LANCET_NODE_ID", "d")]).await;
    assert_eq!(fresh.count("k", json!({})).await, n);
}

#[tokio::test]
async fn a_node_shut_down_hands_its_backfill_over_at_once() {
    // A lease TTL far beyond the wait below: only a hand-over lets b finish in time.
    let (_root, mut a, b, job, before) = backfill_in_progress("600s", 4).await;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &a.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(a.wait().success(), "a graceful exit");
    finished_exactly_once(&b, &job, 4, before).await;
}

#[tokio::test]
async fn every_node_lists_and_cancels_the_same_jobs() {
    let (_root, a, b, job, _) = backfill_in_progress("15s", 4).await;
    let list = |s: &Server| {
        let h = s.with_key(ADMIN_KEY);
        async move {
            let l = h.ok("/v1/jobs/list", json!({})).await;
            let mut ids: Vec<String> = l["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| format!("{} {}", j["job_id"], j["state"]))
                .collect();
            ids.sort();
            ids
        }
    };
    assert_eq!(list(&a).await, list(&b).await);
    // Cancelled through the node that does not run it.
    let d = b.ok("/v1/jobs/cancel", json!({"job_id": job})).await;
    assert_eq!(d["job_state"], "CANCELLED", "{d}");
    // Node a, which ran it, wrote CANCELLED itself; b can read that from the store a moment
    // before a's own task has taken in that its write went through (a busy machine widens
    // that moment), so a is given a few seconds to say so too.
    let seen = a
        .wait_job_until(&job, 5, |d| d["job_state"] != "IN_PROGRESS")
        .await;
    assert_eq!(seen["job_state"], "CANCELLED", "{seen}");
    assert_eq!(list(&a).await, list(&b).await);
    // Whole commits only: every committed fragment has all its values, the rest none.
    let values = doubled(&a, "k").await;
    let done = values.iter().filter(|(_, v)| v.is_some()).count();
    assert!(done % 20 == 0 && done >= 20, "{done} values");
    assert!(values.iter().all(|(id, v)| v.is_none_or(|v| v == 2 * id)));
}

/// Object-store requests `node` made for tables and catalogs so far (not its background loops
/// over server state).
async fn table_requests(node: &Server) -> u64 {
    let text = crate::operability::scrape(node).await;
    [
        "get",
        "put",
        "head",
        "list",
        "delete",
        "copy",
        "rename",
        "multipart",
    ]
    .iter()
    .map(|op| crate::operability::object_requests_in(&text, op, "tables"))
    .sum()
}

#[tokio::test]
async fn reads_within_the_consistency_interval_stay_off_the_store() {
    let root = s3::bucket().await;
    let interval = ("LANCET_READ_CONSISTENCY_INTERVAL", "5s");
    let a = s3::server(&root, &[interval, ("LANCET_NODE_ID", "a")]).await;
    let b = s3::server(&root, &[interval, ("LANCET_NODE_ID", "b")]).await;
    a.create_table("t", 10).await;
    let checked = std::time::Instant::now();
    assert_eq!(b.count("t", json!({})).await, 10);

    // Warm reads of an unchanged table within the interval: no request to the store.
    // Queries read rows too: the first one fetches them (and keeps the ranges of those
    // immutable files in memory), the next ones make no request at all, nor do counts and
    // describes.
    let query = || b.query("t", json!({"columns": ["id"], "limit": 3}));
    assert_eq!(query().await.iter().map(|r| r.num_rows()).sum::<usize>(), 3);
    let before = table_requests(&b).await;
    for _ in 0..10 {
        assert_eq!(b.count("t", json!({})).await, 10);
        assert_eq!(b.version("t").await, 1);
        assert_eq!(query().await.iter().map(|r| r.num_rows()).sum::<usize>(), 3);
    }
    assert_eq!(
        table_requests(&b).await,
        before,
        "warm reads stayed in memory"
    );
    let metrics = crate::operability::scrape(&b).await;
    assert!(
        metrics.contains("lancet_object_cache_hits_total"),
        "{metrics}"
    );

    // A node reads its own writes at once, table and catalog changes alike.
    let (st, body) = a.post_arrow("/v1/table/t/insert", &sample(10, 5)).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(a.count("t", json!({})).await, 15);
    b.create_table("u", 4).await;
    assert_eq!(b.count("u", json!({})).await, 4);

    // Another node sees the write within the interval (and, having checked just before it,
    // not before the interval is over: reads are bounded-stale, not strong).
    let written = std::time::Instant::now();
    let stale = b.count("t", json!({})).await;
    if checked.elapsed() < Duration::from_secs(4) {
        assert_eq!(stale, 10, "b trusts its check for the interval");
    }
    let mut seen = b.count("t", json!({})).await;
    while seen != 15 {
        assert!(
            written.elapsed() < Duration::from_secs(5 + 5),
            "b did not see a's write within the interval: {seen}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen = b.count("t", json!({})).await;
    }
    assert_eq!(b.version("t").await, 2);

    // Writers on both nodes at once lose nothing: a write always checks the latest version.
    let mut tasks = Vec::new();
    for (n, node) in [&a, &b].into_iter().enumerate() {
        let h = node.with_key(ADMIN_KEY);
        tasks.push(tokio::spawn(async move {
            let mut acked = 0;
            for i in 0..4 {
                let first = 1000 * (n as i64 + 1) + i * 10;
                let (st, body) = h.post_arrow("/v1/table/t/insert", &sample(first, 10)).await;
                match st {
                    200 => acked += 10,
                    409 | 503 => {}
                    _ => panic!("insert answered {st}: {body}"),
                }
            }
            acked
        }));
    }
    let mut acked = 15;
    for t in tasks {
        acked += t.await.unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    for node in [&a, &b] {
        while node.count("t", json!({})).await != acked {
            assert!(
                std::time::Instant::now() < deadline,
                "rows lost: {acked} acked"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // And a's catalog sees the table b created, with its rows.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (st, body) = a.post("/v1/table/u/count_rows", json!({})).await;
        if st == 200 {
            assert_eq!(body, json!(4));
            break;
        }
        assert_error(st, &body, 404, 4);
        assert!(std::time::Instant::now() < deadline, "a never saw table u");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
