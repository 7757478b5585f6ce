//! Python virtual columns: the spec's own payload (`udf` = base64 Python source, `udf_name` =
//! the function, `image` = `python:X.Y`), checked in the sandbox at definition time and run
//! by the UDF runtime's Python runner.

use arrow_schema::DataType;
use base64::Engine as _;
use lancet_udf::{LimitsOverride, OnError, PythonSpec, sha256_hex};
use serde::{Deserialize, Serialize};

use super::define::{Checked, UdfRequest};
use super::{VirtualColumns, udf_error};
use crate::error::{ApiError, ApiResult};

pub const BACKEND: &str = "python";

/// What is stored with a Python column (inside its [`Definition`](super::Definition)).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PythonDef {
    /// The source text; its sha256 is checked on every load.
    pub source: String,
    pub source_sha256: String,
    /// The Python version the `image` asked for (`3.11` of `python:3.11-slim`), if one did.
    pub requested_version: Option<String>,
    /// The version of the sandboxed interpreter that checked and runs it.
    pub python_version: String,
    #[serde(default)]
    pub on_error: OnError,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsOverride>,
}

impl PythonDef {
    pub fn source_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.source.as_bytes())
    }

    /// The runtime's spec, after checking the stored source still hashes to its sha256.
    pub fn spec(&self, entry: &str) -> ApiResult<PythonSpec> {
        let actual = sha256_hex(self.source.as_bytes());
        if actual != self.source_sha256 {
            return Err(ApiError::internal(format!(
                "stored Python source of '{entry}' hashes to {actual}, not {}",
                self.source_sha256
            )));
        }
        Ok(PythonSpec {
            files: Vec::new(),
            source: self.source.clone(),
            entry: entry.to_string(),
            env: Vec::new(),
            init: None,
            on_error: self.on_error,
            limits: self.limits.clone(),
        })
    }
}

/// A Python UDF's optional `manifest`: how it runs (no code; the code is `udf`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PythonOptions {
    #[serde(default)]
    on_error: OnError,
    #[serde(default)]
    limits: Option<LimitsOverride>,
}

/// Whether a request defines a Python UDF: `udf_backend` says so, or (none given) the
/// `image` is a Python one or `udf` comes without a Wasm manifest.
pub(super) fn is_python(req: &UdfRequest<'_>) -> ApiResult<bool> {
    match req.backend.map(str::trim).filter(|b| !b.is_empty()) {
        Some(b) if b.eq_ignore_ascii_case(BACKEND) => Ok(true),
        Some(b) if b.eq_ignore_ascii_case(super::define::BACKEND) => Ok(false),
        Some(b) if super::native::is_native_backend(Some(b)) => Err(ApiError::invalid(
            "altering a column to udf_backend 'python-native' is not supported: drop the column \
             and add it again",
        )),
        Some(b) => Err(ApiError::invalid(format!(
            "udf_backend '{b}' is not supported; this server runs 'wasm' (WebAssembly) and \
             'python' (CPython in the same sandbox) UDFs, 'python-native' (CPython in an OS \
             sandbox, when enabled) and 'model' (embedding columns)"
        ))),
        None => Ok(req.image.is_some_and(|i| i.trim().starts_with("python"))
            || (req.manifest.is_none_or(|m| m.trim().is_empty())
                && req.udf.is_some_and(|u| !u.is_empty()))),
    }
}

/// The Python version an `image` asks for: `python:3.11-slim` is `3.11`. Lancet runs no
/// containers, so any other image is refused by name.
pub(super) fn requested_version(image: Option<&str>) -> ApiResult<Option<String>> {
    let Some(image) = image.map(str::trim).filter(|i| !i.is_empty()) else {
        return Ok(None);
    };
    let bad = || {
        ApiError::invalid(format!(
            "image '{image}' is not supported: Lancet runs no containers; a Python UDF may name \
             'python:3.X' (optionally '-variant'), read as the Python version it asks for"
        ))
    };
    let tag = image.strip_prefix("python:").ok_or_else(bad)?;
    let version = tag.split('-').next().unwrap_or_default();
    let parts: Vec<&str> = version.split('.').collect();
    let numeric = parts
        .iter()
        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if !numeric || parts.len() < 2 || parts.len() > 3 || parts[0] != "3" {
        return Err(bad());
    }
    Ok(Some(format!("{}.{}", parts[0], parts[1])))
}

