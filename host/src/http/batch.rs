//! `POST /v1/table/batch-commit` (spec 4.15): declare_table, deregister_table,
//! create_table_version and delete_table_versions applied all-or-nothing.
//!
//! This file parses the operations (ids resolved for the caller, credentials dropped) and
//! renders the outcome; the batch itself is `Catalog::commit_batch` (`catalog/batch.rs`),
//! which keeps it all-or-nothing even when the server is killed half-way: the validated batch
//! is written as an intent record under the tenant's root before anything is applied, and an
//! interrupted one is rolled back (or, once its irreversible version deletions have started,
//! forward) before the tenant's catalog is used again. A conflict with a concurrent writer (a
//! table declared meanwhile, a version created meanwhile) is a 409 and leaves nothing applied.

use axum::extract::State;
use axum::response::Response;
use lance_namespace::ErrorCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::pipeline::auth::Caller;
use super::pipeline::extract::JsonBody;
use super::{AppState, reply};
use crate::catalog::Catalog;
use crate::catalog::batch::{BatchFailure, BatchOp, Stage};
use crate::error::{ApiError, ApiResult};

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct BatchBody {
    #[schemars(with = "Vec<super::openapi::BatchOperation>")]
    operations: Vec<Value>,
}

fn parse_op(i: usize, v: &Value, caller: &Caller) -> ApiResult<BatchOp> {
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
        "declare_table" => BatchOp::DeclareTable(serde_json::from_value(body).map_err(bad)?),
        "deregister_table" => BatchOp::DeregisterTable(serde_json::from_value(body).map_err(bad)?),
        "create_table_version" => {
            BatchOp::CreateTableVersion(serde_json::from_value(body).map_err(bad)?)
        }
        "delete_table_versions" => {
            BatchOp::DeleteTableVersions(serde_json::from_value(body).map_err(bad)?)
        }
        other => {
            return Err(ApiError::invalid(format!(
                "operations[{i}]: unknown operation '{other}'"
            )));
        }
    };
    let mut op = op;
    let id = match &mut op {
        BatchOp::DeclareTable(r) => &mut r.id,
        BatchOp::DeregisterTable(r) => &mut r.id,
        BatchOp::CreateTableVersion(r) => &mut r.id,
        BatchOp::DeleteTableVersions(r) => &mut r.id,
        BatchOp::RegisterTable(r) => &mut r.id,
    };
    match id {
        Some(given) if !given.is_empty() => *given = caller.resolve(given)?,
        _ => {
            return Err(ApiError::invalid(format!(
                "operations[{i}].{key} needs an 'id'"
            )));
        }
    }
    if let BatchOp::DeclareTable(r) = &op {
        super::tables::storable(r.id.as_deref().unwrap_or_default())?;
    }
    Ok(op)
}

/// What the batch's transaction id records of each operation (see `transactions`).
fn batch_transaction(ops: &[BatchOp]) -> Vec<super::transactions::BatchTxOp> {
    ops.iter()
        .map(|op| {
            let (o, b, v) = match op {
                BatchOp::DeclareTable(_) => ("declare_table", None, None),
                BatchOp::DeregisterTable(_) => ("deregister_table", None, None),
                BatchOp::CreateTableVersion(r) => (
                    "create_table_version",
                    r.branch.clone(),
                    u64::try_from(r.version).ok(),
                ),
                BatchOp::DeleteTableVersions(_) => ("delete_table_versions", None, None),
                BatchOp::RegisterTable(_) => ("register_table", None, None),
            };
            super::transactions::BatchTxOp {
                o: o.to_string(),
                t: op.id().to_vec(),
                b,
                v,
            }
        })
        .collect()
}

/// `Catalog::commit_batch`; then this node's next read of every table the batch named checks
/// the store, whatever the read consistency interval: the batch committed through the
/// namespace, not through the store's cache, and a node always reads its own writes.
pub(super) async fn commit_batch(
    app: &AppState,
    catalog: &Catalog,
    ops: Vec<BatchOp>,
) -> Result<Vec<Value>, BatchFailure> {
    let ids: Vec<Vec<String>> = ops.iter().map(|op| op.id().to_vec()).collect();
    let outcome = catalog.commit_batch(ops).await;
    for id in ids {
        if let Ok(location) = catalog.locate(&id).await {
            app.store.recheck(&location);
        }
    }
    outcome
}

pub async fn commit(
    State(app): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<BatchBody>,
) -> ApiResult<Response> {
    if body.operations.is_empty() {
        return Err(ApiError::invalid("operations must not be empty"));
    }
    let ops: Vec<BatchOp> = body
        .operations
        .iter()
        .enumerate()
        .map(|(i, v)| parse_op(i, v, &caller))
        .collect::<ApiResult<_>>()?;
    let tx = batch_transaction(&ops);
    match commit_batch(&app, &caller.catalog, ops).await {
        Ok(results) => Ok(reply(
            json!({ "results": results, "transaction_id": super::transactions::batch_transaction_id(&tx) }),
        )),
        Err(failure) => Err(render(failure, "batch-commit")),
    }
}

/// A failed batch as the client's answer; `what` names the request (`batch-commit`, or the
/// version operation a one-operation batch stands for).
pub(super) fn render(BatchFailure { error, op, stage }: BatchFailure, what: &str) -> ApiError {
    let which = match op {
        Some(i) if what == "batch-commit" => format!("batch-commit operation {i}"),
        Some(i) if what == "version/batch-create" => format!("{what} entry {i}"),
        _ => what.to_string(),
    };
    match stage {
        // Refused by the checks: the error as it is (e.g. 404 for a missing table).
        Stage::Check => error,
        Stage::Apply => match error.code {
            ErrorCode::TableAlreadyExists
            | ErrorCode::ConcurrentModification
            | ErrorCode::TableVersionNotFound
                if error.status.is_client_error() =>
            {
                ApiError::conflict(format!(
                    "{which} conflicted; nothing was applied: {}",
                    error.message
                ))
            }
            _ => ApiError {
                message: format!("{which} failed; nothing was applied: {}", error.message),
                ..error
            },
        },
        Stage::Delete => ApiError {
            message: format!(
                "{which} failed after the batch was committed (its other operations are applied; the remaining version deletions are retried before the next batch-commit and at start-up): {}",
                error.message
            ),
            ..error
        }
        .with_status(axum::http::StatusCode::INTERNAL_SERVER_ERROR),
    }
}
