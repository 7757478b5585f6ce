//! The options of `backfill_column` (VIRTUAL-COLUMNS.md), checked and given their defaults
//! before a job exists, so a job never starts with options it cannot honour.

use serde::{Deserialize, Serialize};

use crate::error::{ApiError, ApiResult};

/// Options as a request sends them (every one optional).
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct BackfillOptions {
    pub column: String,
    #[serde(rename = "where")]
    pub filter: Option<String>,
    pub read_version: Option<i64>,
    pub concurrency: Option<i64>,
    pub intra_applier_concurrency: Option<i64>,
    pub task_size: Option<i64>,
    pub num_frags: Option<i64>,
    pub checkpoint_size: Option<i64>,
    pub min_checkpoint_size: Option<i64>,
    pub max_checkpoint_size: Option<i64>,
    pub batch_checkpoint_flush_interval_seconds: Option<f64>,
    pub commit_granularity: Option<i64>,
    pub cluster: Option<String>,
    pub manifest: Option<String>,
}

/// Checked options with defaults applied; stored with the job and shown by describe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackfillSpec {
    pub table_id: Vec<String>,
    pub branch: Option<String>,
    pub column: String,
    /// The effective filter (the default one spelled out when none was given).
    #[serde(rename = "where")]
    pub filter: String,
    /// Resolved to the latest version when the request named none.
    pub read_version: u64,
    pub concurrency: usize,
    pub intra_applier_concurrency: usize,
    /// None: derived from fragment sizes and workers when the job is planned.
    pub task_size: Option<u64>,
    pub num_frags: Option<usize>,
    pub checkpoint_size: usize,
    pub min_checkpoint_size: usize,
    pub max_checkpoint_size: usize,
    pub batch_checkpoint_flush_interval_seconds: f64,
    pub commit_granularity: usize,
    pub cluster: String,
    pub manifest: Option<String>,
    /// Set for a refresh of a declared column (see `changed`): the filter also selects rows
    /// written since the last complete refresh, and finishing records this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh: Option<Refresh>,
    /// The table version whose definition of the column the job computes with: the latest
    /// when it was submitted (a UDF altered after `read_version` is the one asked for); the
    /// inputs are still read at `read_version`. None in jobs recorded before it existed:
    /// `read_version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition_version: Option<u64>,
    /// The catalog id of the Geneva job table this job's state is mirrored into (`geneva`),
    /// when the caller's database has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geneva_jobs: Option<Vec<String>>,
}

/// A declared column's refresh: which field it records its read under, and what the previous
/// complete refresh recorded (None: there was none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refresh {
    pub field_id: i32,
    pub since: Option<RefreshMark>,
}

/// What a complete refresh leaves behind: the version it read, and the versions its own
/// commits made (lance stamps every row of a replaced fragment as written by the commit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefreshMark {
    pub read: u64,
    #[serde(default)]
    pub own: Vec<u64>,
}

pub const DEFAULT_MIN_CHECKPOINT: usize = 64;
pub const DEFAULT_MAX_CHECKPOINT: usize = 16_384;
pub const DEFAULT_CHECKPOINT: usize = 1_024;
pub const DEFAULT_FLUSH_SECONDS: f64 = 10.0;
pub const DEFAULT_COMMIT_GRANULARITY: usize = 8;
pub const DEFAULT_INTRA_APPLIER: usize = 1;
/// Upper bound on workers and UDF instances per worker: each holds a Wasm instance slot.
pub const MAX_PARALLELISM: i64 = 64;

fn positive(name: &str, v: Option<i64>, max: Option<i64>) -> ApiResult<Option<usize>> {
    match v {
        None => Ok(None),
        Some(n) if n <= 0 => Err(ApiError::invalid(format!(
            "{name} must be a positive integer, got {n}"
        ))),
        Some(n) if max.is_some_and(|m| n > m) => Err(ApiError::invalid(format!(
            "{name} must be at most {}, got {n}",
            max.unwrap_or_default()
        ))),
        Some(n) => Ok(Some(n as usize)),
    }
}

