//! When a table needs upkeep: thresholds on small fragments, deleted rows, unindexed rows and
//! version age, from the server's flags with a tenant's `[tenants.<name>.upkeep]` overrides.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::jobs::kinds::optimize::{Phase, Thresholds, index_action};
use crate::store::TableHealth;

/// The policy's knobs as flags give them (see `ServeConfig`'s `--upkeep-*`).
#[derive(Debug, Clone, PartialEq)]
pub struct UpkeepPolicy {
    pub enabled: bool,
    /// Compact once this many fragments are below the compaction target.
    pub min_small_fragments: usize,
    /// Fold new rows into indexes once this many are unindexed.
    pub min_unindexed_rows: u64,
    /// A table's old versions are cleaned at most this often.
    pub cleanup_interval: Duration,
    /// A table not written for this long is quiet: its small fragments are merged and its
    /// index segments folded into one, below the thresholds (once; it then stays settled).
    pub quiet_after: Duration,
    pub thresholds: Thresholds,
}

/// `[tenants.<name>.upkeep]` in the auth file: any of the policy's knobs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpkeepOverride {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_small_fragments: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_unindexed_rows: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_rows_per_fragment: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_share: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retrain_share: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_index_segments: Option<usize>,
    /// Versions younger than this are kept, e.g. "2h" (humantime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<String>,
    /// e.g. "10m" (humantime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup_interval: Option<String>,
    /// e.g. "30s" (humantime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_after: Option<String>,
}

impl UpkeepOverride {
    /// Checked when the auth file is loaded, so a typo is reported rather than ignored.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("retention", &self.retention),
            ("cleanup_interval", &self.cleanup_interval),
            ("quiet_after", &self.quiet_after),
        ] {
            if let Some(v) = v {
                humantime::parse_duration(v)
                    .map_err(|e| format!("upkeep.{name} '{v}' is not a duration: {e}"))?;
            }
        }
        for (name, v) in [
            ("deleted_share", self.deleted_share),
            ("retrain_share", self.retrain_share),
        ] {
            if v.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
                return Err(format!("upkeep.{name} must be a number >= 0"));
            }
        }
        Ok(())
    }
}

impl UpkeepPolicy {
    /// This policy with a tenant's overrides applied (invalid durations were refused when the
    /// auth file was loaded; any that slip through leave the server's value).
    pub fn with(&self, o: Option<&UpkeepOverride>) -> UpkeepPolicy {
        let Some(o) = o else {
            return self.clone();
        };
        let dur = |v: &Option<String>| v.as_deref().and_then(|s| humantime::parse_duration(s).ok());
        let mut p = self.clone();
        let t = &mut p.thresholds;
        p.enabled = o.enabled.unwrap_or(p.enabled);
        p.min_small_fragments = o.min_small_fragments.unwrap_or(p.min_small_fragments);
        p.min_unindexed_rows = o.min_unindexed_rows.unwrap_or(p.min_unindexed_rows);
        t.target_rows_per_fragment = o
            .target_rows_per_fragment
            .unwrap_or(t.target_rows_per_fragment);
        t.deleted_share = o.deleted_share.unwrap_or(t.deleted_share);
        t.retrain_share = o.retrain_share.unwrap_or(t.retrain_share);
        t.max_index_segments = o.max_index_segments.unwrap_or(t.max_index_segments);
        if let Some(r) = dur(&o.retention) {
            t.retention_secs = r.as_secs();
        }
        if let Some(c) = dur(&o.cleanup_interval) {
            p.cleanup_interval = c;
        }
        if let Some(q) = dur(&o.quiet_after) {
            p.quiet_after = q;
        }
        p
    }

