//! Secrets (`/v1/secret/...`): named credentials of a tenant, within a namespace, that reach a
//! registered Function only as the environment variables its `env` bindings name. Values are
//! sealed with AES-256-GCM under the server's key (`--secret-key`) before they touch the data
//! root, with the secret's tenant, namespace and name as associated data (a sealed value moved
//! to another secret's object does not open). No call returns a value; only [`Secrets::reveal`]
//! does, for a Function about to run.

use std::sync::Arc;

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::names::{self, ObjectKind};
use crate::error::{ApiError, ApiResult};
use crate::root::{RootStore, Version};

const PREFIX: &str = "_secrets";
/// Larger values are refused: a credential, not a file.
pub const MAX_VALUE_BYTES: usize = 64 << 10;
const NONCE_LEN: usize = 12;

/// The server's secret key: AES-256 derived from the configured string.
pub struct SecretKey {
    key: LessSafeKey,
    /// Which key sealed a value (a short hash of it), so a value sealed under another key is
    /// reported as such rather than as corrupt.
    id: String,
}

impl SecretKey {
    pub fn new(configured: &str) -> ApiResult<Self> {
        if configured.chars().count() < 16 {
            return Err(ApiError::invalid(
                "--secret-key must be at least 16 characters (e.g. `openssl rand -hex 32`)",
            ));
        }
        let bytes: [u8; 32] = Sha256::new()
            .chain_update(b"lancet secrets v1\0")
            .chain_update(configured.as_bytes())
            .finalize()
            .into();
        let id = hex::encode(&Sha256::digest(bytes)[..6]);
        let key = UnboundKey::new(&AES_256_GCM, &bytes)
            .map_err(|_| ApiError::internal("cannot make an AES-256-GCM key"))?;
        Ok(Self {
            key: LessSafeKey::new(key),
            id,
        })
    }

    fn seal(&self, aad: &[u8], value: &str) -> ApiResult<Sealed> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| ApiError::internal("no randomness for a secret's nonce"))?;
        let mut data = value.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut data,
            )
            .map_err(|_| ApiError::internal("cannot seal a secret"))?;
        Ok(Sealed {
            key_id: self.id.clone(),
            nonce: hex::encode(nonce),
            ciphertext: hex::encode(data),
        })
    }

    fn open(&self, aad: &[u8], sealed: &Sealed, name: &str) -> ApiResult<String> {
        if sealed.key_id != self.id {
            return Err(ApiError::invalid(format!(
                "secret '{name}' was sealed under another --secret-key (key {}, this server \
                 has {}): alter it to store it again under this key",
                sealed.key_id, self.id
            )));
        }
        let corrupt = || ApiError::internal(format!("secret '{name}' does not open"));
        let nonce: [u8; NONCE_LEN] = hex::decode(&sealed.nonce)
            .ok()
            .and_then(|n| n.try_into().ok())
            .ok_or_else(corrupt)?;
        let mut data = hex::decode(&sealed.ciphertext).map_err(|_| corrupt())?;
        let plain = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut data,
            )
            .map_err(|_| corrupt())?;
        String::from_utf8(plain.to_vec()).map_err(|_| corrupt())
    }
}

#[derive(Serialize, Deserialize)]
struct Sealed {
    key_id: String,
    nonce: String,
    ciphertext: String,
}

/// A secret's object under the root.
#[derive(Serialize, Deserialize)]
struct Record {
    name: String,
    namespace_path: Vec<String>,
    created_at_millis: i64,
    updated_at_millis: i64,
    sealed: Sealed,
}

/// What describe shows: never the value.
#[derive(Debug, Clone, Serialize)]
pub struct SecretInfo {
    pub name: String,
    pub created_at_millis: i64,
    pub updated_at_millis: i64,
}

/// Every tenant's secrets, under the data root.
pub struct Secrets {
    root: Arc<RootStore>,
    key: Option<SecretKey>,
}

fn not_found(name: &str, namespace: &[String]) -> ApiError {
    ApiError::invalid(format!(
        "secret '{name}' does not exist{}",
        names::in_namespace(namespace)
    ))
    .with_status(axum::http::StatusCode::NOT_FOUND)
}

