//! Arrow IPC request bodies: stream format (optionally LZ4/ZSTD-compressed buffers, as the
//! lancedb SDK sends them), or file format. Truncated or non-Arrow bodies are a 400.

use std::io::Cursor;

use arrow_array::RecordBatch;
use arrow_ipc::reader::{FileReader, StreamReader};
use arrow_schema::SchemaRef;
use axum::extract::{FromRequest, Request};
use bytes::Bytes;

use crate::error::{ApiError, ApiResult};

pub struct ArrowBody {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
}

impl ArrowBody {
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    pub fn decode(bytes: &[u8]) -> ApiResult<Self> {
        if bytes.is_empty() {
            return Err(ApiError::invalid(
                "the request body must be an Arrow IPC stream; it is empty",
            ));
        }
        let bad = |e: arrow_schema::ArrowError| {
            ApiError::invalid(format!(
                "the request body is not a valid Arrow IPC stream: {e}"
            ))
        };
        if bytes.starts_with(b"ARROW1") {
            let reader = FileReader::try_new(Cursor::new(bytes), None).map_err(bad)?;
            let schema = reader.schema();
            let batches = reader.collect::<Result<Vec<_>, _>>().map_err(bad)?;
            return Ok(Self { schema, batches });
        }
        let reader = StreamReader::try_new(Cursor::new(bytes), None).map_err(bad)?;
        let schema = reader.schema();
        let batches = reader.collect::<Result<Vec<_>, _>>().map_err(bad)?;
        Ok(Self { schema, batches })
    }
}

impl<S: Send + Sync> FromRequest<S> for ArrowBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| super::extract::body_error(&e))?;
        // Decoding is CPU work proportional to the body; keep it off the async workers.
        tokio::task::spawn_blocking(move || ArrowBody::decode(&bytes))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
    }
}
