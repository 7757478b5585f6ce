//! Columns computed by a registered Function (lancedb's `tbl.add_columns({"c": fn(x=col("x"))})`).
//!
//! Declaring: the client sends the application (one exact Function version, its inputs,
//! initialization) and how result fields map to new columns; [`declare`] checks it against the
//! registry and the table, adds the columns all-null and records lancedb's own
//! `FunctionBinding` (field ids resolved) in the table's `lancedb::function_bindings`, which
//! the client reads back. Computing: [`binding`] reads a column's binding back, and
//! [`VirtualColumns::function_udf`] runs the version's source in the Python sandbox with its
//! initialization (class Functions) and its environment (`env` plus bound secrets).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{Field, Schema};
use base64::Engine as _;
use lancet_udf::{OnError, PythonSpec, Signature};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::backfill::{ColumnUdf, PythonUdf};
use super::declared::{
    self, BINDING_ID_KEY, BINDINGS_KEY, COMPUTED_KEY, INPUTS_KEY, KIND_KEY, OUTPUT_ORDINAL_KEY,
};
use super::{VirtualColumns, udf_error};
use crate::error::{ApiError, ApiResult};
use crate::functions::registry::{Tier, parse_version};
use crate::functions::signature::{FunctionSignature, arrow_type};
use crate::functions::{Registry, StoredFunction};
use crate::json_types::parse_data_type;
use crate::store::Store;

/// Schema metadata of Lancet's own beside lancedb's bindings (the client refuses any other
/// key on a Function column): per binding id, the Function's namespace in the tenant's catalog
/// (the client's path under the database it addressed) and the initialization as JSON. The
/// job computing a column has no client to ask.
const LANCET_BINDINGS_KEY: &str = "lancet.function_bindings";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct LancetBinding {
    namespace: Vec<String>,
    initialization: Map<String, Value>,
}

fn lancet_bindings(text: Option<&str>) -> HashMap<String, LancetBinding> {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}
/// The result field that is a scalar Function's whole result.
const SCALAR_RESULT: &str = "$value";

/// The Function version a binding pins (the client's `FunctionVersionRef`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FunctionRef {
    pub name: String,
    #[serde(default)]
    pub namespace_path: Vec<String>,
    pub object_id: String,
    #[serde(default)]
    pub location: String,
    pub version: String,
    pub manifest_digest: String,
}

