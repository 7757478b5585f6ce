//! Queries: a [`QuerySpec`] (already validated by the HTTP layer) becomes a lance `Scanner`.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arrow_array::{ArrayRef, FixedSizeListArray, Float32Array, RecordBatch};
use arrow_schema::{DataType, Field, SchemaRef};
use futures::{Stream, StreamExt};
use lance::Dataset;
use lance::dataset::scanner::Scanner;
use lance_index::scalar::FullTextSearchQuery;
use lance_linalg::distance::DistanceType;

use super::{flat_search, fts_take};
use crate::error::{ApiError, ApiResult};

#[derive(Debug, Clone, Default)]
pub struct VectorQuery {
    /// One vector, or several (a multivector query, or a batch of queries).
    pub vectors: Vec<Vec<f32>>,
    pub multi: bool,
    pub column: Option<String>,
    pub distance_type: Option<DistanceType>,
    pub nprobes: Option<usize>,
    pub minimum_nprobes: Option<usize>,
    pub maximum_nprobes: Option<usize>,
    pub ef: Option<usize>,
    pub refine_factor: Option<u32>,
    pub lower_bound: Option<f32>,
    pub upper_bound: Option<f32>,
    pub bypass_vector_index: bool,
    /// lancedb's speed / recall trade-off (lance's `approx_mode`).
    pub approx_mode: Option<lance_index::vector::ApproxMode>,
}

#[derive(Debug, Clone)]
pub enum Projection {
    Names(Vec<String>),
    Aliases(Vec<(String, String)>),
}

#[derive(Debug, Clone, Default)]
pub struct QuerySpec {
    pub vector: Option<VectorQuery>,
    pub fts: Option<FullTextSearchQuery>,
    pub filter: Option<String>,
    pub prefilter: Option<bool>,
    pub k: Option<usize>,
    pub offset: Option<usize>,
    pub projection: Option<Projection>,
    pub with_row_id: bool,
    pub fast_search: bool,
    /// Sort the answer by these columns (lancedb's `order_by`), before `k` and `offset`.
    pub order_by: Option<Vec<lance::dataset::scanner::ColumnOrdering>>,
    /// lancedb's `use_lsm`: read the LSM tiers of a table with an LSM write spec (`None`:
    /// yes when it has one), or its base table only (`false`).
    pub use_lsm: Option<bool>,
}

impl QuerySpec {
    /// The `k` a vector search runs with: the one asked for (default 10) plus `offset` (a page
    /// past the first is the `k + offset` nearest rows less the first `offset`, as lancedb
    /// pages), but no more than the table has rows. A search never answers more, and lance
    /// sizes its buffers by `k`: a client's `k` of 2^53 made it allocate that many slots and
    /// the process abort.
    pub fn vector_k(&self, ds: &Dataset) -> usize {
        self.nearest_k(row_bound(ds))
    }

    /// [`Self::vector_k`] for a source of at most `rows` rows.
    pub fn nearest_k(&self, rows: usize) -> usize {
        self.k
            .unwrap_or(10)
            .saturating_add(self.offset.unwrap_or(0))
            .min(rows)
            .max(1)
    }

    pub fn scanner(&self, ds: &Arc<Dataset>) -> ApiResult<Scanner> {
        let mut scan = ds.scan();
        if let Some(p) = &self.projection {
            match p {
                Projection::Names(names) => {
                    // The scanner supplies `_rowid`, `_rowaddr`, `_rowoffset`... itself (the
                    // lancedb client's take_offsets asks for `_rowoffset`).
                    for n in names.iter().filter(|n| !lance_core::is_system_column(n)) {
                        crate::field_path::resolve(ds.schema(), n)?;
                    }
                    scan.project(names).map_err(ApiError::from)?;
                }
                Projection::Aliases(pairs) => {
                    scan.project_with_transform(pairs).map_err(ApiError::from)?;
                }
            }
        }
        if let Some(f) = &self.filter {
            scan.filter(f).map_err(ApiError::from)?;
        }
        if let Some(p) = self.prefilter {
            scan.prefilter(p);
        }
        if let Some(order) = &self.order_by {
            scan.order_by(Some(order.clone())).map_err(ApiError::from)?;
        }
        if let Some(fts) = &self.fts {
            scan.full_text_search(fts.clone()).map_err(ApiError::from)?;
        }
        if let Some(v) = &self.vector {
            let column = vector_column(ds, v)?;
            let k = self.vector_k(ds);
            scan.nearest(&column, query_array(v)?.as_ref(), k)
                .map_err(ApiError::from)?;
            if let Some(d) = v.distance_type {
                scan.distance_metric(d);
            }
            if let Some(n) = v.nprobes {
                scan.nprobes(n);
            }
            if let Some(n) = v.minimum_nprobes {
                scan.minimum_nprobes(n);
            }
            if let Some(n) = v.maximum_nprobes {
                scan.maximum_nprobes(n);
            }
            if let Some(ef) = v.ef {
                scan.ef(ef);
            }
            if let Some(r) = v.refine_factor {
                // A window wider than the table changes nothing: cut it to the table.
                let widest = (row_bound(ds) / k).max(1).min(u32::MAX as usize) as u32;
                scan.refine(r.min(widest));
            }
            if v.lower_bound.is_some() || v.upper_bound.is_some() {
                scan.distance_range(v.lower_bound, v.upper_bound);
            }
            if v.bypass_vector_index {
                scan.use_index(false);
            }
            if let Some(mode) = v.approx_mode {
                scan.approx_mode(mode);
            }
            if self.offset.is_some() {
                scan.limit(None, self.offset.map(|o| o as i64))
                    .map_err(ApiError::from)?;
            }
        } else if self.k.is_some() || self.offset.is_some() {
            scan.limit(self.k.map(|k| k as i64), self.offset.map(|o| o as i64))
                .map_err(ApiError::from)?;
        }
        if self.fast_search {
            scan.fast_search();
        }
        if self.with_row_id {
            scan.with_row_id();
        }
        Ok(scan)
    }

