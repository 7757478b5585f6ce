//! Native Python columns (`udf_backend: "python-native"`): the seed's Python payload (`udf` =
//! base64 source, `udf_name` = the function or class, `image` = `python:X.Y`) run by the
//! server's native tier (`crate::native`): a real CPython in a bubblewrap sandbox, with the pip
//! packages the optional manifest names. Checked at definition (environment built, function
//! loaded, a zero-row call) so a bad function or package is a 400 there, not a failed job.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema};
use lancet_native::{Code, FunctionSpec, Mode, Worker, WorkerKey};
use lancet_udf::{OnError, sha256_hex};
use serde::{Deserialize, Serialize};

use super::backfill::Computed;
use super::define::{Output, declared_outputs, outputs_type};
use super::{DEFINITION_KEY, Definition, NewVirtual, VirtualColumns};
use crate::error::{ApiError, ApiResult};
use crate::native::{NativeTier, native_error};

pub const BACKEND: &str = "python-native";

/// Whether `udf_backend` asks for the native tier: Lancet's own payload, or Geneva's.
pub fn is_native_backend(backend: Option<&str>) -> bool {
    backend.is_some_and(|b| b.trim().eq_ignore_ascii_case(BACKEND))
        || super::geneva::is_geneva_backend(backend)
}

/// What is stored with a native column (inside its [`Definition`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NativeDef {
    /// The source text (empty for a pickled function).
    pub source: String,
    /// A pickled callable (Geneva's cloudpickled UDF), base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pickle: Option<String>,
    /// The sha256 of the source (or of the pickle's bytes), checked before every load.
    pub source_sha256: String,
    /// `row`, `batch` or `record_batch`.
    pub mode: String,
    /// pip requirements of its environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pip: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The interpreter version that checked it.
    pub python_version: String,
    #[serde(default)]
    pub on_error: OnError,
}

/// The optional `manifest` of a native function: how it runs (the code is `udf`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NativeOptions {
    #[serde(default)]
    pip: Vec<String>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    on_error: OnError,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

fn mode_of(name: &str) -> ApiResult<Mode> {
    match name {
        "row" => Ok(Mode::Row),
        "batch" => Ok(Mode::Batch),
        "record_batch" => Ok(Mode::RecordBatch),
        other => Err(ApiError::invalid(format!(
            "manifest mode '{other}' is not one of row, batch, record_batch"
        ))),
    }
}

impl NativeDef {
    /// The worker's spec, after checking the stored source still hashes to its sha256.
    fn spec(
        &self,
        entry: &str,
        output: DataType,
        environment: Vec<std::path::PathBuf>,
    ) -> ApiResult<FunctionSpec> {
        let (code, actual) = match &self.pickle {
            Some(b64) => {
                use base64::Engine as _;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| ApiError::internal(format!("stored pickle of '{entry}': {e}")))?;
                let sha = sha256_hex(&bytes);
                (Code::Pickle { bytes }, sha)
            }
            None => (
                Code::Source {
                    source: self.source.clone(),
                    entry: entry.to_string(),
                },
                sha256_hex(self.source.as_bytes()),
            ),
        };
        if actual != self.source_sha256 {
            return Err(ApiError::internal(format!(
                "stored code of '{entry}' hashes to {actual}, not {}",
                self.source_sha256
            )));
        }
        Ok(FunctionSpec {
            code,
            mode: mode_of(&self.mode)?,
            output,
            environment,
            env: self.env.clone().into_iter().collect(),
            null_on_error: self.on_error == OnError::Null,
            init: None,
            files: Vec::new(),
            load_only: false,
            pass_nulls: false,
        })
    }
}

/// A native column as a backfill or insert computes it.
pub(super) struct NativeUdf {
    tier: Arc<NativeTier>,
    def: NativeDef,
    entry: String,
    /// Which function, for the pool (with the tenant, its key).
    function: String,
    /// What the function returns (a struct for a multi-output group).
    output: DataType,
    /// The child of the result this column takes; empty: the whole result.
    pub(super) struct_field: String,
    pub(super) input_columns: Vec<String>,
    inputs: Vec<Field>,
    /// The worker spec, resolved on first use (on a blocking thread: pip may run).
    spec: OnceLock<FunctionSpec>,
}

