//! Where the auth file lives: a local file (`--auth-file`, or `<root>/_auth/auth.toml` of a
//! local root, readable by its owner only), or the object `_auth/auth.toml` under an
//! object-store root, so that every replica reads the same keys. Servers poll it (a HEAD a
//! second) and reload it when it changed; `lancet keys` changes it with a conditional write, so
//! two concurrent changes cannot lose one another.

use std::path::PathBuf;
use std::sync::Arc;

use super::AuthFile;
use crate::root::RootStore;

/// The auth file's key under the data root, and its folder.
pub const AUTH_KEY: &str = "_auth/auth.toml";
pub const AUTH_DIR: &str = "_auth";

#[derive(Clone)]
pub enum AuthSource {
    File(PathBuf),
    Root(Arc<RootStore>),
}

impl AuthSource {
    /// Where the auth file of a root is (see `ServeConfig::auth_file`).
    pub fn of(root: &Arc<RootStore>, explicit: Option<&std::path::Path>) -> Self {
        match explicit {
            Some(path) => Self::File(path.to_path_buf()),
            None if root.is_local() => {
                Self::File(PathBuf::from(root.uri()).join("_auth").join("auth.toml"))
            }
            None => Self::Root(root.clone()),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Self::File(path) => path.display().to_string(),
            Self::Root(root) => format!("{}/{AUTH_KEY}", root.uri()),
        }
    }

    /// Changes whenever the content does (modification time and length of a file, the
    /// object's e-tag); `None` when there is no auth file.
    pub async fn stamp(&self) -> Result<Option<String>, String> {
        match self {
            Self::File(path) => Ok(std::fs::metadata(path)
                .ok()
                .map(|m| format!("{:?}-{}", m.modified().ok(), m.len()))),
            Self::Root(root) => root
                .head(AUTH_KEY)
                .await
                .map(|v| v.map(|v| format!("{v:?}")))
                .map_err(|e| e.message),
        }
    }

    /// The file (empty when there is none) and its stamp.
    pub async fn load(&self) -> Result<(AuthFile, Option<String>), String> {
        match self {
            Self::File(path) => {
                let stamp = self.stamp().await?;
                Ok((AuthFile::load(path)?, stamp))
            }
            Self::Root(root) => match root.get(AUTH_KEY).await.map_err(|e| e.message)? {
                None => Ok((AuthFile::default(), None)),
                Some(v) => {
                    let text = std::str::from_utf8(&v.bytes)
                        .map_err(|e| format!("{}: {e}", self.describe()))?;
                    let file = AuthFile::parse(text, &self.describe())?;
                    Ok((file, Some(format!("{:?}", v.version))))
                }
            },
        }
    }

    /// Read, change and write back the auth file. On an object store the write only lands if
    /// nobody changed the file since it was read; otherwise the change is made again on the
    /// newer file.
    pub async fn update<T>(
        &self,
        mut change: impl FnMut(&mut AuthFile) -> Result<T, String>,
    ) -> Result<T, String> {
        match self {
            Self::File(path) => {
                let mut file = AuthFile::load(path)?;
                let out = change(&mut file)?;
                file.save(path)?;
                Ok(out)
            }
            Self::Root(root) => loop {
                let current = root.get(AUTH_KEY).await.map_err(|e| e.message)?;
                let mut file = match &current {
                    None => AuthFile::default(),
                    Some(v) => AuthFile::parse(
                        std::str::from_utf8(&v.bytes).map_err(|e| e.to_string())?,
                        &self.describe(),
                    )?,
                };
                let out = change(&mut file)?;
                let text = file.render()?;
                let written = match &current {
                    None => root.create(AUTH_KEY, text).await,
                    Some(v) => root.replace(AUTH_KEY, text, &v.version).await,
                }
                .map_err(|e| e.message)?;
                if written.is_some() {
                    return Ok(out);
                }
            },
        }
    }
}
