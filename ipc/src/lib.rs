//! Checks an Arrow IPC body (stream format, or file format starting with `ARROW1`) before
//! arrow-ipc decodes it.
//!
//! arrow-ipc trusts the lengths it reads. A record batch declaring a body of 2^50 bytes makes
//! its `StreamReader` allocate that much up front (the allocation fails and the process
//! aborts); a file block does the same in `FileReader`; a compressed buffer claiming a
//! petabyte decompressed is allocated before decompression; a buffer pointing past the body
//! panics in `Buffer::slice_with_length`; many malformed schemas reach a `panic!` or `unwrap`
//! in `fb_to_schema`. None of that can be caught once it starts, so [`check`] walks every
//! message the reader will read, with the reader's own rules, and holds every length against
//! the bytes really there and every size the decoder will allocate against a budget
//! ([`Limits`]). What passes can still be rejected by arrow (offsets out of order, bad UTF-8):
//! as an error, not a crash. [`read`] is the check followed by arrow's reader.

mod batch;
mod schema;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use std::collections::HashMap;
use std::fmt;
use std::io::Cursor;
use std::panic::{AssertUnwindSafe, catch_unwind};

use arrow_array::RecordBatch;
use arrow_ipc::reader::{FileReader, StreamReader};
use arrow_ipc::{Message, MessageHeader, MetadataVersion};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};

/// What an IPC file starts and ends with.
pub const ARROW_MAGIC: &[u8; 6] = b"ARROW1";
const CONTINUATION: [u8; 4] = [0xff; 4];

/// How much decoding one body may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes arrow-ipc may allocate for the body: message bodies it copies (stream format),
    /// blocks it reads (file format, where a footer may list one block many times),
    /// decompressed buffers, and concatenated delta dictionaries.
    pub max_decoded_bytes: u64,
    /// Largest length one batch or array may declare. Only needed for what takes no bytes
    /// (Null columns, structs without fields, lists of size 0): everything else is held to
    /// its buffers by arrow.
    pub max_rows: u64,
}

impl Limits {
    /// A budget of `max_decoded_bytes`, and as many rows: legitimate data needs at least a
    /// bit per row, and callers size the byte budget generously, so one row per budget byte
    /// leaves boolean columns room while a Null column cannot claim 2^62 rows.
    pub fn new(max_decoded_bytes: u64) -> Self {
        Limits {
            max_decoded_bytes,
            max_rows: max_decoded_bytes,
        }
    }

    /// Whatever the caller asked, lengths stay far enough below 2^64 that arrow's
    /// `length * byte_width` (widths up to 32) and `(length + 1) * 8` cannot overflow.
    fn rows(&self) -> u64 {
        self.max_rows.min(1 << 48)
    }
}

/// Why a body was refused; the message names the message, field or block at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpcError(String);

impl IpcError {
    fn new(message: impl Into<String>) -> Self {
        IpcError(message.into())
    }
}

impl fmt::Display for IpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for IpcError {}

type Result<T, E = IpcError> = std::result::Result<T, E>;

/// Which of the two IPC formats a body is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Stream,
    File,
}

impl Format {
    /// The file format starts with its magic; anything else is read as a stream.
    pub fn of(bytes: &[u8]) -> Format {
        if bytes.starts_with(ARROW_MAGIC) {
            Format::File
        } else {
            Format::Stream
        }
    }
}

/// The arrow schema of a flatbuffer schema, checked first for everything arrow-ipc's
/// `fb_to_schema` would panic on (for callers reading messages themselves).
pub fn schema_of(fb: arrow_ipc::Schema<'_>) -> Result<Schema> {
    schema::check(fb)
}

/// Checks `bytes` in the format [`Format::of`] picks.
pub fn check(bytes: &[u8], limits: &Limits) -> Result<Format> {
    let format = Format::of(bytes);
    match format {
        Format::Stream => check_stream(bytes, limits)?,
        Format::File => check_file(bytes, limits)?,
    }
    Ok(format)
}

