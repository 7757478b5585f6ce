//! The record batch checks (also for the batch inside a dictionary batch): every buffer inside
//! the body, compressed buffers' declared sizes, and the schema walked node by node and
//! buffer by buffer in the order arrow-ipc's `RecordBatchDecoder::create_array` consumes
//! them, with the few length checks arrow leaves to `slice_with_length`, `BooleanBuffer::new`
//! or an unchecked multiplication.

use std::collections::VecDeque;
use std::io::Read;

use arrow_ipc::{CompressionType, MetadataVersion};
use arrow_schema::{DataType, Field, Fields, UnionMode};

use crate::{Body, IpcError, Limits, Result};

/// What decoding a checked batch costs.
pub(crate) struct Checked {
    /// Bytes allocated for decompressed buffers.
    pub decompressed: u64,
    /// Bytes of all buffers once decoded (a dictionary's size, for delta concatenation).
    pub content: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Codec {
    Lz4,
    Zstd,
}

/// arrow's marker, in a compressed buffer's 8-byte length prefix, of data left uncompressed.
const NOT_COMPRESSED: i64 = -1;

pub(crate) fn check(
    batch: arrow_ipc::RecordBatch<'_>,
    body: Body<'_>,
    fields: &Fields,
    version: MetadataVersion,
    limits: &Limits,
    what: &str,
) -> Result<Checked> {
    let bad = |why: String| IpcError::new(format!("{what}: {why}"));
    let (at, body) = (body.at, body.bytes);
    let length = batch.length();
    if u64::try_from(length).map_or(true, |n| n > limits.rows()) {
        return Err(bad(format!(
            "a length of {length} rows (the limit is {})",
            limits.rows()
        )));
    }
    let codec = match batch.compression().map(|c| c.codec()) {
        None => None,
        Some(CompressionType::LZ4_FRAME) => Some(Codec::Lz4),
        Some(CompressionType::ZSTD) => Some(Codec::Zstd),
        Some(other) => return Err(bad(format!("compression {other:?} is not supported"))),
    };
    let nodes: Vec<(i64, i64)> = batch
        .nodes()
        .ok_or_else(|| bad("no field node list".into()))?
        .iter()
        .map(|n| (n.length(), n.null_count()))
        .collect();
    let descriptors = batch
        .buffers()
        .ok_or_else(|| bad("no buffer list".into()))?;
    let mut checked = Checked {
        decompressed: 0,
        content: 0,
    };
    // Every listed buffer, not only those the schema uses: none may point outside the body.
    let mut sizes = Vec::with_capacity(descriptors.len());
    let mut aligned = Vec::with_capacity(descriptors.len());
    for (i, b) in descriptors.iter().enumerate() {
        let (offset, len) = (b.offset(), b.length());
        let range = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(len).ok())
            .and_then(|(o, l)| Some(o..o.checked_add(l)?))
            .filter(|r| r.end <= body.len())
            .ok_or_else(|| {
                bad(format!(
                    "buffer {i} (offset {offset}, length {len}) lies outside the {}-byte body",
                    body.len()
                ))
            })?;
        let data = &body[range.clone()];
        // Where the values start: after the length prefix when stored uncompressed in a
        // compressed batch; decompressed data lands in a fresh (aligned) allocation.
        let start = match codec {
            None => Some(range.start),
            Some(_) if data.len() >= 8 && data[..8] == NOT_COMPRESSED.to_le_bytes() => {
                Some(range.start + 8)
            }
            Some(_) => None,
        };
        aligned.push(start.is_none_or(|start| at.iter().all(|base| (base + start) % 8 == 0)));
        let size = match codec {
            None => len as u64,
            Some(codec) => {
                let declared = decompressed_size(data, codec, limits)
                    .map_err(|why| bad(format!("buffer {i}: {why}")))?;
                checked.decompressed = checked.decompressed.saturating_add(declared.allocated);
                if checked.decompressed > limits.max_decoded_bytes {
                    return Err(bad(format!(
                        "its compressed buffers declare {} bytes decompressed, over the limit of {} bytes",
                        checked.decompressed, limits.max_decoded_bytes
                    )));
                }
                if codec == Codec::Lz4 && declared.allocated > 0 {
                    lz4_fits(&data[8..], declared.allocated)
                        .map_err(|why| bad(format!("buffer {i}: {why}")))?;
                }
                declared.size
            }
        };
        checked.content = checked.content.saturating_add(size);
        sizes.push(size);
    }
    let variadic: VecDeque<i64> = batch.variadicBufferCounts().into_iter().flatten().collect();
    let mut walk = Walk {
        nodes,
        sizes,
        aligned,
        next_node: 0,
        next_buffer: 0,
        variadic,
        version,
        rows: limits.rows(),
    };
    for field in fields.iter() {
        walk.array(field).map_err(bad)?;
    }
    // arrow asserts (panics) that every count was used.
    if !walk.variadic.is_empty() {
        return Err(bad(format!(
            "{} variadic buffer counts more than its view columns use",
            walk.variadic.len()
        )));
    }
    Ok(checked)
}

