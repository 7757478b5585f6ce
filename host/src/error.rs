//! One error type for the whole server. Every failure becomes an [`ApiError`]: an upstream
//! Lance Namespace error code (what the namespace clients classify by), an HTTP status, and a
//! message. Rendering into the spec's JSON shape happens in `http::errors`, which also knows the
//! request path for `instance`.

use axum::http::StatusCode;
use lance_namespace::{ErrorCode, NamespaceError};

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub message: String,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({:?}): {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

/// The status each upstream error code travels with: the upstream REST adapter's table, except
/// where the lancedb SDKs (Python and TypeScript, whose remote clients read only the status and
/// the body's text) would misread it:
/// - `TableColumnNotFound` is a 400 (spec 2.4: an unresolvable field path is invalid input): the
///   SDKs turn any 404 on a table route into "table not found";
/// - `Unsupported` is a client mistake here: 400 rather than 406.
///
/// The namespace clients classify by the body's numeric `code`, which is unchanged.
pub fn status_for(code: ErrorCode) -> StatusCode {
    use ErrorCode::*;
    match code {
        NamespaceNotFound | TableNotFound | TableIndexNotFound | TableTagNotFound
        | TransactionNotFound | TableVersionNotFound | TableBranchNotFound => StatusCode::NOT_FOUND,
        TableColumnNotFound => StatusCode::BAD_REQUEST,
        NamespaceAlreadyExists
        | TableAlreadyExists
        | TableIndexAlreadyExists
        | TableTagAlreadyExists
        | TableBranchAlreadyExists
        | ConcurrentModification
        | NamespaceNotEmpty
        | InvalidTableState => StatusCode::CONFLICT,
        InvalidInput | TableSchemaValidationError | Unsupported => StatusCode::BAD_REQUEST,
        PermissionDenied => StatusCode::FORBIDDEN,
        Unauthenticated => StatusCode::UNAUTHORIZED,
        ServiceUnavailable | Throttling => StatusCode::SERVICE_UNAVAILABLE,
        Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status: status_for(code),
            code,
            message: message.into(),
        }
    }
    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidInput, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
    pub fn table_not_found(table: &str) -> Self {
        Self::new(
            ErrorCode::TableNotFound,
            format!("table not found: {table}"),
        )
    }
    pub fn column_not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::TableColumnNotFound, message)
    }
    /// 503: a shared resource (another node's lock) is busy; the client may retry.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ServiceUnavailable, message)
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ConcurrentModification, message)
    }
    /// Re-label a lance "not found" (which lance reports without saying of what) as `code`.
    pub fn or_not_found(self, code: ErrorCode, message: impl Into<String>) -> Self {
        if self.status == StatusCode::NOT_FOUND {
            Self::new(code, message)
        } else {
            self
        }
    }
}

/// DataFusion reports user mistakes in SQL (unknown column, bad syntax) through the same
/// `Execution`/`IO` variants lance uses for real failures; these are the message shapes that
/// mean "the caller's expression is wrong".
fn classify_message(msg: &str) -> Option<ErrorCode> {
    const MISSING: &[&str] = &[
        "No field named",
        "Column not found",
        "not found in schema",
        "does not exist in schema",
        "FieldNotFound",
        "Field not found",
        "is not a field of",
    ];
    const BAD: &[&str] = &[
        "SQL error",
        "ParserError",
        "Error during planning",
        "Schema error",
        "Invalid user input",
        "sql parser error",
        "Cannot cast",
        "Cast error",
        "type_coercion",
        "Arrow error: Invalid argument",
        "Invalid argument",
        "Unsupported SQL",
        "invalid filter",
        "Invalid filter",
        "Expected",
        // Evaluating the caller's expression over the rows failed (its arithmetic, not ours).
        "Divide by zero",
        "Arithmetic overflow",
        "Overflow happened on",
        "string size overflow",
        // Types that do not fit the caller's expression (DataFusion reports some of these as
        // internal errors, but they come from the expression, not from the server).
        "Failed to coerce types",
        "data type mismatch",
        "Can not run arithmetic negative on scalar value",
        "Cannot access field at argument",
        "coercion failed",
        "requires an even number of arguments",
        "named_struct requires",
        "got invalid index",
        "Field name must be a non-empty string",
        // A function given an argument type it has no signature for ("Unsupported data type
        // Boolean for function to_timestamp", "to_timestamp function unsupported data type at
        // index 1"): not the bare phrase, which lance also uses for files it cannot read.
        " for function ",
        "function unsupported data type",
        "does not support type",
    ];
    if MISSING.iter().any(|m| msg.contains(m)) {
        return Some(ErrorCode::TableColumnNotFound);
    }
    if BAD.iter().any(|m| msg.contains(m)) {
        return Some(ErrorCode::InvalidInput);
    }
    None
}

impl From<lance_core::Error> for ApiError {
    fn from(err: lance_core::Error) -> Self {
        ApiError::from_lance(&err)
    }
}

