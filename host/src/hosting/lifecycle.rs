//! A tenant's life: created with its settings, changed live, suspended and resumed, deleted
//! with every byte it owns. The registry is the auth file's `[tenants.<name>]` table (under
//! the root, read by every replica within a second), changed with a conditional write.
//! Keys are managed here too, for the operator (any tenant) and a tenant's admin (its own).

use std::sync::Arc;
use std::time::Duration;

use lance_namespace::ErrorCode;
use serde_json::{Value, json};

use crate::App;
use crate::auth::keys::{KeyEntry, NewKey, now_rfc3339};
use crate::auth::{AuthFile, AuthSource, Role, check_tenant_name};
use crate::config::TenantSettings;
use crate::error::{ApiError, ApiResult};
use crate::jobs::state::JobState;

fn no_tenant(name: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NamespaceNotFound,
        format!("tenant '{name}' does not exist"),
    )
}

fn source(app: &App) -> ApiResult<AuthSource> {
    app.auth.keys().source().cloned().ok_or_else(|| {
        ApiError::invalid("this server has no auth file: tenants and keys cannot be changed")
    })
}

/// Changes the auth file, then makes this process see the change at once.
pub async fn change<T>(
    app: &App,
    f: impl FnMut(&mut AuthFile) -> Result<T, ApiError>,
) -> ApiResult<T> {
    let source = source(app)?;
    let mut f = f;
    let mut refusal = None;
    let out = source
        .update(|file| match f(file) {
            Ok(v) => Ok(Some(v)),
            Err(e) => {
                refusal = Some(e);
                Err("refused".into())
            }
        })
        .await;
    if let Some(e) = refusal {
        return Err(e);
    }
    let out = out.map_err(ApiError::internal)?;
    app.auth
        .keys()
        .reload_now()
        .await
        .map_err(ApiError::internal)?;
    crate::server::apply_tenant_settings(app);
    Ok(out.expect("set when the change succeeded"))
}

/// Settings from JSON, every field checked (an unknown one is a 400 naming it).
pub fn settings_from(value: Value) -> ApiResult<TenantSettings> {
    let settings: TenantSettings = serde_json::from_value(value)
        .map_err(|e| ApiError::invalid(format!("tenant settings: {e}")))?;
    if let Some(q) = &settings.quota {
        q.validate().map_err(ApiError::invalid)?;
    }
    if let Some(u) = &settings.upkeep {
        u.validate().map_err(ApiError::invalid)?;
    }
    Ok(settings)
}

/// Fields only the lifecycle calls set.
const STATE_FIELDS: [&str; 4] = ["suspended", "suspended_jobs", "deleting", "created"];

fn check_no_state_fields(value: &Value) -> ApiResult<()> {
    for f in STATE_FIELDS {
        if value.get(f).is_some() {
            return Err(ApiError::invalid(format!(
                "'{f}' is set by the tenant's lifecycle calls (suspend, resume, delete), not \
                 by its settings"
            )));
        }
    }
    Ok(())
}

pub async fn create(app: &App, name: &str, settings: Value) -> ApiResult<Value> {
    check_tenant_name(name).map_err(ApiError::invalid)?;
    check_no_state_fields(&settings)?;
    let mut settings = settings_from(settings)?;
    settings.created = now_rfc3339();
    change(app, |file| {
        if file.tenants.contains_key(name) {
            return Err(ApiError::new(
                ErrorCode::NamespaceAlreadyExists,
                format!("tenant '{name}' exists already"),
            ));
        }
        file.tenants.insert(name.to_string(), settings.clone());
        Ok(())
    })
    .await?;
    describe(app, name).await
}

/// Every tenant: those registered, those a key names, those with data under the root.
pub async fn names(app: &App) -> ApiResult<Vec<String>> {
    let settings = app.auth.keys().all_tenant_settings();
    let mut names: std::collections::BTreeSet<String> = settings.keys().cloned().collect();
    if let Some(source) = app.auth.keys().source() {
        let (file, _) = source.load().await.map_err(ApiError::internal)?;
        names.extend(
            file.keys
                .iter()
                .filter(|k| k.revoked.is_none())
                .map(|k| k.tenant.clone()),
        );
    }
    names.extend(app.tenants.with_data(&app.root).await?);
    Ok(names.into_iter().collect())
}