/// Checks an IPC stream the way `StreamReader` (and `StreamDecoder`) will read it: messages
/// up to the end-of-stream marker or the end of the bytes; what follows the marker is never
/// read and not checked.
pub fn check_stream(bytes: &[u8], limits: &Limits) -> Result<()> {
    let mut walk = Walk::new(limits);
    let mut pos = 0usize;
    for index in 0.. {
        let left = bytes.len() - pos;
        // StreamReader reads the length with read_exact: fewer than 4 bytes is a clean end.
        if left < 4 {
            break;
        }
        let mut word = read_u32(bytes, pos);
        let mut prefix = 4;
        if word == CONTINUATION {
            if left < 8 {
                return Err(IpcError::new(format!(
                    "message {index} has a continuation marker but no length (the stream is truncated)"
                )));
            }
            word = read_u32(bytes, pos + 4);
            prefix = 8;
        }
        let meta_len = i32::from_le_bytes(word);
        if meta_len == 0 {
            break;
        }
        pos += prefix;
        let left = bytes.len() - pos;
        let meta_len = usize::try_from(meta_len).map_err(|_| {
            IpcError::new(format!(
                "message {index} declares a negative metadata length ({meta_len})"
            ))
        })?;
        if meta_len > left {
            return Err(IpcError::new(format!(
                "message {index} declares {meta_len} bytes of metadata but only {left} remain"
            )));
        }
        let message = parse_message(&bytes[pos..pos + meta_len], &format!("message {index}"))?;
        pos += meta_len;
        let what = walk.name(&message, index);
        let body_len = message.bodyLength();
        let left = bytes.len() - pos;
        let body_len = usize::try_from(body_len)
            .ok()
            .filter(|&n| n <= left)
            .ok_or_else(|| {
                IpcError::new(format!(
                    "{what} declares a body of {body_len} bytes but only {left} remain"
                ))
            })?;
        // StreamReader copies every body into a buffer of its own.
        walk.spend(body_len as u64, || format!("the body of {what}"))?;
        // StreamReader copies the body to an aligned buffer; StreamDecoder reads it in place.
        let body = Body {
            bytes: &bytes[pos..pos + body_len],
            at: &[0, pos],
        };
        walk.message(&message, body, &what, Format::Stream)?;
        pos += body_len;
    }
    if walk.schema.is_none() {
        return Err(IpcError::new(
            "the stream holds no schema message (it is empty or ends at once)",
        ));
    }
    Ok(())
}

/// Checks an IPC file the way `FileReader` will read it: the trailer, the footer (schema,
/// dictionary blocks, record batch blocks) and every block the footer lists. The messages
/// between the leading magic and the footer are only read through the blocks.
pub fn check_file(bytes: &[u8], limits: &Limits) -> Result<()> {
    let n = bytes.len();
    // Leading magic and its padding, footer length, trailing magic.
    const HEAD: usize = 8;
    const TRAILER: usize = 10;
    if !bytes.starts_with(ARROW_MAGIC) {
        return Err(IpcError::new("an Arrow IPC file must start with ARROW1"));
    }
    if n < HEAD + TRAILER || &bytes[n - ARROW_MAGIC.len()..] != ARROW_MAGIC {
        return Err(IpcError::new(format!(
            "the {n}-byte Arrow IPC file does not end with a footer length and ARROW1 (is it truncated?)"
        )));
    }
    let footer_len = i32::from_le_bytes(read_u32(bytes, n - TRAILER));
    let room = n - TRAILER - HEAD;
    let footer_len = usize::try_from(footer_len)
        .ok()
        .filter(|&len| len <= room)
        .ok_or_else(|| {
            IpcError::new(format!(
                "the file footer declares {footer_len} bytes but only {room} lie between the leading magic and the trailer"
            ))
        })?;
    let footer_start = n - TRAILER - footer_len;
    let footer = arrow_ipc::root_as_footer(&bytes[footer_start..n - TRAILER])
        .map_err(|e| IpcError::new(format!("the file footer is not a valid flatbuffer: {e}")))?;
    let fb_schema = footer
        .schema()
        .ok_or_else(|| IpcError::new("the file footer has no schema"))?;
    let mut walk = Walk::new(limits);
    walk.schema = Some(
        schema::check(fb_schema).map_err(|e| IpcError::new(format!("the footer's schema: {e}")))?,
    );
    if let Some(metadata) = footer.custom_metadata()
        && metadata
            .iter()
            .any(|kv| kv.key().is_none() || kv.value().is_none())
    {
        return Err(IpcError::new(
            "the file footer has a metadata entry without a key or value",
        ));
    }
    let batches = footer
        .recordBatches()
        .ok_or_else(|| IpcError::new("the file footer has no record batch list"))?;
    let file = FileBlocks {
        bytes,
        data_end: footer_start,
        version: footer.version(),
    };
    for (i, block) in footer.dictionaries().into_iter().flatten().enumerate() {
        let what = format!("dictionary block {i}");
        let (message, body, meta) = file.block(&mut walk, block, &what)?;
        // FileReader reads each block into an aligned buffer: the body follows the metadata.
        let body = Body {
            bytes: body,
            at: &[meta],
        };
        if message.header_type() != MessageHeader::DictionaryBatch {
            return Err(IpcError::new(format!(
                "{what} holds a {:?} message, not a dictionary batch",
                message.header_type()
            )));
        }
        walk.message(&message, body, &what, Format::File)?;
    }
    for (i, block) in batches.iter().enumerate() {
        let what = format!("record batch block {i}");
        let (message, body, meta) = file.block(&mut walk, block, &what)?;
        let body = Body {
            bytes: body,
            at: &[meta],
        };
        match message.header_type() {
            MessageHeader::RecordBatch => walk.message(&message, body, &what, Format::File)?,
            // FileReader yields nothing for it (and stops there).
            MessageHeader::NONE => {}
            other => {
                return Err(IpcError::new(format!(
                    "{what} holds a {other:?} message, not a record batch"
                )));
            }
        }
    }
    Ok(())
}

struct FileBlocks<'a> {
    bytes: &'a [u8],
    /// Blocks must lie before the footer.
    data_end: usize,
    version: MetadataVersion,
}

