//! Materialized views' rows: the source table read through the view's definition (lance's
//! scanner does the projection, filter and limit), and a refresh that replaces the view's
//! rows with them in one commit.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{Schema, SchemaRef};
use datafusion_common::DataFusionError;
use datafusion_physical_plan::stream::RecordBatchStreamAdapter;
use futures::StreamExt;
use lance::Dataset;
use lance::dataset::{InsertBuilder, WriteDestination, WriteMode};
use lance::io::RecordBatchStream as _;

use super::write::{commit_error, write_params};
use super::{At, Store};
use crate::error::{ApiError, ApiResult};
use crate::views::definition::Definition;

/// What a refresh did.
pub struct Refreshed {
    pub rows_written: u64,
    pub source_version: u64,
    pub version: u64,
}

fn scanner(ds: &Dataset, def: &Definition) -> ApiResult<lance::dataset::scanner::Scanner> {
    let mut scan = ds.scan();
    if !def.projections.is_empty() {
        let columns: Vec<(&str, &str)> = def
            .projections
            .iter()
            .map(|p| (p.output_column.as_str(), p.expression.as_str()))
            .collect();
        scan.project_with_transform(&columns).map_err(bad_query)?;
    }
    if let Some(f) = &def.filter {
        scan.filter(f).map_err(bad_query)?;
    }
    if let Some(l) = def.limit {
        scan.limit(Some(l.min(i64::MAX as u64) as i64), None)
            .map_err(bad_query)?;
    }
    Ok(scan)
}

/// The source's columns or expressions do not fit the query: the caller's mistake.
fn bad_query(e: lance::Error) -> ApiError {
    let e = ApiError::from(e);
    if e.status.is_server_error() {
        return e;
    }
    ApiError::invalid(format!("materialized view query: {}", e.message))
}

impl Store {
    /// The schema of a view's rows (without its metadata); checks that the definition plans
    /// against the source.
    pub async fn view_schema(&self, source: &str, def: &Definition) -> ApiResult<SchemaRef> {
        let ds = self.read(source, &At::default()).await?;
        let plan = scanner(&ds, def)?.create_plan().await.map_err(bad_query)?;
        Ok(Arc::new(Schema::new(crate::views::view_fields(
            plan.schema().fields(),
        ))))
    }

    /// Replace the view's rows with the source's (at `source_version`, default latest) read
    /// through `def`, in one commit; the view's schema metadata becomes `metadata`, plus
    /// whatever `mark` adds once the source version is known.
    pub async fn refresh_view(
        &self,
        view: &str,
        source: &str,
        source_version: Option<u64>,
        def: &Definition,
        mark: impl Fn(u64) -> HashMap<String, String>,
    ) -> ApiResult<Refreshed> {
        let src = self
            .read(
                source,
                &At {
                    branch: None,
                    version: source_version,
                },
            )
            .await?;
        let source_version = src.version().version;
        let stream = scanner(&src, def)?
            .try_into_stream()
            .await
            .map_err(bad_query)?;
        let current = self.latest(view, None).await?;
        let mut metadata = current.schema().metadata.clone();
        metadata.extend(mark(source_version));
        let schema: SchemaRef = Arc::new(Schema::new_with_metadata(
            crate::views::view_fields(stream.schema().fields()),
            metadata,
        ));
        let counted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (out_schema, counter) = (schema.clone(), counted.clone());
        let batches = stream.map(move |b| {
            let b = b.map_err(|e| DataFusionError::External(Box::new(e)))?;
            counter.fetch_add(b.num_rows() as u64, std::sync::atomic::Ordering::Relaxed);
            // The view's own schema: its metadata, and fields without the source's.
            RecordBatch::try_new(out_schema.clone(), b.columns().to_vec())
                .map_err(|e| DataFusionError::ArrowError(Box::new(e), None))
        });
        let reader: datafusion_physical_plan::SendableRecordBatchStream =
            Box::pin(RecordBatchStreamAdapter::new(schema, batches));
        let _guard = self.write_lock(view, None).await;
        let current = self.latest(view, None).await?;
        let ds = InsertBuilder::new(WriteDestination::Dataset(current))
            .with_params(&write_params(self, WriteMode::Overwrite))
            .execute_stream(reader)
            .await
            .map_err(commit_error)?;
        let ds = Arc::new(ds);
        self.remember(view, None, ds.clone());
        Ok(Refreshed {
            rows_written: counted.load(std::sync::atomic::Ordering::Relaxed),
            source_version,
            version: ds.version().version,
        })
    }
}

impl Store {
    /// The output schema of SQL query `sql`, planned (not run) by DataFusion over the tables
    /// it reads (each a name as written in the query and the table's location, at its latest
    /// version).
    pub async fn query_schema(
        &self,
        sql: &str,
        tables: &[(Vec<String>, String)],
    ) -> ApiResult<SchemaRef> {
        use lance::datafusion::LanceTableProvider;
        use lance::deps::datafusion::prelude::SessionContext;
        let ctx = SessionContext::new();
        for (name, location) in tables {
            let ds = self.latest(location, None).await?;
            crate::sql::add_table(
                &ctx,
                name,
                Arc::new(LanceTableProvider::new(ds, false, false)),
            )?;
        }
        let plan = ctx
            .state()
            .create_logical_plan(sql)
            .await
            .map_err(|e| ApiError::invalid(format!("view query: {e}")))?;
        Ok(Arc::new(plan.schema().as_arrow().clone()))
    }
}
