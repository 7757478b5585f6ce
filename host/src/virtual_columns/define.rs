//! Defining virtual columns: verify the manifest and module, check the entry point and the
//! output types with a zero-row dry run, then add the columns (null until computed) in one
//! commit with their definitions in field metadata.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{RecordBatch, new_empty_array};
use arrow_schema::{DataType, Field, Schema};
use lancet_udf::Manifest;

use super::python::{self, PythonDef};
use super::{AlterVirtual, DEFINITION_KEY, Definition, NewVirtual, VirtualColumns, udf_error};
use crate::error::{ApiError, ApiResult};
use crate::store::Store;

pub const BACKEND: &str = "wasm";

/// The UDF fields of a definition request (add or alter).
pub(super) struct UdfRequest<'a> {
    pub input_columns: &'a [String],
    pub backend: Option<&'a str>,
    pub manifest: Option<&'a str>,
    pub checksum: Option<&'a str>,
    pub udf: Option<&'a str>,
    pub udf_name: Option<&'a str>,
    pub image: Option<&'a str>,
}

/// What a definition request names, after its code is verified and compiled.
pub(super) struct Checked {
    pub udf_name: String,
    /// The code's sha256: the Wasm module's, or the Python source's.
    pub code_sha256: String,
    pub manifest_text: String,
    pub checksum: String,
    pub backend: &'static str,
    /// The type the UDF returns for these inputs.
    pub output_type: DataType,
    pub python: Option<PythonDef>,
}

impl VirtualColumns {
    /// Verifies the request's UDF. `outputs` is the type the columns being defined need from
    /// it (a struct of their `struct_field`s when several): a Python function's result is
    /// converted to it, while a Wasm module says what it returns in a zero-row dry run.
    pub(super) fn check(
        &self,
        schema: &lance_core::datatypes::Schema,
        req: &UdfRequest<'_>,
        outputs: Option<DataType>,
    ) -> ApiResult<Checked> {
        if req.input_columns.is_empty() {
            return Err(ApiError::invalid(
                "input_columns must name at least one column",
            ));
        }
        for c in req.input_columns {
            crate::field_path::resolve(schema, c)?;
        }
        if python::is_python(req)? {
            return self.check_python(schema, req, outputs);
        }
        let manifest_text = req
            .manifest
            .ok_or_else(|| ApiError::invalid("a virtual column needs a 'manifest'"))?;
        let checksum = req
            .checksum
            .ok_or_else(|| ApiError::invalid("a virtual column needs a 'manifest_checksum'"))?;
        let parsed = Manifest::parse_verified(manifest_text, checksum).map_err(udf_error)?;
        if let Some(name) = req.udf_name.filter(|n| !n.is_empty())
            && name != parsed.entry
        {
            return Err(ApiError::invalid(format!(
                "udf_name '{name}' differs from the manifest's entry '{}'",
                parsed.entry
            )));
        }
        let module = req
            .udf
            .filter(|u| !u.is_empty())
            .map(lancet_udf::decode_module_base64)
            .transpose()
            .map_err(udf_error)?;
        self.runtime
            .store_module(&parsed, module.as_deref())
            .map_err(udf_error)?;
        let prepared = self.runtime.prepare(&parsed).map_err(udf_error)?;
        let empty = empty_inputs(schema, req.input_columns)?;
        let out = self
            .runtime
            .invoke(&prepared, "definition", &empty, None, &self.limits)
            .map_err(udf_error)?;
        Ok(Checked {
            udf_name: parsed.entry.clone(),
            code_sha256: parsed.module_sha256.clone(),
            manifest_text: manifest_text.to_string(),
            checksum: checksum.to_string(),
            backend: BACKEND,
            output_type: out.data_type().clone(),
            python: None,
        })
    }

