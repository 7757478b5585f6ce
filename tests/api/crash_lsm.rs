//! Crash safety of LSM writes (issue 28): the server is killed with SIGKILL at random moments
//! while LSM upserts, LSM deletes, flushes and merges (requested, and upkeep's own) are in
//! flight, and restarted on the same data directory, `LANCET_LSM_CRASH_KILLS` times (default
//! 50). Small memtables make shards freeze and flush generations all the time, so kills land in
//! WAL writes, generation flushes and merges into the base table alike. After every restart
//! (which replays the WAL):
//!
//! - every acknowledged upsert's rows hold its values, every acknowledged delete's keys are gone;
//! - a cut-off request left each of its keys with the old value or the new one;
//! - no key is answered twice, and no row appears that nobody wrote.
//!
//! At the end everything is merged into the base table, which must then hold the same rows.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::*;
use crate::concurrency::Rng;
use crate::crash::{crash_seed, env_u64};
use crate::crash_support::{Stats, post_arrow, post_json, timed};
use crate::lsm::{UPSERT, pk_rows, table_rows};

enum Op {
    Upsert { keys: Vec<i64>, tag: String },
    Delete { keys: Vec<i64> },
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_lsm_writes_loses_no_acknowledged_upsert_and_doubles_none() {
    let kills = env_u64("LANCET_LSM_CRASH_KILLS", 50);
    let budget = Duration::from_secs(env_u64("LANCET_LSM_CRASH_SECS", 300));
    let seed = crash_seed();
    println!("lsm crash: seed {seed} (LANCET_CRASH_SEED), {kills} kills, at most {budget:?}");
    let mut rng = Rng::new(seed);
    let started = Instant::now();
    // Upkeep merges generations on its own while writes go on, and reclaims what merged
    // generations leave (their manifest entries, files and WAL) with no grace: every pass
    // takes the next step, so kills land in the middle of each.
    let mut s = Server::start_with(
        tempfile::tempdir().unwrap(),
        &[
            ("LANCET_UPKEEP", "true"),
            ("LANCET_UPKEEP_INTERVAL", "100ms"),
            ("LANCET_UPKEEP_QUIET_AFTER", "300ms"),
            ("LANCET_LSM_RECLAIM_AFTER", "0s"),
        ],
    )
    .await;
    let base: Vec<i64> = (0..100).collect();
    let (st, b) = s
        .post_arrow("/v1/table/w/create", &pk_rows(&base, "base"))
        .await;
    assert_eq!(st, 200, "{b}");
    s.ok(
        "/v1/table/w/set_lsm_write_spec",
        json!({
            "sharding": {"mode": "bucket", "column": "id", "num_buckets": 4},
            "writer_config_defaults": {"max_memtable_rows": "60"},
        }),
    )
    .await;
    let mut model: BTreeMap<i64, String> = base.iter().map(|i| (*i, format!("base{i}"))).collect();
    let mut next_id = 100i64;
    let mut stats = Stats::default();
    let (mut acked, mut cut_applied, mut cut_not, mut partial, mut merges) = (0, 0, 0, 0, 0);
    let mut round = 0u64;
    while stats.kills < kills && started.elapsed() < budget {
        round += 1;
        // Requests of a round touch disjoint keys, so each key has one write in flight.
        let mut free: Vec<i64> = model.keys().copied().collect();
        let mut take = |rng: &mut Rng, n: usize| -> Vec<i64> {
            let mut keys = Vec::new();
            while keys.len() < n && !free.is_empty() {
                keys.push(free.swap_remove(rng.below(free.len() as u64) as usize));
            }
            keys
        };
        let mut ops = Vec::new();
        for q in 0..1 + rng.below(4) {
            let mut keys = take(&mut rng, 10);
            keys.extend(next_id..next_id + 10);
            next_id += 10;
            keys.sort();
            ops.push(Op::Upsert {
                keys,
                tag: format!("r{round}q{q}-"),
            });
        }
        if rng.below(3) == 0 {
            ops.push(Op::Delete {
                keys: take(&mut rng, 3),
            });
        }
        let h: Handle = (*s).clone();
        let tasks: Vec<_> = ops
            .iter()
            .map(|op| match op {
                Op::Upsert { keys, tag } => tokio::spawn(timed(post_arrow(
                    &h,
                    &format!("/v1/table/w/{UPSERT}"),
                    &pk_rows(keys, tag),
                ))),
                Op::Delete { keys } => tokio::spawn(timed(post_json(
                    &h,
                    "/v1/table/w/delete",
                    json!({"predicate": format!("id IN ({})", keys.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(","))}),
                ))),
            })
            .collect();
        // Now and then a flush or a merge on request races the writes (upkeep merges too).
        let extra = match rng.below(5) {
            0 => Some(tokio::spawn(timed(post_json(
                &h,
                "/v1/table/w/flush_lsm",
                json!({}),
            )))),
            1 => Some(tokio::spawn(timed(post_json(
                &h,
                "/v1/table/w/compact_lsm",
                json!({}),
            )))),
            _ => None,
        };
        tokio::time::sleep(Duration::from_millis(
            rng.below(stats.window_ms("lsm-upsert")),
        ))
        .await;
        s.kill_hard();
        stats.kills += 1;
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(stats.settle("lsm-upsert", Some(task)).await);
        }
        if let Some(t) = extra {
            let _ = stats.settle("lsm-extra", Some(t)).await;
        }
        s = s.restart_same().await;

        let rows = table_rows(&s, "w", None).await;
        let mut touched = BTreeSet::new();
        for (op, out) in ops.iter().zip(&outcomes) {
            let ok = matches!(out, Some((200, _)));
            if let Some((st, b)) = out
                && *st != 200
            {
                // Refused requests are honest refusals (a 503 while shards change hands).
                assert!(*st == 503, "{st} {b}");
            }
            // What the write makes of a key: its value, or no row (a delete).
            let (keys, tag) = match op {
                Op::Upsert { keys, tag } => (keys, Some(tag)),
                Op::Delete { keys } => (keys, None),
            };
            let new = |k: i64| tag.map(|t| format!("{t}{k}"));
            let (mut applied, mut kept) = (0, 0);
            for &k in keys {
                touched.insert(k);
                let got = rows.get(&k).cloned();
                let old = model.get(&k).cloned();
                if got == new(k) {
                    applied += 1;
                } else {
                    assert!(
                        !ok,
                        "acknowledged write of key {k} lost: {got:?}, want {:?} (round {round})",
                        new(k)
                    );
                    assert_eq!(
                        got, old,
                        "key {k} holds a value nobody wrote (round {round})"
                    );
                    kept += 1;
                }
            }
            match (ok, applied, kept) {
                (true, _, _) => acked += 1,
                (false, _, 0) => cut_applied += 1,
                (false, 0, _) => cut_not += 1,
                // Spread over several shards, a cut-off request may have reached some of them.
                (false, _, _) => partial += 1,
            }
        }
        for (k, v) in &rows {
            if !touched.contains(k) {
                assert_eq!(
                    model.get(k),
                    Some(v),
                    "key {k} changed without a write (round {round})"
                );
            }
        }
        for k in model.keys() {
            assert!(
                touched.contains(k) || rows.contains_key(k),
                "key {k} lost (round {round})"
            );
        }
        model = rows;
        if s.version("w").await > 2 {
            merges += 1;
        }
    }
    // Everything merged into the base table holds the same rows.
    s.ok("/v1/table/w/flush_lsm", json!({})).await;
    let job = s.ok("/v1/table/w/compact_lsm", json!({})).await;
    if let Some(id) = job["job_id"].as_str() {
        let d = s.wait_job(id).await;
        assert_eq!(d["job_state"], "DONE", "{d}");
    }
    // Bounded by passes, not wall time: each pass waits for its job, so a slow or loaded
    // machine only makes them take longer (a 60 s deadline failed on one).
    let mut passes = 0;
    loop {
        let stats = s.ok("/v1/table/w/get_lsm_stats", json!({})).await;
        let waiting = stats["lsm_stats"]["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["generations"].as_array().is_some_and(|g| !g.is_empty()));
        if !waiting {
            break;
        }
        passes += 1;
        assert!(passes <= MERGE_PASSES, "generations never merged: {stats}");
        let job = s.ok("/v1/table/w/compact_lsm", json!({})).await;
        if let Some(id) = job["job_id"].as_str() {
            s.wait_job(id).await;
        } else {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert_eq!(
        table_rows(&s, "w", Some(false)).await,
        model,
        "the base table after the merge"
    );
    assert_eq!(table_rows(&s, "w", None).await, model);
    // Kills rarely leave a process two reclaim passes: reclaim what the run left now (three
    // passes: drain, delete, and one more for generations a killed flush left unlisted),
    // then every row must still be there.
    // (Upkeep runs passes too; a request that finds one running gets no job of its own.)
    let before = crate::lsm_lifecycle::mem_wal_files(s.data_dir());
    let mut passes = 0;
    while crate::lsm_lifecycle::mem_wal_files(s.data_dir()).0 > 0 && passes < MERGE_PASSES {
        passes += 1;
        let job = s.ok("/v1/table/w/compact_lsm", json!({})).await;
        match job["job_id"].as_str() {
            Some(id) => drop(s.wait_job(id).await),
            None => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let after = crate::lsm_lifecycle::mem_wal_files(s.data_dir());
    println!(
        "lsm crash: generation dirs {} -> {}, WAL entries {} -> {} after reclaiming",
        before.0, after.0, before.1, after.1
    );
    assert_eq!(after.0, 0, "every merged generation's files are deleted");
    assert_eq!(table_rows(&s, "w", Some(false)).await, model);
    assert_eq!(table_rows(&s, "w", None).await, model);
    let s = s.restart_same().await;
    assert_eq!(
        table_rows(&s, "w", None).await,
        model,
        "after a restart too"
    );
    println!(
        "lsm crash: {} kills in {:.1} s ({round} rounds, {} rows); requests acknowledged {acked}, \
         cut off and applied {cut_applied}, cut off and not applied {cut_not}, cut off across \
         shards and applied in part {partial}; rounds after the first merge {merges}",
        stats.kills,
        started.elapsed().as_secs_f64(),
        model.len()
    );
    assert!(stats.kills >= kills.min(1));
}

/// Compaction passes the end of the crash test may take to merge, then reclaim, what the run
/// left (a pass that finds upkeep's own running waits 200 ms and counts too). Two or three do
/// it on any machine; the rest is headroom.
const MERGE_PASSES: usize = 300;