/// The filter used when a request gives none: rows whose value is still null.
pub fn default_filter(column: &str) -> String {
    format!("`{}` IS NULL", column.replace('`', "``"))
}

fn default_concurrency() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(8)
}

impl BackfillOptions {
    /// True when the request leaves the rows to the server: no `where`, no `read_version`.
    pub fn is_plain_refresh(&self) -> bool {
        self.filter.as_deref().is_none_or(|f| f.trim().is_empty()) && self.read_version.is_none()
    }

    /// Check every option that needs no table; `read_version` is resolved by the caller
    /// (`latest` is used when the request names none).
    pub fn check(
        &self,
        table_id: Vec<String>,
        branch: Option<String>,
        latest: u64,
    ) -> ApiResult<BackfillSpec> {
        if self.column.trim().is_empty() {
            return Err(ApiError::invalid("column must name the column to backfill"));
        }
        let concurrency = positive("concurrency", self.concurrency, Some(MAX_PARALLELISM))?
            .unwrap_or_else(default_concurrency);
        let intra = positive(
            "intra_applier_concurrency",
            self.intra_applier_concurrency,
            Some(MAX_PARALLELISM),
        )?
        .unwrap_or(DEFAULT_INTRA_APPLIER);
        let task_size = positive("task_size", self.task_size, None)?.map(|n| n as u64);
        let num_frags = positive("num_frags", self.num_frags, None)?;
        let commit_granularity = positive("commit_granularity", self.commit_granularity, None)?
            .unwrap_or(DEFAULT_COMMIT_GRANULARITY);
        let rows_per_call = Some(u32::MAX as i64);
        let given = positive("checkpoint_size", self.checkpoint_size, rows_per_call)?;
        let min = positive(
            "min_checkpoint_size",
            self.min_checkpoint_size,
            rows_per_call,
        )?;
        let max = positive(
            "max_checkpoint_size",
            self.max_checkpoint_size,
            rows_per_call,
        )?;
        // Unset bounds widen to admit what was given, so e.g. checkpoint_size alone works.
        let min = min.unwrap_or(DEFAULT_MIN_CHECKPOINT.min(given.unwrap_or(usize::MAX)));
        let max = max.unwrap_or(DEFAULT_MAX_CHECKPOINT.max(given.unwrap_or(0)).max(min));
        if min > max {
            return Err(ApiError::invalid(format!(
                "min_checkpoint_size ({min}) exceeds max_checkpoint_size ({max})"
            )));
        }
        let checkpoint_size = match given {
            Some(c) if c < min || c > max => {
                return Err(ApiError::invalid(format!(
                    "checkpoint_size ({c}) must lie between min_checkpoint_size ({min}) and max_checkpoint_size ({max})"
                )));
            }
            Some(c) => c,
            None => DEFAULT_CHECKPOINT.clamp(min, max),
        };
        let flush = match self.batch_checkpoint_flush_interval_seconds {
            None => DEFAULT_FLUSH_SECONDS,
            Some(s) if !s.is_finite() || s < 0.0 => {
                return Err(ApiError::invalid(format!(
                    "batch_checkpoint_flush_interval_seconds must be >= 0, got {s}"
                )));
            }
            Some(s) => s,
        };
        // Whether the cluster exists, and the tenant may use it, is the server's to say
        // (`super::submit`): its clusters are configured, not fixed.
        let cluster = match self.cluster.as_deref().map(str::trim) {
            None | Some("") => "default".to_string(),
            Some(c) => c.to_string(),
        };
        let read_version = match self.read_version {
            None => latest,
            Some(v) if v < 0 => {
                return Err(ApiError::invalid(format!(
                    "read_version must be >= 0, got {v}"
                )));
            }
            Some(v) => v as u64,
        };
        let filter = match self.filter.as_deref().map(str::trim) {
            Some(f) if !f.is_empty() => f.to_string(),
            _ => default_filter(&self.column),
        };
        Ok(BackfillSpec {
            table_id,
            branch,
            column: self.column.clone(),
            filter,
            read_version,
            concurrency,
            intra_applier_concurrency: intra,
            task_size,
            num_frags,
            checkpoint_size,
            min_checkpoint_size: min,
            max_checkpoint_size: max,
            batch_checkpoint_flush_interval_seconds: flush,
            commit_granularity,
            cluster,
            manifest: self.manifest.clone().filter(|m| !m.trim().is_empty()),
            refresh: None,
            definition_version: Some(latest),
            geneva_jobs: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(column: &str) -> BackfillOptions {
        BackfillOptions {
            column: column.into(),
            ..Default::default()
        }
    }

    fn check(o: BackfillOptions) -> ApiResult<BackfillSpec> {
        o.check(vec!["t".into()], None, 7)
    }

    #[test]
    fn defaults_are_filled_in() {
        let s = check(opts("slug")).unwrap();
        assert_eq!(s.filter, "`slug` IS NULL");
        assert_eq!(s.read_version, 7);
        assert_eq!(s.checkpoint_size, DEFAULT_CHECKPOINT);
        assert_eq!(s.min_checkpoint_size, DEFAULT_MIN_CHECKPOINT);
        assert_eq!(s.max_checkpoint_size, DEFAULT_MAX_CHECKPOINT);
        assert_eq!(s.cluster, "default");
        assert_eq!(s.commit_granularity, DEFAULT_COMMIT_GRANULARITY);
        assert!(s.concurrency >= 1);
        assert_eq!(default_filter("we`ird"), "`we``ird` IS NULL");
    }

    #[test]
    fn sizes_must_be_positive() {
        for bad in [
            BackfillOptions {
                concurrency: Some(0),
                ..opts("c")
            },
            BackfillOptions {
                task_size: Some(-1),
                ..opts("c")
            },
            BackfillOptions {
                checkpoint_size: Some(0),
                ..opts("c")
            },
            BackfillOptions {
                commit_granularity: Some(-5),
                ..opts("c")
            },
            BackfillOptions {
                num_frags: Some(0),
                ..opts("c")
            },
            BackfillOptions {
                max_checkpoint_size: Some(-2),
                ..opts("c")
            },
            BackfillOptions {
                batch_checkpoint_flush_interval_seconds: Some(-0.5),
                ..opts("c")
            },
            BackfillOptions {
                read_version: Some(-1),
                ..opts("c")
            },
        ] {
            let e = check(bad).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{e}");
        }
        assert!(check(opts("")).is_err());
    }

    #[test]
    fn checkpoint_bounds_are_consistent() {
        let e = check(BackfillOptions {
            min_checkpoint_size: Some(100),
            max_checkpoint_size: Some(10),
            ..opts("c")
        })
        .unwrap_err();
        assert!(e.message.contains("exceeds"), "{e}");
        let e = check(BackfillOptions {
            checkpoint_size: Some(5),
            min_checkpoint_size: Some(10),
            ..opts("c")
        })
        .unwrap_err();
        assert!(e.message.contains("between"), "{e}");
        // A lone checkpoint_size widens the default bounds around it.
        let s = check(BackfillOptions {
            checkpoint_size: Some(100_000),
            ..opts("c")
        })
        .unwrap();
        assert_eq!(s.max_checkpoint_size, 100_000);
        let s = check(BackfillOptions {
            checkpoint_size: Some(8),
            ..opts("c")
        })
        .unwrap();
        assert_eq!(s.min_checkpoint_size, 8);
        // A small max pulls the default size down.
        let s = check(BackfillOptions {
            max_checkpoint_size: Some(100),
            ..opts("c")
        })
        .unwrap();
        assert_eq!(s.checkpoint_size, 100);
    }

    #[test]
    fn fractional_flush_interval_and_clusters() {
        let s = check(BackfillOptions {
            batch_checkpoint_flush_interval_seconds: Some(0.25),
            ..opts("c")
        })
        .unwrap();
        assert_eq!(s.batch_checkpoint_flush_interval_seconds, 0.25);
        let s = check(BackfillOptions {
            cluster: Some(" gpu ".into()),
            ..opts("c")
        })
        .unwrap();
        assert_eq!(s.cluster, "gpu");
        let s = check(BackfillOptions {
            filter: Some(" true ".into()),
            ..opts("c")
        });
        assert_eq!(s.unwrap().filter, "true");
    }
}
