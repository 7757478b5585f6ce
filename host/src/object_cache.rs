//! Byte ranges of immutable table files held in memory, on object-store roots. Lance never
//! rewrites a data file, a deletion file or an index file: a new version writes new files
//! (named by UUID), so a range read once can be answered from memory for as long as it is
//! kept, with no check. Lance itself caches metadata and opened indexes, not data: without this
//! every query on `s3://` fetches the rows it returns (one or more GETs of 10-60 ms each), and
//! on a local root the kernel's page cache already does this job, so it is used only for
//! remote stores.
//!
//! What is cached: bounded range reads of paths with a `data/` folder and a `.lance` name, or
//! under `_indices/` or `_deletions/`, no larger than [`MAX_RANGE`], with no condition or
//! version in the request. Everything else (manifests, the server's own state, listings,
//! writes) goes to the store as before. Entries are evicted least-recently-used by size.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use lance_io::object_store::WrappingObjectStore;
use object_store::list::PaginatedListStore;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    Result,
};

/// Larger reads (whole-file copies, big scans) pass through: caching them would evict many
/// small pages for one read unlikely to repeat.
const MAX_RANGE: u64 = 16 << 20;

/// (store prefix, path, start, end).
type RangeKey = (Arc<str>, Path, u64, u64);

pub struct ObjectCache {
    ranges: moka::sync::Cache<RangeKey, Bytes>,
    /// What a whole-object read answered about each file (a cached range read needs it).
    metas: moka::sync::Cache<(Arc<str>, Path), ObjectMeta>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl fmt::Debug for ObjectCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectCache({} bytes)", self.ranges.weighted_size())
    }
}

/// Counters for `/metrics`.
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub bytes: u64,
}

impl ObjectCache {
    /// A cache holding up to `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Self {
            ranges: moka::sync::Cache::builder()
                .max_capacity(capacity)
                .weigher(|(_, path, _, _): &RangeKey, bytes: &Bytes| {
                    (bytes.len() + path.as_ref().len() + 64).min(u32::MAX as usize) as u32
                })
                .build(),
            metas: moka::sync::Cache::new(100_000),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes: self.ranges.weighted_size(),
        }
    }

    fn get(&self, key: &RangeKey) -> Option<Bytes> {
        let found = self.ranges.get(key);
        if found.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    fn missed(&self, n: usize) {
        self.misses.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Installs an [`ObjectCache`] on the stores lance opens (see `object_requests.rs`).
#[derive(Clone)]
pub struct Wrapper(pub Arc<ObjectCache>);

impl fmt::Debug for Wrapper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ObjectCache")
    }
}

impl WrappingObjectStore for Wrapper {
    fn wrap(&self, prefix: &str, original: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        Arc::new(Caching {
            prefix: prefix.into(),
            inner: original,
            cache: self.0.clone(),
        })
    }

    // Listings are never cached: the pushed-down one is kept as it is.
    fn wrap_paginated(
        &self,
        _prefix: &str,
        original: Arc<dyn PaginatedListStore>,
    ) -> Option<Arc<dyn PaginatedListStore>> {
        Some(original)
    }
}

/// True for the files lance never rewrites (see the module docs).
fn immutable(path: &Path) -> bool {
    let parts: Vec<_> = path.parts().collect();
    let Some((name, folders)) = parts.split_last() else {
        return false;
    };
    folders.iter().any(|p| {
        let p = p.as_ref();
        p == "_indices" || p == "_deletions" || (p == "data" && name.as_ref().ends_with(".lance"))
    })
}

/// A whole-object read, in the cache's keys.
const WHOLE: Range<u64> = 0..u64::MAX;

/// The bounded range `options` asks for ([`WHOLE`]: the whole object), when the read may be
/// answered from the cache.
fn cacheable(options: &GetOptions) -> Option<Range<u64>> {
    let plain = options.if_match.is_none()
        && options.if_none_match.is_none()
        && options.if_modified_since.is_none()
        && options.if_unmodified_since.is_none()
        && options.version.is_none()
        && !options.head;
    match &options.range {
        Some(GetRange::Bounded(r)) if plain && r.end > r.start && r.end - r.start <= MAX_RANGE => {
            Some(r.clone())
        }
        None if plain => Some(WHOLE),
        _ => None,
    }
}

fn answer(bytes: Bytes, meta: ObjectMeta, range: Range<u64>) -> GetResult {
    GetResult {
        payload: GetResultPayload::Stream(futures::stream::once(async move { Ok(bytes) }).boxed()),
        meta,
        range,
        attributes: Default::default(),
        extensions: Default::default(),
    }
}

#[derive(Debug)]
struct Caching {
    prefix: Arc<str>,
    inner: Arc<dyn ObjectStore>,
    cache: Arc<ObjectCache>,
}

impl fmt::Display for Caching {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Caching({})", self.inner)
    }
}

impl Caching {
    fn key(&self, location: &Path, range: &Range<u64>) -> RangeKey {
        (
            self.prefix.clone(),
            location.clone(),
            range.start,
            range.end,
        )
    }
}

