//! Crash safety: the server is killed with SIGKILL at random moments while writes are in flight,
//! and restarted on the same data directory, many times over. After every restart:
//!
//! - every table opens (describe, count_rows, query answer);
//! - every acknowledged write is there;
//! - every operation cut off by the kill was applied whole or not at all. Each round runs one
//!   operation on the data table `k` (insert, merge_insert, update, delete, restore or
//!   create_index; each commits exactly one version, so the table must be at the old version
//!   with the old rows or at the next with exactly the rows the operation makes), and maybe at
//!   once a column change on `a` (add_columns / drop_columns), a batch-commit (two declares, a
//!   deregister, a new version of `p` from a staged manifest and the deletion of `p`'s oldest
//!   version: all of it or none), a table create, drop or rename;
//! - a backfill job on `j` (a slow virtual column) runs across several kills: it must resume
//!   (or finish) and end with every row computed once (`rows_written` = the rows it selected,
//!   one version per commit), never fail;
//! - no batch-commit intent is left once the tenant's catalog is open again;
//! - table `u` takes a small insert every round while upkeep jobs (index upkeep, compaction,
//!   cleanup) run across kills (`crash_upkeep.rs`).
//!
//! A short run (`LANCET_CRASH_KILLS`, default 20 kills) runs with `cargo test`; a long one:
//! `LANCET_CRASH_KILLS=150 LANCET_CRASH_SECS=1200 cargo test -p lancet --test api crash --
//! --nocapture` (`LANCET_CRASH_SEED` repeats a run's choices).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;
use crate::concurrency::Rng;

use crate::crash_support::*;
use crate::crash_upkeep::UpkeepTable;

impl Model {
    fn pick_k(&mut self, rng: &mut Rng) -> KOp {
        let op = self.next_op;
        self.next_op += 1;
        let existing: Vec<i64> = self.k.keys().copied().collect();
        let any = |rng: &mut Rng| existing[rng.below(existing.len() as u64) as usize];
        match rng.below(12) {
            0..=2 => {
                let n = 1 + rng.below(20) as i64;
                let ids = (self.next_id..self.next_id + n).collect();
                self.next_id += n;
                KOp::Insert { op, ids }
            }
            3..=5 => {
                let mut keys: Vec<i64> = (0..1 + rng.below(10)).map(|_| any(rng)).collect();
                let n = rng.below(10) as i64;
                keys.extend(self.next_id..self.next_id + n);
                self.next_id += n;
                keys.sort();
                keys.dedup();
                KOp::Merge { op, keys }
            }
            6..=7 => {
                let a = any(rng);
                KOp::Update {
                    op,
                    a,
                    b: a + 1 + rng.below(30) as i64,
                }
            }
            8 if existing.len() > 50 => {
                let a = any(rng);
                KOp::Delete {
                    a,
                    b: a + 1 + rng.below(15) as i64,
                }
            }
            9 if self.k_snapshots.len() > 1 => {
                let older: Vec<u64> = self
                    .k_snapshots
                    .keys()
                    .copied()
                    .filter(|v| *v != self.k_version)
                    .collect();
                KOp::Restore {
                    version: older[rng.below(older.len() as u64) as usize],
                }
            }
            8..=9 => {
                let a = any(rng);
                KOp::Update { op, a, b: a + 1 }
            }
            _ => KOp::Index {
                which: rng.below(INDEXES.len() as u64) as usize,
            },
        }
    }

    async fn check_k(
        &mut self,
        s: &Handle,
        op: &KOp,
        outcome: &Option<(u16, Value)>,
        stats: &mut Stats,
    ) {
        let version = s.version("k").await;
        let rows = k_rows(s).await;
        let applied = version == self.k_version + 1;
        assert!(
            applied || version == self.k_version,
            "k went from version {} to {version} with one {} ({op:?})",
            self.k_version,
            op.kind()
        );
        let want = if applied {
            op.after(&self.k, &self.k_snapshots)
        } else {
            self.k.clone()
        };
        if rows != want {
            let diff: Vec<_> = want
                .iter()
                .filter(|(k, v)| rows.get(k) != Some(v))
                .take(5)
                .collect();
            let extra: Vec<_> = rows
                .iter()
                .filter(|(k, v)| want.get(k) != Some(v))
                .take(5)
                .collect();
            panic!(
                "k at version {version} after {op:?} (applied: {applied}, answer {outcome:?}): \
                 {} rows, want {}; missing/different {diff:?}; unexpected {extra:?}",
                rows.len(),
                want.len()
            );
        }
        if applied && let KOp::Index { which } = op {
            let names = index_names(s).await;
            assert!(
                names.contains(INDEXES[*which].0),
                "index missing: {names:?}"
            );
        }
        stats.record(op.kind(), outcome, applied);
        self.k = rows;
        self.k_version = version;
        self.k_snapshots.insert(version, self.k.clone());
    }

