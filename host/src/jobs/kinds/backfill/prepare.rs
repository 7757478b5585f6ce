//! What a backfill job computes with: the table at the job's version and the column's UDF,
//! resolved once per job (and per node that helps): a virtual column's Wasm or Python UDF, a
//! SQL computed column, or a registered Function (looked up in the registry, its secrets
//! revealed into its environment).

use std::sync::Arc;

use super::read_at;
use super::spec::BackfillSpec;
use crate::App;
use crate::error::{ApiError, ApiResult};
use crate::store::BackfillSource;
use crate::virtual_columns::{ColumnUdf, function};

/// The job's inputs: the table at its version and the column's UDF. Also the up-front
/// validation of a new request (missing column 404, not virtual 400, bad where 400, missing
/// version 404).
pub(super) async fn prepare(
    app: &Arc<App>,
    tenant: &str,
    location: &str,
    spec: &BackfillSpec,
) -> ApiResult<(BackfillSource, Arc<ColumnUdf>)> {
    let at = read_at(spec);
    let ds = app.store.read(location, &at).await?;
    crate::field_path::resolve(ds.schema(), &spec.column)?;
    // The column's UDF as defined when the job was asked for, which may be newer than the
    // version its inputs are read at.
    let ds = match spec.definition_version {
        Some(v) if v != spec.read_version => {
            let def_at = crate::store::At {
                branch: spec.branch.clone(),
                version: Some(v),
            };
            app.store.read(location, &def_at).await?
        }
        _ => ds,
    };
    let arrow = arrow_schema::Schema::from(ds.schema());
    // Preparing may compile the module: keep it off the async workers.
    let udf = match function::binding(&arrow, &spec.column)? {
        Some(binding) => {
            if spec
                .manifest
                .as_deref()
                .is_some_and(|m| !m.trim().is_empty())
            {
                return Err(ApiError::invalid(format!(
                    "manifest: column '{}' is computed by a registered Function",
                    spec.column
                )));
            }
            let f = &binding.function;
            let stored = app
                .functions
                .registry
                .get_bound(tenant, &f.namespace_path, &f.name, &f.version)
                .await?;
            let env = app.functions.environment(tenant, &stored).await?;
            tokio::task::block_in_place(|| {
                app.virtual_columns
                    .function_udf(&arrow, &spec.column, &binding, &stored, env)
            })?
        }
        None => tokio::task::block_in_place(|| {
            app.virtual_columns
                .column_udf(ds.schema(), &spec.column, spec.manifest.as_deref())
        })?,
    };
    let source = app
        .store
        .backfill_source(
            location,
            &at,
            &spec.column,
            udf.input_columns(),
            &spec.filter,
        )
        .await?;
    Ok((source, Arc::new(udf)))
}
