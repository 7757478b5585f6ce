//! `/v1/table/{id}/multipart_write/{create,complete,abort}`, and the parts themselves
//! (`insert?upload_id=..&upload_part_id=..`): the lancedb client's large inserts, sent in
//! parts, possibly to different replicas, and committed as one version. The records live in
//! `crate::uploads`, the staged data in `store::staged`.

use axum::extract::State;
use axum::response::Response;
use serde_json::json;

use super::arrow_body::ArrowBody;
use super::pipeline::extract::Target;
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};
use crate::uploads::{Upload, Uploads};

fn upload_id(target: &Target) -> ApiResult<String> {
    target
        .params
        .string("upload_id")
        .filter(|u| !u.is_empty())
        .ok_or_else(|| ApiError::invalid("upload_id is required"))
}

/// The upload, checked to belong to this table and branch.
async fn open(target: &Target, id: &str) -> ApiResult<Upload> {
    let upload = Uploads::new(target.catalog.state()).get(id).await?;
    let branch = target.branch(&None);
    if upload.table != target.id || upload.branch != branch {
        return Err(ApiError::invalid(format!(
            "upload '{id}' belongs to table {:?} (branch {}), not this one",
            upload.table,
            upload.branch.as_deref().unwrap_or("main")
        )));
    }
    Ok(upload)
}

pub async fn create(State(app): State<AppState>, target: Target) -> ApiResult<Response> {
    let location = target.catalog.locate(&target.id).await?;
    let branch = target.branch(&None);
    if super::data::is_declared_only(&app, &location, branch.as_deref()).await? {
        return Err(ApiError::invalid(format!(
            "table '{}' is declared but holds no data yet: send its first rows in one insert",
            target.name()
        )));
    }
    // A multipart write commits straight to the table.
    super::data::refuse_on_lsm_table(&app, &location, branch.as_deref(), "a multipart write")
        .await?;
    let ds = app.store.latest(&location, branch.as_deref()).await?;
    let upload = Upload {
        table: target.id.clone(),
        location,
        branch,
        read_version: ds.version().version,
        transaction: uuid::Uuid::new_v4().to_string(),
        created_ms: chrono::Utc::now().timestamp_millis(),
        committed: None,
    };
    let uploads = Uploads::new(target.catalog.state());
    let id = uploads.begin(&upload).await?;
    if target
        .catalog
        .uploads_sweep_due(crate::uploads::SWEEP_EVERY)
    {
        let (catalog, holder) = (target.catalog.clone(), format!("{}-sweep", app.node_id));
        tokio::spawn(async move {
            let now = chrono::Utc::now().timestamp_millis();
            match Uploads::new(catalog.state())
                .sweep(now, crate::uploads::UPLOAD_TTL, &holder)
                .await
            {
                Ok(0) => {}
                Ok(n) => tracing::info!(uploads = n, "forgot expired multipart uploads"),
                Err(e) => tracing::warn!(error = %e, "cannot sweep expired multipart uploads"),
            }
        });
    }
    Ok(reply(json!({ "upload_id": id })))
}

/// One part: its rows are written now (virtual columns computed as for any insert) and kept
/// apart until `complete`.
pub async fn part(
    app: &AppState,
    target: &Target,
    body: ArrowBody,
    overwrite: bool,
) -> ApiResult<Response> {
    let id = upload_id(target)?;
    let part = target
        .params
        .string("upload_part_id")
        .filter(|p| !p.is_empty())
        .ok_or_else(|| ApiError::invalid("upload_part_id is required with upload_id"))?;
    let upload = open(target, &id).await?;
    if let Some(version) = upload.committed {
        return Err(ApiError::conflict(format!(
            "upload '{id}' was already completed (version {version})"
        )));
    }
    let rows = body.num_rows();
    let hook = app.virtual_columns.insert_hook(target.caller.tenant());
    let staged = app
        .store
        .stage_insert(
            &upload.location,
            upload.branch.as_deref(),
            body.batches,
            overwrite,
            Some(&*hook),
        )
        .await?;
    Uploads::new(target.catalog.state())
        .put_part(&id, &part, staged)
        .await?;
    Ok(reply(
        json!({ "num_inserted_rows": rows, "upload_id": id, "upload_part_id": part }),
    ))
}

pub async fn complete(State(app): State<AppState>, target: Target) -> ApiResult<Response> {
    let id = upload_id(&target)?;
    let uploads = Uploads::new(target.catalog.state());
    let mut upload = open(&target, &id).await?;
    if upload.committed.is_none() {
        let Some(lease) = uploads.lock(&id, &app.node_id).await? else {
            return Err(ApiError::conflict(format!(
                "upload '{id}' is being completed or aborted by another request"
            )));
        };
        let result = commit(&app, &uploads, &id, lease.generation).await;
        uploads.release(lease).await;
        upload = result?;
    }
    let version = upload.committed.unwrap_or_default();
    let transaction_id =
        super::transactions::write_transaction_id(&target.id, upload.branch.as_deref(), version);
    Ok(reply(
        json!({ "version": version, "transaction_id": transaction_id }),
    ))
}

/// The version an earlier attempt committed the upload as, if one did and died before
/// recording it. Only an earlier holder of the upload's lease (`generation` > 1) can have: the
/// first attempt skips reading the table's history.
async fn landed(app: &AppState, upload: &Upload, generation: u64) -> ApiResult<Option<u64>> {
    if generation <= 1 {
        return Ok(None);
    }
    app.store
        .find_transaction(
            &upload.location,
            upload.branch.as_deref(),
            upload.read_version,
            &upload.transaction,
        )
        .await
}

/// Commits the upload's parts unless an earlier attempt did; records the version.
async fn commit(
    app: &AppState,
    uploads: &Uploads<'_>,
    id: &str,
    generation: u64,
) -> ApiResult<Upload> {
    let mut upload = uploads.get(id).await?;
    if upload.committed.is_some() {
        return Ok(upload);
    }
    let (location, branch) = (upload.location.clone(), upload.branch.clone());
    let version = match landed(app, &upload, generation).await? {
        Some(version) => version,
        None => {
            let parts = uploads.parts(id).await?;
            let ds = app
                .store
                .commit_staged(&location, branch.as_deref(), &parts, &upload.transaction)
                .await?;
            ds.version().version
        }
    };
    uploads.finish(id, &mut upload, version).await?;
    Ok(upload)
}

pub async fn abort(State(app): State<AppState>, target: Target) -> ApiResult<Response> {
    let id = upload_id(&target)?;
    let uploads = Uploads::new(target.catalog.state());
    let upload = open(&target, &id).await?;
    if let Some(version) = upload.committed {
        return Err(ApiError::conflict(format!(
            "upload '{id}' was already completed (version {version})"
        )));
    }
    let Some(lease) = uploads.lock(&id, &app.node_id).await? else {
        return Err(ApiError::conflict(format!(
            "upload '{id}' is being completed by another request"
        )));
    };
    // Completed meanwhile by a request that has since let go (or died after its commit,
    // before its record): keep it.
    let mut upload = uploads.get(&id).await?;
    if upload.committed.is_none()
        && let Some(version) = landed(&app, &upload, lease.generation).await?
    {
        uploads.finish(&id, &mut upload, version).await?;
    }
    let committed = upload.committed;
    let result = match committed {
        Some(version) => Err(ApiError::conflict(format!(
            "upload '{id}' was already completed (version {version})"
        ))),
        None => uploads.remove(&id).await,
    };
    if committed.is_some() {
        uploads.release(lease).await;
    }
    result?;
    Ok(reply(json!({})))
}
