//! A UDF that imports a WASI function (writing to stdout). The host must refuse it: no WASI.

use lancet_sdk::prelude::*;

#[cfg(target_arch = "wasm32")]
#[link(wasm_import_module = "wasi_snapshot_preview1")]
unsafe extern "C" {
    fn fd_write(fd: i32, iovs: *const u32, iovs_len: i32, nwritten: *mut u32) -> i32;
}

pub fn udf(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
    #[cfg(target_arch = "wasm32")]
    {
        let msg = b"hello from the sandbox\n";
        let iov = [msg.as_ptr() as u32, msg.len() as u32];
        let mut written = 0u32;
        // SAFETY: a well-formed iovec for a host that implemented WASI (ours refuses the module).
        unsafe { fd_write(1, iov.as_ptr(), 1, &mut written) };
    }
    Ok(arg(batch, 0)?.clone())
}

export_udf!(udf);
