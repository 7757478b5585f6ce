//! Computing virtual columns for rows being written: `auto_backfill` columns are computed by
//! their UDF as part of the write (same commit); other virtual columns, and the lancedb
//! client's computed and Function columns (`declared`), are written as null, to be filled by a
//! backfill job.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, StructArray, new_null_array};
use arrow_schema::{Field, Schema};
use lancet_udf::Manifest;

use super::{DEFINITION_KEY, Definition, VirtualColumns, udf_error};
use crate::error::{ApiError, ApiResult};
use crate::store::RowTransform;

impl VirtualColumns {
    /// The hook the store runs on rows `tenant` writes to an existing table.
    pub fn insert_hook<'a>(&'a self, tenant: &'a str) -> Box<RowTransform<'a>> {
        Box::new(move |ds, batches| {
            // Most tables have no virtual column: answer those from the field metadata alone,
            // on the caller's thread (this runs on every write).
            let any = ds.schema().fields.iter().any(|f| {
                f.metadata.contains_key(DEFINITION_KEY)
                    || f.metadata
                        .get(super::declared::COMPUTED_KEY)
                        .map(String::as_str)
                        == Some("true")
            });
            if !any {
                return Ok(batches);
            }
            // UDFs block for up to their time limit: the worker hands its queue to another
            // thread first.
            tokio::task::block_in_place(|| self.compute(tenant, ds, batches))
        })
    }

    fn compute(
        &self,
        tenant: &str,
        ds: &lance::Dataset,
        batches: Vec<RecordBatch>,
    ) -> ApiResult<Vec<RecordBatch>> {
        let schema = Schema::from(ds.schema());
        let virtuals: Vec<(Field, Option<Definition>)> = schema
            .fields()
            .iter()
            .filter_map(|f| {
                let def = f
                    .metadata()
                    .get(DEFINITION_KEY)
                    .and_then(|t| serde_json::from_str(t).ok());
                (def.is_some() || super::declared::kind(f).is_some())
                    .then(|| (f.as_ref().clone(), def))
            })
            .collect();
        if virtuals.is_empty() {
            return Ok(batches);
        }
        batches
            .into_iter()
            .map(|b| self.complete(tenant, &schema, &virtuals, b))
            .collect()
    }

    fn complete(
        &self,
        tenant: &str,
        table: &Schema,
        virtuals: &[(Field, Option<Definition>)],
        batch: RecordBatch,
    ) -> ApiResult<RecordBatch> {
        let rows = batch.num_rows();
        let mut results: HashMap<String, ArrayRef> = HashMap::new();
        let mut extra: HashMap<String, ArrayRef> = HashMap::new();
        for (field, def) in virtuals {
            if batch.column_by_name(field.name()).is_some() {
                continue; // the writer supplied the values
            }
            let array = if let Some(def) = def.as_ref().filter(|d| d.auto_backfill) {
                let key = def.group.join("\u{0}");
                let result = match results.get(&key) {
                    Some(r) => r.clone(),
                    None => {
                        let r = self.run(tenant, table, def, field, &batch)?;
                        results.insert(key, r.clone());
                        r
                    }
                };
                pick(&result, &def.struct_field, field)?
            } else {
                new_null_array(field.data_type(), rows)
            };
            extra.insert(field.name().clone(), array);
        }
        // In the table's column order when every column is accounted for; otherwise let lance
        // report what is missing.
        let mut fields = Vec::new();
        let mut arrays = Vec::new();
        let complete = table
            .fields()
            .iter()
            .all(|f| batch.column_by_name(f.name()).is_some() || extra.contains_key(f.name()));
        if complete {
            for f in table.fields() {
                let a = batch
                    .column_by_name(f.name())
                    .cloned()
                    .or_else(|| extra.get(f.name()).cloned())
                    .unwrap();
                fields.push(
                    Field::new(f.name(), a.data_type().clone(), f.is_nullable())
                        .with_metadata(f.metadata().clone()),
                );
                arrays.push(a);
            }
        } else {
            for (f, a) in batch.schema().fields().iter().zip(batch.columns()) {
                fields.push(f.as_ref().clone());
                arrays.push(a.clone());
            }
            for (field, _) in virtuals {
                if let Some(a) = extra.remove(field.name()) {
                    fields.push(field.clone());
                    arrays.push(a);
                }
            }
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).map_err(ApiError::from)
    }

