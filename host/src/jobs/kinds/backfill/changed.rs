//! A refresh of a declared column (a SQL computed column or a registered Function's output:
//! lancedb's `refresh_column`) computes the rows still null *and* the rows whose inputs may
//! have changed since the last complete refresh.
//!
//! With stable row ids lance keeps the version that last wrote each row
//! (`_row_last_updated_at_version`) through updates, upserts and compaction. A complete
//! refresh records under the table config key `lancet.refreshed_at.<field id>` the version it
//! read and the versions its own commits made; the next one also selects rows written after
//! that read, except by those commits. Lance stamps every row of a fragment a DataReplacement
//! swaps a column file in as written, so the own commits must be set aside, and it refuses such
//! a commit when the fragment was written after the job's read, so every row they stamped was
//! current when computed. A row written for any other reason is recomputed, whether or not an
//! input changed (lance does not track writes per column; a refresh of another column on the
//! same rows counts too): for a pure function that costs time, not correctness.
//! A table gets stable row ids (a metadata-only commit) at its first refresh.

use std::sync::Arc;

use super::spec::{BackfillSpec, Refresh, RefreshMark, default_filter};
use crate::App;
use crate::error::ApiResult;
use crate::store::LAST_UPDATED;
use crate::virtual_columns::declared;

const KEY_PREFIX: &str = "lancet.refreshed_at.";
/// Own commits listed in a mark, at most; a longer list is dropped (its rows are recomputed).
const MAX_OWN: usize = 1_024;

fn config_key(field_id: i32) -> String {
    format!("{KEY_PREFIX}{field_id}")
}

/// The refresh a plain backfill request of `column` amounts to, if the column is declared;
/// gives the table stable row ids first when it has none.
pub(super) async fn refresh_of(
    app: &Arc<App>,
    location: &str,
    branch: Option<&str>,
    column: &str,
) -> ApiResult<Option<Refresh>> {
    let ds = app.store.latest(location, branch).await?;
    let Some(field) = ds.schema().field(column) else {
        return Ok(None); // not a column: the usual checks name the problem
    };
    let field_id = field.id;
    if declared::kind(&arrow_schema::Field::from(field)).is_none() {
        return Ok(None);
    }
    if !app.store.ensure_stable_row_ids(location, branch).await? {
        tracing::warn!(
            column,
            "writes kept the table from getting stable row ids: this refresh fills null rows only"
        );
        return Ok(None);
    }
    let ds = app.store.latest(location, branch).await?;
    let since = ds
        .config()
        .get(&config_key(field_id))
        .and_then(|v| serde_json::from_str::<RefreshMark>(v).ok());
    Ok(Some(Refresh { field_id, since }))
}

/// The filter of a refresh: null rows, and rows written since the last complete refresh.
pub(super) fn filter(column: &str, refresh: &Refresh) -> String {
    let null = default_filter(column);
    let Some(mark) = &refresh.since else {
        return null;
    };
    let written = format!("{LAST_UPDATED} > {}", mark.read);
    if mark.own.is_empty() {
        return format!("{null} OR {written}");
    }
    let own: Vec<String> = mark.own.iter().map(u64::to_string).collect();
    format!(
        "{null} OR ({written} AND {LAST_UPDATED} NOT IN ({}))",
        own.join(", ")
    )
}

/// After a refresh committed every fragment it selected (`own`: the versions its commits
/// made): remember what it read. One that skipped a fragment (written concurrently) records
/// nothing, so the next looks as far back as this one did; so does one that wrote nothing (its
/// mark would select the same rows, for the cost of a commit). Failing to record costs the next
/// refresh more rows, nothing else: logged, not raised.
pub(super) async fn record(
    app: &Arc<App>,
    location: &str,
    spec: &BackfillSpec,
    own: Option<Vec<u64>>,
) {
    let (Some(refresh), Some(mut own)) = (&spec.refresh, own) else {
        return;
    };
    if own.is_empty() && refresh.since.is_some() {
        return; // nothing written: the previous mark still says what is current
    }
    own.sort_unstable();
    own.dedup();
    if own.len() > MAX_OWN {
        own.clear();
    }
    let mark = RefreshMark {
        read: spec.read_version,
        own,
    };
    let value = serde_json::to_string(&mark).expect("a mark serialises");
    let recorded = app
        .store
        .set_config_value(
            location,
            spec.branch.as_deref(),
            config_key(refresh.field_id),
            value,
        )
        .await;
    if let Err(e) = recorded {
        tracing::warn!(error = %e, column = %spec.column, "cannot record the refresh's version");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refresh(since: Option<RefreshMark>) -> Refresh {
        Refresh { field_id: 3, since }
    }

    #[test]
    fn the_filter_adds_rows_written_since_the_last_refresh_but_not_by_it() {
        assert_eq!(filter("y", &refresh(None)), "`y` IS NULL");
        let read_only = RefreshMark {
            read: 4,
            own: vec![],
        };
        assert_eq!(
            filter("y", &refresh(Some(read_only))),
            "`y` IS NULL OR _row_last_updated_at_version > 4"
        );
        let mark = RefreshMark {
            read: 4,
            own: vec![5, 7],
        };
        assert_eq!(
            filter("y", &refresh(Some(mark))),
            "`y` IS NULL OR (_row_last_updated_at_version > 4 AND \
             _row_last_updated_at_version NOT IN (5, 7))"
        );
    }

    #[test]
    fn a_mark_reads_back_and_an_older_one_without_own_commits_too() {
        let mark = RefreshMark {
            read: 9,
            own: vec![10, 11],
        };
        let text = serde_json::to_string(&mark).unwrap();
        assert_eq!(serde_json::from_str::<RefreshMark>(&text).unwrap(), mark);
        let bare: RefreshMark = serde_json::from_str(r#"{"read": 2}"#).unwrap();
        assert_eq!(
            bare,
            RefreshMark {
                read: 2,
                own: vec![]
            }
        );
    }
}
