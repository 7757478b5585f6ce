//! Object-store requests counted by operation and area, for `/metrics`
//! (`lancet_object_store_requests_total{op,area}`): every store lance opens through the
//! server's session (tables, catalogs, the data root) is wrapped at its provider, so the count
//! covers them all. On a local root these are file-system calls; on `s3://` and friends, billed
//! requests. The area tells what a request served: `tables` (tenants' tables and catalogs,
//! what client requests cost) or `server` (the server's own state under the root: jobs, the
//! auth object, UDF modules, functions and secrets, mostly read by background loops).

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

/// The areas counted apart, as `/metrics` names them.
pub const AREAS: [&str; 2] = ["tables", "server"];

/// Top-level folders of the root that hold server state rather than tables (see
/// `root/mod.rs`).
const SERVER_DIRS: [&str; 5] = ["_jobs", "_auth", "_udfs", "_functions", "_secrets"];

/// Requests per area and operation, for the whole process.
#[derive(Debug, Default)]
pub struct Counts([[AtomicU64; OPS.len()]; AREAS.len()]);

impl Counts {
    fn add(&self, path: Option<&Path>, op: usize, n: u64) {
        self.0[area(path)][op].fetch_add(n, Ordering::Relaxed);
    }

    /// (area, operation, requests) in [`AREAS`] and [`OPS`] order.
    pub fn snapshot(&self) -> Vec<(&'static str, &'static str, u64)> {
        let mut out = Vec::with_capacity(AREAS.len() * OPS.len());
        for (area, counts) in AREAS.iter().zip(&self.0) {
            for (op, n) in OPS.iter().zip(counts) {
                out.push((*area, *op, n.load(Ordering::Relaxed)));
            }
        }
        out
    }
}

/// Index in [`AREAS`] of a request for `path`.
fn area(path: Option<&Path>) -> usize {
    let server = path.is_some_and(|p| p.parts().any(|part| SERVER_DIRS.contains(&part.as_ref())));
    usize::from(server)
}

const GET: usize = 0;
const PUT: usize = 1;
const HEAD: usize = 2;
const LIST: usize = 3;
const DELETE: usize = 4;
const COPY: usize = 5;
const RENAME: usize = 6;
const MULTIPART: usize = 7;

/// Wrap every provider `registry` has so the stores it makes count their requests in `counts`,
/// and remote stores (not `file` or `memory`) answer immutable reads from `cache` when given
/// (`object_cache.rs`; hits are not requests, so they are not counted).
pub fn count_requests(
    registry: &ObjectStoreRegistry,
    counts: Arc<Counts>,
    cache: Option<Arc<crate::object_cache::ObjectCache>>,
) {
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
                    cache: cache
                        .clone()
                        .filter(|_| !scheme.starts_with("file") && scheme != "memory")
                        .map(crate::object_cache::Wrapper),
                }),
            );
        }
    }
}

#[derive(Debug)]
struct CountingProvider {
    inner: Arc<dyn ObjectStoreProvider>,
    counts: Arc<Counts>,
    cache: Option<crate::object_cache::Wrapper>,
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
        if let Some(cache) = &self.cache {
            store.apply_wrapper(cache);
        }
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
        self.counts.add(Some(location), PUT, 1);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.counts.add(Some(location), MULTIPART, 1);
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let op = if options.head { HEAD } else { GET };
        self.counts.add(Some(location), op, 1);
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        // The inner store coalesces ranges into fewer requests; counted as asked for.
        self.counts.add(Some(location), GET, ranges.len() as u64);
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let counts = self.counts.clone();
        self.inner.delete_stream(
            locations
                .inspect(move |p| counts.add(p.as_ref().ok(), DELETE, 1))
                .boxed(),
        )
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.counts.add(prefix, LIST, 1);
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.counts.add(prefix, LIST, 1);
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.counts.add(prefix, LIST, 1);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.counts.add(Some(from), COPY, 1);
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.counts.add(Some(from), RENAME, 1);
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
        let path = prefix.map(Path::from);
        self.counts.add(path.as_ref(), LIST, 1);
        self.inner.list_paginated(prefix, opts).await
    }
}
