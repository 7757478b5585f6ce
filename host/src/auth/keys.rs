//! API keys: stored as SHA-256 hashes in a TOML file (the auth file), shown in clear once when
//! created. Keys are 256-bit random strings, so a plain hash is enough: there is nothing to
//! brute-force that a slow password hash would protect. The server re-reads the file when it
//! changes, so `lancet keys create/revoke` take effect on a running server within a second.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::RwLock;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{AuthSource, Grant, JwtConfig, Role, check_tenant_name};

/// The auth file: API keys and the optional token issuer.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthFile {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<KeyEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt: Option<JwtConfig>,
    /// Per-tenant settings (read at start-up).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tenants: crate::config::TenantTable,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    /// Public name of the key (for `lancet keys revoke` and logs).
    pub id: String,
    pub tenant: String,
    pub role: Role,
    /// Namespace subtree inside the tenant; empty = all of it.
    #[serde(default)]
    pub namespace: Vec<String>,
    /// Lowercase hex SHA-256 of the key.
    pub sha256: String,
    #[serde(default)]
    pub created: String,
    #[serde(default)]
    pub description: String,
}

impl KeyEntry {
    fn grant(&self) -> Grant {
        Grant {
            tenant: self.tenant.clone(),
            role: self.role,
            scope: self.namespace.clone(),
            principal: format!("key:{}", self.id),
        }
    }
}

pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// A new key: `lk_` and 64 hex digits from the OS random source (two v4 UUIDs: 244 random bits).
pub fn generate_key() -> String {
    format!(
        "lk_{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

impl AuthFile {
    /// A missing file is an empty one.
    pub fn load(path: &Path) -> Result<Self, String> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text, &path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// The file's text, checked (`origin` names it in errors).
    pub fn parse(text: &str, origin: &str) -> Result<Self, String> {
        let file: AuthFile = toml::from_str(text).map_err(|e| format!("{origin}: {e}"))?;
        for (name, settings) in &file.tenants {
            check_tenant_name(name).map_err(|e| format!("[tenants.{name}]: {e}"))?;
            if let Some(upkeep) = &settings.upkeep {
                upkeep
                    .validate()
                    .map_err(|e| format!("[tenants.{name}]: {e}"))?;
            }
        }
        for k in &file.keys {
            check_tenant_name(&k.tenant).map_err(|e| format!("key {}: {e}", k.id))?;
            if k.sha256.len() != 64 || !k.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("key {}: sha256 must be 64 hex digits", k.id));
            }
        }
        Ok(file)
    }

    /// The file's text, with a header for whoever opens it.
    pub fn render(&self) -> Result<String, String> {
        let text = toml::to_string_pretty(self).map_err(|e| e.to_string())?;
        let header = "# Lancet credentials. Keys are stored as SHA-256 hashes: a lost key cannot be\n\
                      # recovered, only revoked and replaced (lancet keys create/revoke).\n\n";
        Ok(format!("{header}{text}"))
    }

    /// Written to a temporary file, synced, then renamed over the old one, so a server reading
    /// it never sees half a file. Readable by the owner only.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let text = self.render()?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut f = options.open(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("{}: {e}", path.display())
        })
    }

    /// Adds a key and returns it in clear (the only time it exists in clear).
    pub fn create_key(
        &mut self,
        tenant: &str,
        role: Role,
        namespace: Vec<String>,
        description: &str,
    ) -> Result<(String, KeyEntry), String> {
        check_tenant_name(tenant)?;
        if namespace.iter().any(|n| n.is_empty()) {
            return Err("namespace levels must not be empty".into());
        }
        let key = generate_key();
        let entry = KeyEntry {
            id: format!("key_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
            tenant: tenant.to_string(),
            role,
            namespace,
            sha256: hash_key(&key),
            created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            description: description.to_string(),
        };
        self.keys.push(entry.clone());
        Ok((key, entry))
    }

    /// Removes the key with this id; false when there is none.
    pub fn revoke(&mut self, id: &str) -> bool {
        let before = self.keys.len();
        self.keys.retain(|k| k.id != id);
        self.keys.len() != before
    }
}

struct Loaded {
    by_hash: HashMap<String, Grant>,
    tenants: crate::config::TenantTable,
    stamp: Option<String>,
}

/// The keys a server accepts: those of the auth file (kept current) plus an optional bootstrap
/// key given at start-up.
pub struct KeyRing {
    source: Option<AuthSource>,
    bootstrap: Option<(String, Grant)>,
    loaded: RwLock<Loaded>,
}