impl<'a> FileBlocks<'a> {
    /// The message and body of `block`, checked to lie inside the file's data and to fit
    /// the budget before anything is parsed.
    fn block(
        &self,
        walk: &mut Walk,
        block: &arrow_ipc::Block,
        what: &str,
    ) -> Result<(Message<'a>, &'a [u8], usize)> {
        let (offset, meta_len, body_len) =
            (block.offset(), block.metaDataLength(), block.bodyLength());
        let outside = || {
            IpcError::new(format!(
                "{what} (offset {offset}, metaDataLength {meta_len}, bodyLength {body_len}) lies outside the file's {} data bytes",
                self.data_end
            ))
        };
        let (Ok(start), Ok(meta), Ok(body)) = (
            usize::try_from(offset),
            usize::try_from(meta_len),
            usize::try_from(body_len),
        ) else {
            return Err(outside());
        };
        let end = start
            .checked_add(meta)
            .and_then(|e| e.checked_add(body))
            .filter(|&end| start >= 8 && end <= self.data_end)
            .ok_or_else(outside)?;
        // FileReader reads every block it is pointed at into a new buffer, as often as the
        // footer lists it.
        walk.spend((meta + body) as u64, || what.to_string())?;
        let block_bytes = &self.bytes[start..end];
        let (prefix, len_at) = if block_bytes.starts_with(&CONTINUATION) {
            (8, 4)
        } else {
            (4, 0)
        };
        if meta < prefix {
            return Err(IpcError::new(format!(
                "{what} has {meta} bytes of metadata, too few for its {prefix}-byte length prefix"
            )));
        }
        let fb_len = i32::from_le_bytes(read_u32(block_bytes, len_at));
        let fb_len = usize::try_from(fb_len)
            .ok()
            .filter(|&len| len <= meta - prefix)
            .ok_or_else(|| {
                IpcError::new(format!(
                    "{what}'s message declares {fb_len} bytes of metadata but the block holds {}",
                    meta - prefix
                ))
            })?;
        let message = parse_message(&block_bytes[prefix..prefix + fb_len], what)?;
        // FileDecoder refuses messages of another version, except in files of version V1.
        if self.version != MetadataVersion::V1 && message.version() != self.version {
            return Err(IpcError::new(format!(
                "{what} is of metadata version {:?} in a file of version {:?}",
                message.version(),
                self.version
            )));
        }
        let declared = message.bodyLength();
        if usize::try_from(declared).map_or(true, |d| d > body) {
            return Err(IpcError::new(format!(
                "{what}'s message declares a body of {declared} bytes but its block holds {body}"
            )));
        }
        Ok((message, &block_bytes[meta..], meta))
    }
}

/// A message body, and where the readers place its first byte relative to an address they
/// align: what decides whether a buffer inside it is aligned for its values.
#[derive(Clone, Copy)]
pub(crate) struct Body<'a> {
    pub bytes: &'a [u8],
    pub at: &'a [usize],
}

fn read_u32(bytes: &[u8], at: usize) -> [u8; 4] {
    bytes[at..at + 4].try_into().expect("4 bytes")
}

fn parse_message<'a>(meta: &'a [u8], what: &str) -> Result<Message<'a>> {
    arrow_ipc::root_as_message(meta).map_err(|e| {
        IpcError::new(format!(
            "{what}: the metadata is not a valid flatbuffer message: {e}"
        ))
    })
}

/// State carried from message to message, as the readers carry it.
struct Walk<'l> {
    limits: &'l Limits,
    decoded: u64,
    schema: Option<Schema>,
    /// Bytes of each dictionary's values so far: a delta batch makes arrow concatenate the
    /// old values with the new ones, a fresh allocation of both.
    dictionaries: HashMap<i64, u64>,
    record_batches: usize,
    dictionary_batches: usize,
}

impl<'l> Walk<'l> {
    fn new(limits: &'l Limits) -> Self {
        Walk {
            limits,
            decoded: 0,
            schema: None,
            dictionaries: HashMap::new(),
            record_batches: 0,
            dictionary_batches: 0,
        }
    }

    /// How errors name this message of a stream: "record batch 2", "dictionary batch 0".
    fn name(&mut self, message: &Message<'_>, index: usize) -> String {
        match message.header_type() {
            MessageHeader::RecordBatch => {
                self.record_batches += 1;
                format!("record batch {}", self.record_batches - 1)
            }
            MessageHeader::DictionaryBatch => {
                self.dictionary_batches += 1;
                format!("dictionary batch {}", self.dictionary_batches - 1)
            }
            MessageHeader::Schema => format!("message {index} (the schema)"),
            _ => format!("message {index}"),
        }
    }

    fn spend(&mut self, bytes: u64, what: impl FnOnce() -> String) -> Result<()> {
        self.decoded = self.decoded.saturating_add(bytes);
        if self.decoded > self.limits.max_decoded_bytes {
            return Err(IpcError::new(format!(
                "decoding {} would take {bytes} more bytes, {} in all, over the limit of {} bytes",
                what(),
                self.decoded,
                self.limits.max_decoded_bytes
            )));
        }
        Ok(())
    }

