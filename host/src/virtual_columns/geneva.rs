//! Geneva's UDF payloads (`udf_backend: "DockerUDFSpecV1"`), as Geneva 0.17's remote mode sends
//! them, run by the native Python tier: `udf` is base64 of a JSON object holding the
//! cloudpickled Geneva UDF (`udf_pickle`, base64) and its sha256 (`udf_checksum`); `manifest`
//! is a GenevaManifest (pip packages, environment variables) under Geneva's own checksum rule.
//! Lancet runs no containers: the image only names the Python version when it is a
//! `python:X.Y` image.

use std::collections::{BTreeMap, HashMap};

use base64::Engine as _;
use lance::Dataset;
use lancet_udf::sha256_hex;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};

pub const BACKEND: &str = "DockerUDFSpecV1";

/// Whether `udf_backend` is Geneva's.
pub fn is_geneva_backend(backend: Option<&str>) -> bool {
    backend.is_some_and(|b| b.trim() == BACKEND)
}

/// A decoded `DockerUDFSpecV1` payload.
pub struct Payload {
    /// The cloudpickled Geneva UDF.
    pub pickle: Vec<u8>,
    /// `python:3.11-slim` when the image is a Python one, for the version check.
    pub python_image: Option<String>,
}

#[derive(Deserialize)]
struct Spec {
    image: Option<String>,
    tag: Option<String>,
    udf_pickle: String,
    udf_checksum: String,
    #[serde(default)]
    workspace_zips: Option<Vec<String>>,
    #[serde(default)]
    workspace_zip: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    workspace_checksum: Option<String>,
}

/// Decodes `udf` and checks the pickle against its checksum.
pub fn decode_payload(udf: &str) -> ApiResult<Payload> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let json = b64.decode(udf.trim()).map_err(|e| {
        ApiError::invalid(format!(
            "udf of a DockerUDFSpecV1 column is not base64: {e}"
        ))
    })?;
    let spec: Spec = serde_json::from_slice(&json).map_err(|e| {
        ApiError::invalid(format!(
            "udf of a DockerUDFSpecV1 column is not Geneva's spec JSON: {e}"
        ))
    })?;
    if spec.workspace_zips.as_ref().is_some_and(|z| !z.is_empty()) || spec.workspace_zip.is_some() {
        return Err(ApiError::invalid(
            "workspace_zips (a workspace uploaded to object storage) is not supported: put the \
             code in the UDF or its packages in the manifest's pip list",
        ));
    }
    let pickle = b64
        .decode(spec.udf_pickle.trim())
        .map_err(|e| ApiError::invalid(format!("udf_pickle is not base64: {e}")))?;
    let actual = sha256_hex(&pickle);
    if actual != spec.udf_checksum.trim().to_ascii_lowercase() {
        return Err(ApiError::invalid(format!(
            "udf_checksum is {} but udf_pickle hashes to {actual}",
            spec.udf_checksum
        )));
    }
    let image = match (spec.image.as_deref(), spec.tag.as_deref()) {
        (Some(i), Some(t)) if !t.is_empty() => format!("{i}:{t}"),
        (Some(i), _) => i.to_string(),
        _ => String::new(),
    };
    Ok(Payload {
        pickle,
        python_image: image.starts_with("python:").then_some(image),
    })
}

/// Where Geneva's client finds a column's payload (its spec JSON, `udf` decoded), under the
/// table's root: Geneva's own `add_columns` writes it there, and its blocking `backfill()`
/// downloads it from there to check the UDF against the table before it starts a job.
pub fn payload_path(spec_json: &[u8]) -> String {
    format!("_udfs/{}", sha256_hex(spec_json))
}

/// The payload a column's `udf` carries (its base64 decoded), already checked by
/// [`decode_payload`].
pub fn spec_json(udf: &str) -> ApiResult<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(udf.trim())
        .map_err(|e| {
            ApiError::invalid(format!(
                "udf of a DockerUDFSpecV1 column is not base64: {e}"
            ))
        })
}

/// What Geneva's client reads of a Geneva column's field metadata (the keys its own local
/// `add_columns` writes): where the payload is, the UDF's name, backend and inputs.
pub struct ClientMetadata<'a> {
    pub spec_json: &'a [u8],
    pub udf_name: &'a str,
    pub input_columns: &'a [String],
    pub auto_backfill: bool,
    /// The manifest's text and checksum, when the column has one.
    pub manifest: Option<(&'a str, &'a str)>,
    /// The Python that runs the UDF (the native tier's).
    pub python_version: &'a str,
}