    /// Rows of `k` and its indexes answer queries: an id lookup and a filter on `op`.
    async fn probe_k(&self, s: &Handle, rng: &mut Rng) {
        let ids_: Vec<i64> = self.k.keys().copied().collect();
        let id = ids_[rng.below(ids_.len() as u64) as usize];
        let rows = s
            .query(
                "k",
                json!({"filter": format!("id = {id}"), "columns": ["id", "op"]}),
            )
            .await;
        assert_eq!(ids(&rows), vec![id]);
        let op = self.k[&id].0;
        let n = s
            .count("k", json!({"predicate": format!("op = {op}")}))
            .await;
        let want = self.k.values().filter(|(o, _)| *o == op).count() as u64;
        assert_eq!(n, want, "count of op = {op}");
    }

    fn pick_a(&self, rng: &mut Rng) -> AOp {
        if self.a_cols.len() >= 3 || (!self.a_cols.is_empty() && rng.below(2) == 0) {
            let cols: Vec<i64> = self.a_cols.iter().copied().collect();
            AOp::Drop(cols[rng.below(cols.len() as u64) as usize])
        } else {
            let mut k = 2 + rng.below(1000) as i64;
            while self.a_cols.contains(&k) {
                k += 1;
            }
            AOp::Add(k)
        }
    }

