//! Full-text searches answered in two steps: lance's search for the best rows' ids and
//! scores, then the columns asked for of those rows ([`super::row_read`], or
//! [`Dataset::take_builder`] where it cannot).
//!
//! With columns to return, lance's plan for a top-k full-text search reads them through a
//! filtered read that sets up every fragment of the table, although only k rows are wanted;
//! taking the k rows by id skips that. Measured in one process on the 100,000-row bench table,
//! top 10, `id` only (CPU µs per search, lance's plan / these two steps): 427 / 365 and
//! 607 / 496 on 40 fragments, 540 / 474 compacted. The search itself is lance's, unchanged
//! (tokenising, BM25, deletions, unindexed fragments, `fast_search`): only the reading of the
//! answer's columns differs, so the rows, their order and their scores are lance's. Anything
//! else (a filter, an offset, no `k`, computed columns, nested paths, blob columns, vector
//! search) goes to lance's scanner unchanged.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{Field, Schema};
use futures::TryStreamExt;
use lance::Dataset;
use lance_core::ROW_ID;
use lance_index::scalar::inverted::SCORE_COL;

use super::query::{Projection, QuerySpec};
use crate::error::{ApiError, ApiResult};

/// The answer to `spec`, or None when it is not a search this module answers (the caller
/// then runs lance's scanner).
pub async fn search(ds: &Arc<Dataset>, spec: &QuerySpec) -> ApiResult<Option<RecordBatch>> {
    let Some(columns) = eligible(ds, spec) else {
        return Ok(None);
    };
    // Step 1: lance's search, answering only row ids and scores.
    let ids_only = QuerySpec {
        projection: Some(Projection::Names(vec![])),
        with_row_id: true,
        ..spec.clone()
    };
    let stream = super::plan_run::stream(&ids_only.scanner(ds)?)
        .await
        .map_err(ApiError::from)?;
    let hits_schema = stream.schema();
    let hits: Vec<RecordBatch> = stream
        .try_collect()
        .await
        .map_err(|e| ApiError::from(lance::Error::from(e)))?;
    let hits = arrow_select::concat::concat_batches(&hits_schema, &hits)?;
    let (Some(row_ids), Some(scores)) =
        (hits.column_by_name(ROW_ID), hits.column_by_name(SCORE_COL))
    else {
        return Ok(None);
    };
    let Some(ids) = row_ids.as_primitive_opt::<UInt64Type>() else {
        return Ok(None);
    };
    // Step 2: the asked columns of those rows, in the hits' order.
    let projection = ds.schema().project(&columns).map_err(ApiError::from)?;
    let rows = match super::row_read::read(ds, ids.values(), &projection).await? {
        Some(rows) => rows,
        None => ds
            .take_builder(ids.values(), projection)
            .map_err(ApiError::from)?
            .execute()
            .await
            .map_err(ApiError::from)?,
    };
    let mut fields: Vec<Arc<Field>> = Vec::with_capacity(columns.len() + 2);
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(columns.len() + 2);
    for name in &columns {
        let rows_schema = rows.schema();
        let (Some(column), Ok(field)) =
            (rows.column_by_name(name), rows_schema.field_with_name(name))
        else {
            return Ok(None);
        };
        fields.push(Arc::new(field.clone()));
        arrays.push(column.clone());
    }
    // Lance's plan answers the score after the columns, then the row id when asked for.
    fields.push(Arc::new(hits_schema.field_with_name(SCORE_COL)?.clone()));
    arrays.push(scores.clone());
    if spec.with_row_id {
        fields.push(Arc::new(hits_schema.field_with_name(ROW_ID)?.clone()));
        arrays.push(row_ids.clone());
    }
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?;
    Ok(Some(batch))
}

/// The largest `k` answered here: the take answers one batch, held whole, where lance's plan
/// streams a large answer batch by batch.
const MAX_K: usize = 10_000;

