//! Durable job state under `<data root>/_jobs/<job_id>/`: `job.json` (the record: spec, plan,
//! per-fragment status, owner, outcome), `ckpt/` (computed values not yet committed, one Arrow
//! IPC object per range of physical rows) and `lease` (which node runs the job). Objects are
//! written whole (a local root writes a temporary file and renames it), so a crash leaves the
//! old or the new content, never a torn one; like lance's own commits they are not fsynced.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_ipc::writer::FileWriter;
use arrow_schema::{Field, Schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::kind::JobSpec;
use crate::error::{ApiError, ApiResult};
use crate::root::{RootStore, Version};
use crate::store::StagedFile;

/// Where job records live under the data root.
pub const JOBS: &str = "_jobs";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    InProgress,
    /// Stopped on request where it stood, its progress kept; `jobs/resume` continues it.
    Paused,
    Done,
    Failed,
    Cancelled,
}

impl JobState {
    pub fn is_terminal(self) -> bool {
        !matches!(self, JobState::InProgress | JobState::Paused)
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
    /// Set by pause, cleared by resume: the running node stops the job where it stands and
    /// records it PAUSED.
    #[serde(default)]
    pub pause_requested: bool,
    /// What happened to the job (`events`), newest last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<super::events::JobEvent>,
    /// The node running the job and the generation of its lease: a node that lost the lease
    /// (it stalled past the TTL and another took over) finds a newer generation here and
    /// stops instead of writing over the new owner's progress.
    #[serde(default)]
    pub owner: Option<String>,
    #[serde(default)]
    pub owner_generation: u64,
    /// Properties a client set through `/v1/transaction/{id}/alter`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub properties: std::collections::BTreeMap<String, String>,
}

/// One job's objects under the data root: `_jobs/<job_id>/job.json`, `ckpt/*`, `lease`.
#[derive(Clone)]
pub struct JobDir {
    root: Arc<RootStore>,
    prefix: String,
}

fn encode(record: &JobRecord) -> ApiResult<Vec<u8>> {
    serde_json::to_vec_pretty(record)
        .map_err(|e| ApiError::internal(format!("encoding job record: {e}")))
}

impl JobDir {
    pub fn new(root: Arc<RootStore>, job_id: &str) -> Self {
        Self {
            root,
            prefix: format!("{JOBS}/{job_id}"),
        }
    }

    /// Where the job's objects are, under the root.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn root(&self) -> &RootStore {
        &self.root
    }

    fn record_key(&self) -> String {
        format!("{}/job.json", self.prefix)
    }

    pub fn lease_key(&self) -> String {
        format!("{}/lease", self.prefix)
    }

    /// The claim of the task of `fragment` ending at row `end` (see `helper`).
    pub fn task_key(&self, fragment: u64, end: u64) -> String {
        format!("{}/tasks/{fragment}-{end}", self.prefix)
    }

    fn checkpoint_key(&self, ckpt: &Checkpoint) -> String {
        format!("{}/ckpt/{}", self.prefix, ckpt.file_name())
    }

    /// Record a new job; false when a record with its id exists already.
    pub async fn create(&self, record: &JobRecord) -> ApiResult<bool> {
        Ok(self
            .root
            .create(&self.record_key(), encode(record)?)
            .await?
            .is_some())
    }

    pub async fn load(&self) -> ApiResult<JobRecord> {
        Ok(self.load_versioned().await?.0)
    }

    pub async fn load_versioned(&self) -> ApiResult<(JobRecord, Version)> {
        let key = self.record_key();
        let found = self
            .root
            .get(&key)
            .await?
            .ok_or_else(|| ApiError::internal(format!("job record {key} is missing")))?;
        let record = serde_json::from_slice(&found.bytes)
            .map_err(|e| ApiError::internal(format!("job record {key} is corrupt: {e}")))?;
        Ok((record, found.version))
    }

    /// Write the record only if nobody changed it since `expected`; false when someone did.
    pub async fn replace(&self, record: &JobRecord, expected: &Version) -> ApiResult<bool> {
        Ok(self
            .root
            .replace(&self.record_key(), encode(record)?, expected)
            .await?
            .is_some())
    }

