//! Arrow IPC stream framing on the guest side: one batch in, one column out.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_buffer::Buffer;
use arrow_ipc::MetadataVersion;
use arrow_ipc::reader::{FileDecoder, StreamDecoder};
use arrow_ipc::writer::{
    DictionaryTracker, IpcDataGenerator, IpcWriteOptions, StreamWriter, write_message,
};
use arrow_ipc::{Block, MessageHeader};
use arrow_schema::{Field, Schema};

use crate::UdfError;

/// Name of the single field in a result stream; the host ignores it and uses the column.
pub const RESULT_FIELD: &str = "result";

/// Decodes the one RecordBatch of an input stream. Arrays point into `input` (no copy) when
/// it is aligned, which `lancet_alloc` guarantees.
///
/// The data is not validated (UTF-8, offsets): it comes from the host, which encoded it from
/// arrays that were already valid, and re-checking every string at Wasm speed on every call
/// would cost as much as many UDFs themselves. (`StreamDecoder` cannot skip validation, so
/// the stream's framing is walked here and each message handed to a `FileDecoder`.)
///
/// # Safety
/// `input` must be an IPC stream of valid Arrow data (as the host always sends).
pub unsafe fn decode_trusted_batch(input: Buffer) -> Result<RecordBatch, UdfError> {
    let bytes = input.as_slice();
    let mut pos = 0;
    let mut decoder: Option<FileDecoder> = None;
    let no_schema = || UdfError::new("input stream: record batch before schema");
    loop {
        let (prefix, meta_len) = frame_at(bytes, pos)?;
        if meta_len == 0 {
            return Err(UdfError::new("input stream holds no record batch"));
        }
        let meta_end = pos + prefix + meta_len;
        let message = bytes
            .get(pos + prefix..meta_end)
            .and_then(|m| arrow_ipc::root_as_message(m).ok())
            .ok_or_else(|| UdfError::new("input stream: bad message header"))?;
        let body_len = usize::try_from(message.bodyLength()).unwrap_or(usize::MAX);
        let total = (prefix + meta_len).saturating_add(body_len);
        if pos.saturating_add(total) > bytes.len() {
            return Err(UdfError::new("input stream: truncated message"));
        }
        let block = Block::new(0, (prefix + meta_len) as i32, body_len as i64);
        let message_buf = input.slice_with_length(pos, total);
        match message.header_type() {
            MessageHeader::Schema => {
                let schema = message
                    .header_as_schema()
                    .ok_or_else(|| UdfError::new("input stream: bad schema"))?;
                let schema = Arc::new(arrow_ipc::convert::fb_to_schema(schema));
                // SAFETY: forwarded to our caller, who vouches for the data.
                decoder = Some(unsafe {
                    FileDecoder::new(schema, message.version()).with_skip_validation(true)
                });
            }
            MessageHeader::DictionaryBatch => decoder
                .as_mut()
                .ok_or_else(no_schema)?
                .read_dictionary(&block, &message_buf)?,
            MessageHeader::RecordBatch => {
                let decoder = decoder.as_ref().ok_or_else(no_schema)?;
                return decoder
                    .read_record_batch(&block, &message_buf)?
                    .ok_or_else(|| UdfError::new("input stream: empty record batch message"));
            }
            _ => {}
        }
        pos += total;
    }
}

/// The length prefix at `pos`: (prefix bytes, metadata length); length 0 ends the stream.
fn frame_at(bytes: &[u8], pos: usize) -> Result<(usize, usize), UdfError> {
    let word = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")) as usize)
            .ok_or_else(|| UdfError::new("input stream: truncated"))
    };
    match word(pos)? {
        0xffff_ffff => Ok((8, word(pos + 4)?)),
        len => Ok((4, len)),
    }
}

/// Decodes and fully validates the one RecordBatch of a stream from an untrusted source.
pub fn decode_batch(mut input: Buffer) -> Result<RecordBatch, UdfError> {
    let mut decoder = StreamDecoder::new();
    while !input.is_empty() {
        if let Some(batch) = decoder.decode(&mut input)? {
            return Ok(batch);
        }
    }
    Err(UdfError::new("stream holds no record batch"))
}

/// Body alignment of result streams (arrow's default).
const ALIGNMENT: usize = 64;
/// End-of-stream marker: continuation word, zero length.
const EOS: [u8; 8] = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];

/// Appends `column` to `out` as an IPC stream of one single-column batch.
///
/// The column's buffers are copied once, straight into `out` ([`crate::layout`]); arrow's
/// `StreamWriter` would first copy them into a body buffer of its own (growing it as it
/// goes). Same bytes either way; types the layout does not cover use the `StreamWriter`.
pub fn encode_column(column: &ArrayRef, out: &mut Vec<u8>) -> Result<(), UdfError> {
    let field = Field::new(RESULT_FIELD, column.data_type().clone(), true);
    let schema = Arc::new(Schema::new(vec![field]));
    let batch = RecordBatch::try_new(schema, vec![column.clone()])?;
    let Some(direct) = crate::layout::lay_out(&batch, ALIGNMENT) else {
        let mut writer = StreamWriter::try_new(out, &batch.schema())?;
        writer.write(&batch)?;
        writer.finish()?;
        return Ok(());
    };
    let options = IpcWriteOptions::try_new(ALIGNMENT, false, MetadataVersion::V5)?;
    let schema = IpcDataGenerator::default().schema_to_bytes_with_dictionary_tracker(
        &batch.schema(),
        &mut DictionaryTracker::new(false),
        &options,
    );
    write_message(&mut *out, schema, &options)?;
    out.reserve(direct.body_len + EOS.len());
    direct.write_to(out, &options)?;
    out.extend_from_slice(&EOS);
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
