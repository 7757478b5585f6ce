//! A virtual column's UDF, resolved once for a backfill job: the definition stored with the
//! table (optionally with another manifest for this job), prepared, and callable from
//! blocking threads on batches of its input columns.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use lancet_udf::{Limits, Manifest, OnError, PreparedUdf, Runtime};

use super::compute::pick;
use super::{DEFINITION_KEY, Definition, VirtualColumns, udf_error};
use crate::error::{ApiError, ApiResult};

/// The UDF that computes one virtual column.
pub struct ColumnUdf {
    runtime: Runtime,
    prepared: Arc<PreparedUdf>,
    limits: Limits,
    def: Definition,
    field: Field,
    /// The input columns' fields as the UDF receives them.
    inputs: Vec<Field>,
}

/// What one call produced.
pub struct Computed {
    pub values: ArrayRef,
    /// Rows set to null because the UDF failed on them (`on_error: null`).
    pub nulled: u64,
}

impl VirtualColumns {
    /// The UDF of top-level virtual column `column` in `schema`. `manifest` replaces the
    /// column's manifest for this job: its module must already be stored and it must produce
    /// the column's type. A column without a definition is `InvalidInput`.
    pub fn column_udf(
        &self,
        schema: &lance_core::datatypes::Schema,
        column: &str,
        manifest: Option<&str>,
    ) -> ApiResult<ColumnUdf> {
        let arrow = Schema::from(schema);
        let field = arrow.field_with_name(column).map_err(|_| {
            ApiError::invalid(format!(
                "'{column}' is not a top-level column; only virtual columns can be backfilled"
            ))
        })?;
        let def: Definition = field
            .metadata()
            .get(DEFINITION_KEY)
            .and_then(|t| serde_json::from_str(t).ok())
            .ok_or_else(|| {
                ApiError::invalid(format!(
                    "column '{column}' is not a virtual column (it has no UDF to backfill with)"
                ))
            })?;
        let manifest_text = manifest
            .filter(|m| !m.trim().is_empty())
            .unwrap_or(&def.manifest);
        let parsed = Manifest::parse(manifest_text).map_err(udf_error)?;
        self.runtime
            .store_module(&parsed, None)
            .map_err(udf_error)?;
        let prepared = self.runtime.prepare(&parsed).map_err(udf_error)?;
        let mut inputs = Vec::new();
        for name in &def.input_columns {
            let f = arrow.field_with_name(name).map_err(|_| {
                ApiError::invalid(format!(
                    "input column '{name}' of virtual column '{column}' no longer exists"
                ))
            })?;
            inputs.push(Field::new(name, f.data_type().clone(), true));
        }
        let udf = ColumnUdf {
            runtime: (*self.runtime).clone(),
            prepared,
            limits: self.limits.clone(),
            def,
            field: field.clone(),
            inputs,
        };
        // A zero-row call checks an overriding manifest produces the column's type.
        let empty = RecordBatch::new_empty(Arc::new(Schema::new(udf.inputs.clone())));
        udf.compute("definition", &empty)?;
        Ok(udf)
    }
}

impl ColumnUdf {
    pub fn input_columns(&self) -> &[String] {
        &self.def.input_columns
    }

    pub fn on_error_null(&self) -> bool {
        self.prepared.manifest().on_error == OnError::Null
    }

    /// The UDF's name, for messages.
    pub fn label(&self) -> &str {
        self.prepared.label()
    }

    /// Run the UDF for `tenant` over `batch` (which holds at least the input columns).
    /// Blocks for up to the call's time limit: call it from a blocking thread.
    pub fn compute(&self, tenant: &str, batch: &RecordBatch) -> ApiResult<Computed> {
        let mut arrays = Vec::with_capacity(self.inputs.len());
        for f in &self.inputs {
            arrays.push(batch.column_by_name(f.name()).cloned().ok_or_else(|| {
                ApiError::internal(format!("input column '{}' was not read", f.name()))
            })?);
        }
        let input = RecordBatch::try_new(Arc::new(Schema::new(self.inputs.clone())), arrays)
            .map_err(ApiError::from)?;
        let expected = self.expected_type();
        let out = self
            .runtime
            .invoke_with_stats(
                &self.prepared,
                tenant,
                &input,
                expected.as_ref(),
                &self.limits,
            )
            .map_err(udf_error)?;
        let values = pick(&out.array, &self.def.struct_field, &self.field)?;
        Ok(Computed {
            values,
            nulled: out.nulled_rows as u64,
        })
    }

    /// The type the whole UDF result must have (for multi-output UDFs it is a struct, which
    /// is only known from a call, so nothing is imposed).
    fn expected_type(&self) -> Option<DataType> {
        self.def
            .struct_field
            .is_empty()
            .then(|| self.field.data_type().clone())
    }
}