impl KeyRing {
    pub async fn open(source: Option<AuthSource>, bootstrap: Option<&str>) -> Result<Self, String> {
        let bootstrap = bootstrap.filter(|k| !k.is_empty()).map(|k| {
            (
                hash_key(k),
                Grant {
                    tenant: "default".into(),
                    role: Role::Admin,
                    scope: vec![],
                    principal: "key:bootstrap".into(),
                },
            )
        });
        let ring = Self {
            source,
            bootstrap,
            loaded: RwLock::new(Loaded {
                by_hash: HashMap::new(),
                tenants: Default::default(),
                stamp: None,
            }),
        };
        ring.reload().await?;
        Ok(ring)
    }

    async fn reload(&self) -> Result<(), String> {
        let Some(source) = &self.source else {
            return Ok(());
        };
        let (file, stamp) = source.load().await?;
        let by_hash = file
            .keys
            .iter()
            .map(|k| (k.sha256.to_ascii_lowercase(), k.grant()))
            .collect();
        *self.loaded.write().unwrap() = Loaded {
            by_hash,
            tenants: file.tenants,
            stamp,
        };
        Ok(())
    }

    /// Re-reads the auth file if it changed. A file that fails to parse leaves the keys as they
    /// were (a typo must not lock everyone out or let anyone in).
    pub async fn refresh(&self) -> Result<bool, String> {
        let Some(source) = &self.source else {
            return Ok(false);
        };
        if source.stamp().await? == self.loaded.read().unwrap().stamp {
            return Ok(false);
        }
        self.reload().await.map(|_| true)
    }

    /// A tenant's `[tenants.<name>]` settings as the auth file has them now.
    pub fn tenant_settings(&self, tenant: &str) -> Option<crate::config::TenantSettings> {
        self.loaded.read().unwrap().tenants.get(tenant).cloned()
    }

    pub fn lookup(&self, key: &str) -> Option<Grant> {
        let hash = hash_key(key);
        if let Some((h, grant)) = &self.bootstrap
            && *h == hash
        {
            return Some(grant.clone());
        }
        self.loaded.read().unwrap().by_hash.get(&hash).cloned()
    }

    /// Whether any key at all is accepted.
    pub fn is_empty(&self) -> bool {
        self.bootstrap.is_none() && self.loaded.read().unwrap().by_hash.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn created_keys_verify_and_revoked_keys_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth.toml");
        let mut file = AuthFile::default();
        let (key, entry) = file
            .create_key("acme", Role::Write, vec!["sales".into()], "ci")
            .unwrap();
        assert!(key.starts_with("lk_") && key.len() == 67);
        file.save(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&key), "the key itself must not be stored");

        let ring = KeyRing::open(Some(AuthSource::File(path.clone())), None)
            .await
            .unwrap();
        let grant = ring.lookup(&key).unwrap();
        assert_eq!(grant.tenant, "acme");
        assert_eq!(grant.role, Role::Write);
        assert_eq!(grant.scope, vec!["sales".to_string()]);
        assert!(ring.lookup("lk_wrong").is_none());

        let mut file = AuthFile::load(&path).unwrap();
        assert!(file.revoke(&entry.id));
        assert!(!file.revoke(&entry.id));
        // A rewrite within the same instant still differs in length.
        file.save(&path).unwrap();
        assert!(ring.refresh().await.unwrap());
        assert!(ring.lookup(&key).is_none());
    }

    #[tokio::test]
    async fn a_broken_file_keeps_the_previous_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth.toml");
        let mut file = AuthFile::default();
        let (key, _) = file.create_key("default", Role::Read, vec![], "").unwrap();
        file.save(&path).unwrap();
        let ring = KeyRing::open(Some(AuthSource::File(path.clone())), None)
            .await
            .unwrap();
        std::fs::write(&path, "keys = [[[").unwrap();
        assert!(ring.refresh().await.is_err());
        assert!(ring.lookup(&key).is_some());
    }

    #[tokio::test]
    async fn bootstrap_key_is_a_default_admin() {
        let ring = KeyRing::open(None, Some("s3cret")).await.unwrap();
        let g = ring.lookup("s3cret").unwrap();
        assert_eq!((g.tenant.as_str(), g.role), ("default", Role::Admin));
        assert!(!ring.is_empty());
        assert!(KeyRing::open(None, Some("")).await.unwrap().is_empty());
    }
}