impl NativeUdf {
    pub(super) fn on_error_null(&self) -> bool {
        self.def.on_error == OnError::Null
    }

    pub(super) fn version(&self) -> &str {
        &self.def.source_sha256
    }

    pub(super) fn label(&self) -> &str {
        &self.entry
    }

    fn spec(&self) -> ApiResult<&FunctionSpec> {
        if let Some(s) = self.spec.get() {
            return Ok(s);
        }
        let dirs = self.tier.environment(&self.def.pip)?;
        let spec = self.def.spec(&self.entry, self.output.clone(), dirs)?;
        Ok(self.spec.get_or_init(|| spec))
    }

    /// Computes the function over `batch` (holding its inputs): its whole result, of which
    /// the column takes [`NativeUdf::struct_field`]. Blocking.
    pub(super) fn compute(&self, tenant: &str, batch: &RecordBatch) -> ApiResult<Computed> {
        self.tier.allow(tenant)?;
        let input = super::backfill::udf_input(&self.inputs, batch)?;
        let out = self
            .tier
            .pool()
            .call(
                &WorkerKey {
                    tenant: tenant.to_string(),
                    function: self.function.clone(),
                },
                self.spec()?,
                &input,
            )
            .map_err(native_error)?;
        Ok(Computed {
            values: out.values,
            nulled: out.nulled as u64,
            failures: Vec::new(),
        })
    }
}

impl NativeUdf {
    /// The input columns out of a batch holding them, in the function's order.
    pub(super) fn input(&self, batch: &RecordBatch) -> ApiResult<RecordBatch> {
        super::backfill::udf_input(&self.inputs, batch)
    }

    /// The worker spec (resolved now if needed; blocking: pip may run).
    pub(super) fn spec_owned(&self) -> ApiResult<FunctionSpec> {
        self.spec().cloned()
    }

    /// A pipeline of this function's calls for `tenant` on one of its workers (see
    /// [`lancet_native::Pipeline`]); `spec` gives the worker's spec at the first batch. Never
    /// blocks.
    pub(super) fn pipeline(
        &self,
        tenant: &str,
        spec: impl FnOnce() -> ApiResult<FunctionSpec> + Send + 'static,
    ) -> ApiResult<lancet_native::Pipeline> {
        self.tier.allow(tenant)?;
        let key = WorkerKey {
            tenant: tenant.to_string(),
            function: self.function.clone(),
        };
        self.tier
            .pool()
            .pipeline(&key, move || {
                spec().map_err(|e| lancet_native::NativeError::Load(e.message))
            })
            .map_err(native_error)
    }
}

impl VirtualColumns {
    fn native(&self) -> ApiResult<&Arc<NativeTier>> {
        self.native.as_ref().ok_or_else(|| {
            ApiError::invalid(
                "this server runs no native Python tier (udf_backend 'python-native'): its \
                 operator starts it with --native-python (see docs/native-python.md)",
            )
        })
    }

    /// The native UDF of a column defined with `def`, whose function returns `output` (the
    /// column's type, or for a member of a multi-output group the struct of the group's
    /// fields: [`NativeUdf::compute`] returns it whole).
    pub(super) fn native_udf(
        &self,
        def: &Definition,
        native: &NativeDef,
        inputs: Vec<Field>,
        output: DataType,
    ) -> ApiResult<NativeUdf> {
        let tier = self.native()?.clone();
        let digest = sha256_hex(
            serde_json::to_string(native)
                .map_err(|e| ApiError::internal(e.to_string()))?
                .as_bytes(),
        );
        Ok(NativeUdf {
            tier,
            def: native.clone(),
            entry: def.udf_name.clone(),
            function: format!("{digest}:{}:{output}", def.udf_name),
            output,
            struct_field: def.struct_field.clone(),
            input_columns: def.input_columns.clone(),
            inputs,
            spec: OnceLock::new(),
        })
    }