    fn message(
        &mut self,
        message: &Message<'_>,
        body: Body<'_>,
        what: &str,
        format: Format,
    ) -> Result<()> {
        let header = message.header_type();
        if header != MessageHeader::Schema && self.schema.is_none() {
            return Err(IpcError::new(format!(
                "{what} comes before the schema (a stream starts with its schema)"
            )));
        }
        match header {
            MessageHeader::Schema if self.schema.is_some() => {
                Err(IpcError::new(format!("{what} is a second schema message")))
            }
            MessageHeader::Schema => {
                let fb = message
                    .header_as_schema()
                    .ok_or_else(|| IpcError::new(format!("{what} has no schema header")))?;
                self.schema = Some(schema::check(fb)?);
                Ok(())
            }
            MessageHeader::RecordBatch => {
                let header = message
                    .header_as_record_batch()
                    .ok_or_else(|| IpcError::new(format!("{what} has no record batch header")))?;
                let fields = self
                    .schema
                    .as_ref()
                    .expect("checked above")
                    .fields()
                    .clone();
                let checked =
                    batch::check(header, body, &fields, message.version(), self.limits, what)?;
                self.spend(checked.decompressed, || {
                    format!("the compressed buffers of {what}")
                })
            }
            MessageHeader::DictionaryBatch => self.dictionary(message, body, what),
            other if format == Format::Stream => Err(IpcError::new(format!(
                "{what} is a {other:?} message, which an Arrow IPC stream of record batches cannot hold"
            ))),
            other => Err(IpcError::new(format!("{what} is a {other:?} message"))),
        }
    }

    fn dictionary(&mut self, message: &Message<'_>, body: Body<'_>, what: &str) -> Result<()> {
        let dict = message
            .header_as_dictionary_batch()
            .ok_or_else(|| IpcError::new(format!("{what} has no dictionary batch header")))?;
        let data = dict
            .data()
            .ok_or_else(|| IpcError::new(format!("{what} holds no record batch")))?;
        let id = dict.id();
        let schema = self.schema.as_ref().expect("checked by the caller");
        #[allow(deprecated)] // arrow-ipc finds the dictionary's field this way.
        let value_type = match schema
            .fields_with_dict_id(id)
            .first()
            .map(|f| f.data_type())
        {
            Some(DataType::Dictionary(_, values)) => values.as_ref().clone(),
            _ => {
                return Err(IpcError::new(format!(
                    "{what} has id {id}, which no dictionary field of the schema uses"
                )));
            }
        };
        let fields = vec![Field::new("", value_type, true)].into();
        let checked = batch::check(data, body, &fields, message.version(), self.limits, what)?;
        self.spend(checked.decompressed, || {
            format!("the compressed buffers of {what}")
        })?;
        if dict.isDelta() {
            let before = *self.dictionaries.get(&id).ok_or_else(|| {
                IpcError::new(format!(
                    "{what} is a delta for dictionary {id}, which has no values yet"
                ))
            })?;
            let after = before.saturating_add(checked.content);
            self.spend(after, || format!("concatenating delta {what}"))?;
            self.dictionaries.insert(id, after);
        } else {
            self.dictionaries.insert(id, checked.content);
        }
        Ok(())
    }
}

/// Why [`read`] failed.
#[derive(Debug)]
pub enum ReadError {
    /// The check refused the body before arrow saw it.
    Invalid(IpcError),
    /// arrow's reader refused it.
    Arrow(ArrowError),
    /// arrow's reader panicked on a body the check let through: a gap in the check.
    Panicked(String),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Invalid(e) => e.fmt(f),
            ReadError::Arrow(e) => e.fmt(f),
            ReadError::Panicked(m) => write!(f, "the Arrow IPC decoder failed on it ({m})"),
        }
    }
}

impl std::error::Error for ReadError {}

