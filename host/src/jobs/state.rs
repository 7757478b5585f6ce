//! Durable job state under `<jobs dir>/<job_id>/`: `job.json` (the record: spec, plan,
//! per-fragment status, outcome) and `ckpt/` (computed values not yet committed, one Arrow IPC
//! file per range of physical rows). Every file is written to a temporary name, fsynced and
//! renamed, so a crash leaves either the old or the new content, never a torn file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_ipc::writer::FileWriter;
use arrow_schema::{Field, Schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::spec::JobSpec;
use crate::error::{ApiError, ApiResult};
use crate::store::StagedFile;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    InProgress,
    Done,
    Failed,
    Cancelled,
}

impl JobState {
    pub fn is_terminal(self) -> bool {
        self != JobState::InProgress
    }

    pub fn parse(s: &str) -> Option<Self> {
        serde_json::from_value(Value::String(s.to_ascii_uppercase())).ok()
    }
}

/// Where a fragment stands in a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum FragmentStatus {
    Pending,
    /// The filter selects none of its rows: nothing to compute or write.
    Unselected,
    /// Its column file is written; recorded before the commit so a restart can tell whether
    /// the commit landed.
    Staged {
        file: StagedFile,
        nulled: u64,
    },
    Committed {
        version: u64,
        nulled: u64,
    },
    /// Left out: lance refused the replacement (the fragment was rewritten, removed or had
    /// rows moved concurrently). Its rows keep their values; a later backfill picks them up.
    Skipped {
        reason: String,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FragmentPlan {
    pub id: u64,
    pub physical_rows: u64,
    pub selected_rows: u64,
    #[serde(flatten)]
    pub status: FragmentStatus,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub task_size: u64,
    pub fragments: Vec<FragmentPlan>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Failure {
    pub phase: String,
    pub message: String,
    pub retryable: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRecord {
    pub job_id: String,
    pub job_type: String,
    pub tenant: String,
    pub location: String,
    pub state: JobState,
    pub creation_ms: i64,
    #[serde(default)]
    pub finish_ms: Option<i64>,
    pub spec: JobSpec,
    #[serde(default)]
    pub plan: Option<Plan>,
    /// Upkeep jobs: the result of each finished phase, by phase name.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub steps: std::collections::BTreeMap<String, Value>,
    #[serde(default)]
    pub commits: u64,
    #[serde(default)]
    pub failure: Option<Failure>,
    #[serde(default)]
    pub result: Option<Value>,
    /// Set by cancel; a job found IN_PROGRESS with this set at start-up is not resumed.
    #[serde(default)]
    pub cancel_requested: bool,
    /// Properties a client set through `/v1/transaction/{id}/alter`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub properties: std::collections::BTreeMap<String, String>,
}

/// Write `bytes` to `path` atomically and durably.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomically_with(path, |f| f.write_all(bytes))
}

/// Write a file atomically and durably, its content written by `fill` (so large content need
/// not sit in memory first).
pub fn write_atomically_with(
    path: &Path,
    fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        uuid::Uuid::new_v4().simple()
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        fill(&mut f)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        // The rename itself must survive a crash too.
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> ApiError {
    ApiError::internal(format!("{what} {}: {e}", path.display()))
}

/// One job's directory.
#[derive(Debug, Clone)]
pub struct JobDir {
    root: PathBuf,
}

impl JobDir {
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    fn record_path(&self) -> PathBuf {
        self.root.join("job.json")
    }

    pub fn checkpoint_dir(&self) -> PathBuf {
        self.root.join("ckpt")
    }

    pub fn save(&self, record: &JobRecord) -> ApiResult<()> {
        let bytes = serde_json::to_vec_pretty(record)
            .map_err(|e| ApiError::internal(format!("encoding job record: {e}")))?;
        let path = self.record_path();
        write_atomically(&path, &bytes).map_err(|e| io_error("writing", &path, e))
    }

    pub fn load(&self) -> ApiResult<JobRecord> {
        let path = self.record_path();
        let bytes = std::fs::read(&path).map_err(|e| io_error("reading", &path, e))?;
        serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::internal(format!("job record {} is corrupt: {e}", path.display()))
        })
    }

    /// Computed values for physical rows `start..end` of a fragment (`values` together have
    /// end-start rows: new values for selected rows, current ones for the others). Each array
    /// is one IPC batch, encoded straight to the file: no concatenated copy, no in-memory file.
    pub fn write_checkpoint(
        &self,
        ckpt: &Checkpoint,
        field: &Field,
        values: Vec<ArrayRef>,
    ) -> ApiResult<()> {
        let schema = Arc::new(Schema::new(vec![field.clone()]));
        let batches = values
            .into_iter()
            .map(|v| RecordBatch::try_new(schema.clone(), vec![v]))
            .collect::<Result<Vec<_>, _>>()
            .map_err(ApiError::from)?;
        let path = self.checkpoint_dir().join(ckpt.file_name());
        write_atomically_with(&path, |f| {
            // Buffered: the IPC writer issues a small write per buffer. `finish` flushes.
            let out = std::io::BufWriter::with_capacity(1 << 20, f);
            let mut w = FileWriter::try_new(out, &schema).map_err(std::io::Error::other)?;
            for b in &batches {
                w.write(b).map_err(std::io::Error::other)?;
            }
            w.finish().map_err(std::io::Error::other)
        })
        .map_err(|e| io_error("writing", &path, e))
    }

    /// A checkpoint's batches, in row order.
    pub fn read_checkpoint(&self, ckpt: &Checkpoint) -> ApiResult<Vec<RecordBatch>> {
        let path = self.checkpoint_dir().join(ckpt.file_name());
        let bytes = std::fs::read(&path).map_err(|e| io_error("reading", &path, e))?;
        // Our own uncompressed files, but a damaged one must not make arrow allocate what a
        // garbled block length says (an abort): checked first. Its blocks lie inside it, so
        // decoding reads at most its size (twice, for slack); Null columns take no bytes, so
        // rows are left to the check's own cap.
        let limits = lancet_ipc::Limits {
            max_decoded_bytes: 2 * bytes.len() as u64,
            max_rows: u64::MAX,
        };
        let (_, batches) = lancet_ipc::read(&bytes, &limits).map_err(|e| {
            ApiError::internal(format!("checkpoint {} is corrupt: {e}", path.display()))
        })?;
        if batches.is_empty() {
            return Err(ApiError::internal(format!(
                "checkpoint {} is empty",
                path.display()
            )));
        }
        Ok(batches)
    }

    /// Every complete checkpoint of the job, sorted by fragment and start row.
    pub fn checkpoints(&self) -> Vec<Checkpoint> {
        let mut out: Vec<Checkpoint> = std::fs::read_dir(self.checkpoint_dir())
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(Checkpoint::parse))
            .collect();
        out.sort_by_key(|c| (c.fragment, c.start));
        out
    }

    pub fn remove_checkpoints(&self, fragment: u64) {
        for c in self
            .checkpoints()
            .into_iter()
            .filter(|c| c.fragment == fragment)
        {
            let _ = std::fs::remove_file(self.checkpoint_dir().join(c.file_name()));
        }
    }

    pub fn remove_all_checkpoints(&self) {
        let _ = std::fs::remove_dir_all(self.checkpoint_dir());
    }

    /// Forget the job: its record and anything left beside it.
    pub fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A checkpoint file's identity; its name carries everything the resume logic needs, so a
/// restart reads no file contents to find its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    pub fragment: u64,
    pub start: u64,
    pub end: u64,
    /// Rows of the range the UDF computed.
    pub selected: u64,
    /// Of those, rows nulled because the UDF failed on them (`on_error: null`).
    pub nulled: u64,
}

