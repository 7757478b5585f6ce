//! Running a prepared UDF over a batch: split into calls of at most `max_rows_per_call` rows,
//! run each in a tenant's instance under limits, validate, and stitch the results together.

use std::sync::atomic::Ordering;

use arrow_array::{ArrayRef, RecordBatch, new_null_array};
use arrow_schema::DataType;

use crate::UdfError;
use crate::codec::{decode_output, encode_input};
use crate::instance::Outcome;
use crate::limits::Limits;
use crate::manifest::OnError;
use crate::runtime::{PreparedUdf, Runtime};

/// The result of [`Runtime::invoke_with_stats`].
#[derive(Debug)]
pub struct InvokeOutput {
    pub array: ArrayRef,
    /// Rows that failed and were set to null (only under `on_error: null`).
    pub nulled_rows: usize,
    /// Which rows those were, and why (the calls bisection isolated), in row order.
    pub failures: Vec<RowFailure>,
}

/// A run of input rows the UDF failed on under `on_error: null`.
#[derive(Debug, Clone)]
pub struct RowFailure {
    /// The first row, as an offset into the input batch.
    pub offset: usize,
    pub rows: usize,
    /// `guest_error`, `trap` or `stack_overflow`.
    pub error_type: &'static str,
    pub message: String,
}

/// Part of a result: computed values, or rows that failed under `on_error: null`.
enum Piece {
    Values(ArrayRef),
    Failed(usize, UdfError),
}

impl Runtime {
    /// Runs `udf` over `input` for `tenant` under `limits` (lowered by the manifest's own).
    /// The result has `input.num_rows()` rows and, if `expected` is given, that type.
    pub fn invoke(
        &self,
        udf: &PreparedUdf,
        tenant: &str,
        input: &RecordBatch,
        expected: Option<&DataType>,
        limits: &Limits,
    ) -> Result<ArrayRef, UdfError> {
        self.invoke_with_stats(udf, tenant, input, expected, limits)
            .map(|out| out.array)
    }

    /// [`invoke`](Self::invoke), also reporting how many rows `on_error: null` nulled.
    pub fn invoke_with_stats(
        &self,
        udf: &PreparedUdf,
        tenant: &str,
        input: &RecordBatch,
        expected: Option<&DataType>,
        limits: &Limits,
    ) -> Result<InvokeOutput, UdfError> {
        let limits = limits.tightened_by(udf.manifest.limits.as_ref());
        let rows = input.num_rows();
        let step = limits.max_rows_per_call.max(1);
        let mut pieces = Vec::new();
        let mut offset = 0;
        loop {
            let len = step.min(rows - offset);
            let chunk = if len == rows {
                input.clone()
            } else {
                input.slice(offset, len)
            };
            self.run_chunk(udf, tenant, &chunk, expected, &limits, &mut pieces)?;
            offset += len;
            if offset >= rows {
                break;
            }
        }
        let out = assemble(pieces, expected)?;
        udf.nulled_rows
            .fetch_add(out.nulled_rows as u64, Ordering::Relaxed);
        Ok(out)
    }

