//! What computes a column for a backfill job, resolved once per job: a virtual column's UDF
//! (the definition stored with the table, optionally with another manifest for this job,
//! prepared), or a computed column's SQL expression (`declared`); callable from blocking
//! threads on batches of its input columns.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use lancet_udf::{Limits, Manifest, OnError, PreparedPython, PreparedUdf, RowFailure, Runtime};

use super::compute::pick;
use super::declared::{self, SqlRule};
use super::{DEFINITION_KEY, Definition, VirtualColumns, udf_error};
use crate::error::{ApiError, ApiResult};

/// What computes one column.
pub struct ColumnUdf {
    engine: Engine,
    field: Field,
}

enum Engine {
    Wasm(Box<WasmUdf>),
    Python(Box<PythonUdf>),
    Sql(SqlRule),
    Model(Box<ModelUdf>),
    Native(Box<super::native::NativeUdf>),
    NativeFunction(Box<super::native_function::NativeFunction>),
}

/// An embedding column: its model, called through the server's registry.
struct ModelUdf {
    embedder: Arc<dyn super::embedding::Embedder>,
    model: super::embedding::ModelRef,
    /// The one text input column.
    input_columns: Vec<String>,
    rows_per_call: usize,
}

pub(super) struct PythonUdf {
    pub(super) runtime: Runtime,
    pub(super) prepared: Arc<PreparedPython>,
    pub(super) limits: Limits,
    pub(super) input_columns: Vec<String>,
    /// The input columns' fields as the function receives them.
    pub(super) inputs: Vec<Field>,
    /// What the function's result is converted to (a struct for multi-output UDFs).
    pub(super) result_type: DataType,
    /// The struct child this column takes from the result; empty = the whole result.
    pub(super) struct_field: String,
    /// A registered Function's result may differ from the column in nullability inside
    /// nested types only: cast rather than refused.
    pub(super) cast: bool,
    /// Positions in `inputs` of parameters that take no null (see [`super::strict`]).
    pub(super) strict: Vec<usize>,
}

struct WasmUdf {
    runtime: Runtime,
    prepared: Arc<PreparedUdf>,
    limits: Limits,
    def: Definition,
    /// The input columns' fields as the UDF receives them.
    inputs: Vec<Field>,
}

/// What one call produced.
pub struct Computed {
    pub values: ArrayRef,
    /// Rows set to null because the UDF failed on them (`on_error: null`).
    pub nulled: u64,
    /// Which rows (offsets into the call's batch) and why.
    pub failures: Vec<RowFailure>,
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
        match declared::kind(field) {
            Some("sql") => {
                if manifest.is_some_and(|m| !m.trim().is_empty()) {
                    return Err(ApiError::invalid(format!(
                        "manifest: column '{column}' is a SQL computed column, not a UDF"
                    )));
                }
                return Ok(ColumnUdf {
                    engine: Engine::Sql(declared::sql_rule(&arrow, field)?),
                    field: field.clone(),
                });
            }
            Some(kind) => {
                // Function columns are resolved against the registry first (`function_udf`).
                return Err(ApiError::invalid(format!(
                    "column '{column}' is a lancedb {kind} column this server cannot compute"
                )));
            }
            None => {}
        }
        let def: Definition = field
            .metadata()
            .get(DEFINITION_KEY)
            .and_then(|t| serde_json::from_str(t).ok())
            .ok_or_else(|| {
                ApiError::invalid(format!(
                    "column '{column}' is not a virtual column (it has no UDF to backfill with)"
                ))
            })?;
        let mut inputs = Vec::new();
        for name in &def.input_columns {
            let f = arrow.field_with_name(name).map_err(|_| {
                ApiError::invalid(format!(
                    "input column '{name}' of virtual column '{column}' no longer exists"
                ))
            })?;
            inputs.push(Field::new(name, f.data_type().clone(), true));
        }
        if let Some(model) = &def.model {
            if manifest.is_some_and(|m| !m.trim().is_empty()) {
                return Err(ApiError::invalid(format!(
                    "manifest: column '{column}' is an embedding column; its model computes it"
                )));
            }
            let embedder = self
                .embedder
                .clone()
                .ok_or_else(|| ApiError::invalid("this server runs no embedding models"))?;
            return Ok(ColumnUdf {
                engine: Engine::Model(Box::new(ModelUdf {
                    embedder,
                    model: model.clone(),
                    input_columns: def.input_columns.clone(),
                    rows_per_call: self.model_rows,
                })),
                field: field.clone(),
            });
        }
        if let Some(native) = &def.native {
            if manifest.is_some_and(|m| !m.trim().is_empty()) {
                return Err(ApiError::invalid(format!(
                    "manifest: column '{column}' is a native Python UDF; alter the column to change it"
                )));
            }
            let output = super::result_type(&arrow, &def, field)?;
            let udf = self.native_udf(&def, native, inputs, output)?;
            return Ok(ColumnUdf {
                engine: Engine::Native(Box::new(udf)),
                field: field.clone(),
            });
        }
        if let Some(python) = &def.python {
            if manifest.is_some_and(|m| !m.trim().is_empty()) {
                return Err(ApiError::invalid(format!(
                    "manifest: column '{column}' is a Python UDF; alter the column to change it"
                )));
            }
            let spec = python.spec(&def.udf_name)?;
            let prepared = self.runtime.prepare_python(&spec).map_err(udf_error)?;
            return Ok(ColumnUdf::python(
                PythonUdf {
                    runtime: (*self.runtime).clone(),
                    prepared,
                    limits: self.limits.clone(),
                    result_type: super::result_type(&arrow, &def, field)?,
                    input_columns: def.input_columns.clone(),
                    struct_field: def.struct_field.clone(),
                    inputs,
                    cast: false,
                    strict: Vec::new(),
                },
                field.clone(),
            ));
        }
        let manifest_text = manifest
            .filter(|m| !m.trim().is_empty())
            .unwrap_or(&def.manifest);
        let parsed = Manifest::parse(manifest_text).map_err(udf_error)?;
        self.runtime
            .store_module(&parsed, None)
            .map_err(udf_error)?;
        let prepared = self.runtime.prepare(&parsed).map_err(udf_error)?;
        let udf = ColumnUdf {
            engine: Engine::Wasm(Box::new(WasmUdf {
                runtime: (*self.runtime).clone(),
                prepared,
                limits: self.limits.clone(),
                def,
                inputs: inputs.clone(),
            })),
            field: field.clone(),
        };
        // A zero-row call checks an overriding manifest produces the column's type.
        let empty = RecordBatch::new_empty(Arc::new(Schema::new(inputs)));
        udf.compute("definition", &empty)?;
        Ok(udf)
    }
}

