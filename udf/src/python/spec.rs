//! What defines a Python UDF (source, entry point, environment, error policy, limits) and the
//! signature the sandbox reads from it.

use arrow_schema::{DataType, Field};
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::UdfError;
use crate::limits::LimitsOverride;
use crate::manifest::OnError;

/// Larger sources are refused before anything parses them.
pub const MAX_SOURCE_BYTES: usize = 1 << 20;
/// Files shipped with a function, at most, and their bytes in all.
pub const MAX_FILES: usize = 4_096;
pub const MAX_FILES_BYTES: usize = 32 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonSpec {
    /// The module's source text.
    pub source: String,
    /// The function the source defines and each row is passed to.
    pub entry: String,
    /// The function's `os.environ` (nothing of the host's environment is visible).
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// A class entry's initialization (a JSON object of keyword arguments): the class is
    /// instantiated with it once per interpreter and each row calls the instance. `None` for
    /// a plain function (or a class only being checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<String>,
    /// Modules, packages and their data files shipped with the function, by path from the
    /// import root (`pkg/__init__.py`, `mod.py`, `pkg/data.bin`): what `import` finds.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "files_b64")]
    pub files: Vec<(String, Vec<u8>)>,
    #[serde(default)]
    pub on_error: OnError,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsOverride>,
}

impl PythonSpec {
    pub fn validate(&self) -> Result<(), UdfError> {
        let bad = |m: String| Err(UdfError::PythonSource(m));
        if self.source.len() > MAX_SOURCE_BYTES {
            return bad(format!(
                "the source is {} bytes; the limit is {MAX_SOURCE_BYTES}",
                self.source.len()
            ));
        }
        if self.source.contains('\0') {
            return bad("the source contains a NUL byte".into());
        }
        let ident = |s: &str| {
            !s.is_empty()
                && s.len() <= 128
                && !s.starts_with(|c: char| c.is_ascii_digit())
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if !ident(&self.entry) {
            return bad(format!(
                "udf_name {:?} is not a Python function name",
                self.entry
            ));
        }
        if self.init.as_ref().is_some_and(|i| i.len() > 64 << 10) {
            return bad("the initialization is over 64 KiB".into());
        }
        if self.files.len() > MAX_FILES {
            return bad(format!(
                "{} files are shipped with the function; the limit is {MAX_FILES}",
                self.files.len()
            ));
        }
        let bytes: usize = self.files.iter().map(|(p, d)| p.len() + d.len()).sum();
        if bytes > MAX_FILES_BYTES {
            return bad(format!(
                "the files shipped with the function hold {bytes} bytes; the limit is \
                 {MAX_FILES_BYTES}"
            ));
        }
        for (path, _) in &self.files {
            check_file_path(path).map_err(UdfError::PythonSource)?;
        }
        for (k, v) in &self.env {
            if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
                return bad(format!(
                    "environment variable {k:?} is not a valid name/value"
                ));
            }
        }
        Ok(())
    }
}

/// A shipped file's path: relative, `/`-separated, no empty, `.` or `..` segment, no NUL or
/// backslash; what the runner's importer looks names up by.
pub fn check_file_path(path: &str) -> Result<(), String> {
    let ok = !path.is_empty()
        && path.len() <= 512
        && !path.contains(['\\', '\0'])
        && path
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..");
    if ok {
        Ok(())
    } else {
        Err(format!("{path:?} is not a relative file path"))
    }
}

