//! Where the length and offset fields of a valid IPC body lie, and a way to overwrite them:
//! what the fuzz tests and the server's hostile-body tests corrupt. Always built, not behind a
//! feature: a feature only the tests turn on would give the test build another `lancet-ipc`,
//! and with it another `lancet` binary than the one users run (docs/building.md "One build").

use arrow_ipc::{Message, MessageHeader};

/// Which field a [`Site`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The i32 before each message's flatbuffer.
    MetadataLength,
    /// `Message.bodyLength`.
    BodyLength,
    /// `RecordBatch.length` (rows).
    BatchLength,
    /// `FieldNode.length`.
    NodeLength,
    /// `FieldNode.null_count`.
    NullCount,
    /// `Buffer.offset`.
    BufferOffset,
    /// `Buffer.length`.
    BufferLength,
    /// An entry of `RecordBatch.variadicBufferCounts`.
    VariadicCount,
    /// The 8-byte uncompressed length before a compressed buffer's data.
    UncompressedLength,
    /// The i32 before a file's trailing magic.
    FooterLength,
    /// `Block.offset`.
    BlockOffset,
    /// `Block.metaDataLength`.
    BlockMetaDataLength,
    /// `Block.bodyLength`.
    BlockBodyLength,
}

/// A little-endian integer field of `width` bytes at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    pub kind: Kind,
    /// The message (stream: 0 is the schema) or block (file: dictionary blocks first) the
    /// field belongs to; 0 for the footer length.
    pub message: usize,
    pub at: usize,
    pub width: usize,
}

impl Site {
    /// The value the field holds in `bytes`.
    pub fn read(&self, bytes: &[u8]) -> i64 {
        let b = &bytes[self.at..self.at + self.width];
        match self.width {
            4 => i32::from_le_bytes(b.try_into().unwrap()) as i64,
            _ => i64::from_le_bytes(b.try_into().unwrap()),
        }
    }

    /// Overwrites the field with `value` (truncated to 32 bits for 4-byte fields).
    pub fn write(&self, bytes: &mut [u8], value: i64) {
        let b = &mut bytes[self.at..self.at + self.width];
        match self.width {
            4 => b.copy_from_slice(&(value as i32).to_le_bytes()),
            _ => b.copy_from_slice(&value.to_le_bytes()),
        }
    }
}

/// Every length and offset field of a valid stream or file (`None` if it does not parse).
pub fn sites(bytes: &[u8]) -> Option<Vec<Site>> {
    let mut out = Vec::new();
    if bytes.starts_with(crate::ARROW_MAGIC) {
        file_sites(bytes, &mut out)?;
    } else {
        let mut pos = 0;
        let mut index = 0;
        while pos + 8 <= bytes.len() {
            let (prefix, len_at) = match bytes[pos..pos + 4] == [0xff; 4] {
                true => (8, pos + 4),
                false => (4, pos),
            };
            let len = i32::from_le_bytes(bytes[len_at..len_at + 4].try_into().ok()?);
            if len <= 0 {
                break;
            }
            out.push(Site {
                kind: Kind::MetadataLength,
                message: index,
                at: len_at,
                width: 4,
            });
            let start = pos + prefix;
            let meta = bytes.get(start..start + len as usize)?;
            let message = arrow_ipc::root_as_message(meta).ok()?;
            let body = message.bodyLength() as usize;
            let body_start = start + len as usize;
            message_sites(bytes, &message, body_start, index, &mut out);
            index += 1;
            pos = body_start + body;
        }
    }
    Some(out)
}

