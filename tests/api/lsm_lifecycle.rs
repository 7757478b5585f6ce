//! The LSM tier's life cycle (issue 28): what merged generations leave on the store is
//! reclaimed, and an unset of the spec is safe while other replicas write.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::*;
use crate::lsm::{UPSERT, lsm_table, pk_rows, table_rows, upsert, want};

/// Generation directories and WAL entries under every `_mem_wal` of `dir`'s tables.
pub(crate) fn mem_wal_files(dir: &std::path::Path) -> (usize, usize) {
    let (mut gens, mut wal) = (0, 0);
    for entry in walk(dir) {
        let name = entry.file_name().unwrap().to_string_lossy().to_string();
        let parent = entry.parent().unwrap();
        let in_mem_wal = parent
            .parent()
            .is_some_and(|p| p.file_name().is_some_and(|n| n == "_mem_wal"));
        if entry.is_dir() && in_mem_wal && name.contains("_gen_") {
            gens += 1;
        }
        if entry.is_file()
            && name.ends_with(".arrow")
            && parent.file_name().is_some_and(|n| n == "wal")
        {
            wal += 1;
        }
    }
    (gens, wal)
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

pub(crate) async fn compact_lsm(s: &Handle, table: &str) -> Value {
    let job = s
        .ok(&format!("/v1/table/{table}/compact_lsm"), json!({}))
        .await;
    let done = s.wait_job(job["job_id"].as_str().unwrap()).await;
    assert_eq!(done["job_state"], "DONE", "{done}");
    done
}

#[tokio::test]
async fn merged_generations_and_the_wal_they_cover_are_reclaimed_and_nothing_is_lost() {
    // No grace: each compaction pass takes the next reclaim step at once.
    let mut s = Server::start_with(
        tempfile::tempdir().unwrap(),
        &[("LANCET_LSM_RECLAIM_AFTER", "0s")],
    )
    .await;
    lsm_table(
        &s,
        "ev",
        10,
        json!({"mode": "bucket", "column": "id", "num_buckets": 2}),
    )
    .await;
    let mut expected = want(10, &[]);
    for cycle in 0..3i64 {
        let ids: Vec<i64> = (cycle * 4..cycle * 4 + 8).collect();
        upsert(&s, "ev", &ids, &format!("c{cycle}-")).await;
        for i in ids {
            expected.insert(i, format!("c{cycle}-{i}"));
        }
        s.ok("/v1/table/ev/flush_lsm", json!({})).await;
        // Before any reclaim: every flushed generation is on disk.
        if cycle == 0 {
            assert!(mem_wal_files(s.data_dir()).0 >= 2);
        }
        compact_lsm(&s, "ev").await;
    }
    let (gens_before, wal_before) = mem_wal_files(s.data_dir());
    // Two more passes: the last merged generations are drained, then deleted.
    compact_lsm(&s, "ev").await;
    let done = compact_lsm(&s, "ev").await;
    let (gens_after, wal_after) = mem_wal_files(s.data_dir());
    assert!(
        gens_before >= 4 && gens_after == 0,
        "generation dirs {gens_before} -> {gens_after}: {done}"
    );
    assert!(
        wal_after < wal_before && wal_after <= 4,
        "WAL entries {wal_before} -> {wal_after}: {done}"
    );
    let stats = s.ok("/v1/table/ev/get_lsm_stats", json!({})).await;
    assert!(
        stats["lsm_stats"]["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["generations"] == json!([])),
        "{stats}"
    );
    assert_eq!(table_rows(&s, "ev", None).await, expected);
    assert_eq!(table_rows(&s, "ev", Some(false)).await, expected);

    // The WAL's tip did not move back: writes after a restart replay after a second one.
    s.kill_hard();
    let s = s.restart_same().await;
    assert_eq!(table_rows(&s, "ev", None).await, expected);
    upsert(&s, "ev", &[3, 40], "after-").await;
    expected.insert(3, "after-3".into());
    expected.insert(40, "after-40".into());
    let mut s = s;
    s.kill_hard();
    let s = s.restart_same().await;
    assert_eq!(
        table_rows(&s, "ev", None).await,
        expected,
        "replayed from the WAL"
    );
    s.ok("/v1/table/ev/flush_lsm", json!({})).await;
    compact_lsm(&s, "ev").await;
    assert_eq!(table_rows(&s, "ev", Some(false)).await, expected);
}

#[tokio::test]
async fn an_unset_while_another_replica_writes_loses_no_acknowledged_write() {
    let a = Server::start().await;
    lsm_table(
        &a,
        "ev",
        10,
        json!({"mode": "bucket", "column": "id", "num_buckets": 4}),
    )
    .await;
    let b = Server::start_at(a.data_dir(), &[]).await;
    upsert(&b, "ev", &[1, 2, 3, 4], "b").await;

    // Replica B writes fresh keys one request at a time while A unsets the spec.
    let writer = (*b).clone();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let writes = tokio::spawn(async move {
        let (mut acked, mut refused, mut next) = (Vec::new(), 0, 1000i64);
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
            let ids = [next, next + 1];
            next += 2;
            let (st, body) = writer
                .post_arrow(&format!("/v1/table/ev/{UPSERT}"), &pk_rows(&ids, "w"))
                .await;
            match st {
                200 => acked.extend(ids),
                503 => refused += 1,
                other => panic!("a write during the unset answered {other}: {body}"),
            }
        }
        (acked, refused)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.ok("/v1/table/ev/unset_lsm_write_spec", json!({})).await;
    // B keeps writing past the unset: its view of the spec may be up to a second old.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (acked, refused) = writes.await.unwrap();
    assert!(
        acked.len() > 10,
        "B wrote too little to test anything: {acked:?}"
    );

    let spec = a.ok("/v1/table/ev/get_lsm_write_spec", json!({})).await;
    assert_eq!(spec["lsm_write_spec"], Value::Null);
    for node in [&a, &b] {
        let rows = table_rows(node, "ev", None).await;
        let lost: Vec<&i64> = acked.iter().filter(|k| !rows.contains_key(k)).collect();
        assert!(
            lost.is_empty(),
            "acknowledged by B and lost: {lost:?} ({} acknowledged, {refused} refused with 503)",
            acked.len()
        );
        assert_eq!(rows.get(&1).map(String::as_str), Some("b1"));
    }
    println!(
        "unset race: {} keys acknowledged, {refused} writes refused with 503",
        acked.len()
    );
}

#[tokio::test]
async fn an_unset_cut_off_refuses_lsm_writes_until_it_is_run_again() {
    let s = Server::start().await;
    lsm_table(&s, "ev", 5, json!({"mode": "unsharded"})).await;
    upsert(&s, "ev", &[1, 7], "a").await;
    // What a crash in the middle of an unset leaves: its marker.
    let mem_wal = walk(s.data_dir())
        .into_iter()
        .find(|p| p.is_dir() && p.file_name().is_some_and(|n| n == "_mem_wal"))
        .expect("the table's _mem_wal");
    std::fs::write(mem_wal.join("unsetting"), "cut off\n").unwrap();
    // A writer this node already holds is fenced only by an unset's claim: a fresh node
    // opens its writers, and refuses.
    let mut s = s;
    s.kill_hard();
    let s = s.restart_same().await;
    let (st, b) = s
        .post_arrow(&format!("/v1/table/ev/{UPSERT}"), &pk_rows(&[20], "b"))
        .await;
    assert_eq!(st, 503, "{b}");
    assert!(
        b["error"]
            .as_str()
            .unwrap()
            .contains("run unset_lsm_write_spec again"),
        "{b}"
    );
    s.ok("/v1/table/ev/unset_lsm_write_spec", json!({})).await;
    let (st, b) = s
        .post_arrow(&format!("/v1/table/ev/{UPSERT}"), &pk_rows(&[20], "b"))
        .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["num_inserted_rows"], 1, "a plain merge again: {b}");
    assert_eq!(
        table_rows(&s, "ev", None).await,
        want(5, &[(1, "a"), (7, "a"), (20, "b")])
    );
    assert!(!mem_wal.exists(), "the unset removed the MemWAL files");
}