    pub async fn add(
        &self,
        store: &Store,
        tenant: &str,
        location: &str,
        branch: Option<&str>,
        cols: Vec<(String, NewVirtual)>,
    ) -> ApiResult<u64> {
        let ds = store.latest(location, branch).await?;
        let mut fields = Vec::new();
        for (name, v) in cols {
            if super::native::is_native_backend(v.udf_backend.as_deref()) {
                let columns = self.native_fields(tenant, ds.schema(), &v, None).await?;
                if super::geneva::is_geneva_backend(v.udf_backend.as_deref()) {
                    // Geneva's client reads the payload back before a blocking backfill.
                    let spec = super::geneva::spec_json(v.udf.as_deref().unwrap_or_default())?;
                    super::geneva::upload_payload(&ds, &spec).await?;
                }
                fields.extend(columns);
                continue;
            }
            if super::embedding::is_model_backend(v.udf_backend.as_deref()) {
                fields.push(self.embedding_field(tenant, ds.schema(), &name, &v).await?);
                continue;
            }
            let mut declared_outputs = declared_outputs(&v.outputs)?;
            // One output is the UDF's value itself: upstream's clients fill its required
            // `struct_field` with the column's name, so a lone output asks for a struct only
            // of a UDF that returns one with that field (a Wasm module's declared type says;
            // a Python function's value is taken as it is).
            let single = declared_outputs.len() == 1;
            let wanted = outputs_type(declared_outputs.iter().map(|(_, sf, t, nullable, _)| {
                (if single { "" } else { sf.as_str() }, t, *nullable)
            }));
            let checked = self.check(
                ds.schema(),
                &UdfRequest {
                    input_columns: &v.input_columns,
                    backend: v.udf_backend.as_deref(),
                    manifest: v.manifest.as_deref(),
                    checksum: v.manifest_checksum.as_deref(),
                    udf: v.udf.as_deref(),
                    udf_name: v.udf_name.as_deref(),
                    image: v.image.as_deref(),
                },
                wanted,
            )?;
            if let [(_, struct_field, ..)] = declared_outputs.as_mut_slice() {
                let has_child = matches!(&checked.output_type, DataType::Struct(children)
                    if children.iter().any(|c| c.name() == struct_field.as_str()));
                if !has_child {
                    struct_field.clear();
                }
            }
            let outputs = if declared_outputs.is_empty() {
                vec![(
                    name.clone(),
                    String::new(),
                    checked.output_type.clone(),
                    true,
                    HashMap::new(),
                )]
            } else {
                declared_outputs
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
                    udf_name: checked.udf_name.clone(),
                    udf_version: v
                        .udf_version
                        .clone()
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| checked.code_sha256.clone()),
                    udf_backend: checked.backend.to_string(),
                    module_sha256: checked.code_sha256.clone(),
                    manifest: checked.manifest_text.clone(),
                    manifest_checksum: checked.checksum.clone(),
                    image: v.image.clone(),
                    auto_backfill: v.auto_backfill.unwrap_or(false),
                    struct_field,
                    group: group.clone(),
                    python: checked.python.clone(),
                    model: None,
                    native: None,
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
        let mut marked = false;
        for field in &mut fields {
            let mut md = field.metadata().clone();
            if super::geneva::mark_server_side(&mut md) {
                *field = field.clone().with_metadata(md);
                marked = true;
            }
        }
        if marked {
            super::geneva::upload_payload(&ds, &super::geneva::server_side_spec_json()).await?;
        }
        store.add_null_columns(location, branch, fields).await
    }

    /// Swap the UDF of existing virtual columns (their outputs cannot change); a struct-output
    /// group is altered as a whole.
    pub async fn alter(
        &self,
        store: &Store,
        tenant: &str,
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
            if old.native.is_some() || super::native::is_native_backend(v.udf_backend.as_deref()) {
                let md = self.alter_native(tenant, &ds, field, &old, v).await?;
                updates.insert(path, md);
                continue;
            }
            if old.model.is_some() || super::embedding::is_model_backend(v.udf_backend.as_deref()) {
                return Err(ApiError::invalid(format!(
                    "column '{path}': an embedding column cannot be altered into or out of a \
                     model; drop the column and add it again"
                )));
            }
            let inputs = v
                .input_columns
                .clone()
                .unwrap_or_else(|| old.input_columns.clone());
            // A new UDF of the other language replaces the old one whole; otherwise what the
            // request leaves out is the old definition's.
            let switches = v
                .udf_backend
                .as_deref()
                .is_some_and(|b| !b.is_empty() && !b.eq_ignore_ascii_case(&old.udf_backend));
            let keep = |new: Option<String>, old: String| match switches {
                true => new,
                false => new.or(Some(old).filter(|o| !o.is_empty())),
            };
            let old_source = old.python.as_ref().map(|p| p.source_base64());
            let udf = match (&v.udf, switches) {
                (Some(u), _) => Some(u.clone()),
                (None, false) => old_source,
                (None, true) => None,
            };
            let manifest = keep(v.manifest.clone(), old.manifest.clone());
            let checksum = keep(v.manifest_checksum.clone(), old.manifest_checksum.clone());
            let image = keep(v.image.clone(), old.image.clone().unwrap_or_default());
            // A Wasm UDF's name is its manifest's entry; a Python one's names the function.
            let udf_name = v
                .udf_name
                .clone()
                .or_else(|| (old.python.is_some() && !switches).then(|| old.udf_name.clone()));
            let backend = keep(v.udf_backend.clone(), old.udf_backend.clone());
            let members = old
                .group
                .iter()
                .map(|m| {
                    let f = arrow.field_with_name(m).map_err(|_| {
                        ApiError::internal(format!("virtual column group member '{m}' is missing"))
                    })?;
                    let d: Definition = serde_json::from_str(&f.metadata()[DEFINITION_KEY])
                        .map_err(|e| ApiError::internal(e.to_string()))?;
                    Ok((d.struct_field, f.data_type().clone(), f.is_nullable()))
                })
                .collect::<ApiResult<Vec<_>>>()?;
            let wanted = outputs_type(members.iter().map(|(sf, t, n)| (sf.as_str(), t, *n)));
            let checked = self.check(
                ds.schema(),
                &UdfRequest {
                    input_columns: &inputs,
                    backend: backend.as_deref(),
                    manifest: manifest.as_deref(),
                    checksum: checksum.as_deref(),
                    udf: udf.as_deref(),
                    udf_name: udf_name.as_deref(),
                    image: image.as_deref(),
                },
                wanted,
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
                    udf_name: checked.udf_name.clone(),
                    udf_version: v
                        .udf_version
                        .clone()
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| checked.code_sha256.clone()),
                    udf_backend: checked.backend.to_string(),
                    module_sha256: checked.code_sha256.clone(),
                    manifest: checked.manifest_text.clone(),
                    manifest_checksum: checked.checksum.clone(),
                    image: image.clone(),
                    auto_backfill: v.auto_backfill.unwrap_or(member_def.auto_backfill),
                    python: checked.python.clone(),
                    native: None,
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
        // Geneva's client reads a payload back before a blocking backfill (geneva.rs).
        let mut marked = false;
        for md in updates.values_mut() {
            marked |= super::geneva::mark_server_side(md);
        }
        if marked {
            super::geneva::upload_payload(&ds, &super::geneva::server_side_spec_json()).await?;
        }
        store.set_field_metadata(location, branch, updates).await
    }
}

impl VirtualColumns {
    /// The new metadata of a column altered to (or within) the native tier: the UDF is
    /// checked as for a new column (environment, load, a call on no rows), the column keeps its
    /// name and type. Leaving the native tier is refused.
    async fn alter_native(
        &self,
        tenant: &str,
        ds: &lance::Dataset,
        field: &Field,
        old: &Definition,
        v: AlterVirtual,
    ) -> ApiResult<HashMap<String, String>> {
        let path = field.name();
        let backend = v
            .udf_backend
            .clone()
            .filter(|b| !b.trim().is_empty())
            .unwrap_or_else(|| old.udf_backend.clone());
        if !super::native::is_native_backend(Some(&backend)) {
            return Err(ApiError::invalid(format!(
                "column '{path}' runs in the native Python tier; altering it to udf_backend \
                 '{backend}' is not supported: drop the column and add it again"
            )));
        }
        if old.group.len() > 1 {
            return Err(ApiError::invalid(format!(
                "column '{path}' is one of a struct-output group; a native Python UDF fills one \
                 column: drop the group and add the column again"
            )));
        }
        let udf = v.udf.clone().filter(|u| !u.is_empty()).ok_or_else(|| {
            ApiError::invalid(format!(
                "altering column '{path}' to a native Python UDF needs the new UDF in 'udf'"
            ))
        })?;
        // What the request leaves out is the old definition's, when the backend stays.
        let same = backend.eq_ignore_ascii_case(&old.udf_backend);
        let keep = |new: Option<String>, old: &str| {
            new.or_else(|| (same && !old.is_empty()).then(|| old.to_string()))
        };
        let nv = NewVirtual {
            input_columns: v
                .input_columns
                .clone()
                .unwrap_or_else(|| old.input_columns.clone()),
            outputs: Vec::new(),
            image: keep(v.image.clone(), old.image.as_deref().unwrap_or_default()),
            udf: Some(udf),
            udf_name: keep(v.udf_name.clone(), &old.udf_name),
            udf_version: v.udf_version.clone(),
            udf_backend: Some(backend),
            auto_backfill: Some(v.auto_backfill.unwrap_or(old.auto_backfill)),
            manifest: keep(v.manifest.clone(), &old.manifest),
            manifest_checksum: keep(v.manifest_checksum.clone(), &old.manifest_checksum),
            field_metadata: v.field_metadata.clone(),
        };
        let altered = self
            .native_fields(tenant, ds.schema(), &nv, Some(field))
            .await?;
        let [altered] = altered.as_slice() else {
            return Err(ApiError::internal(
                "an altered native column gave several fields",
            ));
        };
        if super::geneva::is_geneva_backend(nv.udf_backend.as_deref()) {
            let spec = super::geneva::spec_json(nv.udf.as_deref().unwrap_or_default())?;
            super::geneva::upload_payload(ds, &spec).await?;
        }
        Ok(altered.metadata().clone())
    }
}

pub(super) fn user_metadata(
    md: Option<&HashMap<String, String>>,
) -> ApiResult<HashMap<String, String>> {
    let md = md.cloned().unwrap_or_default();
    if let Some(k) = md.keys().find(|k| k.starts_with("lancet.")) {
        return Err(ApiError::invalid(format!(
            "field_metadata key '{k}' is reserved (lancet.*)"
        )));
    }
    Ok(md)
}

/// One output column as declared: name, the `struct_field` of the result it takes, type,
/// nullable, field metadata.
pub(super) type Output = (String, String, DataType, bool, HashMap<String, String>);

/// The declared `outputs`, types parsed. Several outputs split one struct result: each must
/// name its `struct_field`, and no column or field may come twice (400 naming it).
pub(super) fn declared_outputs(outputs: &[super::OutputSpec]) -> ApiResult<Vec<Output>> {
    let mut out: Vec<Output> = Vec::new();
    for o in outputs {
        if outputs.len() > 1 && o.struct_field.is_empty() {
            return Err(ApiError::invalid(format!(
                "output '{}' needs its struct_field: with several outputs, each takes one \
                 field of the UDF's struct result",
                o.column
            )));
        }
        if out
            .iter()
            .any(|(c, f, ..)| *c == o.column || (!f.is_empty() && *f == o.struct_field))
        {
            return Err(ApiError::invalid(format!(
                "outputs name column '{}' or struct_field '{}' twice",
                o.column, o.struct_field
            )));
        }
        out.push((
            o.column.clone(),
            o.struct_field.clone(),
            crate::json_types::parse_data_type(&o.data_type)?,
            o.nullable,
            o.metadata.clone().unwrap_or_default(),
        ));
    }
    Ok(out)
}

/// The type a UDF must return to fill these outputs (`struct_field`, type, nullable): the
/// one output's type, or a struct of the named children. `None` when there are none.
pub(super) fn outputs_type<'a>(
    outputs: impl Iterator<Item = (&'a str, &'a DataType, bool)>,
) -> Option<DataType> {
    let outputs: Vec<_> = outputs.collect();
    match outputs.as_slice() {
        [] => None,
        [("", t, _)] => Some((*t).clone()),
        many => Some(DataType::Struct(
            many.iter()
                .map(|(name, t, nullable)| Field::new(*name, (*t).clone(), *nullable))
                .collect(),
        )),
    }
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