    /// The answer as a stream of batches. A flat vector search is answered from the store's
    /// vector cache when it can be (see `flat_search`), a top-k full-text search by lance's
    /// search and a take of its rows (see `fts_take`); everything else by lance's scanner.
    /// A search without a filter reads a local table through the store's
    /// [`super::LocalReads`].
    pub async fn stream(&self, ds: &Arc<Dataset>, store: &super::Store) -> ApiResult<QueryStream> {
        let search = self.vector.is_some() || self.fts.is_some();
        let ds = &if search && self.filter.is_none() {
            store.local_reads.for_search(ds).await
        } else {
            ds.clone()
        };
        let vectors = &store.vectors;
        if let Some(batch) = fts_take::search(ds, self).await? {
            return Ok(QueryStream::Ready(batch.schema(), Some(batch)));
        }
        let scan = self.scanner(ds)?;
        if let Some(v) = &self.vector
            && vectors.enabled()
        {
            let column = vector_column(ds, v)?;
            if let Some(batch) = flat_search::search(ds, self, &column, &scan, vectors).await? {
                return Ok(QueryStream::Ready(batch.schema(), Some(batch)));
            }
        }
        let stream = super::plan_run::stream(&scan)
            .await
            .map_err(ApiError::from)?;
        Ok(QueryStream::Plan(stream))
    }
}

/// Batches of a query's answer: a plan's stream (lance's scan, or lance's LSM scanner over an
/// LSM table's tiers), or an answer computed whole.
pub enum QueryStream {
    Plan(datafusion_physical_plan::SendableRecordBatchStream),
    Ready(SchemaRef, Option<RecordBatch>),
}

impl QueryStream {
    pub fn schema(&self) -> SchemaRef {
        match self {
            Self::Plan(s) => s.schema(),
            Self::Ready(schema, _) => schema.clone(),
        }
    }
}

impl Stream for QueryStream {
    type Item = lance::Result<RecordBatch>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.get_mut() {
            Self::Plan(s) => s
                .poll_next_unpin(cx)
                .map(|item| item.map(|r| r.map_err(lance_core::Error::from))),
            Self::Ready(_, batch) => Poll::Ready(batch.take().map(Ok)),
        }
    }
}

/// How many rows the table holds at most: its fragments' physical rows, from the manifest
/// (no IO). A fragment whose count the manifest lacks counts as 2^32 rows.
fn row_bound(ds: &Dataset) -> usize {
    ds.fragments()
        .iter()
        .map(|f| f.physical_rows.unwrap_or(u32::MAX as usize))
        .fold(0usize, usize::saturating_add)
}

/// The column a vector query searches: the one it names, or the table's only vector column.
fn vector_column(ds: &Dataset, v: &VectorQuery) -> ApiResult<String> {
    match &v.column {
        Some(c) => {
            crate::field_path::resolve(ds.schema(), c)?;
            Ok(c.clone())
        }
        None => default_vector_column(ds),
    }
}

fn query_array(v: &VectorQuery) -> ApiResult<ArrayRef> {
    let first = v
        .vectors
        .first()
        .ok_or_else(|| ApiError::invalid("the query vector is empty"))?;
    if first.is_empty() {
        return Err(ApiError::invalid("the query vector is empty"));
    }
    if !v.multi && v.vectors.len() == 1 {
        return Ok(Arc::new(Float32Array::from(first.clone())));
    }
    let dim = first.len();
    if v.vectors.iter().any(|x| x.len() != dim) {
        return Err(ApiError::invalid(
            "all vectors of a multi_vector query must have the same length",
        ));
    }
    let values = Float32Array::from(v.vectors.concat());
    let field = Arc::new(Field::new("item", DataType::Float32, true));
    let list = FixedSizeListArray::try_new(field, dim as i32, Arc::new(values), None)
        .map_err(ApiError::from)?;
    Ok(Arc::new(list))
}

/// With no `vector_column`, the table's only vector column (as lance and lancedb do).
fn default_vector_column(ds: &Dataset) -> ApiResult<String> {
    default_vector_column_of(&arrow_schema::Schema::from(ds.schema()))
}

/// The only vector column of `schema`.
pub fn default_vector_column_of(schema: &arrow_schema::Schema) -> ApiResult<String> {
    let vector_like = |dt: &DataType| match dt {
        DataType::FixedSizeList(f, _) => {
            f.data_type().is_floating() || matches!(f.data_type(), DataType::UInt8 | DataType::Int8)
        }
        DataType::List(f) => matches!(f.data_type(), DataType::FixedSizeList(_, _)),
        _ => false,
    };
    let candidates: Vec<&str> = schema
        .fields()
        .iter()
        .filter(|f| vector_like(f.data_type()))
        .map(|f| f.name().as_str())
        .collect();
    match candidates.as_slice() {
        [one] => Ok(one.to_string()),
        [] => Err(ApiError::invalid(
            "the table has no vector column to search",
        )),
        _ => Err(ApiError::invalid(format!(
            "the table has several vector columns ({}); name one in vector_column",
            candidates.join(", ")
        ))),
    }
}
