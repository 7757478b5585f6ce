//! Server state kept under the data root, beside the tables: the auth file, job records and
//! checkpoints, UDF modules, batch-commit intents and leases. It is the one home of such state,
//! so that a node holds nothing another node needs: a local directory or an object store
//! (`s3://`, `gs://`, `az://`) behave the same, and several processes can share either.
//!
//! Objects are read and written whole. Two conditional writes make coordination possible
//! without a lock service: [`RootStore::create`] (only if absent: S3's `If-None-Match: *`) and
//! [`RootStore::replace`] (only if unchanged since it was read: `If-Match`). Object stores
//! answer both natively. On a local root `create` is a hard link (atomic), and `replace` holds
//! an exclusive `flock` on a lock file beside the object while it compares and renames, which
//! covers every process on the host.

pub mod lease;
pub mod modules;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use lance::io::{ObjectStore, ObjectStoreParams, StorageOptionsAccessor};
use lance::session::Session;
use object_store::path::Path;
use object_store::{ObjectStore as _, ObjectStoreExt as _, PutMode, PutOptions, UpdateVersion};

use crate::error::{ApiError, ApiResult};

pub use lease::{Lease, LeaseBody};

/// The state of an object when it was read, for a later [`RootStore::replace`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    e_tag: Option<String>,
    version: Option<String>,
}

impl Version {
    fn update(&self) -> UpdateVersion {
        UpdateVersion {
            e_tag: self.e_tag.clone(),
            version: self.version.clone(),
        }
    }
}

/// An object's bytes and the version they were read at.
#[derive(Debug, Clone)]
pub struct Versioned {
    pub bytes: Bytes,
    pub version: Version,
}

pub struct RootStore {
    uri: String,
    store: Arc<ObjectStore>,
    base: Path,
    /// The root's directory when it is on local disk (for `replace`'s file lock).
    local: Option<PathBuf>,
}

/// Suffix of the lock files a local `replace` takes; never listed as objects.
const LOCK_SUFFIX: &str = ".lock";

/// An object as a listing shows it.
#[derive(Debug, Clone)]
pub struct Listed {
    /// Its key, relative to the root.
    pub key: String,
    pub size: u64,
    /// When it was last written.
    pub modified: chrono::DateTime<chrono::Utc>,
}

fn store_error(what: &str, key: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::internal(format!("cannot {what} {key} under the data root: {e}"))
}

/// Lance's object-store parameters for these storage options (on top of the environment,
/// which lance's providers read themselves).
pub fn store_params(options: &HashMap<String, String>) -> ObjectStoreParams {
    ObjectStoreParams {
        storage_options_accessor: (!options.is_empty())
            .then(|| Arc::new(StorageOptionsAccessor::with_static_options(options.clone()))),
        ..Default::default()
    }
}

impl RootStore {
    /// The store of root `uri` (an absolute local path or an object-store URI).
    pub async fn open(
        uri: &str,
        options: &HashMap<String, String>,
        session: &Session,
    ) -> ApiResult<Self> {
        let (store, base) =
            ObjectStore::from_uri_and_params(session.store_registry(), uri, &store_params(options))
                .await
                .map_err(|e| ApiError::internal(format!("cannot open the data root {uri}: {e}")))?;
        let local = if uri.contains("://") {
            uri.strip_prefix("file://").map(PathBuf::from)
        } else {
            Some(PathBuf::from(uri))
        };
        Ok(Self {
            uri: uri.trim_end_matches('/').to_string(),
            store,
            base,
            local,
        })
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }

    pub fn is_local(&self) -> bool {
        self.local.is_some()
    }

    fn path(&self, key: &str) -> Path {
        key.split('/')
            .filter(|p| !p.is_empty())
            .fold(self.base.clone(), |p, part| p.join(part))
    }

    pub async fn get(&self, key: &str) -> ApiResult<Option<Versioned>> {
        self.read(&self.path(key), key).await
    }

