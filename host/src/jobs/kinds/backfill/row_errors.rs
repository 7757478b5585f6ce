//! Per-row UDF failures of backfills (`on_error: null`): which rows were set to null and why,
//! as the lancedb client's `function_errors` reads them (`POST /v1/table/{id}/errors`).
//!
//! Whoever computes a checkpoint (the job's owner or a helper node) writes the failures of
//! its rows beside it, at `_jobs/<id>/errors/f<fragment>_<start>.json`, before the checkpoint
//! itself: a recomputed range writes the same file again, so each row is recorded once. At
//! most [`DETAIL_PER_FILE`] rows per file are recorded one by one; the rest are counted, and
//! reported as the fragment's capped summary. The files live as long as the job's record.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::BACKFILL;
use super::spec::BackfillSpec;
use crate::error::ApiResult;
use crate::jobs::JobManager;
use crate::jobs::state::JobDir;

/// Rows recorded one by one per checkpoint file.
pub const DETAIL_PER_FILE: usize = 100;
/// Records one `errors` answer holds by default, and at most.
pub const DEFAULT_LIMIT: usize = 10_000;
pub const MAX_LIMIT: usize = 100_000;

/// One failed row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RowError {
    /// The row's offset within its fragment.
    pub row_offset: u64,
    pub error_type: String,
    pub error_message: String,
}

/// The failures of one checkpoint's rows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RowErrors {
    pub fragment: u64,
    pub start: u64,
    /// Rows that failed (all of them, recorded or not).
    pub rows_failed: u64,
    /// The first [`DETAIL_PER_FILE`] of them.
    pub rows: Vec<RowError>,
    pub function: String,
    pub function_version: String,
    pub created_at_millis: i64,
}

impl RowErrors {
    /// Count `rows` more failures starting at fragment offsets `offsets`, each with `kind`
    /// and `message`, keeping the first [`DETAIL_PER_FILE`].
    pub fn add(&mut self, offsets: impl Iterator<Item = u64>, kind: &str, message: &str) {
        for row_offset in offsets {
            self.rows_failed += 1;
            if self.rows.len() < DETAIL_PER_FILE {
                self.rows.push(RowError {
                    row_offset,
                    error_type: kind.to_string(),
                    error_message: message.to_string(),
                });
            }
        }
    }
}

/// Where a job's failure files live.
fn errors_dir(dir: &JobDir) -> String {
    format!("{}/errors", dir.prefix())
}

/// A backfill job's failure files, beside its checkpoints.
pub(crate) trait RowErrorFiles {
    async fn write_row_errors(&self, errors: &RowErrors) -> ApiResult<()>;
    async fn row_errors(&self) -> ApiResult<Vec<RowErrors>>;
}

impl RowErrorFiles for JobDir {
    /// Record the failures of the checkpoint starting at `errors.start` (replacing what an
    /// earlier computation of the same rows wrote).
    async fn write_row_errors(&self, errors: &RowErrors) -> ApiResult<()> {
        let key = format!(
            "{}/f{}_{}.json",
            errors_dir(self),
            errors.fragment,
            errors.start
        );
        let bytes = serde_json::to_vec(errors)
            .map_err(|e| crate::error::ApiError::internal(e.to_string()))?;
        self.root().put(&key, bytes).await
    }

    /// Every failure file of the job, by fragment and start row.
    async fn row_errors(&self) -> ApiResult<Vec<RowErrors>> {
        let mut out = Vec::new();
        for key in self.root().list(&errors_dir(self)).await? {
            if let Some(found) = self.root().get(&key).await?
                && let Ok(e) = serde_json::from_slice::<RowErrors>(&found.bytes)
            {
                out.push(e);
            }
        }
        out.sort_by_key(|e| (e.fragment, e.start));
        Ok(out)
    }
}

/// What `errors` asks for.
pub struct ErrorsQuery<'a> {
    pub location: &'a str,
    pub branch: Option<&'a str>,
    pub job_id: Option<&'a str>,
    pub column: Option<&'a str>,
    pub limit: usize,
}

/// The recorded row failures of the tenant's backfills of one table, newest job first
/// (the lancedb client's `FunctionErrors`).
pub async fn list(manager: &JobManager, tenant: &str, q: ErrorsQuery<'_>) -> ApiResult<Value> {
    let mut jobs = Vec::new();
    for id in manager.job_ids().await? {
        if q.job_id.is_some_and(|want| want != id) {
            continue;
        }
        let Ok(Some(job)) = manager.view(&id).await else {
            continue;
        };
        let r = job.snapshot();
        if r.job_type == BACKFILL
            && let Ok(s) = r.spec.typed::<BackfillSpec>()
            && r.tenant == tenant
            && r.location == q.location
            && s.branch.as_deref() == q.branch
            && q.column.is_none_or(|c| s.column == c)
        {
            jobs.push((r.job_id.clone(), s.column.clone(), s.read_version));
        }
    }
    // Ids start with the creation time: the newest sort last.
    jobs.sort();
    jobs.reverse();
    let (mut records, mut fragments, mut truncated) = (Vec::new(), Vec::new(), false);
    'jobs: for (job_id, column, table_version) in jobs {
        let mut capped: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
        // A range recomputed after a crash (with other checkpoint bounds) may have written
        // a row's failure twice: each row is reported once.
        let mut seen = std::collections::HashSet::new();
        for mut file in manager.dir(&job_id).row_errors().await? {
            file.rows
                .retain(|r| seen.insert((file.fragment, r.row_offset)));
            if file.rows_failed > file.rows.len() as u64 {
                let c = capped.entry(file.fragment).or_default();
                c.0 += file.rows_failed;
                c.1 += file.rows.len() as u64;
            }
            for row in &file.rows {
                if records.len() >= q.limit {
                    truncated = true;
                    break 'jobs;
                }
                records.push(json!({
                    "job_id": job_id,
                    "fragment_id": file.fragment,
                    "row_offset": row.row_offset,
                    "column": column,
                    "function": file.function,
                    "function_version": file.function_version,
                    "table_version": table_version,
                    "error_type": row.error_type,
                    "error_message": row.error_message,
                    "created_at_millis": file.created_at_millis,
                }));
            }
        }
        for (fragment, (skipped, recorded)) in capped {
            fragments.push(json!({
                "job_id": job_id,
                "fragment_id": fragment,
                "rows_skipped": skipped,
                "rows_recorded": recorded,
            }));
        }
    }
    Ok(json!({ "records": records, "fragments": fragments, "truncated": truncated }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_past_the_detail_cap_are_counted_not_recorded() {
        let mut e = RowErrors::default();
        e.add(0..60, "trap", "boom");
        e.add(100..160, "guest_error", "bad input");
        assert_eq!(e.rows_failed, 120);
        assert_eq!(e.rows.len(), DETAIL_PER_FILE);
        assert_eq!(e.rows[59].row_offset, 59);
        assert_eq!(e.rows[60].row_offset, 100);
        assert_eq!(e.rows[99].error_type, "guest_error");
    }
}
