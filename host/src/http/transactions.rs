//! `/v1/transaction/{id}/{describe,alter}` (spec: a transaction has a status and properties).
//!
//! Lancet's transactions are of two kinds:
//! - a **write** (insert, merge_insert, update, delete, restore...) commits synchronously, so
//!   its transaction has `Succeeded` by the time its id is known. Its id names the table,
//!   branch and version it made (`tx-` + base64url of those), so describing it needs no state
//!   of its own: the version is looked up, with lance's transaction record of it (operation,
//!   uuid) as properties. It cannot be altered (a committed version is immutable).
//! - a **batch** (batch-commit): committed synchronously too, all or nothing. Its id (`txb-` +
//!   base64url) lists each operation (its kind, table, and for a new version the version), so
//!   describing it checks the versions it made still exist; it cannot be altered either.
//! - a **job** (backfill, optimize): its id is the job id. Its status follows the job
//!   (`Running`, `Succeeded`, `Failed`, `Canceled`); `alter` can cancel it (status
//!   `Canceled`) and set or unset properties, kept in the job's record.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::response::Response;
use base64::Engine;
use lance_namespace::ErrorCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::pipeline::auth::Caller;
use super::pipeline::extract::JsonBody;
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};
use crate::jobs::transaction::{Alteration, OnConflict};
use crate::store::At;

/// What a write transaction id encodes.
#[derive(Serialize, Deserialize)]
struct WriteTx {
    /// The table's id in the tenant's catalog.
    t: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    b: Option<String>,
    v: u64,
}

/// The answer of a write that committed `version`: the version and its transaction id.
pub fn committed(table: &[String], branch: Option<&str>, version: u64) -> serde_json::Value {
    serde_json::json!({
        "version": version,
        "transaction_id": write_transaction_id(table, branch, version),
    })
}

