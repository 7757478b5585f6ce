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

/// Property tests: any text, and text made of the characters paths are built from, parses
/// or is refused as a 400; resolving against a nested schema adds only the 404. Cases:
/// proptest's default (256) or `PROPTEST_CASES`.
#[cfg(test)]
mod props {
    use std::sync::Arc;

    use arrow_schema::{DataType, Field, Fields, Schema as ArrowSchema};
    use proptest::prelude::*;

    use super::*;

    fn schema() -> Schema {
        let inner = Fields::from(vec![
            Field::new("b.c", DataType::Int32, true),
            Field::new("d`e", DataType::Utf8, true),
        ]);
        let arrow = ArrowSchema::new(vec![
            Field::new("a", DataType::Struct(inner), true),
            Field::new("x", DataType::Int64, true),
            Field::new(
                "l",
                DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
                true,
            ),
        ]);
        Schema::try_from(&arrow).unwrap()
    }

    /// Paths from the characters that matter to the grammar, so most cases reach past the
    /// first character.
    fn pathlike() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop::sample::select(vec![
                "a", "b", "c", "x", "l", ".", "`", "``", " ", "d`e", "é", "\\", "\0",
            ]),
            0..12,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        #[test]
        fn parse_never_panics_and_refuses_with_400(path in prop_oneof![any::<String>(), pathlike()]) {
            if let Err(e) = parse(&path) {
                prop_assert_eq!(e.status.as_u16(), 400, "{}", e.message);
            }
        }

        #[test]
        fn resolve_refuses_with_400_or_404(path in prop_oneof![any::<String>(), pathlike()]) {
            let schema = schema();
            match resolve(&schema, &path) {
                Ok(()) => prop_assert!(parse(&path).is_ok()),
                Err(e) => prop_assert!(matches!(e.status.as_u16(), 400 | 404), "{}: {}", e.status, e.message),
            }
        }
    }
}
