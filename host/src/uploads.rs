//! Multipart uploads (the lancedb client's large inserts, sent in parts) kept under the
//! tenant's root, so that the parts of one upload may reach different replicas:
//!
//! - `_uploads/<id>/upload.json`: the table, branch and version it was begun at, the id of
//!   the transaction that will commit it, and once committed the version it made;
//! - `_uploads/<id>/parts/<part>.txn`: each part's staged transaction (`store::staged`);
//! - `_uploads/<id>/lease`: held while the upload is completed or aborted.
//!
//! A part sent again under the same part id replaces the first (client retries are safe); a
//! completed upload keeps its record, so a repeated `complete` answers the same version.
//!
//! Uploads begun more than [`UPLOAD_TTL`] ago are swept (at most hourly per tenant and
//! process, when an upload is begun): forgotten with their parts unless a `complete` or
//! `abort` holds them. A client that never completes or aborts leaves nothing behind for long.

use std::time::Duration;

use lance_namespace::ErrorCode;
use serde::{Deserialize, Serialize};

use crate::error::{ApiError, ApiResult};
use crate::root::{Lease, RootStore};

const DIR: &str = "_uploads";

/// How long a `complete` or `abort` may hold an upload.
const LEASE_TTL: Duration = Duration::from_secs(60);
/// How long an upload (open or completed) is kept after it began.
pub const UPLOAD_TTL: Duration = Duration::from_secs(24 * 3600);
/// How often a process sweeps a tenant's uploads (see `Catalog::uploads_sweep_due`).
pub const SWEEP_EVERY: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Upload {
    pub table: Vec<String>,
    pub location: String,
    pub branch: Option<String>,
    /// The table's version when the upload began: its commit is searched for after it.
    pub read_version: u64,
    /// The uuid the upload's commit carries.
    pub transaction: String,
    pub created_ms: i64,
    #[serde(default)]
    pub committed: Option<u64>,
}

pub struct Uploads<'a> {
    root: &'a RootStore,
}

fn record_key(id: &str) -> String {
    format!("{DIR}/{id}/upload.json")
}

fn parts_prefix(id: &str) -> String {
    format!("{DIR}/{id}/parts/")
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::TransactionNotFound,
        format!("upload '{id}' not found"),
    )
}

/// Part ids become object names: keep them to a plain alphabet.
fn check_part_id(part: &str) -> ApiResult<()> {
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if part.is_empty() || part.len() > 128 || !part.chars().all(plain) {
        return Err(ApiError::invalid(format!(
            "upload_part_id '{part}' must be 1-128 letters, digits, '-' or '_'"
        )));
    }
    Ok(())
}

impl<'a> Uploads<'a> {
    pub fn new(root: &'a RootStore) -> Self {
        Self { root }
    }

    /// Records a new upload; returns its id.
    pub async fn begin(&self, upload: &Upload) -> ApiResult<String> {
        let id = uuid::Uuid::new_v4().to_string();
        self.save(&id, upload).await?;
        Ok(id)
    }

    async fn save(&self, id: &str, upload: &Upload) -> ApiResult<()> {
        let bytes = serde_json::to_vec(upload).map_err(|e| ApiError::internal(e.to_string()))?;
        self.root.put(&record_key(id), bytes).await
    }

    /// The upload `id`; 404 (code 10, as a transaction) when there is none.
    pub async fn get(&self, id: &str) -> ApiResult<Upload> {
        // Ids are ours (uuids): anything else names no upload and must not become a path.
        if uuid::Uuid::parse_str(id).is_err() {
            return Err(not_found(id));
        }
        let Some(found) = self.root.get(&record_key(id)).await? else {
            return Err(not_found(id));
        };
        serde_json::from_slice(&found.bytes)
            .map_err(|e| ApiError::internal(format!("upload record '{id}' is unreadable: {e}")))
    }

    pub async fn put_part(&self, id: &str, part: &str, staged: Vec<u8>) -> ApiResult<()> {
        check_part_id(part)?;
        let key = format!("{}{part}.txn", parts_prefix(id));
        self.root.put(&key, staged).await
    }