/// The top-level columns the answer holds, if `spec` is a plain top-k full-text search.
fn eligible(ds: &Dataset, spec: &QuerySpec) -> Option<Vec<String>> {
    if spec.fts.is_none()
        || spec.vector.is_some()
        || spec.filter.is_some()
        || spec.offset.is_some_and(|o| o > 0)
        || spec.order_by.is_some()
        || spec.k.is_none_or(|k| k > MAX_K)
    {
        return None;
    }
    let schema = ds.schema();
    let names: Vec<String> = match &spec.projection {
        None => schema.fields.iter().map(|f| f.name.clone()).collect(),
        Some(Projection::Names(names)) => names.clone(),
        Some(Projection::Aliases(_)) => return None,
    };
    // The answer's own columns (`_score`, `_rowid`, ...) are not the table's.
    let plain = |name: &String| {
        !lance_core::is_system_column(name)
            && name != SCORE_COL
            && names.iter().filter(|n| *n == name).count() == 1
            && schema
                .fields
                .iter()
                .find(|f| &f.name == name)
                .is_some_and(|f| !f.is_blob())
    };
    (!names.is_empty() && names.iter().all(plain)).then_some(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::DataType;
    use lance::dataset::{WriteMode, WriteParams};
    use lance::index::DatasetIndexExt;
    use lance::io::RecordBatchStream as _;
    use lance_index::IndexType;
    use lance_index::scalar::{FullTextSearchQuery, InvertedIndexParams};

    const WORDS: [&str; 6] = ["amber", "birch", "cedar", "delta", "ember", "fjord"];

    fn schema() -> Arc<Schema> {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("text", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
        ]))
    }

    /// Rows whose text repeats common words (many rows score alike), every 60th row (from 7)
    /// the rare word "zircon" as many times as its place among them (each scores apart); every
    /// 9th text is null.
    fn batch(start: i64, n: usize) -> RecordBatch {
        let ids = Int64Array::from_iter_values(start..start + n as i64);
        let texts = StringArray::from_iter((start..start + n as i64).map(|i| {
            let i = i as usize;
            if i % 60 == 7 {
                return Some(format!("{} item {i}", "zircon ".repeat(i / 60 + 1)));
            }
            (i % 9 != 4).then(|| {
                let w = |k: usize| WORDS[(i * 7 + k * 13) % WORDS.len()];
                format!("{} {} {} {} item {i}", w(0), w(1), w(0), w(2))
            })
        }));
        let ns =
            Int64Array::from_iter((start..start + n as i64).map(|i| (i % 5 != 0).then_some(i * 3)));
        RecordBatch::try_new(schema(), vec![Arc::new(ids), Arc::new(texts), Arc::new(ns)]).unwrap()
    }

    async fn write(uri: &str, b: RecordBatch, mode: WriteMode) -> Dataset {
        let reader = arrow_array::RecordBatchIterator::new([Ok(b)], schema());
        let params = WriteParams {
            mode,
            max_rows_per_file: 250,
            ..Default::default()
        };
        Dataset::write(reader, uri, Some(params)).await.unwrap()
    }

    fn fts(query: FullTextSearchQuery, k: usize, projection: Option<Projection>) -> QuerySpec {
        QuerySpec {
            fts: Some(query),
            k: Some(k),
            projection,
            ..Default::default()
        }
    }

    /// Lance's own answer to `spec`, through its scanner.
    async fn lances(ds: &Arc<Dataset>, spec: &QuerySpec) -> RecordBatch {
        let stream = spec.scanner(ds).unwrap().try_into_stream().await.unwrap();
        let schema = stream.schema();
        let batches: Vec<RecordBatch> = stream.try_collect().await.unwrap();
        arrow_select::concat::concat_batches(&schema, &batches).unwrap()
    }

    /// This module's answer equals lance's, schema and values; answers its row count. For
    /// queries whose scores all differ (lance's order among equal scores varies run to run).
    async fn same_as_lance(ds: &Arc<Dataset>, spec: &QuerySpec) -> usize {
        let ours = search(ds, spec)
            .await
            .unwrap()
            .expect("a plain full-text search");
        let theirs = lances(ds, spec).await;
        let scores = theirs
            .column_by_name(SCORE_COL)
            .unwrap()
            .as_primitive::<arrow_array::types::Float32Type>();
        let mut distinct: Vec<f32> = scores.values().to_vec();
        distinct.dedup();
        assert_eq!(distinct.len(), scores.len(), "scores tie in {theirs:?}");
        assert_eq!(ours.schema(), theirs.schema(), "schema of {spec:?}");
        assert_eq!(ours, theirs, "answer to {spec:?}");
        ours.num_rows()
    }

    /// Where scores tie, lance picks and orders the tied rows as its search runs: the answer
    /// has lance's schema and scores, best first, and each row's columns are that row's.
    async fn like_lance(ds: &Arc<Dataset>, spec: &QuerySpec, table: &RecordBatch) -> usize {
        let ours = search(ds, spec)
            .await
            .unwrap()
            .expect("a plain full-text search");
        let theirs = lances(ds, spec).await;
        assert_eq!(ours.schema(), theirs.schema(), "schema of {spec:?}");
        let scores = |b: &RecordBatch| {
            b.column_by_name(SCORE_COL)
                .unwrap()
                .as_primitive::<arrow_array::types::Float32Type>()
                .values()
                .to_vec()
        };
        let ours_scores = scores(&ours);
        assert!(ours_scores.windows(2).all(|w| w[0] >= w[1]), "best first");
        assert_eq!(ours_scores, scores(&theirs), "scores of {spec:?}");
        let table_ids = table
            .column_by_name("id")
            .unwrap()
            .as_primitive::<arrow_array::types::Int64Type>();
        let at = |id: i64| table_ids.values().iter().position(|t| *t == id).unwrap();
        if let Some(ids) = ours.column_by_name("id") {
            let ids = ids.as_primitive::<arrow_array::types::Int64Type>();
            for (row, id) in ids.values().iter().enumerate() {
                for field in ours.schema().fields() {
                    let name = field.name();
                    if name == SCORE_COL || name == ROW_ID {
                        continue;
                    }
                    let ours = ours.column_by_name(name).unwrap().slice(row, 1);
                    let table = table.column_by_name(name).unwrap().slice(at(*id), 1);
                    assert_eq!(&ours, &table, "{name} of row {id} in {spec:?}");
                }
            }
        }
        ours.num_rows()
    }

    #[tokio::test]
    async fn answers_exactly_as_lance_does() {
        let dir = tempfile::tempdir().unwrap();
        let uri = dir.path().join("t.lance").to_string_lossy().to_string();
        write(&uri, batch(0, 1000), WriteMode::Create).await;
        let mut ds = write(&uri, batch(1000, 500), WriteMode::Append).await;
        ds.create_index(
            &["text"],
            IndexType::Inverted,
            None,
            &InvertedIndexParams::default(),
            true,
        )
        .await
        .unwrap();
        // Rows the index has not seen, and deleted rows, both indexed and not.
        let mut ds = write(&uri, batch(1500, 300), WriteMode::Append).await;
        ds.delete("id % 11 = 3").await.unwrap();
        let ds = Arc::new(ds);
        assert!(ds.get_fragments().len() > 4);
        let names = |n: &[&str]| Some(Projection::Names(n.iter().map(|s| s.to_string()).collect()));
        let table = lances(
            &ds,
            &QuerySpec {
                projection: Some(Projection::Names(vec![
                    "id".into(),
                    "text".into(),
                    "n".into(),
                ])),
                ..Default::default()
            },
        )
        .await;
        let projections = [
            None,
            names(&["id"]),
            names(&["text", "id"]),
            names(&["id", "n"]),
        ];
        // Distinct scores: the very answer lance gives.
        for query in [
            FullTextSearchQuery::new("zircon".into()),
            FullTextSearchQuery::new_fuzzy("zirkon".into(), Some(1)),
        ] {
            for projection in &projections {
                for k in [1, 10, 250] {
                    let spec = fts(query.clone(), k, projection.clone());
                    assert!(same_as_lance(&ds, &spec).await > 0, "{spec:?}");
                }
            }
            let with_row_id = QuerySpec {
                with_row_id: true,
                ..fts(query.clone(), 10, names(&["id"]))
            };
            same_as_lance(&ds, &with_row_id).await;
            let fast = QuerySpec {
                fast_search: true,
                ..fts(query.clone(), 20, names(&["id"]))
            };
            same_as_lance(&ds, &fast).await;
        }
        // Common words, many rows scoring alike.
        for query in [
            FullTextSearchQuery::new("amber".into()),
            FullTextSearchQuery::new("birch ember".into()),
        ] {
            for projection in &projections {
                for k in [1, 10, 250] {
                    let spec = fts(query.clone(), k, projection.clone());
                    assert!(like_lance(&ds, &spec, &table).await > 0, "{spec:?}");
                }
            }
            let with_row_id = QuerySpec {
                with_row_id: true,
                ..fts(query.clone(), 10, names(&["id"]))
            };
            like_lance(&ds, &with_row_id, &table).await;
        }
        // No match at all.
        let none = fts(FullTextSearchQuery::new("zebra".into()), 10, names(&["id"]));
        assert_eq!(same_as_lance(&ds, &none).await, 0);
    }

    #[tokio::test]
    async fn leaves_other_queries_to_lance() {
        let dir = tempfile::tempdir().unwrap();
        let uri = dir.path().join("t.lance").to_string_lossy().to_string();
        let ds = Arc::new(write(&uri, batch(0, 100), WriteMode::Create).await);
        let word = || Some(FullTextSearchQuery::new("amber".into()));
        let names = |n: &[&str]| Some(Projection::Names(n.iter().map(|s| s.to_string()).collect()));
        for spec in [
            QuerySpec::default(),
            QuerySpec {
                fts: word(),
                ..Default::default()
            },
            QuerySpec {
                filter: Some("id > 3".into()),
                ..fts(word().unwrap(), 10, None)
            },
            QuerySpec {
                offset: Some(2),
                ..fts(word().unwrap(), 10, None)
            },
            fts(word().unwrap(), MAX_K + 1, None),
            fts(word().unwrap(), 10, names(&["id", "id"])),
            fts(word().unwrap(), 10, names(&["_rowid"])),
            fts(word().unwrap(), 10, names(&["missing"])),
            fts(
                word().unwrap(),
                10,
                Some(Projection::Aliases(vec![("d".into(), "id * 2".into())])),
            ),
        ] {
            assert!(eligible(&ds, &spec).is_none(), "{spec:?}");
        }
    }
}
