//! `/v1/table/{id}/{add_columns,alter_columns,drop_columns}`: schema changes. SQL-expression
//! columns go straight to the store; virtual (UDF) columns go through `virtual_columns`.

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;

use super::pipeline::extract::{Common, JsonBody, JsonOrArrow, Target};
use super::transactions::committed;
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};
use crate::json_types::parse_data_type;
use crate::store::Alteration;
use crate::virtual_columns::declared;
use crate::virtual_columns::{AlterVirtual, NewVirtual};

#[derive(Deserialize, schemars::JsonSchema)]
pub struct NewColumn {
    name: String,
    expression: Option<String>,
    virtual_column: Option<NewVirtual>,
    /// The lancedb client's computed column: a SQL expression, declared all-null and filled
    /// by `backfill_column`.
    computed: Option<String>,
    /// The lancedb client's Function column: an output of the request's `function` binding.
    #[serde(default)]
    all_null: bool,
}

#[derive(Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct AddBody {
    #[serde(flatten)]
    common: Common,
    new_columns: Vec<NewColumn>,
    /// The Function binding of the `all_null` columns (the lancedb client's declaration).
    function: Option<Value>,
}

/// What one add_columns request adds: columns of one kind only.
enum Adding {
    Sql(Vec<(String, String)>),
    Virtual(Vec<(String, NewVirtual)>),
    Computed(Vec<(String, String)>),
    Function(Vec<String>),
}

fn classify(columns: Vec<NewColumn>, function: bool) -> ApiResult<Adding> {
    let mut sql = Vec::new();
    let mut virtuals = Vec::new();
    let mut computed = Vec::new();
    let mut outputs = Vec::new();
    for col in columns {
        if col.name.is_empty() {
            return Err(ApiError::invalid("a new column needs a name"));
        }
        let expression = col.expression.filter(|e| !e.is_empty());
        let given = [
            expression.is_some(),
            col.virtual_column.is_some(),
            col.computed.is_some(),
            col.all_null,
        ];
        match given.iter().filter(|g| **g).count() {
            1 => {}
            0 => {
                return Err(ApiError::invalid(format!(
                    "column '{}' needs an expression, a virtual_column, computed or all_null",
                    col.name
                )));
            }
            _ => {
                return Err(ApiError::invalid(format!(
                    "column '{}' has more than one of expression, virtual_column, computed, all_null",
                    col.name
                )));
            }
        }
        if let Some(e) = expression {
            sql.push((col.name, e));
        } else if let Some(v) = col.virtual_column {
            virtuals.push((col.name, v));
        } else if let Some(c) = col.computed {
            computed.push((col.name, c));
        } else {
            outputs.push(col.name);
        }
    }
    if function == outputs.is_empty() {
        return Err(ApiError::invalid(
            "function: all_null columns come with a function binding, and only they",
        ));
    }
    let kinds = [
        !sql.is_empty(),
        !virtuals.is_empty(),
        !computed.is_empty(),
        !outputs.is_empty(),
    ];
    if kinds.iter().filter(|k| **k).count() > 1 {
        return Err(ApiError::invalid(
            "add SQL-expression, virtual, computed and function columns in separate requests",
        ));
    }
    Ok(if !virtuals.is_empty() {
        Adding::Virtual(virtuals)
    } else if !computed.is_empty() {
        Adding::Computed(computed)
    } else if !outputs.is_empty() {
        Adding::Function(outputs)
    } else {
        Adding::Sql(sql)
    })
}

pub async fn add(
    State(app): State<AppState>,
    target: Target,
    body: JsonOrArrow<AddBody>,
) -> ApiResult<Response> {
    let body = match body {
        JsonOrArrow::Json(body) => body,
        JsonOrArrow::Arrow(bytes) => return add_null(&app, &target, &bytes).await,
    };
    target.check_body_id(&body.common.id)?;
    if body.new_columns.is_empty() {
        return Err(ApiError::invalid(
            "new_columns must name at least one column",
        ));
    }
    let location = target.catalog.locate(&target.id).await?;
    let branch = target.branch(&body.common.branch);
    let branch = branch.as_deref();
    let version = match classify(body.new_columns, body.function.is_some())? {
        Adding::Sql(sql) => app.store.add_sql_columns(&location, branch, sql).await?,
        Adding::Virtual(v) => {
            app.virtual_columns
                .add(&app.store, target.caller.tenant(), &location, branch, v)
                .await?
        }
        Adding::Computed(c) => declared::add_computed(&app.store, &location, branch, &c).await?,
        Adding::Function(names) => {
            let caller = &target.caller;
            crate::virtual_columns::function::declare(
                &app.store,
                &app.functions.registry,
                caller.tenant(),
                |ns| caller.resolve(ns),
                &location,
                branch,
                &names,
                body.function.unwrap_or_default(),
            )
            .await?
        }
    };
    Ok(reply(committed(&target.id, branch, version)))
}

/// Columns null in every row, from an Arrow IPC schema (the lancedb client's
/// `add_columns(pa.field(...))`).
async fn add_null(app: &AppState, target: &Target, bytes: &[u8]) -> ApiResult<Response> {
    let schema = super::arrow_body::ArrowBody::decode(bytes)?.schema;
    if schema.fields().is_empty() {
        return Err(ApiError::invalid("the Arrow schema names no column"));
    }
    let location = target.catalog.locate(&target.id).await?;
    let branch = target.branch(&None);
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    let version = app
        .store
        .add_null_columns(&location, branch.as_deref(), fields)
        .await?;
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
            .alter(
                &app.store,
                target.caller.tenant(),
                &location,
                branch.as_deref(),
                virtuals,
            )
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
    crate::virtual_columns::check_group_drop(
        &arrow_schema::Schema::from(ds.schema()),
        &body.columns,
    )?;
    let version = app
        .store
        .drop_columns(&location, branch.as_deref(), body.columns)
        .await?;
    Ok(reply(committed(&target.id, branch.as_deref(), version)))
}
