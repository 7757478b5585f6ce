//! `identity_i64`: returns its Int64 input unchanged. It does no work, so running it through
//! the runtime measures the pure cost of crossing the Wasm boundary.

use lancet_sdk::prelude::*;

pub fn identity_i64(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    let column = arg(batch, 0)?;
    if column.data_type() != &DataType::Int64 {
        return Err(udf_error!("expected Int64, got {}", column.data_type()));
    }
    Ok(column.clone())
}

export_udf!(identity_i64);
