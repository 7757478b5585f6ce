//! Statement handles: the statement and its bound parameters themselves (JSON), so that no
//! server state is needed to run one, on this replica or another.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use datafusion_common::ScalarValue;
use serde::{Deserialize, Serialize};
use tonic::Status;

/// Handles larger than this are refused before they are parsed.
const MAX_HANDLE_BYTES: usize = 4 << 20;

/// Parameter data a client may send to bind (one row of values).
const MAX_PARAMETER_BYTES: usize = 16 << 20;

/// The batches of parameter values a client sends with `DoPut`. The Flight messages are laid
/// out as the Arrow IPC stream they encode and read by `lancet_ipc`, which checks every length
/// they declare against the bytes really there (arrow's own Flight decoder would believe a
/// compressed buffer claiming a petabyte, and the allocation would abort the process).
pub async fn read_parameters<S>(mut messages: S) -> Result<Vec<arrow_array::RecordBatch>, Status>
where
    S: futures::Stream<Item = Result<arrow_flight::FlightData, Status>> + Unpin,
{
    use futures::StreamExt;
    let mut stream = Vec::new();
    while let Some(message) = messages.next().await {
        let message = message?;
        if message.data_header.is_empty() {
            continue;
        }
        encapsulate(&mut stream, &message.data_header, &message.data_body);
        if stream.len() > MAX_PARAMETER_BYTES {
            return Err(Status::invalid_argument(format!(
                "parameters larger than {} MiB",
                MAX_PARAMETER_BYTES >> 20
            )));
        }
    }
    if stream.is_empty() {
        return Ok(Vec::new());
    }
    stream.extend_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0]);
    let limits = lancet_ipc::Limits::new(stream.len() as u64 * 8 + (16 << 20));
    let (_, batches) = lancet_ipc::read(&stream, &limits)
        .map_err(|e| Status::invalid_argument(format!("parameters: {e}")))?;
    Ok(batches)
}

/// One IPC stream message: continuation marker, metadata length (padded to 8 bytes), the
/// metadata, its padding, the body.
fn encapsulate(out: &mut Vec<u8>, header: &[u8], body: &[u8]) {
    let padded = header.len().div_ceil(8) * 8;
    out.extend_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF]);
    out.extend_from_slice(&(padded as i32).to_le_bytes());
    out.extend_from_slice(header);
    out.resize(out.len() + padded - header.len(), 0);
    out.extend_from_slice(body);
}

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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, RecordBatch, StringArray};
    use arrow_flight::FlightData;
    use arrow_flight::encode::FlightDataEncoderBuilder;
    use futures::{StreamExt, TryStreamExt};

    use super::*;

    async fn flight_data(batch: RecordBatch) -> Vec<FlightData> {
        FlightDataEncoderBuilder::new()
            .build(futures::stream::iter([Ok(batch)]))
            .try_collect()
            .await
            .unwrap()
    }

    fn batch() -> RecordBatch {
        RecordBatch::try_from_iter([
            ("a", Arc::new(Int64Array::from(vec![7])) as _),
            ("b", Arc::new(StringArray::from(vec!["x"])) as _),
        ])
        .unwrap()
    }

    #[tokio::test]
    async fn parameters_read_back_and_bind() {
        let messages = flight_data(batch()).await;
        let stream = futures::stream::iter(messages.into_iter().map(Ok));
        let batches = read_parameters(stream.boxed()).await.unwrap();
        assert_eq!(batches, vec![batch()]);
        let bound = Handle::new("SELECT $1, $2".into())
            .bind(&batches[0])
            .unwrap();
        let values = Handle::decode(&bound.encode()).unwrap().values().unwrap();
        assert_eq!(
            values,
            vec![ScalarValue::Int64(Some(7)), ScalarValue::from("x")]
        );
    }

    #[tokio::test]
    async fn lying_parameter_messages_are_refused_not_believed() {
        let mut messages = flight_data(batch()).await;
        // The record batch's body is cut short: the lengths its header declares are not there.
        let last = messages.last_mut().unwrap();
        last.data_body = last.data_body.slice(..last.data_body.len() / 2);
        let stream = futures::stream::iter(messages.clone().into_iter().map(Ok));
        assert!(read_parameters(stream.boxed()).await.is_err());
        // A header of garbage.
        messages.last_mut().unwrap().data_header = bytes::Bytes::from_static(&[0xAB; 40]);
        let stream = futures::stream::iter(messages.into_iter().map(Ok));
        assert!(read_parameters(stream.boxed()).await.is_err());
        // Handles of garbage.
        assert!(Handle::decode(b"{not json").is_err());
        assert!(Handle::decode(&vec![b' '; MAX_HANDLE_BYTES + 1]).is_err());
    }
}
