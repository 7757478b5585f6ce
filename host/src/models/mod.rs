//! Embedding models per tenant, kept under the data root so every replica sees the same ones:
//! `_models/<tenant hex>/files/<sha256>` (file bytes, content-addressed) and
//! `_models/<tenant hex>/m-<name>.json` (the manifest as registered, with its digest and time).
//! Checking, loading and running a model is `lancet_models`'; this module stores, answers per
//! tenant, and bounds what one tenant's calls may take (calls at once, tokens per second).

mod budget;
mod column;
mod query;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use lancet_models::{
    CallLimits, Embeddings, LoadOptions, MODEL_FILE, Manifest, ModelCache, ModelError,
    TOKENIZER_FILE,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::Digest;
use tokio::sync::Semaphore;

use crate::error::{ApiError, ApiResult};
use crate::root::RootStore;
pub use budget::TokenBudget;
pub use column::columns_using;

const PREFIX: &str = "_models";

/// How models are run on this server.
#[derive(Debug, Clone)]
pub struct ModelsConfig {
    /// ONNX Runtime's shared library; `None`: models are refused by name.
    pub onnxruntime: Option<std::path::PathBuf>,
    /// Bytes loaded models may hold in all.
    pub memory_bytes: usize,
    /// Sessions per model and threads per call.
    pub load: LoadOptions,
    /// Rows, text size and deadline of one call.
    pub call: CallLimits,
    /// Calls one tenant runs at once (the others wait their turn, up to the deadline).
    pub tenant_concurrency: usize,
    /// Tokens one tenant may embed per second, sustained (a burst of one second's worth).
    pub tenant_tokens_per_sec: u64,
    /// Bytes of model files one tenant may keep stored (0: no limit).
    pub tenant_storage_bytes: u64,
    /// An uploaded file no registered model names is deleted once this old (at the tenant's
    /// next upload), so uploads that were never registered do not hold storage for ever.
    pub upload_grace: std::time::Duration,
}

/// A registered model as stored and described.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredModel {
    pub manifest: Manifest,
    pub digest: String,
    pub created_at: String,
}

impl StoredModel {
    pub fn public(&self) -> Value {
        json!({
            "name": self.manifest.name,
            "digest": self.digest,
            "created_at": self.created_at,
            "manifest": self.manifest,
        })
    }
}

pub struct Models {
    root: Arc<RootStore>,
    cache: Arc<ModelCache>,
    config: ModelsConfig,
    /// Why models cannot run here, when they cannot.
    unavailable: Option<String>,
    tenants: Mutex<HashMap<String, Arc<TenantShare>>>,
    /// Records text queries read lately, by (tenant, name): see `query::RecentRecords`.
    recent: query::RecentRecords,
    /// For columns, which call in from blocking threads.
    runtime: tokio::runtime::Handle,
    /// Where tokens are counted per tenant.
    usage: Option<Arc<lancet_hosting::usage::Usage>>,
}

struct TenantShare {
    slots: Arc<Semaphore>,
    tokens: TokenBudget,
}

/// Where a tenant's models are under the root.
pub fn tenant_prefix(tenant: &str) -> String {
    tenant_folder(tenant)
}

fn tenant_folder(tenant: &str) -> String {
    format!("{PREFIX}/{}", hex::encode(tenant.as_bytes()))
}

fn file_key(tenant: &str, sha256: &str) -> String {
    format!("{}/files/{sha256}", tenant_folder(tenant))
}

fn record_key(tenant: &str, name: &str) -> String {
    format!("{}/m-{name}.json", tenant_folder(tenant))
}

fn not_found(name: &str) -> ApiError {
    ApiError::invalid(format!("model '{name}' is not registered"))
        .with_status(axum::http::StatusCode::NOT_FOUND)
}

impl Models {
    /// Loads ONNX Runtime if the config names it; a failure is logged and models are then
    /// refused with its reason (the rest of the server runs). Called in the server's runtime.
    /// Model tokens are counted to each tenant's usage.
    pub fn with_usage(mut self, usage: Arc<lancet_hosting::usage::Usage>) -> Self {
        self.usage = Some(usage);
        self
    }

