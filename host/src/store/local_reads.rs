//! Reads of local tables that the page cache already holds, done on the thread that asks.
//!
//! Lance reads a local table's files on tokio's blocking pool: each read is handed to a pool
//! thread and its answer handed back, whether the bytes come from the disk or, as for a served
//! table's hot files, from the page cache. A top-10 search makes a read per fragment its rows
//! sit in, and on these 2-core machines the hand-offs were most of the cost of taking those
//! rows (`take_rows` of 10 rows, CPU µs each, blocking pool / here: 481 / 367 on the bench
//! table's 40 fragments, 198 / 149 compacted; RESULTS has the runs). `preadv2` with
//! `RWF_NOWAIT` reads only what the page cache holds and never waits for the disk: such reads
//! are done in place. A read not wholly cached, or larger than [`INLINE_MAX_BYTES`], goes to
//! the blocking pool from the file already open, one hand-off as with lance's own reader; a
//! file that does not open or a range that does not fit it goes to object_store's local file
//! system, which reports it in its own terms.
//!
//! Lance takes its own reader for a store whose scheme is `file`; it reads through an
//! object_store only for `file-object-store`, so that is this store's scheme. Lance also plans
//! by the kind of store: that scheme counts as a cloud store when it picks which columns a
//! filtered scan reads only for the rows that pass, and a plain scan's batches are twice as
//! long on it. So only searches without a filter (vector, full-text: top-k answers, where the
//! reads are small and the gains are) read through this store; filtered queries and plain scans
//! keep the table's own store and plan as lance does for local tables. Writes never use it.

use std::fmt;
use std::fs::File;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use futures::stream::BoxStream;
use lance::Dataset;
use lance::io::ObjectStore as LanceStore;
use lance_io::object_store::{DEFAULT_DOWNLOAD_RETRY_COUNT, DEFAULT_LOCAL_IO_PARALLELISM};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    Result,
};

/// Larger reads go to the blocking pool even when cached: copying them would hold up the
/// other tasks of the runtime thread for longer than a hand-off costs. A take's or an index
/// lookup's reads are a few KiB; a scan's are megabytes.
pub const INLINE_MAX_BYTES: u64 = 256 * 1024;

/// Reads served here and reads passed on to the blocking pool, for `/metrics`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LocalReadStats {
    pub inline: u64,
    pub pooled: u64,
}

/// The read store for local tables' queries, shared by every table of this process.
pub struct LocalReads {
    store: Arc<LanceStore>,
    reader: Arc<CachedFirst>,
    enabled: bool,
}

impl LocalReads {
    /// A read store with lance's local defaults and `block_size` (the server's
    /// `--storage-option block_size`, when given).
    pub fn new(block_size: Option<usize>) -> Self {
        let reader = Arc::new(CachedFirst {
            fs: LocalFileSystem::new(),
            inline: AtomicU64::new(0),
            pooled: AtomicU64::new(0),
        });
        let url = url::Url::parse("file-object-store:///").expect("a constant URL");
        let store = LanceStore::new(
            reader.clone(),
            url,
            block_size,
            None,
            false,
            false,
            DEFAULT_LOCAL_IO_PARALLELISM,
            DEFAULT_DOWNLOAD_RETRY_COUNT,
            None,
        );
        Self {
            store: Arc::new(store),
            reader,
            enabled: true,
        }
    }

    /// Off: every search keeps its table's own store (`--inline-local-reads false`).
    pub fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
    }

    /// `ds` reading through this store when it is a table on the local file system, for a
    /// search without a filter (see the module docs); else `ds` itself.
    pub async fn for_search(&self, ds: &Arc<Dataset>) -> Arc<Dataset> {
        if !self.enabled || !supported() {
            return ds.clone();
        }
        match ds.object_store(None).await {
            Ok(own) if own.scheme() == "file" && own.has_direct_local_paths() => {
                Arc::new(ds.with_object_store(self.store.clone(), None))
            }
            _ => ds.clone(),
        }
    }

    pub fn stats(&self) -> LocalReadStats {
        LocalReadStats {
            inline: self.reader.inline.load(Ordering::Relaxed),
            pooled: self.reader.pooled.load(Ordering::Relaxed),
        }
    }
}