fn now_millis() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Secrets {
    pub fn new(root: Arc<RootStore>, key: Option<SecretKey>) -> Self {
        Self { root, key }
    }

    fn key(&self) -> ApiResult<&SecretKey> {
        self.key.as_ref().ok_or_else(|| {
            ApiError::invalid(
                "this server has no secret key: start it with --secret-key (or \
                 LANCET_SECRET_KEY) to store and use secrets",
            )
        })
    }

    fn object(tenant: &str, namespace: &[String], name: &str) -> String {
        format!(
            "{}/{}.json",
            names::folder(PREFIX, tenant, namespace),
            names::file_name(name)
        )
    }

    fn aad(tenant: &str, namespace: &[String], name: &str) -> Vec<u8> {
        let mut aad = format!("{tenant}\0").into_bytes();
        for segment in namespace {
            aad.extend_from_slice(segment.as_bytes());
            aad.push(0);
        }
        aad.extend_from_slice(name.as_bytes());
        aad
    }

    fn check_value(value: &str) -> ApiResult<()> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(ApiError::invalid(format!(
                "a secret's value holds at most {MAX_VALUE_BYTES} bytes, this one {}",
                value.len()
            )));
        }
        Ok(())
    }

    /// A new secret; 409 when the name is taken (a create never silently rotates).
    pub async fn create(
        &self,
        tenant: &str,
        namespace: &[String],
        name: &str,
        value: &str,
    ) -> ApiResult<()> {
        names::check(ObjectKind::Secret, name)?;
        names::check_namespace(namespace)?;
        Self::check_value(value)?;
        let now = now_millis();
        let record = Record {
            name: name.to_string(),
            namespace_path: namespace.to_vec(),
            created_at_millis: now,
            updated_at_millis: now,
            sealed: self
                .key()?
                .seal(&Self::aad(tenant, namespace, name), value)?,
        };
        let bytes = serde_json::to_vec(&record).map_err(|e| ApiError::internal(e.to_string()))?;
        match self
            .root
            .create(&Self::object(tenant, namespace, name), bytes)
            .await?
        {
            Some(_) => Ok(()),
            None => Err(ApiError::new(
                lance_namespace::ErrorCode::ConcurrentModification,
                format!(
                    "secret '{name}' already exists{}: alter it to rotate its value",
                    names::in_namespace(namespace)
                ),
            )),
        }
    }

    /// A new value for an existing secret (404 when there is none).
    pub async fn alter(
        &self,
        tenant: &str,
        namespace: &[String],
        name: &str,
        value: &str,
    ) -> ApiResult<()> {
        names::check(ObjectKind::Secret, name)?;
        Self::check_value(value)?;
        let key = self.key()?;
        let object = Self::object(tenant, namespace, name);
        loop {
            let (mut record, version) = self.load(tenant, namespace, name).await?;
            // Strictly later, so a rotation always shows in updated_at_millis.
            record.updated_at_millis = now_millis().max(record.updated_at_millis + 1);
            record.sealed = key.seal(&Self::aad(tenant, namespace, name), value)?;
            let bytes =
                serde_json::to_vec(&record).map_err(|e| ApiError::internal(e.to_string()))?;
            if self.root.replace(&object, bytes, &version).await?.is_some() {
                return Ok(());
            }
        }
    }

    /// A secret's record and the version it was read at; 404 when there is none.
    async fn load(
        &self,
        tenant: &str,
        namespace: &[String],
        name: &str,
    ) -> ApiResult<(Record, Version)> {
        names::check(ObjectKind::Secret, name)?;
        let object = Self::object(tenant, namespace, name);
        let found = self
            .root
            .get(&object)
            .await?
            .ok_or_else(|| not_found(name, namespace))?;
        let record = serde_json::from_slice(&found.bytes)
            .map_err(|e| ApiError::internal(format!("secret record {object}: {e}")))?;
        Ok((record, found.version))
    }

    async fn record(&self, tenant: &str, namespace: &[String], name: &str) -> ApiResult<Record> {
        Ok(self.load(tenant, namespace, name).await?.0)
    }

    pub async fn describe(
        &self,
        tenant: &str,
        namespace: &[String],
        name: &str,
    ) -> ApiResult<SecretInfo> {
        let r = self.record(tenant, namespace, name).await?;
        Ok(SecretInfo {
            name: r.name,
            created_at_millis: r.created_at_millis,
            updated_at_millis: r.updated_at_millis,
        })
    }

    /// The names of the namespace's secrets, sorted.
    pub async fn list(&self, tenant: &str, namespace: &[String]) -> ApiResult<Vec<String>> {
        names::check_namespace(namespace)?;
        let folder = format!("{}/", names::folder(PREFIX, tenant, namespace));
        let mut out: Vec<String> = self
            .root
            .list(&folder)
            .await?
            .iter()
            .filter_map(|k| k.strip_prefix(&folder)?.strip_suffix(".json"))
            .filter(|rest| !rest.contains('/'))
            .filter_map(names::from_file_name)
            .collect();
        out.sort();
        Ok(out)
    }

    pub async fn drop(&self, tenant: &str, namespace: &[String], name: &str) -> ApiResult<()> {
        self.record(tenant, namespace, name).await?;
        self.root
            .delete(&Self::object(tenant, namespace, name))
            .await
    }

    /// A secret's value, for the Function bound to it that is about to run.
    pub async fn reveal(
        &self,
        tenant: &str,
        namespace: &[String],
        name: &str,
    ) -> ApiResult<String> {
        let key = self.key()?;
        let r = self.record(tenant, namespace, name).await?;
        key.open(&Self::aad(tenant, namespace, name), &r.sealed, name)
    }

    /// Whether the secret exists (checked when a Function binds it).
    pub async fn exists(&self, tenant: &str, namespace: &[String], name: &str) -> ApiResult<bool> {
        names::check(ObjectKind::Secret, name)?;
        Ok(self
            .root
            .head(&Self::object(tenant, namespace, name))
            .await?
            .is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_with_its_key_and_its_name() {
        let key = SecretKey::new("0123456789abcdef-test-key").unwrap();
        let sealed = key.seal(b"t\0s1", "hunter2").unwrap();
        assert!(!sealed.ciphertext.contains(&hex::encode("hunter2")));
        assert_eq!(key.open(b"t\0s1", &sealed, "s1").unwrap(), "hunter2");
        assert!(
            key.open(b"t\0s2", &sealed, "s2").is_err(),
            "moved to another name"
        );
        let other = SecretKey::new("another key of sixteen+").unwrap();
        let err = other.open(b"t\0s1", &sealed, "s1").unwrap_err();
        assert!(err.message.contains("another --secret-key"), "{err}");
        assert!(SecretKey::new("short").is_err());
    }
}