impl ClientMetadata<'_> {
    pub fn keys(&self) -> HashMap<String, String> {
        let mut md = HashMap::from([
            ("virtual_column".to_string(), "true".to_string()),
            ("virtual_column.udf_backend".into(), BACKEND.into()),
            ("virtual_column.udf_name".into(), self.udf_name.into()),
            ("virtual_column.udf".into(), payload_path(self.spec_json)),
            (
                "virtual_column.udf_inputs".into(),
                serde_json::to_string(self.input_columns).unwrap_or_default(),
            ),
            ("virtual_column.platform.system".into(), "Linux".into()),
            (
                "virtual_column.platform.arch".into(),
                std::env::consts::ARCH.into(),
            ),
            (
                "virtual_column.platform.python_version".into(),
                self.python_version.into(),
            ),
            (
                "virtual_column.auto_backfill".into(),
                self.auto_backfill.to_string(),
            ),
        ]);
        if let Some((text, checksum)) = self.manifest {
            md.insert("virtual_column.manifest".into(), text.into());
            md.insert("virtual_column.manifest_checksum".into(), checksum.into());
        }
        md
    }
}

/// Writes the payload where [`payload_path`] says, under the table's main root (content
/// addressed: writing it twice writes the same bytes).
pub async fn upload_payload(ds: &Dataset, spec_json: &[u8]) -> ApiResult<()> {
    let root = ds
        .branch_location()
        .find_main()
        .map_err(ApiError::from)?
        .path;
    let path = payload_path(spec_json)
        .split('/')
        .fold(root, |p, part| p.join(part));
    let store = ds.object_store(None).await.map_err(ApiError::from)?;
    store
        .put(&path, spec_json)
        .await
        .map_err(|e| ApiError::internal(format!("cannot store the UDF payload at {path}: {e}")))?;
    Ok(())
}

/// The module the pickle of [`server_side_spec_json`] imports: no such module exists, and its
/// name says why (Geneva prints it in the warning it logs).
const SERVER_SIDE_MODULE: &str = "lancet_computes_this_column_on_the_server";

/// The payload Geneva's client finds for a virtual column Geneva did not define (Wasm,
/// Python, native or model, defined through the REST API or lancedb). Geneva's blocking
/// `backfill()` downloads a column's payload and unpickles its UDF to check it against the
/// table before it asks the server for the job (`validate_backfill_args`). Lancet has no
/// Geneva UDF to give it (the column's code is a Wasm module, Lancet's Python or a model),
/// so the payload is a Geneva `DockerUDFSpecV1` whose pickle is one import of a module that
/// does not exist: Geneva reads that as a UDF whose modules live where it runs ("Cannot
/// unmarshal UDF for validation ... Skipping client-side validation"), and the server computes
/// the column with its own definition. The pickle runs nothing: a GLOBAL opcode that fails to
/// import, then STOP.
pub fn server_side_spec_json() -> Vec<u8> {
    let pickle = format!("c{SERVER_SIDE_MODULE}\nudf\n.").into_bytes();
    serde_json::json!({
        "image": "lancet",
        "tag": null,
        "workspace_checksum": null,
        "udf_pickle": base64::engine::general_purpose::STANDARD.encode(&pickle),
        "udf_checksum": sha256_hex(&pickle),
    })
    .to_string()
    .into_bytes()
}

/// Adds Geneva's client keys to the metadata of a column Lancet defined (it carries
/// `lancet.udf.definition`) and Geneva did not (no `virtual_column.udf`), pointing at
/// [`server_side_spec_json`]'s payload, which the caller stores with [`upload_payload`].
/// Returns whether it added them.
pub fn mark_server_side(md: &mut HashMap<String, String>) -> bool {
    if md.contains_key("virtual_column.udf") {
        return false;
    }
    let Some(def) = md
        .get(super::DEFINITION_KEY)
        .and_then(|t| serde_json::from_str::<super::Definition>(t).ok())
    else {
        return false;
    };
    md.extend([
        ("virtual_column".to_string(), "true".to_string()),
        ("virtual_column.udf_backend".into(), BACKEND.into()),
        ("virtual_column.udf_name".into(), def.udf_name),
        (
            "virtual_column.udf".into(),
            payload_path(&server_side_spec_json()),
        ),
        (
            "virtual_column.udf_inputs".into(),
            serde_json::to_string(&def.input_columns).unwrap_or_default(),
        ),
        (
            "virtual_column.auto_backfill".into(),
            def.auto_backfill.to_string(),
        ),
    ]);
    true
}