/// Cleared when the kernel or file system refuses `RWF_NOWAIT`: queries then keep their
/// tables' own stores, as without this module.
static NOWAIT_WORKS: AtomicBool = AtomicBool::new(true);

fn supported() -> bool {
    cfg!(all(target_os = "linux", target_env = "gnu")) && NOWAIT_WORKS.load(Ordering::Relaxed)
}

/// The local file system, with ranged reads of cached bytes done in place.
#[derive(Debug)]
struct CachedFirst {
    fs: LocalFileSystem,
    inline: AtomicU64,
    pooled: AtomicU64,
}

impl fmt::Display for CachedFirst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CachedFirst({})", self.fs)
    }
}

/// How a read goes, once its file is open and its range checked against the file's size.
enum Read {
    /// Answered from the page cache on this thread.
    Here(GetResult),
    /// Not wholly cached, or large: read on the blocking pool from the open file.
    Pool(File, std::fs::Metadata, Range<u64>),
}

impl CachedFirst {
    /// `range` of `location` (all of it when None), read here when it is no larger than
    /// [`INLINE_MAX_BYTES`] and wholly cached. None when the file does not open or the range
    /// does not fit it: the file system's own read then reports that in object_store's terms.
    fn start(&self, location: &Path, range: Option<&GetRange>) -> Option<Read> {
        let path = self.fs.path_to_filesystem(location).ok()?;
        let file = File::open(path).ok()?;
        let metadata = file.metadata().ok()?;
        let range = match range {
            Some(range) => range.as_range(metadata.len()).ok()?,
            None => 0..metadata.len(),
        };
        if range.end - range.start <= INLINE_MAX_BYTES
            && supported()
            && let Some(data) = read_nowait(&file, &range)
        {
            return Some(Read::Here(answer(location, &metadata, range, data)));
        }
        Some(Read::Pool(file, metadata, range))
    }
}

fn answer(
    location: &Path,
    metadata: &std::fs::Metadata,
    range: Range<u64>,
    data: Bytes,
) -> GetResult {
    GetResult {
        payload: GetResultPayload::Stream(futures::stream::once(async move { Ok(data) }).boxed()),
        meta: object_meta(location, metadata),
        range,
        attributes: Default::default(),
        extensions: Default::default(),
    }
}

/// `range` of the open `file`, on the blocking pool: one hand-off, as lance's own reader
/// (object_store's file system makes two, one to open and one to read).
async fn read_in_pool(file: File, range: Range<u64>) -> Result<Bytes> {
    use std::os::unix::fs::FileExt;
    let failed = |source: Box<dyn std::error::Error + Send + Sync>| object_store::Error::Generic {
        store: "LocalFileSystem",
        source,
    };
    tokio::task::spawn_blocking(move || {
        let mut buf = vec![0; (range.end - range.start) as usize];
        file.read_exact_at(&mut buf, range.start)?;
        Ok::<_, std::io::Error>(Bytes::from(buf))
    })
    .await
    .map_err(|e| failed(e.into()))?
    .map_err(|e| failed(e.into()))
}

/// `range` of `file`, read only from the page cache.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn read_nowait(file: &File, range: &Range<u64>) -> Option<Bytes> {
    use std::os::fd::AsRawFd;
    let mut buf = BytesMut::zeroed((range.end - range.start) as usize);
    let mut done = 0usize;
    while done < buf.len() {
        let rest = &mut buf[done..];
        let iov = libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        };
        let offset = (range.start + done as u64) as libc::off_t;
        // SAFETY: one iovec over `rest`, which lives for the call; the fd is open.
        let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
        if n > 0 {
            done += n as usize;
            continue;
        }
        if n < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                // The call or the flag is not supported here: stop trying.
                Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS) => {
                    NOWAIT_WORKS.store(false, Ordering::Relaxed);
                }
                // EAGAIN: some of it is not cached; anything else the pool read reports.
                _ => {}
            }
        }
        // 0: the file shrank under us (lance's files do not); the pool read reports it.
        return None;
    }
    Some(buf.freeze())
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn read_nowait(_file: &File, _range: &Range<u64>) -> Option<Bytes> {
    None
}

