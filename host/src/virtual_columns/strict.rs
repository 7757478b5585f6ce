//! Parameters that take no null (a lancedb Function's non-`Optional` ones): such a function is
//! not called on a row where one of them is null, and that row's result is null, as with SQL's
//! strict functions. A nullable column may feed such a parameter (every column a client makes
//! from Python or JavaScript values is nullable): refusing the binding would refuse nearly
//! every real use, and calling the function with a null it declared it never takes would fail.

use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array};
use lancet_udf::RowFailure;

use crate::error::{ApiError, ApiResult};

/// The rows of `batch` to call the function on: those where every column at `strict` is
/// valid. `None` when that is every row.
pub(super) fn rows_to_call(batch: &RecordBatch, strict: &[usize]) -> Option<UInt32Array> {
    let skips = strict
        .iter()
        .any(|&i| batch.columns().get(i).is_some_and(|c| c.null_count() > 0));
    if !skips {
        return None;
    }
    let kept = (0..batch.num_rows())
        .filter(|&row| {
            strict
                .iter()
                .all(|&i| batch.columns().get(i).is_none_or(|c| c.is_valid(row)))
        })
        .map(|row| row as u32);
    Some(UInt32Array::from_iter_values(kept))
}

/// `batch`'s rows at `kept`.
pub(super) fn select(batch: &RecordBatch, kept: &UInt32Array) -> ApiResult<RecordBatch> {
    arrow_select::take::take_record_batch(batch, kept).map_err(ApiError::from)
}

/// The results for the called rows (`values`, one per entry of `kept`) spread over `total`
/// rows, null where the function was not called.
pub(super) fn spread(values: &ArrayRef, kept: &UInt32Array, total: usize) -> ApiResult<ArrayRef> {
    let mut at = vec![None; total];
    for (pos, row) in kept.values().iter().enumerate() {
        at[*row as usize] = Some(pos as u32);
    }
    arrow_select::take::take(values.as_ref(), &UInt32Array::from(at), None).map_err(ApiError::from)
}

/// Failures reported against the called rows, as offsets into the whole batch (a run may
/// split where skipped rows lay inside it).
pub(super) fn failures_in_batch(failures: Vec<RowFailure>, kept: &UInt32Array) -> Vec<RowFailure> {
    let mut out: Vec<RowFailure> = Vec::new();
    for f in failures {
        for pos in f.offset..f.offset.saturating_add(f.rows) {
            // Offsets are into the called rows; one past them has no row to name.
            let Some(&row) = kept.values().get(pos) else {
                break;
            };
            let row = row as usize;
            match out.last_mut() {
                Some(last)
                    if last.offset + last.rows == row
                        && last.message == f.message
                        && last.error_type == f.error_type =>
                {
                    last.rows += 1
                }
                _ => out.push(RowFailure {
                    offset: row,
                    rows: 1,
                    ..f.clone()
                }),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    fn batch() -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("s", DataType::Utf8, true),
                Field::new("n", DataType::Int64, true),
            ])),
            vec![
                Arc::new(StringArray::from(vec![
                    Some("a"),
                    None,
                    Some("c"),
                    Some("d"),
                ])),
                Arc::new(Int64Array::from(vec![Some(1), Some(2), None, Some(4)])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn rows_with_a_null_strict_input_are_not_called_and_answer_null() {
        let b = batch();
        assert!(rows_to_call(&b, &[]).is_none());
        let kept = rows_to_call(&b, &[0]).unwrap();
        assert_eq!(kept.values().to_vec(), vec![0, 2, 3]);
        let kept = rows_to_call(&b, &[0, 1]).unwrap();
        assert_eq!(kept.values().to_vec(), vec![0, 3]);
        assert_eq!(select(&b, &kept).unwrap().num_rows(), 2);
        let results: ArrayRef = Arc::new(StringArray::from(vec!["A", "D"]));
        let all = spread(&results, &kept, 4).unwrap();
        let all = all.as_any().downcast_ref::<StringArray>().unwrap();
        let got: Vec<Option<&str>> = all.iter().collect();
        assert_eq!(got, vec![Some("A"), None, None, Some("D")]);
    }

    #[test]
    fn failures_point_at_the_rows_of_the_whole_batch() {
        let kept = UInt32Array::from(vec![0, 2, 3, 7]);
        let f = |offset, rows| RowFailure {
            offset,
            rows,
            error_type: "guest_error",
            message: "boom".into(),
        };
        let out = failures_in_batch(vec![f(0, 3), f(3, 1)], &kept);
        let runs: Vec<(usize, usize)> = out.iter().map(|f| (f.offset, f.rows)).collect();
        assert_eq!(runs, vec![(0, 1), (2, 2), (7, 1)]);
    }
}
