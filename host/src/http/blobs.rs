//! `/v1/table/{id}/fetch_blobs` (whole blobs of some rows, as Arrow) and
//! `GET /v1/table/{id}/blob/{column}/{row_id}/bytes` (one blob, by HTTP byte ranges): the
//! lancedb client's `fetch_blobs` and `fetch_blob_files`.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::AppState;
use super::pipeline::extract::{JsonBody, Target};
use crate::error::{ApiError, ApiResult};
use crate::store::At;
use crate::store::blobs::{self, MAX_FETCH_ROWS};

/// The table version an answer was read at: the client pins later range reads of the same
/// blob to it.
const VERSION_HEADER: HeaderName = HeaderName::from_static("x-lancedb-version");
/// A streamed blob body is read from storage this many bytes at a time.
const CHUNK_BYTES: u64 = 4 << 20;

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FetchBody {
    /// The table's id (the path's, if given).
    id: Option<Vec<String>>,
    /// Branch to read (default: main).
    branch: Option<String>,
    /// Read by the auth layer (a body credential) and the context mapping.
    #[allow(dead_code)]
    identity: Option<serde_json::Value>,
    #[allow(dead_code)]
    context: Option<std::collections::HashMap<String, serde_json::Value>>,
    /// Table version to read (default: the latest).
    version: Option<i64>,
    /// The blob column.
    column: String,
    /// Row ids (`_rowid`), at most 1024; the answer has one value per id, in this order.
    row_ids: Vec<u64>,
}

/// `fetch_blobs`: an Arrow stream with one `LargeBinary` column named as the blob column,
/// one value per requested row (null for a null blob).
pub async fn fetch(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<FetchBody>,
) -> ApiResult<Response> {
    if body.column.is_empty() {
        return Err(ApiError::invalid("fetch_blobs needs a 'column'"));
    }
    if body.row_ids.len() > MAX_FETCH_ROWS {
        return Err(ApiError::invalid(format!(
            "fetch_blobs accepts at most {MAX_FETCH_ROWS} row IDs; got {}",
            body.row_ids.len()
        )));
    }
    let location = app.table(&target, &body.id).await?;
    let version = match body.version {
        Some(v) => Some(v),
        None => target.params.int("version")?,
    };
    let at = At::new(target.branch(&body.branch), version)?;
    let located = app
        .store
        .blobs(&location, &at, &body.column, &body.row_ids)
        .await?;
    // The values and their encoding are both in memory until the answer is sent: they are
    // counted against the server's request-memory budget meanwhile (a 503 when it is in use).
    let total: u64 = located.files.iter().flatten().map(|f| f.size()).sum();
    let reserved = (2 * total.min(blobs::MAX_FETCH_BYTES)) as usize;
    let Some(permit) = app.admission.reserve_memory(reserved) else {
        return Ok(super::pipeline::overload::slow_down(
            "the server is holding too much answer data at once; retry fetch_blobs shortly",
        ));
    };
    let values = blobs::read_all(&located.files).await?;
    let schema = Arc::new(Schema::new(vec![Field::new(
        body.column.as_str(),
        DataType::LargeBinary,
        true,
    )]));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(values) as ArrayRef])
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let out = super::arrow_body::stream_bytes(&batch)?;
    // The reservation is released once the answer's bytes are handed over.
    let body = Body::from_stream(futures::stream::once(async move {
        let _held = permit;
        Ok::<_, std::io::Error>(bytes::Bytes::from(out))
    }));
    let mut response =
        ([(header::CONTENT_TYPE, super::openapi::ARROW_STREAM)], body).into_response();
    set_version(&mut response, located.dataset.version().version);
    Ok(response)
}

