//! Object-store requests counted by operation, for `/metrics`
//! (`lancet_object_store_requests_total{op}`): every store lance opens through the server's
//! session (tables, catalogs, the data root) is wrapped at its provider, so the count covers
//! them all. On a local root these are file-system calls; on `s3://` and friends, billed
//! requests.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use lance::io::{ObjectStore as LanceStore, ObjectStoreParams, ObjectStoreRegistry};
use lance_io::object_store::{ObjectStoreProvider, WrappingObjectStore};
use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use url::Url;

/// The operations counted, as `/metrics` names them.
pub const OPS: [&str; 8] = [
    "get",
    "put",
    "head",
    "list",
    "delete",
    "copy",
    "rename",
    "multipart",
];

/// Requests per operation, for the whole process.
#[derive(Debug, Default)]
pub struct Counts([AtomicU64; OPS.len()]);

impl Counts {
    fn add(&self, op: usize, n: u64) {
        self.0[op].fetch_add(n, Ordering::Relaxed);
    }

    /// (operation, requests) in [`OPS`] order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        OPS.iter()
            .zip(&self.0)
            .map(|(op, n)| (*op, n.load(Ordering::Relaxed)))
            .collect()
    }
}

const GET: usize = 0;
const PUT: usize = 1;
const HEAD: usize = 2;
const LIST: usize = 3;
const DELETE: usize = 4;
const COPY: usize = 5;
const RENAME: usize = 6;
const MULTIPART: usize = 7;

/// Wrap every provider `registry` has so the stores it makes count their requests in `counts`.
pub fn count_requests(registry: &ObjectStoreRegistry, counts: Arc<Counts>) {
    for scheme in [
        "file",
        "file-object-store",
        "memory",
        "s3",
        "s3+ddb",
        "gs",
        "az",
        "abfss",
    ] {
        if let Some(inner) = registry.get_provider(scheme) {
            registry.insert(
                scheme,
                Arc::new(CountingProvider {
                    inner,
                    counts: counts.clone(),
                }),
            );
        }
    }
}

#[derive(Debug)]
struct CountingProvider {
    inner: Arc<dyn ObjectStoreProvider>,
    counts: Arc<Counts>,
}

#[async_trait::async_trait]
impl ObjectStoreProvider for CountingProvider {
    async fn new_store(
        &self,
        base_path: Url,
        params: &ObjectStoreParams,
    ) -> lance_core::Result<LanceStore> {
        let mut store = self.inner.new_store(base_path, params).await?;
        store.apply_wrapper(&Wrapper(self.counts.clone()));
        Ok(store)
    }

    fn extract_path(&self, url: &Url) -> lance_core::Result<Path> {
        self.inner.extract_path(url)
    }

    fn calculate_object_store_prefix(
        &self,
        url: &Url,
        storage_options: Option<&HashMap<String, String>>,
    ) -> lance_core::Result<String> {
        self.inner
            .calculate_object_store_prefix(url, storage_options)
    }
}

#[derive(Debug)]
struct Wrapper(Arc<Counts>);

impl WrappingObjectStore for Wrapper {
    fn wrap(&self, _prefix: &str, original: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        Arc::new(Counting {
            inner: original,
            counts: self.0.clone(),
        })
    }

    // Observing only: the pushed-down listing is kept, and counted.
    fn wrap_paginated(
        &self,
        _prefix: &str,
        original: Arc<dyn PaginatedListStore>,
    ) -> Option<Arc<dyn PaginatedListStore>> {
        Some(Arc::new(CountingLister {
            inner: original,
            counts: self.0.clone(),
        }))
    }
}

#[derive(Debug)]
struct Counting {
    inner: Arc<dyn ObjectStore>,
    counts: Arc<Counts>,
}

impl fmt::Display for Counting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counting({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for Counting {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.counts.add(PUT, 1);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.counts.add(MULTIPART, 1);
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let op = if options.head { HEAD } else { GET };
        self.counts.add(op, 1);
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        // The inner store coalesces ranges into fewer requests; counted as asked for.
        self.counts.add(GET, ranges.len() as u64);
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let counts = self.counts.clone();
        self.inner
            .delete_stream(locations.inspect(move |_| counts.add(DELETE, 1)).boxed())
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.counts.add(LIST, 1);
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.counts.add(LIST, 1);
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.counts.add(LIST, 1);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.counts.add(COPY, 1);
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.counts.add(RENAME, 1);
        self.inner.rename_opts(from, to, options).await
    }
}

struct CountingLister {
    inner: Arc<dyn PaginatedListStore>,
    counts: Arc<Counts>,
}

#[async_trait::async_trait]
impl PaginatedListStore for CountingLister {
    async fn list_paginated(
        &self,
        prefix: Option<&str>,
        opts: PaginatedListOptions,
    ) -> Result<PaginatedListResult> {
        self.counts.add(LIST, 1);
        self.inner.list_paginated(prefix, opts).await
    }
}
