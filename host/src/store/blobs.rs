//! Blob columns (lance blob v2): whole values for a set of rows, and byte ranges of one value.
//! Lance locates each blob (inline in a data file, packed, or in a file of its own) and reads
//! only the bytes asked for; Lancet adds the per-request limits and refuses blobs stored
//! outside the table.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::LargeBinaryArray;
use bytes::Bytes;
use lance::Dataset;
use lance::dataset::BlobFile;
use lance_core::datatypes::BlobKind;
use lance_namespace::ErrorCode;

use super::{At, Store};
use crate::error::{ApiError, ApiResult};

/// Most row ids one `fetch_blobs` request may name (the lancedb client splits above this).
pub const MAX_FETCH_ROWS: usize = 1024;
/// Most blob bytes one `fetch_blobs` answer may carry. The lancedb client recognises the
/// refusal by its words ("fetch_blobs accepts at most ... total blob bytes") and retries with
/// fewer rows, or reads a single larger blob by ranges.
pub const MAX_FETCH_BYTES: u64 = 64 << 20;

/// A table version's blobs for some rows, located but not yet read.
pub struct Blobs {
    pub dataset: Arc<Dataset>,
    /// One per requested row, in order; `None` is a null blob.
    pub files: Vec<Option<BlobFile>>,
}

impl Store {
    /// Locate `column`'s blobs for `row_ids` (lance `_rowid`s) at `at`.
    pub async fn blobs(
        &self,
        location: &str,
        at: &At,
        column: &str,
        row_ids: &[u64],
    ) -> ApiResult<Blobs> {
        let dataset = self.read(location, at).await?;
        let field = dataset
            .schema()
            .field(column)
            .ok_or_else(|| ApiError::column_not_found(format!("column '{column}' not found")))?;
        if !field.is_blob() {
            return Err(ApiError::invalid(format!(
                "column '{column}' is not a blob column"
            )));
        }
        let files = dataset
            .take_blobs(row_ids, column)
            .await
            .map_err(missing_rows)?;
        for file in files.iter().flatten() {
            // Lance refuses to write such references unless told to; a table made elsewhere
            // could still hold one, and reading it would fetch from wherever it points.
            if file.kind() == BlobKind::External {
                return Err(ApiError::invalid(format!(
                    "column '{column}' holds a blob stored outside the table ({}); Lancet does not read external blobs",
                    file.uri().unwrap_or("no uri")
                )));
            }
        }
        Ok(Blobs { dataset, files })
    }
}

/// A row id that names no live row is the caller's mistake.
fn missing_rows(e: lance::Error) -> ApiError {
    let err = ApiError::from(e);
    if err.code == ErrorCode::Internal {
        return err;
    }
    ApiError::invalid(format!("fetch_blobs: {}", err.message))
}

/// Read every blob whole, refusing an answer over [`MAX_FETCH_BYTES`] before reading any.
pub async fn read_all(files: &[Option<BlobFile>]) -> ApiResult<LargeBinaryArray> {
    let total: u64 = files.iter().flatten().map(BlobFile::size).sum();
    if total > MAX_FETCH_BYTES {
        return Err(ApiError::invalid(format!(
            "fetch_blobs accepts at most {MAX_FETCH_BYTES} total blob bytes; these rows hold {total}"
        )));
    }
    let mut values: Vec<Option<Bytes>> = Vec::with_capacity(files.len());
    for file in files {
        values.push(match file {
            None => None,
            Some(f) if f.size() == 0 => Some(Bytes::new()),
            Some(f) => Some(f.read_range(0..f.size()).await.map_err(ApiError::from)?),
        });
    }
    Ok(LargeBinaryArray::from_iter(
        values.iter().map(|v| v.as_deref()),
    ))
}

/// Bytes `range` of one blob.
pub async fn read_range(file: &BlobFile, range: Range<u64>) -> ApiResult<Bytes> {
    if range.is_empty() {
        return Ok(Bytes::new());
    }
    file.read_range(range).await.map_err(ApiError::from)
}
