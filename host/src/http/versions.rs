//! `/v1/table/{id}/{version/list,version/describe,restore,tags/*}`: history and tags.

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

use axum::response::IntoResponse;

use super::pipeline::extract::{Common, Dialect, JsonBody, Target, page, paginate};
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};
use crate::store::{At, ManifestFile, VersionInfo};

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
#[schemars(rename = "ListVersionsBody")]
pub struct ListBody {
    #[serde(flatten)]
    common: Common,
    limit: Option<i64>,
    page_token: Option<String>,
    descending: Option<bool>,
    /// Lancet: also answer each version's `operation` (one transaction-file read per version
    /// of the page).
    with_operations: Option<bool>,
}

/// Versions in ascending order (descending on request); the page token is the last version
/// number of the previous page.
pub async fn list(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<ListBody>,
) -> ApiResult<Response> {
    target.check_body_id(&body.common.id)?;
    let (limit, token) = page(&target.params, body.limit, body.page_token)?;
    let after: Option<u64> = match token {
        Some(t) => Some(
            t.parse()
                .map_err(|_| ApiError::invalid(format!("invalid page_token '{t}'")))?,
        ),
        None => None,
    };
    let location = target.catalog.locate(&target.id).await?;
    let branch = target.branch(&body.common.branch);
    let mut versions = app.store.versions(&location, branch.as_deref()).await?;
    let descending = body
        .descending
        .or(target.params.bool("descending")?)
        .unwrap_or(false);
    if descending {
        versions.reverse();
    }
    if let Some(after) = after {
        versions.retain(|v| {
            if descending {
                v.version < after
            } else {
                v.version > after
            }
        });
    }
    let mut next = None;
    if let Some(l) = limit
        && versions.len() > l
    {
        versions.truncate(l);
        next = versions.last().map(|v| v.version.to_string());
    }
    let numbers: Vec<u64> = versions.iter().map(|v| v.version).collect();
    let files = app
        .store
        .manifest_files(&location, branch.as_deref(), &numbers)
        .await?;
    let operations = if body.with_operations == Some(true) {
        app.store
            .operations(&location, branch.as_deref(), &numbers)
            .await?
    } else {
        Vec::new()
    };
    let versions: Vec<_> = versions
        .into_iter()
        .zip(files)
        .enumerate()
        .map(|(i, (v, f))| {
            let mut out = version_json(&v, f.as_ref());
            if let Some(op) = operations.get(i) {
                out["operation"] = json!(op);
            }
            out
        })
        .collect();
    Ok(reply(json!({ "versions": versions, "page_token": next })))
}