impl ApiError {
    pub fn from_lance(err: &lance_core::Error) -> Self {
        use lance_core::Error as E;
        let msg = err.to_string();
        let code = match err {
            E::Namespace { source, .. } => {
                if let Some(ns) = source.downcast_ref::<NamespaceError>() {
                    return ApiError::new(ns.code(), ns.message().to_string()).name_too_long();
                }
                ErrorCode::Internal
            }
            E::Shared { source } => return ApiError::from_lance(source),
            E::DatasetNotFound { .. } => ErrorCode::TableNotFound,
            E::DatasetAlreadyExists { .. } => ErrorCode::TableAlreadyExists,
            E::SchemaMismatch { .. } => ErrorCode::TableSchemaValidationError,
            E::FieldNotFound { .. } => ErrorCode::TableColumnNotFound,
            E::InvalidInput { .. } | E::InvalidRef { .. } | E::Schema { .. } | E::Arrow { .. } => {
                classify_message(&msg).unwrap_or(ErrorCode::InvalidInput)
            }
            E::NotSupported { .. } | E::Unprocessable { .. } => ErrorCode::InvalidInput,
            E::CommitConflict { .. }
            | E::RetryableCommitConflict { .. }
            | E::IncompatibleTransaction { .. }
            | E::TooMuchWriteContention { .. }
            | E::VersionConflict { .. } => ErrorCode::ConcurrentModification,
            E::RefConflict { .. } => ErrorCode::ConcurrentModification,
            E::RefNotFound { .. } => ErrorCode::TableTagNotFound,
            E::VersionNotFound { .. } => ErrorCode::TableVersionNotFound,
            E::IndexNotFound { .. } => ErrorCode::TableIndexNotFound,
            E::Timeout { .. } | E::Backpressure { .. } => ErrorCode::ServiceUnavailable,
            E::NotFound { .. } => ErrorCode::TableNotFound,
            _ => classify_message(&msg).unwrap_or(ErrorCode::Internal),
        };
        // A server failure keeps lance's note of where it was raised, for whoever reads the
        // logs; a caller's mistake is answered without the server's source paths.
        let msg = if code == ErrorCode::Internal {
            msg
        } else {
            readable(&without_source_locations(&msg))
        };
        ApiError::new(code, msg).name_too_long()
    }

    /// The storage refusing a file name as too long (ENAMETOOLONG: a table's directory is named
    /// after its id) means the caller's name is too long, not that the server failed.
    fn name_too_long(self) -> Self {
        if self.code == ErrorCode::Internal && self.message.contains("File name too long") {
            return ApiError::invalid(format!(
                "a name in this request is too long for the storage: {}",
                self.message
            ));
        }
        self
    }
}

/// `msg` without the `, /path/to/file.rs:LINE:COL` lance appends to its errors (one per
/// wrapped error).
fn without_source_locations(msg: &str) -> String {
    static LOCATION: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r",\s*[^\s,]+\.rs:\d+:\d+").expect("a constant pattern")
    });
    LOCATION.replace_all(msg, "").into_owned()
}

/// A caller's mistake as lance words it, without what only lance's developers read: a prefix
/// said twice ("Invalid user input: Invalid user input: ...", one per wrapping), and debug
/// dumps of a whole schema (`Schema { fields: [...] }`), which can run to pages.
fn readable(msg: &str) -> String {
    const PREFIX: &str = "Invalid user input: ";
    let mut out = msg.to_string();
    while out.contains(&format!("{PREFIX}{PREFIX}")) {
        out = out.replace(&format!("{PREFIX}{PREFIX}"), PREFIX);
    }
    while let Some(start) = out.find("Schema { ") {
        let mut depth = 0usize;
        let mut end = None;
        for (i, c) in out[start..].char_indices() {
            match c {
                '{' | '[' | '(' => depth += 1,
                '}' | ']' | ')' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = Some(start + i + c.len_utf8());
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(end) = end else { break };
        out.replace_range(start..end, "the table's schema");
    }
    out
}

impl From<arrow_schema::ArrowError> for ApiError {
    fn from(err: arrow_schema::ArrowError) -> Self {
        ApiError::invalid(format!("invalid Arrow data: {err}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_mistake_is_answered_without_lances_source_paths() {
        let err = lance_core::Error::invalid_input(
            "query dim(128) doesn't match the column vec vector dim(32)",
        );
        assert!(err.to_string().contains(".rs:"), "{err}");
        let api = ApiError::from_lance(&err);
        assert_eq!(api.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            api.message,
            "Invalid user input: query dim(128) doesn't match the column vec vector dim(32)"
        );
        let wrapped = "Invalid user input: bad, /a/b.rs:1:2, then: worse, src/c.rs:10:20";
        assert_eq!(
            without_source_locations(wrapped),
            "Invalid user input: bad, then: worse"
        );
        assert_eq!(
            without_source_locations("id = 1, name = 'x.rs'"),
            "id = 1, name = 'x.rs'"
        );
        assert_eq!(
            readable("Invalid user input: Invalid user input: bad SQL"),
            "Invalid user input: bad SQL"
        );
        assert_eq!(
            readable(
                "Column nosuch does not exist in Schema { fields: [Field { name: \"id\", \
                 children: [] }], metadata: {} } (update)"
            ),
            "Column nosuch does not exist in the table's schema (update)"
        );
        // A server failure keeps it, for the logs.
        let internal = lance_core::Error::internal("the disk caught fire");
        assert!(ApiError::from_lance(&internal).message.contains(".rs:"));
    }
}
