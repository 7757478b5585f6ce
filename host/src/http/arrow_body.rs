//! Arrow IPC request bodies: stream format (optionally LZ4/ZSTD-compressed buffers, as the
//! lancedb SDK sends them), or file format. Truncated, non-Arrow or hostile bodies are a 400.
//!
//! arrow-ipc believes the lengths a body declares (a record batch claiming a 1 PiB body makes
//! it allocate 1 PiB, and the failed allocation aborts the process), so every body goes
//! through `lancet_ipc::check` first, which holds each length against the bytes really there
//! and what decoding would allocate against [`decode_limits`].

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use axum::extract::{FromRequest, Request};
use bytes::Bytes;
use lancet_ipc::{Limits, ReadError};

use crate::error::{ApiError, ApiResult};

/// What decoding a body of `body_len` bytes may allocate: the body once more (the reader
/// copies each message body), plus 64 times the body for compressed buffers to expand into
/// (columnar data rarely compresses past 10-20x with LZ4 or ZSTD), at least 256 MiB of that
/// (a small body of highly repetitive data, all-zero vectors say, may legitimately expand
/// further) and at most 8 GiB (no single request may claim the machine, whatever
/// `--max-body-mb` allows). A body that declares more is refused before anything is
/// allocated. Lengths of arrays are bounded by the same number (see [`Limits::new`]).
pub(crate) fn decode_limits(body_len: usize) -> Limits {
    const MIB: u64 = 1 << 20;
    let body = body_len as u64;
    let expansion = body.saturating_mul(64).clamp(256 * MIB, 8 * 1024 * MIB);
    Limits::new(body.saturating_add(expansion))
}

/// `batch` as an Arrow IPC stream (an answer, or a body handed on to lance-namespace).
pub fn stream_bytes(batch: &RecordBatch) -> ApiResult<Vec<u8>> {
    let mut out = Vec::new();
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut out, &batch.schema())
        .map_err(|e| ApiError::internal(format!("encoding Arrow IPC: {e}")))?;
    writer
        .write(batch)
        .and_then(|()| writer.finish())
        .map_err(|e| ApiError::internal(format!("encoding Arrow IPC: {e}")))?;
    drop(writer);
    Ok(out)
}

pub struct ArrowBody {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
}

impl ArrowBody {
    /// Decodes `bytes`. Decoding is CPU work proportional to the body: a large one goes off
    /// the async workers; a small one (an ingester's upsert) decodes in microseconds, less
    /// than the hand-off to a blocking thread and back would cost.
    pub async fn decode_bytes(bytes: Bytes) -> ApiResult<Self> {
        if bytes.len() <= INLINE_DECODE_BYTES {
            return ArrowBody::decode(&bytes);
        }
        tokio::task::spawn_blocking(move || ArrowBody::decode(&bytes))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
    }

    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    pub fn decode(bytes: &[u8]) -> ApiResult<Self> {
        if bytes.is_empty() {
            return Err(ApiError::invalid(
                "the request body must be an Arrow IPC stream; it is empty",
            ));
        }
        let format = match lancet_ipc::Format::of(bytes) {
            lancet_ipc::Format::Stream => "stream",
            lancet_ipc::Format::File => "file",
        };
        // Every kind of ReadError is the body's fault: refused by the check, by arrow, or
        // (a gap in the check) a panic in arrow caught on this body.
        let (schema, batches) =
            lancet_ipc::read(bytes, &decode_limits(bytes.len())).map_err(|e: ReadError| {
                ApiError::invalid(format!(
                    "the request body is not a valid Arrow IPC {format}: {e}"
                ))
            })?;
        Ok(Self { schema, batches })
    }
}

/// Bodies up to this size are decoded on the request's own worker.
const INLINE_DECODE_BYTES: usize = 256 << 10;

impl<S: Send + Sync> FromRequest<S> for ArrowBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        // Rows a request brings count as written to its tenant's usage (an Arrow body is
        // what inserts, merges and creates send).
        let usage = match (
            req.extensions().get::<super::AppState>(),
            req.extensions().get::<super::pipeline::auth::Caller>(),
        ) {
            (Some(app), Some(caller)) => app.hosting.counters(caller.tenant()),
            _ => None,
        };
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(super::pipeline::body::bytes_error)?;
        let body = ArrowBody::decode_bytes(bytes).await?;
        if let Some(u) = usage {
            u.add(
                lancet_hosting::usage::Measure::RowsWritten,
                body.num_rows() as u64,
            );
        }
        Ok(body)
    }
}
