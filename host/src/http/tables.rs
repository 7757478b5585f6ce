//! `/v1/table/{id}/{create,declare,describe,exists,drop,deregister,register,rename,stats}` and
//! `GET /v1/table`: the table lifecycle in the catalog.

use axum::extract::State;
use axum::response::Response;
use bytes::Bytes;
use lance_namespace::models::{
    CreateTableRequest, DeclareTableRequest, DeregisterTableRequest, DropTableRequest,
    GetTableStatsRequest, ListTablesRequest, RegisterTableRequest, RenameTableRequest,
    RenameTableResponse,
};
use serde::Deserialize;
use serde_json::json;

use super::arrow_body::ArrowBody;
use super::pipeline::extract::{Common, Dialect, JsonBody, Model, Target, page, paginate};
use super::{AppState, answer, reply, respond, to_json};
use crate::catalog::not_found_as_table;
use crate::error::{ApiError, ApiResult};
use crate::store::At;

/// A table's directory is named `<8 hex digits>_<its id joined by $>`, and some of
/// lance-namespace's paths to it percent-encode that name (twice, in places: `é` becomes
/// `%25C3%25A9`). An id whose encoded name passes the file system's 255-byte limit made a table
/// that could not be declared, or once created could not be dropped (the OS error was a 500).
/// Such ids are refused before anything is written, counting every byte but ASCII letters,
/// digits and `-_.$` at its doubly encoded length (so plain names may have ~240 characters).
pub(super) fn storable(id: &[String]) -> ApiResult<()> {
    let encoded: usize = id
        .join("$")
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.$".contains(&b) {
                1
            } else {
                5
            }
        })
        .sum();
    if 9 + encoded > 255 {
        return Err(ApiError::invalid(format!(
            "table id '{}' is too long: its storage directory name would pass 255 bytes",
            id.join("$")
        )));
    }
    Ok(())
}

pub async fn create(
    State(app): State<AppState>,
    target: Target,
    body: Bytes,
) -> ApiResult<Response> {
    storable(&target.id)?;
    // Validate the stream here so a bad body is a clear 400 before the catalog is touched.
    let decoded = ArrowBody::decode_bytes(body.clone()).await?;
    if let Some(u) = app.hosting.counters(target.caller.tenant()) {
        u.add(
            lancet_hosting::usage::Measure::RowsWritten,
            decoded.num_rows() as u64,
        );
    }
    let mode = target.params.string("mode");
    if let Some(m) = &mode {
        let known = ["create", "overwrite", "exist_ok", "existok"];
        if !known.iter().any(|k| k.eq_ignore_ascii_case(m)) {
            return Err(ApiError::invalid(format!(
                "unknown create mode '{m}': use create, overwrite or exist_ok"
            )));
        }
    }
    let properties = json_param(&target, "properties")?;
    // Tables live where the server's root is, with the server's store settings; per-table
    // storage options would be silently ignored, so they are refused.
    if json_param(&target, "storage_options")?.is_some_and(|o| !o.is_empty()) {
        return Err(ApiError::invalid(
            "storage_options: per-table storage options are not supported; tables use the server's store settings",
        ));
    }
    let request = CreateTableRequest {
        id: Some(target.id.clone()),
        mode,
        properties,
        ..Default::default()
    };
    // A schema with no batch (the lancedb client's `create_table(name, schema=...)`) makes
    // an empty table; lance-namespace wants at least one batch, so it gets an empty one.
    let body = if decoded.batches.is_empty() {
        let empty = arrow_array::RecordBatch::new_empty(decoded.schema.clone());
        Bytes::from(super::arrow_body::stream_bytes(&empty)?)
    } else {
        body
    };
    let _guard = target.catalog.commit_lock.lock().await?;
    let response = target
        .catalog
        .ns()
        .create_table(request, body)
        .await
        .map_err(|e| already_exists_as_sdks_read_it(e.into()))?;
    target.catalog.invalidate(&target.id);
    if let Some(loc) = &response.location {
        app.store.forget(loc);
    }
    tracing::info!(table = %target.name(), rows = decoded.num_rows(), "table created");
    respond(response)
}

