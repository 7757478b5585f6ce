//! The one contract between the job machinery and the kinds of job. The machinery (records,
//! leases and ownership, events, pause/cancel, progress counters) knows a job only by its
//! `job_type` and its [`JobSpec`]; what a job of a kind does, and how its progress reads, is
//! the kind's own, behind [`JobKind`]. Kinds live under `kinds/`, import the machinery, and
//! are handed to the [`super::JobManager`] when the server starts: the machinery never
//! imports a kind.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::job::Job;
use super::state::JobRecord;
use crate::App;
use crate::error::{ApiError, ApiResult};

/// What one kind of job does.
pub trait JobKind: Send + Sync + 'static {
    /// The `job_type` jobs of this kind are recorded, listed and described with.
    fn job_type(&self) -> &'static str;

    /// Run the job on this node until it ends, is stopped or is lost, then record how it ended
    /// ([`Job::finish`]). Called for a new job and for one resumed from its record (after a
    /// restart, a resume or a takeover), so it carries on from what the record says is done.
    fn run(&self, app: Arc<App>, job: Arc<Job>) -> BoxFuture<'static, ()>;

    /// describe's `progress` for the job (`job` holds this node's live counters, if it runs it).
    fn progress(&self, job: &Job, record: &JobRecord) -> Value;

    /// Another node runs `record`'s job; this node may lend a hand. Nothing by default.
    fn help_elsewhere(&self, _app: &Arc<App>, _record: &JobRecord) {}
}

/// A job's parameters as its kind wrote them, stored in its record and shown by describe.
/// Every kind's spec names its table (`table_id`) and may name a `branch`: that much the
/// machinery reads (a job per table and branch, listing by table); the rest is the kind's,
/// read back with [`JobSpec::typed`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "Value", into = "Value")]
pub struct JobSpec {
    value: Value,
    table_id: Vec<String>,
    branch: Option<String>,
}

impl PartialEq for JobSpec {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl TryFrom<Value> for JobSpec {
    type Error = String;

    fn try_from(value: Value) -> Result<Self, String> {
        #[derive(Deserialize)]
        struct Common {
            table_id: Vec<String>,
            #[serde(default)]
            branch: Option<String>,
        }
        let common = Common::deserialize(&value)
            .map_err(|e| format!("a job spec needs table_id (and maybe branch): {e}"))?;
        Ok(Self {
            value,
            table_id: common.table_id,
            branch: common.branch,
        })
    }
}

impl From<JobSpec> for Value {
    fn from(spec: JobSpec) -> Value {
        spec.value
    }
}

impl JobSpec {
    /// A kind's typed spec, as stored.
    pub fn new(spec: &impl Serialize) -> ApiResult<Self> {
        let value = serde_json::to_value(spec).map_err(|e| ApiError::internal(e.to_string()))?;
        Self::try_from(value).map_err(ApiError::internal)
    }

    /// The kind's typed spec back.
    pub fn typed<T: DeserializeOwned>(&self) -> ApiResult<T> {
        T::deserialize(&self.value)
            .map_err(|e| ApiError::internal(format!("unreadable job spec: {e}")))
    }

    pub fn table_id(&self) -> &[String] {
        &self.table_id
    }

    pub fn branch(&self) -> Option<&str> {
        self.branch.as_deref()
    }

    /// One field of the spec, for conflict checks between jobs of one kind.
    pub fn get(&self, field: &str) -> Option<&Value> {
        self.value.get(field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_spec_round_trips_as_the_kind_wrote_it() {
        let raw = json!({"table_id": ["ns", "t"], "branch": "dev", "column": "c", "n": 3});
        let spec: JobSpec = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(spec.table_id(), ["ns", "t"]);
        assert_eq!(spec.branch(), Some("dev"));
        assert_eq!(spec.get("column"), Some(&json!("c")));
        assert_eq!(serde_json::to_value(&spec).unwrap(), raw);
    }

    #[test]
    fn a_spec_without_a_table_is_refused() {
        let err = serde_json::from_value::<JobSpec>(json!({"column": "c"})).unwrap_err();
        assert!(err.to_string().contains("table_id"), "{err}");
    }
}