#[async_trait::async_trait]
impl ObjectStore for Caching {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let range = match cacheable(&options) {
            Some(r) if immutable(location) => r,
            _ => return self.inner.get_opts(location, options).await,
        };
        let key = self.key(location, &range);
        let meta_key = (self.prefix.clone(), location.clone());
        if let Some(meta) = self.cache.metas.get(&meta_key)
            && let Some(bytes) = self.cache.get(&key)
        {
            let range = if range == WHOLE { 0..meta.size } else { range };
            return Ok(answer(bytes, meta, range));
        }
        self.cache.missed(1);
        let fetched = self.inner.get_opts(location, options).await?;
        if range == WHOLE && fetched.meta.size > MAX_RANGE {
            return Ok(fetched); // streamed through, as asked
        }
        let (meta, got) = (fetched.meta.clone(), fetched.range.clone());
        let bytes = fetched.bytes().await?;
        let asked = if range == WHOLE { 0..meta.size } else { range };
        if got == asked && bytes.len() as u64 == asked.end - asked.start {
            self.cache.metas.insert(meta_key, meta.clone());
            self.cache.ranges.insert(key, bytes.clone());
        }
        Ok(answer(bytes, meta, got))
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        if !immutable(location) {
            return self.inner.get_ranges(location, ranges).await;
        }
        let mut out: Vec<Option<Bytes>> = ranges
            .iter()
            .map(|r| self.cache.get(&self.key(location, r)))
            .collect();
        let missing: Vec<Range<u64>> = ranges
            .iter()
            .zip(&out)
            .filter(|(_, hit)| hit.is_none())
            .map(|(r, _)| r.clone())
            .collect();
        if !missing.is_empty() {
            self.cache.missed(missing.len());
            let fetched = self.inner.get_ranges(location, &missing).await?;
            if fetched.len() != missing.len() {
                return Err(object_store::Error::Generic {
                    store: "ObjectCache",
                    source: format!(
                        "{location}: asked for {} ranges, got {}",
                        missing.len(),
                        fetched.len()
                    )
                    .into(),
                });
            }
            let mut fetched = fetched.into_iter();
            for (slot, r) in out.iter_mut().zip(ranges) {
                if slot.is_none() {
                    let bytes = fetched.next().unwrap_or_default(); // as many as missing
                    if r.end - r.start <= MAX_RANGE {
                        self.cache
                            .ranges
                            .insert(self.key(location, r), bytes.clone());
                    }
                    *slot = Some(bytes);
                }
            }
        }
        Ok(out.into_iter().map(Option::unwrap_or_default).collect())
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    fn store(cache: &Arc<ObjectCache>, inner: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        Wrapper(cache.clone()).wrap("memory://", inner)
    }

    #[test]
    fn only_files_lance_never_rewrites_are_cached() {
        for p in [
            "root/tenants/t/a.lance/data/0a1b.lance",
            "t.lance/tree/b/data/x.lance",
            "t.lance/_indices/uuid/index.idx",
            "t.lance/_deletions/1-2-3.arrow",
        ] {
            assert!(immutable(&Path::from(p)), "{p}");
        }
        for p in [
            "t.lance/_versions/18446744073709551614.manifest",
            "t.lance/_latest.manifest",
            "_jobs/j/job.json",
            "data/notes.txt",
            "t.lance/_transactions/1-x.txn",
        ] {
            assert!(!immutable(&Path::from(p)), "{p}");
        }
    }

    #[tokio::test]
    async fn a_range_read_twice_is_fetched_once_and_answers_the_same_bytes() {
        let inner = Arc::new(InMemory::new());
        let path = Path::from("t.lance/data/f.lance");
        inner
            .put(&path, Bytes::from_static(b"0123456789").into())
            .await
            .unwrap();
        let cache = Arc::new(ObjectCache::new(1 << 20));
        let store = store(&cache, inner.clone());
        assert_eq!(store.get_range(&path, 2..5).await.unwrap(), "234");
        assert_eq!(store.get_range(&path, 2..5).await.unwrap(), "234");
        let s = cache.stats();
        assert_eq!((s.hits, s.misses), (1, 1));
        // Other ranges, and reads with a condition, go to the store.
        assert_eq!(store.get_range(&path, 0..2).await.unwrap(), "01");
        assert_eq!(cache.stats().misses, 2);
        let head = store.head(&path).await.unwrap();
        assert_eq!(head.size, 10);
        assert_eq!(
            store.get_ranges(&path, &[2..5, 5..7]).await.unwrap(),
            vec![Bytes::from_static(b"234"), Bytes::from_static(b"56")]
        );
        assert_eq!(cache.stats().hits, 2);
        // A whole-object read (lance reads small files whole) too.
        for _ in 0..2 {
            let whole = store.get(&path).await.unwrap();
            assert_eq!(whole.range, 0..10);
            assert_eq!(whole.bytes().await.unwrap(), "0123456789");
        }
        assert_eq!(cache.stats().hits, 3);
    }

    #[tokio::test]
    async fn mutable_objects_are_always_read_from_the_store() {
        let inner = Arc::new(InMemory::new());
        let path = Path::from("_jobs/j/job.json");
        inner
            .put(&path, Bytes::from_static(b"old").into())
            .await
            .unwrap();
        let cache = Arc::new(ObjectCache::new(1 << 20));
        let store = store(&cache, inner.clone());
        assert_eq!(store.get_range(&path, 0..3).await.unwrap(), "old");
        inner
            .put(&path, Bytes::from_static(b"new").into())
            .await
            .unwrap();
        assert_eq!(store.get_range(&path, 0..3).await.unwrap(), "new");
        assert_eq!(cache.stats().hits + cache.stats().misses, 0);
    }
}