    /// One call, or under `on_error: null` a bisection down to the failing rows.
    fn run_chunk(
        &self,
        udf: &PreparedUdf,
        tenant: &str,
        chunk: &RecordBatch,
        expected: Option<&DataType>,
        limits: &Limits,
        pieces: &mut Vec<Piece>,
    ) -> Result<(), UdfError> {
        match self.call_once(udf, tenant, chunk, expected, limits) {
            Ok(array) => pieces.push(Piece::Values(array)),
            Err(e) if udf.manifest.on_error == OnError::Null && is_row_failure(&e) => {
                let n = chunk.num_rows();
                if n <= 1 {
                    pieces.push(Piece::Failed(n, e));
                } else {
                    let half = n / 2;
                    for (off, len) in [(0, half), (half, n - half)] {
                        self.run_chunk(
                            udf,
                            tenant,
                            &chunk.slice(off, len),
                            expected,
                            limits,
                            pieces,
                        )?;
                    }
                }
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    fn call_once(
        &self,
        udf: &PreparedUdf,
        tenant: &str,
        chunk: &RecordBatch,
        expected: Option<&DataType>,
        limits: &Limits,
    ) -> Result<ArrayRef, UdfError> {
        let started = std::time::Instant::now();
        let result = self.call_checked_out(udf, tenant, chunk, expected, limits);
        self.inner
            .call_stats
            .record(tenant, chunk.num_rows(), started.elapsed(), &result);
        result
    }

    fn call_checked_out(
        &self,
        udf: &PreparedUdf,
        tenant: &str,
        chunk: &RecordBatch,
        expected: Option<&DataType>,
        limits: &Limits,
    ) -> Result<ArrayRef, UdfError> {
        let mut instance = self.checkout(udf, tenant, limits)?;
        instance.set_caller(tenant, self.config().embedder.clone());
        let outcome = encode_input(chunk)
            .and_then(|input| instance.call(&udf.manifest.entry, input, limits, &udf.label));
        let inner = &self.inner;
        match outcome {
            Ok(Outcome::Ok(stream)) => {
                match decode_output(stream, chunk.num_rows(), expected, limits, &udf.label) {
                    Ok(array) => {
                        inner.pool.put(tenant, &udf.instance_key, instance);
                        Ok(array)
                    }
                    // A guest that produces garbage is not trusted with another call.
                    Err(e) => {
                        inner.counters.discarded.fetch_add(1, Ordering::Relaxed);
                        Err(e)
                    }
                }
            }
            Ok(Outcome::GuestError(message)) => {
                inner.pool.put(tenant, &udf.instance_key, instance);
                Err(UdfError::Guest {
                    udf: udf.label.clone(),
                    message,
                })
            }
            Err(e) => {
                // A trap or limit hit can leave the instance in any state: drop it.
                inner.counters.discarded.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }
}

/// Failures that may depend on particular rows, so bisecting can isolate them. Limit hits
/// and bad output are not: they fail the call however it is split (and would be slow to
/// bisect).
fn is_row_failure(e: &UdfError) -> bool {
    matches!(
        e,
        UdfError::Guest { .. } | UdfError::Trap { .. } | UdfError::StackOverflow { .. }
    )
}

fn assemble(pieces: Vec<Piece>, expected: Option<&DataType>) -> Result<InvokeOutput, UdfError> {
    let data_type = expected.cloned().or_else(|| {
        pieces.iter().find_map(|p| match p {
            Piece::Values(a) => Some(a.data_type().clone()),
            Piece::Failed(..) => None,
        })
    });
    let mut nulled_rows = 0;
    let mut failures = Vec::new();
    let mut offset = 0;
    let mut arrays = Vec::with_capacity(pieces.len());
    for piece in pieces {
        match (piece, &data_type) {
            (Piece::Values(a), _) => {
                offset += a.len();
                arrays.push(a)
            }
            (Piece::Failed(n, e), Some(t)) => {
                nulled_rows += n;
                failures.push(RowFailure {
                    offset,
                    rows: n,
                    error_type: match e {
                        UdfError::Guest { .. } => "guest_error",
                        UdfError::Trap { .. } => "trap",
                        UdfError::StackOverflow { .. } => "stack_overflow",
                        _ => "error",
                    },
                    message: e.to_string(),
                });
                offset += n;
                arrays.push(new_null_array(t, n));
            }
            // Every row failed and no type was declared: nothing to build nulls of.
            (Piece::Failed(_, e), None) => return Err(e),
        }
    }
    let array = match arrays.len() {
        1 => arrays.pop().expect("one array"),
        _ => {
            let refs: Vec<_> = arrays.iter().map(|a| a.as_ref()).collect();
            arrow_select::concat::concat(&refs)
                .map_err(|e| UdfError::Internal(format!("concatenating results: {e}")))?
        }
    };
    Ok(InvokeOutput {
        array,
        nulled_rows,
        failures,
    })
}
