//! Prewarming: load an index into the session's cache, or read columns once so their pages
//! are in memory (the OS page cache for a local directory) before queries need them.

use futures::TryStreamExt;
use lance::index::DatasetIndexExt;

use super::{At, Store};
use crate::error::{ApiError, ApiResult};

impl Store {
    /// Load every segment of index `name` into the session's index cache.
    pub async fn prewarm_index(&self, location: &str, at: &At, name: &str) -> ApiResult<()> {
        let ds = self.read(location, at).await?;
        super::indexes::require_index(&ds, name).await?;
        ds.prewarm_index(name).await.map_err(ApiError::from)
    }

    /// Read `columns` (all when None) of every row once; answers the rows and bytes read.
    pub async fn prewarm_columns(
        &self,
        location: &str,
        at: &At,
        columns: Option<&[String]>,
    ) -> ApiResult<(u64, u64)> {
        let ds = self.read(location, at).await?;
        let mut scanner = ds.scan();
        if let Some(cols) = columns {
            for c in cols {
                crate::field_path::resolve(ds.schema(), c)?;
            }
            scanner.project(cols).map_err(ApiError::from)?;
        }
        let mut stream = scanner.try_into_stream().await.map_err(ApiError::from)?;
        let (mut rows, mut bytes) = (0u64, 0u64);
        while let Some(batch) = stream.try_next().await.map_err(ApiError::from)? {
            rows += batch.num_rows() as u64;
            bytes += batch.get_array_memory_size() as u64;
        }
        Ok((rows, bytes))
    }
}