    /// Every part's staged transaction, in part-id order.
    pub async fn parts(&self, id: &str) -> ApiResult<Vec<Vec<u8>>> {
        let mut parts = Vec::new();
        for key in self.root.list(&parts_prefix(id)).await? {
            if let Some(found) = self.root.get(&key).await? {
                parts.push(found.bytes.to_vec());
            }
        }
        Ok(parts)
    }

    /// The upload's lease for `holder`; `None` while another request holds it.
    pub async fn lock(&self, id: &str, holder: &str) -> ApiResult<Option<Lease>> {
        Lease::try_acquire(self.root, &format!("{DIR}/{id}/lease"), holder, LEASE_TTL).await
    }

    pub async fn release(&self, lease: Lease) {
        lease.release(self.root).await;
    }

    /// Records the version the upload's commit made and drops its parts.
    pub async fn finish(&self, id: &str, upload: &mut Upload, version: u64) -> ApiResult<()> {
        upload.committed = Some(version);
        self.save(id, upload).await?;
        self.root.delete_all(&parts_prefix(id)).await
    }

    /// Forget every upload begun more than `ttl` before `now_ms` (and any folder without a
    /// readable record) unless a request holds it; answers how many were forgotten.
    pub async fn sweep(&self, now_ms: i64, ttl: Duration, holder: &str) -> ApiResult<usize> {
        let mut forgotten = 0;
        for id in self.root.list_dirs(DIR).await? {
            let expired = match self.root.get(&record_key(&id)).await? {
                Some(found) => serde_json::from_slice::<Upload>(&found.bytes)
                    .map_or(true, |u| u.created_ms + ttl.as_millis() as i64 <= now_ms),
                None => true,
            };
            if !expired {
                continue;
            }
            // The lease goes with the folder.
            if self.lock(&id, holder).await?.is_none() {
                continue;
            }
            self.remove(&id).await?;
            forgotten += 1;
        }
        Ok(forgotten)
    }

    /// Forgets the upload. Its staged data files, which no version references, are left to
    /// lance's cleanup of unreferenced files.
    pub async fn remove(&self, id: &str) -> ApiResult<()> {
        self.root.delete_all(&format!("{DIR}/{id}/")).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upload(created_ms: i64) -> Upload {
        Upload {
            table: vec!["t".into()],
            location: "file:///t".into(),
            branch: None,
            read_version: 1,
            transaction: "x".into(),
            created_ms,
            committed: None,
        }
    }

    #[tokio::test]
    async fn uploads_past_their_time_are_swept_unless_held() {
        let dir = tempfile::tempdir().unwrap();
        let session = lance::session::Session::default();
        let root = RootStore::open(dir.path().to_str().unwrap(), &Default::default(), &session)
            .await
            .unwrap();
        let uploads = Uploads::new(&root);
        let hour = 3600 * 1000;
        let old = uploads.begin(&upload(0)).await.unwrap();
        uploads.put_part(&old, "p1", vec![1, 2, 3]).await.unwrap();
        let held = uploads.begin(&upload(0)).await.unwrap();
        let fresh = uploads.begin(&upload(30 * hour)).await.unwrap();
        let _lease = uploads
            .lock(&held, "completing-node")
            .await
            .unwrap()
            .unwrap();
        let ttl = Duration::from_secs(24 * 3600);
        let swept = uploads.sweep(31 * hour, ttl, "sweeper").await.unwrap();
        assert_eq!(swept, 1);
        assert!(uploads.get(&old).await.is_err());
        assert!(uploads.parts(&old).await.unwrap().is_empty());
        assert!(uploads.get(&held).await.is_ok(), "a held upload stays");
        assert!(uploads.get(&fresh).await.is_ok(), "a young upload stays");
    }

    #[test]
    fn part_ids_are_plain_names() {
        assert!(check_part_id("0b7c1a52-3f1e-4d7e-9c1f-2b9e8f1a6c3d").is_ok());
        for bad in ["", "../x", "a/b", "a.b", &"x".repeat(129)] {
            assert!(check_part_id(bad).is_err(), "{bad}");
        }
    }
}
