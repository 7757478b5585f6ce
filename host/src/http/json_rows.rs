//! Arrow answers as JSON, for clients without an Arrow decoder (the console, `curl`): a
//! request whose `Accept` names Lancet's own media type [`ROWS_JSON`] gets
//! `{"schema": <JSON Arrow schema>, "num_rows": n, "rows": [{column: value}, ...]}`.
//! Binary values are hex strings, vectors arrays, nulls `null` (every column is in every row).
//!
//! A plain `Accept: application/json` is not enough: the spec's generated REST client sends it
//! on every query (its accept list is Arrow file + JSON and the generator picks JSON) and parses
//! the answer as Arrow IPC, as the spec says a query answers.

use arrow_array::RecordBatch;
use axum::http::{HeaderMap, header};
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};

/// JSON answers are built whole: one whose rows take more Arrow memory than this is refused
/// (ask for Arrow, or for fewer rows).
pub const MAX_JSON_ROWS_BYTES: usize = 32 << 20;

/// The media type that asks for JSON rows instead of Arrow IPC.
pub const ROWS_JSON: &str = "application/vnd.lancet.rows+json";

pub fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|a| a.split(','))
        .any(|t| {
            t.split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case(ROWS_JSON))
        })
}

pub fn too_large() -> ApiError {
    ApiError::invalid(format!(
        "the answer is larger than {} MiB as JSON: ask for Arrow \
         (Accept: application/vnd.apache.arrow.stream) or for fewer rows or columns",
        MAX_JSON_ROWS_BYTES >> 20
    ))
}

pub fn json_rows(schema: &arrow_schema::Schema, batches: &[RecordBatch]) -> ApiResult<Value> {
    let mut bytes = Vec::new();
    let mut writer = arrow_json::WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, arrow_json::writer::JsonArray>(&mut bytes);
    let mut num_rows = 0;
    for batch in batches {
        num_rows += batch.num_rows();
        writer.write(batch).map_err(ApiError::from)?;
    }
    writer.finish().map_err(ApiError::from)?;
    drop(writer);
    let rows: Value = if bytes.is_empty() {
        json!([])
    } else {
        serde_json::from_slice(&bytes).map_err(|e| ApiError::internal(e.to_string()))?
    };
    let schema = lance_namespace::schema::arrow_schema_to_json(schema).map_err(ApiError::from)?;
    Ok(json!({ "schema": schema, "num_rows": num_rows, "rows": rows }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{BinaryArray, Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    #[test]
    fn rows_keep_every_column_and_encode_bytes_as_hex() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
            Field::new("b", DataType::Binary, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a"), None])),
                Arc::new(BinaryArray::from(vec![Some(&b"\x01\xff"[..]), None])),
            ],
        )
        .unwrap();
        let out = json_rows(&schema, &[batch.clone(), batch]).unwrap();
        assert_eq!(out["num_rows"], 4);
        assert_eq!(out["rows"][0], json!({"id": 1, "s": "a", "b": "01ff"}));
        assert_eq!(out["rows"][1], json!({"id": 2, "s": null, "b": null}));
        assert_eq!(out["schema"]["fields"][0]["name"], "id");
        assert_eq!(json_rows(&schema, &[]).unwrap()["rows"], json!([]));
    }

    #[test]
    fn only_lancets_media_type_asks_for_json_rows() {
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, v.parse().unwrap());
            wants_json(&h)
        };
        // What the generated REST client sends on every query: still Arrow.
        assert!(!with("application/json"));
        assert!(!with("application/vnd.apache.arrow.file, application/json"));
        assert!(!with("*/*"));
        assert!(with(ROWS_JSON));
        assert!(with(
            "application/vnd.lancet.rows+json; q=1, application/json"
        ));
        assert!(!wants_json(&HeaderMap::new()));
    }
}
