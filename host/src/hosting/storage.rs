//! Measuring a tenant's bytes under the root: each table's folder (all versions, data files,
//! deletion files and indexes), its model files and its jobs' checkpoints. A write measures
//! the table it touched once it is done (one listing of that table); the whole tenant is
//! measured on its first write with a quota and again every `--storage-rescan`, which also
//! catches what background work (compaction, cleanup, backfills) changed meanwhile.

use std::collections::HashMap;
use std::sync::Arc;

use crate::App;
use crate::error::ApiResult;

/// The ledger part of a table location, relative to the root.
pub fn table_part(app: &App, location: &str) -> Option<String> {
    let root = app.tenants.root().trim_start_matches("file://");
    let location = location.trim_start_matches("file://");
    location
        .strip_prefix(root)
        .map(|rel| format!("dir:{}", rel.trim_matches('/')))
}

async fn bytes_under(app: &App, prefix: &str) -> ApiResult<u64> {
    Ok(app
        .root
        .list_meta(prefix)
        .await?
        .iter()
        .map(|o| o.size)
        .sum())
}

/// Measures one table (after a write to it): 0 once it is gone.
pub async fn measure_table(app: &App, tenant: &str, location: &str) -> ApiResult<()> {
    let Some(part) = table_part(app, location) else {
        return Ok(());
    };
    let bytes = bytes_under(app, part.trim_start_matches("dir:")).await?;
    app.hosting.ledger.set(tenant, &part, bytes);
    Ok(())
}

/// Measures all of a tenant: one listing of its folder, its models and each checkpoint
/// folder of its jobs.
pub async fn measure_tenant(app: &App, tenant: &str) -> ApiResult<u64> {
    let mut parts: HashMap<String, u64> = HashMap::new();
    let base = format!("tenants/{tenant}/");
    for o in app.root.list_meta(&format!("tenants/{tenant}")).await? {
        let rel = o.key.strip_prefix(&base).unwrap_or(&o.key);
        // One part per folder of the tenant's root: a table's (all its versions, files and
        // indexes), the catalog's manifest, views, uploads.
        let part = match rel.split_once('/') {
            Some((dir, _)) => format!("dir:{base}{dir}"),
            None => format!("dir:{base}"),
        };
        *parts.entry(part).or_default() += o.size;
    }
    let models = crate::models::tenant_prefix(tenant);
    parts.insert("models".into(), bytes_under(app, &models).await?);
    let mut checkpoints = 0;
    for (job_id, _) in app.jobs.list(tenant, None, None).await? {
        checkpoints += bytes_under(app, app.jobs.dir(&job_id).prefix()).await?;
    }
    parts.insert("jobs".into(), checkpoints);
    parts.retain(|_, b| *b > 0);
    let total = parts.values().sum();
    app.hosting.ledger.set_all(tenant, parts);
    Ok(total)
}

/// Measures `tenant` unless this process did already.
pub async fn ensure_measured(app: &App, tenant: &str) -> ApiResult<()> {
    if app.hosting.ledger.knows(tenant) {
        return Ok(());
    }
    let _one = app.hosting.measuring.lock().await;
    if !app.hosting.ledger.knows(tenant) {
        measure_tenant(app, tenant).await?;
    }
    Ok(())
}

/// Every `every`, measures again each tenant that has a storage quota.
pub async fn rescan(app: Arc<App>, every: std::time::Duration) {
    loop {
        tokio::time::sleep(every).await;
        for (tenant, settings) in app.auth.keys().all_tenant_settings() {
            let quota = settings.quota.as_ref().and_then(|q| q.storage_bytes);
            if quota.is_none() || settings.deleting.is_some() {
                continue;
            }
            let _one = app.hosting.measuring.lock().await;
            if let Err(e) = measure_tenant(&app, &tenant).await {
                tracing::warn!(%tenant, error = %e, "storage rescan failed");
            }
        }
    }
}
