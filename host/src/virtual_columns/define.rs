//! Defining virtual columns: verify the manifest and module, check the entry point and the
//! output types with a zero-row dry run, then add the columns (null until computed) in one
//! commit with their definitions in field metadata.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{RecordBatch, new_empty_array};
use arrow_schema::{DataType, Field, Schema};
use lancet_udf::Manifest;

use super::{AlterVirtual, DEFINITION_KEY, Definition, NewVirtual, VirtualColumns, udf_error};
use crate::error::{ApiError, ApiResult};
use crate::store::Store;

pub const BACKEND: &str = "wasm";

/// What a definition request names, after its module is verified and compiled.
struct Checked {
    manifest: Manifest,
    manifest_text: String,
    checksum: String,
    /// The type the UDF returns for these inputs (from the dry run).
    output_type: DataType,
}

impl VirtualColumns {
    #[allow(clippy::too_many_arguments)]
    fn check(
        &self,
        schema: &lance_core::datatypes::Schema,
        input_columns: &[String],
        backend: Option<&str>,
        manifest: Option<&str>,
        checksum: Option<&str>,
        udf: Option<&str>,
        udf_name: Option<&str>,
    ) -> ApiResult<Checked> {
        if let Some(b) = backend.filter(|b| !b.is_empty() && !b.eq_ignore_ascii_case(BACKEND)) {
            return Err(ApiError::invalid(format!(
                "udf_backend '{b}' is not supported; this server runs '{BACKEND}' (WebAssembly) UDFs"
            )));
        }
        let manifest_text =
            manifest.ok_or_else(|| ApiError::invalid("a virtual column needs a 'manifest'"))?;
        let checksum = checksum
            .ok_or_else(|| ApiError::invalid("a virtual column needs a 'manifest_checksum'"))?;
        let parsed = Manifest::parse_verified(manifest_text, checksum).map_err(udf_error)?;
        if let Some(name) = udf_name.filter(|n| !n.is_empty())
            && name != parsed.entry
        {
            return Err(ApiError::invalid(format!(
                "udf_name '{name}' differs from the manifest's entry '{}'",
                parsed.entry
            )));
        }
        if input_columns.is_empty() {
            return Err(ApiError::invalid(
                "input_columns must name at least one column",
            ));
        }
        for c in input_columns {
            crate::field_path::resolve(schema, c)?;
        }
        let module = udf
            .filter(|u| !u.is_empty())
            .map(lancet_udf::decode_module_base64)
            .transpose()
            .map_err(udf_error)?;
        self.runtime
            .store_module(&parsed, module.as_deref())
            .map_err(udf_error)?;
        let prepared = self.runtime.prepare(&parsed).map_err(udf_error)?;
        let empty = empty_inputs(schema, input_columns)?;
        let out = self
            .runtime
            .invoke(&prepared, "definition", &empty, None, &self.limits)
            .map_err(udf_error)?;
        Ok(Checked {
            manifest: parsed,
            manifest_text: manifest_text.to_string(),
            checksum: checksum.to_string(),
            output_type: out.data_type().clone(),
        })
    }