    /// An object named by its path in the store rather than a key under the root (such as a
    /// manifest path lance reported).
    /// A client names it, so it is read only if it holds at most `max` bytes (a 400 says so
    /// otherwise): the path could name any large object.
    pub async fn get_at_path(&self, path: &str, max: u64) -> ApiResult<Option<Versioned>> {
        let parsed = Path::parse(path)
            .map_err(|e| ApiError::invalid(format!("invalid object path '{path}': {e}")))?;
        self.read_within(&parsed, path, max).await
    }

    async fn read(&self, path: &Path, key: &str) -> ApiResult<Option<Versioned>> {
        self.read_within(path, key, u64::MAX).await
    }

    async fn read_within(&self, path: &Path, key: &str, max: u64) -> ApiResult<Option<Versioned>> {
        match self.store.inner.get(path).await {
            Ok(r) if r.meta.size > max => Err(ApiError::invalid(format!(
                "{key} holds {} bytes, more than the {max} allowed here",
                r.meta.size
            ))),
            Ok(r) => {
                let version = Version {
                    e_tag: r.meta.e_tag.clone(),
                    version: r.meta.version.clone(),
                };
                let bytes = r.bytes().await.map_err(|e| store_error("read", key, e))?;
                Ok(Some(Versioned { bytes, version }))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(store_error("read", key, e)),
        }
    }

    /// The object's current version, without its bytes.
    pub async fn head(&self, key: &str) -> ApiResult<Option<Version>> {
        match self.store.inner.head(&self.path(key)).await {
            Ok(meta) => Ok(Some(Version {
                e_tag: meta.e_tag,
                version: meta.version,
            })),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(store_error("read", key, e)),
        }
    }

    /// Write unconditionally (atomic: readers see the old or the new bytes).
    pub async fn put(&self, key: &str, bytes: impl Into<Bytes>) -> ApiResult<()> {
        let bytes: Bytes = bytes.into();
        self.store
            .inner
            .put(&self.path(key), bytes.into())
            .await
            .map(|_| ())
            .map_err(|e| store_error("write", key, e))
    }

    /// Write only if no object is there; `None` when one is.
    pub async fn create(&self, key: &str, bytes: impl Into<Bytes>) -> ApiResult<Option<Version>> {
        self.put_if(key, bytes.into(), PutMode::Create).await
    }

    /// Write only if the object is still at `expected`; `None` when it changed (or is gone).
    pub async fn replace(
        &self,
        key: &str,
        bytes: impl Into<Bytes>,
        expected: &Version,
    ) -> ApiResult<Option<Version>> {
        let bytes: Bytes = bytes.into();
        if let Some(dir) = &self.local {
            return self.replace_local(dir, key, bytes, expected).await;
        }
        self.put_if(key, bytes, PutMode::Update(expected.update()))
            .await
    }

    /// A conditional write; `None` when its condition does not hold.
    async fn put_if(&self, key: &str, bytes: Bytes, mode: PutMode) -> ApiResult<Option<Version>> {
        let options = PutOptions {
            mode,
            ..Default::default()
        };
        match self
            .store
            .inner
            .put_opts(&self.path(key), bytes.into(), options)
            .await
        {
            Ok(r) => Ok(Some(Version {
                e_tag: r.e_tag,
                version: r.version,
            })),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. })
            | Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(store_error("write", key, e)),
        }
    }

    /// A local file system has no conditional overwrite: compare and rename under an exclusive
    /// lock every local `replace` of this object takes.
    async fn replace_local(
        &self,
        dir: &std::path::Path,
        key: &str,
        bytes: Bytes,
        expected: &Version,
    ) -> ApiResult<Option<Version>> {
        let lock_path = dir.join(format!("{}{LOCK_SUFFIX}", key.trim_start_matches('/')));
        let lock = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
            if let Some(parent) = lock_path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_path)?;
            file.lock()?;
            Ok(file)
        })
        .await
        .map_err(|e| store_error("lock", key, e))?
        .map_err(|e| store_error("lock", key, e))?;
        let result = async {
            if self.head(key).await?.as_ref() != Some(expected) {
                return Ok(None);
            }
            self.put(key, bytes).await?;
            self.head(key).await
        }
        .await;
        drop(lock);
        result
    }

    /// Remove an object (gone already is fine).
    pub async fn delete(&self, key: &str) -> ApiResult<()> {
        match self.store.inner.delete(&self.path(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_error("delete", key, e)),
        }
    }

    /// Every object under `prefix`, as keys relative to the root, sorted.
    pub async fn list(&self, prefix: &str) -> ApiResult<Vec<String>> {
        Ok(self
            .list_meta(prefix)
            .await?
            .into_iter()
            .map(|o| o.key)
            .collect())
    }

    /// Every object under `prefix` with its size and time, sorted by key.
    pub async fn list_meta(&self, prefix: &str) -> ApiResult<Vec<Listed>> {
        let dir = self.path(prefix);
        let listed: Vec<_> = match self.store.inner.list(Some(&dir)).try_collect().await {
            Ok(l) => l,
            Err(object_store::Error::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(store_error("list", prefix, e)),
        };
        let base = self.base.as_ref();
        let mut objects: Vec<Listed> = listed
            .into_iter()
            .filter(|m| !m.location.as_ref().ends_with(LOCK_SUFFIX))
            .map(|m| {
                let k = m.location.as_ref();
                Listed {
                    key: k
                        .strip_prefix(base)
                        .map(|r| r.trim_start_matches('/').to_string())
                        .unwrap_or_else(|| k.to_string()),
                    size: m.size,
                    modified: m.last_modified,
                }
            })
            .collect();
        objects.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(objects)
    }

    /// The names of the folders directly under `prefix` (one listing request, however many
    /// objects they hold), sorted.
    pub async fn list_dirs(&self, prefix: &str) -> ApiResult<Vec<String>> {
        let dir = self.path(prefix);
        let listed = match self.store.inner.list_with_delimiter(Some(&dir)).await {
            Ok(l) => l,
            Err(object_store::Error::NotFound { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(store_error("list", prefix, e)),
        };
        let mut names: Vec<String> = listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        names.sort();
        Ok(names)
    }

    /// On a local root, remove the folder `prefix` if it is empty (lock files aside); true
    /// when it was removed. An object store has no folders: false.
    pub async fn remove_empty_dir(&self, prefix: &str) -> bool {
        let Some(dir) = &self.local else {
            return false;
        };
        let dir = dir.join(prefix.trim_start_matches('/'));
        if let Ok(mut entries) = tokio::fs::read_dir(&dir).await {
            while let Ok(Some(e)) = entries.next_entry().await {
                if e.file_name().to_string_lossy().ends_with(LOCK_SUFFIX) {
                    let _ = tokio::fs::remove_file(e.path()).await;
                }
            }
        }
        tokio::fs::remove_dir(&dir).await.is_ok()
    }

    /// Remove every object under `prefix` (and, on a local root, the folder with the lock
    /// files `replace` left in it).
    pub async fn delete_all(&self, prefix: &str) -> ApiResult<()> {
        for key in self.list(prefix).await? {
            self.delete(&key).await?;
        }
        if let Some(dir) = &self.local {
            let _ = tokio::fs::remove_dir_all(dir.join(prefix.trim_start_matches('/'))).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_object_named_by_path_is_read_only_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let session = lance::session::Session::default();
        let root = RootStore::open(dir.path().to_str().unwrap(), &Default::default(), &session)
            .await
            .unwrap();
        root.put("t/staged.manifest", vec![7u8; 100]).await.unwrap();
        let path = root.path("t/staged.manifest").to_string();
        let read = root.get_at_path(&path, 100).await.unwrap().unwrap();
        assert_eq!(read.bytes.len(), 100);
        let err = root.get_at_path(&path, 99).await.unwrap_err();
        assert_eq!(
            err.status,
            axum::http::StatusCode::BAD_REQUEST,
            "{}",
            err.message
        );
        assert!(root.get_at_path("t/missing", 99).await.unwrap().is_none());
    }
}