/// Files as `[[path, base64], ...]` in JSON: compact, and what the memo key hashes.
pub mod files_b64 {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(files: &[(String, Vec<u8>)], s: S) -> Result<S::Ok, S::Error> {
        let b64 = base64::engine::general_purpose::STANDARD;
        files
            .iter()
            .map(|(p, d)| (p.as_str(), b64.encode(d)))
            .collect::<Vec<_>>()
            .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<(String, Vec<u8>)>, D::Error> {
        let b64 = base64::engine::general_purpose::STANDARD;
        Vec::<(String, String)>::deserialize(d)?
            .into_iter()
            .map(|(p, t)| {
                b64.decode(t)
                    .map(|d| (p, d))
                    .map_err(serde::de::Error::custom)
            })
            .collect()
    }
}

/// Base64 source text (as the spec's `udf` field carries it) to a string: refused when it is
/// not base64, too large, or not UTF-8.
pub fn decode_source(base64_text: &str) -> Result<String, UdfError> {
    let cleaned: String = base64_text.split_whitespace().collect();
    if cleaned.len() / 4 * 3 > MAX_SOURCE_BYTES + 3 {
        return Err(UdfError::PythonSource(format!(
            "the source is over the limit of {MAX_SOURCE_BYTES} bytes"
        )));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(cleaned.as_bytes())
        .map_err(|e| UdfError::BadModuleEncoding(e.to_string()))?;
    String::from_utf8(bytes).map_err(|e| {
        UdfError::PythonSource(format!(
            "the source is not UTF-8 (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// One positional parameter of the function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Param {
    pub name: String,
    /// The annotation as written (`int`, `list[str]`), if any.
    pub annotation: Option<String>,
    pub has_default: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    pub params: Vec<Param>,
    /// The return annotation as written, if any.
    pub returns: Option<String>,
    /// `sys.version` of the sandboxed interpreter.
    pub python: String,
}

impl Signature {
    /// `3.14.0`: the version part of `sys.version`.
    pub fn python_version(&self) -> &str {
        self.python.split_whitespace().next().unwrap_or("")
    }

    /// The Arrow type a return annotation names, for the types it can name unambiguously.
    pub fn return_type(&self) -> Option<DataType> {
        annotation_type(self.returns.as_deref()?)
    }

    /// Whether `inputs` columns fill the function's parameters: at least every one without a
    /// default, and no more than there are.
    pub fn check_arity(&self, inputs: usize) -> Result<(), UdfError> {
        let required = self.params.iter().filter(|p| !p.has_default).count();
        if inputs < required || inputs > self.params.len() {
            let names: Vec<&str> = self.params.iter().map(|p| p.name.as_str()).collect();
            return Err(UdfError::PythonSource(format!(
                "the function takes ({}) but {inputs} input column(s) are given",
                names.join(", ")
            )));
        }
        Ok(())
    }
}

fn annotation_type(text: &str) -> Option<DataType> {
    let text: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let text = text
        .strip_prefix("Optional[")
        .and_then(|t| t.strip_suffix(']'))
        .or_else(|| text.strip_suffix("|None"))
        .or_else(|| text.strip_prefix("None|"))
        .unwrap_or(&text);
    let scalar = |t: &str| match t {
        "int" => Some(DataType::Int64),
        "float" => Some(DataType::Float64),
        "str" => Some(DataType::Utf8),
        "bytes" => Some(DataType::Binary),
        "bool" => Some(DataType::Boolean),
        _ => None,
    };
    if let Some(t) = scalar(text) {
        return Some(t);
    }
    let inner = text
        .strip_prefix("list[")
        .or_else(|| text.strip_prefix("List["))?
        .strip_suffix(']')?;
    scalar(inner).map(|t| DataType::List(Field::new("item", t, true).into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn return_annotations_name_arrow_types() {
        let sig = |r: &str| Signature {
            params: vec![],
            returns: Some(r.into()),
            python: "3.14.0 (main)".into(),
        };
        assert_eq!(sig("int").return_type(), Some(DataType::Int64));
        assert_eq!(sig("Optional[str]").return_type(), Some(DataType::Utf8));
        assert_eq!(sig("float | None").return_type(), Some(DataType::Float64));
        assert_eq!(
            sig("list[str]").return_type(),
            Some(DataType::List(
                Field::new("item", DataType::Utf8, true).into()
            ))
        );
        assert_eq!(sig("dict").return_type(), None);
        assert_eq!(sig("int").python_version(), "3.14.0");
    }

    #[test]
    fn sources_are_checked_before_the_sandbox_sees_them() {
        assert!(decode_source("ZGVmIGYoeCk6IHJldHVybiB4").is_ok());
        assert!(matches!(
            decode_source("/w=="),
            Err(UdfError::PythonSource(m)) if m.contains("not UTF-8")
        ));
        assert!(decode_source("not base64!").is_err());
        let spec = PythonSpec {
            files: Vec::new(),
            source: "def f(x): return x".into(),
            entry: "1f".into(),
            env: vec![],
            init: None,
            on_error: OnError::Fail,
            limits: None,
        };
        assert!(spec.validate().is_err());
    }
}
