//! Versions, restore, tags and branches: lance's own refs, branch-aware.

use std::collections::HashMap;
use std::sync::Arc;

use lance::dataset::refs::{BranchContents, Ref, TagContents};
use lance_namespace::ErrorCode;

use super::{At, Store, branch_error};
use crate::error::{ApiError, ApiResult};

pub struct VersionInfo {
    pub version: u64,
    pub timestamp_millis: i64,
    pub metadata: std::collections::BTreeMap<String, String>,
}

/// Where a version's manifest is, as the spec's `TableVersion` reports it.
pub struct ManifestFile {
    /// The manifest's path in the object store (no scheme or bucket), as upstream's
    /// directory namespace answers it: lance clients that manage versions through the
    /// namespace read the manifest from exactly this path.
    pub path: String,
    pub size: Option<u64>,
    pub e_tag: Option<String>,
}

fn tag_error(err: lance_core::Error, tag: &str) -> ApiError {
    let api = ApiError::from(err);
    match api.code {
        ErrorCode::TableTagNotFound | ErrorCode::TableNotFound => {
            ApiError::new(ErrorCode::TableTagNotFound, format!("tag not found: {tag}"))
        }
        ErrorCode::ConcurrentModification => ApiError::new(
            ErrorCode::TableTagAlreadyExists,
            format!("tag already exists: {tag}"),
        ),
        ErrorCode::TableVersionNotFound => api,
        _ if api.message.contains("already exists") => ApiError::new(
            ErrorCode::TableTagAlreadyExists,
            format!("tag already exists: {tag}"),
        ),
        _ if api.message.contains("not found") || api.message.contains("does not exist") => {
            ApiError::new(ErrorCode::TableVersionNotFound, api.message)
        }
        _ => api,
    }
}

