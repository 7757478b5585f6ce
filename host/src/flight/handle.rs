//! Statement handles: the statement and its bound parameters themselves (JSON), so that no
//! server state is needed to run one, on this replica or another.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use datafusion_common::ScalarValue;
use serde::{Deserialize, Serialize};
use tonic::Status;

/// Handles larger than this are refused before they are parsed.
const MAX_HANDLE_BYTES: usize = 4 << 20;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Handle {
    pub sql: String,
    /// Bound parameter values: one row, as an Arrow IPC stream (base64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<String>,
    /// Names one run for `CancelQuery` / `CancelFlightInfo`.
    #[serde(default)]
    pub id: String,
}

impl Handle {
    pub fn new(sql: String) -> Self {
        Self {
            sql,
            params: None,
            id: uuid::Uuid::new_v4().simple().to_string(),
        }
    }

    pub fn encode(&self) -> bytes::Bytes {
        serde_json::to_vec(self)
            .expect("a handle serializes")
            .into()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, Status> {
        if bytes.len() > MAX_HANDLE_BYTES {
            return Err(Status::invalid_argument("statement handle too large"));
        }
        serde_json::from_slice(bytes)
            .map_err(|_| Status::invalid_argument("not a statement handle of this server"))
    }

    /// The bound parameter values, in order.
    pub fn values(&self) -> Result<Vec<ScalarValue>, Status> {
        let Some(params) = &self.params else {
            return Ok(Vec::new());
        };
        let bytes = STANDARD
            .decode(params)
            .map_err(|_| Status::invalid_argument("bad parameters in the statement handle"))?;
        // One row of parameters: what decoding may allocate stays near the bytes themselves.
        let limits = lancet_ipc::Limits::new(bytes.len() as u64 * 8 + (16 << 20));
        let (_, batches) = lancet_ipc::read(&bytes, &limits)
            .map_err(|e| Status::invalid_argument(format!("parameters: {e}")))?;
        let Some(batch) = batches.into_iter().find(|b| b.num_rows() > 0) else {
            return Ok(Vec::new());
        };
        (0..batch.num_columns())
            .map(|c| {
                ScalarValue::try_from_array(batch.column(c), 0)
                    .map_err(|e| Status::invalid_argument(format!("parameter {}: {e}", c + 1)))
            })
            .collect()
    }

    /// This handle with `batch` (one row) bound as its parameters, under a new run id.
    pub fn bind(&self, batch: &arrow_array::RecordBatch) -> Result<Self, Status> {
        if batch.num_rows() != 1 {
            return Err(Status::invalid_argument(format!(
                "bind one row of parameters ({} given): Lancet runs one set at a time",
                batch.num_rows()
            )));
        }
        let bad =
            |e: arrow_schema::ArrowError| Status::invalid_argument(format!("parameters: {e}"));
        let mut bytes = Vec::new();
        {
            let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut bytes, &batch.schema())
                .map_err(bad)?;
            w.write(batch).map_err(bad)?;
            w.finish().map_err(bad)?;
        }
        Ok(Self {
            sql: self.sql.clone(),
            params: Some(STANDARD.encode(bytes)),
            id: uuid::Uuid::new_v4().simple().to_string(),
        })
    }
}
