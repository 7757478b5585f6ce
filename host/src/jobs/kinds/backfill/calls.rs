//! One read batch of a backfill task through the UDF: its selected rows gathered, computed in
//! calls of an adaptive size (`checkpoint_size` within min/max, `intra_applier_concurrency`
//! calls at once), or for a native column submitted to the task's pipeline; the results
//! merged back with the unselected rows' current values.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use arrow_select::interleave::interleave;

use super::run::{Ctx, failed};
use super::spec::BackfillSpec;
use crate::error::{ApiError, ApiResult};
use crate::jobs::Stop;
use crate::store::SourceBatch;
use crate::virtual_columns::{Computed, PendingCall, Pipelined};

/// UDF calls aim to last about this long: long enough to amortise per-call costs, short enough
/// for cancellation and checkpoints to stay prompt.
const TARGET_CALL: Duration = Duration::from_millis(500);

/// One read batch computed: the column's values for all its rows, in order.
pub(super) struct Done {
    /// The row after the batch's last.
    pub(super) end: u64,
    pub(super) values: Vec<ArrayRef>,
    pub(super) selected: u64,
    pub(super) nulled: u64,
    /// Rows nulled by a failing UDF (row offsets in the fragment), with the error's kind
    /// and message.
    pub(super) failures: Vec<(Vec<u64>, &'static str, String)>,
}

/// A read batch's calls: one after another as the future runs, or (native columns) all
/// submitted now, in read order, to the task's pipeline.
enum Calls {
    Direct(RecordBatch),
    Submitted(Vec<(usize, usize, PendingCall)>),
}

/// Takes one read batch in: its selected rows, and their calls started (see [`Calls`]). The
/// future finishes the batch: the calls' results, merged with the unselected rows' current
/// values.
pub(super) fn start<'a>(
    ctx: &'a Arc<Ctx>,
    fragment: u64,
    sb: SourceBatch,
    pipeline: Option<&Pipelined>,
    size: &'a AtomicUsize,
) -> Result<impl Future<Output = Result<Done, Stop>> + Send + 'a, Stop> {
    ctx.check()?;
    let old = ctx.source.target_values(&sb.batch)?;
    let picked: Vec<u32> = (0..sb.selected.len() as u32)
        .filter(|i| sb.selected[*i as usize])
        .collect();
    let all = picked.len() == sb.batch.num_rows();
    let input = if picked.is_empty() {
        None
    } else if all {
        // Every row selected (a first backfill): no gather before or merge after the calls.
        Some(sb.batch.clone())
    } else {
        Some(
            arrow_select::take::take_record_batch(&sb.batch, &UInt32Array::from(picked.clone()))
                .map_err(ApiError::from)?,
        )
    };
    let calls = match (input, pipeline) {
        (None, _) => None,
        (Some(input), None) => Some(Calls::Direct(input)),
        (Some(input), Some(p)) => {
            let len = size.load(Ordering::Relaxed).max(1);
            let mut submitted = Vec::new();
            for off in (0..input.num_rows()).step_by(len) {
                let n = len.min(input.num_rows() - off);
                submitted.push((off, n, p.submit(&input.slice(off, n))?));
            }
            Some(Calls::Submitted(submitted))
        }
    };
    Ok(async move {
        let end = sb.start + sb.batch.num_rows() as u64;
        let Some(calls) = calls else {
            return Ok(Done {
                end,
                values: vec![old],
                selected: 0,
                nulled: 0,
                failures: Vec::new(),
            });
        };
        let at = Rows {
            fragment,
            batch_start: sb.start,
            picked: &picked,
        };
        let (parts, nulled, failures) = match calls {
            Calls::Direct(input) => compute(ctx, &input, &at, size).await?,
            Calls::Submitted(submitted) => collect(ctx, submitted, &at, size).await?,
        };
        let values = if all {
            parts
        } else {
            // Unselected rows keep their current value: the file replaces the whole column.
            // Source 0 is the current column, sources 1.. the calls' results in order.
            let (mut part, mut pos) = (0, 0);
            let indices: Vec<(usize, usize)> = sb
                .selected
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    if !*s {
                        return (0, i);
                    }
                    while pos == parts[part].len() {
                        (part, pos) = (part + 1, 0);
                    }
                    pos += 1;
                    (part + 1, pos - 1)
                })
                .collect();
            let mut sources: Vec<&dyn arrow_array::Array> = vec![old.as_ref()];
            sources.extend(parts.iter().map(|a| a.as_ref()));
            vec![interleave(&sources, &indices).map_err(ApiError::from)?]
        };
        Ok(Done {
            end,
            values,
            selected: picked.len() as u64,
            nulled,
            failures,
        })
    })
}

/// Where a read batch's input rows are: for naming the rows of a failed call, and of rows
/// nulled.
struct Rows<'a> {
    fragment: u64,
    batch_start: u64,
    /// Input row -> row in the read batch.
    picked: &'a [u32],
}