/// What a GenevaManifest asks of the environment.
#[derive(Default)]
pub struct ManifestOptions {
    pub pip: Vec<String>,
    pub env: BTreeMap<String, String>,
}

/// Reads a GenevaManifest (`to_json()` text) after checking `checksum` by Geneva's rule (the
/// sha256 of its fields but `name` and `checksum`, as sorted compact JSON) or the spec's (the
/// text's sha256). Fields Lancet cannot honour are refused by name.
pub fn manifest_options(text: &str, checksum: &str) -> ApiResult<ManifestOptions> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| ApiError::invalid(format!("manifest is not GenevaManifest JSON: {e}")))?;
    let Value::Object(map) = &value else {
        return Err(ApiError::invalid("manifest is not a JSON object"));
    };
    let expected = checksum.trim().to_ascii_lowercase();
    let mut hashed = map.clone();
    for k in [
        "name",
        "checksum",
        "created_at",
        "created_by",
        "delete_local_zips",
        "local_zip_output_dir",
    ] {
        hashed.remove(k);
    }
    let mut canonical = String::new();
    python_json(&Value::Object(hashed), &mut canonical);
    if sha256_hex(canonical.as_bytes()) != expected && sha256_hex(text.as_bytes()) != expected {
        return Err(ApiError::invalid(format!(
            "manifest checksum mismatch: manifest_checksum is {expected}, which is neither \
             Geneva's checksum of the manifest nor its text's sha256"
        )));
    }
    let mut out = ManifestOptions::default();
    for (k, v) in map {
        let empty = match v {
            Value::Null => true,
            Value::Array(a) => a
                .iter()
                .all(|x| matches!(x, Value::Array(inner) if inner.is_empty())),
            Value::Object(o) => o.is_empty(),
            Value::String(s) => s.is_empty(),
            _ => false,
        };
        match k.as_str() {
            "pip" => {
                out.pip = serde_json::from_value(v.clone())
                    .map_err(|e| ApiError::invalid(format!("manifest pip: {e}")))?
            }
            "env_vars" => {
                out.env = serde_json::from_value(v.clone())
                    .map_err(|e| ApiError::invalid(format!("manifest env_vars: {e}")))?
            }
            // Bookkeeping, or Ray's own images: nothing to run differently here.
            "name"
            | "version"
            | "checksum"
            | "created_at"
            | "created_by"
            | "skip_site_packages"
            | "delete_local_zips"
            | "local_zip_output_dir"
            | "head_image"
            | "worker_image" => {}
            _ if empty => {}
            other => {
                return Err(ApiError::invalid(format!(
                    "manifest field '{other}' is not supported by Lancet's native tier (it \
                     installs the manifest's pip packages and sets env_vars)"
                )));
            }
        }
    }
    Ok(out)
}

/// `value` as Python's `json.dumps(sort_keys=True, separators=(",", ":"))` writes it (ASCII
/// only, keys sorted).
fn python_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                python_string(k, out);
                out.push(':');
                python_json(&map[*k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                python_json(v, out);
            }
            out.push(']');
        }
        Value::String(s) => python_string(s, out),
        other => out.push_str(&other.to_string()),
    }
}

fn python_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_json_matches_json_dumps() {
        let v: Value =
            serde_json::from_str(r#"{"b": [1, "é\n"], "a": {"z": null, "y": true}}"#).unwrap();
        let mut s = String::new();
        python_json(&v, &mut s);
        // json.dumps(v, sort_keys=True, separators=(",", ":"))
        assert_eq!(s, r#"{"a":{"y":true,"z":null},"b":[1,"\u00e9\n"]}"#);
    }

    #[test]
    fn payloads_are_checked() {
        let b64 = base64::engine::general_purpose::STANDARD;
        let pickle = b"pickle-bytes";
        let spec = |sum: &str| {
            b64.encode(format!(
                r#"{{"image":"python","tag":"3.11-slim","workspace_checksum":null,"udf_pickle":"{}","udf_checksum":"{sum}"}}"#,
                b64.encode(pickle)
            ))
        };
        let ok = decode_payload(&spec(&sha256_hex(pickle))).unwrap();
        assert_eq!(ok.pickle, pickle);
        assert_eq!(ok.python_image.as_deref(), Some("python:3.11-slim"));
        let err = decode_payload(&spec("00")).err().unwrap().to_string();
        assert!(err.contains("hashes to"), "{err}");
        assert!(decode_payload("not base64!").is_err());
    }
}