impl ColumnUdf {
    pub(super) fn native_function(
        udf: super::native_function::NativeFunction,
        field: Field,
    ) -> Self {
        Self {
            engine: Engine::NativeFunction(Box::new(udf)),
            field,
        }
    }

    pub(super) fn python(udf: PythonUdf, field: Field) -> Self {
        Self {
            engine: Engine::Python(Box::new(udf)),
            field,
        }
    }

    /// The native column's function, if this is one.
    pub(super) fn native(&self) -> Option<&super::native::NativeUdf> {
        match &self.engine {
            Engine::Native(n) => Some(n),
            _ => None,
        }
    }

    /// The column computed.
    pub(super) fn field(&self) -> &Field {
        &self.field
    }

    pub fn input_columns(&self) -> &[String] {
        match &self.engine {
            Engine::Wasm(w) => &w.def.input_columns,
            Engine::Python(p) => &p.input_columns,
            Engine::Sql(rule) => rule.inputs(),
            Engine::Model(m) => &m.input_columns,
            Engine::Native(n) => &n.input_columns,
            Engine::NativeFunction(n) => &n.input_columns,
        }
    }

    pub fn on_error_null(&self) -> bool {
        match &self.engine {
            Engine::Wasm(w) => w.prepared.manifest().on_error == OnError::Null,
            Engine::Python(p) => p.prepared.spec().on_error == OnError::Null,
            Engine::Native(n) => n.on_error_null(),
            // Rows a Function raises on are null and recorded, as in the Wasm tier.
            Engine::NativeFunction(_) => true,
            Engine::Sql(_) | Engine::Model(_) => false,
        }
    }

    /// What identifies the UDF's code: its module's sha256 (or `sql`).
    pub fn version(&self) -> &str {
        match &self.engine {
            Engine::Wasm(w) => &w.prepared.manifest().module_sha256,
            Engine::Python(p) => p.prepared.source_sha256(),
            Engine::Sql(_) => "sql",
            Engine::Model(m) => &m.model.digest,
            Engine::Native(n) => n.version(),
            Engine::NativeFunction(n) => n.version(),
        }
    }

    /// The UDF's name (or the expression), for messages.
    pub fn label(&self) -> &str {
        match &self.engine {
            Engine::Wasm(w) => w.prepared.label(),
            Engine::Python(p) => p.prepared.label(),
            Engine::Sql(rule) => rule.expression(),
            Engine::Model(m) => &m.model.name,
            Engine::Native(n) => n.label(),
            Engine::NativeFunction(n) => n.label(),
        }
    }