fn state_of(s: Option<&TenantSettings>) -> &'static str {
    match s {
        Some(s) if s.deleting.is_some() => "deleting",
        Some(s) if s.suspended.is_some() => "suspended",
        _ => "active",
    }
}

/// One tenant's row: state, settings, what it holds against its quota.
async fn row(app: &App, name: &str, settings: Option<&TenantSettings>) -> ApiResult<Value> {
    let tables = match app.tenants.catalog(name).await {
        Ok(c) => c
            .list_all_tables(&[], "$")
            .await
            .map_or(Value::Null, |t| json!(t.len())),
        Err(_) => Value::Null,
    };
    Ok(json!({
        "name": name,
        "state": state_of(settings),
        "registered": settings.is_some(),
        "settings": settings.map(serde_json::to_value).transpose()
            .map_err(|e| ApiError::internal(e.to_string()))?,
        "storage_bytes": app.hosting.ledger.knows(name)
            .then(|| app.hosting.ledger.measured(name)),
        "tables": tables,
    }))
}

/// Every tenant's row, with what it used in the last 24 hours (from the usage table).
pub async fn list(app: &App) -> ApiResult<Vec<Value>> {
    let settings = app.auth.keys().all_tenant_settings();
    let day_ago = chrono::Utc::now().timestamp_millis() - 24 * 3_600_000;
    let mut used: std::collections::HashMap<String, Vec<super::usage_log::Period>> =
        Default::default();
    for p in super::usage_log::read(app, None, Some(day_ago), None).await? {
        used.entry(p.tenant.clone()).or_default().push(p);
    }
    let mut rows = Vec::new();
    for name in names(app).await? {
        let mut row = row(app, &name, settings.get(&name)).await?;
        let periods = used.remove(&name).unwrap_or_default();
        row["usage_24h"] = super::usage_log::totals(&periods);
        rows.push(row);
    }
    Ok(rows)
}

pub async fn describe(app: &App, name: &str) -> ApiResult<Value> {
    check_tenant_name(name).map_err(ApiError::invalid)?;
    let settings = app.auth.keys().tenant_settings(name);
    let known = settings.is_some() || names(app).await?.iter().any(|n| n == name);
    if !known {
        return Err(no_tenant(name));
    }
    // Measured afresh (one listing of its folders): writes keep the figure current only for
    // tenants with a storage quota.
    let measured = {
        let _one = app.hosting.measuring.lock().await;
        super::storage::measure_tenant(app, name).await
    };
    if let Err(e) = measured {
        tracing::warn!(tenant = %name, error = %e, "not measured");
    }
    let mut out = row(app, name, settings.as_ref()).await?;
    out["keys"] = json!(
        list_keys(app, name)
            .await?
            .iter()
            .map(key_view)
            .collect::<Vec<_>>()
    );
    let jobs = app.jobs.list(name, None, None).await?;
    let running = jobs
        .iter()
        .filter(|(_, r)| r["job_state"] == "IN_PROGRESS" || r["job_state"] == "PAUSED")
        .count();
    out["jobs_open"] = json!(running);
    Ok(out)
}

/// Merges `patch` into the tenant's settings (a field set to null is removed); the change
/// is live on every replica within a second.
pub async fn update(app: &App, name: &str, patch: Value) -> ApiResult<Value> {
    let Value::Object(patch) = patch else {
        return Err(ApiError::invalid("settings must be a JSON object"));
    };
    check_no_state_fields(&Value::Object(patch.clone()))?;
    change(app, |file| {
        let current = file.tenants.get(name).ok_or_else(|| no_tenant(name))?;
        let mut merged =
            serde_json::to_value(current).map_err(|e| ApiError::internal(e.to_string()))?;
        for (k, v) in &patch {
            if v.is_null() {
                merged.as_object_mut().map(|m| m.remove(k));
            } else {
                merged[k] = v.clone();
            }
        }
        let settings = settings_from(merged)?;
        file.tenants.insert(name.to_string(), settings);
        Ok(())
    })
    .await?;
    describe(app, name).await
}

