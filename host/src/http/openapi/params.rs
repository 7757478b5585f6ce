//! The query parameters the handlers read, by name.
use super::{Kind, Param};

/// Headers every `/v1` route honours (the auth layer reads them).
pub const DATABASE: Param = Param {
    header: true,
    ..Param::new(
        "x-service-database",
        Kind::Text,
        "Database: every id of the request is relative to this top-level namespace.",
    )
};
pub const LANCEDB_DATABASE: Param = Param {
    header: true,
    ..Param::new(
        "x-lancedb-database",
        Kind::Text,
        "As x-service-database (the lancedb SDK's name); also selects the lancedb SDK's \
         answer shapes where clients disagree.",
    )
};
pub const RANGE: Param = Param {
    header: true,
    ..Param::new(
        "range",
        Kind::Text,
        "One byte range (`bytes=first-last`, `bytes=first-`, `bytes=-suffix`): the answer is \
         206 with `Content-Range`; none answers the whole value.",
    )
};
pub const DELIMITER: Param = Param::new(
    "delimiter",
    Kind::Text,
    "Delimiter between the parts of `{id}` (default `$`).",
);
pub const BRANCH: Param = Param::new(
    "branch",
    Kind::Text,
    "Branch to act on (default: main). A JSON body's `branch` wins.",
);
pub const VERSION: Param = Param::new(
    "version",
    Kind::Count,
    "Table version to read (default: the latest). A JSON body's `version` wins.",
);
pub const LIMIT: Param = Param::new(
    "limit",
    Kind::Count,
    "Most entries in one page. A JSON body's `limit` wins.",
);
pub const PAGE_TOKEN: Param = Param::new(
    "page_token",
    Kind::Text,
    "The previous page's `page_token`. A JSON body's `page_token` wins.",
);
pub const INCLUDE_DECLARED: Param = Param::new(
    "include_declared",
    Kind::Flag,
    "List declared-only tables too.",
);
pub const INCLUDE_DEFINITION: Param = Param::new(
    "include_definition",
    Kind::Flag,
    "Each Function version's definition too (default true).",
);
pub const DESCENDING: Param = Param::new("descending", Kind::Flag, "Newest version first.");
pub const CREATE_MODE: Param = Param::new(
    "mode",
    Kind::Choice(&["create", "overwrite", "exist_ok"]),
    "What to do when the table exists (default create: 409).",
);
pub const NAMESPACE_MODE: Param = Param::new(
    "mode",
    Kind::Choice(&["create", "exist_ok", "overwrite"]),
    "What to do when the namespace exists: 409 (default), keep it, or drop it with its \
     contents and create it empty.",
);
pub const STORAGE_OPTIONS: Param = Param::new(
    "storage_options",
    Kind::JsonObject,
    "Per-table storage options: refused unless empty (tables use the server's store settings).",
);
pub const PROPERTIES: Param = Param::new(
    "properties",
    Kind::JsonObject,
    "Table properties, a JSON object of strings.",
);
pub const INSERT_MODE: Param = Param::new(
    "mode",
    Kind::Choice(&["append", "overwrite"]),
    "Append rows (default) or replace them all.",
);
pub const ON: Param = Param {
    required: true,
    ..Param::new("on", Kind::Repeated, "Key columns to match rows on.")
};
pub const WHEN_MATCHED_UPDATE_ALL: Param = Param::new(
    "when_matched_update_all",
    Kind::Flag,
    "Update matched rows (default false).",
);
pub const WHEN_MATCHED_UPDATE_ALL_FILT: Param = Param::new(
    "when_matched_update_all_filt",
    Kind::Text,
    "Only update matched rows for which this SQL condition holds.",
);
pub const WHEN_NOT_MATCHED_INSERT_ALL: Param = Param::new(
    "when_not_matched_insert_all",
    Kind::Flag,
    "Insert unmatched rows (default true).",
);
pub const WHEN_NOT_MATCHED_BY_SOURCE_DELETE: Param = Param::new(
    "when_not_matched_by_source_delete",
    Kind::Flag,
    "Delete table rows the input does not match (default false).",
);
pub const WHEN_NOT_MATCHED_BY_SOURCE_DELETE_FILT: Param = Param::new(
    "when_not_matched_by_source_delete_filt",
    Kind::Text,
    "Only delete unmatched table rows for which this SQL condition holds.",
);
pub const TIMEOUT: Param = Param::new(
    "timeout",
    Kind::Text,
    "How long to retry on commit conflicts, a duration such as 30s or 5m.",
);
pub const USE_INDEX: Param = Param::new(
    "use_index",
    Kind::Flag,
    "Whether the join may use a scalar index on the key.",
);
pub const USE_LSM: Param = Param::new(
    "use_lsm",
    Kind::Flag,
    "A table with an LSM write spec: write through its shard writers (the default), or refuse \
     (false: a plain merge would land under rows its LSM tiers hold).",
);
pub const TABLE_ID: Param = Param::new(
    "table_id",
    Kind::Text,
    "Only jobs of this table (its id joined by `delimiter`).",
);
pub const JOB_STATE: Param = Param::new(
    "job_state",
    Kind::Choice(&["IN_PROGRESS", "DONE", "FAILED", "CANCELLED"]),
    "Only jobs in this state.",
);
pub const UPLOAD_ID: Param = Param::new(
    "upload_id",
    Kind::Text,
    "Multipart upload this insert is a part of (from `multipart_write/create`): its rows are \
     staged and become visible only at `multipart_write/complete`.",
);
pub const UPLOAD_ID_REQUIRED: Param = Param {
    required: true,
    ..UPLOAD_ID
};
pub const UPLOAD_PART_ID: Param = Param::new(
    "upload_part_id",
    Kind::Text,
    "The part's id within its upload (1-128 letters, digits, '-', '_'); sending a part again \
     under the same id replaces it.",
);
pub const AUDIT_TENANT: Param = Param::new("tenant", Kind::Text, "Only records of this tenant.");
pub const AUDIT_PRINCIPAL: Param = Param::new(
    "principal",
    Kind::Text,
    "Only records of this principal (`key:<id>`, `token:<subject>`, `operator:<id>`).",
);
pub const AUDIT_ACTION: Param = Param::new(
    "action",
    Kind::Text,
    "Only records of this action (`POST /v1/table/{id}/insert`, `authenticate`).",
);
pub const AUDIT_SINCE: Param = Param::new(
    "since",
    Kind::Text,
    "Only records at or after this time (RFC 3339).",
);
pub const AUDIT_UNTIL: Param = Param::new(
    "until",
    Kind::Text,
    "Only records before this time (RFC 3339).",
);
pub const USAGE_FORMAT: Param = Param::new(
    "format",
    Kind::Text,
    "`json` (default), `csv` or `arrow` (an Arrow IPC stream).",
);
