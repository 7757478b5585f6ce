//! `POST /v1/table/batch-commit` (spec 4.15): declare_table, deregister_table,
//! create_table_version and delete_table_versions applied all-or-nothing.
//!
//! The catalog has no multi-object transaction, so atomicity is built here: the batch holds the
//! catalog commit lock (no other catalog change of this server interleaves), every operation is
//! validated before any is applied, operations are applied in request order except version
//! deletions (the one irreversible kind), which run last, and if any operation fails the ones
//! already applied are undone in reverse order. A conflict with a concurrent writer (a table
//! declared meanwhile, a version created meanwhile) is a 409 and leaves nothing applied.

use axum::response::Response;
use lance_namespace::ErrorCode;
use lance_namespace::models::{
    BatchDeleteTableVersionsRequest, CreateTableVersionRequest, DeclareTableRequest,
    DeregisterTableRequest, RegisterTableRequest,
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::auth::Caller;
use super::extract::JsonBody;
use super::{reply, to_json};
use crate::error::{ApiError, ApiResult};

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct BatchBody {
    operations: Vec<Value>,
}

enum Op {
    Declare(DeclareTableRequest),
    Deregister(DeregisterTableRequest),
    CreateVersion(CreateTableVersionRequest),
    DeleteVersions(BatchDeleteTableVersionsRequest),
}

enum Undo {
    Deregister(Vec<String>),
    Register {
        id: Vec<String>,
        location: String,
        properties: Option<std::collections::HashMap<String, String>>,
    },
    DeleteVersion {
        id: Vec<String>,
        branch: Option<String>,
        version: i64,
    },
}

fn parse_op(i: usize, v: &Value, caller: &Caller) -> ApiResult<Op> {
    let map = v
        .as_object()
        .ok_or_else(|| ApiError::invalid(format!("operations[{i}] must be an object")))?;
    let present: Vec<&String> = map.keys().filter(|k| !map[k.as_str()].is_null()).collect();
    if present.len() != 1 {
        return Err(ApiError::invalid(format!(
            "operations[{i}] must carry exactly one of declare_table, deregister_table, create_table_version, delete_table_versions"
        )));
    }
    let key = present[0].as_str();
    let mut body = map[key].clone();
    if let Some(o) = body.as_object_mut() {
        o.remove("context");
        o.remove("identity");
    }
    let bad = |e: serde_json::Error| ApiError::invalid(format!("operations[{i}].{key}: {e}"));
    let op = match key {
        "declare_table" => Op::Declare(serde_json::from_value(body).map_err(bad)?),
        "deregister_table" => Op::Deregister(serde_json::from_value(body).map_err(bad)?),
        "create_table_version" => Op::CreateVersion(serde_json::from_value(body).map_err(bad)?),
        "delete_table_versions" => Op::DeleteVersions(serde_json::from_value(body).map_err(bad)?),
        other => {
            return Err(ApiError::invalid(format!(
                "operations[{i}]: unknown operation '{other}'"
            )));
        }
    };
    let mut op = op;
    let id = match &mut op {
        Op::Declare(r) => &mut r.id,
        Op::Deregister(r) => &mut r.id,
        Op::CreateVersion(r) => &mut r.id,
        Op::DeleteVersions(r) => &mut r.id,
    };
    match id {
        Some(given) if !given.is_empty() => *given = caller.resolve(given)?,
        _ => {
            return Err(ApiError::invalid(format!(
                "operations[{i}].{key} needs an 'id'"
            )));
        }
    }
    Ok(op)
}

/// Validate an operation against the catalog before anything is applied.
async fn precheck(caller: &Caller, op: &Op) -> ApiResult<()> {
    match op {
        Op::Declare(r) => {
            let id = r.id.clone().unwrap_or_default();
            match caller.catalog.locate(&id).await {
                Ok(_) => Err(ApiError::new(
                    ErrorCode::TableAlreadyExists,
                    format!("table already exists: {}", id.join(".")),
                )),
                Err(e) if e.code == ErrorCode::TableNotFound => Ok(()),
                Err(e) => Err(e),
            }
        }
        Op::Deregister(r) => caller
            .catalog
            .locate(r.id.as_deref().unwrap_or_default())
            .await
            .map(|_| ()),
        Op::CreateVersion(r) => {
            if r.version < 0 || r.manifest_path.is_empty() {
                return Err(ApiError::invalid(
                    "create_table_version needs a version >= 0 and a manifest_path",
                ));
            }
            caller
                .catalog
                .locate(r.id.as_deref().unwrap_or_default())
                .await
                .map(|_| ())
        }
        Op::DeleteVersions(r) => {
            // Ranges are half-open, [start_version, end_version); a negative end means
            // "through the latest version".
            let bad = |rg: &lance_namespace::models::VersionRange| {
                rg.start_version < 0 || (rg.end_version >= 0 && rg.end_version < rg.start_version)
            };
            if r.ranges.iter().any(bad) {
                return Err(ApiError::invalid(
                    "delete_table_versions ranges are [start_version, end_version) with 0 <= start_version <= end_version, or end_version < 0 for through-latest",
                ));
            }
            caller
                .catalog
                .locate(r.id.as_deref().unwrap_or_default())
                .await
                .map(|_| ())
        }
    }
}

async fn apply(caller: &Caller, op: &Op, undo: &mut Vec<Undo>) -> ApiResult<Value> {
    let ns = caller.catalog.ns();
    match op {
        Op::Declare(r) => {
            let response = ns.declare_table(r.clone()).await.map_err(ApiError::from)?;
            let id = r.id.clone().unwrap_or_default();
            caller.catalog.invalidate(&id);
            undo.push(Undo::Deregister(id));
            Ok(json!({ "declare_table": to_json(response)? }))
        }
        Op::Deregister(r) => {
            let id = r.id.clone().unwrap_or_default();
            let response = ns
                .deregister_table(r.clone())
                .await
                .map_err(ApiError::from)?;
            caller.catalog.invalidate(&id);
            if let Some(location) = response.location.clone() {
                undo.push(Undo::Register {
                    id,
                    location,
                    properties: response.properties.clone(),
                });
            }
            Ok(json!({ "deregister_table": to_json(response)? }))
        }
        Op::CreateVersion(r) => {
            let response = ns
                .create_table_version(r.clone())
                .await
                .map_err(ApiError::from)?;
            undo.push(Undo::DeleteVersion {
                id: r.id.clone().unwrap_or_default(),
                branch: r.branch.clone(),
                version: r.version,
            });
            Ok(json!({ "create_table_version": to_json(response)? }))
        }
        Op::DeleteVersions(r) => {
            let response = ns
                .batch_delete_table_versions(r.clone())
                .await
                .map_err(ApiError::from)?;
            Ok(json!({ "delete_table_versions": to_json(response)? }))
        }
    }
}

async fn roll_back(caller: &Caller, undo: Vec<Undo>) {
    let ns = caller.catalog.ns();
    for step in undo.into_iter().rev() {
        let result = match step {
            Undo::Deregister(id) => {
                caller.catalog.invalidate(&id);
                ns.deregister_table(DeregisterTableRequest {
                    id: Some(id),
                    ..Default::default()
                })
                .await
                .map(|_| ())
            }
            Undo::Register {
                id,
                location,
                properties,
            } => {
                caller.catalog.invalidate(&id);
                let location = caller.catalog.relative_location(&location);
                ns.register_table(RegisterTableRequest {
                    id: Some(id),
                    location,
                    properties,
                    ..Default::default()
                })
                .await
                .map(|_| ())
            }
            Undo::DeleteVersion {
                id,
                branch,
                version,
            } => {
                let range = lance_namespace::models::VersionRange {
                    start_version: version,
                    end_version: version + 1,
                };
                let request = BatchDeleteTableVersionsRequest {
                    id: Some(id),
                    branch,
                    ranges: vec![range],
                    ..Default::default()
                };
                ns.batch_delete_table_versions(request).await.map(|_| ())
            }
        };
        if let Err(e) = result {
            tracing::error!(error = %e, "batch-commit roll-back step failed");
        }
    }
}

pub async fn commit(caller: Caller, JsonBody(body): JsonBody<BatchBody>) -> ApiResult<Response> {
    if body.operations.is_empty() {
        return Err(ApiError::invalid("operations must not be empty"));
    }
    let ops: Vec<Op> = body
        .operations
        .iter()
        .enumerate()
        .map(|(i, v)| parse_op(i, v, &caller))
        .collect::<ApiResult<_>>()?;
    let _guard = caller.catalog.commit_lock.lock().await;
    for op in &ops {
        precheck(&caller, op).await?;
    }
    let order: Vec<usize> = (0..ops.len())
        .filter(|&i| !matches!(ops[i], Op::DeleteVersions(_)))
        .chain((0..ops.len()).filter(|&i| matches!(ops[i], Op::DeleteVersions(_))))
        .collect();
    let mut results = vec![Value::Null; ops.len()];
    let mut undo = Vec::new();
    for i in order {
        match apply(&caller, &ops[i], &mut undo).await {
            Ok(r) => results[i] = r,
            Err(e) => {
                roll_back(&caller, undo).await;
                caller.catalog.invalidate_all();
                let e = match e.code {
                    ErrorCode::TableAlreadyExists
                    | ErrorCode::ConcurrentModification
                    | ErrorCode::TableVersionNotFound
                        if e.status.is_client_error() =>
                    {
                        ApiError::conflict(format!(
                            "batch-commit operation {i} conflicted; nothing was applied: {}",
                            e.message
                        ))
                    }
                    _ => ApiError {
                        message: format!(
                            "batch-commit operation {i} failed; nothing was applied: {}",
                            e.message
                        ),
                        ..e
                    },
                };
                return Err(e);
            }
        }
    }
    Ok(reply(json!({ "results": results })))
}