/// Refuses every request of the tenant's keys and tokens (403) and pauses its running jobs
/// (kept, resumed with the tenant).
pub async fn suspend(app: &App, name: &str) -> ApiResult<Value> {
    change(app, |file| {
        let s = file.tenants.get_mut(name).ok_or_else(|| no_tenant(name))?;
        if s.deleting.is_some() {
            return Err(ApiError::conflict(format!(
                "tenant '{name}' is being deleted"
            )));
        }
        s.suspended.get_or_insert_with(now_rfc3339);
        Ok(())
    })
    .await?;
    let mut paused = Vec::new();
    for (job_id, r) in app
        .jobs
        .list(name, None, Some(JobState::InProgress))
        .await?
    {
        match app.jobs.pause(name, &job_id).await {
            Ok(_) => paused.push(job_id),
            Err(e) => tracing::warn!(%job_id, error = %e, "suspend: job not paused"),
        }
        drop(r);
    }
    change(app, |file| {
        if let Some(s) = file.tenants.get_mut(name) {
            for j in &paused {
                if !s.suspended_jobs.contains(j) {
                    s.suspended_jobs.push(j.clone());
                }
            }
        }
        Ok(())
    })
    .await?;
    describe(app, name).await
}

pub async fn resume(app: &Arc<App>, name: &str) -> ApiResult<Value> {
    let jobs = change(app, |file| {
        let s = file.tenants.get_mut(name).ok_or_else(|| no_tenant(name))?;
        if s.deleting.is_some() {
            return Err(ApiError::conflict(format!(
                "tenant '{name}' is being deleted"
            )));
        }
        s.suspended = None;
        Ok(std::mem::take(&mut s.suspended_jobs))
    })
    .await?;
    for job_id in jobs {
        if let Err(e) = app.jobs.resume(app, name, &job_id).await {
            tracing::warn!(%job_id, error = %e, "resume: job not resumed");
        }
    }
    describe(app, name).await
}

/// What a tenant owns under the root, folder by folder.
pub async fn prefixes(app: &App, name: &str) -> ApiResult<Vec<String>> {
    let mut out = vec![
        format!("tenants/{name}"),
        crate::models::tenant_prefix(name),
        format!("_functions/t-{}", hex::encode(name)),
        format!("_secrets/t-{}", hex::encode(name)),
    ];
    for (job_id, _) in app.jobs.list(name, None, None).await? {
        out.push(app.jobs.dir(&job_id).prefix().to_string());
    }
    Ok(out)
}

/// Refuses the tenant everywhere, stops its jobs, then removes every object it owns and its
/// settings; its keys stay as revoked tombstones.
pub async fn delete(app: &App, name: &str) -> ApiResult<Value> {
    check_tenant_name(name).map_err(ApiError::invalid)?;
    let known = names(app).await?.iter().any(|n| n == name);
    if !known {
        return Err(no_tenant(name));
    }
    change(app, |file| {
        let s = file.tenants.entry(name.to_string()).or_default();
        s.deleting.get_or_insert_with(now_rfc3339);
        Ok(())
    })
    .await?;
    // Other replicas see the refusal within a second (their auth-file poll); requests they
    // started before it are given a moment to end before the bytes go.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (job_id, r) in app.jobs.list(name, None, None).await? {
        let open = r["job_state"] == "IN_PROGRESS" || r["job_state"] == "PAUSED";
        if open && let Err(e) = app.jobs.cancel(name, &job_id).await {
            tracing::warn!(%job_id, error = %e, "delete: job not cancelled");
        }
    }
    let prefixes = prefixes(app, name).await?;
    let mut removed = 0usize;
    for p in &prefixes {
        removed += app.root.list(p).await?.len();
        app.root.delete_all(p).await?;
    }
    let revoked = change(app, |file| {
        let mut n = 0;
        for k in file.keys.iter_mut().filter(|k| k.tenant == name) {
            if k.revoked.is_none() {
                k.revoked = Some(now_rfc3339());
                n += 1;
            }
        }
        file.tenants.remove(name);
        Ok(n)
    })
    .await?;
    app.tenants.forget(name);
    app.hosting.ledger.forget(name);
    app.hosting.rates.forget(name);
    Ok(json!({
        "name": name,
        "deleted": true,
        "objects_removed": removed,
        "keys_revoked": revoked,
        "prefixes": prefixes,
    }))
}