    /// The fields of a new native column (null until computed), their definition in their
    /// metadata: one, or one per output when the function's struct result is split into
    /// sibling columns; with `existing`, the new definition of that one column (same name and
    /// type: its UDF is altered).
    pub(super) async fn native_fields(
        &self,
        tenant: &str,
        schema: &lance_core::datatypes::Schema,
        v: &NewVirtual,
        existing: Option<&Field>,
    ) -> ApiResult<Vec<Field>> {
        let tier = self.native()?.clone();
        tier.allow(tenant)?;
        let encoded = v.udf.as_deref().filter(|u| !u.is_empty()).ok_or_else(|| {
            ApiError::invalid("a native Python UDF needs its source in 'udf' (base64)")
        })?;
        let entry = v
            .udf_name
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ApiError::invalid(
                    "a native Python UDF needs 'udf_name': the function or class to call",
                )
            })?;
        let geneva = super::geneva::is_geneva_backend(v.udf_backend.as_deref());
        let spec_json = if geneva {
            super::geneva::spec_json(encoded)?
        } else {
            Vec::new()
        };
        let (source, pickle, image, options, manifest_text, checksum) = if geneva {
            use base64::Engine as _;
            let payload = super::geneva::decode_payload(encoded)?;
            let (options, text, sum) = options(v, true)?;
            let sha = sha256_hex(&payload.pickle);
            let pickle = base64::engine::general_purpose::STANDARD.encode(&payload.pickle);
            (
                String::new(),
                Some((pickle, sha)),
                payload.python_image,
                options,
                text,
                sum,
            )
        } else {
            let source = lancet_udf::decode_python_source(encoded).map_err(super::udf_error)?;
            let (options, text, sum) = options(v, false)?;
            (source, None, v.image.clone(), options, text, sum)
        };
        if let Some(asked) = super::python::requested_version(image.as_deref())?
            && asked != tier.python_minor()
        {
            return Err(ApiError::invalid(format!(
                "image '{}' asks for Python {asked}, but this server's native tier runs Python {}",
                image.as_deref().unwrap_or_default(),
                tier.python_version()
            )));
        }
        // Geneva calls its UDF objects with a RecordBatch of their inputs, whatever their kind.
        let default_mode = if geneva { "record_batch" } else { "row" };
        let mode = options.mode.clone().unwrap_or_else(|| default_mode.into());
        mode_of(&mode)?;
        // (column, struct_field, type, nullable, metadata) per output column. Several outputs
        // are one struct result split into sibling columns (Geneva's `Columns[T]`); a lone
        // output is the result itself, whatever `struct_field` upstream's clients fill in.
        let outputs: Vec<Output> = match existing {
            Some(f) => vec![(
                f.name().clone(),
                String::new(),
                f.data_type().clone(),
                f.is_nullable(),
                HashMap::new(),
            )],
            None => {
                let mut outputs = declared_outputs(&v.outputs)?;
                if let [(_, struct_field, ..)] = outputs.as_mut_slice() {
                    struct_field.clear();
                }
                outputs
            }
        };
        let declared = outputs_type(
            outputs
                .iter()
                .map(|(_, sf, t, nullable, _)| (sf.as_str(), t, *nullable)),
        )
        .ok_or_else(|| {
            ApiError::invalid(
                "a native Python column declares its output: 'outputs' with a column and its \
                 data_type",
            )
        })?;
        let arrow = arrow_schema::Schema::from(schema);
        let mut inputs = Vec::new();
        for c in &v.input_columns {
            let f = arrow.field_with_name(c).map_err(|_| {
                ApiError::column_not_found(format!(
                    "input column '{c}' of a native Python UDF must be a top-level column"
                ))
            })?;
            inputs.push(Field::new(c, f.data_type().clone(), true));
        }
        if inputs.is_empty() {
            return Err(ApiError::invalid(
                "input_columns must name at least one column",
            ));
        }
        if existing.is_none()
            && let Some((column, ..)) = outputs.iter().find(|o| schema.field(&o.0).is_some())
        {
            return Err(ApiError::invalid(format!(
                "column '{column}' already exists"
            )));
        }
        let native = NativeDef {
            source_sha256: match &pickle {
                Some((_, sha)) => sha.clone(),
                None => sha256_hex(source.as_bytes()),
            },
            source,
            pickle: pickle.map(|(p, _)| p),
            mode,
            pip: options.pip,
            env: options.env,
            python_version: tier.python_version().to_string(),
            on_error: options.on_error,
        };
        // Build its environment, load it in a sandbox and call it on no rows: a package pip
        // cannot install, an import that fails or a missing function is a 400 here.
        let (check, check_entry, check_type) = (native.clone(), entry.clone(), declared.clone());
        let check_inputs = inputs.clone();
        tokio::task::spawn_blocking(move || -> ApiResult<()> {
            let dirs = tier.environment(&check.pip)?;
            let spec = check.spec(&check_entry, check_type, dirs)?;
            let mut worker = Worker::start(tier.pool().sandbox(), &spec).map_err(native_error)?;
            let empty = RecordBatch::new_empty(Arc::new(Schema::new(check_inputs)));
            worker.call(&empty).map_err(native_error)?;
            Ok(())
        })
        .await
        .map_err(|e| ApiError::internal(format!("the definition check stopped: {e}")))??;
        let group: Vec<String> = outputs.iter().map(|o| o.0.clone()).collect();
        let mut fields = Vec::new();
        for (column, struct_field, declared, nullable, output_md) in outputs {
            let def = Definition {
                input_columns: v.input_columns.clone(),
                udf_name: entry.clone(),
                udf_version: v
                    .udf_version
                    .clone()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| native.source_sha256.clone()),
                udf_backend: if geneva {
                    super::geneva::BACKEND
                } else {
                    BACKEND
                }
                .to_string(),
                module_sha256: native.source_sha256.clone(),
                manifest: manifest_text.clone(),
                manifest_checksum: checksum.clone(),
                image: v.image.clone(),
                auto_backfill: v.auto_backfill.unwrap_or(false),
                struct_field,
                group: group.clone(),
                python: None,
                model: None,
                native: Some(native.clone()),
            };
            let mut md = super::define::user_metadata(v.field_metadata.as_ref())?;
            md.extend(output_md);
            if geneva {
                md.extend(
                    super::geneva::ClientMetadata {
                        spec_json: &spec_json,
                        udf_name: &def.udf_name,
                        input_columns: &def.input_columns,
                        auto_backfill: def.auto_backfill,
                        manifest: (!def.manifest.is_empty())
                            .then_some((def.manifest.as_str(), def.manifest_checksum.as_str())),
                        python_version: &native.python_version,
                    }
                    .keys(),
                );
            }
            md.insert(
                DEFINITION_KEY.to_string(),
                serde_json::to_string(&def).map_err(|e| ApiError::internal(e.to_string()))?,
            );
            fields.push(Field::new(&column, declared, nullable).with_metadata(md));
        }
        Ok(fields)
    }
}