impl Rows<'_> {
    /// `fragment F rows A..B` of input rows `off..off + len`.
    fn name(&self, off: usize, len: usize) -> String {
        let first = self.batch_start + self.picked[off] as u64;
        let last = self.batch_start + self.picked[off + len - 1] as u64;
        format!("fragment {} rows {first}..{}", self.fragment, last + 1)
    }

    /// Fragment row offsets of input rows `from..from + n`.
    fn offsets(&self, from: usize, n: usize) -> Vec<u64> {
        (from..from + n)
            .map(|i| self.batch_start + self.picked[i] as u64)
            .collect()
    }
}

/// Results of a read batch's calls: values in order, rows nulled, failures.
type Parts = (Vec<ArrayRef>, u64, Vec<(Vec<u64>, &'static str, String)>);

/// One call's outcome added to `parts`; the call covered input rows `off..off + len`.
fn take_outcome(
    parts: &mut Parts,
    at: &Rows<'_>,
    (off, len): (usize, usize),
    outcome: Result<ApiResult<(Computed, Duration)>, tokio::task::JoinError>,
) -> Result<Duration, Stop> {
    let (computed, took) = outcome
        .map_err(|e| {
            failed(
                "compute",
                format!("{}: the UDF call crashed: {e}", at.name(off, len)),
            )
        })?
        .map_err(|e| failed("compute", format!("{}: {}", at.name(off, len), e.message)))?;
    parts.1 += computed.nulled;
    for f in &computed.failures {
        parts.2.push((
            at.offsets(off + f.offset, f.rows),
            f.error_type,
            f.message.clone(),
        ));
    }
    parts.0.push(computed.values);
    Ok(took)
}

/// Run the UDF over `input` (the selected rows of one read batch) in calls of the adaptive
/// `size`, `intra_applier_concurrency` at a time. Returns the calls' results in order (not
/// concatenated).
async fn compute(
    ctx: &Arc<Ctx>,
    input: &RecordBatch,
    at: &Rows<'_>,
    size: &AtomicUsize,
) -> Result<Parts, Stop> {
    let spec = &ctx.spec;
    let mut parts: Parts = Default::default();
    let mut offset = 0;
    while offset < input.num_rows() {
        ctx.check()?;
        // One round: up to intra_applier_concurrency calls of `size` rows, in parallel.
        let mut round = Vec::new();
        let len = size.load(Ordering::Relaxed).max(1);
        for _ in 0..spec.intra_applier_concurrency {
            if offset >= input.num_rows() {
                break;
            }
            let n = len.min(input.num_rows() - offset);
            round.push((offset, n));
            offset += n;
        }
        let calls = round.iter().map(|&(off, n)| {
            let chunk = input.slice(off, n);
            let udf = ctx.udf.clone();
            let tenant = ctx.tenant.clone();
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                udf.compute(&tenant, &chunk).map(|c| (c, started.elapsed()))
            })
        });
        let outcomes = futures::future::join_all(calls).await;
        let mut slowest = Duration::ZERO;
        for (call, outcome) in round.into_iter().zip(outcomes) {
            slowest = slowest.max(take_outcome(&mut parts, at, call, outcome)?);
        }
        adapt_shared(size, slowest, spec);
    }
    Ok(parts)
}

/// The answers of calls submitted to the task's pipeline, in order.
async fn collect(
    ctx: &Arc<Ctx>,
    submitted: Vec<(usize, usize, PendingCall)>,
    at: &Rows<'_>,
    size: &AtomicUsize,
) -> Result<Parts, Stop> {
    let mut parts: Parts = Default::default();
    for (off, n, call) in submitted {
        ctx.check()?;
        let outcome = tokio::task::spawn_blocking(move || call.wait()).await;
        let took = take_outcome(&mut parts, at, (off, n), outcome)?;
        adapt_shared(size, took, &ctx.spec);
    }
    Ok(parts)
}

/// [`adapt`] of the task's call size after a call (or round) that took `took`.
fn adapt_shared(size: &AtomicUsize, took: Duration, spec: &BackfillSpec) {
    let next = adapt(
        size.load(Ordering::Relaxed),
        took,
        spec.min_checkpoint_size,
        spec.max_checkpoint_size,
    );
    size.store(next, Ordering::Relaxed);
}

/// Next call size: double while calls are much quicker than the target, halve when much slower.
fn adapt(size: usize, took: Duration, min: usize, max: usize) -> usize {
    if took < TARGET_CALL / 4 {
        size.saturating_mul(2).min(max)
    } else if took > TARGET_CALL * 4 {
        (size / 2).max(min)
    } else {
        size
    }
    .clamp(min, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_size_adapts_within_bounds() {
        assert_eq!(adapt(100, Duration::from_millis(1), 10, 150), 150);
        assert_eq!(adapt(100, Duration::from_secs(5), 80, 150), 80);
        assert_eq!(adapt(100, TARGET_CALL, 10, 1000), 100);
        assert_eq!(adapt(usize::MAX, Duration::ZERO, 1, usize::MAX), usize::MAX);
    }
}
