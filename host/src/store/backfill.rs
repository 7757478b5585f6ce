//! Storage side of backfill jobs: reading a fragment's physical rows at a pinned version,
//! deciding which rows a `where` clause selects, writing a column's new data file for one
//! fragment, and committing such files with lance's DataReplacement. Everything here is
//! positional (physical row offsets), because a replacement file must line up with the
//! fragment it replaces row for row, deleted rows included.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_schema::Schema as ArrowSchema;
use datafusion_physical_expr_common::physical_expr::PhysicalExpr;
use futures::{Stream, StreamExt, TryStreamExt};
use lance::Dataset;
use lance::dataset::CommitBuilder;
use lance::dataset::fragment::{FileFragment, FragReadConfig};
use lance::dataset::transaction::{DataReplacementGroup, Operation, TransactionBuilder};
use lance_core::datatypes::Schema;
use lance_core::utils::deletion::DeletionVector;
use lance_datafusion::planner::Planner;
use lance_namespace::ErrorCode;
use lance_table::format::DataFile;
use serde::{Deserialize, Serialize};

use super::{At, Store};
use crate::error::{ApiError, ApiResult};

/// A column data file written for one fragment but not yet committed. Serialisable so a job
/// can record it durably before committing, and recognise it after a restart.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StagedFile {
    pub fragment_id: u64,
    pub path: String,
    data_file: serde_json::Value,
}

impl StagedFile {
    fn group(&self) -> ApiResult<DataReplacementGroup> {
        let file: DataFile = serde_json::from_value(self.data_file.clone())
            .map_err(|e| ApiError::internal(format!("staged data file record is corrupt: {e}")))?;
        Ok(DataReplacementGroup(self.fragment_id, file))
    }
}

/// One fragment of the pinned version, as a job plans it.
#[derive(Debug, Clone, Copy)]
pub struct SourceFragment {
    pub id: u64,
    pub physical_rows: u64,
}

/// Rows read for a backfill: `batch` holds the projected columns for physical rows
/// `start..start + batch.num_rows()`; `selected[i]` is true when row i is live and matches the
/// job's filter.
pub struct SourceBatch {
    pub start: u64,
    pub batch: RecordBatch,
    pub selected: Vec<bool>,
}

/// The table at the job's read version, with the projection and the compiled row filter.
pub struct BackfillSource {
    ds: Arc<Dataset>,
    projection: Schema,
    filter_sql: String,
    selector: Arc<dyn PhysicalExpr>,
    target: String,
    /// The filter reads each row's last-written version (a refresh's changed rows).
    lineage: bool,
}

impl std::fmt::Debug for BackfillSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackfillSource")
            .field("version", &self.ds.version().version)
            .field("filter", &self.filter_sql)
            .field("target", &self.target)
            .finish()
    }
}

/// The per-row version of lance's row lineage: the version that last wrote the row.
pub const LAST_UPDATED: &str = "_row_last_updated_at_version";

/// `schema` with the lineage column appended, as lance's reader appends it.
fn with_lineage(schema: &ArrowSchema) -> ArrowSchema {
    let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(arrow_schema::Field::new(
        LAST_UPDATED,
        arrow_schema::DataType::UInt64,
        true,
    )));
    ArrowSchema::new_with_metadata(fields, schema.metadata().clone())
}

fn bad_where(sql: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(format!("invalid where clause '{sql}': {e}"))
}

