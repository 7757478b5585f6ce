//! Virtual (UDF-backed) columns: their definitions, stored with the table in field metadata
//! (so restore, branches and time travel see the definition current at each version), and
//! their computation on write when `auto_backfill` is set.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use std::sync::Arc;

use lancet_udf::{Limits, Runtime, UdfError};

use crate::error::{ApiError, ApiResult};

mod backfill;
mod compute;
pub mod declared;
mod define;
pub mod embedding;
pub mod function;
pub(crate) mod geneva;
mod native;
pub mod native_function;
mod pipelined;
mod python;
mod strict;

pub use backfill::{ColumnUdf, Computed};
pub use pipelined::{PendingCall, Pipelined};

/// Field-metadata key holding a virtual column's definition (JSON).
pub const DEFINITION_KEY: &str = "lancet.udf.definition";

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct OutputSpec {
    pub column: String,
    #[serde(default)]
    pub struct_field: String,
    pub data_type: Value,
    #[serde(default = "yes")]
    pub nullable: bool,
    #[serde(default)]
    pub metadata: Option<HashMap<String, String>>,
}

fn yes() -> bool {
    true
}

/// `virtual_column` of a NewColumn (spec 2.5).
#[derive(Debug, Clone, Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct NewVirtual {
    pub input_columns: Vec<String>,
    pub outputs: Vec<OutputSpec>,
    pub image: Option<String>,
    pub udf: Option<String>,
    pub udf_name: Option<String>,
    pub udf_version: Option<String>,
    pub udf_backend: Option<String>,
    pub auto_backfill: Option<bool>,
    pub manifest: Option<String>,
    pub manifest_checksum: Option<String>,
    pub field_metadata: Option<HashMap<String, String>>,
}

/// `virtual_column` of an Alteration: like [`NewVirtual`] without `outputs`.
#[derive(Debug, Clone, Deserialize, Default, schemars::JsonSchema)]
#[serde(default)]
pub struct AlterVirtual {
    pub input_columns: Option<Vec<String>>,
    pub image: Option<String>,
    pub udf: Option<String>,
    pub udf_name: Option<String>,
    pub udf_version: Option<String>,
    pub udf_backend: Option<String>,
    pub auto_backfill: Option<bool>,
    pub manifest: Option<String>,
    pub manifest_checksum: Option<String>,
    pub field_metadata: Option<HashMap<String, String>>,
}

/// What is stored per output column.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Definition {
    pub input_columns: Vec<String>,
    pub udf_name: String,
    pub udf_version: String,
    pub udf_backend: String,
    pub module_sha256: String,
    pub manifest: String,
    pub manifest_checksum: String,
    pub image: Option<String>,
    pub auto_backfill: bool,
    /// The struct child this column takes from the UDF's result; empty = the whole result.
    pub struct_field: String,
    /// All output columns computed by the same call (multi-output UDFs move together).
    pub group: Vec<String>,
    /// A Python UDF's source and version (`udf_backend` "python"); `None` for Wasm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<python::PythonDef>,
    /// An embedding column's model (`udf_backend` "model"); `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<embedding::ModelRef>,
    /// A native Python column's source and environment (`udf_backend` "python-native").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<native::NativeDef>,
}

/// The type a column's UDF must return: the column's own, or for a multi-output UDF the
/// struct of its group's `struct_field`s.
fn result_type(
    table: &arrow_schema::Schema,
    def: &Definition,
    field: &arrow_schema::Field,
) -> Result<arrow_schema::DataType, ApiError> {
    if def.struct_field.is_empty() {
        return Ok(field.data_type().clone());
    }
    let mut children = Vec::new();
    for member in &def.group {
        let f = table.field_with_name(member).map_err(|_| {
            ApiError::invalid(format!(
                "column '{}' is computed together with '{member}', which is gone: drop '{}' \
                 and add the UDF's columns again",
                field.name(),
                field.name()
            ))
        })?;
        let d: Definition = f
            .metadata()
            .get(DEFINITION_KEY)
            .and_then(|t| serde_json::from_str(t).ok())
            .ok_or_else(|| ApiError::internal(format!("'{member}' lost its definition")))?;
        children.push(arrow_schema::Field::new(
            d.struct_field,
            f.data_type().clone(),
            f.is_nullable(),
        ));
    }
    Ok(arrow_schema::DataType::Struct(children.into()))
}

