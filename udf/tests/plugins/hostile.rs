//! Hostile and buggy guests fail their own call, with the right error, within the limits,
//! while everything else keeps working.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::Float64Type;
use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch};
use arrow_schema::DataType;
use lancet_udf::{Limits, UdfError};

use crate::common::{batch, define, limits, shared};

fn one_row() -> RecordBatch {
    let col: ArrayRef = Arc::new(Int64Array::from(vec![1]));
    batch(vec![("x", col)])
}

/// Runs misbehave's `entry` once and returns its error and how long the call took.
fn run_hostile(entry: &str, limits: &Limits, expected: Option<&DataType>) -> (UdfError, Duration) {
    let rt = shared();
    let udf = define(rt, "misbehave", entry, &[]).unwrap();
    let start = Instant::now();
    let err = rt
        .invoke(&udf, "hostile", &one_row(), expected, limits)
        .expect_err(entry);
    let took = start.elapsed();
    assert!(!err.is_definition_error(), "{entry}: {err}");
    assert!(
        err.to_string().contains(&format!("{entry}@")),
        "names the UDF: {err}"
    );
    (err, took)
}

/// Generous bound for calls that should fail at once (debug builds, a busy 2-core machine).
const PROMPTLY: Duration = Duration::from_secs(5);

#[test]
fn infinite_loop_times_out() {
    let l = limits();
    let (err, took) = run_hostile("spin", &l, None);
    assert!(matches!(err, UdfError::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("500ms"), "names the limit: {err}");
    assert!(
        took >= l.timeout && took < l.timeout + Duration::from_secs(2),
        "{took:?}"
    );
}

#[test]
fn memory_bomb_hits_the_memory_cap() {
    let (err, took) = run_hostile("bomb", &limits(), None);
    assert!(
        matches!(err, UdfError::MemoryLimit { limit, .. } if limit == 64 << 20),
        "{err}"
    );
    assert!(took < PROMPTLY, "{took:?}");
}

#[test]
fn deep_recursion_overflows_the_stack() {
    let (err, took) = run_hostile("recurse", &limits(), None);
    assert!(matches!(err, UdfError::StackOverflow { .. }), "{err}");
    assert!(took < PROMPTLY, "{took:?}");
}

#[test]
fn traps_and_panics_are_reported_with_their_message() {
    let (err, _) = run_hostile("trap", &limits(), None);
    assert!(matches!(err, UdfError::Trap { .. }), "{err}");
    assert!(err.to_string().contains("unreachable"), "{err}");
    let (err, _) = run_hostile("panics", &limits(), None);
    assert!(matches!(err, UdfError::Trap { .. }), "{err}");
    assert!(
        err.to_string().contains("boom after 1 rows"),
        "panic message: {err}"
    );
    let (err, _) = run_hostile("guest_error", &limits(), None);
    assert!(matches!(err, UdfError::Guest { .. }), "{err}");
    assert!(
        err.to_string().contains("cannot score negative ages"),
        "{err}"
    );
}

#[test]
fn bad_output_is_rejected() {
    let cases: [(&str, Option<DataType>, &str); 8] = [
        ("wrong_rows", None, "2 rows for 1 input rows"),
        (
            "gather_outside",
            None,
            "range 0xffff0000+256 lies outside guest memory",
        ),
        ("gather_ragged", None, "list of 3 bytes (not whole ranges)"),
        ("malformed", None, "malformed Arrow IPC"),
        ("trailing", None, "5 trailing bytes"),
        ("two_columns", None, "2 columns"),
        ("bad_status", None, "unknown status byte 7"),
        (
            "wrong_type",
            Some(DataType::Int64),
            "type Utf8 where Int64 was declared",
        ),
    ];
    for (entry, expected, says) in cases {
        let (err, took) = run_hostile(entry, &limits(), expected.as_ref());
        assert!(matches!(err, UdfError::BadOutput { .. }), "{entry}: {err}");
        assert!(err.to_string().contains(says), "{entry}: {err}");
        assert!(took < PROMPTLY, "{entry}: {took:?}");
    }
}

#[test]
fn oversized_and_out_of_bounds_results_are_rejected() {
    let (err, _) = run_hostile("huge_output", &limits(), None);
    assert!(
        matches!(err, UdfError::OutputTooLarge { limit, .. } if limit == 1 << 20),
        "{err}"
    );
    let (err, _) = run_hostile("bogus_length", &limits(), None);
    assert!(matches!(err, UdfError::OutputTooLarge { .. }), "{err}");
    // Refused from the list alone: 64 MiB is never copied.
    let (err, took) = run_hostile("gather_huge", &limits(), None);
    assert!(
        matches!(err, UdfError::OutputTooLarge { size, .. } if size == 64 << 20),
        "{err}"
    );
    assert!(took < PROMPTLY, "{took:?}");
    let roomy = Limits {
        max_output_bytes: usize::MAX / 2,
        ..limits()
    };
    let (err, _) = run_hostile("bogus_length", &roomy, None);
    assert!(err.to_string().contains("outside guest memory"), "{err}");
}

#[test]
fn other_udfs_run_while_a_guest_spins() {
    let rt = shared();
    let spin = define(rt, "misbehave", "spin", &[]).unwrap();
    let score = define(rt, "score", "score", &[]).unwrap();
    let spin_limits = Limits {
        timeout: Duration::from_secs(3),
        ..limits()
    };
    let started = Instant::now();
    let spinner = std::thread::spawn(move || {
        let err = shared()
            .invoke(&spin, "tenant-a", &one_row(), None, &spin_limits)
            .unwrap_err();
        (err, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(100)); // let it start spinning
    let a: ArrayRef = Arc::new(Float64Array::from(vec![1.0, 2.0]));
    let input = batch(vec![("a", a.clone()), ("b", a)]);
    for tenant in ["tenant-a", "tenant-b"] {
        let out = rt.invoke(&score, tenant, &input, None, &limits()).unwrap();
        assert_eq!(out.as_primitive::<Float64Type>().values(), &[1.0, 2.0]);
    }
    let answered = started.elapsed();
    let (err, spun) = spinner.join().unwrap();
    assert!(matches!(err, UdfError::Timeout { .. }), "{err}");
    assert!(
        answered < spun,
        "score answered ({answered:?}) before the spin ended ({spun:?})"
    );
}

#[test]
fn failures_do_not_poison_later_calls() {
    let rt = shared();
    for entry in ["trap", "bomb", "malformed"] {
        let _ = run_hostile(entry, &limits(), None);
    }
    let udf = define(rt, "identity_i64", "identity_i64", &[]).unwrap();
    let out = rt
        .invoke(&udf, "hostile", &one_row(), None, &limits())
        .unwrap();
    assert_eq!(out.len(), 1);
}