// --- what the client declares (add_columns' `function`) ------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Declaration {
    application: Application,
    #[serde(default)]
    binding_metadata_version: Option<u32>,
    #[serde(default)]
    input_schema: Option<Value>,
    #[serde(default)]
    output_schema: Option<Value>,
    outputs: Vec<DeclaredOutput>,
    /// The client's view of each input (its type and nullability as the table has them).
    #[serde(default)]
    input_bindings: Vec<DeclaredInput>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeclaredInput {
    parameter: String,
    field_path: String,
    arrow_type: String,
    nullable: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Application {
    function: FunctionRef,
    inputs: Vec<ApplicationInput>,
    #[serde(default)]
    initialization: Map<String, Value>,
    #[serde(default, rename = "output")]
    _output: Option<Value>,
    #[serde(default, rename = "columns")]
    _columns: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ApplicationInput {
    parameter: String,
    kind: String,
    value: Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeclaredOutput {
    output_name: String,
    output_ordinal: u32,
    result_field: String,
}

// --- what is stored (lancedb's FunctionBinding, in an envelope) ----------------------------

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Envelope {
    version: u32,
    bindings: Vec<StoredBinding>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredBinding {
    binding_id: String,
    function: FunctionRef,
    inputs: Vec<InputBinding>,
    outputs: Vec<OutputMapping>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output_schema: Option<Value>,
    /// Standard base64 of a one-row Arrow IPC stream of the initialization values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    initialization: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct InputBinding {
    parameter: String,
    field_id: i32,
    field_path: String,
    arrow_type: String,
    nullable: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct OutputMapping {
    result_field: String,
    output_name: String,
    output_field_id: i32,
    output_ordinal: u32,
    arrow_type: String,
    nullable: bool,
}

fn envelope(text: Option<&str>) -> Envelope {
    // Anything else (a binding map of an older Lancet) held nothing computable.
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Envelope {
            version: 1,
            bindings: Vec::new(),
        })
}

/// Declare the Function columns `names` as `function` binds them: 404 when the version is not
/// in the registry, 400 for a binding that does not fit the Function or the table. One
/// version adds the columns; the next records the binding (with the new columns' field ids).
#[allow(clippy::too_many_arguments)]
pub async fn declare(
    store: &Store,
    registry: &Registry,
    tenant: &str,
    resolve: impl Fn(&[String]) -> ApiResult<Vec<String>>,
    location: &str,
    branch: Option<&str>,
    names: &[String],
    function: Value,
) -> ApiResult<u64> {
    let bad = |m: String| ApiError::invalid(format!("function: {m}"));
    let d: Declaration = serde_json::from_value(function).map_err(|e| bad(e.to_string()))?;
    if d.binding_metadata_version.is_some_and(|v| v != 1) {
        return Err(bad("binding_metadata_version must be 1".into()));
    }
    let f = &d.application.function;
    let namespace = resolve(&f.namespace_path)?;
    let stored = registry
        .get_bound(tenant, &namespace, &f.name, &f.version)
        .await?;
    if stored.object_id != f.object_id || stored.digest != f.manifest_digest {
        return Err(bad(format!(
            "Function '{}' version {} is not the one this application names (it was dropped \
             and registered again): get_function it anew",
            f.name, f.version
        )));
    }
    let sig = &stored.signature;
    let table = Schema::from(store.latest(location, branch).await?.schema());

    let inputs = bind_inputs(sig, &d, &table)?;

    // lancedb checks a Function column's metadata against the binding's input paths.
    let input_paths = serde_json::to_string(
        &inputs
            .iter()
            .map(|(_, path, _, _)| path)
            .collect::<Vec<_>>(),
    )
    .map_err(|e| ApiError::internal(e.to_string()))?;
    // One binding's outputs are declared together, in their order (lancedb checks ordinals
    // are 0, 1, ... on every write).
    let declared: Vec<&str> = d.outputs.iter().map(|o| o.output_name.as_str()).collect();
    let ordinals_canonical = d
        .outputs
        .iter()
        .enumerate()
        .all(|(i, o)| o.output_ordinal as usize == i);
    if declared != names.iter().map(String::as_str).collect::<Vec<_>>() || !ordinals_canonical {
        return Err(bad(format!(
            "new_columns {names:?} must be the binding's outputs {declared:?}, in order"
        )));
    }
    let initialization = initialization_row(sig, &d.application.initialization)?;
    let declared_types = output_types(d.output_schema.as_ref())?;
    let binding_id = uuid::Uuid::new_v4().to_string();
    let mut fields = Vec::new();
    let mut outputs = Vec::new();
    for (ordinal, name) in names.iter().enumerate() {
        let out = d
            .outputs
            .iter()
            .find(|o| &o.output_name == name)
            .ok_or_else(|| bad(format!("no output maps to column '{name}'")))?;
        let (grammar, _) = result_field(sig, &out.result_field)?;
        let data_type = match declared_types.get(name.as_str()) {
            Some(t) => t.clone(),
            None => arrow_type(&grammar)?,
        };
        let metadata = HashMap::from([
            (COMPUTED_KEY.to_string(), "true".to_string()),
            (KIND_KEY.to_string(), "function".to_string()),
            (BINDING_ID_KEY.to_string(), binding_id.clone()),
            (OUTPUT_ORDINAL_KEY.to_string(), ordinal.to_string()),
            (INPUTS_KEY.to_string(), input_paths.clone()),
        ]);
        fields.push(Field::new(name, data_type, true).with_metadata(metadata));
        outputs.push((out, grammar));
    }
    let outputs: Vec<(String, String, u32, String)> = outputs
        .into_iter()
        .map(|(o, g)| {
            (
                o.result_field.clone(),
                o.output_name.clone(),
                o.output_ordinal,
                g,
            )
        })
        .collect();
    let function = f.clone();
    let (input_schema, output_schema) = (d.input_schema, d.output_schema);
    let ours = LancetBinding {
        namespace,
        initialization: d.application.initialization,
    };
    store
        .add_null_columns_with_metadata(location, branch, fields, move |schema| {
            let existing = |key: &str| schema.metadata.get(key).map(String::as_str);
            let id_of = |name: &str| {
                schema
                    .field(name)
                    .map(|f| f.id)
                    .ok_or_else(|| format!("column '{name}' is missing"))
            };
            let mut env = envelope(existing(BINDINGS_KEY));
            let mut lancet = lancet_bindings(existing(LANCET_BINDINGS_KEY));
            lancet.insert(binding_id.clone(), ours);
            env.bindings.push(StoredBinding {
                binding_id,
                function,
                inputs: inputs
                    .iter()
                    .map(|(parameter, path, arrow_type, nullable)| {
                        Ok(InputBinding {
                            parameter: parameter.clone(),
                            field_id: id_of(path)?,
                            field_path: path.clone(),
                            arrow_type: arrow_type.clone(),
                            nullable: *nullable,
                        })
                    })
                    .collect::<Result<_, String>>()?,
                outputs: outputs
                    .iter()
                    .map(|(result, name, ordinal, grammar)| {
                        Ok(OutputMapping {
                            result_field: result.clone(),
                            output_name: name.clone(),
                            output_field_id: id_of(name)?,
                            output_ordinal: *ordinal,
                            arrow_type: grammar.clone(),
                            // The Function's logical output; the column itself is nullable
                            // (null until computed), as lancedb requires.
                            nullable: false,
                        })
                    })
                    .collect::<Result<_, String>>()?,
                input_schema,
                output_schema,
                initialization,
            });
            Ok(vec![
                (BINDINGS_KEY.to_string(), to_text(&env)?),
                (LANCET_BINDINGS_KEY.to_string(), to_text(&lancet)?),
            ])
        })
        .await
}

/// One bound input: (parameter, column, its type and nullability as the client described the
/// column, which lancedb checks every write against).
type BoundInput = (String, String, String, bool);

/// Each of the Function's parameters bound to a top-level column of `table`.
fn bind_inputs(
    sig: &FunctionSignature,
    d: &Declaration,
    table: &Schema,
) -> ApiResult<Vec<BoundInput>> {
    let bad = |m: String| ApiError::invalid(format!("function: {m}"));
    let mut inputs = Vec::new();
    for p in &sig.inputs {
        let given = d
            .application
            .inputs
            .iter()
            .find(|i| i.parameter == p.name)
            .ok_or_else(|| bad(format!("no input is bound to parameter '{}'", p.name)))?;
        let path = (given.kind == "column")
            .then(|| given.value.get("path").and_then(Value::as_str))
            .flatten()
            .ok_or_else(|| bad(format!("input '{}' is not a column reference", p.name)))?;
        let column = table.field_with_name(path).map_err(|_| {
            bad(format!(
                "input '{}' reads '{path}', which is not a top-level column of the table \
                 (nested inputs are not supported)",
                p.name
            ))
        })?;
        // A nullable column may feed a parameter that takes no null: rows where it is null
        // are not called and answer null (see `strict`).
        // Recorded as the client described the column (what it checks writes against).
        let described = d.input_bindings.iter().find(|b| b.parameter == p.name);
        inputs.push((
            p.name.clone(),
            path.to_string(),
            described.map_or_else(|| p.arrow_type.clone(), |b| b.arrow_type.clone()),
            described.map_or(column.is_nullable(), |b| b.nullable),
        ));
        if described.is_some_and(|b| b.field_path != path) {
            return Err(bad(format!(
                "input_bindings disagree with the application on parameter '{}'",
                p.name
            )));
        }
    }
    if let Some(extra) = d
        .application
        .inputs
        .iter()
        .find(|i| !sig.inputs.iter().any(|p| p.name == i.parameter))
    {
        return Err(bad(format!(
            "the Function has no parameter '{}'",
            extra.parameter
        )));
    }
    Ok(inputs)
}

fn to_text<T: Serialize>(value: &T) -> Result<String, String> {
    serde_json::to_string(value).map_err(|e| e.to_string())
}

/// The type (in the client's grammar) and nullability of result field `name`.
fn result_field(sig: &FunctionSignature, name: &str) -> ApiResult<(String, bool)> {
    let bad = |m: String| ApiError::invalid(format!("function: {m}"));
    match sig.output.kind.as_str() {
        "scalar" if name == SCALAR_RESULT => Ok((
            sig.output.arrow_type.clone().unwrap_or_default(),
            sig.output.nullable.unwrap_or(true),
        )),
        "named_struct" => sig
            .output
            .fields
            .iter()
            .find(|f| f.name == name)
            .map(|f| (f.arrow_type.clone(), f.nullable))
            .ok_or_else(|| bad(format!("the Function's result has no field '{name}'"))),
        _ => Err(bad(format!(
            "result field '{name}' does not name the Function's {} result",
            sig.output.kind
        ))),
    }
}

/// Output column types the client declared (`output_schema`), by name.
fn output_types(schema: Option<&Value>) -> ApiResult<HashMap<String, arrow_schema::DataType>> {
    let mut out = HashMap::new();
    for f in schema
        .and_then(|s| s["fields"].as_array())
        .into_iter()
        .flatten()
    {
        if let Some(name) = f["name"].as_str() {
            out.insert(name.to_string(), parse_data_type(&f["type"])?);
        }
    }
    Ok(out)
}

/// A class Function's initialization as lancedb stores it: a one-row Arrow IPC stream of the
/// declared fields, base64. Each non-nullable field must be given; none when it declares none.
fn initialization_row(
    sig: &FunctionSignature,
    given: &Map<String, Value>,
) -> ApiResult<Option<String>> {
    let bad = |m: String| ApiError::invalid(format!("function.initialization: {m}"));
    if let Some(unknown) = given
        .keys()
        .find(|k| !sig.initialization.iter().any(|p| &p.name == *k))
    {
        return Err(bad(format!("the Function declares no field '{unknown}'")));
    }
    if sig.initialization.is_empty() {
        return Ok(None);
    }
    let line = Value::Object(given.clone()).to_string();
    // The same bound the runtime puts on an initialization it is handed.
    if line.len() > 64 << 10 {
        return Err(bad(format!("{} bytes; at most 64 KiB", line.len())));
    }
    let mut fields = Vec::new();
    for p in &sig.initialization {
        if !p.nullable && given.get(&p.name).is_none_or(Value::is_null) {
            return Err(bad(format!("'{}' is required", p.name)));
        }
        fields.push(Field::new(&p.name, arrow_type(&p.arrow_type)?, p.nullable));
    }
    let schema = Arc::new(Schema::new(fields));
    let batch = arrow_json::ReaderBuilder::new(schema.clone())
        .build(std::io::Cursor::new(line))
        .map_err(|e| bad(e.to_string()))?
        .next()
        .transpose()
        .map_err(|e| bad(e.to_string()))?
        .ok_or_else(|| bad("no values".into()))?;
    let mut buf = Vec::new();
    {
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut buf, &schema)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        w.write(&batch)
            .and_then(|_| w.finish())
            .map_err(|e| ApiError::internal(e.to_string()))?;
    }
    Ok(Some(base64::engine::general_purpose::STANDARD.encode(buf)))
}

/// One Function column's binding, as declared.
pub struct ColumnBinding {
    pub function: FunctionRef,
    /// (parameter, input column) in the binding's order.
    inputs: Vec<(String, String)>,
    /// The initialization as a JSON object.
    initialization: String,
    /// The result field the column takes (`$value`: the whole scalar result).
    result_field: String,
}

/// The binding of Function column `column`, if it is one.
pub fn binding(schema: &Schema, column: &str) -> ApiResult<Option<ColumnBinding>> {
    let Ok(field) = schema.field_with_name(column) else {
        return Ok(None);
    };
    if declared::kind(field) != Some("function") {
        return Ok(None);
    }
    let bad = |m: String| ApiError::invalid(format!("Function column '{column}': {m}"));
    let meta = field.metadata();
    let id = meta
        .get(BINDING_ID_KEY)
        .ok_or_else(|| bad("it names no binding".into()))?;
    let b = envelope(schema.metadata().get(BINDINGS_KEY).map(String::as_str))
        .bindings
        .into_iter()
        .find(|b| &b.binding_id == id)
        .ok_or_else(|| {
            bad(format!(
                "its binding {id} is missing from the table (declared by another server?): \
                 declare it again"
            ))
        })?;
    parse_version(&b.function.version)?;
    let ours = lancet_bindings(
        schema
            .metadata()
            .get(LANCET_BINDINGS_KEY)
            .map(String::as_str),
    )
    .remove(id);
    let mut function = b.function;
    if let Some(o) = &ours {
        function.namespace_path = o.namespace.clone();
    }
    let result_field = b
        .outputs
        .iter()
        .find(|o| o.output_name == column)
        .map(|o| o.result_field.clone())
        .ok_or_else(|| bad("the binding maps no result to it".into()))?;
    Ok(Some(ColumnBinding {
        function,
        inputs: b
            .inputs
            .into_iter()
            .map(|i| (i.parameter, i.field_path))
            .collect(),
        initialization: Value::Object(ours.map(|o| o.initialization).unwrap_or_default())
            .to_string(),
        result_field,
    }))
}

impl VirtualColumns {
    /// Loads a Function's source in the sandbox (a class is only checked) and reads its
    /// signature: a Function's build.
    pub fn check_function(&self, spec: &PythonSpec) -> ApiResult<Signature> {
        let prepared = self.runtime.prepare_python(spec).map_err(udf_error)?;
        Ok(prepared.signature().clone())
    }

    /// What computes Function column `column` of `schema` under `binding`, running version
    /// `stored` with environment `env`. Rows the Function raises on are null and recorded
    /// (lancedb's `function_errors`), as under the client's skip policy.
    pub fn function_udf(
        &self,
        schema: &Schema,
        column: &str,
        binding: &ColumnBinding,
        stored: &StoredFunction,
        env: Vec<(String, String)>,
    ) -> ApiResult<ColumnUdf> {
        let field = schema
            .field_with_name(column)
            .map_err(|_| ApiError::column_not_found(format!("no column '{column}'")))?;
        if stored.object_id != binding.function.object_id
            || stored.digest != binding.function.manifest_digest
        {
            return Err(ApiError::invalid(format!(
                "Function '{}' version {} is not the one column '{column}' was bound to (it \
                 was dropped and registered again): bind the column anew",
                stored.name, stored.version
            )));
        }
        // The signature's order, which is how the runner passes values (positionally).
        let mut input_columns = Vec::new();
        for p in &stored.signature.inputs {
            let bound = binding
                .inputs
                .iter()
                .find(|(param, _)| *param == p.name)
                .map(|(_, c)| c.clone())
                .ok_or_else(|| {
                    ApiError::invalid(format!(
                        "column '{column}' binds no column to parameter '{}'",
                        p.name
                    ))
                })?;
            input_columns.push(bound);
        }
        let inputs = input_columns
            .iter()
            .map(|name| {
                let f = schema.field_with_name(name).map_err(|_| {
                    ApiError::invalid(format!(
                        "input column '{name}' of Function column '{column}' no longer exists"
                    ))
                })?;
                Ok(Field::new(name, f.data_type().clone(), true))
            })
            .collect::<ApiResult<Vec<_>>>()?;
        let strict: Vec<usize> = stored
            .signature
            .inputs
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.nullable)
            .map(|(i, _)| i)
            .collect();
        let struct_field = match binding.result_field.as_str() {
            SCALAR_RESULT => String::new(),
            f => f.to_string(),
        };
        if stored.tier == Tier::Native {
            let call = super::native_function::FunctionCall {
                input_columns,
                inputs,
                result_type: stored.signature.result_type()?,
                struct_field,
                strict,
                initialization: &binding.initialization,
                env,
            };
            return self.native_function_udf(stored, call, field);
        }
        let spec = PythonSpec {
            files: stored.files.clone(),
            source: stored.source.clone(),
            entry: stored.entrypoint.clone(),
            env,
            // Always given, so a class Function is instantiated (with `{}` when it declares
            // no initialization); a plain function takes `{}` as none.
            init: Some(binding.initialization.clone()),
            on_error: OnError::Null,
            limits: None,
        };
        let prepared = self.runtime.prepare_python(&spec).map_err(udf_error)?;
        Ok(ColumnUdf::python(
            PythonUdf {
                runtime: (*self.runtime).clone(),
                prepared,
                limits: self.limits.clone(),
                input_columns,
                inputs,
                result_type: stored.signature.result_type()?,
                struct_field,
                cast: true,
                strict,
            },
            field.clone(),
        ))
    }
}