    /// Compute the column for `tenant` over `batch` (which holds at least the input
    /// columns). A UDF blocks for up to the call's time limit: call it from a blocking thread.
    pub fn compute(&self, tenant: &str, batch: &RecordBatch) -> ApiResult<Computed> {
        match &self.engine {
            Engine::Wasm(w) => w.compute(tenant, batch, &self.field),
            Engine::Python(p) => p.compute(tenant, batch, &self.field),
            Engine::Native(n) => {
                let whole = n.compute(tenant, batch)?;
                Ok(Computed {
                    values: super::compute::pick(&whole.values, &n.struct_field, &self.field)?,
                    ..whole
                })
            }
            Engine::NativeFunction(n) => n.compute(tenant, batch, &self.field),
            Engine::Model(m) => {
                let text = batch.column_by_name(&m.input_columns[0]).ok_or_else(|| {
                    ApiError::internal(format!(
                        "the backfill batch lacks '{}', the embedding column's input",
                        m.input_columns[0]
                    ))
                })?;
                super::embedding::compute(
                    m.embedder.as_ref(),
                    tenant,
                    &m.model,
                    text,
                    &self.field,
                    m.rows_per_call,
                )
            }
            Engine::Sql(rule) => Ok(Computed {
                values: rule.evaluate(batch, &self.field)?,
                nulled: 0,
                failures: Vec::new(),
            }),
        }
    }
}

/// The UDF's input columns out of `batch`, in the UDF's order.
pub(super) fn udf_input(inputs: &[Field], batch: &RecordBatch) -> ApiResult<RecordBatch> {
    let mut arrays = Vec::with_capacity(inputs.len());
    for f in inputs {
        arrays.push(batch.column_by_name(f.name()).cloned().ok_or_else(|| {
            ApiError::internal(format!("input column '{}' was not read", f.name()))
        })?);
    }
    RecordBatch::try_new_with_options(
        Arc::new(Schema::new(inputs.to_vec())),
        arrays,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
    .map_err(ApiError::from)
}

impl PythonUdf {
    fn compute(&self, tenant: &str, batch: &RecordBatch, field: &Field) -> ApiResult<Computed> {
        let input = udf_input(&self.inputs, batch)?;
        call_strict(input, &self.strict, field, |called| {
            let out = self
                .runtime
                .invoke_python(
                    &self.prepared,
                    tenant,
                    &called,
                    &self.result_type,
                    &self.limits,
                )
                .map_err(udf_error)?;
            let values = if self.cast {
                converted(&out.array, &self.struct_field, field)?
            } else {
                pick(&out.array, &self.struct_field, field)?
            };
            Ok(Computed {
                values,
                nulled: out.nulled_rows as u64,
                failures: out.failures,
            })
        })
    }
}

/// `call` over the rows of `input` where no parameter at `strict` is null (see
/// [`super::strict`]); its results spread back over every row, null where it was not called.
pub(super) fn call_strict(
    input: RecordBatch,
    strict: &[usize],
    field: &Field,
    call: impl FnOnce(RecordBatch) -> ApiResult<Computed>,
) -> ApiResult<Computed> {
    let rows = input.num_rows();
    let kept = super::strict::rows_to_call(&input, strict);
    let called = match &kept {
        Some(kept) if arrow_array::Array::is_empty(kept) => {
            return Ok(Computed {
                values: arrow_array::new_null_array(field.data_type(), rows),
                nulled: 0,
                failures: Vec::new(),
            });
        }
        Some(kept) => super::strict::select(&input, kept)?,
        None => input,
    };
    let out = call(called)?;
    let Some(kept) = kept else {
        return Ok(out);
    };
    Ok(Computed {
        values: super::strict::spread(&out.values, &kept, rows)?,
        nulled: out.nulled,
        failures: super::strict::failures_in_batch(out.failures, &kept),
    })
}

/// A registered Function's result (or its child `struct_field`) as the column's type.
pub(super) fn converted(
    result: &ArrayRef,
    struct_field: &str,
    field: &Field,
) -> ApiResult<ArrayRef> {
    let values = if struct_field.is_empty() {
        result.clone()
    } else {
        let s = result.as_any().downcast_ref::<arrow_array::StructArray>();
        s.map(|s| super::compute::struct_child(s, struct_field))
            .transpose()?
            .flatten()
            .ok_or_else(|| {
                ApiError::invalid(format!(
                    "the Function's result lacks field '{struct_field}'"
                ))
            })?
    };
    if values.data_type() == field.data_type() {
        return Ok(values);
    }
    arrow_cast::cast(&values, field.data_type()).map_err(|e| {
        ApiError::invalid(format!(
            "the Function's {} result for '{}' does not convert to {}: {e}",
            values.data_type(),
            field.name(),
            field.data_type()
        ))
    })
}

/// The column's part of a UDF's output.
fn computed(out: lancet_udf::InvokeOutput, def: &Definition, field: &Field) -> ApiResult<Computed> {
    Ok(Computed {
        values: pick(&out.array, &def.struct_field, field)?,
        nulled: out.nulled_rows as u64,
        failures: out.failures,
    })
}

impl WasmUdf {
    fn compute(&self, tenant: &str, batch: &RecordBatch, field: &Field) -> ApiResult<Computed> {
        let input = udf_input(&self.inputs, batch)?;
        // The type the whole UDF result must have (for multi-output UDFs it is a struct,
        // which is only known from a call, so nothing is imposed).
        let expected = self
            .def
            .struct_field
            .is_empty()
            .then(|| field.data_type().clone());
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
        computed(out, &self.def, field)
    }
}
