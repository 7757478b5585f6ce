//! Audit records and their hash chain.
//!
//! Every process that writes audit records is a *writer* with an id of its own (node and start
//! time). Its records are numbered from 0 and each carries the hash of the one before it, so
//! the chain of a writer breaks where a record was removed, changed or moved: [`verify`] says
//! where. A writer that stops cleanly appends a [`CLOSE_ACTION`] record, so a chain cut short
//! at its end is seen too, unless the writer was killed (then the end of its chain is where it
//! died, which [`Report::open`] lists for a reader to judge).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The `prev_hash` of a writer's first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The action of the record a writer appends when it stops cleanly.
pub const CLOSE_ACTION: &str = "audit.writer_closed";

/// What happened: one state-changing call, admin action or refused authentication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Record {
    /// Milliseconds since the Unix epoch.
    pub time_ms: i64,
    /// The tenant acted on (empty for an operator action on no tenant, or an unknown caller).
    pub tenant: String,
    /// Who: `key:<id>`, `token:<subject>`, `operator:<id>`, or empty when unauthenticated.
    pub principal: String,
    /// What: the route (`POST /v1/table/{id}/insert`) or an admin action name.
    pub action: String,
    /// On what: a table or namespace id, a tenant, a key id.
    pub object: String,
    /// `ok`, `refused` (authentication, role, quota, suspension) or `failed`.
    pub outcome: String,
    /// The HTTP status answered (0 when there was none).
    pub status: u16,
    /// The request's `x-request-id`.
    pub request_id: String,
    /// A short reason for a refusal or failure.
    pub detail: String,
}

/// A record with its place in its writer's chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealed {
    /// The writer's id.
    pub writer: String,
    /// Its number in the writer's chain, from 0.
    pub seq: u64,
    /// The record.
    pub record: Record,
    /// Lowercase hex SHA-256 of the record before (or [`GENESIS`]).
    pub prev_hash: String,
    /// Lowercase hex SHA-256 of `prev_hash`, the writer, the number and the record.
    pub hash: String,
}

/// The hash of a record at its place: the previous hash, the writer, the number and every
/// field, each length-prefixed so that no two different records hash alike.
pub fn hash_of(prev_hash: &str, writer: &str, seq: u64, r: &Record) -> String {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(prev_hash.as_bytes());
    field(writer.as_bytes());
    field(&seq.to_le_bytes());
    field(&r.time_ms.to_le_bytes());
    field(r.tenant.as_bytes());
    field(r.principal.as_bytes());
    field(r.action.as_bytes());
    field(r.object.as_bytes());
    field(r.outcome.as_bytes());
    field(&r.status.to_le_bytes());
    field(r.request_id.as_bytes());
    field(r.detail.as_bytes());
    hex::encode(h.finalize())
}

/// One writer's chain: seals records in the order they are written.
#[derive(Debug)]
pub struct Chain {
    writer: String,
    next: u64,
    last: String,
}

impl Chain {
    /// A new chain for `writer`, which must not have written before.
    pub fn new(writer: impl Into<String>) -> Self {
        Self {
            writer: writer.into(),
            next: 0,
            last: GENESIS.to_string(),
        }
    }

    /// This chain's writer id.
    pub fn writer(&self) -> &str {
        &self.writer
    }

    /// The next record, sealed after the last one. The caller must store sealed records in
    /// order and all of them: a record sealed and then lost breaks the chain (as it should).
    pub fn seal(&mut self, record: Record) -> Sealed {
        let seq = self.next;
        let hash = hash_of(&self.last, &self.writer, seq, &record);
        let sealed = Sealed {
            writer: self.writer.clone(),
            seq,
            record,
            prev_hash: std::mem::replace(&mut self.last, hash.clone()),
            hash,
        };
        self.next += 1;
        sealed
    }

    /// Takes back `to` and every record sealed after it, when they could not be stored, so
    /// that the next record follows the last one stored.
    pub fn rewind(&mut self, to: &Sealed) {
        self.next = to.seq;
        self.last = to.prev_hash.clone();
    }
}

/// What [`verify`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Records checked.
    pub records: u64,
    /// Writers seen.
    pub writers: u64,
    /// Every break found, in words (empty when the log verifies).
    pub problems: Vec<String>,
    /// Writers whose chain has no close record: still running, or stopped without closing
    /// (killed); the end of such a chain cannot be told from a cut.
    pub open: Vec<String>,
}