    /// The phases a table in this health needs now. `cleanup_due` says whether enough time
    /// has passed (and versions been made) since its last cleanup; `quiet` whether the table
    /// has not been written for `quiet_after`.
    pub fn decide(&self, h: &TableHealth, cleanup_due: bool, quiet: bool) -> Vec<Phase> {
        let mut phases = Vec::new();
        let small_bound = if quiet {
            2
        } else {
            self.min_small_fragments.max(2)
        };
        if h.small_fragments >= small_bound || h.fragments_with_many_deletions > 0 {
            phases.push(Phase::Compact);
        }
        let index_due = h.indexes.iter().any(|i| {
            let due = index_action(i, &self.thresholds, false, quiet).is_some();
            due && (i.unindexed_rows >= self.min_unindexed_rows.max(1)
                || i.segments > self.thresholds.max_index_segments
                || (quiet && i.segments > 1))
        });
        // Lance never compacts indexed and unindexed fragments together: fold new rows in
        // first (the index phase runs before compaction), so compaction can merge them all.
        if index_due
            || (phases.contains(&Phase::Compact) && h.indexes.iter().any(|i| i.unindexed_rows > 0))
        {
            phases.insert(0, Phase::Index);
        }
        if cleanup_due {
            phases.push(Phase::Cleanup);
        }
        // LSM tables: flushed generations are merged into the base table first (the index and
        // compaction phases then see the merged rows); a quiet table's memtables are flushed
        // and merged too, so rows do not sit in memory and the WAL once writes stop.
        if h.lsm_generations > 0 || (quiet && h.lsm_memtable_rows > 0) {
            phases.insert(0, Phase::CompactLsm);
        }
        phases
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{IndexAction, IndexHealth};

    fn policy() -> UpkeepPolicy {
        UpkeepPolicy {
            enabled: true,
            min_small_fragments: 8,
            min_unindexed_rows: 100,
            cleanup_interval: Duration::from_secs(60),
            quiet_after: Duration::from_secs(30),
            thresholds: Thresholds {
                target_rows_per_fragment: 1 << 20,
                deleted_share: 0.1,
                retrain_share: 0.5,
                max_index_segments: 4,
                retention_secs: 3600,
            },
        }
    }

    fn index(unindexed: u64, segments: usize) -> IndexHealth {
        IndexHealth {
            name: "i".into(),
            index_type: "BTREE".into(),
            vector: false,
            segments,
            unindexed_rows: unindexed,
            base_rows: 1000,
            delta_rows: 0,
        }
    }

    #[test]
    fn a_healthy_table_needs_nothing() {
        let h = TableHealth {
            fragments: 3,
            small_fragments: 3,
            indexes: vec![index(10, 1)],
            ..Default::default()
        };
        assert!(policy().decide(&h, false, false).is_empty());
    }

    #[test]
    fn thresholds_trigger_their_phases() {
        let p = policy();
        let many_small = TableHealth {
            small_fragments: 8,
            ..Default::default()
        };
        assert_eq!(p.decide(&many_small, false, false), vec![Phase::Compact]);
        let deletions = TableHealth {
            fragments_with_many_deletions: 1,
            indexes: vec![index(5, 1)],
            ..Default::default()
        };
        assert_eq!(p.decide(&deletions, true, false), Phase::ALL.to_vec());
        assert_eq!(
            Phase::ALL[0],
            Phase::Index,
            "indexes are caught up before compaction"
        );
        let lsm = TableHealth {
            lsm_generations: 2,
            ..Default::default()
        };
        assert_eq!(p.decide(&lsm, false, false), vec![Phase::CompactLsm]);
        let resting = TableHealth {
            lsm_memtable_rows: 5,
            ..Default::default()
        };
        assert!(
            p.decide(&resting, false, false).is_empty(),
            "memtables of a busy table stay"
        );
        assert_eq!(p.decide(&resting, false, true), vec![Phase::CompactLsm]);
        let unindexed = TableHealth {
            indexes: vec![index(100, 1)],
            ..Default::default()
        };
        assert_eq!(p.decide(&unindexed, false, false), vec![Phase::Index]);
        let segmented = TableHealth {
            indexes: vec![index(0, 5)],
            ..Default::default()
        };
        assert_eq!(p.decide(&segmented, false, false), vec![Phase::Index]);
    }

    #[test]
    fn vector_indexes_are_retrained_once_their_delta_outgrows_the_training() {
        let t = policy().thresholds;
        let mut v = index(100, 2);
        v.vector = true;
        v.base_rows = 1000;
        v.delta_rows = 300;
        // (300 + 100) / 1000 < 0.5: new rows are appended.
        assert_eq!(
            index_action(&v, &t, false, false),
            Some(IndexAction::Append)
        );
        v.delta_rows = 400;
        assert_eq!(
            index_action(&v, &t, false, false),
            Some(IndexAction::Retrain)
        );
        // Asked for, whatever the delta; a scalar index is never retrained.
        v.delta_rows = 0;
        assert_eq!(
            index_action(&v, &t, true, false),
            Some(IndexAction::Retrain)
        );
        let mut s = index(0, 2);
        s.delta_rows = 5000;
        assert_eq!(index_action(&s, &t, true, false), None);
        assert_eq!(index_action(&s, &t, false, true), Some(IndexAction::Merge));
    }

    #[test]
    fn a_quiet_table_is_settled_below_the_thresholds() {
        let p = policy();
        let h = TableHealth {
            fragments: 3,
            small_fragments: 3,
            indexes: vec![index(0, 2)],
            ..Default::default()
        };
        assert!(p.decide(&h, false, false).is_empty());
        assert_eq!(
            p.decide(&h, false, true),
            vec![Phase::Index, Phase::Compact]
        );
        let settled = TableHealth {
            fragments: 1,
            small_fragments: 1,
            indexes: vec![index(0, 1)],
            ..Default::default()
        };
        assert!(p.decide(&settled, false, true).is_empty());
    }

    #[test]
    fn tenant_overrides_replace_only_what_they_name() {
        let o = UpkeepOverride {
            enabled: Some(false),
            retention: Some("2h".into()),
            ..Default::default()
        };
        assert!(o.validate().is_ok());
        let p = policy().with(Some(&o));
        assert!(!p.enabled);
        assert_eq!(p.thresholds.retention_secs, 7200);
        assert_eq!(p.min_small_fragments, 8);
        let bad = UpkeepOverride {
            retention: Some("soon".into()),
            ..Default::default()
        };
        assert!(bad.validate().is_err());
    }
}