struct Declared {
    /// Bytes of the buffer once decoded.
    size: u64,
    /// Bytes arrow allocates to decompress it (0 when it is stored as is).
    allocated: u64,
}

/// The size a compressed buffer declares in its 8-byte little-endian prefix, as arrow-ipc's
/// `decompress_to_buffer` reads it.
fn decompressed_size(
    data: &[u8],
    codec: Codec,
    limits: &Limits,
) -> std::result::Result<Declared, String> {
    if data.is_empty() {
        return Ok(Declared {
            size: 0,
            allocated: 0,
        });
    }
    let Some(prefix) = data.get(..8) else {
        return Err(format!(
            "a compressed buffer of {} bytes, too short for its 8-byte length prefix",
            data.len()
        ));
    };
    let declared = i64::from_le_bytes(prefix.try_into().expect("8 bytes"));
    match declared {
        NOT_COMPRESSED => Ok(Declared {
            size: data.len() as u64 - 8,
            allocated: 0,
        }),
        0 => Ok(Declared {
            size: 0,
            allocated: 0,
        }),
        n if n > 0 && n as u64 <= limits.max_decoded_bytes => Ok(Declared {
            size: n as u64,
            allocated: n as u64,
        }),
        n if n > 0 => Err(format!(
            "declares {n} bytes decompressed, over the limit of {} bytes ({codec_name} data)",
            limits.max_decoded_bytes,
            codec_name = match codec {
                Codec::Lz4 => "LZ4",
                Codec::Zstd => "ZSTD",
            }
        )),
        n => Err(format!("declares a decompressed length of {n}")),
    }
}

/// arrow decompresses an LZ4 frame with `read_to_end` into a vector sized by the declared
/// length, which grows for as long as the frame produces output: a frame that decompresses
/// ~255x would allocate far past the declared size before arrow compares the two. (ZSTD is
/// decompressed into a buffer of the declared capacity and stops there.) So the frame is
/// decompressed here into a small scratch buffer, stopping one byte past the declared size.
fn lz4_fits(frame: &[u8], declared: u64) -> std::result::Result<(), String> {
    let mut decoder = lz4_flex::frame::FrameDecoder::new(frame).take(declared + 1);
    let mut scratch = [0u8; 64 << 10];
    let mut total = 0u64;
    loop {
        match decoder.read(&mut scratch) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("its LZ4 frame is corrupt: {e}")),
        }
    }
    if total > declared {
        return Err(format!(
            "its LZ4 frame decompresses to more than the {declared} bytes it declares"
        ));
    }
    Ok(())
}

struct Walk {
    nodes: Vec<(i64, i64)>,
    /// Decoded size of each buffer.
    sizes: Vec<u64>,
    /// Whether each buffer's values start 8-byte aligned where the readers put them.
    aligned: Vec<bool>,
    next_node: usize,
    next_buffer: usize,
    variadic: VecDeque<i64>,
    version: MetadataVersion,
    rows: u64,
}

impl Walk {
    /// (length, null count) of the next field node.
    fn node(&mut self, field: &Field) -> std::result::Result<(u64, u64), String> {
        let name = field.name();
        let &(len, nulls) = self.nodes.get(self.next_node).ok_or_else(|| {
            format!(
                "{} field nodes, fewer than the schema needs (none left for `{name}`)",
                self.nodes.len()
            )
        })?;
        self.next_node += 1;
        let (Ok(len), Ok(nulls)) = (u64::try_from(len), u64::try_from(nulls)) else {
            return Err(format!(
                "field `{name}` has a length of {len} and a null count of {nulls}"
            ));
        };
        if len > self.rows {
            return Err(format!(
                "field `{name}` declares {len} values (the limit is {})",
                self.rows
            ));
        }
        if nulls > len {
            return Err(format!(
                "field `{name}` declares {nulls} nulls in {len} values"
            ));
        }
        Ok((len, nulls))
    }

    /// Decoded size of the next buffer.
    fn buffer(&mut self, field: &Field) -> std::result::Result<u64, String> {
        let size = self.sizes.get(self.next_buffer).copied().ok_or_else(|| {
            format!(
                "{} buffers, fewer than the schema needs (none left for `{}`)",
                self.sizes.len(),
                field.name()
            )
        })?;
        self.next_buffer += 1;
        Ok(size)
    }

    fn buffers(&mut self, field: &Field, n: usize) -> std::result::Result<(), String> {
        for _ in 0..n {
            self.buffer(field)?;
        }
        Ok(())
    }

    /// A node and its validity bitmap, the first buffer of every type that has one. arrow
    /// builds the bitmap with `BooleanBuffer::new`, which asserts it holds a bit per value,
    /// whenever the node declares nulls.
    fn node_and_validity(&mut self, field: &Field) -> std::result::Result<(u64, u64), String> {
        let (len, nulls) = self.node(field)?;
        let validity = self.buffer(field)?;
        Self::check_validity(field, len, nulls, validity)?;
        Ok((len, nulls))
    }