    /// Run a column's UDF over the rows being written.
    fn run(
        &self,
        tenant: &str,
        table: &Schema,
        def: &Definition,
        field: &Field,
        batch: &RecordBatch,
    ) -> ApiResult<ArrayRef> {
        let mut fields = Vec::new();
        let mut arrays = Vec::new();
        for name in &def.input_columns {
            let col = batch.column_by_name(name).ok_or_else(|| {
                ApiError::invalid(format!(
                    "the written rows lack '{name}', an input of virtual column UDF '{}'",
                    def.udf_name
                ))
            })?;
            fields.push(Field::new(name, col.data_type().clone(), true));
            arrays.push(col.clone());
        }
        if let Some(model) = &def.model {
            let text = arrays.first().ok_or_else(|| {
                ApiError::internal(format!("embedding column '{}' has no input", field.name()))
            })?;
            return Ok(self.embed_column(tenant, model, text, field)?.values);
        }
        let input = RecordBatch::try_new(Arc::new(Schema::new(fields.clone())), arrays)
            .map_err(ApiError::from)?;
        if let Some(native) = &def.native {
            // The worker pool keeps the function's workers warm across writes.
            let output = super::result_type(table, def, field)?;
            let udf = self.native_udf(def, native, fields, output)?;
            return Ok(udf.compute(tenant, &input)?.values);
        }
        if let Some(python) = &def.python {
            let prepared = self
                .runtime
                .prepare_python(&python.spec(&def.udf_name)?)
                .map_err(udf_error)?;
            let expected = super::result_type(table, def, field)?;
            return self
                .runtime
                .invoke_python(
                    &prepared,
                    tenant,
                    &input,
                    &expected,
                    &self.limits_for(tenant),
                )
                .map(|out| out.array)
                .map_err(udf_error);
        }
        let manifest = Manifest::parse(&def.manifest).map_err(udf_error)?;
        let prepared = self.runtime.prepare(&manifest).map_err(udf_error)?;
        self.runtime
            .invoke(&prepared, tenant, &input, None, &self.limits_for(tenant))
            .map_err(udf_error)
    }
}

/// The part of a UDF result a column takes, cast-free: types were checked at definition.
pub(super) fn pick(result: &ArrayRef, struct_field: &str, field: &Field) -> ApiResult<ArrayRef> {
    let array = if struct_field.is_empty() {
        result.clone()
    } else {
        let s = result
            .as_any()
            .downcast_ref::<StructArray>()
            .ok_or_else(|| ApiError::invalid("the UDF no longer returns a struct"))?;
        struct_child(s, struct_field)?.ok_or_else(|| {
            ApiError::invalid(format!(
                "the UDF result lacks struct field '{struct_field}'"
            ))
        })?
    };
    if array.data_type() != field.data_type() {
        return Err(ApiError::invalid(format!(
            "the UDF returned {} for '{}', declared {}",
            array.data_type(),
            field.name(),
            field.data_type()
        )));
    }
    Ok(array)
}

/// The child `name` of `s` as a column of its own: null where the struct is null, whatever
/// the child holds under a null struct slot (a null row is often a zero there, not a null).
pub(super) fn struct_child(s: &StructArray, name: &str) -> ApiResult<Option<ArrayRef>> {
    let Some(child) = s.column_by_name(name) else {
        return Ok(None);
    };
    if s.null_count() == 0 {
        return Ok(Some(child.clone()));
    }
    let nulls = arrow_buffer::NullBuffer::union(s.nulls(), child.nulls());
    let data = child
        .to_data()
        .into_builder()
        .nulls(nulls)
        .build()
        .map_err(ApiError::from)?;
    Ok(Some(arrow_array::make_array(data)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, Int64Array};
    use arrow_buffer::NullBuffer;
    use arrow_schema::DataType;

    #[test]
    fn a_null_struct_row_is_null_in_every_child() {
        // Row 1 is a null struct whose child holds 0, as a function's converter writes it.
        let child: ArrayRef = Arc::new(Int64Array::from(vec![Some(3), Some(0), Some(5)]));
        let s = StructArray::new(
            vec![Field::new("n", DataType::Int64, true)].into(),
            vec![child],
            Some(NullBuffer::from(vec![true, false, true])),
        );
        let whole: ArrayRef = Arc::new(s.slice(1, 2));
        let field = Field::new("n", DataType::Int64, true);
        let n = pick(&whole, "n", &field).unwrap();
        let n = n.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(n.iter().collect::<Vec<_>>(), vec![None, Some(5)]);
        assert!(pick(&whole, "missing", &field).is_err());
    }
}