/// The spec's `TableVersion`, plus `timestamp` (RFC 3339) for the lancedb SDK.
fn version_json(v: &VersionInfo, file: Option<&ManifestFile>) -> serde_json::Value {
    json!({
        "version": v.version,
        "timestamp_millis": v.timestamp_millis,
        "timestamp": chrono::DateTime::from_timestamp_millis(v.timestamp_millis).map(|t| t.to_rfc3339()),
        "metadata": v.metadata,
        "manifest_path": file.map(|f| f.path.as_str()).unwrap_or_default(),
        "manifest_size": file.and_then(|f| f.size),
        "e_tag": file.and_then(|f| f.e_tag.as_deref()),
    })
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct DescribeVersionBody {
    #[serde(flatten)]
    common: Common,
    /// Default: the latest version of the branch.
    version: Option<i64>,
}

/// `version/describe`: one version of a branch (default: its latest) as a `TableVersion`.
pub async fn describe(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<DescribeVersionBody>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.common.id).await?;
    let branch = target.branch(&body.common.branch);
    let at = At::new(
        branch.clone(),
        body.version.or(target.params.int("version")?),
    )?;
    let ds = app.store.read(&location, &at).await?;
    let v = VersionInfo {
        version: ds.version().version,
        timestamp_millis: ds.version().timestamp.timestamp_millis(),
        metadata: ds.version().metadata,
    };
    let files = app
        .store
        .manifest_files(&location, branch.as_deref(), &[v.version])
        .await?;
    Ok(reply(
        json!({ "version": version_json(&v, files[0].as_ref()) }),
    ))
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct RestoreBody {
    #[serde(flatten)]
    common: Common,
    version: Option<i64>,
}

pub async fn restore(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<RestoreBody>,
) -> ApiResult<Response> {
    target.check_body_id(&body.common.id)?;
    let version = body
        .version
        .ok_or_else(|| ApiError::invalid("restore needs a 'version'"))?;
    if version < 0 {
        return Err(ApiError::invalid(format!(
            "version must be >= 0, got {version}"
        )));
    }
    let location = target.catalog.locate(&target.id).await?;
    let branch = target.branch(&body.common.branch);
    // A restore would bring back an older record of what the LSM tiers have merged.
    super::data::refuse_on_lsm_table(&app, &location, branch.as_deref(), "restore").await?;
    let new_version = app
        .store
        .restore(&location, branch.as_deref(), version as u64)
        .await?;
    Ok(reply(super::transactions::committed(
        &target.id,
        branch.as_deref(),
        new_version,
    )))
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct TagBody {
    #[serde(flatten)]
    common: Common,
    tag: Option<String>,
    version: Option<i64>,
    limit: Option<i64>,
    page_token: Option<String>,
}

impl TagBody {
    fn tag(&self) -> ApiResult<&str> {
        self.tag
            .as_deref()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ApiError::invalid("a 'tag' name is required"))
    }
}

/// The spec's `{"tags": {...}, "page_token"}`; the lancedb SDK instead parses the body as one
/// flat map of tag name to lance's camelCase `TagContents`.
pub async fn list_tags(
    State(app): State<AppState>,
    target: Target,
    dialect: Dialect,
    JsonBody(body): JsonBody<TagBody>,
) -> ApiResult<Response> {
    target.check_body_id(&body.common.id)?;
    let (limit, token) = page(&target.params, body.limit, body.page_token)?;
    let location = target.catalog.locate(&target.id).await?;
    let tags = app.store.list_tags(&location).await?;
    if dialect == Dialect::LanceDb {
        let flat: serde_json::Map<String, serde_json::Value> = tags
            .into_iter()
            .map(|(name, t)| (name, json!({ "branch": t.branch, "version": t.version, "manifestSize": t.manifest_size, "metadata": t.metadata })))
            .collect();
        let mut response = axum::Json(serde_json::Value::Object(flat)).into_response();
        response
            .extensions_mut()
            .insert(super::pipeline::context::Verbatim);
        return Ok(response);
    }
    let (tags, next) = paginate(tags.into_iter().collect(), limit, token.as_deref());
    let tags: serde_json::Map<String, serde_json::Value> = tags
        .into_iter()
        .map(|(name, t)| (name, json!({ "version": t.version, "branch": t.branch, "manifest_size": t.manifest_size, "manifestSize": t.manifest_size })))
        .collect();
    Ok(reply(json!({ "tags": tags, "page_token": next })))
}

pub async fn tag_version(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<TagBody>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.common.id).await?;
    let contents = app.store.tag_contents(&location, body.tag()?).await?;
    let mut out = json!({ "version": contents.version });
    if let Some(b) = crate::store::normalize_branch(contents.branch) {
        out["branch"] = json!(b);
    }
    Ok(reply(out))
}

fn tag_target(body: &TagBody, target: &Target) -> ApiResult<At> {
    let version = body
        .version
        .ok_or_else(|| ApiError::invalid("a 'version' is required"))?;
    At::new(target.branch(&body.common.branch), Some(version))
}

pub async fn create_tag(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<TagBody>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.common.id).await?;
    app.store
        .create_tag(&location, body.tag()?, &tag_target(&body, &target)?)
        .await?;
    Ok(reply(json!({})))
}

pub async fn update_tag(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<TagBody>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.common.id).await?;
    app.store
        .update_tag(&location, body.tag()?, &tag_target(&body, &target)?)
        .await?;
    Ok(reply(json!({})))
}

pub async fn delete_tag(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<TagBody>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.common.id).await?;
    app.store.delete_tag(&location, body.tag()?).await?;
    Ok(reply(json!({})))
}