impl Store {
    /// The dataset a backfill reads: `at` (its branch, and its version or the latest). A
    /// version that does not exist is `TableVersionNotFound` (404).
    pub async fn backfill_source(
        &self,
        location: &str,
        at: &At,
        target: &str,
        inputs: &[String],
        filter_sql: &str,
    ) -> ApiResult<BackfillSource> {
        let ds = self.read(location, at).await?;
        let schema = ds.schema();
        // Plan against the whole schema first (and the lineage column a refresh filters on):
        // that names every column the filter reads.
        let arrow_full = with_lineage(&ArrowSchema::from(schema));
        crate::sql_guard::check(filter_sql, "where")?;
        let planner = Planner::new(Arc::new(arrow_full));
        let expr = planner
            .parse_filter(filter_sql)
            .map_err(|e| bad_where(filter_sql, e))?;
        let referenced = Planner::column_names_in_expr(&expr);
        let lineage = referenced.iter().any(|r| r == LAST_UPDATED);
        let mut columns: Vec<String> = Vec::new();
        for f in &schema.fields {
            let used = inputs.iter().any(|i| i == &f.name)
                || f.name == target
                || referenced
                    .iter()
                    .any(|r| r == &f.name || r.starts_with(&format!("{}.", f.name)));
            if used {
                columns.push(f.name.clone());
            }
        }
        let projection = schema.project(&columns).map_err(ApiError::from)?;
        // Then compile against exactly the batches the reader will produce: the projection,
        // then the lineage column if asked for (the reader appends it).
        let mut read = ArrowSchema::from(&projection);
        if lineage {
            read = with_lineage(&read);
        }
        let planner = Planner::new(Arc::new(read));
        let expr = planner
            .parse_filter(filter_sql)
            .and_then(|e| planner.optimize_expr(e))
            .map_err(|e| bad_where(filter_sql, e))?;
        let selector = planner
            .create_physical_expr(&expr)
            .map_err(|e| bad_where(filter_sql, e))?;
        Ok(BackfillSource {
            ds,
            projection,
            filter_sql: filter_sql.to_string(),
            selector,
            target: target.to_string(),
            lineage,
        })
    }

    /// Commit staged column files as one DataReplacement, checked for conflicts against
    /// everything committed since the source's version. Returns the new version.
    pub async fn commit_column_files(
        &self,
        location: &str,
        branch: Option<&str>,
        source: &BackfillSource,
        files: &[StagedFile],
    ) -> ApiResult<u64> {
        let replacements = files
            .iter()
            .map(StagedFile::group)
            .collect::<ApiResult<Vec<_>>>()?;
        let _guard = self.write_lock(location, branch).await;
        // The read version is the job's: lance then refuses the commit if a fragment was
        // rewritten, removed or had rows moved since the values were computed.
        let txn = TransactionBuilder::new(
            source.ds.version().version,
            Operation::DataReplacement { replacements },
        )
        .build();
        let ds = CommitBuilder::new(source.ds.clone())
            .with_session(self.session())
            .execute(txn)
            .await
            .map_err(commit_error)?;
        let version = ds.version().version;
        self.remember(location, branch, Arc::new(ds));
        Ok(version)
    }

    /// Whether a staged file is part of the latest version of the branch (committed before
    /// a crash that left the job's record unaware of it); the latest version if so.
    pub async fn committed_file(
        &self,
        location: &str,
        branch: Option<&str>,
        file: &StagedFile,
    ) -> ApiResult<Option<u64>> {
        let ds = self.latest(location, branch).await?;
        let found = ds
            .fragments()
            .iter()
            .filter(|f| f.id == file.fragment_id)
            .any(|f| f.files.iter().any(|d| d.path == file.path));
        Ok(found.then(|| ds.version().version))
    }
}

/// Lance reports a refused replacement (fragment rewritten, removed or updated concurrently)
/// as a commit conflict; keep those recognisable as 409s for the job runner.
fn commit_error(e: lance_core::Error) -> ApiError {
    use lance_core::Error as E;
    match &e {
        E::CommitConflict { .. }
        | E::RetryableCommitConflict { .. }
        | E::IncompatibleTransaction { .. }
        | E::TooMuchWriteContention { .. } => ApiError::conflict(e.to_string()),
        _ => {
            let msg = e.to_string();
            if msg.contains("not found in existing fragments") {
                ApiError::conflict(msg)
            } else {
                ApiError::from(e)
            }
        }
    }
}

impl BackfillSource {
    pub fn version(&self) -> u64 {
        self.ds.version().version
    }

    pub fn filter_sql(&self) -> &str {
        &self.filter_sql
    }

    /// The fragments of the pinned version in manifest order (the first `limit` if given).
    pub async fn fragments(&self, limit: Option<usize>) -> ApiResult<Vec<SourceFragment>> {
        let mut out = Vec::new();
        for frag in self.ds.get_fragments() {
            if limit.is_some_and(|l| out.len() >= l) {
                break;
            }
            let physical_rows = frag.physical_rows().await.map_err(ApiError::from)? as u64;
            out.push(SourceFragment {
                id: frag.id() as u64,
                physical_rows,
            });
        }
        Ok(out)
    }

