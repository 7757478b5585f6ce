//! The crash test's upkeep table `u`: small inserts every round and, now and then, an upkeep
//! job (`optimize`: index upkeep, compaction, cleanup) that runs across kills. After every
//! restart `u` must open, hold every acknowledged insert once and each cut-off insert whole
//! or not at all; an upkeep job cut off must carry on after the restart and end DONE (or
//! FAILED as retryable, when it lost a commit race to an insert).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::common::*;
use crate::concurrency::Rng;
use crate::crash_support::{Timed, post_arrow, timed};

pub(crate) struct UpkeepTable {
    /// Ids acknowledged, and ids of inserts cut off that were applied.
    present: BTreeSet<i64>,
    job: Option<String>,
    pub(crate) jobs_done: u64,
    pub(crate) jobs_failed_retryable: u64,
    pub(crate) kills_during_upkeep: u64,
}

const BATCH: i64 = 5;

impl UpkeepTable {
    pub(crate) async fn setup(s: &Handle) -> Self {
        let (st, b) = s.post_arrow("/v1/table/u/create", &sample(0, 20)).await;
        assert_eq!(st, 200, "{b}");
        s.ok(
            "/v1/table/u/create_scalar_index",
            json!({"column": "id", "index_type": "BTREE", "name": "u_id"}),
        )
        .await;
        UpkeepTable {
            present: (0..20).collect(),
            job: None,
            jobs_done: 0,
            jobs_failed_retryable: 0,
            kills_during_upkeep: 0,
        }
    }

    /// This round's insert (its ids and the request in flight), and maybe a new upkeep job.
    pub(crate) async fn launch(
        &mut self,
        h: &Handle,
        rng: &mut Rng,
        round: u64,
    ) -> (Vec<i64>, Timed) {
        if self.job.is_none() && rng.below(3) == 0 {
            let (st, b) = h
                .post(
                    "/v1/table/u/optimize",
                    json!({"action": "all", "retention_seconds": 0}),
                )
                .await;
            assert_eq!(st, 200, "{b}");
            self.job = b["job_id"].as_str().map(str::to_string);
        }
        let start = 1000 + round as i64 * BATCH;
        let ids: Vec<i64> = (start..start + BATCH).collect();
        let task = tokio::spawn(timed(post_arrow(
            h,
            "/v1/table/u/insert",
            &sample(start, BATCH),
        )));
        (ids, task)
    }

    /// After a restart: `u` holds exactly what it must, and the job carries on. Answers
    /// whether the round's insert was applied.
    pub(crate) async fn check(
        &mut self,
        s: &Handle,
        ids: &[i64],
        outcome: &Option<(u16, Value)>,
    ) -> bool {
        let rows = s
            .query("u", json!({"columns": ["id"], "limit": 1_000_000}))
            .await;
        let got: Vec<i64> = crate::common::ids(&rows);
        let set: BTreeSet<i64> = got.iter().copied().collect();
        assert_eq!(set.len(), got.len(), "duplicate rows in u after a kill");
        let applied = ids.iter().filter(|i| set.contains(i)).count();
        assert!(
            applied == 0 || applied == ids.len(),
            "insert of {ids:?} applied by half ({applied} rows)"
        );
        if matches!(outcome, Some((200, _))) {
            assert_eq!(applied, ids.len(), "acknowledged insert {ids:?} lost");
        }
        if applied > 0 {
            self.present.extend(ids);
        }
        assert_eq!(set, self.present, "u holds rows nobody wrote, or lost some");
        // Indexed lookups agree with the scan, whatever compaction moved.
        let probe = *self.present.iter().last().unwrap();
        let n = s
            .count("u", json!({"predicate": format!("id = {probe}")}))
            .await;
        assert_eq!(n, 1, "indexed lookup of {probe}");
        self.follow_job(s, false).await;
        applied > 0
    }

    /// The job's state now (or once it ends, with `wait`).
    pub(crate) async fn follow_job(&mut self, s: &Handle, wait: bool) {
        let Some(job) = self.job.clone() else { return };
        let d = if wait {
            s.wait_job(&job).await
        } else {
            s.describe_job(&job).await
        };
        match d["job_state"].as_str().unwrap() {
            "IN_PROGRESS" => self.kills_during_upkeep += 1,
            "DONE" => {
                self.jobs_done += 1;
                self.job = None;
            }
            "FAILED" if d["failure"]["retryable"] == true => {
                self.jobs_failed_retryable += 1;
                self.job = None;
            }
            other => panic!("upkeep job {other} after a kill: {d}"),
        }
    }
}
