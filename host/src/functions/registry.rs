//! The Function registry: what lancedb 0.40's `create_function` registers, kept as immutable
//! numbered versions per tenant, namespace and name under the data root
//! (`_functions/<tenant>/<namespace>/n-<name>/v-<version>.json`). A registration is checked
//! here (artifact digest, adapter, runtime, environment, signature, secret bindings); building
//! it (compiling the source in the sandbox) is the `function_build` job's.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::names::{self, ObjectKind};
use super::packages::PackageIndex;
use super::secrets::Secrets;
use super::signature::FunctionSignature;
use crate::error::{ApiError, ApiResult};
use crate::root::RootStore;

const PREFIX: &str = "_functions";
/// The one artifact adapter there is: the callable takes one row's values and returns one
/// value (or a dict for a named struct).
const ADAPTER: &str = "scalar_to_arrow_batch";
/// Sources larger than this are refused before they are decoded (as for the seed payload).
pub const MAX_SOURCE_BYTES: usize = lancet_udf::MAX_SOURCE_BYTES;

/// `create_function`'s body, field for field (anything else is refused by name).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    /// The client sends the name in the path; a body naming one must agree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub artifact: Artifact,
    pub signature: FunctionSignature,
    pub runtime: RuntimeSpec,
    #[serde(default)]
    pub secret_bindings: Vec<SecretBinding>,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Artifact {
    pub kind: String,
    pub digest: String,
    pub entrypoint: String,
    pub content: Content,
    pub adapter: Adapter,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Content {
    pub encoding: String,
    pub data: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Adapter {
    pub kind: String,
    pub version: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuntimeSpec {
    pub kind: String,
    #[serde(default)]
    pub python_version: Option<String>,
    #[serde(default)]
    pub environment: Option<Environment>,
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub gpu: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    pub kind: String,
    #[serde(default)]
    pub packages: Vec<String>,
    #[serde(default)]
    pub channels: Vec<String>,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub modules: Vec<String>,
    #[serde(default)]
    pub image: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretBinding {
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variable: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretRef {
    pub name: String,
    #[serde(default)]
    pub namespace_path: Vec<String>,
}

impl SecretBinding {
    /// (variable, secret namespace, secret name) of an `env` binding.
    pub fn env(&self) -> ApiResult<(&str, &[String], &str)> {
        if self.kind != "env" {
            return Err(ApiError::invalid(format!(
                "secret binding kind '{}' is not supported (env)",
                self.kind
            )));
        }
        let variable = self
            .variable
            .as_deref()
            .filter(|v| {
                v.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
            .ok_or_else(|| {
                ApiError::invalid("an env secret binding needs a valid variable name")
            })?;
        let secret = self
            .secret_ref
            .as_ref()
            .ok_or_else(|| ApiError::invalid("an env secret binding needs secret_ref"))?;
        Ok((variable, &secret.namespace_path, &secret.name))
    }
}

/// A registration that passed every check that needs no sandbox.
pub struct Checked {
    pub registration: Registration,
    /// The entry module's source.
    pub source: String,
    /// A bundle's other modules (`code=[...]`), by path from the import root.
    pub files: Vec<(String, Vec<u8>)>,
    pub digest: String,
}

/// Files shipped with a Function, by path from the import root.
pub type Files = Vec<(String, Vec<u8>)>;

/// The entry module of a `python_bundle` artifact (the lancedb client's name for it).
const BUNDLE_ENTRY: &str = "user_function.py";

/// A `python_bundle` artifact's content, `{"files": {path: source}}`: the entry module's source
/// and the other files.
fn parse_bundle(bytes: &[u8]) -> ApiResult<(String, Files)> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Bundle {
        files: BTreeMap<String, String>,
    }
    let bundle: Bundle = serde_json::from_slice(bytes)
        .map_err(|e| refuse(format!("artifact.content is not a python_bundle: {e}")))?;
    let mut entry = None;
    let mut files = Vec::new();
    for (path, text) in bundle.files {
        lancet_udf::check_python_file_path(&path)
            .map_err(|e| refuse(format!("artifact.content: {e}")))?;
        if path == BUNDLE_ENTRY {
            entry = Some(text);
        } else {
            files.push((path, text.into_bytes()));
        }
    }
    if files.len() > lancet_udf::MAX_FILES {
        return Err(refuse(format!(
            "artifact.content ships {} files; the limit is {}",
            files.len(),
            lancet_udf::MAX_FILES
        )));
    }
    let entry = entry.ok_or_else(|| refuse(format!("artifact.content has no {BUNDLE_ENTRY}")))?;
    if entry.len() > MAX_SOURCE_BYTES {
        return Err(refuse(format!(
            "the Function's source is over the limit of {MAX_SOURCE_BYTES} bytes"
        )));
    }
    Ok((entry, files))
}

fn refuse(what: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(what.to_string())
}

impl Registration {
    /// Every check short of running the source, including that each bound secret exists.
    /// `native`: the tenant may run Functions in the native tier (which installs pip packages
    /// itself, with or without a package index for the Wasm sandbox).
    pub async fn check(
        self,
        name: &str,
        tenant: &str,
        secrets: &Secrets,
        packages: Option<&PackageIndex>,
        native: bool,
    ) -> ApiResult<Checked> {
        names::check(ObjectKind::Function, name)?;
        if self.name.as_deref().is_some_and(|n| n != name) {
            return Err(refuse(format!(
                "name {:?} in the body disagrees with '{name}' in the path",
                self.name.as_deref().unwrap_or_default()
            )));
        }
        let a = &self.artifact;
        let bundle = match a.kind.as_str() {
            "python_callable" => false,
            "python_bundle" => true,
            other => return Err(refuse(format!("artifact.kind '{other}' is not supported"))),
        };
        let limit = if bundle {
            lancet_udf::MAX_FILES_BYTES
        } else {
            MAX_SOURCE_BYTES
        };
        if a.adapter.kind != ADAPTER || a.adapter.version != 1 {
            return Err(refuse(format!(
                "artifact.adapter {} v{} is not supported ({ADAPTER} v1)",
                a.adapter.kind, a.adapter.version
            )));
        }
        if a.content.encoding != "base64" {
            return Err(refuse(format!(
                "artifact.content.encoding '{}' is not supported (base64)",
                a.content.encoding
            )));
        }
        if a.content.data.len() / 4 * 3 > limit + 3 {
            return Err(refuse(format!(
                "the Function's {} is over the limit of {limit} bytes",
                if bundle { "bundle" } else { "source" }
            )));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(a.content.data.as_bytes())
            .map_err(|e| refuse(format!("artifact.content.data is not base64: {e}")))?;
        let digest = format!("sha256:{}", lancet_udf::sha256_hex(&bytes));
        if digest != a.digest {
            return Err(refuse(format!(
                "artifact.digest {} does not match the content ({digest})",
                a.digest
            )));
        }
        let (source, files) = if bundle {
            parse_bundle(&bytes)?
        } else {
            let source = String::from_utf8(bytes).map_err(|e| {
                refuse(format!(
                    "the Function's source is not UTF-8 (invalid byte at offset {})",
                    e.utf8_error().valid_up_to()
                ))
            })?;
            (source, Vec::new())
        };
        self.check_runtime(packages, native)?;
        self.signature.check()?;
        let mut variables = std::collections::HashSet::new();
        for b in &self.secret_bindings {
            let (variable, namespace, secret) = b.env()?;
            if !variables.insert(variable)
                || self
                    .runtime
                    .env
                    .as_ref()
                    .is_some_and(|e| e.contains_key(variable))
            {
                return Err(refuse(format!(
                    "environment variable {variable} is bound more than once"
                )));
            }
            if !secrets.exists(tenant, namespace, secret).await? {
                return Err(refuse(format!(
                    "secret '{secret}'{} (bound to {variable}) does not exist",
                    names::in_namespace(namespace)
                )));
            }
        }
        Ok(Checked {
            registration: self,
            source,
            files,
            digest,
        })
    }

    fn check_runtime(&self, packages: Option<&PackageIndex>, native: bool) -> ApiResult<()> {
        let r = &self.runtime;
        match r.kind.as_str() {
            "python" => {}
            "python_v2" => {
                return Err(refuse(
                    "runtime.kind 'python_v2' (gpu) is not supported: Lancet runs Functions \
                     on CPU in a WebAssembly sandbox",
                ));
            }
            other => return Err(refuse(format!("runtime.kind '{other}' is not supported"))),
        }
        if r.gpu.is_some() {
            return Err(refuse("runtime.gpu is not supported"));
        }
        let version = r.python_version.as_deref().unwrap_or("3");
        if !version.starts_with('3') {
            return Err(refuse(format!(
                "runtime.python_version {version} is not supported: Functions run on CPython 3"
            )));
        }
        let env = r
            .environment
            .as_ref()
            .ok_or_else(|| refuse("runtime.environment is required"))?;
        match env.kind.as_str() {
            "pip" => {}
            other => {
                return Err(refuse(format!(
                    "runtime.environment.kind '{other}' is not supported: the sandbox has \
                     CPython's standard library only"
                )));
            }
        }
        if !env.packages.is_empty() && packages.is_none() && !native {
            return Err(refuse(format!(
                "pip packages {:?} are not available: this server has no package index \
                 configured (--package-index / LANCET_PACKAGE_INDEX)",
                env.packages
            )));
        }
        for p in &env.packages {
            super::packages::parse_requirement(p)?;
        }
        for (field, set) in [
            ("channels", !env.channels.is_empty()),
            ("path", env.path.is_some()),
            ("modules", !env.modules.is_empty()),
            ("image", env.image.is_some()),
        ] {
            if set {
                return Err(refuse(format!(
                    "runtime.environment.{field} is not supported"
                )));
            }
        }
        for (k, v) in r.env.iter().flatten() {
            if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
                return Err(refuse(format!(
                    "runtime.env: {k:?} is not a valid variable"
                )));
            }
        }
        Ok(())
    }
}

/// One immutable Function version as stored. [`StoredFunction::public`] is what clients see
/// (the lancedb client's `FunctionVersion`); the source stays on the server.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StoredFunction {
    pub name: String,
    pub namespace_path: Vec<String>,
    pub object_id: String,
    pub version: String,
    pub digest: String,
    pub entrypoint: String,
    pub source: String,
    /// Modules shipped with it (`code=[...]`) and its pip packages' files, by import path:
    /// kept in an object of their own (`files_object`, beside the record), read only by
    /// `get_bound` (what runs it), so listing and describing never carry megabytes of packages.
    #[serde(skip)]
    #[schemars(skip)]
    pub files: Files,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_object: Option<String>,
    /// The pip requirements asked for, and what they resolved to (`name==version`), bundled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resolved: Vec<String>,
    pub signature: FunctionSignature,
    pub secret_bindings: Vec<SecretBinding>,
    pub env: BTreeMap<String, String>,
    pub python_version: String,
    pub created_at: String,
    /// Where it runs: the Wasm sandbox (records written before the native tier have none).
    #[serde(default, skip_serializing_if = "Tier::is_wasm")]
    pub tier: Tier,
}

/// Where a Function runs. A Function whose pip packages have no pure-Python wheel (numpy, ...)
/// runs in the native tier when its tenant has it; every other one in the Wasm sandbox.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// CPython compiled to WebAssembly, pure Python only.
    #[default]
    Wasm,
    /// A real CPython in the bubblewrap sandbox, native wheels allowed.
    Native,
}

impl Tier {
    fn is_wasm(&self) -> bool {
        *self == Tier::Wasm
    }
}

impl StoredFunction {
    pub fn location(&self) -> String {
        let mut path = self.namespace_path.clone();
        path.push(self.name.clone());
        format!("lancet://functions/{}", path.join("/"))
    }

    /// The client's `FunctionVersion`, namespace paths as a client of `database` (the
    /// namespace its requests are under, if any) wrote them.
    pub fn public(&self, database: Option<&str>) -> Value {
        let relative = |ns: &[String]| -> Vec<String> {
            match (database, ns.first()) {
                (Some(db), Some(first)) if first == db => ns[1..].to_vec(),
                _ => ns.to_vec(),
            }
        };
        let bindings: Vec<SecretBinding> = self
            .secret_bindings
            .iter()
            .cloned()
            .map(|mut b| {
                if let Some(r) = &mut b.secret_ref {
                    r.namespace_path = relative(&r.namespace_path);
                }
                b
            })
            .collect();
        let (runtime, descriptor_runtime) = match self.tier {
            Tier::Wasm => ("lancet-python-sandbox", "cpython-wasm"),
            Tier::Native => ("lancet-python-native", "cpython-native"),
        };
        let mut metadata = json!({ "runtime": runtime });
        if !self.resolved.is_empty() {
            // What the pip requirements resolved to, e.g. "tinyslug==1.0 tinydep==1.1".
            metadata["pip"] = json!(self.resolved.join(" "));
        }
        json!({
            "name": self.name,
            "namespace_path": relative(&self.namespace_path),
            "object_id": self.object_id,
            "location": self.location(),
            "version": self.version,
            "image": {
                // The sandbox's "image" is the source itself: its digest identifies it.
                "manifest_digest": self.digest,
                "descriptor": {
                    "runtime": descriptor_runtime,
                    "python_version": self.python_version,
                    "entrypoint": self.entrypoint,
                },
                "source": true,
            },
            "signature": self.signature,
            "secret_bindings": bindings,
            "created_at": self.created_at,
            "metadata": metadata,
            "disabled": false,
        })
    }

    /// Whether `c` would register this very function (same source, signature, environment
    /// and bindings): registering it again answers this version.
    fn same_as(&self, c: &Checked) -> bool {
        let r = &c.registration;
        self.digest == c.digest
            && self.entrypoint == r.artifact.entrypoint
            && self.signature == r.signature
            && self.secret_bindings == r.secret_bindings
            && self.env == r.runtime.env.clone().unwrap_or_default()
            && self.packages == requested(r)
    }
}

/// What building a registration made: the interpreter's version that loaded it, every file
/// shipped with it (its bundle's and its packages'), and its packages as resolved.
pub struct Built {
    pub python_version: String,
    pub files: Vec<(String, Vec<u8>)>,
    pub resolved: Vec<String>,
    pub tier: Tier,
}

/// A version's files object.
#[derive(Serialize, Deserialize)]
struct FilesObject {
    #[serde(with = "lancet_udf::python_files_b64")]
    files: Files,
}

fn files_bytes(files: &Files) -> ApiResult<Vec<u8>> {
    serde_json::to_vec(&FilesObject {
        files: files.clone(),
    })
    .map_err(|e| ApiError::internal(e.to_string()))
}

/// The pip requirements a registration asks for.
pub fn requested(r: &Registration) -> Vec<String> {
    r.runtime
        .environment
        .as_ref()
        .map(|e| e.packages.clone())
        .unwrap_or_default()
}

/// The registry of every tenant.
pub struct Registry {
    root: Arc<RootStore>,
}

fn version_file(version: u64) -> String {
    format!("v-{version:020}.json")
}

impl Registry {
    pub fn new(root: Arc<RootStore>) -> Self {
        Self { root }
    }

    fn folder(tenant: &str, namespace: &[String], name: &str) -> String {
        format!(
            "{}/{}",
            names::folder(PREFIX, tenant, namespace),
            names::file_name(name)
        )
    }

    /// Where builds of this function are serialized (the job's `location`).
    pub fn build_location(tenant: &str, namespace: &[String], name: &str) -> String {
        Self::folder(tenant, namespace, name)
    }

    /// The versions of one function, oldest first.
    async fn versions(
        &self,
        tenant: &str,
        namespace: &[String],
        name: &str,
    ) -> ApiResult<Vec<StoredFunction>> {
        let folder = format!("{}/", Self::folder(tenant, namespace, name));
        let mut out = Vec::new();
        for key in self.root.list(&folder).await? {
            if !key.ends_with(".json") {
                continue; // a version's files object
            }
            if let Some(found) = self.root.get(&key).await? {
                out.push(
                    serde_json::from_slice::<StoredFunction>(&found.bytes)
                        .map_err(|e| ApiError::internal(format!("Function record {key}: {e}")))?,
                );
            }
        }
        out.sort_by_key(|f| f.version.parse::<u64>().unwrap_or(0));
        Ok(out)
    }

    /// Store `checked` (built: its source loads, `python_version` ran it) as the next version,
    /// or answer the existing version it is identical to.
    pub async fn publish(
        &self,
        tenant: &str,
        namespace: &[String],
        name: &str,
        checked: &Checked,
        built: &Built,
    ) -> ApiResult<StoredFunction> {
        let Built {
            python_version,
            files,
            resolved,
            tier,
        } = built;
        loop {
            let existing = self.versions(tenant, namespace, name).await?;
            if let Some(same) = existing.iter().find(|f| f.same_as(checked)) {
                return Ok(same.clone());
            }
            let next = existing
                .last()
                .and_then(|f| f.version.parse::<u64>().ok())
                .unwrap_or(0)
                + 1;
            let r = &checked.registration;
            let stored = StoredFunction {
                name: name.to_string(),
                namespace_path: namespace.to_vec(),
                object_id: existing
                    .last()
                    .map(|f| f.object_id.clone())
                    .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
                version: next.to_string(),
                digest: checked.digest.clone(),
                entrypoint: r.artifact.entrypoint.clone(),
                source: checked.source.clone(),
                files: Files::new(),
                files_object: None,
                packages: requested(r),
                resolved: resolved.to_vec(),
                signature: r.signature.clone(),
                secret_bindings: r.secret_bindings.clone(),
                env: r.runtime.env.clone().unwrap_or_default(),
                python_version: python_version.to_string(),
                created_at: chrono::Utc::now().to_rfc3339(),
                tier: *tier,
            };
            let folder = Self::folder(tenant, namespace, name);
            let key = format!("{folder}/{}", version_file(next));
            let mut stored = stored;
            // The files first, under a name no racing build can take (their digest), so a
            // record never names files that are not there yet.
            if !files.is_empty() {
                let bytes = files_bytes(files)?;
                let digest = lancet_udf::sha256_hex(&bytes);
                let object = format!("v-{next:020}-{}.files", &digest[..16]);
                self.root.put(&format!("{folder}/{object}"), bytes).await?;
                stored.files_object = Some(object);
            }
            let bytes =
                serde_json::to_vec(&stored).map_err(|e| ApiError::internal(e.to_string()))?;
            // Another build took this number first: count again.
            if self.root.create(&key, bytes).await?.is_some() {
                stored.files = files.clone();
                return Ok(stored);
            }
            if let Some(object) = &stored.files_object {
                self.root.delete(&format!("{folder}/{object}")).await?;
            }
        }
    }

    /// One version; 404 when there is no such version.
    pub async fn get(
        &self,
        tenant: &str,
        namespace: &[String],
        name: &str,
        version: &str,
    ) -> ApiResult<StoredFunction> {
        names::check(ObjectKind::Function, name)?;
        let n = parse_version(version)?;
        let key = format!(
            "{}/{}",
            Self::folder(tenant, namespace, name),
            version_file(n)
        );
        let found = self.root.get(&key).await?.ok_or_else(|| {
            ApiError::invalid(format!(
                "Function '{name}' version {version} does not exist{}",
                names::in_namespace(namespace)
            ))
            .with_status(axum::http::StatusCode::NOT_FOUND)
        })?;
        serde_json::from_slice(&found.bytes)
            .map_err(|e| ApiError::internal(format!("Function record {key}: {e}")))
    }

    /// The version a table binding names: its absence is the binding's problem (400), not a
    /// missing table's (a 404 on a table route reads as one to clients).
    pub async fn get_bound(
        &self,
        tenant: &str,
        namespace: &[String],
        name: &str,
        version: &str,
    ) -> ApiResult<StoredFunction> {
        let mut stored = self
            .get(tenant, namespace, name, version)
            .await
            .map_err(|e| {
                if e.status == axum::http::StatusCode::NOT_FOUND {
                    ApiError::invalid(e.message)
                } else {
                    e
                }
            })?;
        if let Some(object) = &stored.files_object {
            let key = format!("{}/{object}", Self::folder(tenant, namespace, name));
            let found = self.root.get(&key).await?.ok_or_else(|| {
                ApiError::internal(format!(
                    "Function '{name}' version {version}: its files ({key}) are missing"
                ))
            })?;
            stored.files = serde_json::from_slice::<FilesObject>(&found.bytes)
                .map_err(|e| ApiError::internal(format!("Function files {key}: {e}")))?
                .files;
        }
        Ok(stored)
    }

    /// Every version of every function of the namespace, by name then version.
    pub async fn list(&self, tenant: &str, namespace: &[String]) -> ApiResult<Vec<StoredFunction>> {
        names::check_namespace(namespace)?;
        let folder = names::folder(PREFIX, tenant, namespace);
        let mut out = Vec::new();
        for dir in self.root.list_dirs(&folder).await? {
            if let Some(name) = names::from_file_name(&dir) {
                out.extend(self.versions(tenant, namespace, &name).await?);
            }
        }
        out.sort_by(|a, b| {
            (a.name.as_str(), a.version.parse::<u64>().unwrap_or(0))
                .cmp(&(b.name.as_str(), b.version.parse::<u64>().unwrap_or(0)))
        });
        Ok(out)
    }

    /// Once a Function has no version left, its folder under a local root goes too (only if
    /// still empty: a version registered meanwhile keeps it). True when it was removed.
    pub async fn remove_if_empty(
        &self,
        tenant: &str,
        namespace: &[String],
        name: &str,
    ) -> ApiResult<bool> {
        let folder = Self::folder(tenant, namespace, name);
        if !self.root.list(&format!("{folder}/")).await?.is_empty() {
            return Ok(false);
        }
        Ok(self.root.remove_empty_dir(&folder).await)
    }

    /// Remove one version; false when it was not there.
    pub async fn drop(
        &self,
        tenant: &str,
        namespace: &[String],
        name: &str,
        version: &str,
    ) -> ApiResult<bool> {
        names::check(ObjectKind::Function, name)?;
        let key = format!(
            "{}/{}",
            Self::folder(tenant, namespace, name),
            version_file(parse_version(version)?)
        );
        let Some(found) = self.root.get(&key).await? else {
            return Ok(false);
        };
        self.root.delete(&key).await?;
        // Its files go with it (a record that no longer parses keeps nothing else alive).
        if let Ok(StoredFunction {
            files_object: Some(object),
            ..
        }) = serde_json::from_slice::<StoredFunction>(&found.bytes)
        {
            let folder = Self::folder(tenant, namespace, name);
            self.root.delete(&format!("{folder}/{object}")).await?;
        }
        Ok(true)
    }
}

/// A canonical positive version number (`1`, not `01`).
pub fn parse_version(version: &str) -> ApiResult<u64> {
    version
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0 && n.to_string() == version)
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "version {version:?} is not a Function version (a positive integer)"
            ))
        })
}