/// The lancedb SDKs' `create_table` (Python and TypeScript) recognises an existing table only
/// as a 400 whose body says "already exists" (and then raises its own already-exists error, or
/// opens the table under `exist_ok`); a 409 reaches their callers as an unknown HTTP error.
/// The body's `code` stays `TableAlreadyExists` for the namespace clients.
fn already_exists_as_sdks_read_it(err: ApiError) -> ApiError {
    if err.code != lance_namespace::ErrorCode::TableAlreadyExists {
        return err;
    }
    let message = if err.message.contains("already exists") {
        err.message
    } else {
        format!("table already exists: {}", err.message)
    };
    ApiError { message, ..err }.with_status(axum::http::StatusCode::BAD_REQUEST)
}

fn json_param(
    target: &Target,
    key: &str,
) -> ApiResult<Option<std::collections::HashMap<String, String>>> {
    match target.params.get(key) {
        None | Some("") => Ok(None),
        Some(raw) => serde_json::from_str(raw).map(Some).map_err(|e| {
            ApiError::invalid(format!(
                "query parameter '{key}' must be a JSON object of strings: {e}"
            ))
        }),
    }
}

pub async fn declare(
    State(app): State<AppState>,
    Model(target, request): Model<DeclareTableRequest>,
) -> ApiResult<Response> {
    storable(&target.id)?;
    let vended = super::vend::storage_options(&app, request.vend_credentials)?;
    let _guard = target.catalog.commit_lock.lock().await?;
    let response = target.catalog.ns().declare_table(request).await;
    target.catalog.invalidate(&target.id);
    answer(response.map(|mut r| {
        if let Some(options) = vended {
            r.storage_options = Some(options);
        }
        r.managed_versioning = Some(true);
        r
    }))
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct DescribeBody {
    #[serde(flatten)]
    common: Common,
    version: Option<i64>,
    /// Describe the version (and branch) this tag points at.
    tag: Option<String>,
    /// Whether `table_uri` is included (always: the location is no secret here).
    #[allow(dead_code)]
    with_table_uri: Option<bool>,
    /// Detailed metadata (version, schema, stats) is always loaded when the table has data.
    #[allow(dead_code)]
    load_detailed_metadata: Option<bool>,
    /// `is_only_declared` is always populated.
    #[allow(dead_code)]
    check_declared: Option<bool>,
    /// Answer the storage options a client needs to read the table directly (only when the
    /// server runs with `--vend-storage-options`; see `vend.rs`).
    vend_credentials: Option<bool>,
}

pub async fn describe(
    State(app): State<AppState>,
    target: Target,
    dialect: Dialect,
    JsonBody(body): JsonBody<DescribeBody>,
) -> ApiResult<Response> {
    target.check_body_id(&body.common.id)?;
    let vend = body
        .vend_credentials
        .or(target.params.bool("vend_credentials")?);
    let vended = super::vend::storage_options(&app, vend)?;
    let entry = target.catalog.describe_table(&target.id).await?;
    let location = entry.location.clone();
    let version = body.version.or(target.params.int("version")?);
    let branch = target.branch(&body.common.branch);
    let tag = body
        .tag
        .clone()
        .or_else(|| target.params.string("tag"))
        .filter(|t| !t.is_empty());
    let at = match tag {
        None => At::new(branch, version)?,
        Some(_) if version.is_some() || branch.is_some() => {
            return Err(ApiError::invalid(
                "tag cannot be given together with version or branch",
            ));
        }
        Some(tag) => {
            let t = app.store.tag_contents(&location, &tag).await?;
            At::new(t.branch, Some(t.version as i64))?
        }
    };
    let mut out = json!({
        "table": target.id.last(),
        "namespace": &target.id[..target.id.len() - 1],
        "location": location,
        "table_uri": location,
        "properties": entry.properties.unwrap_or_default(),
        "storage_options": vended.or(entry.storage_options).unwrap_or_default(),
        // Lance clients that open the table through the namespace commit through it too
        // (`version/create`), so every version goes through Lancet's checks.
        "managed_versioning": true,
    });
    match app.store.read(&location, &at).await {
        Ok(ds) => {
            let schema = arrow_schema::Schema::from(ds.schema());
            // The namespace clients read the upstream JSON Arrow schema ("utf8"); the lancedb
            // SDK reads lance's own JSON schema ("string").
            out["schema"] = match dialect {
                Dialect::Namespace => to_json(
                    lance_namespace::schema::arrow_schema_to_json(&schema)
                        .map_err(ApiError::from)?,
                )?,
                Dialect::LanceDb => to_json(
                    lance::arrow::json::JsonSchema::try_from(&schema).map_err(ApiError::from)?,
                )?,
            };
            out["version"] = json!(ds.version().version);
            out["is_only_declared"] = json!(false);
            // The table's own key-value metadata (lance's schema metadata).
            out["metadata"] = json!(ds.schema().metadata);
            let deleted = ds.count_deleted_rows().await.map_err(ApiError::from)?;
            out["stats"] =
                json!({ "num_deleted_rows": deleted, "num_fragments": ds.count_fragments() });
            out["virtual_columns"] = crate::virtual_columns::describe(&schema);
        }
        Err(e)
            if e.code == lance_namespace::ErrorCode::TableNotFound
                && at.branch.is_none()
                && at.version.is_none() =>
        {
            out["is_only_declared"] = json!(true);
        }
        Err(e) => return Err(e),
    }
    Ok(reply(out))
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct ExistsBody {
    #[serde(flatten)]
    common: Common,
    /// The table must have this version (of `branch`, or main).
    version: Option<i64>,
}

/// 200 when the table exists (and, when asked, has the branch and version), else 404.
pub async fn exists(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<ExistsBody>,
) -> ApiResult<Response> {
    target.check_body_id(&body.common.id)?;
    let location = target.catalog.locate(&target.id).await?;
    let branch = target.branch(&body.common.branch);
    let version = body.version.or(target.params.int("version")?);
    if branch.is_some() || version.is_some() {
        app.store
            .read(&location, &At::new(branch, version)?)
            .await?;
    }
    Ok(reply(json!({})))
}

pub async fn drop(
    State(app): State<AppState>,
    Model(target, request): Model<DropTableRequest>,
) -> ApiResult<Response> {
    respond(drop_table(&app, &target, request).await?)
}

/// Drop the table `target` names: its catalog entry and its directory.
pub(super) async fn drop_table(
    app: &AppState,
    target: &Target,
    request: DropTableRequest,
) -> ApiResult<lance_namespace::models::DropTableResponse> {
    let location = target.catalog.locate(&target.id).await?;
    let _guard = target.catalog.commit_lock.lock().await?;
    let _writes = app.store.write_lock(&location, None).await;
    let response = match target.catalog.ns().drop_table(request).await {
        Ok(response) => response,
        // lance-namespace (14.0.2) removes the catalog entry, then the directory at its stored
        // location joined onto its base path, which percent-encodes the (already encoded)
        // location again: for an id with characters a URL escapes (`é`, `{`) the directory is
        // "not found" and the drop was a 500 that left the files behind. The entry is gone by
        // then; remove the directory by its URI.
        Err(e) if e.to_string().contains("Failed to delete table directory") => {
            tracing::info!(table = %target.name(), "removing the table directory by its URI");
            let (store, path) = lance::io::ObjectStore::from_uri(&location)
                .await
                .map_err(ApiError::from)?;
            store.remove_dir_all(path).await.map_err(ApiError::from)?;
            lance_namespace::models::DropTableResponse {
                id: Some(target.id.clone()),
                location: Some(location.clone()),
                ..Default::default()
            }
        }
        Err(e) => return Err(not_found_as_table(e, &target.id)),
    };
    target.catalog.invalidate(&target.id);
    app.store.forget(&location);
    Ok(response)
}

pub async fn deregister(
    State(app): State<AppState>,
    Model(target, request): Model<DeregisterTableRequest>,
) -> ApiResult<Response> {
    let _guard = target.catalog.commit_lock.lock().await?;
    let response = target
        .catalog
        .ns()
        .deregister_table(request)
        .await
        .map_err(|e| not_found_as_table(e, &target.id))?;
    target.catalog.invalidate(&target.id);
    if let Some(loc) = &response.location {
        app.store.forget(loc);
    }
    respond(response)
}

pub async fn register(
    Model(target, mut request): Model<RegisterTableRequest>,
) -> ApiResult<Response> {
    request.location = target.catalog.contained_location(&request.location)?;
    let _guard = target.catalog.commit_lock.lock().await?;
    let response = target.catalog.ns().register_table(request).await;
    target.catalog.invalidate(&target.id);
    answer(response)
}

pub async fn rename(Model(target, request): Model<RenameTableRequest>) -> ApiResult<Response> {
    let namespace = match &request.new_namespace_id {
        Some(ns) => target.caller.resolve(ns)?,
        // Without a namespace the table stays in its own.
        None => target.id[..target.id.len() - 1].to_vec(),
    };
    if request.new_table_name.is_empty() || request.new_table_name.contains('$') {
        return Err(ApiError::invalid(format!(
            "new_table_name '{}' is not a valid table name",
            request.new_table_name
        )));
    }
    let mut new_id = namespace;
    new_id.push(request.new_table_name.clone());
    target.catalog.rename_table(&target.id, &new_id).await?;
    respond(RenameTableResponse::default())
}

pub async fn stats(
    State(app): State<AppState>,
    Model(target, mut request): Model<GetTableStatsRequest>,
) -> ApiResult<Response> {
    request.branch = target.branch(&request.branch);
    let branch = request.branch.clone();
    let mut stats = target
        .catalog
        .reader()
        .get_table_stats(request)
        .await
        .map_err(|e| not_found_as_table(e, &target.id))?;
    // The directory namespace sums the fragments' physical rows, deleted rows included; a
    // client asking how many rows a table holds means the live ones (as `count_rows` answers,
    // from the manifest's deletion counts).
    let location = target.catalog.locate(&target.id).await?;
    let ds = app.store.read(&location, &At::new(branch, None)?).await?;
    stats.num_rows = ds.count_rows(None).await.map_err(ApiError::from)? as i64;
    respond(stats)
}

/// `GET /v1/table` and `GET /v1/tables`: the tables of the caller's database namespace (or its
/// tenant's root), paginated; the lancedb SDK's `table_names`.
/// `GET /v1/tables` (extended deployment, spec 4.16): the tables of the database (the caller's
/// root namespace) itself, not of the namespaces below it.
pub async fn list_database(target: Target) -> ApiResult<Response> {
    let (limit, token) = page(&target.params, None, None)?;
    let request = ListTablesRequest {
        id: Some(target.id.clone()),
        limit: limit.map(|l| l as i32),
        page_token: token,
        include_declared: target.params.bool("include_declared")?,
        ..Default::default()
    };
    answer(target.catalog.list_tables(request).await)
}

/// ListAllTables: the tables of every namespace below the caller's root (its database, if
/// one is selected), each named by its id from there joined with `delimiter` (a table of the
/// root itself by its bare name), sorted, paginated by name; `include_declared` as for
/// `table/list`.
pub async fn list_all(target: Target) -> ApiResult<Response> {
    let (limit, token) = page(&target.params, None, None)?;
    let delimiter = target
        .params
        .get("delimiter")
        .filter(|d| !d.is_empty())
        .unwrap_or("$")
        .to_string();
    let include_declared = target.params.bool("include_declared")?;
    let names: Vec<String> = target
        .catalog
        .walk_tables(&target.id, include_declared)
        .await?
        .into_iter()
        .map(|id| id.join(&delimiter))
        .collect();
    let (tables, next) = paginate(
        names.into_iter().map(|n| (n, ())).collect(),
        limit,
        token.as_deref(),
    );
    let tables: Vec<String> = tables.into_iter().map(|(n, _)| n).collect();
    Ok(reply(json!({ "tables": tables, "page_token": next })))
}