    pub async fn add(
        &self,
        store: &Store,
        location: &str,
        branch: Option<&str>,
        cols: Vec<(String, NewVirtual)>,
    ) -> ApiResult<u64> {
        let ds = store.latest(location, branch).await?;
        let mut fields = Vec::new();
        for (name, v) in cols {
            let checked = self.check(
                ds.schema(),
                &v.input_columns,
                v.udf_backend.as_deref(),
                v.manifest.as_deref(),
                v.manifest_checksum.as_deref(),
                v.udf.as_deref(),
                v.udf_name.as_deref(),
            )?;
            let outputs = if v.outputs.is_empty() {
                vec![(
                    name.clone(),
                    String::new(),
                    checked.output_type.clone(),
                    true,
                    HashMap::new(),
                )]
            } else {
                let mut outs = Vec::new();
                for o in &v.outputs {
                    let declared = crate::json_types::parse_data_type(&o.data_type)?;
                    outs.push((
                        o.column.clone(),
                        o.struct_field.clone(),
                        declared,
                        o.nullable,
                        o.metadata.clone().unwrap_or_default(),
                    ));
                }
                outs
            };
            let group: Vec<String> = outputs.iter().map(|o| o.0.clone()).collect();
            for (column, struct_field, declared, nullable, metadata) in outputs {
                let produced = produced_type(&checked.output_type, &struct_field)?;
                if produced != declared {
                    return Err(ApiError::invalid(format!(
                        "UDF output for '{column}' is {produced}, but the column is declared {declared}"
                    )));
                }
                if ds.schema().field(&column).is_some() {
                    return Err(ApiError::new(
                        lance_namespace::ErrorCode::InvalidInput,
                        format!("column '{column}' already exists"),
                    ));
                }
                let def = Definition {
                    input_columns: v.input_columns.clone(),
                    udf_name: checked.manifest.entry.clone(),
                    udf_version: v
                        .udf_version
                        .clone()
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| checked.manifest.module_sha256.clone()),
                    udf_backend: BACKEND.to_string(),
                    module_sha256: checked.manifest.module_sha256.clone(),
                    manifest: checked.manifest_text.clone(),
                    manifest_checksum: checked.checksum.clone(),
                    image: v.image.clone(),
                    auto_backfill: v.auto_backfill.unwrap_or(false),
                    struct_field,
                    group: group.clone(),
                };
                let mut md = user_metadata(v.field_metadata.as_ref())?;
                md.extend(metadata);
                md.insert(
                    DEFINITION_KEY.to_string(),
                    serde_json::to_string(&def).map_err(|e| ApiError::internal(e.to_string()))?,
                );
                fields.push(Field::new(column, declared, nullable).with_metadata(md));
            }
        }
        store.add_null_columns(location, branch, fields).await
    }

    /// Swap the UDF of existing virtual columns (their outputs cannot change); a struct-output
    /// group is altered as a whole.
    pub async fn alter(
        &self,
        store: &Store,
        location: &str,
        branch: Option<&str>,
        cols: Vec<(String, AlterVirtual)>,
    ) -> ApiResult<u64> {
        let ds = store.latest(location, branch).await?;
        let arrow = Schema::from(ds.schema());
        let mut updates: HashMap<String, HashMap<String, String>> = HashMap::new();
        for (path, v) in cols {
            let field = arrow
                .field_with_name(&path)
                .map_err(|_| ApiError::column_not_found(format!("no column '{path}'")))?;
            let old: Definition = field
                .metadata()
                .get(DEFINITION_KEY)
                .and_then(|t| serde_json::from_str(t).ok())
                .ok_or_else(|| {
                    ApiError::invalid(format!("column '{path}' is not a virtual column"))
                })?;
            let inputs = v
                .input_columns
                .clone()
                .unwrap_or_else(|| old.input_columns.clone());
            let checked = self.check(
                ds.schema(),
                &inputs,
                v.udf_backend.as_deref(),
                v.manifest.as_deref().or(Some(&old.manifest)),
                v.manifest_checksum
                    .as_deref()
                    .or(Some(&old.manifest_checksum)),
                v.udf.as_deref(),
                v.udf_name.as_deref(),
            )?;
            for member in &old.group {
                let f = arrow.field_with_name(member).map_err(|_| {
                    ApiError::internal(format!("virtual column group member '{member}' is missing"))
                })?;
                let member_def: Definition = serde_json::from_str(&f.metadata()[DEFINITION_KEY])
                    .map_err(|e| ApiError::internal(e.to_string()))?;
                let produced = produced_type(&checked.output_type, &member_def.struct_field)?;
                if &produced != f.data_type() {
                    return Err(ApiError::invalid(format!(
                        "the new UDF produces {produced} for '{member}', which is {}",
                        f.data_type()
                    )));
                }
                let def = Definition {
                    input_columns: inputs.clone(),
                    udf_name: checked.manifest.entry.clone(),
                    udf_version: v
                        .udf_version
                        .clone()
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| checked.manifest.module_sha256.clone()),
                    module_sha256: checked.manifest.module_sha256.clone(),
                    manifest: checked.manifest_text.clone(),
                    manifest_checksum: checked.checksum.clone(),
                    image: v.image.clone().or(member_def.image.clone()),
                    auto_backfill: v.auto_backfill.unwrap_or(member_def.auto_backfill),
                    ..member_def
                };
                let mut md = user_metadata(v.field_metadata.as_ref())?;
                md.insert(
                    DEFINITION_KEY.to_string(),
                    serde_json::to_string(&def).map_err(|e| ApiError::internal(e.to_string()))?,
                );
                updates.insert(member.clone(), md);
            }
        }
        store.set_field_metadata(location, branch, updates).await
    }
}

fn user_metadata(md: Option<&HashMap<String, String>>) -> ApiResult<HashMap<String, String>> {
    let md = md.cloned().unwrap_or_default();
    if let Some(k) = md.keys().find(|k| k.starts_with("lancet.")) {
        return Err(ApiError::invalid(format!(
            "field_metadata key '{k}' is reserved (lancet.*)"
        )));
    }
    Ok(md)
}

/// The type of the child `struct_field` of a UDF result (the whole result when empty).
fn produced_type(result: &DataType, struct_field: &str) -> ApiResult<DataType> {
    if struct_field.is_empty() {
        return Ok(result.clone());
    }
    match result {
        DataType::Struct(fields) => fields
            .iter()
            .find(|f| f.name() == struct_field)
            .map(|f| f.data_type().clone())
            .ok_or_else(|| {
                ApiError::invalid(format!(
                    "the UDF result has no struct field '{struct_field}'"
                ))
            }),
        other => Err(ApiError::invalid(format!(
            "outputs name struct_field '{struct_field}', but the UDF returns {other}, not a struct"
        ))),
    }
}

/// A zero-row batch of the input columns, for the definition-time dry run.
fn empty_inputs(
    schema: &lance_core::datatypes::Schema,
    inputs: &[String],
) -> ApiResult<RecordBatch> {
    let arrow = Schema::from(schema);
    let mut fields = Vec::new();
    let mut arrays = Vec::new();
    for name in inputs {
        let f = arrow.field_with_name(name).map_err(|_| {
            ApiError::invalid(format!("input column '{name}' must be a top-level column"))
        })?;
        arrays.push(new_empty_array(f.data_type()));
        fields.push(f.clone());
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).map_err(ApiError::from)
}
