//! Concurrent writers: clients doing merge_insert / insert / update / delete at once on one
//! table's main branch and on two branches of it, for a bounded time. Each client owns an id
//! range and serialises its own operations, so the final state of every branch is determined
//! by the acknowledged operations whatever their interleaving: it must equal the per-client
//! models exactly. A lost commit race may be retried by the server or answered 409 (counted,
//! treated as not applied and checked to be so); a 500 or anything else fails the test.
//!
//! Runs ~6 s by default; `LANCET_SOAK_SECS=600` makes it a soak, printing what it did.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;

const TABLE: &str = "conc";
const CLIENTS_PER_TARGET: usize = 3;
/// Rows every branch starts with (ids 0..BASE), owned by no client: never touched.
const BASE: i64 = 50;
/// Client `c` owns ids `(c + 1) * SPAN ..`.
const SPAN: i64 = 1_000_000;

/// A small deterministic generator (no extra dependency; a seed per client).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Default, Debug, Clone, Copy)]
struct Counts {
    insert: u64,
    merge: u64,
    update: u64,
    delete: u64,
    reads: u64,
    conflicts: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.insert += o.insert;
        self.merge += o.merge;
        self.update += o.update;
        self.delete += o.delete;
        self.reads += o.reads;
        self.conflicts += o.conflicts;
    }
    fn writes(&self) -> u64 {
        self.insert + self.merge + self.update + self.delete
    }
}

/// One client: its target branch (None = main), its id range and its model of those ids.
struct Client {
    h: Handle,
    n: usize,
    branch: Option<String>,
    model: BTreeMap<i64, String>,
    next_id: i64,
    rng: Rng,
    counts: Counts,
}

impl Client {
    fn lo(&self) -> i64 {
        (self.n as i64 + 1) * SPAN
    }

    fn arrow_path(&self, op: &str, extra: &str) -> String {
        let mut path = format!("/v1/table/{TABLE}/{op}?{extra}");
        if let Some(b) = &self.branch {
            path.push_str(&format!("&branch={b}"));
        }
        path
    }

    fn json_body(&self, mut body: Value) -> Value {
        if let Some(b) = &self.branch {
            body["branch"] = json!(b);
        }
        body
    }

    /// An owned id the model holds, if any.
    fn existing(&mut self) -> Option<i64> {
        if self.model.is_empty() {
            return None;
        }
        let skip = self.rng.below(self.model.len() as u64) as usize;
        self.model.keys().nth(skip).copied()
    }

    /// Checks the outcome of a write: 200 applies `apply` to the model; 409 is counted and must
    /// have changed nothing (checked at once: only this client writes these ids).
    async fn settle(
        &mut self,
        what: &str,
        status: u16,
        body: &Value,
        apply: impl FnOnce(&mut Self),
    ) {
        match status {
            200 => apply(self),
            409 => {
                self.counts.conflicts += 1;
                self.check_own_rows(&format!("after a 409 to {what}")).await;
            }
            _ => panic!(
                "client {} ({:?}): {what} answered {status}: {body}",
                self.n, self.branch
            ),
        }
    }

    /// The client's own rows on its branch equal its model.
    async fn check_own_rows(&mut self, when: &str) {
        let lo = self.lo();
        let body = self.json_body(json!({
            "filter": format!("id >= {lo} AND id < {}", lo + SPAN),
            "columns": ["id", "text"],
            "limit": 1_000_000,
        }));
        let got = self.h.query(TABLE, body).await;
        let got: BTreeMap<i64, String> = ids(&got)
            .into_iter()
            .zip(strings(&got, "text").into_iter().map(Option::unwrap))
            .collect();
        assert_eq!(
            got, self.model,
            "client {} ({:?}) {when}: its rows differ from the acknowledged writes",
            self.n, self.branch
        );
        self.counts.reads += 1;
    }

    async fn step(&mut self, op_no: u64) {
        let kind = self.rng.below(10);
        let tag = format!("c{}-{op_no}", self.n);
        match kind {
            // insert 1..8 new rows
            0..=2 => {
                let n = 1 + self.rng.below(8) as i64;
                let new: Vec<i64> = (self.next_id..self.next_id + n).collect();
                self.next_id += n;
                let texts: Vec<String> = new.iter().map(|_| format!("{tag} i")).collect();
                let path = self.arrow_path("insert", "mode=append");
                let (st, body) = self.h.post_arrow(&path, &rows(&new, &texts)).await;
                self.settle("insert", st, &body, |c| {
                    c.counts.insert += 1;
                    c.model.extend(new.into_iter().zip(texts));
                })
                .await;
            }
            // merge_insert: some owned rows updated, some new rows inserted
            3..=5 => {
                let mut keys: Vec<i64> = (0..self.rng.below(4))
                    .filter_map(|_| self.existing())
                    .collect();
                let n = self.rng.below(3) as i64;
                keys.extend(self.next_id..self.next_id + n);
                self.next_id += n;
                keys.sort();
                keys.dedup();
                if keys.is_empty() {
                    return;
                }
                let texts: Vec<String> = keys.iter().map(|_| format!("{tag} m")).collect();
                let path = self.arrow_path(
                    "merge_insert",
                    "on=id&when_matched_update_all=true&when_not_matched_insert_all=true",
                );
                let (st, body) = self.h.post_arrow(&path, &rows(&keys, &texts)).await;
                self.settle("merge_insert", st, &body, |c| {
                    c.counts.merge += 1;
                    c.model.extend(keys.into_iter().zip(texts));
                })
                .await;
            }
            // update a range of owned ids
            6..=7 => {
                let Some(a) = self.existing() else { return };
                let b = a + 1 + self.rng.below(6) as i64;
                let text = format!("{tag} u");
                let body = self.json_body(json!({
                    "updates": [["text", format!("'{text}'")]],
                    "predicate": format!("id >= {a} AND id < {b}"),
                }));
                let (st, resp) = self
                    .h
                    .post(&format!("/v1/table/{TABLE}/update"), body)
                    .await;
                self.settle("update", st, &resp, |c| {
                    c.counts.update += 1;
                    let hit: Vec<i64> = c.model.range(a..b).map(|(k, _)| *k).collect();
                    assert_eq!(
                        resp["updated_rows"].as_u64(),
                        Some(hit.len() as u64),
                        "client {} update {a}..{b}: {resp}",
                        c.n
                    );
                    for k in hit {
                        c.model.insert(k, text.clone());
                    }
                })
                .await;
            }
            // delete a range of owned ids
            _ => {
                let Some(a) = self.existing() else { return };
                let b = a + 1 + self.rng.below(3) as i64;
                let body = self.json_body(json!({
                    "predicate": format!("id >= {a} AND id < {b}"),
                }));
                let (st, resp) = self
                    .h
                    .post(&format!("/v1/table/{TABLE}/delete"), body)
                    .await;
                self.settle("delete", st, &resp, |c| {
                    c.counts.delete += 1;
                    let hit: Vec<i64> = c.model.range(a..b).map(|(k, _)| *k).collect();
                    for k in hit {
                        c.model.remove(&k);
                    }
                })
                .await;
            }
        }
        // Read-your-writes now and then, while the others keep writing.
        if op_no % 8 == 7 {
            self.check_own_rows(&format!("after op {op_no}")).await;
        }
    }
}

