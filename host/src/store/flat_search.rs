//! Exact nearest-neighbour search over vectors held in the [`VectorCache`], for queries lance
//! would answer with a flat (brute-force) scan: the column has no vector index, or the query
//! bypasses it.
//!
//! The answer is the one lance gives: distances come from the same lance kernel
//! (`DistanceType::arrow_batch_func`), rows are ordered by (distance, row id) with null
//! distances dropped, `lower_bound` is inclusive and `upper_bound` exclusive, and the output
//! schema is taken from lance's own plan for the query. Only the reading of the vectors differs.
//! Anything this path does not cover (filters, full-text, offsets, multivectors, other element
//! types, `fast_search`) goes to lance's scanner unchanged.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Float32Array, RecordBatch, UInt64Array};
use arrow_schema::{DataType, SchemaRef};
use lance::Dataset;
use lance::dataset::ProjectionRequest;
use lance::dataset::scanner::Scanner;
use lance::index::DatasetIndexExt;
use lance_core::ROW_ID;
use lance_index::vector::DIST_COL;
use lance_linalg::distance::DistanceType;

use super::query::{Projection, QuerySpec};
use super::vector_cache::{FragmentVectors, VectorCache};
use crate::error::{ApiError, ApiResult};

/// What a query asks of a flat search this module can answer.
struct Flat {
    column: String,
    query: Float32Array,
    distance: DistanceType,
    k: usize,
    lower: Option<f32>,
    upper: Option<f32>,
}

/// The answer to `spec` computed over cached vectors, or None when the query is not a plain
/// flat search (the caller then runs lance's scanner). `scanner` is lance's scanner for the
/// same query, already validated; it supplies the output schema.
pub async fn search(
    ds: &Arc<Dataset>,
    spec: &QuerySpec,
    column: &str,
    scanner: &Scanner,
    cache: &VectorCache,
) -> ApiResult<Option<RecordBatch>> {
    let Some(flat) = eligible(ds, spec, column).await? else {
        return Ok(None);
    };
    let schema = scanner.schema().await.map_err(ApiError::from)?;
    let mut fragments = Vec::new();
    for fragment in ds.get_fragments() {
        fragments.push(cache.get(ds, fragment.metadata(), &flat.column).await?);
    }
    let hits = tokio::task::spawn_blocking(move || nearest(&flat, &fragments))
        .await
        .map_err(|e| ApiError::internal(format!("flat search task: {e}")))??;
    let row_ids: Vec<u64> = hits.iter().map(|h| h.row_id).collect();
    let projection = match &spec.projection {
        None => ProjectionRequest::from(Arc::new(ds.schema().clone())),
        Some(Projection::Names(names)) => ProjectionRequest::from_columns(names, ds.schema()),
        Some(Projection::Aliases(pairs)) => ProjectionRequest::Sql(pairs.clone()),
    };
    let rows = ds
        .take_builder(&row_ids, projection)
        .map_err(ApiError::from)?
        .execute()
        .await
        .map_err(ApiError::from)?;
    let distances: ArrayRef = Arc::new(Float32Array::from_iter_values(
        hits.iter().map(|h| h.distance),
    ));
    let row_ids: ArrayRef = Arc::new(UInt64Array::from(row_ids));
    Ok(assemble(&schema, &rows, distances, row_ids))
}

/// The query as a flat search, if it is one this module answers exactly as lance would.
async fn eligible(ds: &Dataset, spec: &QuerySpec, column: &str) -> ApiResult<Option<Flat>> {
    let Some(v) = &spec.vector else {
        return Ok(None);
    };
    if v.multi
        || v.vectors.len() != 1
        || spec.fts.is_some()
        || spec.filter.is_some()
        || spec.offset.is_some()
        || spec.order_by.is_some()
        || v.approx_mode.is_some()
        || spec.fast_search
    {
        return Ok(None);
    }
    // Top-level columns only: a nested path is left to lance.
    let Some(field) = ds.schema().fields.iter().find(|f| f.name == column) else {
        return Ok(None);
    };
    let query = &v.vectors[0];
    match field.data_type() {
        DataType::FixedSizeList(item, dim)
            if item.data_type() == &DataType::Float32 && dim as usize == query.len() => {}
        _ => return Ok(None),
    }
    let distance = v.distance_type.unwrap_or(DistanceType::L2);
    if distance == DistanceType::Hamming {
        return Ok(None);
    }
    if !v.bypass_vector_index {
        let indices = ds.load_indices().await.map_err(ApiError::from)?;
        if indices.iter().any(|i| i.fields.contains(&field.id)) {
            return Ok(None);
        }
    }
    Ok(Some(Flat {
        column: column.to_string(),
        query: Float32Array::from(query.clone()),
        distance,
        k: spec.vector_k(ds),
        lower: v.lower_bound,
        upper: v.upper_bound,
    }))
}