/// A key as shown: never its hash.
pub fn key_view(k: &KeyEntry) -> Value {
    let now = chrono::Utc::now().timestamp_millis();
    json!({
        "id": k.id,
        "tenant": k.tenant,
        "role": k.role,
        "namespace": k.namespace,
        "description": k.description,
        "created": k.created,
        "created_by": k.created_by,
        "expires": k.expires,
        "revoked": k.revoked,
        "rotated_to": k.rotated_to,
        "state": if k.revoked.is_some() { "revoked" } else if k.live_at(now) { "active" } else { "expired" },
    })
}

pub async fn list_keys(app: &App, tenant: &str) -> ApiResult<Vec<KeyEntry>> {
    let Some(source) = app.auth.keys().source() else {
        return Ok(Vec::new());
    };
    let (file, _) = source.load().await.map_err(ApiError::internal)?;
    Ok(file
        .keys
        .into_iter()
        .filter(|k| k.tenant == tenant)
        .collect())
}

/// Keys with their last use, from every node's record (`keys_used`).
pub async fn keys_with_use(app: &Arc<App>, tenant: &str) -> ApiResult<Vec<Value>> {
    let used = super::keys_used::read_all(app).await?;
    Ok(list_keys(app, tenant)
        .await?
        .iter()
        .map(|k| {
            let mut v = key_view(k);
            v["last_used"] = json!(used.get(&k.id).map(|ms| {
                chrono::DateTime::from_timestamp_millis(*ms)
                    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            }));
            v
        })
        .collect())
}

/// The limits within which a tenant's admin makes keys: its own tenant, a role no higher
/// than its own, a namespace inside its own.
pub struct Within<'a> {
    pub tenant: &'a str,
    pub role: Role,
    pub scope: &'a [String],
}

pub async fn create_key(
    app: &App,
    new: NewKey,
    within: Option<Within<'_>>,
) -> ApiResult<(String, KeyEntry)> {
    if let Some(w) = &within {
        if new.role > w.role {
            return Err(crate::http::pipeline::auth::forbidden(format!(
                "a {} key cannot make a {} key",
                w.role, new.role
            )));
        }
        if !new.namespace.starts_with(w.scope) {
            return Err(crate::http::pipeline::auth::forbidden(format!(
                "this credential covers namespace '{}' only",
                w.scope.join(".")
            )));
        }
    }
    let settings = app.auth.keys().tenant_settings(&new.tenant);
    if let Some(why) = settings.as_ref().and_then(|s| s.refusal(&new.tenant)) {
        return Err(ApiError::conflict(why));
    }
    change(app, |file| {
        file.create_key_with(new.clone()).map_err(ApiError::invalid)
    })
    .await
}

fn find_key<'a>(
    file: &'a AuthFile,
    id: &str,
    within: Option<&Within<'_>>,
) -> ApiResult<&'a KeyEntry> {
    let missing = || ApiError::new(ErrorCode::NamespaceNotFound, format!("no key '{id}'"));
    let k = file.keys.iter().find(|k| k.id == id).ok_or_else(missing)?;
    if let Some(w) = within {
        // Another tenant's key does not exist for this caller.
        if k.tenant != w.tenant {
            return Err(missing());
        }
        if k.role > w.role || !k.namespace.starts_with(w.scope) {
            return Err(crate::http::pipeline::auth::forbidden(format!(
                "key '{id}' is beyond this credential (a {} key for namespace '{}')",
                k.role,
                k.namespace.join(".")
            )));
        }
    }
    Ok(k)
}

pub async fn rotate_key(
    app: &App,
    id: &str,
    within: Option<&Within<'_>>,
    overlap: Duration,
    by: &str,
) -> ApiResult<(String, KeyEntry)> {
    change(app, |file| {
        find_key(file, id, within)?;
        file.rotate(id, overlap, by).map_err(ApiError::invalid)
    })
    .await
}

pub async fn revoke_key(app: &App, id: &str, within: Option<&Within<'_>>) -> ApiResult<Value> {
    let entry = change(app, |file| {
        find_key(file, id, within)?;
        file.revoke(id);
        Ok(find_key(file, id, within)?.clone())
    })
    .await?;
    Ok(key_view(&entry))
}