impl Store {
    pub async fn versions(
        &self,
        location: &str,
        branch: Option<&str>,
    ) -> ApiResult<Vec<VersionInfo>> {
        let ds = self.latest(location, branch).await?;
        // lance lists the manifests, then reads each: a cleanup removing old versions in
        // between makes one vanish. List again (the cleanup is quick); at worst, say so.
        let mut attempt = 0;
        let versions = loop {
            match ds.versions().await {
                Ok(v) => break v,
                Err(e) if attempt < 5 && ApiError::from_lance(&e).status.as_u16() == 404 => {
                    attempt += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20 * attempt)).await;
                }
                Err(e) => return Err(ApiError::from(e)),
            }
        };
        Ok(versions
            .into_iter()
            .map(|v| VersionInfo {
                version: v.version,
                timestamp_millis: v.timestamp.timestamp_millis(),
                metadata: v.metadata,
            })
            .collect())
    }

    /// The manifest file of each of `versions` of `branch` (None for one that is gone).
    /// The name of the operation that made each of `versions` (lance's: Append, Delete,
    /// Update, Merge, Overwrite, Rewrite, CreateIndex, Restore, ...), read from each version's
    /// transaction file, a few at a time; `None` where a version has none (or it is gone).
    pub async fn operations(
        &self,
        location: &str,
        branch: Option<&str>,
        versions: &[u64],
    ) -> ApiResult<Vec<Option<String>>> {
        use futures::StreamExt;
        let ds = self.latest(location, branch).await?;
        // Collected first: a lazy map over the borrowed slice makes the future not `Send`.
        let reads: Vec<_> = versions
            .iter()
            .map(|&v| {
                let ds = ds.clone();
                async move {
                    ds.read_transaction_by_version(v)
                        .await
                        .ok()
                        .flatten()
                        .map(|t| t.operation.name().to_string())
                }
            })
            .collect();
        Ok(futures::stream::iter(reads).buffered(8).collect().await)
    }

    pub async fn manifest_files(
        &self,
        location: &str,
        branch: Option<&str>,
        versions: &[u64],
    ) -> ApiResult<Vec<Option<ManifestFile>>> {
        let ds = self.latest(location, branch).await?;
        let current = ds.manifest_location();
        let scheme = current.naming_scheme;
        let current_path = current.path.to_string();
        let Some((root, _)) = current_path.rsplit_once("/_versions/") else {
            return Err(ApiError::internal(format!(
                "unexpected manifest path {current_path}"
            )));
        };
        // Already encoded: parse, not `from` (which would encode it again).
        let root =
            object_store::path::Path::parse(root).map_err(|e| ApiError::internal(e.to_string()))?;
        let store = ds.object_store(None).await.map_err(ApiError::from)?;
        // One listing of the manifests (sizes and e-tags included), not a HEAD per version.
        let dir = root.clone().join("_versions");
        let mut listed = HashMap::new();
        let mut metas = object_store::ObjectStore::list(&*store.inner, Some(&dir));
        while let Some(meta) = futures::StreamExt::next(&mut metas).await {
            let meta = meta.map_err(|e| ApiError::internal(e.to_string()))?;
            if let Some(file) = meta.location.filename() {
                listed.insert(file.to_string(), meta);
            }
        }
        let out = versions
            .iter()
            .map(|&v| {
                let path = scheme.manifest_path(&root, v);
                let file = path.filename()?;
                let meta = listed.get(file)?;
                Some(ManifestFile {
                    path: meta.location.to_string(),
                    size: Some(meta.size),
                    e_tag: meta.e_tag.clone(),
                })
            })
            .collect();
        Ok(out)
    }

    /// Make `version` the latest version of the branch again (a new commit, history kept).
    pub async fn restore(
        &self,
        location: &str,
        branch: Option<&str>,
        version: u64,
    ) -> ApiResult<u64> {
        let _guard = self.write_lock(location, branch).await;
        let latest = self.latest(location, branch).await?;
        let mut old = latest.checkout_version(version).await.map_err(|e| {
            ApiError::from(e).or_not_found(
                ErrorCode::TableVersionNotFound,
                format!("version {version} not found"),
            )
        })?;
        old.restore().await.map_err(ApiError::from)?;
        let new_version = old.version().version;
        self.remember(location, branch, Arc::new(old));
        Ok(new_version)
    }

    pub async fn list_tags(&self, location: &str) -> ApiResult<HashMap<String, TagContents>> {
        let ds = self.latest(location, None).await?;
        ds.tags().list().await.map_err(ApiError::from)
    }

    pub async fn tag_contents(&self, location: &str, tag: &str) -> ApiResult<TagContents> {
        let ds = self.latest(location, None).await?;
        ds.tags().get(tag).await.map_err(|e| tag_error(e, tag))
    }

    pub async fn create_tag(&self, location: &str, tag: &str, at: &At) -> ApiResult<()> {
        let ds = self.latest(location, None).await?;
        let version = self.ref_version(location, at).await?;
        ds.tags()
            .create(tag, Ref::Version(at.branch.clone(), Some(version)))
            .await
            .map_err(|e| tag_error(e, tag))
    }

    pub async fn update_tag(&self, location: &str, tag: &str, at: &At) -> ApiResult<()> {
        let ds = self.latest(location, None).await?;
        ds.tags().get(tag).await.map_err(|e| tag_error(e, tag))?;
        let version = self.ref_version(location, at).await?;
        ds.tags()
            .update(tag, Ref::Version(at.branch.clone(), Some(version)))
            .await
            .map_err(|e| tag_error(e, tag))
    }

    pub async fn delete_tag(&self, location: &str, tag: &str) -> ApiResult<()> {
        let ds = self.latest(location, None).await?;
        ds.tags().get(tag).await.map_err(|e| tag_error(e, tag))?;
        ds.tags().delete(tag).await.map_err(|e| tag_error(e, tag))
    }

    /// The concrete version `at` names on its branch, checked to exist.
    async fn ref_version(&self, location: &str, at: &At) -> ApiResult<u64> {
        let ds = self.read(location, at).await?;
        Ok(ds.version().version)
    }

    pub async fn list_branches(
        &self,
        location: &str,
    ) -> ApiResult<HashMap<String, BranchContents>> {
        let ds = self.latest(location, None).await?;
        ds.list_branches().await.map_err(ApiError::from)
    }

    pub async fn create_branch(&self, location: &str, name: &str, from: &At) -> ApiResult<()> {
        if name.is_empty() || name == "main" {
            return Err(ApiError::invalid(format!(
                "'{name}' cannot be used as a branch name"
            )));
        }
        // One creation of any branch of this table at a time, and the duplicate check inside
        // it: two clients racing to create the same branch get exactly one 409.
        let _guard = self.write_lock(location, Some("\0branches")).await;
        let mut main = (*self.latest(location, None).await?).clone();
        if main
            .list_branches()
            .await
            .map_err(ApiError::from)?
            .contains_key(name)
        {
            return Err(ApiError::new(
                ErrorCode::TableBranchAlreadyExists,
                format!("branch already exists: {name}"),
            ));
        }
        let version = self.ref_version(location, from).await?;
        let reference = Ref::Version(from.branch.clone(), Some(version));
        let Err(e) = main.create_branch(name, reference, None).await else {
            return Ok(());
        };
        let api = ApiError::from(e);
        let exists = ApiError::new(
            ErrorCode::TableBranchAlreadyExists,
            format!("branch already exists: {name}"),
        );
        if api.message.contains("already exists") || api.code == ErrorCode::ConcurrentModification {
            return Err(exists);
        }
        // Another node's create of the same branch can make this one fail in other ways (its
        // conditional writes lose part-way); if the branch is there now, that is what happened.
        let now = main.list_branches().await.map_err(ApiError::from)?;
        Err(if now.contains_key(name) { exists } else { api })
    }

    pub async fn delete_branch(&self, location: &str, name: &str) -> ApiResult<()> {
        let _guard = self.write_lock(location, Some("\0branches")).await;
        let mut main = (*self.latest(location, None).await?).clone();
        if !main
            .list_branches()
            .await
            .map_err(ApiError::from)?
            .contains_key(name)
        {
            return Err(ApiError::new(
                ErrorCode::TableBranchNotFound,
                format!("branch not found: {name}"),
            ));
        }
        main.delete_branch(name)
            .await
            .map_err(|e| branch_error(e, name))?;
        self.cache_forget_branch(location, name);
        Ok(())
    }

    fn cache_forget_branch(&self, location: &str, branch: &str) {
        self.cache
            .lock()
            .unwrap()
            .retain(|(loc, b), _| !(loc == location && b.as_deref() == Some(branch)));
    }
}
