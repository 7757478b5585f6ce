//! `/v1/table/{id}/{add_columns,alter_columns,drop_columns}`: schema changes. SQL-expression
//! columns go straight to the store; virtual (UDF) columns go through `virtual_columns`.

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;

use super::extract::{Common, JsonBody, Target};
use super::transactions::committed;
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};
use crate::json_types::parse_data_type;
use crate::store::Alteration;
use crate::virtual_columns::{AlterVirtual, NewVirtual};

#[derive(Deserialize, schemars::JsonSchema)]
pub struct NewColumn {
    name: String,
    expression: Option<String>,
    virtual_column: Option<NewVirtual>,
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct AddBody {
    #[serde(flatten)]
    common: Common,
    new_columns: Vec<NewColumn>,
}

pub async fn add(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<AddBody>,
) -> ApiResult<Response> {
    target.check_body_id(&body.common.id)?;
    if body.new_columns.is_empty() {
        return Err(ApiError::invalid(
            "new_columns must name at least one column",
        ));
    }
    let location = target.catalog.locate(&target.id).await?;
    let branch = target.branch(&body.common.branch);
    let mut sql = Vec::new();
    let mut virtuals = Vec::new();
    for col in body.new_columns {
        if col.name.is_empty() {
            return Err(ApiError::invalid("a new column needs a name"));
        }
        match (col.expression.filter(|e| !e.is_empty()), col.virtual_column) {
            (Some(expr), None) => sql.push((col.name, expr)),
            (None, Some(v)) => virtuals.push((col.name, v)),
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid(format!(
                    "column '{}' has both an expression and a virtual_column",
                    col.name
                )));
            }
            (None, None) => {
                return Err(ApiError::invalid(format!(
                    "column '{}' needs an expression or a virtual_column",
                    col.name
                )));
            }
        }
    }
    if !sql.is_empty() && !virtuals.is_empty() {
        return Err(ApiError::invalid(
            "add SQL-expression columns and virtual columns in separate requests",
        ));
    }
    let version = if virtuals.is_empty() {
        app.store
            .add_sql_columns(&location, branch.as_deref(), sql)
            .await?
    } else {
        app.virtual_columns
            .add(&app.store, &location, branch.as_deref(), virtuals)
            .await?
    };
    Ok(reply(committed(&target.id, branch.as_deref(), version)))
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct AlterEntry {
    path: String,
    rename: Option<String>,
    nullable: Option<bool>,
    data_type: Option<Value>,
    virtual_column: Option<AlterVirtual>,
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct AlterBody {
    #[serde(flatten)]
    common: Common,
    alterations: Vec<AlterEntry>,
}

pub async fn alter(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<AlterBody>,
) -> ApiResult<Response> {
    target.check_body_id(&body.common.id)?;
    if body.alterations.is_empty() {
        return Err(ApiError::invalid(
            "alterations must name at least one change",
        ));
    }
    let location = target.catalog.locate(&target.id).await?;
    let branch = target.branch(&body.common.branch);
    let mut plain = Vec::new();
    let mut virtuals = Vec::new();
    for a in body.alterations {
        crate::field_path::parse(&a.path)?;
        if let Some(v) = a.virtual_column {
            if a.rename.is_some() || a.nullable.is_some() || a.data_type.is_some() {
                return Err(ApiError::invalid(format!(
                    "alteration of '{}' mixes a virtual_column change with other changes",
                    a.path
                )));
            }
            virtuals.push((a.path, v));
            continue;
        }
        let data_type = a.data_type.as_ref().map(parse_data_type).transpose()?;
        if a.rename.is_none() && a.nullable.is_none() && data_type.is_none() {
            return Err(ApiError::invalid(format!(
                "alteration of '{}' changes nothing",
                a.path
            )));
        }
        plain.push(Alteration {
            path: a.path,
            rename: a.rename,
            nullable: a.nullable,
            data_type,
        });
    }
    if !plain.is_empty() && !virtuals.is_empty() {
        return Err(ApiError::invalid(
            "alter virtual columns and other columns in separate requests",
        ));
    }
    let ds = app.store.latest(&location, branch.as_deref()).await?;
    for a in &plain {
        crate::field_path::resolve(ds.schema(), &a.path)?;
    }
    let version = if virtuals.is_empty() {
        app.store
            .alter_columns(&location, branch.as_deref(), plain)
            .await?
    } else {
        app.virtual_columns
            .alter(&app.store, &location, branch.as_deref(), virtuals)
            .await?
    };
    Ok(reply(committed(&target.id, branch.as_deref(), version)))
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct DropBody {
    #[serde(flatten)]
    common: Common,
    columns: Vec<String>,
}

pub async fn drop(
    State(app): State<AppState>,
    target: Target,
    JsonBody(body): JsonBody<DropBody>,
) -> ApiResult<Response> {
    let location = app.table(&target, &body.common.id).await?;
    let branch = target.branch(&body.common.branch);
    let ds = app.store.latest(&location, branch.as_deref()).await?;
    for c in &body.columns {
        crate::field_path::resolve(ds.schema(), c)?;
    }
    let version = app
        .store
        .drop_columns(&location, branch.as_deref(), body.columns)
        .await?;
    Ok(reply(committed(&target.id, branch.as_deref(), version)))
}