impl Report {
    /// Whether no break was found.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks every writer's chain in `records` (any order): numbers from 0 without gaps or
/// repeats, each `prev_hash` the hash of the record before, each hash recomputed, nothing
/// after a close record.
pub fn verify(records: impl IntoIterator<Item = Sealed>) -> Report {
    let mut by_writer: BTreeMap<String, Vec<Sealed>> = BTreeMap::new();
    let mut report = Report::default();
    for s in records {
        report.records += 1;
        by_writer.entry(s.writer.clone()).or_default().push(s);
    }
    report.writers = by_writer.len() as u64;
    for (writer, mut chain) in by_writer {
        chain.sort_by_key(|s| s.seq);
        let mut expected_seq = 0u64;
        let mut prev = GENESIS.to_string();
        let mut closed = false;
        for s in &chain {
            let problems_before = report.problems.len();
            if closed {
                report.problems.push(format!(
                    "writer {writer}: record {} follows its close record",
                    s.seq
                ));
            }
            if s.seq < expected_seq {
                report
                    .problems
                    .push(format!("writer {writer}: record {} appears twice", s.seq));
                continue;
            }
            if s.seq > expected_seq {
                report.problems.push(format!(
                    "writer {writer}: records {expected_seq}..{} are missing",
                    s.seq
                ));
            } else if s.prev_hash != prev {
                report.problems.push(format!(
                    "writer {writer}: record {} does not follow record {} (its previous hash differs)",
                    s.seq,
                    s.seq.wrapping_sub(1)
                ));
            }
            if hash_of(&s.prev_hash, &s.writer, s.seq, &s.record) != s.hash {
                report.problems.push(format!(
                    "writer {writer}: record {} was altered (its hash does not match its content)",
                    s.seq
                ));
            }
            if report.problems.len() > problems_before + 1 {
                report.problems.truncate(problems_before + 1);
            }
            expected_seq = s.seq + 1;
            prev = s.hash.clone();
            closed |= s.record.action == CLOSE_ACTION;
        }
        if !closed {
            report.open.push(writer);
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: i64) -> Record {
        Record {
            time_ms: i,
            tenant: "acme".into(),
            principal: "key:k1".into(),
            action: "POST /v1/table/{id}/insert".into(),
            object: format!("t{i}"),
            outcome: "ok".into(),
            status: 200,
            request_id: format!("r{i}"),
            detail: String::new(),
        }
    }

    fn chain(writer: &str, n: i64, close: bool) -> Vec<Sealed> {
        let mut c = Chain::new(writer);
        let mut out: Vec<Sealed> = (0..n).map(|i| c.seal(record(i))).collect();
        if close {
            out.push(c.seal(Record {
                action: CLOSE_ACTION.into(),
                ..Default::default()
            }));
        }
        out
    }

    #[test]
    fn an_intact_log_verifies() {
        let mut all = chain("a", 5, true);
        all.extend(chain("b", 3, false));
        all.reverse();
        let r = verify(all);
        assert!(r.ok(), "{r:?}");
        assert_eq!((r.records, r.writers), (9, 2));
        assert_eq!(r.open, vec!["b".to_string()]);
    }

    #[test]
    fn removed_altered_and_repeated_records_are_found() {
        let mut removed = chain("a", 5, true);
        removed.remove(2);
        let r = verify(removed);
        assert_eq!(r.problems, vec!["writer a: records 2..3 are missing"]);

        let mut altered = chain("a", 5, true);
        altered[3].record.principal = "key:someone-else".into();
        let r = verify(altered);
        assert_eq!(
            r.problems,
            vec!["writer a: record 3 was altered (its hash does not match its content)"]
        );

        // Re-hashed after the change: the next record no longer follows it.
        let mut forged = chain("a", 5, true);
        forged[3].record.outcome = "refused".into();
        forged[3].hash = hash_of(&forged[3].prev_hash, "a", 3, &forged[3].record);
        let r = verify(forged);
        assert_eq!(r.problems.len(), 1, "{r:?}");
        assert!(r.problems[0].contains("record 4 does not follow record 3"));

        let mut repeated = chain("a", 3, false);
        repeated.push(repeated[1].clone());
        assert!(
            verify(repeated).problems[0].contains("record 1 appears twice"),
            "duplicate"
        );
    }

    #[test]
    fn a_cut_end_is_seen_when_the_writer_closed() {
        let mut cut = chain("a", 5, true);
        cut.pop();
        let r = verify(cut);
        assert!(r.ok());
        assert_eq!(r.open, vec!["a".to_string()]);
        let mut after = chain("a", 2, true);
        let mut c = Chain::new("a");
        let extra: Vec<_> = (0..4).map(|i| c.seal(record(i))).collect();
        after.push(extra[3].clone());
        assert!(!verify(after).ok());
    }

    #[test]
    fn a_rewound_chain_continues_from_the_last_stored_record() {
        let mut c = Chain::new("w");
        let first = c.seal(record(0));
        let lost = c.seal(record(1));
        c.rewind(&lost);
        let again = c.seal(record(1));
        assert_eq!(again.seq, 1);
        assert!(verify([first, again]).ok());
    }
}