fn file_sites(bytes: &[u8], out: &mut Vec<Site>) -> Option<()> {
    let n = bytes.len();
    let footer_len = i32::from_le_bytes(bytes.get(n.checked_sub(10)?..n - 6)?.try_into().ok()?);
    out.push(Site {
        kind: Kind::FooterLength,
        message: 0,
        at: n - 10,
        width: 4,
    });
    let footer_start = n - 10 - usize::try_from(footer_len).ok()?;
    let footer = arrow_ipc::root_as_footer(&bytes[footer_start..n - 10]).ok()?;
    let blocks = footer
        .dictionaries()
        .into_iter()
        .chain(footer.recordBatches());
    let mut index = 0;
    for list in blocks {
        let base = offset_in(bytes, list.bytes());
        for (i, block) in list.iter().enumerate() {
            let at = base + i * 24;
            out.push(Site {
                kind: Kind::BlockOffset,
                message: index,
                at,
                width: 8,
            });
            out.push(Site {
                kind: Kind::BlockMetaDataLength,
                message: index,
                at: at + 8,
                width: 4,
            });
            out.push(Site {
                kind: Kind::BlockBodyLength,
                message: index,
                at: at + 16,
                width: 8,
            });
            let start = block.offset() as usize;
            let prefix = if bytes[start..start + 4] == [0xff; 4] {
                8
            } else {
                4
            };
            let len =
                i32::from_le_bytes(bytes[start + prefix - 4..start + prefix].try_into().ok()?);
            out.push(Site {
                kind: Kind::MetadataLength,
                message: index,
                at: start + prefix - 4,
                width: 4,
            });
            let meta = &bytes[start + prefix..start + prefix + len as usize];
            let message = arrow_ipc::root_as_message(meta).ok()?;
            let body_start = start + block.metaDataLength() as usize;
            message_sites(bytes, &message, body_start, index, out);
            index += 1;
        }
    }
    Some(())
}

fn offset_in(whole: &[u8], part: &[u8]) -> usize {
    part.as_ptr() as usize - whole.as_ptr() as usize
}

fn message_sites(
    bytes: &[u8],
    message: &Message<'_>,
    body_start: usize,
    index: usize,
    out: &mut Vec<Site>,
) {
    let mut push = |kind, at, width| {
        out.push(Site {
            kind,
            message: index,
            at,
            width,
        })
    };
    // Where a table's scalar field lies, if the table stores it (defaults may be left out).
    macro_rules! field {
        ($tab:expr, $vt:expr) => {
            match $tab.vtable().get($vt) {
                0 => None,
                o => Some(offset_in(bytes, $tab.buf()) + $tab.loc() + o as usize),
            }
        };
    }
    if let Some(at) = field!(message._tab, Message::VT_BODYLENGTH) {
        push(Kind::BodyLength, at, 8);
    }
    let batch = match message.header_type() {
        MessageHeader::RecordBatch => message.header_as_record_batch(),
        MessageHeader::DictionaryBatch => {
            message.header_as_dictionary_batch().and_then(|d| d.data())
        }
        _ => None,
    };
    let Some(batch) = batch else { return };
    if let Some(at) = field!(batch._tab, arrow_ipc::RecordBatch::VT_LENGTH) {
        push(Kind::BatchLength, at, 8);
    }
    if let Some(nodes) = batch.nodes() {
        let base = offset_in(bytes, nodes.bytes());
        for i in 0..nodes.len() {
            push(Kind::NodeLength, base + i * 16, 8);
            push(Kind::NullCount, base + i * 16 + 8, 8);
        }
    }
    if let Some(buffers) = batch.buffers() {
        let base = offset_in(bytes, buffers.bytes());
        for (i, b) in buffers.iter().enumerate() {
            push(Kind::BufferOffset, base + i * 16, 8);
            push(Kind::BufferLength, base + i * 16 + 8, 8);
            if batch.compression().is_some() && b.length() >= 8 {
                push(
                    Kind::UncompressedLength,
                    body_start + b.offset() as usize,
                    8,
                );
            }
        }
    }
    if let Some(counts) = batch.variadicBufferCounts() {
        let base = offset_in(bytes, counts.bytes());
        for i in 0..counts.len() {
            push(Kind::VariadicCount, base + i * 8, 8);
        }
    }
}
