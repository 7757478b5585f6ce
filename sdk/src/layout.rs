//! An Arrow IPC record-batch message laid out without copying the batch's data; used on both
//! sides of the ABI (the host for input streams, the SDK for result streams).
//!
//! arrow's `IpcDataGenerator` copies every buffer into one body `Vec` (growing it as it goes),
//! which then has to be copied again to where the stream goes (guest memory, the result
//! buffer). Here only the flatbuffer header is built; the body is a list of the batch's own
//! buffers (sliced, not copied), each written once, straight to its destination. The bytes
//! are exactly what arrow's `StreamWriter` writes (tests check that), so readers see no
//! difference.
//!
//! Covered: the types UDF columns usually have (numbers, temporal, booleans, strings and
//! binary, fixed-size lists such as embeddings, structs of these). Anything else (lists,
//! views, dictionaries, unions, ...) returns `None`: use arrow's encoder for it.

use arrow_array::RecordBatch;
use arrow_buffer::{Buffer, MutableBuffer};
use arrow_data::ArrayData;
use arrow_ipc::writer::{EncodedData, IpcWriteOptions, write_message};
use arrow_ipc::{FieldNode, MessageHeader, MetadataVersion};
use arrow_schema::{ArrowError, DataType};
use flatbuffers::FlatBufferBuilder;

/// The record-batch message: flatbuffer header plus the body's buffers, each at the next
/// `align`-byte boundary.
pub struct DirectBatch {
    /// The `Message` flatbuffer (to be framed like arrow's `write_message` does).
    pub header: Vec<u8>,
    /// Body buffers in order; each starts at a multiple of the alignment.
    pub pieces: Vec<Buffer>,
    /// Body length, padding included.
    pub body_len: usize,
    /// The alignment each body buffer is padded to.
    pub align: usize,
}

impl DirectBatch {
    /// Writes the message as arrow's `write_message` frames it: the header, then every body
    /// buffer zero-padded to the alignment the batch was laid out with (`options` must use
    /// the same alignment: it pads the header).
    pub fn write_to(
        self,
        out: &mut impl std::io::Write,
        options: &IpcWriteOptions,
    ) -> Result<(), ArrowError> {
        let header = EncodedData {
            ipc_message: self.header,
            arrow_data: Vec::new(),
        };
        write_message(&mut *out, header, options)?;
        let align = self.align;
        for piece in &self.pieces {
            out.write_all(piece.as_slice())?;
            let mut pad = piece.len().next_multiple_of(align) - piece.len();
            while pad > 0 {
                let n = pad.min(ZEROS.len());
                out.write_all(&ZEROS[..n])?;
                pad -= n;
            }
        }
        Ok(())
    }
}

/// Padding source (destinations such as guest memory are not zeroed). A static: gathered
/// result streams point at it.
pub(crate) static ZEROS: [u8; 64] = [0; 64];

/// Whether [`lay_out`] covers columns of type `t`, nested types included: what a reader of
/// its streams has to handle.
pub fn covers(t: &DataType) -> bool {
    match t {
        DataType::FixedSizeList(child, _) => covers(child.data_type()),
        DataType::Struct(fields) => fields.iter().all(|f| covers(f.data_type())),
        t => covers_leaf(t),
    }
}

fn covers_leaf(t: &DataType) -> bool {
    t.is_numeric()
        || t.is_temporal()
        || matches!(
            t,
            DataType::FixedSizeBinary(_)
                | DataType::Boolean
                | DataType::Utf8
                | DataType::Binary
                | DataType::LargeUtf8
                | DataType::LargeBinary
        )
}

struct Collector {
    align: usize,
    nodes: Vec<FieldNode>,
    descriptors: Vec<arrow_ipc::Buffer>,
    pieces: Vec<Buffer>,
    body_len: usize,
}

