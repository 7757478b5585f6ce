//! JSON Arrow types (the upstream namespace models' form) to Arrow types.

use arrow_schema::DataType;
use lance_namespace::models::JsonArrowDataType;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};

/// A JSON Arrow type object (`{"type": "int64"}`, `{"type": "list", "fields": [...]}`), or its
/// bare type name.
pub fn parse_data_type(value: &Value) -> ApiResult<DataType> {
    let value = match value {
        Value::String(name) => json!({ "type": name }),
        other => other.clone(),
    };
    let json_type: JsonArrowDataType = serde_json::from_value(value.clone()).map_err(|e| {
        ApiError::invalid(format!("data_type is not a JSON Arrow type object: {e}"))
    })?;
    match lance_namespace::schema::convert_json_arrow_type(&json_type) {
        Ok(t) => Ok(t),
        // The lancedb SDK names types as lance's JSON schema does ("string", "float").
        Err(e) => serde_json::from_value::<lance::arrow::json::JsonDataType>(value)
            .ok()
            .and_then(|t| DataType::try_from(&t).ok())
            .ok_or_else(|| ApiError::invalid(format!("unsupported data_type: {e}"))),
    }
}