/// `blob/{column}/{row_id}/bytes`: one blob's bytes. With a `Range` header (one range) the
/// answer is 206 and `Content-Range`; a null blob is 204; a range past the end (any range
/// of an empty blob) is 416 with `Content-Range: bytes */<size>`.
pub async fn bytes(
    State(app): State<AppState>,
    target: Target,
    Path((_, column, row_id)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let row_id: u64 = row_id.parse().map_err(|_| {
        ApiError::invalid(format!("row id must be an integer >= 0, got '{row_id}'"))
    })?;
    let raw_range = headers
        .get(header::RANGE)
        .map(|v| v.to_str().unwrap_or("").to_string());
    let range = raw_range.as_deref().map(parse_range).transpose()?;
    let location = app.table(&target, &None).await?;
    let at = At::new(target.branch(&None), target.params.int("version")?)?;
    let mut located = app.store.blobs(&location, &at, &column, &[row_id]).await?;
    let version = located.dataset.version().version;
    let Some(file) = located.files.pop().flatten() else {
        let mut response = StatusCode::NO_CONTENT.into_response();
        set_version(&mut response, version);
        return Ok(response);
    };
    let size = file.size();
    let (status, span) = match range {
        None => (StatusCode::OK, 0..size),
        Some(r) => match r.resolve(size) {
            Some(span) => (StatusCode::PARTIAL_CONTENT, span),
            None => {
                let mut response = ApiError::invalid(format!(
                    "range '{}' selects no byte of a {size}-byte blob",
                    raw_range.as_deref().unwrap_or_default()
                ))
                .with_status(StatusCode::RANGE_NOT_SATISFIABLE)
                .into_response();
                insert(
                    &mut response,
                    header::CONTENT_RANGE,
                    format!("bytes */{size}"),
                );
                set_version(&mut response, version);
                return Ok(response);
            }
        },
    };
    let len = span.end - span.start;
    let body = if len <= CHUNK_BYTES {
        Body::from(blobs::read_range(&file, span.clone()).await?)
    } else {
        // Large spans go out a chunk at a time, so a many-gigabyte blob never sits in memory.
        let chunks = futures::stream::unfold((file, span.clone()), |(file, rest)| async move {
            if rest.is_empty() {
                return None;
            }
            let end = rest.end.min(rest.start + CHUNK_BYTES);
            let chunk = blobs::read_range(&file, rest.start..end)
                .await
                .map_err(|e| std::io::Error::other(e.message));
            Some((chunk, (file, end..rest.end)))
        });
        Body::from_stream(chunks)
    };
    let mut response = (status, body).into_response();
    insert(&mut response, header::CONTENT_LENGTH, len.to_string());
    insert(&mut response, header::ACCEPT_RANGES, "bytes".to_string());
    insert(
        &mut response,
        header::CONTENT_TYPE,
        "application/octet-stream".to_string(),
    );
    if status == StatusCode::PARTIAL_CONTENT {
        insert(
            &mut response,
            header::CONTENT_RANGE,
            format!("bytes {}-{}/{size}", span.start, span.end - 1),
        );
    }
    set_version(&mut response, version);
    Ok(response)
}

fn insert(response: &mut Response, name: HeaderName, value: String) {
    if let Ok(v) = HeaderValue::from_str(&value) {
        response.headers_mut().insert(name, v);
    }
}

fn set_version(response: &mut Response, version: u64) {
    insert(response, VERSION_HEADER, version.to_string());
}

/// One byte range of a `Range` header (RFC 9110 §14.1.2).
#[derive(Debug, PartialEq, Eq)]
enum ByteRange {
    /// `bytes=first-` or `bytes=first-last` (inclusive).
    From { first: u64, last: Option<u64> },
    /// `bytes=-n`: the last n bytes.
    Suffix(u64),
}

impl ByteRange {
    /// The bytes it selects of a `size`-byte value, or None when it selects none (416).
    fn resolve(&self, size: u64) -> Option<std::ops::Range<u64>> {
        match *self {
            ByteRange::From { first, last } => {
                if first >= size {
                    return None;
                }
                let end = last.map_or(size, |l| l.saturating_add(1).min(size));
                Some(first..end)
            }
            ByteRange::Suffix(n) => (n > 0 && size > 0).then(|| size - n.min(size)..size),
        }
    }
}

fn parse_range(value: &str) -> ApiResult<ByteRange> {
    let bad = || {
        ApiError::invalid(format!(
            "header 'Range' must be one byte range ('bytes=first-last', 'bytes=first-' or 'bytes=-suffix'), got '{value}'"
        ))
    };
    let spec = value.trim().strip_prefix("bytes=").ok_or_else(bad)?;
    if spec.contains(',') {
        return Err(bad());
    }
    let (first, last) = spec.trim().split_once('-').ok_or_else(bad)?;
    let number = |s: &str| s.trim().parse::<u64>().map_err(|_| bad());
    if first.trim().is_empty() {
        return Ok(ByteRange::Suffix(number(last)?));
    }
    let first = number(first)?;
    let last = if last.trim().is_empty() {
        None
    } else {
        Some(number(last)?)
    };
    if last.is_some_and(|l| l < first) {
        return Err(bad());
    }
    Ok(ByteRange::From { first, last })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_resolve_as_rfc_9110_says() {
        let r = parse_range("bytes=0-0").unwrap();
        assert_eq!(r.resolve(10), Some(0..1));
        assert_eq!(r.resolve(0), None);
        assert_eq!(parse_range("bytes=4-").unwrap().resolve(10), Some(4..10));
        assert_eq!(parse_range("bytes=4-100").unwrap().resolve(10), Some(4..10));
        assert_eq!(parse_range("bytes=10-").unwrap().resolve(10), None);
        assert_eq!(parse_range("bytes=-3").unwrap().resolve(10), Some(7..10));
        assert_eq!(parse_range("bytes=-30").unwrap().resolve(10), Some(0..10));
        assert_eq!(parse_range("bytes=-0").unwrap().resolve(10), None);
        for bad in [
            "",
            "bytes=",
            "bytes=5-2",
            "bytes=0-1,3-4",
            "items=0-1",
            "bytes=a-b",
            "bytes=-",
        ] {
            assert!(parse_range(bad).is_err(), "{bad}");
        }
        let huge = parse_range(&format!("bytes=0-{}", u64::MAX)).unwrap();
        assert_eq!(huge.resolve(5), Some(0..5));
    }
}
