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
use crate::layout::ZEROS;

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

/// Appends `column` to `out` as an IPC stream of one single-column batch: the bytes a
/// [`GatheredStream`] describes, written out (arrow's `StreamWriter`'s bytes).
pub fn encode_column(column: &ArrayRef, out: &mut Vec<u8>) -> Result<(), UdfError> {
    let mut gathered = GatheredStream::default();
    gathered.describe(column)?;
    gathered.append_to(out);
    Ok(())
}

/// A result stream described, not written: byte ranges whose concatenation is the stream
/// arrow's `StreamWriter` writes for the column as a one-column batch. The framing (schema message, batch header) is built here; the
/// body ranges point at the column's own buffers, which this keeps alive. The host copies the
/// ranges out of guest memory one after another, so the body crosses one copy fewer than
/// with a written stream (ABI version 2's gathered result, status 2).
#[derive(Default)]
pub struct GatheredStream {
    frame: Vec<u8>,
    pieces: Vec<Piece>,
    keep: Vec<Buffer>,
    segments: Vec<(usize, usize)>,
}

enum Piece {
    Frame(usize, usize),
    Kept(usize),
    Zeros(usize),
}

impl GatheredStream {
    /// Describes the result stream of `column`, replacing what this held.
    pub fn describe(&mut self, column: &ArrayRef) -> Result<(), UdfError> {
        self.clear();
        let field = Field::new(RESULT_FIELD, column.data_type().clone(), true);
        let schema = Arc::new(Schema::new(vec![field]));
        let batch = RecordBatch::try_new(schema, vec![column.clone()])?;
        let Some(direct) = crate::layout::lay_out(&batch, ALIGNMENT) else {
            // Types the layout does not cover: written whole, one range.
            let mut writer = StreamWriter::try_new(&mut self.frame, &batch.schema())?;
            writer.write(&batch)?;
            writer.finish()?;
            self.pieces.push(Piece::Frame(0, self.frame.len()));
            self.resolve();
            return Ok(());
        };
        let options = IpcWriteOptions::try_new(ALIGNMENT, false, MetadataVersion::V5)?;
        let schema = IpcDataGenerator::default().schema_to_bytes_with_dictionary_tracker(
            &batch.schema(),
            &mut DictionaryTracker::new(false),
            &options,
        );
        write_message(&mut self.frame, schema, &options)?;
        let header = arrow_ipc::writer::EncodedData {
            ipc_message: direct.header,
            arrow_data: Vec::new(),
        };
        write_message(&mut self.frame, header, &options)?;
        self.pieces.push(Piece::Frame(0, self.frame.len()));
        for piece in direct.pieces {
            let pad = piece.len().next_multiple_of(direct.align) - piece.len();
            if !piece.is_empty() {
                self.pieces.push(Piece::Kept(self.keep.len()));
                self.keep.push(piece);
            }
            if pad > 0 {
                self.pieces.push(Piece::Zeros(pad));
            }
        }
        let start = self.frame.len();
        self.frame.extend_from_slice(&EOS);
        self.pieces.push(Piece::Frame(start, self.frame.len()));
        self.resolve();
        Ok(())
    }

    /// Turns pieces into addresses, now that `frame` no longer moves.
    fn resolve(&mut self) {
        let frame = self.frame.as_ptr() as usize;
        for piece in &self.pieces {
            let segment = match *piece {
                Piece::Frame(start, end) => (frame + start, end - start),
                Piece::Kept(i) => (self.keep[i].as_ptr() as usize, self.keep[i].len()),
                Piece::Zeros(n) => (ZEROS.as_ptr() as usize, n),
            };
            // Adjacent ranges (the header's padding then the schema, say) are one copy.
            match self.segments.last_mut() {
                Some((at, len)) if *at + *len == segment.0 => *len += segment.1,
                _ => self.segments.push(segment),
            }
        }
    }

    /// `(address, length)` of each range, in stream order.
    pub fn segments(&self) -> &[(usize, usize)] {
        &self.segments
    }

    /// Drops the description and the buffers it kept alive.
    pub fn clear(&mut self) {
        self.frame.clear();
        self.pieces.clear();
        self.keep.clear();
        self.segments.clear();
    }

    /// The stream the ranges describe, concatenated (what the host assembles).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.append_to(&mut out);
        out
    }

    /// Appends the stream the ranges describe to `out`.
    pub fn append_to(&self, out: &mut Vec<u8>) {
        out.reserve(self.segments.iter().map(|&(_, len)| len).sum());
        for &(at, len) in &self.segments {
            // SAFETY: each range lies in `frame`, a kept buffer or ZEROS, all alive while
            // `self` is borrowed and unchanged since `describe`.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(at as *const u8, len) });
        }
    }
}

/// Encodes a whole batch as a stream (what the host sends; used by tests and benches).
pub fn encode_batch(batch: &RecordBatch) -> Result<Vec<u8>, UdfError> {
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, &batch.schema())?;
    writer.write(batch)?;
    writer.finish()?;
    Ok(out)
}
