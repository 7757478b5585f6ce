//! The acknowledged LSM write lost in issue 75, made deterministic, and its siblings.
//!
//! Lance fences a stale shard writer only when its next WAL append collides with the
//! sentinel its successor left at the tip. Lancet deletes WAL files (an unset removes them
//! all, reclaim those below the replay cursor), so a writer a replica still held could append
//! into an emptied slot and answer 200 for rows nobody would replay. Each test here drives
//! one such interleaving to the dangerous point without relying on timing.

use serde_json::{Value, json};

use crate::common::*;
use crate::lsm::{UPSERT, lsm_table, pk_rows, table_rows, upsert, want};
use crate::lsm_lifecycle::{compact_lsm, mem_wal_files};

/// Waits (bounded) for `path` to exist.
async fn wait_for_file(path: &std::path::Path) {
    for _ in 0..1500 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("{} never appeared", path.display());
}

#[tokio::test]
async fn a_write_held_across_another_replicas_unset_is_refused_not_lost() {
    let a = Server::start().await;
    lsm_table(&a, "ev", 5, json!({"mode": "unsharded"})).await;
    let hold_dir = tempfile::tempdir().unwrap();
    let hold = hold_dir.path().join("hold");
    let b = Server::start_at(
        a.data_dir(),
        &[("LANCET_TEST_HOLD_LSM_WRITES", hold.to_str().unwrap())],
    )
    .await;
    // B holds the shard's writer from here on.
    upsert(&b, "ev", &[100], "b").await;

    // B's next write has chosen that writer (and trusted its view of the spec) when it stops
    // at the hold; A unsets the spec meanwhile, removing every MemWAL file.
    std::fs::write(&hold, "").unwrap();
    let writer = (*b).clone();
    let held = tokio::spawn(async move {
        writer
            .post_arrow(&format!("/v1/table/ev/{UPSERT}"), &pk_rows(&[200], "held"))
            .await
    });
    wait_for_file(&hold.with_extension("reached")).await;
    a.ok("/v1/table/ev/unset_lsm_write_spec", json!({})).await;
    assert_eq!(
        mem_wal_files(a.data_dir()),
        (0, 0),
        "the unset removed the WAL"
    );
    std::fs::remove_file(&hold).unwrap();
    let (st, body) = held.await.unwrap();

    // Acknowledged means kept. Before the fix this write answered 200 and was in neither
    // replica's table: its WAL entry went into the directory the unset had removed.
    for node in [&a, &b] {
        let rows = table_rows(node, "ev", None).await;
        if st == 200 {
            assert_eq!(
                rows.get(&200).map(String::as_str),
                Some("held200"),
                "acknowledged ({body}) and lost"
            );
        }
        assert_eq!(rows.get(&100).map(String::as_str), Some("b100"));
    }
    assert_eq!(st, 503, "refused, nothing acknowledged: {body}");
    assert!(body["error"].as_str().unwrap().contains("retry"), "{body}");
    // The stale writer's append left nothing behind under the table.
    assert_eq!(mem_wal_files(a.data_dir()), (0, 0));

    // The client's retry writes to the plain table, which both replicas read.
    let (st, body) = b
        .post_arrow(&format!("/v1/table/ev/{UPSERT}"), &pk_rows(&[200], "held"))
        .await;
    assert_eq!(st, 200, "{body}");
    let mut expected = want(5, &[(100, "b")]);
    expected.insert(200, "held200".into());
    for node in [&a, &b] {
        assert_eq!(table_rows(node, "ev", None).await, expected);
    }
}

#[tokio::test]
async fn a_fenced_writer_whose_sentinel_was_reclaimed_writes_again_before_answering() {
    // No grace: A's compaction passes drain the merged generation and delete the WAL entries
    // below the replay cursor at once, the sentinel that fenced B's writer among them.
    let a = Server::start_with(
        tempfile::tempdir().unwrap(),
        &[("LANCET_LSM_RECLAIM_AFTER", "0s")],
    )
    .await;
    lsm_table(&a, "ev", 5, json!({"mode": "unsharded"})).await;
    let b = Server::start_at(a.data_dir(), &[]).await;
    upsert(&b, "ev", &[100], "b").await;
    // A claims the shard (fencing B's writer, which does not know it yet), writes, flushes,
    // merges, and reclaims what the merge left.
    upsert(&a, "ev", &[101], "a").await;
    a.ok("/v1/table/ev/flush_lsm", json!({})).await;
    for _ in 0..3 {
        compact_lsm(&a, "ev").await;
    }
    // B's held writer appends at the slot the reclaimed sentinel had: below A's replay
    // cursor, so no replica would ever read it. Before the fix this 200 was a lost write.
    let answered: Value = upsert(&b, "ev", &[102], "late").await;
    let expected = want(5, &[(100, "b"), (101, "a"), (102, "late")]);
    for node in [&a, &b] {
        assert_eq!(
            table_rows(node, "ev", None).await,
            expected,
            "acknowledged ({answered}) and lost"
        );
    }
    // And once merged, the base table has it.
    a.ok("/v1/table/ev/flush_lsm", json!({})).await;
    compact_lsm(&a, "ev").await;
    assert_eq!(table_rows(&a, "ev", Some(false)).await, expected);
}