/// What object_store's local file system says of a file, so the two paths answer alike.
fn object_meta(location: &Path, metadata: &std::fs::Metadata) -> ObjectMeta {
    use std::os::unix::fs::MetadataExt;
    let modified = metadata
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .unwrap_or_default();
    let last_modified =
        chrono::DateTime::from_timestamp(modified.as_secs() as i64, modified.subsec_nanos())
            .unwrap_or_default();
    ObjectMeta {
        location: location.clone(),
        last_modified,
        size: metadata.len(),
        e_tag: Some(format!(
            "\"{:x}-{:x}-{:x}\"",
            metadata.ino(),
            modified.as_micros(),
            metadata.len()
        )),
        version: None,
    }
}

// Only reads matter here (the store serves queries); the rest is the file system's. Several
// ranges at once are object_store's default: merged where close, each merged range a `get_opts`.
#[async_trait::async_trait]
impl ObjectStore for CachedFirst {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.fs.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.fs.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        if plain(&options) {
            match self.start(location, options.range.as_ref()) {
                Some(Read::Here(result)) => {
                    self.inline.fetch_add(1, Ordering::Relaxed);
                    return Ok(result);
                }
                Some(Read::Pool(file, metadata, range)) => {
                    self.pooled.fetch_add(1, Ordering::Relaxed);
                    let data = read_in_pool(file, range.clone()).await?;
                    return Ok(answer(location, &metadata, range, data));
                }
                None => {}
            }
        }
        self.pooled.fetch_add(1, Ordering::Relaxed);
        self.fs.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.fs.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.fs.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.fs.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.fs.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.fs.rename_opts(from, to, options).await
    }
}