/// `None` if a column has a type this layout does not cover.
pub fn lay_out(batch: &RecordBatch, align: usize) -> Option<DirectBatch> {
    let mut c = Collector {
        align,
        nodes: Vec::new(),
        descriptors: Vec::new(),
        pieces: Vec::new(),
        body_len: 0,
    };
    for column in batch.columns() {
        c.array(&column.to_data())?;
    }
    // Same construction order as arrow's writer, so the header bytes are identical.
    let mut fbb = FlatBufferBuilder::new();
    let buffers = fbb.create_vector(&c.descriptors);
    let nodes = fbb.create_vector(&c.nodes);
    let mut rb = arrow_ipc::RecordBatchBuilder::new(&mut fbb);
    rb.add_length(batch.num_rows() as i64);
    rb.add_nodes(nodes);
    rb.add_buffers(buffers);
    let rb = rb.finish().as_union_value();
    let mut message = arrow_ipc::MessageBuilder::new(&mut fbb);
    message.add_version(MetadataVersion::V5);
    message.add_header_type(MessageHeader::RecordBatch);
    message.add_bodyLength(c.body_len as i64);
    message.add_header(rb);
    let root = message.finish();
    fbb.finish(root, None);
    Some(DirectBatch {
        header: fbb.finished_data().to_vec(),
        pieces: c.pieces,
        body_len: c.body_len,
        align,
    })
}

impl Collector {
    fn push(&mut self, piece: Buffer) {
        self.descriptors.push(arrow_ipc::Buffer::new(
            self.body_len as i64,
            piece.len() as i64,
        ));
        self.body_len += piece.len().next_multiple_of(self.align);
        self.pieces.push(piece);
    }

    /// Mirrors arrow-ipc's `write_array_data` for the covered types.
    fn array(&mut self, data: &ArrayData) -> Option<()> {
        let (offset, len) = (data.offset(), data.len());
        let null_count = data.null_count();
        let data_type = data.data_type();
        let nested = matches!(
            data_type,
            DataType::FixedSizeList(_, _) | DataType::Struct(_)
        );
        if !(nested || covers_leaf(data_type)) {
            return None;
        }
        self.nodes
            .push(FieldNode::new(len as i64, null_count as i64));
        // A column without nulls gets an empty validity buffer, as arrow writes it.
        let validity = match data.nulls() {
            Some(nulls) if null_count > 0 => nulls.inner().sliced(),
            _ => Buffer::from(MutableBuffer::new(0)),
        };
        self.push(validity);
        match data_type {
            DataType::Boolean => self.push(data.buffers()[0].bit_slice(offset, len)),
            DataType::Utf8 | DataType::Binary => self.byte_array::<i32>(data),
            DataType::LargeUtf8 | DataType::LargeBinary => self.byte_array::<i64>(data),
            DataType::FixedSizeList(_, size) => {
                let size = usize::try_from(*size).ok()?;
                let child = data.child_data()[0].slice(offset * size, len * size);
                return self.array(&child);
            }
            DataType::Struct(_) => {
                for child in data.child_data() {
                    self.array(child)?;
                }
            }
            _ => {
                // Fixed width: only the rows in the slice.
                let width = data_type.primitive_width().or(match data_type {
                    DataType::FixedSizeBinary(w) => usize::try_from(*w).ok(),
                    _ => None,
                })?;
                let values = &data.buffers()[0];
                let start = offset * width;
                let bytes = (len * width).min(values.len().saturating_sub(start));
                self.push(values.slice_with_length(start, bytes));
            }
        }
        Some(())
    }

    /// Offsets rebased to start at 0 (only copied if they do not already), and the values
    /// they span.
    fn byte_array<O: arrow_array::OffsetSizeTrait>(&mut self, data: &ArrayData) {
        let size = size_of::<O>();
        if data.is_empty() {
            // An empty array still has one offset (0).
            self.push(Buffer::from(vec![0u8; size]));
            self.push(Buffer::from(MutableBuffer::new(0)));
            return;
        }
        let all: &[O] = data.buffers()[0].typed_data();
        let offsets = &all[data.offset()..data.offset() + data.len() + 1];
        let (first, last) = (offsets[0].as_usize(), offsets[data.len()].as_usize());
        let rebased = match first {
            0 => data.buffers()[0].slice_with_length(data.offset() * size, size_of_val(offsets)),
            _ => offsets
                .iter()
                .map(|&o| o - O::usize_as(first))
                .collect::<Buffer>(),
        };
        self.push(rebased);
        self.push(data.buffers()[1].slice_with_length(first, last - first));
    }
}
