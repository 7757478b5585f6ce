//! Jobs as the spec's transactions (`/v1/transaction/{id}/...`): a status derived from the
//! job's state, and properties a client sets or unsets, kept in the job's record.

use std::collections::BTreeMap;

use lance_namespace::ErrorCode;

use super::manager::JobManager;
use super::state::JobState;
use crate::error::{ApiError, ApiResult};

/// One checked alteration of a job transaction.
pub enum Alteration {
    Cancel,
    Set {
        key: String,
        value: String,
        on_exists: OnConflict,
    },
    Unset {
        key: String,
        on_missing: OnConflict,
    },
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    Overwrite,
    Fail,
    Skip,
}

fn status(state: JobState) -> &'static str {
    match state {
        JobState::InProgress => "Running",
        JobState::Paused => "Queued",
        JobState::Done => "Succeeded",
        JobState::Failed => "Failed",
        JobState::Cancelled => "Canceled",
    }
}

impl JobManager {
    /// A job's transaction status and properties (the client's, plus `job_type` and `table`).
    pub async fn transaction(
        &self,
        tenant: &str,
        job_id: &str,
    ) -> ApiResult<(&'static str, BTreeMap<String, String>)> {
        let r = self.get(tenant, job_id).await?.snapshot();
        let mut properties = r.properties.clone();
        properties.insert("job_type".into(), r.job_type.clone());
        properties.insert("table".into(), r.spec.table_id().join("$"));
        Ok((status(r.state), properties))
    }

    /// Apply every alteration or none: property changes are checked first, then recorded
    /// durably, then the job is cancelled if asked (a finished job cannot be: 409, and then
    /// nothing is changed).
    pub async fn alter(
        &self,
        tenant: &str,
        job_id: &str,
        alterations: Vec<Alteration>,
    ) -> ApiResult<(&'static str, BTreeMap<String, String>)> {
        let job = self.get(tenant, job_id).await?;
        let record = job.snapshot();
        let cancel = alterations.iter().any(|a| matches!(a, Alteration::Cancel));
        if cancel && record.state.is_terminal() {
            return Err(ApiError::new(
                ErrorCode::InvalidTableState,
                format!(
                    "job {job_id} already finished ({}); it cannot be canceled",
                    status(record.state)
                ),
            ));
        }
        let mut properties = record.properties.clone();
        for a in &alterations {
            match a {
                Alteration::Cancel => {}
                Alteration::Set {
                    key,
                    value,
                    on_exists,
                } => match (properties.contains_key(key), on_exists) {
                    (true, OnConflict::Fail) => {
                        return Err(ApiError::conflict(format!(
                            "property '{key}' is already set"
                        )));
                    }
                    (true, OnConflict::Skip) => {}
                    _ => {
                        properties.insert(key.clone(), value.clone());
                    }
                },
                Alteration::Unset { key, on_missing } => {
                    if properties.remove(key).is_none() && *on_missing == OnConflict::Fail {
                        return Err(ApiError::invalid(format!("property '{key}' is not set")));
                    }
                }
            }
        }
        job.update(|r| r.properties = properties.clone()).await?;
        if cancel {
            self.cancel(tenant, job_id).await?;
        }
        self.transaction(tenant, job_id).await
    }
}