    fn fragment(&self, id: u64) -> ApiResult<FileFragment> {
        self.ds.get_fragment(id as usize).ok_or_else(|| {
            ApiError::internal(format!(
                "fragment {id} is missing from version {}",
                self.version()
            ))
        })
    }

    /// Live rows of fragment `id` the filter selects.
    pub async fn count_selected(&self, id: u64) -> ApiResult<u64> {
        let n = self
            .fragment(id)?
            .count_rows(Some(self.filter_sql.clone()))
            .await
            .map_err(|e| bad_where(&self.filter_sql, e))?;
        Ok(n as u64)
    }

    /// Physical rows `range` of fragment `id` in batches of at most `batch_rows`, deleted rows
    /// included (they keep their stored values and are never selected).
    pub async fn read(
        &self,
        id: u64,
        range: Range<u64>,
        batch_rows: u32,
    ) -> ApiResult<impl Stream<Item = ApiResult<SourceBatch>> + Send + use<>> {
        let frag = self.fragment(id)?;
        let deletions: Option<Arc<DeletionVector>> =
            frag.get_deletion_vector().await.map_err(ApiError::from)?;
        let reader = frag
            .open(
                &self.projection,
                FragReadConfig::default()
                    .with_ignore_deletions(true)
                    .with_row_last_updated_at_version(self.lineage),
            )
            .await
            .map_err(ApiError::from)?;
        let stream = reader
            .read_range(range.start as u32..range.end as u32, batch_rows.max(1))
            .await
            .map_err(ApiError::from)?;
        let selector = self.selector.clone();
        let filter_sql = self.filter_sql.clone();
        let mut next = range.start;
        Ok(stream
            .buffered(2)
            .map_err(ApiError::from)
            .map(move |batch| {
                let batch = batch?;
                let start = next;
                next += batch.num_rows() as u64;
                let mask = selector
                    .evaluate(&batch)
                    .and_then(|v| v.into_array(batch.num_rows()))
                    .map_err(|e| bad_where(&filter_sql, e))?;
                let mask = mask
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| bad_where(&filter_sql, "it is not a boolean expression"))?;
                let selected = (0..batch.num_rows())
                    .map(|i| {
                        mask.is_valid(i)
                            && mask.value(i)
                            && !deletions
                                .as_ref()
                                .is_some_and(|d| d.contains((start + i as u64) as u32))
                    })
                    .collect();
                Ok(SourceBatch {
                    start,
                    batch,
                    selected,
                })
            }))
    }

    /// Write the target column's new values for every physical row of fragment `id` as a
    /// data file (not committed).
    pub async fn write_column(
        &self,
        id: u64,
        batches: impl Stream<Item = ApiResult<RecordBatch>> + Send,
    ) -> ApiResult<StagedFile> {
        let frag = self.fragment(id)?;
        let schema = self
            .ds
            .schema()
            .project(&[self.target.as_str()])
            .map_err(ApiError::from)?;
        let lance_err = std::sync::Mutex::new(None::<ApiError>);
        let stream = batches.map(|b| {
            b.map_err(|e| {
                let msg = e.message.clone();
                *lance_err.lock().unwrap() = Some(e);
                lance_core::Error::invalid_input(msg)
            })
        });
        let group = match frag.write_columns(stream, &schema).await {
            Ok(g) => g,
            Err(e) => {
                return Err(lance_err
                    .lock()
                    .unwrap()
                    .take()
                    .unwrap_or_else(|| ApiError::from(e)));
            }
        };
        let DataReplacementGroup(fragment_id, file) = group;
        Ok(StagedFile {
            fragment_id,
            path: file.path.clone(),
            data_file: serde_json::to_value(&file)
                .map_err(|e| ApiError::internal(format!("recording a data file: {e}")))?,
        })
    }

    /// The target column of a source batch (its current values).
    pub fn target_values(&self, batch: &RecordBatch) -> ApiResult<arrow_array::ArrayRef> {
        batch.column_by_name(&self.target).cloned().ok_or_else(|| {
            ApiError::new(
                ErrorCode::Internal,
                format!("column '{}' missing from a read batch", self.target),
            )
        })
    }

    /// The Arrow field of the target column.
    pub fn target_field(&self) -> ApiResult<arrow_schema::Field> {
        let schema = ArrowSchema::from(self.ds.schema());
        schema
            .field_with_name(&self.target)
            .cloned()
            .map_err(|_| ApiError::column_not_found(format!("no column '{}'", self.target)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Int64Array};
    use arrow_schema::{DataType, Field};
    use lance::dataset::WriteMode;

    async fn table(dir: &std::path::Path) -> (Store, String) {
        let store = Store::new(
            Arc::new(lance::session::Session::default()),
            0,
            Default::default(),
        );
        let location = dir.join("t.lance").to_string_lossy().to_string();
        let schema = Arc::new(ArrowSchema::new(vec![Field::new(
            "x",
            DataType::Int64,
            false,
        )]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from((0..10).collect::<Vec<i64>>())) as ArrayRef],
        )
        .unwrap();
        store
            .create_at(&location, vec![batch], schema, WriteMode::Create)
            .await
            .unwrap();
        store
            .add_null_columns(
                &location,
                None,
                vec![Field::new("y", DataType::Int64, true)],
            )
            .await
            .unwrap();
        (store, location)
    }

    async fn stage(source: &BackfillSource) -> StagedFile {
        let read: Vec<SourceBatch> = source
            .read(0, 0..10, 4)
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let mut values = Vec::new();
        for sb in &read {
            let x = sb.batch.column_by_name("x").unwrap();
            let x = x.as_any().downcast_ref::<Int64Array>().unwrap();
            values.extend((0..x.len()).map(|i| sb.selected[i].then(|| x.value(i) * 10)));
        }
        let field = source.target_field().unwrap();
        let batch = RecordBatch::try_new(
            Arc::new(ArrowSchema::new(vec![field])),
            vec![Arc::new(Int64Array::from(values)) as ArrayRef],
        )
        .unwrap();
        source
            .write_column(0, futures::stream::iter([Ok(batch)]))
            .await
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn staged_files_commit_once_and_are_recognised_after_the_fact() {
        let tmp = tempfile::tempdir().unwrap();
        let (store, location) = table(tmp.path()).await;
        let at = At::new(None, None).unwrap();
        let source = store
            .backfill_source(&location, &at, "y", &["x".to_string()], "x >= 5")
            .await
            .unwrap();
        assert_eq!(source.count_selected(0).await.unwrap(), 5);
        let file = stage(&source).await;
        assert_eq!(
            store.committed_file(&location, None, &file).await.unwrap(),
            None
        );
        let version = store
            .commit_column_files(&location, None, &source, std::slice::from_ref(&file))
            .await
            .unwrap();
        assert_eq!(version, source.version() + 1);
        // After a crash the job finds its commit by the file's path...
        assert_eq!(
            store.committed_file(&location, None, &file).await.unwrap(),
            Some(version)
        );
        // ...and committing the same replacement again is refused as a conflict.
        let again = store
            .commit_column_files(&location, None, &source, std::slice::from_ref(&file))
            .await
            .unwrap_err();
        assert_eq!(again.status.as_u16(), 409, "{again}");
        let ds = store.latest(&location, None).await.unwrap();
        assert_eq!(ds.version().version, version);
        let batch = ds.scan().try_into_batch().await.unwrap();
        let y = batch.column_by_name("y").unwrap();
        let y = y.as_any().downcast_ref::<Int64Array>().unwrap();
        let got: Vec<Option<i64>> = (0..10).map(|i| y.is_valid(i).then(|| y.value(i))).collect();
        let want: Vec<Option<i64>> = (0..10).map(|i| (i >= 5).then_some(i * 10)).collect();
        assert_eq!(got, want);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn bad_filters_are_invalid_input() {
        let tmp = tempfile::tempdir().unwrap();
        let (store, location) = table(tmp.path()).await;
        let at = At::new(None, None).unwrap();
        for bad in ["x >>> 1", "nosuch = 1", "x +"] {
            let e = store
                .backfill_source(&location, &at, "y", &["x".to_string()], bad)
                .await
                .unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{bad}: {e}");
        }
    }
}
