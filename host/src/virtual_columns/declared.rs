//! Columns the lancedb client declares by a rule rather than by values: SQL computed columns
//! (`{"name", "computed": "<expr>"}`) and registered-Function columns (`{"name", "all_null":
//! true}` with a `function` binding). Both are added as all-null columns carrying the rule
//! under lancedb's own metadata keys, so the client reads them back as it wrote them.
//!
//! A computed column is filled by a backfill job (`backfill_column`: the client's
//! `refresh_column_async`) that evaluates its expression (see [`SqlRule`]). Function columns
//! are declared and computed by `super::function`.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{Field, Schema, SchemaRef};
use datafusion_physical_expr_common::physical_expr::PhysicalExpr;
use lance_datafusion::planner::Planner;

use crate::error::{ApiError, ApiResult};
use crate::store::Store;

pub const COMPUTED_KEY: &str = "computed_column";
pub const KIND_KEY: &str = "computed_column.kind";
pub const EXPRESSION_KEY: &str = "computed_column.expression";
pub const INPUTS_KEY: &str = "computed_column.inputs";
pub const BINDING_ID_KEY: &str = "computed_column.function.binding_id";
pub const OUTPUT_ORDINAL_KEY: &str = "computed_column.function.output_ordinal";
/// Schema metadata: every Function binding of the table (lancedb's `FunctionBinding`s in an
/// envelope `{"version": 1, "bindings": [...]}`), which the client reads back.
pub const BINDINGS_KEY: &str = "lancedb::function_bindings";

/// The kind of rule a declared column carries, if any.
pub fn kind(field: &Field) -> Option<&str> {
    (field.metadata().get(COMPUTED_KEY).map(String::as_str) == Some("true"))
        .then(|| field.metadata().get(KIND_KEY).map_or("", String::as_str))
}

/// A SQL expression over the table's columns, typed and planned.
pub struct SqlRule {
    expression: String,
    inputs: Vec<String>,
    physical: Arc<dyn PhysicalExpr>,
    schema: SchemaRef,
}

impl SqlRule {
    pub fn plan(table: &Schema, expression: &str) -> ApiResult<Self> {
        let bad = |e: &dyn std::fmt::Display| {
            ApiError::invalid(format!("computed expression '{expression}': {e}"))
        };
        crate::sql_guard::check(expression, "computed")?;
        // Against the whole table first, to learn which columns the expression reads; then
        // planned against just those, the batches it will be evaluated on.
        let expr = Planner::new(Arc::new(table.clone()))
            .parse_expr(expression)
            .map_err(|e| bad(&e))?;
        let referenced = Planner::column_names_in_expr(&expr);
        let inputs: Vec<String> = table
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .filter(|name| {
                referenced
                    .iter()
                    .any(|r| r == name || r.starts_with(&format!("{name}.")))
            })
            .collect();
        if inputs.is_empty() {
            return Err(bad(&"it reads no column"));
        }
        let schema = Arc::new(
            table.project(
                &inputs
                    .iter()
                    .filter_map(|n| table.index_of(n).ok())
                    .collect::<Vec<_>>(),
            )?,
        );
        let planner = Planner::new(schema.clone());
        let expr = planner
            .parse_expr(expression)
            .and_then(|e| planner.optimize_expr(e))
            .map_err(|e| bad(&e))?;
        let physical = planner.create_physical_expr(&expr).map_err(|e| bad(&e))?;
        physical.data_type(&schema).map_err(|e| bad(&e))?;
        Ok(Self {
            expression: expression.to_string(),
            inputs,
            physical,
            schema,
        })
    }

    pub fn inputs(&self) -> &[String] {
        &self.inputs
    }

    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The all-null field that declares `name` as this rule's column.
    pub fn field(&self, name: &str) -> ApiResult<Field> {
        let data_type = self
            .physical
            .data_type(&self.schema)
            .map_err(|e| ApiError::invalid(e.to_string()))?;
        let metadata = HashMap::from([
            (COMPUTED_KEY.to_string(), "true".to_string()),
            (KIND_KEY.to_string(), "sql".to_string()),
            (EXPRESSION_KEY.to_string(), self.expression.clone()),
            (
                INPUTS_KEY.to_string(),
                serde_json::to_string(&self.inputs).unwrap_or_default(),
            ),
        ]);
        Ok(Field::new(name, data_type, true).with_metadata(metadata))
    }

    /// The rule's values for `batch` (which holds at least its inputs, under their names).
    pub fn evaluate(&self, batch: &RecordBatch, target: &Field) -> ApiResult<ArrayRef> {
        let columns = self
            .inputs
            .iter()
            .map(|name| {
                batch.column_by_name(name).cloned().ok_or_else(|| {
                    ApiError::internal(format!("input column '{name}' was not read"))
                })
            })
            .collect::<ApiResult<Vec<_>>>()?;
        let input = RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
        )
        .map_err(ApiError::from)?;
        let values = self
            .physical
            .evaluate(&input)
            .and_then(|v| v.into_array(batch.num_rows()))
            .map_err(|e| {
                ApiError::invalid(format!("computed expression '{}': {e}", self.expression))
            })?;
        if values.data_type() == target.data_type() {
            return Ok(values);
        }
        arrow_cast::cast(&values, target.data_type()).map_err(ApiError::from)
    }
}

/// The rule of computed column `field` (declared with kind `sql`) against `table`.
pub fn sql_rule(table: &Schema, field: &Field) -> ApiResult<SqlRule> {
    let expression = field.metadata().get(EXPRESSION_KEY).ok_or_else(|| {
        ApiError::invalid(format!(
            "computed column '{}' carries no expression",
            field.name()
        ))
    })?;
    SqlRule::plan(table, expression)
}

/// Declare SQL computed columns `(name, expression)`: one commit adding them all-null.
pub async fn add_computed(
    store: &Store,
    location: &str,
    branch: Option<&str>,
    columns: &[(String, String)],
) -> ApiResult<u64> {
    let ds = store.latest(location, branch).await?;
    let table = Schema::from(ds.schema());
    let mut fields = Vec::new();
    for (name, expression) in columns {
        fields.push(SqlRule::plan(&table, expression)?.field(name)?);
    }
    store.add_null_columns(location, branch, fields).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;
    use arrow_schema::DataType;

    #[test]
    fn a_sql_rule_is_typed_and_evaluated_over_its_inputs() {
        let table = Schema::new(vec![
            Field::new("x", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]);
        let rule = SqlRule::plan(&table, "x * 2 + 1").unwrap();
        assert_eq!(rule.inputs(), ["x"]);
        let field = rule.field("y").unwrap();
        assert_eq!(kind(&field), Some("sql"));
        let only_x = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(vec![1, 5]))],
        )
        .unwrap();
        let values = rule.evaluate(&only_x, &field).unwrap();
        let values = values.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(values.values(), &[3, 11]);
        assert!(SqlRule::plan(&table, "nope + 1").is_err());
        assert!(SqlRule::plan(&table, "1 + 1").is_err(), "reads no column");
    }
}
