//! Row-level writes: insert, merge_insert, update, delete. Each takes the (table, branch) write
//! lock, writes through lance, and caches the committed dataset.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use lance::Dataset;
use lance::dataset::write::merge_insert::{
    MergeInsertBuilder, WhenMatched, WhenNotMatched, WhenNotMatchedBySource,
};
use lance::dataset::{InsertBuilder, UpdateBuilder, WriteDestination, WriteMode, WriteParams};

use super::Store;
use crate::error::{ApiError, ApiResult};

/// A transform applied to incoming rows before they are written (virtual columns computed
/// by `auto_backfill` UDFs). The store knows nothing of what it does.
pub type RowHook<'a> = &'a RowTransform<'a>;

/// A transform of rows being written to `Dataset` (its current state). It is called on an
/// async worker: one that blocks (a UDF) moves itself off it (`block_in_place`).
pub type RowTransform<'a> =
    dyn Fn(&Dataset, Vec<RecordBatch>) -> ApiResult<Vec<RecordBatch>> + Sync + Send + 'a;

#[derive(Debug, Default, Clone)]
pub struct MergeOptions {
    pub on: Vec<String>,
    pub when_matched_update_all: bool,
    pub when_matched_update_all_filt: Option<String>,
    pub when_not_matched_insert_all: bool,
    pub when_not_matched_by_source_delete: bool,
    pub when_not_matched_by_source_delete_filt: Option<String>,
    pub timeout: Option<Duration>,
    pub use_index: Option<bool>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct MergeCounts {
    pub updated: u64,
    pub inserted: u64,
    pub deleted: u64,
    pub version: u64,
}

pub(super) fn write_params(store: &Store, mode: WriteMode) -> WriteParams {
    WriteParams {
        mode,
        session: Some(store.session()),
        store_params: Some(store.store_params()),
        ..Default::default()
    }
}

pub(super) fn require_rows(batches: &[RecordBatch]) -> ApiResult<()> {
    if batches.is_empty() {
        return Err(ApiError::invalid(
            "the Arrow stream carries no record batch",
        ));
    }
    Ok(())
}

impl Store {
    /// The rows an insert into `current` writes (after `hook`) and its write parameters.
    pub(super) fn prepare_insert(
        &self,
        current: &Dataset,
        batches: Vec<RecordBatch>,
        overwrite: bool,
        hook: Option<RowHook<'_>>,
    ) -> ApiResult<(Vec<RecordBatch>, WriteParams)> {
        let batches = match hook {
            Some(h) => h(current, batches)?,
            None => batches,
        };
        let mode = if overwrite {
            WriteMode::Overwrite
        } else {
            WriteMode::Append
        };
        Ok((batches, write_params(self, mode)))
    }

    /// Create a table at `location` (which must not hold one yet) from `batches`.
    pub async fn create_at(
        &self,
        location: &str,
        batches: Vec<RecordBatch>,
        schema: arrow_schema::SchemaRef,
        mode: WriteMode,
    ) -> ApiResult<Arc<Dataset>> {
        let _guard = self.write_lock(location, None).await;
        let params = write_params(self, mode);
        let batches = if batches.is_empty() {
            vec![RecordBatch::new_empty(schema)]
        } else {
            batches
        };
        let ds = InsertBuilder::new(WriteDestination::Uri(location))
            .with_params(&params)
            .execute(batches)
            .await
            .map_err(commit_error)?;
        let ds = Arc::new(ds);
        self.forget(location);
        self.remember(location, None, ds.clone());
        Ok(ds)
    }

    pub async fn insert(
        &self,
        location: &str,
        branch: Option<&str>,
        batches: Vec<RecordBatch>,
        overwrite: bool,
        hook: Option<RowHook<'_>>,
    ) -> ApiResult<Arc<Dataset>> {
        let _guard = self.write_lock(location, branch).await;
        let current = self.latest(location, branch).await?;
        let (batches, params) = self.prepare_insert(&current, batches, overwrite, hook)?;
        let ds = InsertBuilder::new(WriteDestination::Dataset(current))
            .with_params(&params)
            .execute(batches)
            .await
            .map_err(commit_error)?;
        let ds = Arc::new(ds);
        self.remember(location, branch, ds.clone());
        Ok(ds)
    }