#[derive(Debug, Clone, Copy)]
struct Hit {
    distance: f32,
    row_id: u64,
}

// Lance's order: distance ascending (IEEE total order, as arrow sorts floats), then row id.
impl Ord for Hit {
    fn cmp(&self, other: &Self) -> Ordering {
        self.distance
            .total_cmp(&other.distance)
            .then(self.row_id.cmp(&other.row_id))
    }
}
impl PartialOrd for Hit {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Hit {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Hit {}

/// The `k` best rows over every fragment, best first.
fn nearest(flat: &Flat, fragments: &[Arc<FragmentVectors>]) -> ApiResult<Vec<Hit>> {
    let kernel = flat.distance.arrow_batch_func();
    // A max-heap of the best k so far: its top is the worst kept hit.
    let mut best = BinaryHeap::with_capacity(flat.k + 1);
    for fragment in fragments {
        let distances = kernel(&flat.query, &fragment.vectors).map_err(ApiError::from)?;
        let row_ids = fragment.row_ids.values();
        for (i, distance) in distances.values().iter().copied().enumerate() {
            if distances.is_null(i)
                || flat.lower.is_some_and(|l| distance < l)
                || flat.upper.is_some_and(|u| distance >= u)
            {
                continue;
            }
            let hit = Hit {
                distance,
                row_id: row_ids[i],
            };
            if best.len() < flat.k {
                best.push(hit);
            } else if best.peek().is_some_and(|worst| hit < *worst) {
                best.pop();
                best.push(hit);
            }
        }
    }
    Ok(best.into_sorted_vec())
}

/// The answer in the columns (and order) of lance's plan; None if the plan has a column this
/// path cannot fill, in which case the caller asks lance.
fn assemble(
    schema: &SchemaRef,
    rows: &RecordBatch,
    distances: ArrayRef,
    row_ids: ArrayRef,
) -> Option<RecordBatch> {
    let columns = schema
        .fields()
        .iter()
        .map(|f| {
            let column = match f.name().as_str() {
                DIST_COL => distances.clone(),
                ROW_ID => row_ids.clone(),
                name => rows.column_by_name(name)?.clone(),
            };
            (column.data_type() == f.data_type()).then_some(column)
        })
        .collect::<Option<Vec<_>>>()?;
    RecordBatch::try_new(schema.clone(), columns).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::VectorQuery;
    use arrow_array::{FixedSizeListArray, Int64Array, StringArray};
    use arrow_schema::{Field, Schema};
    use futures::TryStreamExt;
    use lance::dataset::{WriteMode, WriteParams};

    const DIM: i32 = 8;

    fn batch(start: i64, n: usize) -> RecordBatch {
        // Deterministic pseudo-random values; every 7th vector is null.
        let mut x = start as u64 * 7919 + 17;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 1000) as f32 / 100.0 - 5.0
        };
        let values = Float32Array::from_iter_values((0..n * DIM as usize).map(|_| next()));
        let nulls = arrow_buffer::NullBuffer::from(
            (0..n)
                .map(|i| (start as usize + i) % 7 != 3)
                .collect::<Vec<_>>(),
        );
        let item = Arc::new(Field::new("item", DataType::Float32, true));
        let vectors = FixedSizeListArray::try_new(item, DIM, Arc::new(values), Some(nulls));
        let ids = Int64Array::from_iter_values(start..start + n as i64);
        let texts = StringArray::from_iter_values((0..n).map(|i| format!("t{}", start + i as i64)));
        RecordBatch::try_new(
            schema(),
            vec![Arc::new(ids), Arc::new(texts), Arc::new(vectors.unwrap())],
        )
        .unwrap()
    }

