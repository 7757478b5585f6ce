//! A few rows read straight from their fragments by row id, in the order asked.
//!
//! Lance's take (`Dataset::take_builder`) reads the rows the same way, fragment by fragment,
//! and then runs the projection it was given as a DataFusion plan built for that one batch
//! (a projection node, a task context copied from the session, the plan run and collected):
//! for a top-10 full-text search's ten ids that is a twentieth of the whole search's CPU
//! (perf, bench/RESULTS.md session 35). For plain table columns the projection changes
//! nothing, so here the rows are read and put in order without it. Only where a row id is
//! the row's address (no stable row ids), and only rows that are there: anything else is
//! `None`, for lance's take to answer.

use arrow_array::{RecordBatch, UInt32Array};
use futures::{StreamExt, TryStreamExt};
use lance::Dataset;
use lance::dataset::fragment::FragReadConfig;
use lance_core::datatypes::Schema;

use crate::error::{ApiError, ApiResult};

/// The `projection` of the rows with these ids, in their order; None when lance's take must
/// answer (stable row ids, a repeated id, an id no fragment holds, a row deleted or past the
/// fragment's end).
pub async fn read(
    ds: &Dataset,
    row_ids: &[u64],
    projection: &Schema,
) -> ApiResult<Option<RecordBatch>> {
    if ds.manifest.uses_stable_row_ids() || row_ids.is_empty() {
        return Ok(None);
    }
    // The ids in address order: a fragment's rows are read in one go, in file order.
    let mut order: Vec<usize> = (0..row_ids.len()).collect();
    order.sort_unstable_by_key(|&i| row_ids[i]);
    if order.windows(2).any(|w| row_ids[w[0]] == row_ids[w[1]]) {
        return Ok(None);
    }
    let mut reads = Vec::new();
    for run in order.chunk_by(|a, b| row_ids[*a] >> 32 == row_ids[*b] >> 32) {
        let Some(fragment) = ds.get_fragment((row_ids[run[0]] >> 32) as usize) else {
            return Ok(None);
        };
        let offsets: Vec<u32> = run.iter().map(|&i| row_ids[i] as u32).collect();
        // An offset past the fragment's rows is not read here (lance's take says what it is).
        let rows = fragment.metadata().physical_rows;
        if rows.is_none_or(|n| offsets.last().is_some_and(|&o| o as usize >= n)) {
            return Ok(None);
        }
        reads.push(async move {
            let reader = fragment.open(projection, FragReadConfig::default()).await?;
            let batch = reader.take_as_batch(&offsets, None).await?;
            // A deleted row is left out of the batch: then lance's take says what to do.
            Ok::<_, lance::Error>((batch.num_rows() == offsets.len()).then_some(batch))
        });
    }
    let parallel = ds.object_store(None).await?.io_parallelism().max(1);
    let batches: Vec<Option<RecordBatch>> = futures::stream::iter(reads)
        .buffered(parallel)
        .try_collect()
        .await
        .map_err(ApiError::from)?;
    let Some(batches) = batches.into_iter().collect::<Option<Vec<_>>>() else {
        return Ok(None);
    };
    let sorted = match batches.len() {
        1 => batches.into_iter().next().expect("one batch"),
        _ => arrow_select::concat::concat_batches(&batches[0].schema(), &batches)?,
    };
    // Row `order[p]` of the answer sits at place `p` of the sorted rows.
    let mut at = vec![0u32; row_ids.len()];
    for (place, &i) in order.iter().enumerate() {
        at[i] = place as u32;
    }
    let rows = arrow_select::take::take_record_batch(&sorted, &UInt32Array::from(at))?;
    Ok(Some(as_lance_answers(rows)?))
}