impl Checkpoint {
    pub fn file_name(&self) -> String {
        format!(
            "f{}_{}_{}_{}_{}.arrow",
            self.fragment, self.start, self.end, self.selected, self.nulled
        )
    }

    pub fn parse(name: &str) -> Option<Self> {
        let body = name.strip_prefix('f')?.strip_suffix(".arrow")?;
        let parts: Vec<u64> = body
            .split('_')
            .map(|p| p.parse().ok())
            .collect::<Option<_>>()?;
        match parts[..] {
            [fragment, start, end, selected, nulled] if start < end => Some(Self {
                fragment,
                start,
                end,
                selected,
                nulled,
            }),
            _ => None,
        }
    }
}

/// The checkpoints that continue `from` without gaps, up to `until`, and where they end.
pub fn covered(
    ckpts: &[Checkpoint],
    fragment: u64,
    from: u64,
    until: u64,
) -> (Vec<Checkpoint>, u64) {
    let mut pos = from;
    let mut chain = Vec::new();
    while pos < until {
        match ckpts
            .iter()
            .find(|c| c.fragment == fragment && c.start == pos && c.end <= until)
        {
            Some(c) => {
                chain.push(*c);
                pos = c.end;
            }
            None => break,
        }
    }
    (chain, pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, Int64Array};

    #[test]
    fn checkpoint_names_round_trip() {
        let c = Checkpoint {
            fragment: 3,
            start: 100,
            end: 250,
            selected: 140,
            nulled: 2,
        };
        assert_eq!(Checkpoint::parse(&c.file_name()), Some(c));
        assert_eq!(Checkpoint::parse(".f3_1_2_3_4.arrow.tmp-x"), None);
        assert_eq!(Checkpoint::parse("f3_5_5_0_0.arrow"), None);
        assert_eq!(Checkpoint::parse("f3_1_2.arrow"), None);
    }

    #[test]
    fn coverage_stops_at_gaps_and_task_ends() {
        let c = |start, end| Checkpoint {
            fragment: 1,
            start,
            end,
            selected: 0,
            nulled: 0,
        };
        let all = vec![c(0, 10), c(10, 20), c(30, 40)];
        assert_eq!(covered(&all, 1, 0, 100).1, 20);
        assert_eq!(
            covered(&all, 1, 0, 15).1,
            10,
            "a checkpoint past the task end is not used"
        );
        assert_eq!(covered(&all, 1, 30, 40).1, 40);
        assert_eq!(covered(&all, 2, 0, 100).1, 0);
    }

    #[test]
    fn records_and_checkpoints_survive_a_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = JobDir::new(tmp.path().join("job1"));
        let field = Field::new("v", arrow_schema::DataType::Int64, true);
        let ckpt = Checkpoint {
            fragment: 0,
            start: 0,
            end: 3,
            selected: 2,
            nulled: 0,
        };
        dir.write_checkpoint(
            &ckpt,
            &field,
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None])),
                Arc::new(Int64Array::from(vec![Some(3)])),
            ],
        )
        .unwrap();
        assert_eq!(dir.checkpoints(), vec![ckpt]);
        let back = dir.read_checkpoint(&ckpt).unwrap();
        assert_eq!(
            back.iter().map(|b| b.num_rows()).collect::<Vec<_>>(),
            [2, 1]
        );
        assert!(back[0].column(0).is_null(1));
        assert_eq!(
            back[1]
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .value(0),
            3
        );
        dir.remove_checkpoints(0);
        assert!(dir.checkpoints().is_empty());
        // No temporary files are left behind.
        assert_eq!(std::fs::read_dir(dir.checkpoint_dir()).unwrap().count(), 0);
    }
}
