//! A job's history (`/v1/jobs/query_events`): what happened to it, when, and on which node,
//! kept in its record (the newest [`KEEP`] events) and answered as an Arrow table that a SQL
//! filter can narrow.
//!
//! Event `state`s: `created`; `claim` (a node took the job's lease: on submission, or when it
//! took over a job whose node stopped); per fragment of a backfill, `staged` (its values are
//! written, not yet visible), `claim_complete` (committed; `rows_processed` rows) and
//! `skipped`; `task_complete` (a helper node computed a task of another node's job);
//! `pause_requested`, `paused`, `resumed`, `cancel_requested`; and the end: `done`, `failed`
//! or `cancelled`.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray, TimestampMillisecondArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use serde::{Deserialize, Serialize};

use super::state::JobRecord;
use crate::error::{ApiError, ApiResult};

/// Events a record keeps (the oldest go first).
pub const KEEP: usize = 1000;
/// Rows answered when the request names no limit, and the most it may ask for.
pub const DEFAULT_LIMIT: usize = 1000;
pub const MAX_LIMIT: usize = 10_000;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobEvent {
    pub at_ms: i64,
    pub state: String,
    /// Who caused it: `api` (a client's request) or `runner` (the job's own work).
    pub updated_by: String,
    /// The part of the server that recorded it: `api`, `scheduler` or `runner`.
    pub emitted_from: String,
    /// The node that recorded it.
    pub emitted_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_entity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_processed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl JobEvent {
    /// An event recorded by the job's runner on `node`.
    pub fn runner(state: &str, node: &str) -> Self {
        Self::new(state, "runner", "runner", node)
    }

    /// An event a client's request caused, recorded by `node`.
    pub fn api(state: &str, node: &str) -> Self {
        Self::new(state, "api", "api", node)
    }

    pub fn new(state: &str, updated_by: &str, emitted_from: &str, node: &str) -> Self {
        Self {
            at_ms: chrono::Utc::now().timestamp_millis(),
            state: state.to_string(),
            updated_by: updated_by.to_string(),
            emitted_from: emitted_from.to_string(),
            emitted_by: node.to_string(),
            claim_entity: None,
            rows_processed: None,
            message: None,
        }
    }

    pub fn entity(mut self, entity: impl Into<String>) -> Self {
        self.claim_entity = Some(entity.into());
        self
    }

    pub fn rows(mut self, rows: u64) -> Self {
        self.rows_processed = Some(rows);
        self
    }

    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }
}

impl JobRecord {
    pub fn log(&mut self, event: JobEvent) {
        push(&mut self.events, event);
    }
}

fn push(events: &mut Vec<JobEvent>, event: JobEvent) {
    events.push(event);
    let excess = events.len().saturating_sub(KEEP);
    events.drain(..excess);
}

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("job_id", DataType::Utf8, false),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            false,
        ),
        Field::new("state", DataType::Utf8, false),
        Field::new("updated_by", DataType::Utf8, false),
        Field::new("emitted_from", DataType::Utf8, false),
        Field::new("emitted_by", DataType::Utf8, false),
        Field::new("claim_entity", DataType::Utf8, true),
        Field::new("rows_processed", DataType::UInt64, true),
        Field::new("message", DataType::Utf8, true),
    ]))
}

fn to_batch(job_id: &str, events: &[JobEvent]) -> ApiResult<RecordBatch> {
    let text = |f: fn(&JobEvent) -> Option<&str>| -> ArrayRef {
        Arc::new(events.iter().map(f).collect::<StringArray>())
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![job_id; events.len()])),
        Arc::new(
            TimestampMillisecondArray::from_iter_values(events.iter().map(|e| e.at_ms))
                .with_timezone("UTC"),
        ),
        text(|e| Some(&e.state)),
        text(|e| Some(&e.updated_by)),
        text(|e| Some(&e.emitted_from)),
        text(|e| Some(&e.emitted_by)),
        text(|e| e.claim_entity.as_deref()),
        Arc::new(
            events
                .iter()
                .map(|e| e.rows_processed)
                .collect::<UInt64Array>(),
        ),
        text(|e| e.message.as_deref()),
    ];
    RecordBatch::try_new(schema(), columns).map_err(|e| ApiError::internal(e.to_string()))
}

/// The job's events, oldest first, narrowed by `filter` (SQL over the columns of
/// [`schema`]) and cut to the newest `limit`.
pub fn query(
    job_id: &str,
    events: &[JobEvent],
    filter: Option<&str>,
    limit: Option<usize>,
) -> ApiResult<RecordBatch> {
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::invalid(format!(
            "limit must be between 1 and {MAX_LIMIT}, not {limit}"
        )));
    }
    let mut batch = to_batch(job_id, events)?;
    if let Some(filter) = filter.filter(|f| !f.trim().is_empty()) {
        batch = apply_filter(batch, filter)?;
    }
    let start = batch.num_rows().saturating_sub(limit);
    Ok(batch.slice(start, batch.num_rows() - start))
}

fn apply_filter(batch: RecordBatch, filter: &str) -> ApiResult<RecordBatch> {
    use arrow_array::cast::AsArray;
    use lance_datafusion::planner::Planner;
    let bad = |e: &dyn std::fmt::Display| ApiError::invalid(format!("filter '{filter}': {e}"));
    crate::sql_guard::check(filter, "filter")?;
    let planner = Planner::new(batch.schema());
    let expr = planner.parse_filter(filter).map_err(|e| bad(&e))?;
    let expr = planner.optimize_expr(expr).map_err(|e| bad(&e))?;
    let physical = planner.create_physical_expr(&expr).map_err(|e| bad(&e))?;
    let mask = physical
        .evaluate(&batch)
        .and_then(|v| v.into_array(batch.num_rows()))
        .map_err(|e| bad(&e))?;
    let Some(mask) = mask.as_boolean_opt() else {
        return Err(bad(&"the filter is not a boolean expression"));
    };
    arrow_select::filter::filter_record_batch(&batch, mask).map_err(|e| bad(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(events: Vec<JobEvent>) -> Vec<JobEvent> {
        let mut kept = Vec::new();
        for e in events {
            push(&mut kept, e);
        }
        kept
    }

    #[test]
    fn events_filter_and_limit() {
        let r = log(vec![
            JobEvent::api("created", "n1"),
            JobEvent::runner("claim_complete", "n1")
                .entity("fragment 0")
                .rows(5),
            JobEvent::runner("claim_complete", "n2")
                .entity("fragment 1")
                .rows(7),
            JobEvent::runner("done", "n2"),
        ]);
        let all = query("job-1", &r, None, None).unwrap();
        assert_eq!(all.num_rows(), 4);
        let done = query(
            "job-1",
            &r,
            Some("state = 'claim_complete' AND rows_processed > 5"),
            None,
        )
        .unwrap();
        assert_eq!(done.num_rows(), 1);
        let newest = query("job-1", &r, None, Some(2)).unwrap();
        let states = newest.column_by_name("state").unwrap();
        let states = states.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(states.value(1), "done");
        assert!(query("job-1", &r, Some("no_such_column = 1"), None).is_err());
        assert!(query("job-1", &r, None, Some(0)).is_err());
        assert!(query("job-1", &r, None, Some(MAX_LIMIT + 1)).is_err());
    }

    #[test]
    fn a_record_keeps_the_newest_events() {
        let r = log((0..KEEP + 5)
            .map(|i| JobEvent::runner(&format!("e{i}"), "n"))
            .collect());
        assert_eq!(r.len(), KEEP);
        assert_eq!(r[0].state, "e5");
    }
}
