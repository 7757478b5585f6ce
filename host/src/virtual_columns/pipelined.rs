//! A native column's backfill calls on one worker, each batch written while the worker
//! computes the one before ([`lancet_native::Pipeline`]): called one at a time, the worker
//! would wait for the host between batches (two cross-process wake-ups per call), which for a
//! cheap pyarrow function costs as much as the function. Other engines run in this process
//! and gain nothing from it: their calls go through [`ColumnUdf::compute`].

use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;

use super::compute::pick;
use super::native::NativeUdf;
use super::{ColumnUdf, Computed};
use crate::error::{ApiError, ApiResult};
use crate::native::native_error;

/// Calls of one native column for one tenant, computed in the order submitted.
pub struct Pipelined {
    inner: lancet_native::Pipeline,
    udf: Arc<ColumnUdf>,
}

/// A call submitted to a [`Pipelined`], answered once the worker has computed it.
pub struct PendingCall {
    pending: lancet_native::Pending,
    udf: Arc<ColumnUdf>,
}

impl ColumnUdf {
    /// For a native column, a pipeline of its calls for `tenant`; `None` for every other
    /// engine. Never blocks: the worker is taken (or started, its environment installed) when
    /// the first call is submitted, and goes back to the pool when the pipeline is dropped.
    pub fn pipeline(self: &Arc<Self>, tenant: &str) -> ApiResult<Option<Pipelined>> {
        let Some(native) = self.native() else {
            return Ok(None);
        };
        let this = self.clone();
        let inner = native.pipeline(tenant, move || native_of(&this)?.spec_owned())?;
        Ok(Some(Pipelined {
            inner,
            udf: self.clone(),
        }))
    }
}

fn native_of(udf: &ColumnUdf) -> ApiResult<&NativeUdf> {
    udf.native()
        .ok_or_else(|| ApiError::internal("a pipeline of a column that is not native"))
}

impl Pipelined {
    /// Queues the call over `batch` (holding at least the input columns); never blocks.
    pub fn submit(&self, batch: &RecordBatch) -> ApiResult<PendingCall> {
        let input = native_of(&self.udf)?.input(batch)?;
        Ok(PendingCall {
            pending: self.inner.submit(input),
            udf: self.udf.clone(),
        })
    }
}

impl PendingCall {
    /// Blocks until the call is computed: the column's values, and how long the worker
    /// took (from when it could start the call).
    pub fn wait(self) -> ApiResult<(Computed, Duration)> {
        let out = self.pending.wait().map_err(native_error)?;
        let native = native_of(&self.udf)?;
        let values = pick(&out.values, &native.struct_field, self.udf.field())?;
        Ok((
            Computed {
                values,
                nulled: out.nulled as u64,
                failures: Vec::new(),
            },
            out.elapsed,
        ))
    }
}