/// The manifest's options, with its text and checksum (verified): Lancet's own manifest, or
/// for a Geneva column a GenevaManifest under Geneva's checksum rule.
fn options(v: &NewVirtual, geneva: bool) -> ApiResult<(NativeOptions, String, String)> {
    let Some(text) = v.manifest.as_deref().filter(|m| !m.trim().is_empty()) else {
        return Ok((NativeOptions::default(), String::new(), String::new()));
    };
    let checksum = v
        .manifest_checksum
        .as_deref()
        .ok_or_else(|| ApiError::invalid("a 'manifest' needs its 'manifest_checksum'"))?;
    let expected = checksum.trim().to_ascii_lowercase();
    if geneva {
        let m = super::geneva::manifest_options(text, checksum)?;
        let options = NativeOptions {
            pip: m.pip,
            env: m.env,
            ..Default::default()
        };
        return Ok((options, text.to_string(), expected));
    }
    let actual = sha256_hex(text.as_bytes());
    if actual != expected {
        return Err(ApiError::invalid(format!(
            "manifest checksum mismatch: manifest_checksum is {expected} but the manifest \
             hashes to {actual}"
        )));
    }
    let options: NativeOptions = serde_json::from_str(text).map_err(|e| {
        ApiError::invalid(format!(
            "a native Python UDF's manifest holds pip, mode, on_error and env: {e}"
        ))
    })?;
    Ok((options, text.to_string(), expected))
}
