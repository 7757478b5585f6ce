//! `score`: a weighted sum of two numeric columns, `a * weight_a + b * weight_b`.
//!
//! Config: `weight_a` (default 0.7), `weight_b` (default 0.3). Inputs may be any integer or
//! float columns; the result is Float64, null where either input is null.

use lancet_sdk::prelude::*;

pub const DEFAULT_WEIGHT_A: f64 = 0.7;
pub const DEFAULT_WEIGHT_B: f64 = 0.3;

/// The configured weights; `init` has already rejected unparsable or non-finite values.
pub fn weights(config: &Config) -> Result<(f64, f64), UdfError> {
    let a = config.parse("weight_a")?.unwrap_or(DEFAULT_WEIGHT_A);
    let b = config.parse("weight_b")?.unwrap_or(DEFAULT_WEIGHT_B);
    if !(f64::is_finite(a) && f64::is_finite(b)) {
        return Err(udf_error!("weights must be finite, got {a} and {b}"));
    }
    Ok((a, b))
}

pub fn score(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    let (wa, wb) = weights(config())?;
    zip_f64(arg(batch, 0)?, arg(batch, 1)?, |a, b| a * wa + b * wb)
}

fn init(config: &Config) -> Result<(), UdfError> {
    weights(config).map(drop)
}

export_init!(init);
export_udf!(score);
