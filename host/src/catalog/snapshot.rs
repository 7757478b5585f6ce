//! The tenant catalog's `__manifest` table held in memory, so namespace and table lookups and
//! listings are map reads instead of a lance scan each (~3 ms). Rebuilt when the table
//! changes, by whichever process changed it:
//!
//! - on a local root, the `__manifest/_versions` directory's mtime (one `stat`) says so: every
//!   catalog commit adds a file there. File times come from a coarse clock, so a snapshot is
//!   built only once the directory time is [`GRACE`] old: a later commit then always shows as
//!   a newer time. Within [`GRACE`] of a catalog write, lookups go to the namespace itself (its
//!   filtered scan, as before) rather than rebuilding the whole snapshot for every request.
//! - on an object store, the table's latest version (one listing), at most once per read
//!   consistency interval (`--read-consistency-interval`); a catalog change made through this
//!   process marks the snapshot for a check at once ([`Snapshots::changed`]), so a node always
//!   sees its own changes.
//!
//! Concurrent requests that find the snapshot out of date share one rebuild. Only positive
//! answers come from here: a name the snapshot lacks is asked of the namespace itself, which
//! gives the authoritative answer and error.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arrow_array::Array;
use arrow_array::cast::AsArray;
use futures::TryStreamExt;
use lance::session::Session;

use crate::error::{ApiError, ApiResult};

/// How much older than a snapshot's read its directory time must be for the snapshot to be
/// kept (Linux file times advance in clock ticks of 1-10 ms).
use crate::store::stamp::GRACE;

/// What separates the levels of an id in `object_id` (lance-namespace's manifest format).
pub const DELIMITER: &str = "$";

#[derive(Debug, Default)]
pub struct Snapshot {
    /// Namespace object id -> its properties (`None`: none stored).
    pub namespaces: BTreeMap<String, Option<HashMap<String, String>>>,
    /// Table object id -> where it is (relative to the root, as stored) and its properties.
    pub tables: BTreeMap<String, TableEntry>,
}

#[derive(Debug, Clone)]
pub struct TableEntry {
    pub location: String,
    pub properties: Option<HashMap<String, String>>,
}

impl Snapshot {
    /// Names of the direct children of namespace `parent` in `map`, sorted.
    pub fn children<'a, V>(map: &'a BTreeMap<String, V>, parent: &[String]) -> Vec<&'a str> {
        let prefix = match parent {
            [] => String::new(),
            p => format!("{}{DELIMITER}", p.join(DELIMITER)),
        };
        map.range(prefix.clone()..)
            .map(|(id, _)| id.as_str())
            .take_while(|id| id.starts_with(&prefix))
            .map(|id| &id[prefix.len()..])
            .filter(|rest| !rest.contains(DELIMITER))
            .collect()
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stamp {
    Modified(SystemTime),
    Version(u64),
}

pub struct Snapshots {
    manifest_uri: String,
    /// `__manifest/_versions` on a local root; `None` on an object store.
    versions_dir: Option<PathBuf>,
    session: Arc<Session>,
    storage_options: HashMap<String, String>,
    current: Mutex<Option<(Stamp, Arc<Snapshot>)>>,
    /// How long a checked snapshot is trusted without a new check, and when the last check
    /// began.
    interval: Duration,
    checked: Mutex<Option<Instant>>,
    /// Set when this process changed the catalog: the next lookup checks, whatever the
    /// interval.
    changed: Arc<AtomicBool>,
    /// The opened `__manifest` table, for version checks on an object store.
    dataset: Mutex<Option<Arc<lance::Dataset>>>,
    rebuilding: tokio::sync::Mutex<()>,
}

impl Snapshots {
    pub fn new(
        root: &str,
        local: bool,
        session: Arc<Session>,
        storage_options: HashMap<String, String>,
        interval: Duration,
    ) -> Self {
        let root = root.trim_end_matches('/');
        let versions_dir = local.then(|| {
            PathBuf::from(root.strip_prefix("file://").unwrap_or(root)).join("__manifest/_versions")
        });
        Self {
            manifest_uri: format!("{root}/__manifest"),
            versions_dir,
            session,
            storage_options,
            current: Mutex::default(),
            interval,
            checked: Mutex::default(),
            changed: Arc::new(AtomicBool::new(false)),
            dataset: Mutex::default(),
            rebuilding: tokio::sync::Mutex::new(()),
        }
    }

    /// The flag a catalog change made by this process sets (see [`Snapshots::get`]).
    pub fn changed(&self) -> Arc<AtomicBool> {
        self.changed.clone()
    }

    /// The catalog as it is now (or, on an object store, as it was at most the read
    /// consistency interval ago, and after every change this process made); `None` when it
    /// has no `__manifest` table yet or was changed too recently to be trusted from memory
    /// (the caller asks the namespace).
    pub async fn get(&self) -> ApiResult<Option<Arc<Snapshot>>> {
        if let Some(s) = self.trusted() {
            return Ok(Some(s));
        }
        // Cleared before the check: a change finishing during it sets it again.
        self.changed.store(false, Ordering::SeqCst);
        let began = Instant::now();
        let snapshot = self.checked_now().await?;
        // Trusted later only if it is the one kept (a local snapshot too fresh to keep is
        // not).
        let kept = snapshot.as_ref().is_some_and(|s| {
            let current = self.current.lock().unwrap();
            current.as_ref().is_some_and(|(_, c)| Arc::ptr_eq(c, s))
        });
        if kept && !self.interval.is_zero() {
            *self.checked.lock().unwrap() = Some(began);
        }
        Ok(snapshot)
    }

