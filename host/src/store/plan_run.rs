//! A scan's plan run with one task context made once, for every query.
//!
//! `Scanner::try_into_stream` builds lance's plan and runs it through
//! `lance_datafusion::exec::execute_plan`, which makes DataFusion's task context anew for
//! every plan (copying the session's function maps, hundreds of entries) and, when the
//! stream ends, walks the plan for a metrics summary it logs at debug level. On a top-10
//! full-text search that is a thirtieth of the search's CPU (perf, bench/RESULTS.md
//! session 35). Here the plan is lance's (`Scanner::create_plan`), run on a task context
//! taken once from the same cached session lance would use (its default execution options:
//! no spilling, no batch size, no stats callback, as every scan Lancet makes), so the
//! answer is the one `try_into_stream` gives.

use std::sync::{Arc, OnceLock};

use datafusion_execution::TaskContext;
use datafusion_physical_plan::SendableRecordBatchStream;
use datafusion_physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion_physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion_physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use lance::dataset::scanner::Scanner;
use lance_datafusion::exec::{LanceExecutionOptions, get_session_context};

/// The answer's batches, as `scan.try_into_stream()` would give them.
pub async fn stream(scan: &Scanner) -> lance::Result<SendableRecordBatchStream> {
    let plan = scan.create_plan().await?;
    Ok(execute(plan)?)
}

/// Runs `plan` as one partition, merging several as lance does: in order when the plan
/// promises one (a top-k's ordering would be lost to a plain merge).
fn execute(plan: Arc<dyn ExecutionPlan>) -> datafusion_common::Result<SendableRecordBatchStream> {
    let plan: Arc<dyn ExecutionPlan> = if plan.properties().partitioning.partition_count() == 1 {
        plan
    } else if let Some(ordering) = plan.output_ordering() {
        Arc::new(SortPreservingMergeExec::new(ordering.clone(), plan))
    } else {
        Arc::new(CoalescePartitionsExec::new(plan))
    };
    plan.execute(0, task_context())
}

/// The task context of lance's default session, made on first use. A task context is a
/// snapshot of the session (its configuration, functions and runtime), which never changes
/// here: lance caches the session itself for these options.
fn task_context() -> Arc<TaskContext> {
    static CONTEXT: OnceLock<Arc<TaskContext>> = OnceLock::new();
    CONTEXT
        .get_or_init(|| get_session_context(&LanceExecutionOptions::default()).task_ctx())
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, RecordBatch, RecordBatchIterator};
    use arrow_schema::{DataType, Field, Schema};
    use futures::TryStreamExt;
    use lance::Dataset;

    async fn table(dir: &std::path::Path) -> Dataset {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(0..300))],
        )
        .unwrap();
        let params = lance::dataset::WriteParams {
            max_rows_per_file: 100,
            ..Default::default()
        };
        let uri = dir.join("t.lance").to_string_lossy().to_string();
        let reader = RecordBatchIterator::new([Ok(batch)], schema);
        Dataset::write(reader, &uri, Some(params)).await.unwrap()
    }

    fn values(batches: &[RecordBatch]) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| {
                let n = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                n.values().to_vec()
            })
            .collect()
    }

    async fn ours(scan: &Scanner) -> Vec<i64> {
        let batches: Vec<RecordBatch> = stream(scan).await.unwrap().try_collect().await.unwrap();
        values(&batches)
    }

    /// The same rows in the same order as lance's own run of the plan, for a filtered scan,
    /// an ordered top-k and a scan over several fragments read in parallel.
    #[tokio::test]
    async fn answers_as_lance_runs_it() {
        let dir = tempfile::tempdir().unwrap();
        let ds = table(dir.path()).await;
        assert_eq!(ds.get_fragments().len(), 3);
        type SetUp = Box<dyn Fn(&mut Scanner)>;
        let scans: Vec<SetUp> = vec![
            Box::new(|_| {}),
            Box::new(|s| {
                s.filter("n % 7 = 3").unwrap();
            }),
            Box::new(|s| {
                s.order_by(Some(vec![
                    lance::dataset::scanner::ColumnOrdering::desc_nulls_first("n".into()),
                ]))
                .unwrap();
                s.limit(Some(25), Some(5)).unwrap();
            }),
            Box::new(|s| {
                s.scan_in_order(false);
            }),
        ];
        for set in scans {
            let mut scan = ds.scan();
            set(&mut scan);
            let ours = ours(&scan).await;
            let lance = values(&[scan.try_into_batch().await.unwrap()]);
            let (mut sorted_ours, mut sorted_lance) = (ours.clone(), lance.clone());
            sorted_ours.sort();
            sorted_lance.sort();
            assert_eq!(sorted_ours, sorted_lance);
            assert!(!ours.is_empty());
        }
        // The ordered top-k keeps lance's order, not only its rows.
        let mut scan = ds.scan();
        scan.order_by(Some(vec![
            lance::dataset::scanner::ColumnOrdering::desc_nulls_first("n".into()),
        ]))
        .unwrap();
        scan.limit(Some(4), Some(1)).unwrap();
        assert_eq!(ours(&scan).await, vec![298, 297, 296, 295]);
    }
}
