//! A UDF that imports a host function the runtime does not offer.

use lancet_sdk::prelude::*;

#[cfg(target_arch = "wasm32")]
#[link(wasm_import_module = "env")]
unsafe extern "C" {
    fn launch_missiles(count: i32) -> i32;
}

pub fn udf(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    #[cfg(target_arch = "wasm32")]
    // SAFETY: takes and returns plain integers.
    unsafe {
        launch_missiles(batch.num_rows() as i32);
    }
    Ok(arg(batch, 0)?.clone())
}

export_udf!(udf);
