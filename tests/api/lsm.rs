//! LSM writes (issue 28): the lancedb client's LSM calls on lance's MemWAL. A table with an
//! LSM write spec takes upserts through shard writers (a WAL on the table's store plus
//! memtables), answers queries over every tier, and has its flushed generations merged into
//! the base table by `compact_lsm` and upkeep.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use serde_json::{Value, json};

use crate::common::*;

pub(crate) fn pk_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false).with_metadata(
            [(
                "lance-schema:unenforced-primary-key".to_string(),
                "true".to_string(),
            )]
            .into(),
        ),
        Field::new("v", DataType::Utf8, true),
    ]))
}

/// Rows `ids` with `v` = "{tag}{id}".
pub(crate) fn pk_rows(ids: &[i64], tag: &str) -> RecordBatch {
    RecordBatch::try_new(
        pk_schema(),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from(
                ids.iter().map(|i| format!("{tag}{i}")).collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap()
}

pub(crate) const UPSERT: &str =
    "merge_insert?on=id&when_matched_update_all=true&when_not_matched_insert_all=true";

/// Every row of `table` as read by a query (the LSM tiers included unless `use_lsm` says no).
pub(crate) async fn table_rows(
    s: &Handle,
    table: &str,
    use_lsm: Option<bool>,
) -> BTreeMap<i64, String> {
    let mut body = json!({"columns": ["id", "v"], "k": 1_000_000});
    if let Some(u) = use_lsm {
        body["use_lsm"] = json!(u);
    }
    let batches = s.query(table, body).await;
    let ids = ids(&batches);
    let vs = strings(&batches, "v");
    assert_eq!(
        ids.len(),
        ids.iter().collect::<std::collections::BTreeSet<_>>().len(),
        "a key is answered twice: {ids:?}"
    );
    ids.into_iter()
        .zip(vs)
        .map(|(i, v)| (i, v.unwrap_or_default()))
        .collect()
}

pub(crate) async fn upsert(s: &Handle, table: &str, ids: &[i64], tag: &str) -> Value {
    let (st, b) = s
        .post_arrow(&format!("/v1/table/{table}/{UPSERT}"), &pk_rows(ids, tag))
        .await;
    assert_eq!(st, 200, "{b}");
    b
}

pub(crate) async fn lsm_table(s: &Handle, name: &str, n: i64, sharding: Value) {
    let ids: Vec<i64> = (0..n).collect();
    let (st, b) = s
        .post_arrow(&format!("/v1/table/{name}/create"), &pk_rows(&ids, "base"))
        .await;
    assert_eq!(st, 200, "{b}");
    s.ok(
        &format!("/v1/table/{name}/set_lsm_write_spec"),
        json!({"sharding": sharding, "maintained_indexes": null, "writer_config_defaults": {}}),
    )
    .await;
}

pub(crate) fn want(base: i64, fresh: &[(i64, &str)]) -> BTreeMap<i64, String> {
    let mut m: BTreeMap<i64, String> = (0..base).map(|i| (i, format!("base{i}"))).collect();
    for (i, tag) in fresh {
        m.insert(*i, format!("{tag}{i}"));
    }
    m
}

#[tokio::test]
async fn lsm_upserts_are_read_from_memtables_flushed_and_merged() {
    let s = Server::start().await;
    lsm_table(
        &s,
        "ev",
        10,
        json!({"mode": "bucket", "column": "id", "num_buckets": 4}),
    )
    .await;
    let spec = s.ok("/v1/table/ev/get_lsm_write_spec", json!({})).await;
    assert_eq!(
        spec["lsm_write_spec"],
        json!({"sharding": {"mode": "bucket", "column": "id", "num_buckets": 4}, "maintained_indexes": [], "writer_config_defaults": {}})
    );
    let version = s.version("ev").await;

    // Upserts: answered with the rows written, no new version; read at once from memtables.
    let b = upsert(&s, "ev", &[5, 6, 20, 21], "a").await;
    assert_eq!(b["num_rows"], 4);
    assert_eq!(b["version"], version);
    let b = upsert(&s, "ev", &[6, 22], "b").await;
    assert_eq!(b["num_rows"], 2);
    // `insert` of a table with a key is an upsert too.
    let (st, b) = s
        .post_arrow("/v1/table/ev/insert", &pk_rows(&[7, 23], "c"))
        .await;
    assert_eq!(st, 200, "{b}");
    let fresh = [
        (5, "a"),
        (6, "b"),
        (20, "a"),
        (21, "a"),
        (22, "b"),
        (7, "c"),
        (23, "c"),
    ];
    assert_eq!(table_rows(&s, "ev", None).await, want(10, &fresh));
    assert_eq!(
        s.version("ev").await,
        version,
        "an LSM write makes no version"
    );
    assert_eq!(s.count("ev", json!({})).await, 14);
    assert_eq!(s.count("ev", json!({"predicate": "v LIKE 'a%'"})).await, 3);
    // Filtered and limited reads see the memtables too.
    let rows = s
        .query("ev", json!({"filter": "id >= 20", "columns": ["id", "v"]}))
        .await;
    assert_eq!(ids(&rows).len(), 4);
    // The base table alone has none of it.
    assert_eq!(table_rows(&s, "ev", Some(false)).await, want(10, &[]));

    let stats = s.ok("/v1/table/ev/get_lsm_stats", json!({})).await;
    let buckets = stats["lsm_stats"]["buckets"].as_array().unwrap();
    assert!(!buckets.is_empty() && buckets.len() <= 4, "{stats}");
    let in_memory: u64 = buckets
        .iter()
        .flat_map(|b| b["memtables"].as_array().unwrap())
        .map(|m| m["rows"].as_u64().unwrap())
        .sum();
    assert_eq!(
        in_memory, 8,
        "rows written, duplicates of a key included: {stats}"
    );
    assert!(
        buckets
            .iter()
            .all(|b| b["status"] == "open" && b["generations"] == json!([]))
    );

    // Flush: memtables become generations (still not in the base table).
    s.ok("/v1/table/ev/flush_lsm", json!({})).await;
    let stats = s
        .ok(
            "/v1/table/ev/get_lsm_stats",
            json!({"include_generation_rows": true}),
        )
        .await;
    let generations: Vec<&Value> = stats["lsm_stats"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|b| b["generations"].as_array().unwrap())
        .collect();
    assert!(!generations.is_empty(), "{stats}");
    let rows: u64 = generations
        .iter()
        .map(|g| g["rows"].as_u64().unwrap())
        .sum();
    assert_eq!(rows, 7, "a generation holds a key once: {stats}");
    assert_eq!(table_rows(&s, "ev", None).await, want(10, &fresh));
    assert_eq!(table_rows(&s, "ev", Some(false)).await, want(10, &[]));

    // Delete through the LSM: tombstones for the keys a predicate matches in every tier.
    let (st, b) = s
        .post(
            "/v1/table/ev/delete",
            json!({"predicate": "id = 21 OR id = 0"}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["num_deleted_rows"], 2);
    let mut after = want(10, &fresh);
    after.remove(&21);
    after.remove(&0);
    assert_eq!(table_rows(&s, "ev", None).await, after);

    // compact_lsm starts a job merging every generation into the base table.
    s.ok("/v1/table/ev/flush_lsm", json!({})).await;
    let job = s.ok("/v1/table/ev/compact_lsm", json!({})).await;
    let job_id = job["job_id"].as_str().expect("a job id").to_string();
    let done = s.wait_job(&job_id).await;
    assert_eq!(done["job_state"], "DONE", "{done}");
    assert!(
        s.version("ev").await > version,
        "the merge commits to the base table"
    );
    assert_eq!(
        table_rows(&s, "ev", Some(false)).await,
        after,
        "merged into the base"
    );
    assert_eq!(table_rows(&s, "ev", None).await, after);
    let stats = s.ok("/v1/table/ev/get_lsm_stats", json!({})).await;
    assert!(
        stats["lsm_stats"]["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["generations"] == json!([]) && b["compacting"] == false),
        "{stats}"
    );

    // Closing this node's writers flushes them; the next read claims the shards again.
    upsert(&s, "ev", &[40], "g").await;
    after.insert(40, "g40".into());
    let closed = s.ok("/v1/table/ev/close_lsm_writers", json!({})).await;
    assert!(closed["closed"].as_u64().unwrap() >= 1, "{closed}");
    let stats = s.ok("/v1/table/ev/get_lsm_stats", json!({})).await;
    assert!(
        stats["lsm_stats"]["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["status"] == "closed" && b["memtables"].is_null()),
        "{stats}"
    );
    assert_eq!(table_rows(&s, "ev", None).await, after);

    // Unset merges what is left and removes the spec; the table is a plain one again.
    upsert(&s, "ev", &[30], "d").await;
    after.insert(30, "d30".into());
    s.ok("/v1/table/ev/unset_lsm_write_spec", json!({})).await;
    let spec = s.ok("/v1/table/ev/get_lsm_write_spec", json!({})).await;
    assert_eq!(spec["lsm_write_spec"], Value::Null);
    assert_eq!(
        s.ok("/v1/table/ev/get_lsm_stats", json!({})).await["lsm_stats"],
        Value::Null
    );
    assert_eq!(table_rows(&s, "ev", None).await, after);
    let (st, b) = s
        .post_arrow(&format!("/v1/table/ev/{UPSERT}"), &pk_rows(&[31], "e"))
        .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["num_inserted_rows"], 1, "a plain merge again: {b}");
    // A spec set again starts on fresh shards: nothing of the old ones is read twice.
    s.ok(
        "/v1/table/ev/set_lsm_write_spec",
        json!({"sharding": {"mode": "unsharded"}}),
    )
    .await;
    upsert(&s, "ev", &[1], "f").await;
    after.insert(31, "e31".into());
    after.insert(1, "f1".into());
    assert_eq!(table_rows(&s, "ev", None).await, after);
}

#[tokio::test]
async fn lsm_calls_refuse_what_they_cannot_do_by_name() {
    let s = Server::start().await;
    s.create_table("plain", 5).await;
    // No primary key.
    let (st, b) = s
        .post(
            "/v1/table/plain/set_lsm_write_spec",
            json!({"sharding": {"mode": "unsharded"}}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    assert!(b["error"].as_str().unwrap().contains("primary key"), "{b}");
    // No spec: use_lsm=true is refused, stats and spec are null.
    let (st, b) = s
        .post("/v1/table/plain/query", json!({"use_lsm": true}))
        .await;
    assert_error(st, &b, 400, 13);
    assert!(b["error"].as_str().unwrap().contains("use_lsm"), "{b}");
    let (st, b) = s
        .post_arrow(
            &format!("/v1/table/plain/{UPSERT}&use_lsm=true"),
            &sample(0, 1),
        )
        .await;
    assert_error(st, &b, 400, 13);
    let stats = s.ok("/v1/table/plain/get_lsm_stats", json!({})).await;
    assert_eq!(stats["lsm_stats"], Value::Null, "{stats}");
    let spec = s.ok("/v1/table/plain/get_lsm_write_spec", json!({})).await;
    assert_eq!(spec["lsm_write_spec"], Value::Null, "{spec}");
    let (st, b) = s
        .post("/v1/table/plain/unset_lsm_write_spec", json!({}))
        .await;
    assert_error(st, &b, 400, 13);
    let (st, b) = s.post("/v1/table/plain/compact_lsm", json!({})).await;
    assert_error(st, &b, 400, 13);

    let (st, b) = s
        .post_arrow("/v1/table/t/create", &pk_rows(&[0, 1, 2, 3, 4], "base"))
        .await;
    assert_eq!(st, 200, "{b}");
    for (body, names) in [
        (
            json!({"sharding": {"mode": "bucket", "column": "v", "num_buckets": 2}}),
            "bucket sharding",
        ),
        (
            json!({"sharding": {"mode": "bucket", "column": "id", "num_buckets": 0}}),
            "num_buckets",
        ),
        (json!({"sharding": {"mode": "rows"}}), "unknown variant"),
        (
            json!({"sharding": {"mode": "unsharded"}, "shards": 3}),
            "shards",
        ),
        (
            json!({"sharding": {"mode": "unsharded"}, "writer_config_defaults": {"flush_fast": "1"}}),
            "flush_fast",
        ),
        (
            json!({"sharding": {"mode": "unsharded"}, "writer_config_defaults": {"max_memtable_rows": "many"}}),
            "max_memtable_rows",
        ),
        (
            json!({"sharding": {"mode": "unsharded"}, "maintained_indexes": ["nope"]}),
            "nope",
        ),
        (
            json!({"sharding": {"mode": "unsharded"}, "writer_config_defaults": {"max_memtable_rows": "1000000000000"}}),
            "above the most",
        ),
        (
            json!({"sharding": {"mode": "unsharded"}, "writer_config_defaults": {"max_wal_flush_interval_ms": "99999999999"}}),
            "above an hour",
        ),
    ] {
        let (st, b) = s.post("/v1/table/t/set_lsm_write_spec", body.clone()).await;
        assert_eq!(st, 400, "{body}: {b}");
        assert!(b["error"].as_str().unwrap().contains(names), "{body}: {b}");
    }
    s.ok(
        "/v1/table/t/set_lsm_write_spec",
        json!({"sharding": {"mode": "unsharded"}}),
    )
    .await;
    let (st, b) = s
        .post(
            "/v1/table/t/set_lsm_write_spec",
            json!({"sharding": {"mode": "unsharded"}}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    assert!(b["error"].as_str().unwrap().contains("already has"), "{b}");
    // Writes that would bypass the LSM tiers, and merges that are not upserts on the key.
    let (st, b) = s
        .post("/v1/table/t/update", json!({"updates": [["v", "'x'"]]}))
        .await;
    assert_error(st, &b, 400, 13);
    for (query, names) in [
        (
            "merge_insert?on=id&when_matched_update_all=true&when_not_matched_insert_all=true&use_lsm=false",
            "LSM write spec",
        ),
        (
            "merge_insert?on=v&when_matched_update_all=true&when_not_matched_insert_all=true",
            "primary key",
        ),
        (
            "merge_insert?on=id&when_not_matched_insert_all=true",
            "upsert",
        ),
        (
            "merge_insert?on=id&when_matched_update_all=true&when_not_matched_by_source_delete=true",
            "when_not_matched_by_source_delete",
        ),
        ("insert?mode=overwrite", "overwrite"),
    ] {
        let (st, b) = s
            .post_arrow(&format!("/v1/table/t/{query}"), &pk_rows(&[1], "x"))
            .await;
        assert_eq!(st, 400, "{query}: {b}");
        assert!(b["error"].as_str().unwrap().contains(names), "{query}: {b}");
    }
    // Commits straight to the table: a multipart write, a restore.
    for (path, body) in [
        ("/v1/table/t/multipart_write/create", json!({})),
        ("/v1/table/t/restore", json!({"version": 1})),
    ] {
        let (st, b) = s.post(path, body).await;
        assert_error(st, &b, 400, 13);
        assert!(
            b["error"].as_str().unwrap().contains("LSM write spec"),
            "{path}: {b}"
        );
    }
    // Reads lance cannot plan over memtables say so; the lancedb client's hybrid search falls
    // back on exactly "does not support with_row_id".
    let (st, b) = s
        .post("/v1/table/t/query", json!({"with_row_id": true}))
        .await;
    assert_error(st, &b, 400, 13);
    assert!(
        b["error"]
            .as_str()
            .unwrap()
            .contains("does not support with_row_id"),
        "{b}"
    );
    let (st, b) = s
        .post("/v1/table/t/query", json!({"use_lsm": true, "version": 1}))
        .await;
    assert_error(st, &b, 400, 13);
    assert!(
        b["error"].as_str().unwrap().contains("time-traveled"),
        "{b}"
    );
    let (st, b) = s
        .post("/v1/table/t/query", json!({"columns": {"w": "v || 'x'"}}))
        .await;
    assert_error(st, &b, 400, 13);
    assert!(
        b["error"].as_str().unwrap().contains("use_lsm(false)"),
        "{b}"
    );
    let (st, b) = s
        .post("/v1/table/t/query", json!({"filter": "nope > 1"}))
        .await;
    assert!(st == 400 || st == 404, "{b}");
    let (st, b) = s
        .post("/v1/table/t/get_lsm_stats", json!({"rows": true}))
        .await;
    assert_error(st, &b, 400, 13);
    // Identity sharding opens a writer per value: no more than 1024 for a table.
    let (st, b) = s
        .post_arrow("/v1/table/idt/create", &pk_rows(&[0], "base"))
        .await;
    assert_eq!(st, 200, "{b}");
    s.ok(
        "/v1/table/idt/set_lsm_write_spec",
        json!({"sharding": {"mode": "identity", "column": "v"}}),
    )
    .await;
    let many: Vec<i64> = (0..1100).collect();
    let (st, b) = s
        .post_arrow(&format!("/v1/table/idt/{UPSERT}"), &pk_rows(&many, "x"))
        .await;
    assert_error(st, &b, 400, 13);
    assert!(b["error"].as_str().unwrap().contains("1024"), "{b}");
    assert_eq!(
        s.count("idt", json!({})).await,
        1,
        "nothing of it was written"
    );
    // A pinned version reads the base table at that version, as asked.
    let rows = s.query("t", json!({"version": 1, "columns": ["id"]})).await;
    assert_eq!(ids(&rows).len(), 5);
}

#[tokio::test]
async fn acknowledged_lsm_upserts_survive_a_kill_and_every_replica_reads_them() {
    let mut s = Server::start().await;
    lsm_table(
        &s,
        "ev",
        4,
        json!({"mode": "bucket", "column": "id", "num_buckets": 2}),
    )
    .await;
    upsert(&s, "ev", &[1, 2, 10], "a").await;
    // SIGKILL: nothing was flushed, every row is in the WAL only.
    s.kill_hard();
    let s = s.restart_same().await;
    let expected = want(4, &[(1, "a"), (2, "a"), (10, "a")]);
    assert_eq!(
        table_rows(&s, "ev", None).await,
        expected,
        "replayed from the WAL"
    );

    // A second node on the same root reads what the first acknowledged (it claims the shards,
    // replaying their WAL); the first, fenced out, claims them back on its next write.
    let b = Server::start_at(s.data_dir(), &[]).await;
    assert_eq!(table_rows(&b, "ev", None).await, expected);
    upsert(&s, "ev", &[2, 11], "b").await;
    let expected = want(4, &[(1, "a"), (2, "b"), (10, "a"), (11, "b")]);
    assert_eq!(table_rows(&b, "ev", None).await, expected);
    upsert(&b, "ev", &[3], "c").await;
    let mut expected = expected;
    expected.insert(3, "c3".into());
    assert_eq!(table_rows(&s, "ev", None).await, expected);
    assert_eq!(table_rows(&b, "ev", None).await, expected);
    // Both flush and merge from either node; nothing is lost or doubled.
    s.ok("/v1/table/ev/flush_lsm", json!({})).await;
    let job = b.ok("/v1/table/ev/compact_lsm", json!({})).await;
    let done = b.wait_job(job["job_id"].as_str().unwrap()).await;
    assert_eq!(done["job_state"], "DONE", "{done}");
    assert_eq!(table_rows(&s, "ev", None).await, expected);
    assert_eq!(
        table_rows(&b, "ev", Some(false)).await.len(),
        expected.len()
    );
}

#[tokio::test]
async fn upkeep_flushes_a_quiet_tables_memtables_and_merges_them() {
    let s = Server::start_with(
        tempfile::tempdir().unwrap(),
        &[
            ("LANCET_UPKEEP", "true"),
            ("LANCET_UPKEEP_INTERVAL", "200ms"),
            ("LANCET_UPKEEP_QUIET_AFTER", "1s"),
        ],
    )
    .await;
    lsm_table(
        &s,
        "ev",
        3,
        json!({"mode": "bucket", "column": "id", "num_buckets": 2}),
    )
    .await;
    let version = s.version("ev").await;
    upsert(&s, "ev", &[1, 7, 8], "a").await;
    let expected = want(3, &[(1, "a"), (7, "a"), (8, "a")]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if table_rows(&s, "ev", Some(false)).await == expected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "upkeep never merged the memtables"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(s.version("ev").await > version);
    assert_eq!(table_rows(&s, "ev", None).await, expected);
}

#[tokio::test]
async fn limited_reads_over_memtables_answer_only_live_latest_rows() {
    let s = Server::start().await;
    lsm_table(
        &s,
        "ev",
        50,
        json!({"mode": "bucket", "column": "id", "num_buckets": 2}),
    )
    .await;
    // In memory: base keys updated (twice for some), new keys, and deletes of both kinds.
    upsert(&s, "ev", &(0..30).collect::<Vec<_>>(), "m").await;
    upsert(&s, "ev", &(10..20).collect::<Vec<_>>(), "n").await;
    upsert(&s, "ev", &(100..140).collect::<Vec<_>>(), "m").await;
    let (st, b) = s
        .post(
            "/v1/table/ev/delete",
            json!({"predicate": "id = 3 OR id = 101 OR id = 12"}),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let mut truth = want(50, &[]);
    for i in (0..30).chain(100..140) {
        truth.insert(i, format!("m{i}"));
    }
    for i in 10..20 {
        truth.insert(i, format!("n{i}"));
    }
    for i in [3, 101, 12] {
        truth.remove(&i);
    }
    assert_eq!(table_rows(&s, "ev", None).await, truth);

    for (filter, k) in [
        ("v LIKE 'm%' OR v LIKE 'n%'", 20),
        ("id < 20", 5),
        ("v LIKE 'n%'", 9),
        // More than the memtables can give: the full read answers.
        ("v LIKE 'base%'", 15),
        ("id >= 0", 200),
    ] {
        let batches = s
            .query(
                "ev",
                json!({"filter": filter, "k": k, "columns": ["id", "v"]}),
            )
            .await;
        let ids = ids(&batches);
        let vs = strings(&batches, "v");
        let matching = truth
            .iter()
            .filter(|(i, v)| match filter {
                "v LIKE 'm%' OR v LIKE 'n%'" => v.starts_with('m') || v.starts_with('n'),
                "id < 20" => **i < 20,
                "v LIKE 'n%'" => v.starts_with('n'),
                "v LIKE 'base%'" => v.starts_with("base"),
                _ => true,
            })
            .count();
        assert_eq!(ids.len(), matching.min(k), "{filter} k={k}: {ids:?}");
        let unique: std::collections::BTreeSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len(), "{filter}: a key twice: {ids:?}");
        for (i, v) in ids.iter().zip(vs) {
            assert_eq!(
                truth.get(i),
                v.as_ref(),
                "{filter}: row {i} is not the key's live latest version"
            );
        }
    }
}
