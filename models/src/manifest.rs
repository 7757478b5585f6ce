//! What a model is: the manifest a tenant registers, checked field by field before any byte
//! of the model is read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::ModelError;

/// The file of the ONNX graph, by its name in [`Manifest::files`].
pub const MODEL_FILE: &str = "model.onnx";
/// The Hugging Face `tokenizers` file, by its name in [`Manifest::files`].
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// Upper bounds on what a manifest may ask for; a manifest beyond them is refused when it is
/// registered, not when a column first runs it.
pub const MAX_DIMENSION: u32 = 8192;
/// See [`MAX_DIMENSION`].
pub const MAX_TOKENS: u32 = 8192;

/// How token vectors become one vector per text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum Pooling {
    /// The mean of the token vectors the attention mask keeps (sentence-transformers' default).
    Mean,
    /// The first token's vector (`[CLS]`).
    Cls,
    /// The output already holds one vector per text (`[batch, dimension]`).
    None,
}

impl TryFrom<String> for Pooling {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        match s.as_str() {
            "mean" => Ok(Self::Mean),
            "cls" => Ok(Self::Cls),
            "none" => Ok(Self::None),
            _ => Err(format!(
                "pooling must be 'mean', 'cls' or 'none', not '{s}'"
            )),
        }
    }
}

/// The names of the graph's inputs. `token_type_ids` is optional: many models have none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputNames {
    /// Token ids (`int64 [batch, tokens]`).
    #[serde(default = "default_input_ids")]
    pub input_ids: String,
    /// Attention mask (`int64 [batch, tokens]`), 1 for a token, 0 for padding.
    #[serde(default = "default_attention_mask")]
    pub attention_mask: String,
    /// Segment ids (all zero for one text), when the graph has that input.
    #[serde(default)]
    pub token_type_ids: Option<String>,
}

fn default_input_ids() -> String {
    "input_ids".into()
}
fn default_attention_mask() -> String {
    "attention_mask".into()
}

impl Default for InputNames {
    fn default() -> Self {
        Self {
            input_ids: default_input_ids(),
            attention_mask: default_attention_mask(),
            token_type_ids: None,
        }
    }
}

/// A model as registered: its files by name and sha256, and how to run it.
///
/// ```json
/// {"name": "minilm", "files": {"model.onnx": "<sha256>", "tokenizer.json": "<sha256>"},
///  "dimension": 384, "max_tokens": 256, "pooling": "mean", "normalize": true,
///  "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
///             "token_type_ids": "token_type_ids"},
///  "output": "last_hidden_state"}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The name columns and queries use (`[A-Za-z0-9_.-]`, at most 128 bytes).
    pub name: String,
    /// File name to lowercase hex sha256: exactly [`MODEL_FILE`] and [`TOKENIZER_FILE`].
    pub files: BTreeMap<String, String>,
    /// Length of the vectors the model gives.
    pub dimension: u32,
    /// Tokens a text is cut to (the model's position limit or less).
    pub max_tokens: u32,
    /// How token vectors become one vector.
    pub pooling: Pooling,
    /// Whether vectors are scaled to unit length (cosine search then equals dot product).
    #[serde(default)]
    pub normalize: bool,
    /// The graph's input names.
    #[serde(default)]
    pub inputs: InputNames,
    /// The graph output to pool (`float32`).
    pub output: String,
}

