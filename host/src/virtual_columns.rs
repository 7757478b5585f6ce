//! Virtual (UDF-backed) columns: their definitions, stored with the table in field metadata
//! (so restore, branches and time travel see the definition current at each version), and
//! their computation on write when `auto_backfill` is set.

use std::collections::HashMap;

use arrow_array::RecordBatch;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::store::{RowHook, Store};

/// Field-metadata key holding a virtual column's definition (JSON).
pub const DEFINITION_KEY: &str = "lancet.udf.definition";

#[derive(Debug, Clone, Deserialize)]
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
#[derive(Debug, Clone, Deserialize, Default)]
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
#[derive(Debug, Clone, Deserialize, Default)]
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

pub struct VirtualColumns {}

impl VirtualColumns {
    pub fn new() -> Self {
        Self {}
    }

    pub async fn add(
        &self,
        _store: &Store,
        _location: &str,
        _branch: Option<&str>,
        _cols: Vec<(String, NewVirtual)>,
    ) -> ApiResult<u64> {
        Err(ApiError::invalid(
            "virtual columns are not available in this build",
        ))
    }

    pub async fn alter(
        &self,
        _store: &Store,
        _location: &str,
        _branch: Option<&str>,
        _cols: Vec<(String, AlterVirtual)>,
    ) -> ApiResult<u64> {
        Err(ApiError::invalid(
            "virtual columns are not available in this build",
        ))
    }

    /// The hook that computes `auto_backfill` columns for rows being written.
    pub fn insert_hook(
        &self,
    ) -> Box<dyn Fn(&lance::Dataset, Vec<RecordBatch>) -> ApiResult<Vec<RecordBatch>> + Sync + Send>
    {
        Box::new(|_ds, batches| Ok(batches))
    }

    /// Rows that create a declared table carry no virtual columns yet.
    pub fn fill_new_table(&self, batches: Vec<RecordBatch>) -> ApiResult<Vec<RecordBatch>> {
        Ok(batches)
    }
}

impl Default for VirtualColumns {
    fn default() -> Self {
        Self::new()
    }
}

#[allow(dead_code)]
fn _hook_type_check(
    h: &(dyn Fn(&lance::Dataset, Vec<RecordBatch>) -> ApiResult<Vec<RecordBatch>> + Sync + Send),
) -> RowHook<'_> {
    h
}