    fn check_validity(
        field: &Field,
        len: u64,
        nulls: u64,
        validity: u64,
    ) -> std::result::Result<(), String> {
        if nulls > 0 && validity.saturating_mul(8) < len {
            return Err(format!(
                "field `{}` declares {nulls} nulls but has a validity bitmap of {validity} bytes for {len} values",
                field.name()
            ));
        }
        Ok(())
    }

    /// The next buffer, which arrow's validation reads whole as values of `width` bytes
    /// (`Buffer::typed_data`, which asserts the length is a multiple of the width).
    fn values(&mut self, field: &Field, width: u64) -> std::result::Result<(), String> {
        let size = self.buffer(field)?;
        if size % width != 0 {
            return Err(format!(
                "field `{}` has a buffer of {size} bytes, not a whole number of {width}-byte values",
                field.name()
            ));
        }
        Ok(())
    }

    fn array(&mut self, field: &Field) -> std::result::Result<(), String> {
        use DataType::*;
        let name = field.name();
        match field.data_type() {
            Utf8 | Binary => {
                self.node_and_validity(field)?;
                self.values(field, 4)?;
                self.buffer(field).map(drop)
            }
            LargeUtf8 | LargeBinary => {
                self.node_and_validity(field)?;
                self.values(field, 8)?;
                self.buffer(field).map(drop)
            }
            BinaryView | Utf8View => {
                let count = self
                    .variadic
                    .pop_front()
                    .ok_or_else(|| format!("no variadic buffer count for view column `{name}`"))?;
                let left = self.sizes.len() - self.next_buffer;
                let count = usize::try_from(count)
                    .ok()
                    .filter(|&c| c <= left)
                    .ok_or_else(|| {
                        format!("view column `{name}` declares {count} variadic buffers, {left} are left")
                    })?;
                let validity = self.sizes.get(self.next_buffer).copied().unwrap_or(0);
                self.buffer(field)?;
                self.values(field, 16)?;
                self.buffers(field, count)?;
                let (len, nulls) = self.node(field)?;
                Self::check_validity(field, len, nulls, validity)
            }
            FixedSizeBinary(width) => {
                let (len, _) = self.node_and_validity(field)?;
                let data = self.buffer(field)?;
                // FixedSizeBinaryArray's conversion from ArrayData `expect`s the values to
                // end within i32 offsets.
                let need = len.checked_mul(*width as u64);
                if need.is_none_or(|need| need > data || need > i32::MAX as u64) {
                    return Err(format!(
                        "field `{name}` has {len} values of {width} bytes in a buffer of {data}"
                    ));
                }
                Ok(())
            }
            List(child) | Map(child, _) => {
                self.node_and_validity(field)?;
                self.values(field, 4)?;
                self.array(child)
            }
            LargeList(child) => {
                self.node_and_validity(field)?;
                self.values(field, 8)?;
                self.array(child)
            }
            ListView(child) | LargeListView(child) => {
                let width = if matches!(field.data_type(), ListView(_)) {
                    4
                } else {
                    8
                };
                self.node_and_validity(field)?;
                self.values(field, width)?;
                self.values(field, width)?;
                self.array(child)
            }
            FixedSizeList(child, size) => {
                let (len, _) = self.node_and_validity(field)?;
                // arrow's validation multiplies these with `expect`.
                if len.checked_mul(*size as u64).is_none_or(|n| n > self.rows) {
                    return Err(format!(
                        "field `{name}` has {len} lists of {size} values (the limit is {} values)",
                        self.rows
                    ));
                }
                self.array(child)
            }
            Struct(children) => {
                self.node_and_validity(field)?;
                children.iter().try_for_each(|c| self.array(c))
            }
            RunEndEncoded(run_ends, values) => {
                self.node(field)?;
                self.array(run_ends)?;
                self.array(values)
            }
            Dictionary(keys, _) => {
                self.node_and_validity(field)?;
                self.values(field, keys.primitive_width().unwrap_or(1) as u64)
            }
            Union(members, mode) => {
                let (len, _) = self.node(field)?;
                if self.version < MetadataVersion::V5 {
                    self.buffer(field)?;
                }
                // arrow slices these with slice_with_length, which panics when short.
                let type_ids = self.buffer(field)?;
                if type_ids < len {
                    return Err(format!(
                        "union field `{name}` has {type_ids} type id bytes for {len} values"
                    ));
                }
                if *mode == UnionMode::Dense {
                    // arrow makes a ScalarBuffer<i32> of these without aligning them first
                    // (as it does every other buffer), which asserts their alignment.
                    if !self.aligned.get(self.next_buffer).copied().unwrap_or(true) {
                        return Err(format!(
                            "union field `{name}` has its offsets at a position not aligned to 8 bytes"
                        ));
                    }
                    let offsets = self.buffer(field)?;
                    if offsets < len * 4 {
                        return Err(format!(
                            "union field `{name}` has {offsets} offset bytes for {len} values"
                        ));
                    }
                }
                members.iter().try_for_each(|(_, c)| self.array(c))
            }
            Null => self.node(field).map(drop),
            _ => {
                self.node_and_validity(field)?;
                self.buffer(field).map(drop)
            }
        }
    }
}