/// A read with no conditions: nothing the pool read would check that this one does not.
fn plain(options: &GetOptions) -> bool {
    !options.head
        && options.if_match.is_none()
        && options.if_none_match.is_none()
        && options.if_modified_since.is_none()
        && options.if_unmodified_since.is_none()
        && options.version.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, RecordBatch, RecordBatchIterator};
    use arrow_schema::{DataType, Field, Schema};
    use lance::dataset::WriteParams;
    use object_store::ObjectStoreExt;

    fn store() -> CachedFirst {
        CachedFirst {
            fs: LocalFileSystem::new(),
            inline: AtomicU64::new(0),
            pooled: AtomicU64::new(0),
        }
    }

    fn counts(s: &CachedFirst) -> (u64, u64) {
        (
            s.inline.load(Ordering::Relaxed),
            s.pooled.load(Ordering::Relaxed),
        )
    }

    #[tokio::test]
    async fn cached_ranges_are_read_in_place_and_answer_as_the_file_system_does() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data.bin");
        let bytes: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&file, &bytes).unwrap();
        let location = Path::from_absolute_path(&file).unwrap();
        let s = store();

        // Just written, so cached: read here, same bytes and metadata as the pool read.
        let here = s.get_range(&location, 1000..5096).await.unwrap();
        assert_eq!(&here[..], &bytes[1000..5096]);
        assert_eq!(counts(&s), (1, 0));
        let opts = |range: Range<u64>| GetOptions {
            range: Some(GetRange::Bounded(range)),
            ..Default::default()
        };
        let ours = s.get_opts(&location, opts(7..9)).await.unwrap();
        let theirs = s.fs.get_opts(&location, opts(7..9)).await.unwrap();
        assert_eq!(ours.meta, theirs.meta);
        assert_eq!(ours.range, theirs.range);
        assert_eq!(ours.bytes().await.unwrap(), theirs.bytes().await.unwrap());
        assert_eq!(counts(&s), (2, 0));

        // Larger than the in-place bound: the pool, same bytes; whole or as a range.
        let big = s.get_range(&location, 0..600_000).await.unwrap();
        assert_eq!(&big[..], &bytes[..]);
        let whole = s.get(&location).await.unwrap().bytes().await.unwrap();
        assert_eq!(&whole[..], &bytes[..]);
        assert_eq!(counts(&s), (2, 2));
        // A small file read whole (lance's reader for files under a block): here.
        let small = Path::from_absolute_path(dir.path().join("small.bin")).unwrap();
        std::fs::write(dir.path().join("small.bin"), &bytes[..1000]).unwrap();
        let got = s.get(&small).await.unwrap();
        assert_eq!(got.range, 0..1000);
        assert_eq!(&got.bytes().await.unwrap()[..], &bytes[..1000]);
        assert_eq!(counts(&s), (3, 2));

        // An end past the end of the file is cut to it, as the file system does.
        let tail = s.get_range(&location, 599_990..600_010).await.unwrap();
        assert_eq!(&tail[..], &bytes[599_990..]);
        assert_eq!(counts(&s), (4, 2));
        // An empty range, a start past the end, a missing file, a conditional read: the file system's own
        // answers.
        for bad in [10..10, 600_001..600_010] {
            let refused = s.get_range(&location, bad).await.unwrap_err();
            assert!(
                matches!(refused, object_store::Error::Generic { .. }),
                "{refused:?}"
            );
        }
        let missing = Path::from_absolute_path(dir.path().join("none.bin")).unwrap();
        let gone = s.get_range(&missing, 0..10).await.unwrap_err();
        assert!(
            matches!(gone, object_store::Error::NotFound { .. }),
            "{gone:?}"
        );
        let stale = GetOptions {
            if_match: Some("\"not-the-etag\"".into()),
            ..opts(0..10)
        };
        let refused = s.get_opts(&location, stale).await.unwrap_err();
        assert!(
            matches!(refused, object_store::Error::Precondition { .. }),
            "{refused:?}"
        );
        assert_eq!(counts(&s), (4, 6));
        let head = s.head(&location).await.unwrap();
        assert_eq!(head.size, 600_000);
        // Several ranges: merged (they are close) into one read, done here.
        let parts = s
            .get_ranges(&location, &[0..10, 100_000..100_020])
            .await
            .unwrap();
        assert_eq!(&parts[0][..], &bytes[0..10]);
        assert_eq!(&parts[1][..], &bytes[100_000..100_020]);
        assert_eq!(counts(&s), (5, 7)); // the head went to the file system
    }

    async fn table(uri: &str) -> Arc<Dataset> {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let batches: Vec<RecordBatch> = (0..4)
            .map(|f| {
                let ids = Int64Array::from_iter_values(f * 100..f * 100 + 100);
                RecordBatch::try_new(schema.clone(), vec![Arc::new(ids)]).unwrap()
            })
            .collect();
        let reader = RecordBatchIterator::new(batches.into_iter().map(Ok), schema.clone());
        let params = WriteParams {
            max_rows_per_file: 100,
            ..Default::default()
        };
        let mut ds = Dataset::write(reader, uri, Some(params)).await.unwrap();
        ds.delete("id % 7 = 0").await.unwrap();
        Arc::new(ds)
    }

    #[tokio::test]
    async fn local_tables_read_here_and_answer_the_same_rows() {
        let dir = tempfile::tempdir().unwrap();
        let ds = table(dir.path().join("t").to_str().unwrap()).await;
        let reads = LocalReads::new(None);
        let fast = reads.for_search(&ds).await;
        assert!(!Arc::ptr_eq(&fast, &ds));
        assert_eq!(
            fast.object_store(None).await.unwrap().scheme(),
            "file-object-store"
        );
        assert_eq!(fast.version().version, ds.version().version);

        let rows = |ds: Arc<Dataset>| async move {
            let batch = ds
                .take_rows(&[3, (1 << 32) | 6, (3 << 32) | 98], ds.schema().clone())
                .await
                .unwrap();
            let ids = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            ids.values().to_vec()
        };
        assert_eq!(rows(fast.clone()).await, vec![3, 106, 398]);
        assert_eq!(rows(ds.clone()).await, vec![3, 106, 398]);
        assert!(reads.stats().inline >= 3, "{:?}", reads.stats());
        assert_eq!(
            fast.count_rows(None).await.unwrap(),
            ds.count_rows(None).await.unwrap()
        );
        let scanned = fast.scan().try_into_batch().await.unwrap();
        assert_eq!(scanned.num_rows(), 400 - 58);

        // The knob off: the table's own store.
        let mut off = LocalReads::new(None);
        off.set_enabled(false);
        assert!(Arc::ptr_eq(&off.for_search(&ds).await, &ds));
    }

    #[tokio::test]
    async fn tables_off_the_local_file_system_keep_their_store() {
        let ds = table("memory://local-reads").await;
        let reads = LocalReads::new(None);
        assert!(Arc::ptr_eq(&reads.for_search(&ds).await, &ds));
    }
}