    async fn a_columns(s: &Handle) -> BTreeSet<i64> {
        let d = s.ok("/v1/table/a/describe", json!({})).await;
        d["schema"]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["name"].as_str()?.strip_prefix('c')?.parse().ok())
            .collect()
    }

    async fn check_a(
        &mut self,
        s: &Handle,
        op: &AOp,
        outcome: &Option<(u16, Value)>,
        stats: &mut Stats,
    ) {
        let version = s.version("a").await;
        let cols = Self::a_columns(s).await;
        let applied = version == self.a_version + 1;
        assert!(
            applied || version == self.a_version,
            "a: {} -> {version}",
            self.a_version
        );
        let mut want = self.a_cols.clone();
        let kind = match op {
            AOp::Add(k) => {
                if applied {
                    want.insert(*k);
                }
                "add_columns"
            }
            AOp::Drop(k) => {
                if applied {
                    want.remove(k);
                }
                "drop_columns"
            }
        };
        assert_eq!(cols, want, "a's columns after {op:?} (applied {applied})");
        for k in &cols {
            let n = s
                .count("a", json!({"predicate": format!("c{k} = id * {k}")}))
                .await;
            assert_eq!(n, A_ROWS as u64, "column c{k} of a");
        }
        stats.record(kind, outcome, applied);
        self.a_cols = cols;
        self.a_version = version;
    }

    async fn pick_batch(&mut self, s: &Handle, rng: &mut Rng, round: u64) -> BatchOp {
        let declares = [format!("d{round}x"), format!("d{round}y")];
        // Two declares per batch, up to two deregisters: the declared tables stay few.
        let deregister: Vec<String> = if self.declared.len() > 4 {
            self.declared[..2].to_vec()
        } else if !self.declared.is_empty() && rng.below(2) == 0 {
            vec![self.declared[rng.below(self.declared.len() as u64) as usize].clone()]
        } else {
            Vec::new()
        };
        let version = if rng.below(2) == 0 {
            let latest = *self.p_versions.last().unwrap();
            let dir = table_dir(s, "p").await;
            let staged = dir.join(format!("staged-{round}.manifest"));
            std::fs::copy(manifest_file(&dir, latest), &staged).unwrap();
            let oldest = (self.p_versions.len() > 3).then(|| *self.p_versions.first().unwrap());
            let path = staged.to_str().unwrap().trim_start_matches('/').to_string();
            Some((path, latest + 1, oldest))
        } else {
            None
        };
        BatchOp {
            declares,
            deregister,
            version,
        }
    }

    fn batch_request(h: &Handle, b: &BatchOp) -> reqwest::RequestBuilder {
        let mut ops = vec![
            json!({"declare_table": {"id": [b.declares[0]]}}),
            json!({"declare_table": {"id": [b.declares[1]]}}),
        ];
        for d in &b.deregister {
            ops.push(json!({"deregister_table": {"id": [d]}}));
        }
        if let Some((path, v, oldest)) = &b.version {
            ops.push(
                json!({"create_table_version": {"id": ["p"], "version": v, "manifest_path": path}}),
            );
            if let Some(o) = oldest {
                ops.push(json!({"delete_table_versions": {"id": ["p"], "ranges": [{"start_version": o, "end_version": o + 1}]}}));
            }
        }
        post_json(h, "/v1/table/batch-commit", json!({ "operations": ops }))
    }

    async fn check_batch(
        &mut self,
        s: &Handle,
        b: &BatchOp,
        outcome: &Option<(u16, Value)>,
        intent: (usize, usize),
        dump: &str,
        stats: &mut Stats,
    ) {
        let applied = exists(s, &b.declares[0]).await;
        assert_eq!(
            exists(s, &b.declares[1]).await,
            applied,
            "half a batch: {b:?}"
        );
        for d in &b.deregister {
            assert_eq!(
                exists(s, d).await,
                !applied,
                "half a batch (deregister): {b:?}"
            );
        }
        let mut want = self.p_versions.clone();
        if applied && let Some((_, v, oldest)) = &b.version {
            want.insert(*v);
            if let Some(o) = oldest {
                want.remove(o);
            }
        }
        let got = versions(s, "p").await;
        assert_eq!(
            got, want,
            "p's versions after {b:?} (applied {applied}, answer {outcome:?})"
        );
        // An intent left by the kill was settled the way its marker says.
        match intent {
            (0, 0) => {}
            (_, 0) => {
                assert!(
                    !applied,
                    "an intent without a deletion marker must roll back: {b:?}, answer {outcome:?}, intents at the kill: {dump}"
                );
                stats.intents_rolled_back += 1;
            }
            _ => {
                assert!(
                    applied,
                    "an intent with a deletion marker must roll forward"
                );
                stats.intents_rolled_forward += 1;
            }
        }
        stats.record("batch-commit", outcome, applied);
        if applied {
            self.declared.extend(b.declares.iter().cloned());
            self.declared.retain(|x| !b.deregister.contains(x));
        }
        self.p_versions = got;
    }

    fn pick_t(&mut self, rng: &mut Rng, round: u64) -> TOp {
        if let Some(name) = self.retry_create.pop() {
            return TOp::Create(name);
        }
        if self.tables.len() >= 4 || (!self.tables.is_empty() && rng.below(2) == 0) {
            let names: Vec<&String> = self.tables.iter().collect();
            let name = names[rng.below(names.len() as u64) as usize].clone();
            if rng.below(2) == 0 {
                TOp::Drop(name)
            } else {
                TOp::Rename(name, format!("t{round}"))
            }
        } else {
            TOp::Create(format!("t{round}"))
        }
    }

    fn t_request(h: &Handle, t: &TOp) -> reqwest::RequestBuilder {
        match t {
            TOp::Create(name) => {
                post_arrow(h, &format!("/v1/table/{name}/create"), &sample(0, T_ROWS))
            }
            TOp::Drop(name) => post_json(h, &format!("/v1/table/{name}/drop"), json!({})),
            TOp::Rename(from, to) => post_json(
                h,
                &format!("/v1/table/{from}/rename"),
                json!({"new_table_name": to}),
            ),
        }
    }

    async fn check_t(
        &mut self,
        s: &Handle,
        t: &TOp,
        outcome: &Option<(u16, Value)>,
        intent: (usize, usize),
        stats: &mut Stats,
    ) {
        match t {
            TOp::Create(name) => {
                let present = exists(s, name).await;
                if present {
                    assert_eq!(opens(s, name).await, T_ROWS as u64, "{name}");
                    self.tables.insert(name.clone());
                } else {
                    // The name must be usable again: a later round creates it.
                    self.retry_create.push(name.clone());
                }
                stats.record("create", outcome, present);
            }
            TOp::Drop(name) => {
                let present = exists(s, name).await;
                if present {
                    assert_eq!(opens(s, name).await, T_ROWS as u64, "{name}");
                } else {
                    self.tables.remove(name);
                }
                stats.record("drop", outcome, !present);
            }
            TOp::Rename(from, to) => {
                let (old, new) = (exists(s, from).await, exists(s, to).await);
                assert!(old != new, "rename {from} -> {to}: old {old}, new {new}");
                if intent.0 > 0 {
                    assert!(old, "an interrupted rename's intent must roll it back");
                    stats.intents_rolled_back += 1;
                }
                let name = if new { to } else { from };
                assert_eq!(opens(s, name).await, T_ROWS as u64, "{name}");
                self.tables.remove(from);
                self.tables.insert(name.clone());
                stats.record("rename", outcome, new);
            }
        }
    }

    /// Every table opens and holds what it should.
    async fn check_all_open(&self, s: &Handle) {
        assert_eq!(opens(s, "k").await, self.k.len() as u64);
        assert_eq!(opens(s, "a").await, A_ROWS as u64);
        assert_eq!(opens(s, "p").await, P_ROWS as u64);
        assert_eq!(opens(s, "j").await, self.j_rows as u64);
        for t in &self.tables {
            assert_eq!(opens(s, t).await, T_ROWS as u64, "{t}");
        }
        for d in &self.declared {
            let v = s.ok(&format!("/v1/table/{d}/describe"), json!({})).await;
            assert_eq!(v["is_only_declared"], true, "{d}: {v}");
        }
        let listed = s.ok("/v1/namespace/$/table/list", json!({})).await;
        let listed: BTreeSet<String> = listed["tables"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect();
        let mut want: BTreeSet<String> = ["k", "a", "p", "j", "u"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        want.extend(self.tables.iter().cloned());
        want.extend(self.declared.iter().cloned());
        assert_eq!(listed, want, "the catalog's tables");
    }

    /// The backfill job is running or done; once done, every row was computed exactly once.
    async fn check_job(&mut self, s: &Handle, stats: &mut Stats, wait: bool) {
        let Some(job) = &self.job else { return };
        let d = if wait {
            s.wait_job(&job.id).await
        } else {
            s.describe_job(&job.id).await
        };
        match d["job_state"].as_str().unwrap() {
            "IN_PROGRESS" => stats.kills_during_backfill += 1,
            "DONE" => {
                let r = &d["result"];
                assert_eq!(
                    r["rows_written"], job.selected,
                    "each selected row once: {d}"
                );
                assert_eq!(r["rows_nulled"], 0, "{d}");
                assert_eq!(r["fragments_skipped"], json!([]), "{d}");
                let commits = r["commits"].as_u64().unwrap();
                assert_eq!(
                    s.version("j").await,
                    job.j_version + commits,
                    "one version per commit: {d}"
                );
                let rows = s
                    .query("j", json!({"columns": ["id", "dbl"], "limit": 1_000_000}))
                    .await;
                let mut n = 0;
                for b in &rows {
                    for (id, v) in int_column(b, "id").into_iter().zip(int_column(b, "dbl")) {
                        assert_eq!(v, Some(2 * id.unwrap()), "j row {id:?}");
                        n += 1;
                    }
                }
                assert_eq!(n, self.j_rows);
                stats.backfills_done += 1;
                self.job = None;
            }
            other => panic!("backfill job {other} after a kill: {d}"),
        }
    }

    /// Adds two fragments to `j` and starts a backfill of them (acknowledged before any kill).
    async fn start_job(&mut self, s: &Handle) {
        for _ in 0..2 {
            let (st, b) = s
                .post_arrow("/v1/table/j/insert", &sample(self.j_rows, J_ADD / 2))
                .await;
            assert_eq!(st, 200, "{b}");
            self.j_rows += J_ADD / 2;
        }
        let j_version = s.version("j").await;
        let selected = s.count("j", json!({"predicate": "dbl IS NULL"})).await as i64;
        let id = s
            .backfill(
                "j",
                json!({"column": "dbl", "commit_granularity": 1, "checkpoint_size": 4,
                       "max_checkpoint_size": 4, "min_checkpoint_size": 1, "concurrency": 2,
                       "task_size": 10, "batch_checkpoint_flush_interval_seconds": 0}),
            )
            .await;
        self.job = Some(Job {
            id,
            j_version,
            selected,
        });
    }
}

/// `LANCET_CRASH_SEED`, or one from the clock (printed by the tests, to repeat a run).
pub(crate) fn crash_seed() -> u64 {
    env_u64(
        "LANCET_CRASH_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64,
    )
}

pub(crate) fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_at_random_moments_loses_no_acknowledged_write_and_applies_nothing_by_half() {
    let kills = env_u64("LANCET_CRASH_KILLS", 20);
    let budget = Duration::from_secs(env_u64("LANCET_CRASH_SECS", 150));
    let seed = crash_seed();
    println!("crash: seed {seed} (LANCET_CRASH_SEED), {kills} kills, at most {budget:?}");
    let mut rng = Rng::new(seed);
    let started = Instant::now();
    // Upkeep phases wait a little before they run, so that kills land inside upkeep jobs.
    let mut s = Server::start_with(
        tempfile::tempdir().unwrap(),
        &[
            ("LANCET_FAULT_INJECTION", "1"),
            ("LANCET_FAULT_UPKEEP_DELAY_MS", "150"),
        ],
    )
    .await;
    let data = s.data_dir().to_path_buf();
    let mut m = setup(&s).await;
    let mut u = UpkeepTable::setup(&s).await;
    let mut stats = Stats::default();
    let mut round = 0u64;
    while stats.kills < kills && started.elapsed() < budget {
        round += 1;
        if m.job.is_none() && rng.below(3) == 0 {
            m.start_job(&s).await;
        }
        // Pick this round's operations (all acknowledged work so far is in the model).
        let kop = m.pick_k(&mut rng);
        let aop = (rng.below(3) == 0).then(|| m.pick_a(&mut rng));
        let bop = if rng.below(2) == 0 {
            Some(m.pick_batch(&s, &mut rng, round).await)
        } else {
            None
        };
        let top = (rng.below(4) == 0).then(|| m.pick_t(&mut rng, round));
        let h: Handle = (*s).clone();
        let mut kinds = vec![kop.kind(), "u-insert"];
        let k_task = tokio::spawn(timed(kop.request(&h)));
        let (u_ids, u_task) = u.launch(&h, &mut rng, round).await;
        let a_task = aop.clone().map(|a| {
            kinds.push(a.kind());
            let r = match a {
                AOp::Add(k) => post_json(
                    &h,
                    "/v1/table/a/add_columns",
                    json!({"new_columns": [{"name": format!("c{k}"), "expression": format!("id * {k}")}]}),
                ),
                AOp::Drop(k) => post_json(
                    &h,
                    "/v1/table/a/drop_columns",
                    json!({"columns": [format!("c{k}")]}),
                ),
            };
            tokio::spawn(timed(r))
        });
        let b_task = bop.as_ref().map(|b| {
            kinds.push("batch-commit");
            tokio::spawn(timed(Model::batch_request(&h, b)))
        });
        let t_task = top.as_ref().map(|t| {
            kinds.push(t.kind());
            tokio::spawn(timed(Model::t_request(&h, t)))
        });
        // The kill comes at a uniformly random moment of the slowest operation's usual run.
        let window = kinds.iter().map(|k| stats.window_ms(k)).max().unwrap();
        tokio::time::sleep(Duration::from_millis(rng.below(window))).await;
        s.kill_hard();
        stats.kills += 1;
        // Intents the kill left, by owner: a rename is a batch too, and may run beside one.
        let intent = intent_files(&data);
        let dump = intent_dump(&data);
        let b_intent = bop.as_ref().map_or((0, 0), |b| {
            intents_of(&data, &format!("\"{}\"", b.declares[0]), true)
        });
        let t_intent = match &top {
            Some(TOp::Rename(from, _)) => intents_of(&data, &format!("\"{from}\""), false),
            _ => (0, 0),
        };
        assert_eq!(
            intent.0,
            b_intent.0 + t_intent.0,
            "intents of nobody: {dump}"
        );
        let k_out = stats.settle(kop.kind(), Some(k_task)).await;
        let a_out = stats
            .settle(aop.as_ref().map_or("", AOp::kind), a_task)
            .await;
        let b_out = stats.settle("batch-commit", b_task).await;
        let t_out = stats
            .settle(top.as_ref().map_or("", TOp::kind), t_task)
            .await;
        let u_out = stats.settle("u-insert", Some(u_task)).await;

        s = s.restart_same().await;
        m.check_k(&s, &kop, &k_out, &mut stats).await;
        m.probe_k(&s, &mut rng).await;
        if let Some(a) = &aop {
            m.check_a(&s, a, &a_out, &mut stats).await;
        }
        if let Some(b) = &bop {
            m.check_batch(&s, b, &b_out, b_intent, &dump, &mut stats)
                .await;
        }
        if let Some(t) = &top {
            m.check_t(&s, t, &t_out, t_intent, &mut stats).await;
        }
        m.check_all_open(&s).await;
        m.check_job(&s, &mut stats, false).await;
        let applied = u.check(&s, &u_ids, &u_out).await;
        stats.record("u-insert", &u_out, applied);
        assert_eq!(
            intent_files(&data).0,
            0,
            "batch-commit intents left after the catalog was opened"
        );
    }
    // The last restart: the job (if any) must finish, and everything must still hold.
    m.check_job(&s, &mut stats, true).await;
    u.follow_job(&s, true).await;
    m.check_all_open(&s).await;
    assert_eq!(k_rows(&s).await, m.k);

    let elapsed = started.elapsed();
    println!(
        "crash: {} kills in {:.1} s ({round} rounds); backfill jobs finished {}, kills while one ran {}; \
         batch intents found after a kill: {} rolled back, {} rolled forward",
        stats.kills,
        elapsed.as_secs_f64(),
        stats.backfills_done,
        stats.kills_during_backfill,
        stats.intents_rolled_back,
        stats.intents_rolled_forward,
    );
    println!(
        "crash: upkeep jobs done {}, failed on a lost race {}, kills while one ran {}",
        u.jobs_done, u.jobs_failed_retryable, u.kills_during_upkeep
    );
    println!(
        "crash: operation  launched  acknowledged  cut-off-applied  cut-off-not-applied  refused"
    );
    for (kind, t) in &stats.ops {
        println!(
            "crash: {kind:<14} {:>8} {:>13} {:>16} {:>20} {:>8}",
            t.launched, t.acked, t.cut_applied, t.cut_not_applied, t.refused
        );
    }
    assert!(stats.kills >= kills.min(1));
}

/// The batch-commit protocol killed at each of its points (the server aborts there, by
/// `LANCET_BATCH_CRASH_AT`): before the deletion marker a restart rolls the batch back, after it
/// forward; either way all of it or none, and a rolled-back batch can be sent again.
#[tokio::test]
async fn batch_commit_killed_at_every_point_is_all_or_nothing() {
    // Operations: 0 declare x, 1 deregister y, 2 create version 4 of p, 3 delete p's version 1.
    let points = [
        ("intent", false),
        ("step-0", false),
        ("step-1", false),
        ("step-2", false),
        ("marker", true),
        ("step-3", true),
        ("removed", true),
    ];
    for (point, applied) in points {
        let env = [
            ("LANCET_FAULT_INJECTION", "1"),
            ("LANCET_BATCH_CRASH_AT", point),
        ];
        // Set up without the fault (version/delete is a batch too).
        let mut prep = Server::start().await;
        prep.create_table("y", 4).await;
        prep.create_table("p", 2).await;
        for i in 0..3 {
            let (st, b) = prep
                .post_arrow("/v1/table/p/insert", &sample(2 + i, 1))
                .await;
            assert_eq!(st, 200, "{b}");
        }
        // Version 4's manifest, as lance wrote it, kept aside and taken out of the history:
        // the batch publishes it again.
        let dir = table_dir(&prep, "p").await;
        std::fs::copy(manifest_file(&dir, 4), dir.join("v4.manifest.kept")).unwrap();
        prep.ok(
            "/v1/table/p/version/delete",
            json!({"ranges": [{"start_version": 4, "end_version": 5}]}),
        )
        .await;
        prep.kill();
        let mut s = Server::start_with(prep.take_data(), &env).await;
        let data = s.data_dir().to_path_buf();
        assert_eq!(versions(&s, "p").await, BTreeSet::from([1, 2, 3]));
        let stage = |s: Handle| async move {
            let dir = table_dir(&s, "p").await;
            let staged = dir.join("staged.manifest");
            std::fs::copy(dir.join("v4.manifest.kept"), &staged).unwrap();
            staged.to_str().unwrap().trim_start_matches('/').to_string()
        };
        let staged = stage((*s).clone()).await;
        let batch = json!({"operations": [
            {"declare_table": {"id": ["x"]}},
            {"deregister_table": {"id": ["y"]}},
            {"create_table_version": {"id": ["p"], "version": 4, "manifest_path": staged}},
            {"delete_table_versions": {"id": ["p"], "ranges": [{"start_version": 1, "end_version": 2}]}},
        ]});
        let answer = try_send(post_json(&s, "/v1/table/batch-commit", batch.clone())).await;
        assert!(answer.is_none(), "{point}: the server answered {answer:?}");
        assert!(!s.wait().success(), "{point}: the server did not abort");
        let (intents, marks) = intent_files(&data);
        assert_eq!(intents, (point != "removed") as usize, "{point}");
        assert_eq!(marks, applied as usize, "{point}");

        let s = s.restart().await;
        let state = (
            exists(&s, "x").await,
            exists(&s, "y").await,
            versions(&s, "p").await,
        );
        let want = if applied {
            (true, false, BTreeSet::from([2, 3, 4]))
        } else {
            (false, true, BTreeSet::from([1, 2, 3]))
        };
        assert_eq!(state, want, "killed at {point}");
        assert_eq!(intent_files(&data), (0, 0), "{point}: intents left");
        assert_eq!(opens(&s, "p").await, if applied { 5 } else { 4 }, "{point}");
        if applied {
            let d = s.ok("/v1/table/x/describe", json!({})).await;
            assert_eq!(d["is_only_declared"], true);
        } else {
            assert_eq!(opens(&s, "y").await, 4, "{point}");
            // Nothing of the rolled-back batch is in the way of sending it again.
            let staged = stage((*s).clone()).await;
            let mut again = batch.clone();
            again["operations"][2]["create_table_version"]["manifest_path"] = json!(staged);
            let done = s.ok("/v1/table/batch-commit", again).await;
            assert_eq!(done["results"].as_array().unwrap().len(), 4, "{done}");
            assert!(exists(&s, "x").await && !exists(&s, "y").await);
            assert_eq!(versions(&s, "p").await, BTreeSet::from([2, 3, 4]));
        }
    }
}

/// A rename is a deregister plus a register: killed between the two (or before its intent is
/// removed) it is rolled back on restart, so the table is never lost.
#[tokio::test]
async fn rename_killed_half_way_keeps_the_table() {
    for point in ["step-0", "step-1"] {
        let env = [
            ("LANCET_FAULT_INJECTION", "1"),
            ("LANCET_BATCH_CRASH_AT", point),
        ];
        let mut s = Server::start_with(tempfile::tempdir().unwrap(), &env).await;
        s.create_table("r", 3).await;
        let rename = json!({"new_table_name": "r2"});
        let answer = try_send(post_json(&s, "/v1/table/r/rename", rename.clone())).await;
        assert!(answer.is_none(), "{point}: the server answered {answer:?}");
        assert!(!s.wait().success(), "{point}: the server did not abort");
        let s = s.restart().await;
        assert!(!exists(&s, "r2").await, "{point}");
        assert_eq!(opens(&s, "r").await, 3, "{point}: the table was lost");
        s.ok("/v1/table/r/rename", rename).await;
        assert!(!exists(&s, "r").await);
        assert_eq!(opens(&s, "r2").await, 3);
    }
}