    /// Computed values for physical rows `start..end` of a fragment (`values` together have
    /// end-start rows: new values for selected rows, current ones for the others). Each array
    /// is one IPC batch.
    pub async fn write_checkpoint(
        &self,
        ckpt: &Checkpoint,
        field: &Field,
        values: Vec<ArrayRef>,
    ) -> ApiResult<()> {
        let schema = Arc::new(Schema::new(vec![field.clone()]));
        let bytes = tokio::task::spawn_blocking(move || -> ApiResult<Vec<u8>> {
            let mut w = FileWriter::try_new(Vec::new(), &schema).map_err(ApiError::from)?;
            for v in values {
                let batch =
                    RecordBatch::try_new(schema.clone(), vec![v]).map_err(ApiError::from)?;
                w.write(&batch).map_err(ApiError::from)?;
            }
            w.finish().map_err(ApiError::from)?;
            w.into_inner().map_err(ApiError::from)
        })
        .await
        .map_err(|e| ApiError::internal(format!("encoding a checkpoint: {e}")))??;
        self.root.put(&self.checkpoint_key(ckpt), bytes).await
    }

    /// A checkpoint's batches, in row order.
    pub async fn read_checkpoint(&self, ckpt: &Checkpoint) -> ApiResult<Vec<RecordBatch>> {
        let key = self.checkpoint_key(ckpt);
        let bytes = self
            .root
            .get(&key)
            .await?
            .ok_or_else(|| ApiError::internal(format!("checkpoint {key} is missing")))?
            .bytes;
        tokio::task::spawn_blocking(move || {
            // Our own uncompressed files, but a damaged one must not make arrow allocate what
            // a garbled block length says (an abort): checked first. Its blocks lie inside it,
            // so decoding reads at most its size (twice, for slack); Null columns take no
            // bytes, so rows are left to the check's own cap.
            let limits = lancet_ipc::Limits {
                max_decoded_bytes: 2 * bytes.len() as u64,
                max_rows: u64::MAX,
            };
            let (_, batches) = lancet_ipc::read(&bytes, &limits)
                .map_err(|e| ApiError::internal(format!("checkpoint {key} is corrupt: {e}")))?;
            if batches.is_empty() {
                return Err(ApiError::internal(format!("checkpoint {key} is empty")));
            }
            Ok(batches)
        })
        .await
        .map_err(|e| ApiError::internal(format!("decoding a checkpoint: {e}")))?
    }

    /// Every complete checkpoint of the job, sorted by fragment and start row.
    pub async fn checkpoints(&self) -> ApiResult<Vec<Checkpoint>> {
        let dir = format!("{}/ckpt", self.prefix);
        let mut out: Vec<Checkpoint> = self
            .root
            .list(&dir)
            .await?
            .iter()
            .filter_map(|k| k.rsplit('/').next().and_then(Checkpoint::parse))
            .collect();
        out.sort_by_key(|c| (c.fragment, c.start));
        Ok(out)
    }

    pub async fn remove_checkpoints(&self, fragment: u64) -> ApiResult<()> {
        for c in self.checkpoints().await? {
            if c.fragment == fragment {
                self.root.delete(&self.checkpoint_key(&c)).await?;
            }
        }
        Ok(())
    }

    /// Remove every checkpoint, and the task claims (`helper`) that went with them.
    pub async fn remove_all_checkpoints(&self) -> ApiResult<()> {
        self.root
            .delete_all(&format!("{}/ckpt", self.prefix))
            .await?;
        self.root
            .delete_all(&format!("{}/tasks", self.prefix))
            .await
    }

    /// Forget the job: its record and anything left beside it.
    pub async fn remove(&self) -> ApiResult<()> {
        self.root.delete_all(&self.prefix).await
    }
}

/// A checkpoint's identity; its name carries everything the resume logic needs, so a
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

    #[tokio::test]
    async fn records_and_checkpoints_survive_a_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let session = lance::session::Session::default();
        let root = RootStore::open(tmp.path().to_str().unwrap(), &Default::default(), &session)
            .await
            .unwrap();
        let dir = JobDir::new(Arc::new(root), "job1");
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
        .await
        .unwrap();
        assert_eq!(dir.checkpoints().await.unwrap(), vec![ckpt]);
        let back = dir.read_checkpoint(&ckpt).await.unwrap();
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
        dir.remove_checkpoints(0).await.unwrap();
        assert!(dir.checkpoints().await.unwrap().is_empty());
        // No temporary files are left behind.
        let left = std::fs::read_dir(tmp.path().join("_jobs/job1/ckpt"))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(left, 0);
    }
}