    pub async fn merge_insert(
        &self,
        location: &str,
        branch: Option<&str>,
        batches: Vec<RecordBatch>,
        opts: &MergeOptions,
        hook: Option<RowHook<'_>>,
    ) -> ApiResult<MergeCounts> {
        require_rows(&batches)?;
        let _guard = self.write_lock(location, branch).await;
        let current = self.latest(location, branch).await?;
        let batches = match hook {
            Some(h) => h(&current, batches)?,
            None => batches,
        };
        for key in &opts.on {
            if batches[0].schema().field_with_name(key).is_err() {
                return Err(ApiError::column_not_found(format!(
                    "merge key '{key}' is not a column of the source data"
                )));
            }
        }
        let mut builder = MergeInsertBuilder::try_new(current.clone(), opts.on.clone())
            .map_err(ApiError::from)?;
        if let Some(filt) = &opts.when_matched_update_all_filt {
            crate::sql_guard::check(filt, "when_matched_update_all_filt")?;
            builder.when_matched(
                WhenMatched::update_if(&current, filt)
                    .map_err(bad_filter("when_matched_update_all_filt"))?,
            );
        } else if opts.when_matched_update_all {
            builder.when_matched(WhenMatched::UpdateAll);
        }
        builder.when_not_matched(if opts.when_not_matched_insert_all {
            WhenNotMatched::InsertAll
        } else {
            WhenNotMatched::DoNothing
        });
        if let Some(filt) = &opts.when_not_matched_by_source_delete_filt {
            crate::sql_guard::check(filt, "when_not_matched_by_source_delete_filt")?;
            builder.when_not_matched_by_source(
                WhenNotMatchedBySource::delete_if(&current, filt)
                    .map_err(bad_filter("when_not_matched_by_source_delete_filt"))?,
            );
        } else if opts.when_not_matched_by_source_delete {
            builder.when_not_matched_by_source(WhenNotMatchedBySource::Delete);
        }
        if let Some(t) = opts.timeout {
            builder.retry_timeout(t);
        }
        if let Some(u) = opts.use_index {
            builder.use_index(u);
        }
        let job = builder.try_build().map_err(ApiError::from)?;
        let run = job.execute_batches(batches);
        let (ds, stats) = match opts.timeout {
            Some(t) => tokio::time::timeout(t, run).await.map_err(|_| {
                ApiError::new(
                    lance_namespace::ErrorCode::ServiceUnavailable,
                    format!(
                        "merge_insert did not finish within {}",
                        humantime::format_duration(t)
                    ),
                )
            })?,
            None => run.await,
        }
        .map_err(commit_error)?;
        self.remember(location, branch, ds.clone());
        Ok(MergeCounts {
            updated: stats.num_updated_rows,
            inserted: stats.num_inserted_rows,
            deleted: stats.num_deleted_rows,
            version: ds.version().version,
        })
    }

    pub async fn update(
        &self,
        location: &str,
        branch: Option<&str>,
        updates: &[(String, String)],
        predicate: Option<&str>,
    ) -> ApiResult<(u64, u64)> {
        if updates.is_empty() {
            return Err(ApiError::invalid(
                "updates must name at least one [column, expression] pair",
            ));
        }
        for (col, expr) in updates {
            crate::sql_guard::check(expr, &format!("updates[{col}]"))?;
        }
        if let Some(p) = predicate {
            crate::sql_guard::check(p, "predicate")?;
        }
        let _guard = self.write_lock(location, branch).await;
        let current = self.latest(location, branch).await?;
        let mut builder = UpdateBuilder::new(current);
        for (col, expr) in updates {
            builder = builder.set(col, expr).map_err(ApiError::from)?;
        }
        if let Some(p) = predicate.filter(|p| !p.trim().is_empty()) {
            builder = builder.update_where(p).map_err(ApiError::from)?;
        }
        let result = builder
            .build()
            .map_err(ApiError::from)?
            .execute()
            .await
            .map_err(commit_error)?;
        let version = result.new_dataset.version().version;
        self.remember(location, branch, result.new_dataset);
        Ok((result.rows_updated, version))
    }

    pub async fn delete(
        &self,
        location: &str,
        branch: Option<&str>,
        predicate: &str,
    ) -> ApiResult<(u64, u64)> {
        if predicate.trim().is_empty() {
            return Err(ApiError::invalid(
                "predicate must not be empty (use 'true' to delete every row)",
            ));
        }
        crate::sql_guard::check(predicate, "predicate")?;
        let _guard = self.write_lock(location, branch).await;
        let mut ds = (*self.latest(location, branch).await?).clone();
        let result = ds.delete(predicate).await.map_err(commit_error)?;
        let version = result.new_dataset.version().version;
        self.remember(location, branch, result.new_dataset);
        Ok((version, result.num_deleted_rows))
    }
}

fn bad_filter(field: &'static str) -> impl Fn(lance_core::Error) -> ApiError {
    move |e| {
        let api = ApiError::from(e);
        if api.status.is_client_error() {
            api
        } else {
            ApiError::invalid(format!("invalid {field}: {}", api.message))
        }
    }
}

/// A write's error. A write that started from a version a cleanup has since removed (the
/// retention window was shorter than the write took) finds that version's manifest missing
/// when lance checks its commit against newer ones: nothing was written, and a retry starts
/// from the latest version, so it is a 409 to retry, not a 404.
pub(super) fn commit_error(err: lance_core::Error) -> ApiError {
    let api = ApiError::from(err);
    let not_found = matches!(
        api.code,
        lance_namespace::ErrorCode::TableNotFound
            | lance_namespace::ErrorCode::TableVersionNotFound
    );
    if not_found && api.message.contains("_versions/") {
        return ApiError::conflict(format!(
            "the version this write started from was removed by a version cleanup while it \
             ran (nothing was written; retry): {}",
            api.message
        ));
    }
    api
}
