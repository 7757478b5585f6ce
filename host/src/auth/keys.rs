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
    /// Per-tenant settings, the registry of tenants (kept current like the keys).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tenants: crate::config::TenantTable,
    /// Operator credentials: they reach `/v1/admin/...` and nothing else.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operators: Vec<OperatorKey>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorKey {
    pub id: String,
    /// Lowercase hex SHA-256 of the key.
    pub sha256: String,
    #[serde(default)]
    pub created: String,
    #[serde(default)]
    pub description: String,
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
    /// When it stops being accepted (RFC 3339); none = never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    /// When it was revoked: a revoked key stays listed (a tombstone), so its id still says
    /// whose it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked: Option<String>,
    /// The key that replaced it in a rotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated_to: Option<String>,
    /// Who created it (`operator:<id>`, `key:<id>` of a tenant admin, or `cli`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub created_by: String,
}

/// Now, as the auth file writes times.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A time of the auth file as milliseconds since the epoch.
pub fn parse_time(text: &str) -> Result<i64, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|e| format!("'{text}' is not an RFC 3339 time: {e}"))
}

impl KeyEntry {
    /// Whether it is accepted at `now_ms` (not revoked, not expired).
    pub fn live_at(&self, now_ms: i64) -> bool {
        self.revoked.is_none()
            && self
                .expires
                .as_deref()
                .is_none_or(|e| parse_time(e).is_ok_and(|e| e > now_ms))
    }

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
        for (name, settings) in &file.tenants {
            if let Some(q) = &settings.quota {
                q.validate().map_err(|e| format!("[tenants.{name}]: {e}"))?;
            }
        }
        let hashes = file
            .keys
            .iter()
            .map(|k| (&k.id, &k.sha256))
            .chain(file.operators.iter().map(|o| (&o.id, &o.sha256)));
        for (id, sha256) in hashes {
            if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("key {id}: sha256 must be 64 hex digits"));
            }
        }
        for k in &file.keys {
            check_tenant_name(&k.tenant).map_err(|e| format!("key {}: {e}", k.id))?;
            if k.role == Role::Operator {
                return Err(format!(
                    "key {}: a tenant key cannot have the operator role (operators are listed \
                     under [[operators]])",
                    k.id
                ));
            }
            if let Some(e) = &k.expires {
                parse_time(e).map_err(|e| format!("key {}: expires: {e}", k.id))?;
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
        self.create_key_with(NewKey {
            tenant: tenant.to_string(),
            role,
            namespace,
            description: description.to_string(),
            expires: None,
            created_by: "cli".into(),
        })
    }

    /// Adds a key as `new` describes it and returns it in clear.
    pub fn create_key_with(&mut self, new: NewKey) -> Result<(String, KeyEntry), String> {
        check_tenant_name(&new.tenant)?;
        if new.role == Role::Operator {
            return Err("a tenant key cannot have the operator role".into());
        }
        if new.namespace.iter().any(|n| n.is_empty()) {
            return Err("namespace levels must not be empty".into());
        }
        if let Some(e) = &new.expires {
            let at = parse_time(e)?;
            if at <= chrono::Utc::now().timestamp_millis() {
                return Err(format!("expires {e} is not in the future"));
            }
        }
        let key = generate_key();
        let entry = KeyEntry {
            id: format!("key_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
            tenant: new.tenant,
            role: new.role,
            namespace: new.namespace,
            sha256: hash_key(&key),
            created: now_rfc3339(),
            description: new.description,
            expires: new.expires,
            revoked: None,
            rotated_to: None,
            created_by: new.created_by,
        };
        self.keys.push(entry.clone());
        Ok((key, entry))
    }

    /// Revokes the key with this id, keeping it as a tombstone; false when there is none or
    /// it was revoked already.
    pub fn revoke(&mut self, id: &str) -> bool {
        match self.keys.iter_mut().find(|k| k.id == id) {
            Some(k) if k.revoked.is_none() => {
                k.revoked = Some(now_rfc3339());
                true
            }
            _ => false,
        }
    }

    /// A new key with the same tenant, role and namespace as `id`; the old one stays valid for
    /// `overlap` more (sooner if it expired sooner anyway). Returns the new key in clear.
    pub fn rotate(
        &mut self,
        id: &str,
        overlap: std::time::Duration,
        by: &str,
    ) -> Result<(String, KeyEntry), String> {
        let now = chrono::Utc::now();
        let old = self
            .keys
            .iter()
            .find(|k| k.id == id)
            .ok_or_else(|| format!("no key '{id}'"))?
            .clone();
        if !old.live_at(now.timestamp_millis()) {
            return Err(format!(
                "key '{id}' is revoked or expired: nothing to rotate"
            ));
        }
        let (key, entry) = self.create_key_with(NewKey {
            tenant: old.tenant.clone(),
            role: old.role,
            namespace: old.namespace.clone(),
            description: old.description.clone(),
            expires: None,
            created_by: by.to_string(),
        })?;
        let until = now + chrono::Duration::from_std(overlap).map_err(|e| e.to_string())?;
        let until_ms = until.timestamp_millis();
        let k = self
            .keys
            .iter_mut()
            .find(|k| k.id == id)
            .expect("found above");
        let sooner = k
            .expires
            .as_deref()
            .and_then(|e| parse_time(e).ok())
            .is_some_and(|e| e < until_ms);
        if !sooner {
            k.expires = Some(until.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        }
        k.rotated_to = Some(entry.id.clone());
        Ok((key, entry))
    }

    /// Adds an operator key and returns it in clear.
    pub fn create_operator(&mut self, description: &str) -> (String, OperatorKey) {
        let key = generate_key().replacen("lk_", "lo_", 1);
        let entry = OperatorKey {
            id: format!("op_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
            sha256: hash_key(&key),
            created: now_rfc3339(),
            description: description.to_string(),
        };
        self.operators.push(entry.clone());
        (key, entry)
    }
}

/// What [`AuthFile::create_key_with`] makes.
#[derive(Debug, Clone)]
pub struct NewKey {
    pub tenant: String,
    pub role: Role,
    pub namespace: Vec<String>,
    pub description: String,
    /// RFC 3339, in the future.
    pub expires: Option<String>,
    pub created_by: String,
}

/// A key as the ring holds it.
struct Known {
    grant: Grant,
    id: String,
    expires_ms: Option<i64>,
    expires: Option<String>,
    revoked: Option<String>,
}

struct Loaded {
    by_hash: HashMap<String, Known>,
    tenants: crate::config::TenantTable,
    stamp: Option<String>,
}

/// The keys a server accepts: those of the auth file (kept current) plus an optional bootstrap
/// key given at start-up.
pub struct KeyRing {
    source: Option<AuthSource>,
    bootstrap: Option<(String, Grant)>,
    operator: Option<(String, Grant)>,
    loaded: RwLock<Loaded>,
    /// Key id -> last accepted (ms), since start (see `hosting::keys_used`).
    used: std::sync::Mutex<HashMap<String, i64>>,
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
        let operator = std::env::var("LANCET_OPERATOR_KEY")
            .ok()
            .filter(|k| !k.trim().is_empty())
            .map(|k| (hash_key(k.trim()), operator_grant("env")));
        let ring = Self {
            source,
            bootstrap,
            operator,
            used: Default::default(),
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
        let mut by_hash: HashMap<String, Known> = file
            .keys
            .iter()
            .map(|k| {
                let known = Known {
                    grant: k.grant(),
                    id: k.id.clone(),
                    expires_ms: k.expires.as_deref().and_then(|e| parse_time(e).ok()),
                    expires: k.expires.clone(),
                    revoked: k.revoked.clone(),
                };
                (k.sha256.to_ascii_lowercase(), known)
            })
            .collect();
        for o in &file.operators {
            let known = Known {
                grant: operator_grant(&o.id),
                id: o.id.clone(),
                expires_ms: None,
                expires: None,
                revoked: None,
            };
            by_hash.insert(o.sha256.to_ascii_lowercase(), known);
        }
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

    /// Where the auth file is (none: keys from the environment only).
    pub fn source(&self) -> Option<&AuthSource> {
        self.source.as_ref()
    }

    /// Reads the auth file again now (after this process changed it).
    pub async fn reload_now(&self) -> Result<(), String> {
        self.reload().await
    }

    /// A tenant's `[tenants.<name>]` settings as the auth file has them now.
    pub fn tenant_settings(&self, tenant: &str) -> Option<crate::config::TenantSettings> {
        self.loaded.read().unwrap().tenants.get(tenant).cloned()
    }

    /// Every tenant's settings as the auth file has them now.
    pub fn all_tenant_settings(&self) -> crate::config::TenantTable {
        self.loaded.read().unwrap().tenants.clone()
    }

    /// Why requests of `tenant` are refused now (suspended, being deleted), if they are.
    pub fn tenant_refusal(&self, tenant: &str) -> Option<String> {
        let loaded = self.loaded.read().unwrap();
        loaded.tenants.get(tenant)?.refusal(tenant)
    }

    /// The grant of `key`, or why it is refused (unknown, revoked, expired).
    pub fn lookup(&self, key: &str) -> Result<Grant, super::Refused> {
        let hash = hash_key(key);
        for (h, grant) in self.bootstrap.iter().chain(&self.operator) {
            if *h == hash {
                return Ok(grant.clone());
            }
        }
        let now = chrono::Utc::now().timestamp_millis();
        let loaded = self.loaded.read().unwrap();
        let known = loaded
            .by_hash
            .get(&hash)
            .ok_or_else(|| super::Refused("invalid API key".into()))?;
        if let Some(at) = &known.revoked {
            return Err(super::Refused(format!(
                "API key {} was revoked at {at}",
                known.id
            )));
        }
        if known.expires_ms.is_some_and(|e| e <= now) {
            return Err(super::Refused(format!(
                "API key {} expired at {}",
                known.id,
                known.expires.as_deref().unwrap_or("?")
            )));
        }
        self.used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(known.id.clone(), now);
        Ok(known.grant.clone())
    }

    /// Key id -> when this process last accepted it (ms since the epoch).
    pub fn last_used(&self) -> HashMap<String, i64> {
        self.used.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether any key at all is accepted.
    pub fn is_empty(&self) -> bool {
        self.bootstrap.is_none()
            && self.operator.is_none()
            && self.loaded.read().unwrap().by_hash.is_empty()
    }
}

fn operator_grant(id: &str) -> Grant {
    Grant {
        tenant: String::new(),
        role: Role::Operator,
        scope: vec![],
        principal: format!("operator:{id}"),
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
        assert!(ring.lookup("lk_wrong").is_err());

        let mut file = AuthFile::load(&path).unwrap();
        assert!(file.revoke(&entry.id));
        assert!(!file.revoke(&entry.id));
        // A rewrite within the same instant still differs in length.
        file.save(&path).unwrap();
        assert!(ring.refresh().await.unwrap());
        let refused = ring.lookup(&key).unwrap_err().0;
        assert!(refused.contains("was revoked at"), "{refused}");
        // The tombstone stays: whose the key was is still answerable.
        assert_eq!(AuthFile::load(&path).unwrap().keys[0].tenant, "acme");
    }

    #[tokio::test]
    async fn expired_and_rotated_keys_are_refused_after_their_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth.toml");
        let mut file = AuthFile::default();
        let soon = (chrono::Utc::now() + chrono::Duration::milliseconds(300))
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let (short, _) = file
            .create_key_with(NewKey {
                tenant: "acme".into(),
                role: Role::Read,
                namespace: vec![],
                description: String::new(),
                expires: Some(soon),
                created_by: "test".into(),
            })
            .unwrap();
        let (old, entry) = file.create_key("acme", Role::Write, vec![], "").unwrap();
        let (new, rotated) = file
            .rotate(&entry.id, std::time::Duration::from_millis(300), "test")
            .unwrap();
        assert_eq!(
            (rotated.role, rotated.tenant.as_str()),
            (Role::Write, "acme")
        );
        assert!(file.create_key("acme", Role::Operator, vec![], "").is_err());
        let (op, _) = file.create_operator("ops");
        file.save(&path).unwrap();
        let ring = KeyRing::open(Some(AuthSource::File(path)), None)
            .await
            .unwrap();
        for k in [&short, &old, &new] {
            assert!(ring.lookup(k).is_ok());
        }
        assert!(ring.lookup(&op).unwrap().is_operator());
        std::thread::sleep(std::time::Duration::from_millis(400));
        assert!(ring.lookup(&short).unwrap_err().0.contains("expired at"));
        assert!(ring.lookup(&old).unwrap_err().0.contains("expired at"));
        assert!(ring.lookup(&new).is_ok());
        assert_eq!(ring.last_used().len(), 4);
        // A past expiry is refused when made.
        let mut file = AuthFile::default();
        let past = NewKey {
            tenant: "acme".into(),
            role: Role::Read,
            namespace: vec![],
            description: String::new(),
            expires: Some("2020-01-01T00:00:00Z".into()),
            created_by: String::new(),
        };
        assert!(file.create_key_with(past).is_err());
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
        assert!(ring.lookup(&key).is_ok());
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
