//! `/v1/table/{id}/clone` (the lancedb client's `clone_table`): a new table `{id}` made from
//! another table of the caller's at a version or tag, through lance's own `shallow_clone`
//! (the new table's manifest points at the source's data files; nothing is copied) or
//! `deep_clone` (`is_shallow: false`: every file copied; the tables are then independent).

use axum::extract::State;
use axum::response::Response;
use lance::dataset::refs::Ref;
use lance_namespace::models::{DeclareTableRequest, DeregisterTableRequest};
use serde::Deserialize;
use serde_json::json;

use super::pipeline::auth::Caller;
use super::pipeline::extract::{JsonBody, Target, split_id};
use super::{AppState, reply};
use crate::catalog::Catalog;
use crate::error::{ApiError, ApiResult};

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CloneBody {
    /// The source table: its id (`ns$table`, as in paths) or its `location` (as describe
    /// answers it).
    source_location: Option<String>,
    /// The source version (default: the latest).
    source_version: Option<u64>,
    /// A tag of the source to clone at (not with `source_version`).
    source_tag: Option<String>,
    /// Shallow (default): share the source's data files. False: copy them.
    is_shallow: Option<bool>,
    /// The target table's id (the path's, if given).
    id: Option<Vec<String>>,
}

pub async fn clone(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<CloneBody>,
) -> ApiResult<Response> {
    super::tables::storable(&target.id)?;
    target.check_body_id(&body.id)?;
    let source = body
        .source_location
        .as_deref()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::invalid("source_location is required"))?;
    let reference = match (body.source_version, body.source_tag.as_deref()) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "source_version and source_tag are exclusive: give one",
            ));
        }
        (Some(v), None) => Ref::VersionNumber(v),
        (None, Some(tag)) => Ref::Tag(tag.to_string()),
        (None, None) => Ref::Version(None, None),
    };
    let delimiter = target
        .params
        .get("delimiter")
        .filter(|d| !d.is_empty())
        .unwrap_or("$");
    let source_id = source_table(&target.caller, &target.catalog, source, delimiter).await?;
    let source_location = target.catalog.locate(&source_id).await?;
    // Checked first, so that a missing version or tag is its own 404 and nothing is declared.
    match (body.source_version, body.source_tag.as_deref()) {
        (Some(version), _) => {
            let at = crate::store::At {
                branch: None,
                version: Some(version),
            };
            app.store.read(&source_location, &at).await?;
        }
        (None, Some(tag)) => {
            app.store.tag_contents(&source_location, tag).await?;
        }
        (None, None) => {}
    }
    let mut source_ds = (*app.store.latest(&source_location, None).await?).clone();

    let catalog = &target.catalog;
    let _guard = catalog.commit_lock.lock().await?;
    let declared = catalog
        .ns()
        .declare_table(DeclareTableRequest {
            id: Some(target.id.clone()),
            ..Default::default()
        })
        .await
        .map_err(ApiError::from)?;
    catalog.invalidate(&target.id);
    let location = declared
        .location
        .ok_or_else(|| ApiError::internal("the catalog gave the new table no location"))?;
    let params = Some(app.store.store_params());
    let cloned = if body.is_shallow.unwrap_or(true) {
        source_ds.shallow_clone(&location, reference, params).await
    } else {
        source_ds.deep_clone(&location, reference, params).await
    };
    let ds = match cloned {
        Ok(ds) => ds,
        Err(e) => {
            // Nothing of the clone is visible: the declared entry goes again.
            let undo = catalog
                .ns()
                .deregister_table(DeregisterTableRequest {
                    id: Some(target.id.clone()),
                    ..Default::default()
                })
                .await;
            if let Err(u) = undo {
                tracing::error!(error = %u, "cannot remove the entry of a failed clone");
            }
            catalog.invalidate(&target.id);
            return Err(ApiError::from(e));
        }
    };
    Ok(reply(json!({
        "version": ds.version().version,
        "location": location,
    })))
}

/// The catalog id of the source: a table id (as in paths), or a location, which must be the
/// registered location of a table the caller's credential covers.
async fn source_table(
    caller: &Caller,
    catalog: &Catalog,
    source: &str,
    delimiter: &str,
) -> ApiResult<Vec<String>> {
    let looks_like_location = source.contains('/') || source.contains("://");
    if !looks_like_location {
        return caller.resolve(&split_id(source, delimiter));
    }
    let not_found = || ApiError::table_not_found(source);
    let trimmed = source.trim_end_matches('/');
    let relative = catalog.relative_location(trimmed);
    if relative == trimmed || relative.contains('/') {
        // Not directly inside this tenant's root: no table of the caller's lives there.
        return Err(not_found());
    }
    // Table directories are named `<hash>_<id joined by $>`.
    let Some((_, joined)) = relative.split_once('_') else {
        return Err(not_found());
    };
    let id = split_id(joined, "$");
    if !caller.covers(&id) {
        return Err(not_found());
    }
    let registered = catalog.locate(&id).await.map_err(|_| not_found())?;
    if catalog.relative_location(registered.trim_end_matches('/')) != relative {
        return Err(not_found());
    }
    Ok(id)
}
