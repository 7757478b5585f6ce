//! Spec 2.4 field paths (dot-separated, backticks around segments holding dots, doubled
//! backticks inside). Parsing is lance's own; this module only maps failures to the spec's
//! two error conditions.

use lance_core::datatypes::Schema;

use crate::error::{ApiError, ApiResult};

/// Parse a path; a malformed one is `InvalidInput` (400).
pub fn parse(path: &str) -> ApiResult<Vec<String>> {
    if path.trim().is_empty() {
        return Err(ApiError::invalid("field path must not be empty"));
    }
    lance_core::datatypes::parse_field_path(path)
        .map_err(|e| ApiError::invalid(format!("invalid field path '{path}': {e}")))
}

/// Check that a well-formed path names a column; otherwise `TableColumnNotFound` (404).
pub fn resolve(schema: &Schema, path: &str) -> ApiResult<()> {
    parse(path)?;
    match schema.resolve(path) {
        Some(fields) if !fields.is_empty() => Ok(()),
        _ => Err(ApiError::column_not_found(format!(
            "no column at field path '{path}'"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_backticked_segments() {
        assert_eq!(parse("a.`b.c`").unwrap(), vec!["a", "b.c"]);
        assert_eq!(parse("`we``ird`").unwrap(), vec!["we`ird"]);
    }

    #[test]
    fn rejects_malformed_paths() {
        assert!(parse("").is_err());
        assert!(parse("a.`b").is_err());
        assert!(parse("a..b").is_err());
    }
}