impl VirtualColumns {
    pub(super) fn check_python(
        &self,
        schema: &lance_core::datatypes::Schema,
        req: &UdfRequest<'_>,
        outputs: Option<DataType>,
    ) -> ApiResult<Checked> {
        self.runtime.python_status().map_err(udf_error)?;
        let requested = requested_version(req.image)?;
        let encoded = req
            .udf
            .filter(|u| !u.is_empty())
            .ok_or_else(|| ApiError::invalid("a Python UDF needs its source in 'udf' (base64)"))?;
        let entry = req.udf_name.filter(|n| !n.is_empty()).ok_or_else(|| {
            ApiError::invalid("a Python UDF needs 'udf_name': the function to call")
        })?;
        let source = lancet_udf::decode_python_source(encoded).map_err(udf_error)?;
        let (options, manifest_text, checksum) = match req.manifest.filter(|m| !m.trim().is_empty())
        {
            None => (PythonOptions::default(), String::new(), String::new()),
            Some(text) => {
                let checksum = req.checksum.ok_or_else(|| {
                    ApiError::invalid("a 'manifest' needs its 'manifest_checksum'")
                })?;
                let expected = checksum.trim().to_ascii_lowercase();
                let actual = sha256_hex(text.as_bytes());
                if actual != expected {
                    return Err(ApiError::invalid(format!(
                        "manifest checksum mismatch: manifest_checksum is {expected} but the \
                         manifest hashes to {actual}"
                    )));
                }
                let options: PythonOptions = serde_json::from_str(text).map_err(|e| {
                    ApiError::invalid(format!(
                        "a Python UDF's manifest holds only on_error and limits: {e}"
                    ))
                })?;
                (options, text.to_string(), expected)
            }
        };
        let spec = PythonSpec {
            files: Vec::new(),
            source,
            entry: entry.to_string(),
            env: Vec::new(),
            init: None,
            on_error: options.on_error,
            limits: options.limits.clone(),
        };
        let prepared = self.runtime.prepare_python(&spec).map_err(udf_error)?;
        let signature = prepared.signature();
        signature
            .check_arity(req.input_columns.len())
            .map_err(udf_error)?;
        for c in req.input_columns {
            // Python receives whole top-level columns (nested ones as lists and dicts).
            if schema.field(c).is_none() {
                return Err(ApiError::invalid(format!(
                    "input column '{c}' of a Python UDF must be a top-level column"
                )));
            }
        }
        let output_type = match outputs.or_else(|| signature.return_type()) {
            Some(t) => t,
            None => {
                return Err(ApiError::invalid(format!(
                    "the type of '{entry}'s result is unknown: declare 'outputs' with a \
                     data_type, or annotate the function's return type (int, float, str, \
                     bytes, bool or list[...] of them); it is annotated {:?}",
                    signature.returns
                )));
            }
        };
        Ok(Checked {
            udf_name: entry.to_string(),
            code_sha256: prepared.source_sha256().to_string(),
            manifest_text,
            checksum,
            backend: BACKEND,
            output_type,
            python: Some(PythonDef {
                source: spec.source,
                source_sha256: prepared.source_sha256().to_string(),
                requested_version: requested,
                python_version: signature.python_version().to_string(),
                on_error: options.on_error,
                limits: options.limits,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_name_a_python_version_or_are_refused() {
        assert_eq!(
            requested_version(Some("python:3.11-slim")).unwrap(),
            Some("3.11".into())
        );
        assert_eq!(
            requested_version(Some("python:3.12.4")).unwrap(),
            Some("3.12".into())
        );
        assert_eq!(requested_version(None).unwrap(), None);
        for bad in [
            "ubuntu:22.04",
            "python:latest",
            "python:2.7",
            "python",
            "python:3",
        ] {
            let err = requested_version(Some(bad)).unwrap_err();
            assert!(err.to_string().contains(bad), "{bad}: {err}");
        }
    }
}