    /// The current snapshot when it was checked within the interval and nothing changed here
    /// since.
    fn trusted(&self) -> Option<Arc<Snapshot>> {
        if self.interval.is_zero() || self.changed.load(Ordering::SeqCst) {
            return None;
        }
        let checked = (*self.checked.lock().unwrap())?;
        if checked.elapsed() >= self.interval {
            return None;
        }
        self.current
            .lock()
            .unwrap()
            .as_ref()
            .map(|(_, s)| s.clone())
    }

    async fn checked_now(&self) -> ApiResult<Option<Arc<Snapshot>>> {
        let Some(stamp) = self.stamp().await? else {
            return Ok(None);
        };
        if let Some(s) = self.cached(stamp) {
            return Ok(Some(s));
        }
        if let Stamp::Modified(t) = stamp
            && SystemTime::now()
                .duration_since(t)
                .is_ok_and(|age| age < GRACE)
        {
            return Ok(None); // too fresh to trust; see the module docs
        }
        let _one = self.rebuilding.lock().await;
        let Some(stamp) = self.stamp().await? else {
            return Ok(None);
        };
        if let Some(s) = self.cached(stamp) {
            return Ok(Some(s));
        }
        let began = SystemTime::now();
        let Some(ds) = self.latest().await? else {
            return Ok(None);
        };
        let snapshot = Arc::new(read(&ds).await?);
        let keep = match stamp {
            Stamp::Version(_) => Some(Stamp::Version(ds.version().version)),
            Stamp::Modified(t) => began
                .duration_since(t)
                .is_ok_and(|age| age >= GRACE)
                .then_some(stamp),
        };
        if let Some(stamp) = keep {
            *self.current.lock().unwrap() = Some((stamp, snapshot.clone()));
        }
        Ok(Some(snapshot))
    }

    fn cached(&self, stamp: Stamp) -> Option<Arc<Snapshot>> {
        let current = self.current.lock().unwrap();
        current
            .as_ref()
            .filter(|(s, _)| *s == stamp)
            .map(|(_, snap)| snap.clone())
    }

    async fn stamp(&self) -> ApiResult<Option<Stamp>> {
        if let Some(dir) = &self.versions_dir {
            return match std::fs::metadata(dir).and_then(|m| m.modified()) {
                Ok(t) => Ok(Some(Stamp::Modified(t))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(ApiError::internal(format!("{}: {e}", dir.display()))),
            };
        }
        let opened = self.dataset.lock().unwrap().clone();
        let ds = match opened {
            Some(ds) => ds,
            None => match self.load().await? {
                Some(ds) => ds,
                None => return Ok(None),
            },
        };
        let version = ds.latest_version_id().await.map_err(ApiError::from)?;
        Ok(Some(Stamp::Version(version)))
    }

    /// The `__manifest` table at its latest version.
    async fn latest(&self) -> ApiResult<Option<Arc<lance::Dataset>>> {
        let opened = self.dataset.lock().unwrap().clone();
        let Some(ds) = opened else {
            return self.load().await;
        };
        let mut ds = (*ds).clone();
        ds.checkout_latest().await.map_err(ApiError::from)?;
        let ds = Arc::new(ds);
        *self.dataset.lock().unwrap() = Some(ds.clone());
        Ok(Some(ds))
    }

    async fn load(&self) -> ApiResult<Option<Arc<lance::Dataset>>> {
        let loaded = lance::dataset::builder::DatasetBuilder::from_uri(&self.manifest_uri)
            .with_session(self.session.clone())
            .with_storage_options(self.storage_options.clone())
            .load()
            .await;
        match loaded {
            Ok(ds) => {
                let ds = Arc::new(ds);
                *self.dataset.lock().unwrap() = Some(ds.clone());
                Ok(Some(ds))
            }
            Err(lance_core::Error::DatasetNotFound { .. }) => Ok(None),
            Err(e) => Err(ApiError::from(e)),
        }
    }
}

/// Every row of the `__manifest` table. Rows whose metadata is not the JSON object the
/// namespace writes are left out, so a lookup of them reaches the namespace and its error.
async fn read(ds: &lance::Dataset) -> ApiResult<Snapshot> {
    let mut scan = ds.scan();
    scan.project(&["object_id", "object_type", "location", "metadata"])
        .map_err(ApiError::from)?;
    let batches: Vec<_> = scan
        .try_into_stream()
        .await
        .map_err(ApiError::from)?
        .try_collect()
        .await
        .map_err(ApiError::from)?;
    let mut out = Snapshot::default();
    for b in batches {
        let (ids, types, locations, metadata) = (
            b.column(0).as_string::<i32>(),
            b.column(1).as_string::<i32>(),
            b.column(2).as_string::<i32>(),
            b.column(3).as_string::<i32>(),
        );
        for i in 0..b.num_rows() {
            let properties = match metadata.is_null(i) {
                true => None,
                false => match serde_json::from_str(metadata.value(i)) {
                    Ok(map) => Some(map),
                    Err(_) => continue,
                },
            };
            let id = ids.value(i).to_string();
            match types.value(i) {
                "namespace" => {
                    out.namespaces.insert(id, properties);
                }
                "table" if !locations.is_null(i) => {
                    let location = locations.value(i).to_string();
                    out.tables.insert(
                        id,
                        TableEntry {
                            location,
                            properties,
                        },
                    );
                }
                _ => {}
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_direct_ones_only() {
        let mut map = BTreeMap::new();
        for id in ["a", "a$b", "a$b$c", "a$d", "ab", "b"] {
            map.insert(id.to_string(), ());
        }
        assert_eq!(Snapshot::children(&map, &[]), ["a", "ab", "b"]);
        assert_eq!(Snapshot::children(&map, &["a".into()]), ["b", "d"]);
        assert_eq!(Snapshot::children(&map, &["a".into(), "b".into()]), ["c"]);
        assert!(Snapshot::children(&map, &["zz".into()]).is_empty());
    }
}
