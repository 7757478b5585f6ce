//! Fuzzing filters in-process: 100,000 predicates from `grammar` over a table of every common
//! column type. Each goes through [`super::check`] and, when it passes, through
//! lance's own planner (parse, optimize, physical plan) and is evaluated on a small batch, as
//! a scan would. Whatever the text, the outcome must be a refusal that maps to a 4xx, or an
//! answer: never a panic (the server's 500) and never an error the server answers 5xx.

use std::panic::{AssertUnwindSafe, catch_unwind};

use arrow_array::RecordBatch;
use lance_datafusion::planner::Planner;

use super::grammar::{predicates, table_batch, table_schema};

use crate::error::ApiError;

/// What the server would answer for `filter` on a scan of `batch`: Ok, or the status of the
/// error. A panic anywhere is returned as Err(message).
fn outcome(
    planner: &Planner,
    batch: &RecordBatch,
    filter: &str,
) -> Result<Option<(u16, String)>, String> {
    if let Err(e) = super::check(filter, "filter") {
        return Ok(Some((e.status.as_u16(), e.message)));
    }
    let run = catch_unwind(AssertUnwindSafe(|| -> Result<(), ApiError> {
        let parsed = planner.parse_filter(filter)?;
        let optimized = planner.optimize_expr(parsed)?;
        let physical = planner.create_physical_expr(&optimized)?;
        physical
            .evaluate(batch)
            .map_err(|e| ApiError::from(lance_core::Error::from(e)))?;
        Ok(())
    }));
    match run {
        Ok(Ok(())) => Ok(None),
        Ok(Err(e)) => Ok(Some((e.status.as_u16(), e.message))),
        Err(panic) => Err(panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into())),
    }
}

#[test]
fn no_generated_predicate_panics_or_answers_5xx() {
    let schema = table_schema();
    let batch = table_batch(schema.clone());
    let planner = Planner::new(schema);
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let (mut failures, mut refused, mut accepted) = (Vec::new(), 0, 0);
    for filter in predicates(0x5eed, 100_000) {
        match outcome(&planner, &batch, &filter) {
            Ok(None) => accepted += 1,
            Ok(Some((status, _))) if status < 500 => refused += 1,
            Ok(Some((status, message))) => failures.push(format!("{status} {message}: {filter}")),
            Err(panic) => failures.push(format!("panic ({panic}): {filter}")),
        }
    }
    std::panic::set_hook(quiet);
    failures.sort();
    failures.dedup();
    // LANCET_FUZZ_OUT=<file>: every failure, one a line, to study them.
    if let Some(out) = std::env::var_os("LANCET_FUZZ_OUT") {
        std::fs::write(out, failures.join("\n")).expect("write the failures");
    }
    assert!(
        failures.is_empty(),
        "{} of 100000 predicates failed (accepted {accepted}, refused {refused}); first:\n{}",
        failures.len(),
        failures[..failures.len().min(40)].join("\n")
    );
    // The generator must reach the planner, not only the guard, to test anything.
    assert!(accepted > 5_000, "only {accepted} predicates planned");
}
