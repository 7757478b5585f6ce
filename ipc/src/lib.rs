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
mod tests;