/// The transaction id of a write that made `version` of `table` (`branch`).
pub fn write_transaction_id(table: &[String], branch: Option<&str>, version: u64) -> String {
    let tx = WriteTx {
        t: table.to_vec(),
        b: branch.map(str::to_string),
        v: version,
    };
    let bytes = serde_json::to_vec(&tx).unwrap_or_default();
    format!(
        "tx-{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// One operation of a batch transaction id.
#[derive(Serialize, Deserialize)]
pub struct BatchTxOp {
    /// `declare_table`, `deregister_table`, `create_table_version`, `delete_table_versions`.
    pub o: String,
    pub t: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b: Option<String>,
    /// The version a `create_table_version` made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v: Option<u64>,
}

/// The transaction id of a committed batch of `ops`.
pub fn batch_transaction_id(ops: &[BatchTxOp]) -> String {
    let bytes = serde_json::to_vec(ops).unwrap_or_default();
    format!(
        "txb-{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// A batch transaction's status and properties: every table it names must be the caller's,
/// and every version it made must still exist.
async fn describe_batch(app: &AppState, caller: &Caller, id: &str) -> ApiResult<Value> {
    let ops: Vec<BatchTxOp> = id
        .strip_prefix("txb-")
        .and_then(|raw| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(raw)
                .ok()
        })
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .filter(|ops: &Vec<BatchTxOp>| !ops.is_empty())
        .ok_or_else(|| not_found(id))?;
    let mut properties = HashMap::from([("operations".to_string(), ops.len().to_string())]);
    for (i, op) in ops.iter().enumerate() {
        if caller.resolve(&caller.unresolve(&op.t)).ok().as_ref() != Some(&op.t) {
            return Err(not_found(id));
        }
        let table = caller.unresolve(&op.t).join("$");
        let mut line = format!("{} {table}", op.o);
        if let Some(v) = op.v {
            made(app, caller, id, &op.t, &op.b, v).await?;
            line = format!("{line} version {v}");
        }
        properties.insert(format!("operation.{i}"), line);
    }
    Ok(json!({ "status": "Succeeded", "properties": properties }))
}

/// Version `version` of `table` (`branch`), which transaction `id` made; 404 (as the
/// transaction) when it is gone.
async fn made(
    app: &AppState,
    caller: &Caller,
    id: &str,
    table: &[String],
    branch: &Option<String>,
    version: u64,
) -> ApiResult<std::sync::Arc<lance::Dataset>> {
    let location = caller
        .catalog
        .locate(table)
        .await
        .map_err(|_| not_found(id))?;
    let at = At {
        branch: branch.clone(),
        version: Some(version),
    };
    app.store
        .read(&location, &at)
        .await
        .map_err(|_| not_found(id))
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::TransactionNotFound,
        format!("transaction not found: {id}"),
    )
}

fn decode(id: &str) -> Option<WriteTx> {
    let raw = id.strip_prefix("tx-")?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(raw)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The status and properties of a write transaction: the version it made must still exist.
async fn describe_write(app: &AppState, caller: &Caller, id: &str) -> ApiResult<Value> {
    let tx = decode(id).ok_or_else(|| not_found(id))?;
    // The id is the client's to forge: the table it names must be one this caller may read
    // (inside its database and its credential's namespace), else it does not exist for it.
    if caller.resolve(&caller.unresolve(&tx.t)).ok().as_ref() != Some(&tx.t) {
        return Err(not_found(id));
    }
    let ds = made(app, caller, id, &tx.t, &tx.b, tx.v).await?;
    let mut properties = HashMap::from([
        ("table".to_string(), caller.unresolve(&tx.t).join("$")),
        ("version".to_string(), tx.v.to_string()),
        (
            "branch".to_string(),
            tx.b.clone().unwrap_or_else(|| "main".into()),
        ),
    ]);
    if let Ok(Some(t)) = ds.read_transaction().await {
        properties.insert("operation".into(), t.operation.name().to_string());
        properties.insert("lance_transaction_uuid".into(), t.uuid.clone());
        properties.insert("read_version".into(), t.read_version.to_string());
    }
    Ok(json!({ "status": "Succeeded", "properties": properties }))
}

pub async fn describe(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(_body): JsonBody<Value>,
) -> ApiResult<Response> {
    if id.starts_with("job-") {
        let (status, properties) = app.jobs.transaction(caller.tenant(), &id).await?;
        return Ok(reply(json!({ "status": status, "properties": properties })));
    }
    if id.starts_with("txb-") {
        return Ok(reply(describe_batch(&app, &caller, &id).await?));
    }
    Ok(reply(describe_write(&app, &caller, &id).await?))
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct AlterBody {
    id: Option<Vec<String>>,
    identity: Option<Value>,
    context: Option<HashMap<String, Value>>,
    actions: Vec<Action>,
}

/// One action, in either spelling: the spec's generated clients send the model's camelCase
/// aliases (`setPropertyAction`), others snake_case.
#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Action {
    #[serde(alias = "setStatusAction")]
    set_status_action: Option<SetStatus>,
    #[serde(alias = "setPropertyAction")]
    set_property_action: Option<SetProperty>,
    #[serde(alias = "unsetPropertyAction")]
    unset_property_action: Option<UnsetProperty>,
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct SetStatus {
    status: Option<String>,
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct SetProperty {
    key: Option<String>,
    value: Option<String>,
    /// Overwrite (default), Fail or Skip when the key exists.
    mode: Option<String>,
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct UnsetProperty {
    key: Option<String>,
    /// Skip (default) or Fail when the key does not exist.
    mode: Option<String>,
}

fn mode(m: &Option<String>, default: OnConflict, allowed: &[OnConflict]) -> ApiResult<OnConflict> {
    let parsed = match m.as_deref().map(|s| s.to_ascii_lowercase()) {
        None => default,
        Some(s) if s == "overwrite" => OnConflict::Overwrite,
        Some(s) if s == "fail" => OnConflict::Fail,
        Some(s) if s == "skip" => OnConflict::Skip,
        Some(other) => return Err(ApiError::invalid(format!("unknown mode '{other}'"))),
    };
    if !allowed.contains(&parsed) {
        return Err(ApiError::invalid("mode not allowed for this action"));
    }
    Ok(parsed)
}

fn check(actions: Vec<Action>) -> ApiResult<Vec<Alteration>> {
    use OnConflict::*;
    if actions.is_empty() {
        return Err(ApiError::invalid("actions must not be empty"));
    }
    let mut out = Vec::new();
    for (i, a) in actions.into_iter().enumerate() {
        let n = [
            a.set_status_action.is_some(),
            a.set_property_action.is_some(),
            a.unset_property_action.is_some(),
        ]
        .iter()
        .filter(|x| **x)
        .count();
        if n != 1 {
            return Err(ApiError::invalid(format!(
                "actions[{i}] must carry exactly one of set_status_action, set_property_action, unset_property_action"
            )));
        }
        if let Some(s) = a.set_status_action {
            let status = s.status.unwrap_or_default().to_ascii_lowercase();
            if status != "canceled" && status != "cancelled" {
                return Err(ApiError::invalid(format!(
                    "actions[{i}]: a job's status can only be set to Canceled (the job sets the others), not '{status}'"
                )));
            }
            out.push(Alteration::Cancel);
        } else if let Some(p) = a.set_property_action {
            let key = p.key.filter(|k| !k.is_empty()).ok_or_else(|| {
                ApiError::invalid(format!("actions[{i}].set_property_action needs a key"))
            })?;
            out.push(Alteration::Set {
                key,
                value: p.value.unwrap_or_default(),
                on_exists: mode(&p.mode, Overwrite, &[Overwrite, Fail, Skip])?,
            });
        } else if let Some(u) = a.unset_property_action {
            let key = u.key.filter(|k| !k.is_empty()).ok_or_else(|| {
                ApiError::invalid(format!("actions[{i}].unset_property_action needs a key"))
            })?;
            out.push(Alteration::Unset {
                key,
                on_missing: mode(&u.mode, Skip, &[Skip, Fail])?,
            });
        }
    }
    Ok(out)
}

pub async fn alter(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<AlterBody>,
) -> ApiResult<Response> {
    let _ = (&body.id, &body.identity, &body.context);
    let alterations = check(body.actions)?;
    if !id.starts_with("job-") {
        if id.starts_with("txb-") {
            describe_batch(&app, &caller, &id).await?;
        } else {
            describe_write(&app, &caller, &id).await?;
        }
        return Err(ApiError::new(
            ErrorCode::InvalidTableState,
            format!("transaction {id} is a committed write: it cannot be altered"),
        ));
    }
    let (status, properties) = app.jobs.alter(caller.tenant(), &id, alterations).await?;
    Ok(reply(json!({ "status": status, "properties": properties })))
}