/// JSON columns as lance's take answers them (Arrow JSON text, not lance's binary form).
fn as_lance_answers(batch: RecordBatch) -> ApiResult<RecordBatch> {
    let json = batch
        .schema()
        .fields()
        .iter()
        .any(|f| lance_arrow::json::has_json_fields(f));
    if !json {
        return Ok(batch);
    }
    lance_arrow::json::convert_lance_json_to_arrow(&batch).map_err(ApiError::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, RecordBatchIterator, StringArray};
    use arrow_schema::{DataType, Field, Schema as ArrowSchema};
    use lance::dataset::{WriteMode, WriteParams};
    use std::sync::Arc;

    /// 600 rows in fragments of 100: `id` = row number, `text` = "row N", `doc` JSON.
    async fn table(dir: &std::path::Path, stable_row_ids: bool) -> Dataset {
        let json = lance_arrow::json::json_field("doc", true);
        let schema = Arc::new(ArrowSchema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("text", DataType::Utf8, true),
            json,
        ]));
        let docs = StringArray::from_iter_values((0..600).map(|i| format!("{{\"n\": {i}}}")));
        let docs = lance_arrow::json::JsonArray::try_from(docs)
            .unwrap()
            .into_inner();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(0..600)),
                Arc::new(StringArray::from_iter_values(
                    (0..600).map(|i| format!("row {i}")),
                )),
                Arc::new(docs),
            ],
        )
        .unwrap();
        let params = WriteParams {
            mode: WriteMode::Create,
            max_rows_per_file: 100,
            enable_stable_row_ids: stable_row_ids,
            ..Default::default()
        };
        let uri = dir.join("t.lance").to_string_lossy().to_string();
        let reader = RecordBatchIterator::new([Ok(batch)], schema);
        Dataset::write(reader, &uri, Some(params)).await.unwrap()
    }

    /// Lance's take of the same rows.
    async fn lances(ds: &Arc<Dataset>, ids: &[u64], projection: &Schema) -> RecordBatch {
        ds.take_builder(ids, projection.clone())
            .unwrap()
            .execute()
            .await
            .unwrap()
    }

    fn address(fragment: u64, offset: u64) -> u64 {
        (fragment << 32) | offset
    }

    #[tokio::test]
    async fn reads_the_rows_lance_takes_in_the_order_asked() {
        let dir = tempfile::tempdir().unwrap();
        let ds = Arc::new(table(dir.path(), false).await);
        assert_eq!(ds.get_fragments().len(), 6);
        let all = ds.schema().project(&["id", "text", "doc"]).unwrap();
        let text_id = ds.schema().project(&["text", "id"]).unwrap();
        let cases: [Vec<u64>; 4] = [
            vec![address(0, 3)],
            // Across fragments, out of order, as search hits come.
            vec![
                address(5, 99),
                address(0, 0),
                address(3, 7),
                address(0, 50),
                address(2, 1),
            ],
            // One fragment, contiguous and not.
            vec![
                address(4, 10),
                address(4, 11),
                address(4, 12),
                address(4, 40),
            ],
            (0..6).rev().map(|f| address(f, 99 - f)).collect(),
        ];
        for ids in &cases {
            for projection in [&all, &text_id] {
                let ours = read(&ds, ids, projection)
                    .await
                    .unwrap()
                    .expect("read here");
                assert_eq!(ours, lances(&ds, ids, projection).await, "{ids:?}");
                let got = ours
                    .column_by_name("id")
                    .unwrap()
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .values()
                    .to_vec();
                let want: Vec<i64> = ids
                    .iter()
                    .map(|a| ((a >> 32) * 100 + (a & 0xffff_ffff)) as i64)
                    .collect();
                assert_eq!(got, want);
            }
        }
        // JSON comes back as Arrow JSON text, as lance's take answers it.
        let doc = read(&ds, &[address(1, 2)], &all).await.unwrap().unwrap();
        assert!(lance_arrow::json::is_arrow_json_field(
            doc.schema().field(2)
        ));
    }

    /// A shallow clone's fragments live in the source table's directory (another base):
    /// read there as lance's take reads them, and after the clone's own append, from both.
    #[tokio::test]
    async fn reads_a_shallow_clones_rows_where_they_live() {
        let dir = tempfile::tempdir().unwrap();
        let mut source = table(dir.path(), false).await;
        let uri = dir.path().join("clone.lance").to_string_lossy().to_string();
        let version = source.version().version;
        let clone = source.shallow_clone(&uri, version, None).await.unwrap();
        let more = RecordBatch::try_new(
            Arc::new(ArrowSchema::from(clone.schema())),
            vec![
                Arc::new(Int64Array::from_iter_values(600..650)),
                Arc::new(StringArray::from_iter_values(
                    (600..650).map(|i| format!("row {i}")),
                )),
                Arc::new(
                    lance_arrow::json::JsonArray::try_from(StringArray::from_iter_values(
                        (600..650).map(|i| format!("{{\"n\": {i}}}")),
                    ))
                    .unwrap()
                    .into_inner(),
                ),
            ],
        )
        .unwrap();
        let schema = more.schema();
        let params = WriteParams {
            mode: WriteMode::Append,
            ..Default::default()
        };
        let reader = RecordBatchIterator::new([Ok(more)], schema);
        let clone = Arc::new(Dataset::write(reader, &uri, Some(params)).await.unwrap());
        assert_eq!(clone.get_fragments().len(), 7);
        let projection = clone.schema().project(&["id", "text"]).unwrap();
        let ids = [address(6, 49), address(0, 7), address(6, 0), address(3, 3)];
        let ours = read(&clone, &ids, &projection)
            .await
            .unwrap()
            .expect("read here");
        assert_eq!(ours, lances(&clone, &ids, &projection).await);
        let got = ours
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(got.values().to_vec(), vec![649, 7, 600, 303]);
    }

    #[tokio::test]
    async fn leaves_to_lance_what_it_cannot_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut ds = table(dir.path(), false).await;
        let id = ds.schema().project(&["id"]).unwrap();
        // A repeated id, an empty list, a fragment that is not there, an offset past its rows.
        for ids in [
            vec![address(0, 1), address(0, 1)],
            vec![],
            vec![address(9, 0)],
            vec![address(1, 3), address(1, 100)],
        ] {
            assert!(read(&ds, &ids, &id).await.unwrap().is_none(), "{ids:?}");
        }
        // A deleted row.
        ds.delete("id = 205").await.unwrap();
        assert!(read(&ds, &[address(2, 5)], &id).await.unwrap().is_none());
        assert!(read(&ds, &[address(2, 6)], &id).await.unwrap().is_some());
        // Stable row ids: an id is not an address.
        let dir = tempfile::tempdir().unwrap();
        let ds = table(dir.path(), true).await;
        assert!(read(&ds, &[3], &id).await.unwrap().is_none());
    }
}