/// Every row of a branch: id -> text.
async fn all_rows(h: &Handle, branch: Option<&str>) -> BTreeMap<i64, String> {
    let mut body = json!({"columns": ["id", "text"], "limit": 10_000_000});
    if let Some(b) = branch {
        body["branch"] = json!(b);
    }
    let got = h.query(TABLE, body).await;
    let pairs: Vec<(i64, String)> = ids(&got)
        .into_iter()
        .zip(strings(&got, "text").into_iter().map(Option::unwrap))
        .collect();
    let map: BTreeMap<i64, String> = pairs.iter().cloned().collect();
    assert_eq!(map.len(), pairs.len(), "duplicate ids on {branch:?}");
    map
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_on_main_and_branches_match_the_acknowledged_writes() {
    let soak = std::env::var("LANCET_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok());
    let secs = soak.unwrap_or(6);
    let s = Server::start().await;
    // A second server process on the same data directory (another replica): its writes and
    // this one's race in lance's commit protocol, not behind one process's write lock.
    let other = Server::start_at(s.data_dir(), &[]).await;
    s.create_table(TABLE, BASE).await;
    let targets = [None, Some("b1"), Some("b2")];
    for b in targets.iter().flatten() {
        s.ok(
            &format!("/v1/table/{TABLE}/branches/create"),
            json!({"name": b}),
        )
        .await;
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for (t, branch) in targets.iter().enumerate() {
        for k in 0..CLIENTS_PER_TARGET {
            let n = t * CLIENTS_PER_TARGET + k;
            let mut c = Client {
                h: if n.is_multiple_of(2) { &s } else { &other }.with_key(ADMIN_KEY),
                n,
                branch: branch.map(str::to_string),
                model: BTreeMap::new(),
                next_id: (n as i64 + 1) * SPAN,
                rng: Rng::new(n as u64 + 1),
                counts: Counts::default(),
            };
            tasks.push(tokio::spawn(async move {
                let mut op_no = 0;
                while Instant::now() < deadline {
                    c.step(op_no).await;
                    op_no += 1;
                }
                c
            }));
        }
    }
    let mut clients = Vec::new();
    for t in tasks {
        clients.push(t.await.expect("a client panicked"));
    }
    let elapsed = started.elapsed();

    // Each branch holds exactly the base rows plus its clients' models; nothing leaked from
    // one branch to another.
    let base: BTreeMap<i64, String> = (0..BASE).map(|i| (i, format!("row {i}"))).collect();
    for branch in targets {
        let mut want = base.clone();
        for c in clients.iter().filter(|c| c.branch.as_deref() == branch) {
            want.extend(c.model.iter().map(|(k, v)| (*k, v.clone())));
        }
        let got = all_rows(&s, branch).await;
        if got != want {
            let missing: Vec<_> = want
                .iter()
                .filter(|(k, v)| got.get(k) != Some(v))
                .take(10)
                .collect();
            let extra: Vec<_> = got
                .iter()
                .filter(|(k, v)| want.get(k) != Some(v))
                .take(10)
                .collect();
            panic!(
                "{branch:?}: {} rows, want {}; missing or different {missing:?}; unexpected {extra:?}",
                got.len(),
                want.len()
            );
        }
        let mut body = json!({});
        if let Some(b) = branch {
            body["branch"] = json!(b);
        }
        assert_eq!(s.count(TABLE, body).await, want.len() as u64);
    }
    let mut total = Counts::default();
    for c in &clients {
        total.add(&c.counts);
    }
    assert!(total.writes() > 0);
    let rows: usize = clients.iter().map(|c| c.model.len()).sum();
    println!(
        "concurrency: {} clients on main + 2 branches for {:.1} s: {} acknowledged writes \
         (insert {}, merge_insert {}, update {}, delete {}), {} answered 409 (checked not applied), \
         {} read-your-writes checks, {rows} client rows at the end",
        clients.len(),
        elapsed.as_secs_f64(),
        total.writes(),
        total.insert,
        total.merge,
        total.update,
        total.delete,
        total.conflicts,
        total.reads,
    );
}
