//! Read-only SQL over a caller's tables: DataFusion plans and runs one `SELECT` (joins,
//! aggregates, window functions, parameters) over lance table providers. Table names resolve
//! through the caller's catalog (its database and namespace scope, see [`names`]), so a
//! statement can only ever see its own tenant's tables. Front ends (Flight SQL) hand in the
//! caller and stream what [`Prepared::execute`] answers.

mod embed;
pub mod listing;
pub mod names;
mod placeholders;

use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::{Stream, StreamExt};
use lance::datafusion::LanceTableProvider;
use lance::deps::datafusion::catalog::{MemoryCatalogProvider, MemorySchemaProvider};
use lance::deps::datafusion::common::ParamValues;
use lance::deps::datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use lance::deps::datafusion::execution::runtime_env::RuntimeEnvBuilder;
use lance::deps::datafusion::logical_expr::LogicalPlan;
use lance::deps::datafusion::prelude::{SessionConfig, SessionContext};
use lance::deps::datafusion::sql::parser::Statement;

use crate::App;
use crate::error::{ApiError, ApiResult};
use crate::http::pipeline::auth::Caller;
use crate::store::At;
use names::{Pin, TableName};

/// Bounds on one statement; one over a bound ends with an error and the server serves on.
#[derive(Debug, Clone)]
pub struct Limits {
    /// DataFusion's memory pool for the statement (sorts, joins, aggregates); operators that
    /// could spill to disk do not (no spill directory): they fail with a clear error instead.
    pub memory_bytes: usize,
    /// Wall time from the first batch asked for to the last.
    pub timeout: Duration,
    /// Rows answered.
    pub max_rows: u64,
    /// Arrow bytes answered.
    pub max_bytes: u64,
}

/// A planned statement, ready to run (with parameters, if it has any).
pub struct Prepared {
    ctx: SessionContext,
    plan: LogicalPlan,
    limits: Limits,
}

/// Plans `sql` for `caller`: parses it (one query; anything else is a 400), finds every table
/// it names in the caller's catalog (an unqualified name in `default_namespace`, below the
/// caller's database), and plans it over them at the versions it asks for.
pub async fn prepare(
    app: &App,
    caller: &Caller,
    default_namespace: &[String],
    sql: &str,
    limits: &Limits,
) -> ApiResult<Prepared> {
    crate::sql_guard::check_depth(sql, "query")?;
    // No spilling: a statement over its memory fails instead of filling the server's disk.
    let no_spill = DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled);
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_limit(limits.memory_bytes, 1.0)
        .with_disk_manager_builder(no_spill)
        .build_arc()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    // Names are case-sensitive as the catalog's are; no information_schema (it would list
    // only what the statement registered, which says nothing useful).
    let config = SessionConfig::new().with_information_schema(false);
    let ctx = SessionContext::new_with_config_rt(config, runtime);
    // Only a statement that may call `embed` pays for listing the caller's models.
    if sql.to_ascii_lowercase().contains("embed") {
        let models = app.models.list(caller.tenant()).await?;
        ctx.register_udf(
            lance::deps::datafusion::logical_expr::ScalarUDF::new_from_impl(embed::Embed::new(
                caller.tenant(),
                app.models.clone(),
                models,
            )),
        );
    }
    let state = ctx.state();
    let mut statement = state
        .sql_to_statement(sql, &datafusion_common::config::Dialect::Generic)
        .map_err(|e| ApiError::invalid(format!("SQL: {e}")))?;
    read_only(&statement)?;
    if let Statement::Statement(s) = &mut statement {
        placeholders::number(s.as_mut())?;
    }
    let refs = state
        .resolve_table_references(&statement)
        .map_err(|e| ApiError::invalid(format!("SQL: {e}")))?;
    for r in refs {
        let mut written: Vec<String> = Vec::new();
        written.extend(r.catalog().map(str::to_string));
        written.extend(r.schema().map(str::to_string));
        written.push(r.table().to_string());
        let mut name = TableName::parse(written)?;
        if name.written.len() == 1 {
            name.id.splice(0..0, default_namespace.iter().cloned());
        }
        let id = caller.resolve(&name.id)?;
        register(app, caller, &ctx, &name, id, 0).await?;
    }
    let plan = ctx
        .state()
        .statement_to_plan(statement)
        .await
        .map_err(|e| plan_error(&e))?;
    Ok(Prepared {
        ctx,
        plan,
        limits: limits.clone(),
    })
}