    fn schema() -> SchemaRef {
        let item = Arc::new(Field::new("item", DataType::Float32, true));
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("text", DataType::Utf8, true),
            Field::new("vec", DataType::FixedSizeList(item, DIM), true),
        ]))
    }

    async fn write(uri: &str, b: RecordBatch, mode: WriteMode) -> Dataset {
        let reader = arrow_array::RecordBatchIterator::new([Ok(b)], schema());
        let params = WriteParams {
            mode,
            max_rows_per_file: 300,
            ..Default::default()
        };
        Dataset::write(reader, uri, Some(params)).await.unwrap()
    }

    fn query(v: VectorQuery, k: usize, projection: Option<Projection>, row_id: bool) -> QuerySpec {
        QuerySpec {
            vector: Some(v),
            k: Some(k),
            projection,
            with_row_id: row_id,
            ..Default::default()
        }
    }

    fn vq(distance: Option<DistanceType>, bounds: (Option<f32>, Option<f32>)) -> VectorQuery {
        VectorQuery {
            vectors: vec![vec![0.5, -1.0, 2.0, 0.0, 1.5, -2.5, 0.25, 3.0]],
            distance_type: distance,
            lower_bound: bounds.0,
            upper_bound: bounds.1,
            ..Default::default()
        }
    }

    /// The cached answer must equal lance's own, column for column.
    async fn same_as_lance(ds: &Arc<Dataset>, spec: &QuerySpec, cache: &VectorCache) -> usize {
        let scanner = spec.scanner(ds).unwrap();
        let ours = search(ds, spec, "vec", &scanner, cache)
            .await
            .unwrap()
            .expect("a flat search");
        let theirs: Vec<RecordBatch> = scanner
            .try_into_stream()
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let theirs = arrow_select::concat::concat_batches(&ours.schema(), &theirs).unwrap();
        assert_eq!(ours, theirs, "query {spec:?}");
        ours.num_rows()
    }

    #[tokio::test]
    async fn answers_exactly_as_lance_does() {
        let dir = tempfile::tempdir().unwrap();
        let uri = dir.path().join("t.lance").to_string_lossy().to_string();
        write(&uri, batch(0, 1000), WriteMode::Create).await;
        let mut ds = write(&uri, batch(1000, 500), WriteMode::Append).await;
        ds.delete("id % 5 = 1").await.unwrap();
        let ds = Arc::new(ds);
        assert!(
            ds.get_fragments().len() > 2,
            "several fragments, some with deletions"
        );
        let cache = VectorCache::new(64 << 20);
        let names = Projection::Names(vec!["text".into(), "id".into()]);
        let aliases = Projection::Aliases(vec![("double".into(), "id * 2".into())]);
        for distance in [None, Some(DistanceType::Cosine), Some(DistanceType::Dot)] {
            for (projection, row_id) in [
                (None, false),
                (Some(names.clone()), true),
                (Some(aliases.clone()), false),
            ] {
                let spec = query(vq(distance, (None, None)), 10, projection, row_id);
                assert_eq!(same_as_lance(&ds, &spec, &cache).await, 10);
            }
        }
        // Bounds, and a k larger than the table (null vectors are never returned).
        let spec = query(vq(None, (Some(40.0), Some(42.0))), 20, None, true);
        let n = same_as_lance(&ds, &spec, &cache).await;
        assert!(n > 0 && n < 20, "{n}");
        let spec = query(vq(None, (None, None)), 5000, None, true);
        let live = ds.count_rows(Some("vec is not null".into())).await.unwrap();
        assert_eq!(same_as_lance(&ds, &spec, &cache).await, live);
        assert!(cache.used() > 0);
    }

    #[tokio::test]
    async fn sees_every_write_and_leaves_other_queries_to_lance() {
        let dir = tempfile::tempdir().unwrap();
        let uri = dir.path().join("t.lance").to_string_lossy().to_string();
        let ds = Arc::new(write(&uri, batch(0, 600), WriteMode::Create).await);
        let cache = VectorCache::new(64 << 20);
        let spec = query(vq(None, (None, None)), 600, None, true);
        same_as_lance(&ds, &spec, &cache).await;
        // Deleting and appending make new fragment metadata: no stale entry is read.
        let mut newer = (*ds).clone();
        newer.delete("id < 100").await.unwrap();
        let newer = Arc::new(write(&uri, batch(600, 50), WriteMode::Append).await);
        let n = same_as_lance(&newer, &spec, &cache).await;
        assert_eq!(
            n,
            newer
                .count_rows(Some("vec is not null".into()))
                .await
                .unwrap()
        );
        // The old version is still answered as it was.
        same_as_lance(&ds, &spec, &cache).await;

        let ineligible = [
            QuerySpec {
                filter: Some("id > 3".into()),
                ..spec.clone()
            },
            QuerySpec {
                offset: Some(2),
                ..spec.clone()
            },
            QuerySpec {
                fast_search: true,
                ..spec.clone()
            },
            query(
                vq(Some(DistanceType::Hamming), (None, None)),
                3,
                None,
                false,
            ),
        ];
        for spec in ineligible {
            assert!(
                eligible(&newer, &spec, "vec").await.unwrap().is_none(),
                "{spec:?}"
            );
        }
    }
}
