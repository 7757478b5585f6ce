//! A registered Function's signature as the lancedb client writes it: ordered inputs, a scalar
//! or named-struct output and a class Function's initialization fields, each typed in the
//! client's compact Arrow grammar (`int64`, `utf8`, `list<float32>`, `fixed_size_list<float32,
//! 8>`) or, for nested types, its exact JSON (`{"type": "struct", "fields": [...]}`).

use std::sync::Arc;

use arrow_schema::{DataType, Field};
use serde::{Deserialize, Serialize};

use crate::error::{ApiError, ApiResult};
use crate::json_types::parse_data_type;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Parameter {
    pub name: String,
    pub arrow_type: String,
    pub nullable: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Output {
    /// `scalar` or `named_struct`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrow_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nullable: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<Parameter>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FunctionSignature {
    pub inputs: Vec<Parameter>,
    pub output: Output,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub initialization: Vec<Parameter>,
}

/// The Arrow type a signature names.
pub fn arrow_type(text: &str) -> ApiResult<DataType> {
    let bad = |why: &str| ApiError::invalid(format!("arrow_type {text:?}: {why}"));
    let t = text.trim();
    if t.starts_with('{') {
        let json: serde_json::Value =
            serde_json::from_str(t).map_err(|e| bad(&format!("not JSON: {e}")))?;
        return parse_data_type(&json).map_err(|e| bad(&e.message));
    }
    if let Some(inner) = t.strip_suffix('>') {
        let item = |s: &str| arrow_type(s).map(|d| Arc::new(Field::new("item", d, false)));
        if let Some(item_type) = inner.strip_prefix("list<") {
            return Ok(DataType::List(item(item_type)?));
        }
        if let Some(item_type) = inner.strip_prefix("large_list<") {
            return Ok(DataType::LargeList(item(item_type)?));
        }
        if let Some(rest) = inner.strip_prefix("fixed_size_list<") {
            let (item_type, size) = rest
                .rsplit_once(',')
                .ok_or_else(|| bad("fixed_size_list needs <item, size>"))?;
            let size: i32 = size
                .trim()
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| bad("the size must be a positive integer"))?;
            return Ok(DataType::FixedSizeList(item(item_type)?, size));
        }
        return Err(bad("unknown type"));
    }
    Ok(match t {
        "bool" => DataType::Boolean,
        "int8" => DataType::Int8,
        "int16" => DataType::Int16,
        "int32" => DataType::Int32,
        "int64" => DataType::Int64,
        "uint8" => DataType::UInt8,
        "uint16" => DataType::UInt16,
        "uint32" => DataType::UInt32,
        "uint64" => DataType::UInt64,
        "float16" => DataType::Float16,
        "float32" => DataType::Float32,
        "float64" => DataType::Float64,
        "utf8" => DataType::Utf8,
        "large_utf8" => DataType::LargeUtf8,
        "binary" => DataType::Binary,
        "large_binary" => DataType::LargeBinary,
        "date32" => DataType::Date32,
        "date64" => DataType::Date64,
        _ => return Err(bad("unknown type")),
    })
}

fn field(p: &Parameter) -> ApiResult<Field> {
    Ok(Field::new(&p.name, arrow_type(&p.arrow_type)?, p.nullable))
}

impl FunctionSignature {
    /// Every type known, names unique, the output's kind one this server runs.
    pub fn check(&self) -> ApiResult<()> {
        let mut seen = std::collections::HashSet::new();
        for p in self.inputs.iter().chain(&self.initialization) {
            if p.name.is_empty() || !seen.insert(p.name.as_str()) {
                return Err(ApiError::invalid(format!(
                    "signature: parameter names must be unique and non-empty ({:?})",
                    p.name
                )));
            }
            field(p)?;
        }
        self.result_type().map(|_| ())
    }

    /// The Arrow type of one call's result: the scalar's, or a struct of the named fields.
    pub fn result_type(&self) -> ApiResult<DataType> {
        match self.output.kind.as_str() {
            "scalar" => arrow_type(self.output.arrow_type.as_deref().ok_or_else(|| {
                ApiError::invalid("signature.output: a scalar output needs arrow_type")
            })?),
            "named_struct" => {
                if self.output.fields.is_empty() {
                    return Err(ApiError::invalid(
                        "signature.output: a named_struct output needs fields",
                    ));
                }
                let fields = self
                    .output
                    .fields
                    .iter()
                    .map(field)
                    .collect::<ApiResult<Vec<_>>>()?;
                Ok(DataType::Struct(fields.into()))
            }
            other => Err(ApiError::invalid(format!(
                "signature.output.kind '{other}' is not supported (scalar, named_struct)"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clients_type_grammar_parses() {
        assert_eq!(arrow_type("int64").unwrap(), DataType::Int64);
        assert_eq!(
            arrow_type("fixed_size_list<float32, 8>").unwrap(),
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, false)), 8)
        );
        assert!(matches!(
            arrow_type("list<list<utf8>>").unwrap(),
            DataType::List(_)
        ));
        let nested =
            r#"{"type":"struct","fields":[{"name":"a","type":{"type":"int64"},"nullable":true}]}"#;
        assert!(matches!(arrow_type(nested).unwrap(), DataType::Struct(_)));
        assert!(arrow_type("decimal").is_err());
        assert!(arrow_type("fixed_size_list<int8, 0>").is_err());
    }
}