impl Manifest {
    /// Parses and checks a manifest; every refusal names the field.
    pub fn from_json(bytes: &[u8]) -> Result<Self, ModelError> {
        let manifest: Self = serde_json::from_slice(bytes)
            .map_err(|e| ModelError::invalid(format!("model manifest: {e}")))?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// Checks what can be checked without the files.
    pub fn validate(&self) -> Result<(), ModelError> {
        check_name(&self.name)?;
        for required in [MODEL_FILE, TOKENIZER_FILE] {
            if !self.files.contains_key(required) {
                return Err(ModelError::invalid(format!(
                    "model manifest: files must name '{required}' with its sha256"
                )));
            }
        }
        for (file, sha) in &self.files {
            if file != MODEL_FILE && file != TOKENIZER_FILE {
                return Err(ModelError::invalid(format!(
                    "model manifest: file '{file}' is not one a model uses \
                     (only '{MODEL_FILE}' and '{TOKENIZER_FILE}')"
                )));
            }
            if !is_sha256(sha) {
                return Err(ModelError::invalid(format!(
                    "model manifest: files.'{file}' must be a lowercase hex sha256, not '{sha}'"
                )));
            }
        }
        if self.dimension == 0 || self.dimension > MAX_DIMENSION {
            return Err(ModelError::invalid(format!(
                "model manifest: dimension must be 1..={MAX_DIMENSION}, not {}",
                self.dimension
            )));
        }
        if self.max_tokens < 2 || self.max_tokens > MAX_TOKENS {
            return Err(ModelError::invalid(format!(
                "model manifest: max_tokens must be 2..={MAX_TOKENS}, not {}",
                self.max_tokens
            )));
        }
        for (field, value) in [
            ("inputs.input_ids", Some(&self.inputs.input_ids)),
            ("inputs.attention_mask", Some(&self.inputs.attention_mask)),
            ("inputs.token_type_ids", self.inputs.token_type_ids.as_ref()),
            ("output", Some(&self.output)),
        ] {
            if let Some(v) = value
                && (v.is_empty() || v.len() > 256)
            {
                return Err(ModelError::invalid(format!(
                    "model manifest: {field} must be a graph name of 1..=256 bytes"
                )));
            }
        }
        Ok(())
    }

    /// The sha256 the manifest gives for `file`.
    pub fn sha256(&self, file: &str) -> Option<&str> {
        self.files.get(file).map(String::as_str)
    }

    /// What identifies this model's behaviour: sha256 over the manifest's canonical JSON
    /// (which holds every file's sha256). A column records it, so a model registered again
    /// under the same name with other files is told apart from the one the column was
    /// computed with.
    pub fn digest(&self) -> String {
        // BTreeMap and struct order make the serialisation canonical.
        let canonical = serde_json::to_vec(self).expect("a manifest always serialises");
        hex::encode(Sha256::digest(canonical))
    }
}

/// Checks `bytes` against the sha256 the manifest names for `file`.
pub fn verify(manifest: &Manifest, file: &str, bytes: &[u8]) -> Result<(), ModelError> {
    let expected = manifest
        .sha256(file)
        .ok_or_else(|| ModelError::invalid(format!("model manifest names no file '{file}'")))?;
    let actual = hex::encode(Sha256::digest(bytes));
    if actual != expected {
        return Err(ModelError::invalid(format!(
            "model '{}': {file} has sha256 {actual}, the manifest says {expected}",
            manifest.name
        )));
    }
    Ok(())
}

/// Whether `s` is 64 lowercase hex digits.
pub fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Model names: what a column or query can name without quoting, and a safe key part.
pub fn check_name(name: &str) -> Result<(), ModelError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(ModelError::invalid(format!(
            "model name '{name}' must be 1..=128 of [A-Za-z0-9_.-], not starting with '.'"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        Manifest::from_json(
            serde_json::json!({
                "name": "minilm",
                "files": {"model.onnx": "a".repeat(64), "tokenizer.json": "b".repeat(64)},
                "dimension": 384, "max_tokens": 256, "pooling": "mean", "normalize": true,
                "output": "last_hidden_state"
            })
            .to_string()
            .as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn defaults_and_digest() {
        let m = manifest();
        assert_eq!(m.inputs, InputNames::default());
        assert_eq!(m.digest(), manifest().digest());
        let mut other = manifest();
        other.files.insert(MODEL_FILE.into(), "c".repeat(64));
        assert_ne!(m.digest(), other.digest());
    }

    #[test]
    fn refusals_name_the_field() {
        let cases = [
            (r#""dimension": 0"#, "dimension"),
            (r#""max_tokens": 1"#, "max_tokens"),
            (r#""pooling": "max""#, "pooling"),
            (r#""name": "../x""#, "model name"),
            (r#""extra": 1"#, "extra"),
        ];
        for (field, word) in cases {
            let base = r#"{"name":"m","files":{"model.onnx":"AA","tokenizer.json":"BB"},
                "dimension":4,"max_tokens":8,"pooling":"cls","output":"o""#
                .replace("AA", &"a".repeat(64))
                .replace("BB", &"b".repeat(64));
            let key = field.split(':').next().unwrap();
            let json = if base.contains(key) {
                let mut v: serde_json::Value = serde_json::from_str(&format!("{base}}}")).unwrap();
                let patch: serde_json::Value =
                    serde_json::from_str(&format!("{{{field}}}")).unwrap();
                for (k, val) in patch.as_object().unwrap() {
                    v[k] = val.clone();
                }
                v.to_string()
            } else {
                format!("{base},{field}}}")
            };
            let e = Manifest::from_json(json.as_bytes()).unwrap_err();
            assert!(e.to_string().contains(word), "{field}: {e}");
        }
        let no_tokenizer = r#"{"name":"m","files":{"model.onnx":"AA"},"dimension":4,
            "max_tokens":8,"pooling":"cls","output":"o"}"#
            .replace("AA", &"a".repeat(64));
        let e = Manifest::from_json(no_tokenizer.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("tokenizer.json"), "{e}");
    }

    #[test]
    fn verify_checks_bytes() {
        let mut m = manifest();
        m.files
            .insert(MODEL_FILE.into(), hex::encode(Sha256::digest(b"graph")));
        verify(&m, MODEL_FILE, b"graph").unwrap();
        let e = verify(&m, MODEL_FILE, b"graph!").unwrap_err();
        assert!(e.to_string().contains("has sha256"), "{e}");
    }
}
