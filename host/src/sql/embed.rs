//! `embed(model, text)` in SQL: the text's vector by the caller's registered model (a constant
//! name), as `fixed_size_list<float32>[dimension]`: so a statement can compare an embedding
//! column with the embedding of a text, e.g. `ORDER BY array_distance(vec, embed('minilm',
//! 'a cat'))`.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, StringArray};
use arrow_schema::{DataType, Field, FieldRef};
use lance::deps::datafusion::common::{DataFusionError, Result as DfResult, ScalarValue};
use lance::deps::datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

use crate::models::{Models, StoredModel};
use crate::virtual_columns::embedding::{self, ModelRef};

/// The function, bound to one caller's tenant and the models it had when the statement was
/// planned.
pub struct Embed {
    signature: Signature,
    tenant: String,
    models: Arc<Models>,
    registered: HashMap<String, StoredModel>,
}

impl std::fmt::Debug for Embed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embed")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Embed {
    fn eq(&self, other: &Self) -> bool {
        self.tenant == other.tenant
    }
}
impl Eq for Embed {}
impl Hash for Embed {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.tenant.hash(state);
    }
}

impl Embed {
    pub fn new(tenant: &str, models: Arc<Models>, registered: Vec<StoredModel>) -> Self {
        Self {
            signature: Signature::string(2, Volatility::Stable),
            tenant: tenant.to_string(),
            models,
            registered: registered
                .into_iter()
                .map(|m| (m.manifest.name.clone(), m))
                .collect(),
        }
    }

    fn model(&self, name: Option<&ScalarValue>) -> DfResult<&StoredModel> {
        let name = match name {
            Some(
                ScalarValue::Utf8(Some(n))
                | ScalarValue::LargeUtf8(Some(n))
                | ScalarValue::Utf8View(Some(n)),
            ) => n,
            _ => return Err(plan("embed(model, text): model must be a constant string")),
        };
        self.registered
            .get(name)
            .ok_or_else(|| plan(&format!("embed: model '{name}' is not registered")))
    }
}

fn plan(message: &str) -> DataFusionError {
    DataFusionError::Plan(message.to_string())
}

impl ScalarUDFImpl for Embed {
    fn name(&self) -> &str {
        "embed"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Err(plan("embed: the type is known from the model name"))
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let model = self.model(args.scalar_arguments.first().copied().flatten())?;
        let data_type = embedding::vector_type(model.manifest.dimension as usize)
            .map_err(|e| plan(&e.message))?;
        Ok(Arc::new(Field::new("embed", data_type, true)))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let name = match &args.args[0] {
            ColumnarValue::Scalar(s) => Some(s),
            ColumnarValue::Array(_) => None,
        };
        let stored = self.model(name)?;
        let text = args.args[1].to_array(args.number_rows)?;
        let text = arrow_cast::cast(&text, &DataType::Utf8)?;
        let text: ArrayRef = Arc::new(
            text.as_any()
                .downcast_ref::<StringArray>()
                .cloned()
                .ok_or_else(|| plan("embed: text must be a string"))?,
        );
        let model = ModelRef {
            name: stored.manifest.name.clone(),
            digest: stored.digest.clone(),
            dimension: stored.manifest.dimension as usize,
        };
        let field = args.return_field.as_ref();
        let rows = self.models.call_limits().max_rows;
        let computed = embedding::compute(
            self.models.as_ref(),
            &self.tenant,
            &model,
            &text,
            field,
            rows,
        )
        .map_err(|e| DataFusionError::Execution(e.message))?;
        // Checked in every build (the tests run the release binary): DataFusion trusts a
        // scalar function's array length, and a short one would misalign the batch's columns.
        if computed.values.len() != args.number_rows {
            return Err(DataFusionError::Internal(format!(
                "embedding returned {} values for {} rows",
                computed.values.len(),
                args.number_rows
            )));
        }
        Ok(ColumnarValue::Array(computed.values))
    }
}