    pub fn new(root: Arc<RootStore>, config: ModelsConfig) -> Self {
        let unavailable = match &config.onnxruntime {
            None => Some(
                "models need ONNX Runtime, and this server was started without it \
                 (--onnxruntime PATH or LANCET_ONNXRUNTIME; `bash scripts/models.sh` fetches it)"
                    .to_string(),
            ),
            Some(path) => match lancet_models::runtime::init(path) {
                Ok(()) => {
                    tracing::info!(library = %path.display(), "ONNX Runtime loaded: models on");
                    None
                }
                Err(e) => {
                    tracing::warn!("models unavailable: {e}");
                    Some(e.to_string())
                }
            },
        };
        Self {
            root,
            cache: Arc::new(ModelCache::new(config.load, config.memory_bytes)),
            config,
            unavailable,
            tenants: Mutex::new(HashMap::new()),
            recent: query::RecentRecords::default(),
            runtime: tokio::runtime::Handle::current(),
            usage: None,
        }
    }

    /// Why models cannot run, if they cannot.
    pub fn unavailable(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// Stores a file's bytes under their sha256 (the same bytes again take no more room),
    /// within the tenant's storage allowance: uploads no model names and older than the grace
    /// period are deleted first, then a file that would take the tenant over is a 413.
    pub async fn put_file(&self, tenant: &str, bytes: bytes::Bytes) -> ApiResult<(String, usize)> {
        if bytes.is_empty() {
            return Err(ApiError::invalid("a model file cannot be empty"));
        }
        let size = bytes.len();
        let sha = {
            let b = bytes.clone();
            tokio::task::spawn_blocking(move || hex::encode(sha2::Sha256::digest(&b)))
                .await
                .map_err(|e| ApiError::internal(format!("hashing the file: {e}")))?
        };
        let key = file_key(tenant, &sha);
        if self.root.head(&key).await?.is_some() {
            // Written again (the same bytes) so its time is now: an upload about to be
            // registered is not collected as stale.
            self.root.put(&key, bytes).await?;
            return Ok((sha, size));
        }
        let kept = self.collect_stale_uploads(tenant).await?;
        let limit = self.config.tenant_storage_bytes;
        if limit > 0 && kept + size as u64 > limit {
            return Err(ApiError::invalid(format!(
                "tenant '{tenant}' keeps {kept} bytes of model files; this one ({size} bytes) \
                 would pass its allowance of {limit} bytes: drop a model first"
            ))
            .with_status(axum::http::StatusCode::PAYLOAD_TOO_LARGE));
        }
        self.root.create(&key, bytes).await?;
        Ok((sha, size))
    }

    /// Deletes the tenant's uploaded files that no registered model names and that are older
    /// than the grace period; answers the bytes of files it keeps. A file younger than the
    /// grace period is kept: its model may be being registered now.
    async fn collect_stale_uploads(&self, tenant: &str) -> ApiResult<u64> {
        let files = self
            .root
            .list_meta(&format!("{}/files", tenant_folder(tenant)))
            .await?;
        if files.is_empty() {
            return Ok(0);
        }
        let named: std::collections::HashSet<String> = self
            .list(tenant)
            .await?
            .into_iter()
            .flat_map(|m| m.manifest.files.into_values())
            .collect();
        let now = chrono::Utc::now();
        let mut kept = 0;
        for f in files {
            let sha = f.key.rsplit('/').next().unwrap_or_default();
            let age = (now - f.modified).to_std().unwrap_or_default();
            if !named.contains(sha) && age >= self.config.upload_grace {
                tracing::info!(
                    tenant,
                    sha,
                    bytes = f.size,
                    "unregistered model file deleted"
                );
                self.root.delete(&f.key).await?;
            } else {
                kept += f.size;
            }
        }
        Ok(kept)
    }

    /// Registers `manifest` once its files are stored and the model loads and runs: a model
    /// that is registered can be used.
    pub async fn register(&self, tenant: &str, manifest: Manifest) -> ApiResult<StoredModel> {
        manifest.validate().map_err(api_error)?;
        if let Some(why) = &self.unavailable {
            return Err(ApiError::invalid(why.clone()));
        }
        let key = record_key(tenant, &manifest.name);
        if self.root.head(&key).await?.is_some() {
            return Err(already_exists(&manifest.name));
        }
        for file in [MODEL_FILE, TOKENIZER_FILE] {
            let sha = manifest.sha256(file).unwrap_or_default();
            if self.root.head(&file_key(tenant, sha)).await?.is_none() {
                return Err(ApiError::invalid(format!(
                    "model '{}': no uploaded file has the sha256 {sha} given for {file} \
                     (upload it first: POST /v1/model/file)",
                    manifest.name
                )));
            }
        }
        self.load(tenant, &manifest).await?;
        let stored = StoredModel {
            digest: manifest.digest(),
            manifest,
            created_at: chrono::Utc::now().to_rfc3339(),
        };
        let bytes = serde_json::to_vec(&stored).map_err(|e| ApiError::internal(e.to_string()))?;
        match self.root.create(&key, bytes).await? {
            Some(_) => Ok(stored),
            None => Err(already_exists(&stored.manifest.name)),
        }
    }

    pub async fn get(&self, tenant: &str, name: &str) -> ApiResult<StoredModel> {
        lancet_models::check_name(name).map_err(api_error)?;
        let found = self
            .root
            .get(&record_key(tenant, name))
            .await?
            .ok_or_else(|| not_found(name))?;
        serde_json::from_slice(&found.bytes)
            .map_err(|e| ApiError::internal(format!("model record '{name}': {e}")))
    }

    pub async fn list(&self, tenant: &str) -> ApiResult<Vec<StoredModel>> {
        let folder = tenant_folder(tenant);
        let mut out = Vec::new();
        for key in self.root.list(&folder).await? {
            let Some(name) = key
                .rsplit('/')
                .next()
                .and_then(|f| f.strip_prefix("m-"))
                .and_then(|f| f.strip_suffix(".json"))
            else {
                continue;
            };
            match self.get(tenant, name).await {
                Ok(m) => out.push(m),
                // Dropped between the listing and the read.
                Err(e) if e.status == axum::http::StatusCode::NOT_FOUND => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Removes the registration, and the files no other model of the tenant names. `users`
    /// are the columns that compute with it (a non-empty list refuses the drop, 409).
    pub async fn drop_model(&self, tenant: &str, name: &str, users: &[String]) -> ApiResult<()> {
        let stored = self.get(tenant, name).await?;
        if !users.is_empty() {
            return Err(ApiError::invalid(format!(
                "model '{name}' is used by column {}: drop or redefine {} first",
                users.join(", "),
                if users.len() == 1 { "it" } else { "them" }
            ))
            .with_status(axum::http::StatusCode::CONFLICT));
        }
        self.root.delete(&record_key(tenant, name)).await?;
        self.recent.forget(tenant, name);
        self.cache.forget(&stored.digest);
        let others = self.list(tenant).await?;
        for sha in stored.manifest.files.values() {
            if !others
                .iter()
                .any(|m| m.manifest.files.values().any(|s| s == sha))
            {
                self.root.delete(&file_key(tenant, sha)).await?;
            }
        }
        Ok(())
    }

    /// Embeds `texts` with `tenant`'s model `name`, under the tenant's share.
    pub async fn embed(
        &self,
        tenant: &str,
        name: &str,
        texts: Vec<String>,
    ) -> ApiResult<(StoredModel, Embeddings)> {
        let stored = self.get(tenant, name).await?;
        let embeddings = self.embed_with(tenant, &stored, texts).await?;
        Ok((stored, embeddings))
    }

    /// Embeds with a model already looked up (a column's, whose digest the caller checked).
    pub async fn embed_with(
        &self,
        tenant: &str,
        stored: &StoredModel,
        texts: Vec<String>,
    ) -> ApiResult<Embeddings> {
        if let Some(why) = &self.unavailable {
            return Err(ApiError::invalid(why.clone()));
        }
        let share = self.share(tenant);
        let deadline = self.config.call.deadline;
        let _slot = tokio::time::timeout(deadline, share.slots.clone().acquire_owned())
            .await
            .map_err(|_| {
                ApiError::unavailable(format!(
                    "tenant '{tenant}' already runs {} model calls; this one waited {} ms",
                    self.config.tenant_concurrency,
                    deadline.as_millis()
                ))
            })?
            .map_err(|_| ApiError::internal("model slots closed"))?;
        let model = self.load(tenant, &stored.manifest).await?;
        // Tokens are counted before the run, estimated from each text's bytes (about three
        // a word piece, plus [CLS] and [SEP]) and cut at max_tokens, as the model cuts it.
        let max_tokens = stored.manifest.max_tokens as u64;
        let estimate: u64 = texts
            .iter()
            .map(|t| (t.len() as u64 / 3 + 2).min(max_tokens))
            .sum();
        share
            .tokens
            .take(estimate, deadline)
            .await
            .map_err(|wait| {
                ApiError::unavailable(format!(
                    "tenant '{tenant}' is over its embedding budget of {} tokens per second \
                 (this call needs ~{estimate}; retry in {} ms)",
                    self.config.tenant_tokens_per_sec,
                    wait.as_millis()
                ))
            })?;
        if let Some(usage) = &self.usage {
            usage.add(
                tenant,
                lancet_hosting::usage::Measure::ModelTokens,
                estimate,
            );
        }
        let limits = self.config.call;
        tokio::task::spawn_blocking(move || model.embed(&texts, &limits))
            .await
            .map_err(|e| ApiError::internal(format!("embedding task: {e}")))?
            .map_err(api_error)
    }

    async fn load(
        &self,
        tenant: &str,
        manifest: &Manifest,
    ) -> ApiResult<Arc<lancet_models::Model>> {
        if let Some(model) = self.cache.loaded(manifest) {
            return Ok(model);
        }
        let mut files = Vec::with_capacity(2);
        for file in [MODEL_FILE, TOKENIZER_FILE] {
            let sha = manifest.sha256(file).unwrap_or_default();
            let bytes = self
                .root
                .get(&file_key(tenant, sha))
                .await?
                .ok_or_else(|| {
                    ApiError::invalid(format!(
                        "model '{}': its {file} ({sha}) is missing from the data root",
                        manifest.name
                    ))
                })?
                .bytes;
            files.push(bytes.to_vec());
        }
        let cache = self.cache.clone();
        let m = manifest.clone();
        let tokenizer = files.pop().unwrap_or_default();
        let onnx = files.pop().unwrap_or_default();
        tokio::task::spawn_blocking(move || cache.get_or_load(&m, move || Ok((onnx, tokenizer))))
            .await
            .map_err(|e| ApiError::internal(format!("model load task: {e}")))?
            .map_err(api_error)
    }

    fn share(&self, tenant: &str) -> Arc<TenantShare> {
        let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        tenants
            .entry(tenant.to_string())
            .or_insert_with(|| {
                Arc::new(TenantShare {
                    slots: Arc::new(Semaphore::new(self.config.tenant_concurrency.max(1))),
                    tokens: TokenBudget::new(self.config.tenant_tokens_per_sec),
                })
            })
            .clone()
    }

    /// The call limits, for messages and the OpenAPI text.
    pub fn call_limits(&self) -> CallLimits {
        self.config.call
    }
}

fn already_exists(name: &str) -> ApiError {
    ApiError::invalid(format!("model '{name}' already exists"))
        .with_status(axum::http::StatusCode::CONFLICT)
}

/// A model error as the API answers it: the caller's mistakes are 400s; a model that cannot be
/// loaded for lack of memory now is a 503 the caller may retry.
pub fn api_error(e: ModelError) -> ApiError {
    match e {
        ModelError::Invalid(m) => ApiError::invalid(m),
        ModelError::Deadline { .. } => ApiError::invalid(e.to_string()),
        ModelError::Unavailable(m) if lancet_models::runtime::loaded_from().is_some() => {
            ApiError::unavailable(m)
        }
        ModelError::Unavailable(m) => ApiError::invalid(m),
        ModelError::Runtime(m) => ApiError::internal(m),
    }
}