/// Only queries (and EXPLAIN of one): DDL, DML, SET and the like change things or the session,
/// and Lancet's SQL is read-only.
fn read_only(statement: &Statement) -> ApiResult<()> {
    use sqlparser::ast::Statement as S;
    let ok = match statement {
        Statement::Statement(s) => match &**s {
            S::Query(_) => true,
            S::Explain { statement, .. } => matches!(**statement, S::Query(_)),
            _ => false,
        },
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "SQL is read-only here: one SELECT query (or EXPLAIN of one); \
             DDL and DML statements are refused",
        ))
    }
}

fn plan_error(e: &lance::deps::datafusion::error::DataFusionError) -> ApiError {
    let text = e.to_string();
    if text.contains("not found") && text.contains("table") {
        ApiError::new(
            lance_namespace::ErrorCode::TableNotFound,
            format!("SQL: {text}"),
        )
    } else {
        ApiError::invalid(format!("SQL: {text}"))
    }
}

/// Saved views inside saved views, at most.
const MAX_VIEW_DEPTH: usize = 8;

/// Registers table (or saved view) `id` of the caller under the name the statement wrote.
async fn register(
    app: &App,
    caller: &Caller,
    ctx: &SessionContext,
    name: &TableName,
    id: Vec<String>,
    depth: usize,
) -> ApiResult<()> {
    let location = match caller.catalog.locate(&id).await {
        Ok(location) => location,
        Err(e)
            if e.code == lance_namespace::ErrorCode::TableNotFound && name.pin == Pin::Latest =>
        {
            let views = crate::views::saved::SavedViews::new(caller.catalog.state());
            return match views.get(&id).await? {
                Some(view) => Box::pin(register_view(app, caller, ctx, name, view, depth)).await,
                None => Err(e),
            };
        }
        Err(e) => return Err(e),
    };
    let at = match &name.pin {
        Pin::Latest => At::new(None, None)?,
        Pin::Version(v) => At::new(None, Some(*v as i64))?,
        Pin::Branch(b) => At::new(Some(b.clone()), None)?,
        Pin::Tag(t) => {
            let tag = app.store.tag_contents(&location, t).await?;
            At::new(tag.branch, Some(tag.version as i64))?
        }
    };
    let ds = app.store.read(&location, &at).await?;
    add_table(
        ctx,
        &name.written,
        Arc::new(LanceTableProvider::new(ds, false, false)),
    )
}

/// A saved view (`view/create`) as a table: its query planned over its own tables, named from
/// the database it was made in, each of which the caller's credential must cover.
async fn register_view(
    app: &App,
    caller: &Caller,
    ctx: &SessionContext,
    name: &TableName,
    view: crate::views::saved::SavedView,
    depth: usize,
) -> ApiResult<()> {
    if depth >= MAX_VIEW_DEPTH {
        return Err(ApiError::invalid(format!(
            "view '{}' nests views more than {MAX_VIEW_DEPTH} deep",
            name.written.join(".")
        )));
    }
    // Planned in a context of its own, so its names cannot clash with the statement's.
    let inner = SessionContext::new_with_config_rt(ctx.copied_config(), ctx.runtime_env());
    for written in crate::views::saved::tables_read(&view.query)? {
        let table = TableName::parse(written)?;
        let mut id: Vec<String> = Some(view.default_database.clone())
            .filter(|d| !d.is_empty())
            .into_iter()
            .collect();
        id.extend(table.id.iter().cloned());
        if !caller.covers(&id) {
            return Err(crate::http::pipeline::auth::forbidden(format!(
                "view '{}' reads a table this credential does not cover",
                name.written.join(".")
            )));
        }
        Box::pin(register(app, caller, &inner, &table, id, depth + 1)).await?;
    }
    let plan = inner
        .state()
        .create_logical_plan(&view.query)
        .await
        .map_err(|e| plan_error(&e))?;
    let table = lance::deps::datafusion::catalog::view::ViewTable::new(plan, Some(view.query));
    add_table(ctx, &name.written, Arc::new(table))
}

/// Registers `provider` under `written` (`[table]`, `[schema, table]`, `[catalog, schema,
/// table]`), as the planner will look it up.
pub(crate) fn add_table(
    ctx: &SessionContext,
    written: &[String],
    provider: Arc<dyn lance::deps::datafusion::catalog::TableProvider>,
) -> ApiResult<()> {
    let internal =
        |e: lance::deps::datafusion::error::DataFusionError| ApiError::internal(e.to_string());
    let (catalog, schema, table) = match written {
        [t] => ("datafusion", "public", t),
        [s, t] => ("datafusion", s.as_str(), t),
        [c, s, t] => (c.as_str(), s.as_str(), t),
        _ => return Err(ApiError::invalid(format!("SQL: table name {written:?}"))),
    };
    if ctx.catalog(catalog).is_none() {
        ctx.register_catalog(catalog, Arc::new(MemoryCatalogProvider::new()));
    }
    let catalog = ctx.catalog(catalog).expect("registered above");
    if catalog.schema(schema).is_none() {
        catalog
            .register_schema(schema, Arc::new(MemorySchemaProvider::new()))
            .map_err(internal)?;
    }
    let schema = catalog.schema(schema).expect("registered above");
    if !schema.table_exist(table) {
        schema
            .register_table(table.clone(), provider)
            .map_err(internal)?;
    }
    Ok(())
}