/// Refuses a drop that would take some but not all columns of a multi-output group (one UDF
/// call fills them all; a sibling left alone could no longer be computed): 400 naming the rest.
pub fn check_group_drop(schema: &arrow_schema::Schema, dropped: &[String]) -> Result<(), ApiError> {
    for name in dropped {
        let Some(def) = schema
            .field_with_name(name)
            .ok()
            .and_then(|f| f.metadata().get(DEFINITION_KEY))
            .and_then(|t| serde_json::from_str::<Definition>(t).ok())
        else {
            continue;
        };
        let kept: Vec<&str> = def
            .group
            .iter()
            .filter(|m| !dropped.contains(m) && schema.field_with_name(m).is_ok())
            .map(String::as_str)
            .collect();
        if !kept.is_empty() {
            return Err(ApiError::invalid(format!(
                "column '{name}' is computed by one UDF together with {}: drop them together",
                kept.iter()
                    .map(|k| format!("'{k}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    Ok(())
}

/// The virtual column definitions in a schema, for `describe`.
pub fn describe(schema: &arrow_schema::Schema) -> Value {
    let mut out = serde_json::Map::new();
    for f in schema.fields() {
        if let Some(text) = f.metadata().get(DEFINITION_KEY)
            && let Ok(def) = serde_json::from_str::<Definition>(text)
        {
            out.insert(f.name().clone(), json!(def));
        }
    }
    Value::Object(out)
}

/// The UDF runtime plus the limits applied to calls made for virtual columns: the server's,
/// replaced field by field by a tenant's own where it has any.
pub struct VirtualColumns {
    runtime: Arc<Runtime>,
    limits: Limits,
    /// Replaced whenever the auth file's tenant settings change (`set_tenant_limits`).
    tenant_limits: std::sync::RwLock<HashMap<String, Limits>>,
    /// Runs embedding columns' models; `None`: such columns are refused.
    embedder: Option<Arc<dyn embedding::Embedder>>,
    /// Texts per model call for embedding columns.
    model_rows: usize,
    /// Runs native Python columns; `None`: such columns are refused.
    native: Option<Arc<crate::native::NativeTier>>,
}

impl VirtualColumns {
    pub fn new(runtime: Arc<Runtime>) -> Self {
        Self::with_tenant_limits(runtime, &HashMap::new())
    }

    pub fn with_tenant_limits(
        runtime: Arc<Runtime>,
        overrides: &HashMap<String, lancet_udf::LimitsOverride>,
    ) -> Self {
        let limits = runtime.config().default_limits.clone();
        let this = Self {
            runtime,
            limits,
            tenant_limits: Default::default(),
            embedder: None,
            model_rows: 1,
            native: None,
        };
        this.set_tenant_limits(overrides);
        this
    }

    /// Tenants' own UDF limits from now on (calls already running keep theirs).
    pub fn set_tenant_limits(&self, overrides: &HashMap<String, lancet_udf::LimitsOverride>) {
        let limits = overrides
            .iter()
            .map(|(tenant, o)| (tenant.clone(), replaced(&self.limits, o)))
            .collect();
        *self.tenant_limits.write().unwrap() = limits;
    }

    /// The native tier, if this server runs one.
    pub fn native_tier(&self) -> Option<&Arc<crate::native::NativeTier>> {
        self.native.as_ref()
    }

    /// Embedding columns run their models through `embedder`, `rows` texts per call.
    pub fn with_embedder(mut self, embedder: Arc<dyn embedding::Embedder>, rows: usize) -> Self {
        self.embedder = Some(embedder);
        self.model_rows = rows.max(1);
        self
    }

    /// Native Python columns run in `tier` (`None`: refused with a 400 that says so).
    pub fn with_native(mut self, tier: Option<Arc<crate::native::NativeTier>>) -> Self {
        self.native = tier;
        self
    }

    fn embedder(&self) -> ApiResult<&dyn embedding::Embedder> {
        self.embedder
            .as_deref()
            .ok_or_else(|| ApiError::invalid("this server runs no embedding models"))
    }

    /// The limits every UDF call made for `tenant` runs under.
    pub fn limits_for(&self, tenant: &str) -> Limits {
        let tenants = self.tenant_limits.read().unwrap();
        tenants.get(tenant).unwrap_or(&self.limits).clone()
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }
}

/// `base` with each field a tenant sets replaced. Memory cannot exceed the server's cap: that
/// is the size of the runtime's pooled memory slots.
fn replaced(base: &Limits, o: &lancet_udf::LimitsOverride) -> Limits {
    let mut l = base.clone();
    if let Some(ms) = o.timeout_ms {
        l.timeout = std::time::Duration::from_millis(ms);
    }
    if let Some(m) = o.max_memory_bytes {
        l.max_memory_bytes = m.min(base.max_memory_bytes);
    }
    if let Some(b) = o.max_output_bytes {
        l.max_output_bytes = b;
    }
    if let Some(r) = o.max_rows_per_call {
        l.max_rows_per_call = r.max(1);
    }
    l
}

/// A UDF failure, as the HTTP layer answers it: definition problems are the caller's (400),
/// failed calls name the UDF and the limit or trap.
pub fn udf_error(err: UdfError) -> ApiError {
    if err.is_definition_error() {
        ApiError::invalid(format!("UDF rejected: {err}"))
    } else {
        ApiError::invalid(format!("UDF call failed: {err}"))
    }
}