/// [`check`], then arrow's `StreamReader` or `FileReader` over the bytes: the schema and
/// every batch.
pub fn read(bytes: &[u8], limits: &Limits) -> Result<(SchemaRef, Vec<RecordBatch>), ReadError> {
    let format = check(bytes, limits).map_err(ReadError::Invalid)?;
    // Defence in depth: should the check miss a case arrow panics on, this request fails
    // rather than the thread serving it.
    let decoded = catch_unwind(AssertUnwindSafe(|| -> Result<_, ArrowError> {
        match format {
            Format::File => {
                let reader = FileReader::try_new(Cursor::new(bytes), None)?;
                let schema = reader.schema();
                Ok((schema, reader.collect::<Result<Vec<_>, _>>()?))
            }
            Format::Stream => {
                let reader = StreamReader::try_new(Cursor::new(bytes), None)?;
                let schema = reader.schema();
                Ok((schema, reader.collect::<Result<Vec<_>, _>>()?))
            }
        }
    }));
    match decoded {
        Ok(result) => result.map_err(ReadError::Arrow),
        Err(panic) => Err(ReadError::Panicked(
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic")
                .to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
    use arrow_array::types::Int32Type;
    use arrow_array::{
        ArrayRef, DictionaryArray, Int32Array, Int64Array, StringArray, StringViewArray,
        StructArray,
    };
    use arrow_buffer::NullBuffer;
    use arrow_ipc::CompressionType;
    use arrow_ipc::writer::{FileWriter, IpcWriteOptions, StreamWriter};
    use flatbuffers::{FlatBufferBuilder, WIPOffset};

    use super::*;
    use crate::testing::{Kind, sites};

    fn sample() -> RecordBatch {
        RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef),
            (
                "text",
                Arc::new(StringArray::from(vec!["a", "bb", "ccc"])) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    fn stream_with(batch: &RecordBatch, options: IpcWriteOptions) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = StreamWriter::try_new_with_options(&mut out, &batch.schema(), options).unwrap();
        w.write(batch).unwrap();
        w.finish().unwrap();
        out
    }

    fn stream(batch: &RecordBatch) -> Vec<u8> {
        stream_with(batch, IpcWriteOptions::default())
    }

    fn compressed(batch: &RecordBatch, codec: CompressionType) -> Vec<u8> {
        let options = IpcWriteOptions::default()
            .try_with_compression(Some(codec))
            .unwrap();
        stream_with(batch, options)
    }

    fn file(batch: &RecordBatch) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = FileWriter::try_new(&mut out, &batch.schema()).unwrap();
        w.write(batch).unwrap();
        w.finish().unwrap();
        out
    }

    fn limits() -> Limits {
        Limits::new(1 << 30)
    }

    /// `bytes` with the `nth` field of `kind` set to `value`.
    fn patched(bytes: &[u8], kind: Kind, nth: usize, value: i64) -> Vec<u8> {
        let site = sites(bytes)
            .unwrap()
            .into_iter()
            .filter(|s| s.kind == kind)
            .nth(nth)
            .unwrap();
        let mut out = bytes.to_vec();
        site.write(&mut out, value);
        out
    }

    fn refused(bytes: &[u8], want: &str) {
        let e = check(bytes, &limits()).expect_err(want).to_string();
        assert!(e.contains(want), "{e}\n(wanted: {want})");
        assert!(matches!(read(bytes, &limits()), Err(ReadError::Invalid(_))));
    }

    /// arrow's own reader panics (or aborts) on it: why the check exists.
    fn arrow_panics(bytes: &[u8]) {
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let reader = StreamReader::try_new(Cursor::new(bytes), None)?;
            reader.collect::<Result<Vec<_>, _>>()
        }));
        assert!(outcome.is_err(), "arrow did not panic: {outcome:?}");
    }

    #[test]
    fn valid_bodies_pass_and_read_as_written() {
        let batch = sample();
        let dict: DictionaryArray<Int32Type> = vec!["x", "y", "x"].into_iter().collect();
        let views = StringViewArray::from(vec!["short", "a string longer than twelve bytes", "c"]);
        let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), 2);
        for i in 0..3 {
            vectors.values().append_slice(&[i as f32, 0.5]);
            vectors.append(true);
        }
        let other = RecordBatch::try_from_iter([
            ("d", Arc::new(dict) as ArrayRef),
            ("v", Arc::new(views) as ArrayRef),
            ("f", Arc::new(vectors.finish()) as ArrayRef),
        ])
        .unwrap();
        for b in [&batch, &other] {
            for bytes in [
                stream(b),
                file(b),
                compressed(b, CompressionType::LZ4_FRAME),
                compressed(b, CompressionType::ZSTD),
            ] {
                let (schema, batches) = read(&bytes, &limits()).unwrap();
                assert_eq!(schema, b.schema());
                assert_eq!(batches, vec![b.clone()]);
            }
        }
    }

    #[test]
    fn refuses_a_body_longer_than_what_remains() {
        // The schema message has no body, so its bodyLength is left out: field 0 is the batch's.
        let bytes = patched(&stream(&sample()), Kind::BodyLength, 0, 1 << 50);
        refused(
            &bytes,
            "record batch 0 declares a body of 1125899906842624 bytes but only",
        );
        let bytes = patched(&stream(&sample()), Kind::MetadataLength, 1, i32::MAX as i64);
        refused(
            &bytes,
            "message 1 declares 2147483647 bytes of metadata but only",
        );
        let bytes = patched(&stream(&sample()), Kind::MetadataLength, 0, -8);
        refused(&bytes, "negative metadata length (-8)");
    }

    #[test]
    fn refuses_buffers_outside_the_body() {
        let good = stream(&sample());
        let body_bytes = sites(&good)
            .unwrap()
            .into_iter()
            .find(|s| s.kind == Kind::BodyLength && s.message == 1);
        let body = body_bytes.unwrap().read(&good);
        let bytes = patched(&good, Kind::BufferOffset, 1, body);
        refused(
            &bytes,
            &format!("buffer 1 (offset {body}, length 24) lies outside the {body}-byte body"),
        );
        arrow_panics(&bytes);
        refused(&patched(&good, Kind::BufferLength, 3, i64::MAX), "buffer 3");
        refused(
            &patched(&good, Kind::BufferOffset, 0, -1),
            "buffer 0 (offset -1",
        );
    }

    #[test]
    fn refuses_compressed_buffers_claiming_too_much() {
        for codec in [CompressionType::LZ4_FRAME, CompressionType::ZSTD] {
            let good = compressed(&sample(), codec);
            let bytes = patched(&good, Kind::UncompressedLength, 0, 1 << 50);
            refused(
                &bytes,
                "declares 1125899906842624 bytes decompressed, over the limit",
            );
            refused(
                &patched(&good, Kind::UncompressedLength, 0, -2),
                "decompressed length of -2",
            );
        }
    }

    #[test]
    fn refuses_an_lz4_frame_that_outgrows_its_declared_size() {
        let zeros = RecordBatch::try_from_iter([(
            "z",
            Arc::new(Int64Array::from(vec![0; 100_000])) as ArrayRef,
        )])
        .unwrap();
        let good = compressed(&zeros, CompressionType::LZ4_FRAME);
        let data = sites(&good)
            .unwrap()
            .into_iter()
            .find(|s| s.kind == Kind::UncompressedLength)
            .unwrap();
        assert_eq!(data.read(&good), 800_000);
        refused(
            &patched(&good, Kind::UncompressedLength, 0, 64),
            "decompresses to more than the 64 bytes it declares",
        );
    }

    #[test]
    fn refuses_hostile_field_nodes() {
        let good = stream(&sample());
        refused(
            &patched(&good, Kind::NodeLength, 0, -1),
            "field `id` has a length of -1",
        );
        refused(
            &patched(&good, Kind::NodeLength, 1, 1 << 40),
            "field `text` declares 1099511627776 values",
        );
        refused(
            &patched(&good, Kind::NullCount, 0, 4),
            "field `id` declares 4 nulls in 3 values",
        );
        refused(
            &patched(&good, Kind::BatchLength, 0, -3),
            "a length of -3 rows",
        );
    }

    #[test]
    fn refuses_fixed_size_lists_that_overflow() {
        let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), 1 << 20);
        vectors.values().append_slice(&vec![0.0; 1 << 20]);
        vectors.append(true);
        let batch =
            RecordBatch::try_from_iter([("v", Arc::new(vectors.finish()) as ArrayRef)]).unwrap();
        let bytes = patched(&stream(&batch), Kind::NodeLength, 0, 1 << 45);
        let limits = Limits {
            max_decoded_bytes: 1 << 30,
            max_rows: u64::MAX,
        };
        let e = check(&bytes, &limits).unwrap_err().to_string();
        assert!(e.contains("35184372088832 lists of 1048576 values"), "{e}");
    }

    #[test]
    fn refuses_a_short_struct_validity_bitmap() {
        let ints: ArrayRef = Arc::new(Int32Array::from(vec![1; 100]));
        let nulls = NullBuffer::from((0..100).map(|i| i % 3 != 0).collect::<Vec<_>>());
        let s = StructArray::try_new(
            vec![Field::new("i", DataType::Int32, false)].into(),
            vec![ints],
            Some(nulls),
        )
        .unwrap();
        let good = stream(&RecordBatch::try_from_iter([("s", Arc::new(s) as ArrayRef)]).unwrap());
        let bytes = patched(&good, Kind::BufferLength, 0, 8);
        refused(
            &bytes,
            "field `s` declares 34 nulls but has a validity bitmap of 8 bytes for 100 values",
        );
        arrow_panics(&bytes);
    }

    /// A framed message (continuation, length, flatbuffer padded to 8) and its body.
    fn frame(meta: &[u8], body: &[u8]) -> Vec<u8> {
        let padded = meta.len().next_multiple_of(8);
        let mut out = CONTINUATION.to_vec();
        out.extend_from_slice(&(padded as i32).to_le_bytes());
        out.extend_from_slice(meta);
        out.resize(8 + padded, 0);
        out.extend_from_slice(body);
        out
    }

    fn message_bytes<'a>(
        fbb: &mut FlatBufferBuilder<'a>,
        kind: MessageHeader,
        header: WIPOffset<flatbuffers::UnionWIPOffset>,
        body_len: i64,
    ) -> Vec<u8> {
        let mut m = arrow_ipc::MessageBuilder::new(fbb);
        m.add_version(MetadataVersion::V5);
        m.add_header_type(kind);
        m.add_header(header);
        m.add_bodyLength(body_len);
        let m = m.finish();
        fbb.finish(m, None);
        fbb.finished_data().to_vec()
    }

    /// A stream whose schema has the one field `make` builds.
    fn schema_stream(
        make: impl for<'a> FnOnce(&mut FlatBufferBuilder<'a>) -> WIPOffset<arrow_ipc::Field<'a>>,
    ) -> Vec<u8> {
        let mut fbb = FlatBufferBuilder::new();
        let field = make(&mut fbb);
        let fields = fbb.create_vector(&[field]);
        let mut s = arrow_ipc::SchemaBuilder::new(&mut fbb);
        s.add_fields(fields);
        let schema = s.finish().as_union_value();
        let mut out = frame(
            &message_bytes(&mut fbb, MessageHeader::Schema, schema, 0),
            &[],
        );
        out.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        out
    }

    fn field<'a>(
        fbb: &mut FlatBufferBuilder<'a>,
        ty: arrow_ipc::Type,
        type_: Option<WIPOffset<flatbuffers::UnionWIPOffset>>,
        children: &[WIPOffset<arrow_ipc::Field<'a>>],
    ) -> WIPOffset<arrow_ipc::Field<'a>> {
        let name = fbb.create_string("f");
        let children = fbb.create_vector(children);
        let mut f = arrow_ipc::FieldBuilder::new(fbb);
        f.add_name(name);
        f.add_type_type(ty);
        if let Some(t) = type_ {
            f.add_type_(t);
        }
        f.add_children(children);
        f.finish()
    }

    fn null_field<'a>(fbb: &mut FlatBufferBuilder<'a>) -> WIPOffset<arrow_ipc::Field<'a>> {
        let null = arrow_ipc::NullBuilder::new(fbb).finish().as_union_value();
        field(fbb, arrow_ipc::Type::Null, Some(null), &[])
    }

    fn int<'a>(fbb: &mut FlatBufferBuilder<'a>, bits: i32) -> WIPOffset<arrow_ipc::Int<'a>> {
        let mut i = arrow_ipc::IntBuilder::new(fbb);
        i.add_bitWidth(bits);
        i.add_is_signed(true);
        i.finish()
    }

    #[test]
    fn refuses_schemas_arrow_would_panic_on() {
        use arrow_ipc::Type;
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                schema_stream(|fbb| {
                    let i = int(fbb, 7).as_union_value();
                    field(fbb, Type::Int, Some(i), &[])
                }),
                "field `f`: an integer of 7 bits",
            ),
            (
                schema_stream(|fbb| {
                    let l = arrow_ipc::ListBuilder::new(fbb).finish().as_union_value();
                    field(fbb, Type::List, Some(l), &[])
                }),
                "type List with 0 children instead of 1",
            ),
            (
                schema_stream(|fbb| {
                    let mut l = arrow_ipc::FixedSizeListBuilder::new(fbb);
                    l.add_listSize(-4);
                    let l = l.finish().as_union_value();
                    let child = null_field(fbb);
                    field(fbb, Type::FixedSizeList, Some(l), &[child])
                }),
                // arrow takes this schema; refused anyway, as no data can match it.
                "a fixed-size list of size -4",
            ),
            (
                schema_stream(|fbb| {
                    let mut d = arrow_ipc::DecimalBuilder::new(fbb);
                    d.add_precision(300);
                    d.add_scale(2);
                    d.add_bitWidth(128);
                    let d = d.finish().as_union_value();
                    field(fbb, Type::Decimal, Some(d), &[])
                }),
                "a decimal of precision 300 and scale 2",
            ),
            (
                schema_stream(|fbb| {
                    let members: Vec<_> = (0..200).map(|_| null_field(fbb)).collect();
                    let mut u = arrow_ipc::UnionBuilder::new(fbb);
                    u.add_mode(arrow_ipc::UnionMode::Sparse);
                    let u = u.finish().as_union_value();
                    field(fbb, Type::Union, Some(u), &members)
                }),
                "a union of 200 members",
            ),
            (
                schema_stream(|fbb| {
                    let mut d = arrow_ipc::DictionaryEncodingBuilder::new(fbb);
                    d.add_id(1);
                    let d = d.finish();
                    let utf8 = arrow_ipc::Utf8Builder::new(fbb).finish().as_union_value();
                    let name = fbb.create_string("f");
                    let mut f = arrow_ipc::FieldBuilder::new(fbb);
                    f.add_name(name);
                    f.add_type_type(Type::Utf8);
                    f.add_type_(utf8);
                    f.add_dictionary(d);
                    f.finish()
                }),
                "a dictionary without an index type",
            ),
            (
                schema_stream(|fbb| field(fbb, Type::NONE, None, &[])),
                "type NONE, which arrow cannot read",
            ),
        ];
        for (bytes, want) in cases {
            refused(&bytes, want);
            if !want.contains("fixed-size list") {
                arrow_panics(&bytes);
            }
        }
    }

    /// The sample's schema message, then a record batch message built from these parts.
    fn batch_stream(
        nodes: &[(i64, i64)],
        buffers: &[(i64, i64)],
        variadic: Option<&[i64]>,
        body: &[u8],
    ) -> Vec<u8> {
        let mut out = Vec::new();
        StreamWriter::try_new(&mut out, &sample().schema())
            .unwrap()
            .finish()
            .unwrap();
        out.truncate(out.len() - 8);
        let mut fbb = FlatBufferBuilder::new();
        let nodes: Vec<_> = nodes
            .iter()
            .map(|&(l, n)| arrow_ipc::FieldNode::new(l, n))
            .collect();
        let buffers: Vec<_> = buffers
            .iter()
            .map(|&(o, l)| arrow_ipc::Buffer::new(o, l))
            .collect();
        let nodes = fbb.create_vector(&nodes);
        let buffers = fbb.create_vector(&buffers);
        let variadic = variadic.map(|v| fbb.create_vector(v));
        let mut b = arrow_ipc::RecordBatchBuilder::new(&mut fbb);
        b.add_length(3);
        b.add_nodes(nodes);
        b.add_buffers(buffers);
        if let Some(v) = variadic {
            b.add_variadicBufferCounts(v);
        }
        let b = b.finish().as_union_value();
        out.extend(frame(
            &message_bytes(&mut fbb, MessageHeader::RecordBatch, b, body.len() as i64),
            body,
        ));
        out
    }

    #[test]
    fn refuses_unused_or_missing_variadic_counts_and_buffers() {
        let body = [0u8; 64];
        let buffers = [(0, 0), (0, 24), (0, 0), (24, 16), (40, 6)];
        let good = batch_stream(&[(3, 0), (3, 0)], &buffers, None, &body);
        assert!(check(&good, &limits()).is_ok());
        let extra = batch_stream(&[(3, 0), (3, 0)], &buffers, Some(&[1]), &body);
        refused(
            &extra,
            "1 variadic buffer counts more than its view columns use",
        );
        arrow_panics(&extra);
        refused(
            &batch_stream(&[(3, 0)], &buffers, None, &body),
            "1 field nodes, fewer than the schema needs (none left for `text`)",
        );
        refused(
            &batch_stream(&[(3, 0), (3, 0)], &buffers[..4], None, &body),
            "4 buffers, fewer than the schema needs",
        );
    }

    #[test]
    fn refuses_a_dictionary_batch_without_data() {
        let dict: DictionaryArray<Int32Type> = vec!["x", "y"].into_iter().collect();
        let batch = RecordBatch::try_from_iter([("d", Arc::new(dict) as ArrayRef)]).unwrap();
        let mut out = Vec::new();
        StreamWriter::try_new(&mut out, &batch.schema())
            .unwrap()
            .finish()
            .unwrap();
        out.truncate(out.len() - 8);
        let mut fbb = FlatBufferBuilder::new();
        let mut d = arrow_ipc::DictionaryBatchBuilder::new(&mut fbb);
        d.add_id(0);
        let d = d.finish().as_union_value();
        out.extend(frame(
            &message_bytes(&mut fbb, MessageHeader::DictionaryBatch, d, 0),
            &[],
        ));
        refused(&out, "dictionary batch 0 holds no record batch");
        arrow_panics(&out);
    }

    #[test]
    fn refuses_broken_files() {
        let good = file(&sample());
        assert_eq!(check(&good, &limits()), Ok(Format::File));
        let n = good.len();
        refused(
            &patched(&good, Kind::FooterLength, 0, -1),
            "the file footer declares -1 bytes",
        );
        refused(
            &patched(&good, Kind::FooterLength, 0, i32::MAX as i64),
            "the file footer declares 2147483647 bytes but only",
        );
        refused(
            &good[..n - 3],
            "does not end with a footer length and ARROW1",
        );
        refused(
            &patched(&good, Kind::BlockOffset, 0, 1 << 40),
            "record batch block 0 (offset 1099511627776",
        );
        refused(
            &patched(&good, Kind::BlockBodyLength, 0, 1 << 50),
            "lies outside the file's",
        );
        refused(
            &patched(&good, Kind::BlockMetaDataLength, 0, 2),
            "too few for its 8-byte length prefix",
        );
        // The footer's own bytes as a flatbuffer: garbage in, an error out.
        let mut bad = good.clone();
        let footer_len = i32::from_le_bytes(bad[n - 10..n - 6].try_into().unwrap()) as usize;
        bad[n - 10 - footer_len..n - 10].fill(0xEE);
        refused(&bad, "the file footer is not a valid flatbuffer");
    }

    #[test]
    fn counts_what_decoding_allocates_against_the_budget() {
        let bytes = stream(&sample());
        let e = check(&bytes, &Limits::new(16)).unwrap_err().to_string();
        assert!(e.contains("over the limit of 16 bytes"), "{e}");
        let bytes = file(&sample());
        let e = check(&bytes, &Limits::new(100)).unwrap_err().to_string();
        assert!(e.contains("record batch block 0"), "{e}");
        // 800,000 bytes of zeros compress to a few hundred: the body alone fits the budget,
        // its decompression does not.
        let zeros = RecordBatch::try_from_iter([(
            "z",
            Arc::new(Int64Array::from(vec![0; 100_000])) as ArrayRef,
        )])
        .unwrap();
        let bytes = compressed(&zeros, CompressionType::ZSTD);
        assert!(check(&bytes, &Limits::new(800_000 + 4096)).is_ok());
        let e = check(&bytes, &Limits::new(100_000))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("800000 bytes decompressed, over the limit"),
            "{e}"
        );
    }

    #[test]
    fn ignores_what_follows_the_end_of_the_stream() {
        let mut bytes = stream(&sample());
        bytes.extend_from_slice(b"anything at all");
        assert!(check(&bytes, &limits()).is_ok());
        refused(&[], "the stream holds no schema message");
        refused(
            &[0xff, 0xff, 0xff, 0xff, 1],
            "continuation marker but no length",
        );
    }
}