impl Prepared {
    /// The schema of the answer.
    pub fn schema(&self) -> SchemaRef {
        Arc::new(self.plan.schema().as_arrow().clone())
    }

    /// The statement's parameters (`$1`, `$2`, ... or `?`), in order, with the types
    /// DataFusion inferred for them (`None` where it could not).
    pub fn parameters(&self) -> ApiResult<Vec<(String, Option<arrow_schema::DataType>)>> {
        let types = self
            .plan
            .get_parameter_types()
            .map_err(|e| ApiError::invalid(format!("SQL: {e}")))?;
        let mut params: Vec<_> = types.into_iter().collect();
        // `$10` after `$9`.
        params.sort_by_key(|(name, _)| {
            name.trim_start_matches('$')
                .parse::<u64>()
                .unwrap_or(u64::MAX)
        });
        Ok(params)
    }

    /// Runs the statement with `params` (one value per parameter, in order) and streams the
    /// answer, cut with an error at the first limit it crosses.
    pub async fn execute(
        self,
        params: Vec<datafusion_common::ScalarValue>,
    ) -> ApiResult<impl Stream<Item = ApiResult<RecordBatch>> + Send + 'static> {
        let plan = if params.is_empty() {
            self.plan
        } else {
            self.plan
                .with_param_values(ParamValues::List(
                    params.into_iter().map(Into::into).collect(),
                ))
                .map_err(|e| ApiError::invalid(format!("SQL parameters: {e}")))?
        };
        let frame = self
            .ctx
            .execute_logical_plan(plan)
            .await
            .map_err(|e| plan_error(&e))?;
        let stream = frame
            .execute_stream()
            .await
            .map_err(|e| ApiError::invalid(format!("SQL: {e}")))?;
        Ok(bounded(stream, self.limits))
    }
}

/// The answer cut at the limits: past a bound, one error and the end.
fn bounded(
    stream: lance::deps::datafusion::execution::SendableRecordBatchStream,
    limits: Limits,
) -> impl Stream<Item = ApiResult<RecordBatch>> + Send + 'static {
    struct State {
        stream: lance::deps::datafusion::execution::SendableRecordBatchStream,
        deadline: tokio::time::Instant,
        limits: Limits,
        rows: u64,
        bytes: u64,
        done: bool,
    }
    let state = State {
        stream,
        deadline: tokio::time::Instant::now() + limits.timeout,
        limits,
        rows: 0,
        bytes: 0,
        done: false,
    };
    futures::stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        let out = match tokio::time::timeout_at(s.deadline, s.stream.next()).await {
            Err(_) => Err(too_long(&s.limits)),
            Ok(None) => return None,
            Ok(Some(Err(e))) => Err(execution_error(&e)),
            Ok(Some(Ok(batch))) => {
                s.rows += batch.num_rows() as u64;
                s.bytes += batch.get_array_memory_size() as u64;
                if s.rows > s.limits.max_rows {
                    Err(ApiError::invalid(format!(
                        "the statement answers more than {} rows (the limit per statement): \
                         add a LIMIT or a narrower WHERE",
                        s.limits.max_rows
                    )))
                } else if s.bytes > s.limits.max_bytes {
                    Err(ApiError::invalid(format!(
                        "the statement answers more than {} bytes (the limit per statement)",
                        s.limits.max_bytes
                    )))
                } else {
                    Ok(batch)
                }
            }
        };
        s.done = out.is_err();
        Some((out, s))
    })
}

fn too_long(limits: &Limits) -> ApiError {
    ApiError::invalid(format!(
        "the statement ran longer than {} s (the limit per statement)",
        limits.timeout.as_secs()
    ))
}

fn execution_error(e: &lance::deps::datafusion::error::DataFusionError) -> ApiError {
    let text = e.to_string();
    if text.contains("Resources exhausted") {
        ApiError::invalid(format!(
            "the statement needs more memory than its limit: {text}"
        ))
    } else {
        ApiError::invalid(format!("SQL: {text}"))
    }
}
