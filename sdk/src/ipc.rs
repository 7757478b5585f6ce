//! Arrow IPC stream framing on the guest side: one batch in, one column out.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_buffer::Buffer;
use arrow_ipc::reader::StreamDecoder;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{Field, Schema};

use crate::UdfError;

/// Name of the single field in a result stream; the host ignores it and uses the column.
pub const RESULT_FIELD: &str = "result";

/// Decodes the one RecordBatch of an input stream. Arrays point into `input` (no copy) when
/// it is aligned, which `lancet_alloc` guarantees.
pub fn decode_batch(mut input: Buffer) -> Result<RecordBatch, UdfError> {
    let mut decoder = StreamDecoder::new();
    while !input.is_empty() {
        if let Some(batch) = decoder.decode(&mut input)? {
            return Ok(batch);
        }
    }
    Err(UdfError::new("input stream holds no record batch"))
}

/// Appends `column` to `out` as an IPC stream of one single-column batch.
pub fn encode_column(column: &ArrayRef, out: &mut Vec<u8>) -> Result<(), UdfError> {
    let field = Field::new(RESULT_FIELD, column.data_type().clone(), true);
    let schema = Arc::new(Schema::new(vec![field]));
    let batch = RecordBatch::try_new(schema, vec![column.clone()])?;
    let mut writer = StreamWriter::try_new(out, &batch.schema())?;
    writer.write(&batch)?;
    writer.finish()?;
    Ok(())
}

/// Encodes a whole batch as a stream (what the host sends; used by tests and benches).
pub fn encode_batch(batch: &RecordBatch) -> Result<Vec<u8>, UdfError> {
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, &batch.schema())?;
    writer.write(batch)?;
    writer.finish()?;
    Ok(out)
}
