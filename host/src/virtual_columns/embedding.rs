//! Embedding columns: a virtual column computed by a registered model from one text column,
//! with no code (`udf_backend: "model"`, `udf_name`: the model). The model's digest is kept in
//! the column's definition, so a model registered again under the same name with other files
//! is refused by the column rather than mixed into its vectors.
//!
//! The models themselves are `crate::models`'; this module reaches them through [`Embedder`],
//! so virtual columns stay apart from the registry's storage.

use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::{Array, ArrayRef, LargeStringArray, StringArray, StringViewArray};
use arrow_schema::{DataType, Field};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::backfill::Computed;
use super::{DEFINITION_KEY, Definition, NewVirtual, VirtualColumns};
use crate::error::{ApiError, ApiResult};

pub const BACKEND: &str = "model";

/// The model an embedding column computes with, as its definition records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelRef {
    pub name: String,
    /// The registered manifest's digest when the column was defined.
    pub digest: String,
    pub dimension: usize,
}

/// What runs models for columns (the server's model registry).
pub trait Embedder: Send + Sync {
    /// `tenant`'s registered model `name`.
    fn resolve<'a>(&'a self, tenant: &'a str, name: &'a str) -> BoxFuture<'a, ApiResult<ModelRef>>;

    /// One vector per text (row-major), from a blocking thread: under the tenant's share of
    /// model calls and tokens, refused if the model's digest is no longer `model.digest`.
    fn embed_blocking(
        &self,
        tenant: &str,
        model: &ModelRef,
        texts: Vec<String>,
    ) -> ApiResult<Vec<f32>>;
}

/// The vector type of an embedding column of `dimension`: what lance searches.
pub fn vector_type(dimension: usize) -> ApiResult<DataType> {
    let size = i32::try_from(dimension)
        .map_err(|_| ApiError::invalid(format!("dimension {dimension} is too large")))?;
    Ok(DataType::FixedSizeList(
        Arc::new(Field::new("item", DataType::Float32, true)),
        size,
    ))
}

/// Checks a declared output type against the model's vectors.
pub fn check_declared(column: &str, declared: &DataType, model: &ModelRef) -> ApiResult<()> {
    let ok = matches!(declared, DataType::FixedSizeList(item, n)
        if *item.data_type() == DataType::Float32 && *n as usize == model.dimension);
    if ok {
        return Ok(());
    }
    Err(ApiError::invalid(format!(
        "column '{column}' is declared {declared}, but model '{}' gives {}-dimensional float32 \
         vectors (fixed_size_list<float32>[{}])",
        model.name, model.dimension, model.dimension
    )))
}

/// Checks that `column` can be the text input.
pub fn check_input(column: &str, data_type: &DataType) -> ApiResult<()> {
    match data_type {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Ok(()),
        other => Err(ApiError::invalid(format!(
            "input column '{column}' of an embedding column must be text, not {other}"
        ))),
    }
}

/// Embeds the text column `input` into vectors typed as `field`: a null text gives a null
/// vector; texts go to the model in calls of at most `max_rows`.
pub fn compute(
    embedder: &dyn Embedder,
    tenant: &str,
    model: &ModelRef,
    input: &ArrayRef,
    field: &Field,
    max_rows: usize,
) -> ApiResult<Computed> {
    let texts = texts(input)?;
    let present: Vec<String> = texts.iter().flatten().map(|s| s.to_string()).collect();
    let mut values = Vec::with_capacity(present.len() * model.dimension);
    for chunk in present.chunks(max_rows.max(1)) {
        values.extend(embedder.embed_blocking(tenant, model, chunk.to_vec())?);
    }
    if values.len() != present.len() * model.dimension {
        return Err(ApiError::internal(format!(
            "model '{}' gave {} values for {} texts of dimension {}",
            model.name,
            values.len(),
            present.len(),
            model.dimension
        )));
    }
    let DataType::FixedSizeList(item, size) = field.data_type() else {
        return Err(ApiError::internal(format!(
            "embedding column '{}' is {}, not a vector",
            field.name(),
            field.data_type()
        )));
    };
    let mut builder = FixedSizeListBuilder::with_capacity(
        Float32Builder::with_capacity(texts.len() * model.dimension),
        *size,
        texts.len(),
    )
    .with_field(item.clone());
    let mut next = values.chunks_exact(model.dimension);
    for text in &texts {
        match text {
            Some(_) => {
                let v = next.next().unwrap_or_default();
                builder.values().append_slice(v);
                builder.append(true);
            }
            None => {
                builder.values().append_nulls(model.dimension);
                builder.append(false);
            }
        }
    }
    let array: ArrayRef = Arc::new(builder.finish());
    Ok(Computed {
        values: array,
        nulled: 0,
        failures: Vec::new(),
    })
}

/// Whether `udf_backend` asks for an embedding column.
pub fn is_model_backend(backend: Option<&str>) -> bool {
    backend.is_some_and(|b| b.eq_ignore_ascii_case(BACKEND))
}

impl VirtualColumns {
    /// The field of a new embedding column `name` (null until computed), its definition in
    /// its metadata.
    pub(super) async fn embedding_field(
        &self,
        tenant: &str,
        schema: &lance_core::datatypes::Schema,
        name: &str,
        v: &NewVirtual,
    ) -> ApiResult<Field> {
        for (field, given) in [
            ("udf", v.udf.as_deref()),
            ("manifest", v.manifest.as_deref()),
            ("manifest_checksum", v.manifest_checksum.as_deref()),
            ("image", v.image.as_deref()),
        ] {
            if given.is_some_and(|g| !g.is_empty()) {
                return Err(ApiError::invalid(format!(
                    "{field} does not apply to an embedding column (udf_backend 'model'): the \
                     model named in udf_name computes it"
                )));
            }
        }
        let model_name = v
            .udf_name
            .as_deref()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ApiError::invalid("an embedding column names its model in udf_name"))?;
        let model = self.embedder()?.resolve(tenant, model_name).await?;
        if let Some(version) = v.udf_version.as_deref().filter(|s| !s.is_empty())
            && version != model.digest
        {
            return Err(ApiError::invalid(format!(
                "udf_version '{version}' is not the digest of model '{model_name}' ({})",
                model.digest
            )));
        }
        let [input] = v.input_columns.as_slice() else {
            return Err(ApiError::invalid(format!(
                "an embedding column takes exactly one text input column, not {}",
                v.input_columns.len()
            )));
        };
        let arrow = arrow_schema::Schema::from(schema);
        let input_field = arrow.field_with_name(input).map_err(|_| {
            ApiError::column_not_found(format!(
                "input column '{input}' must be a top-level column of the table"
            ))
        })?;
        check_input(input, input_field.data_type())?;
        let (column, data_type, nullable, metadata) = match v.outputs.as_slice() {
            [] => (
                name.to_string(),
                vector_type(model.dimension)?,
                true,
                Default::default(),
            ),
            [o] => {
                let declared = crate::json_types::parse_data_type(&o.data_type)?;
                check_declared(&o.column, &declared, &model)?;
                (
                    o.column.clone(),
                    declared,
                    o.nullable,
                    o.metadata.clone().unwrap_or_default(),
                )
            }
            many => {
                return Err(ApiError::invalid(format!(
                    "an embedding column has one output, not {}",
                    many.len()
                )));
            }
        };
        if schema.field(&column).is_some() {
            return Err(ApiError::invalid(format!(
                "column '{column}' already exists"
            )));
        }
        let def = Definition {
            input_columns: vec![input.clone()],
            udf_name: model.name.clone(),
            udf_version: model.digest.clone(),
            udf_backend: BACKEND.to_string(),
            module_sha256: model.digest.clone(),
            manifest: String::new(),
            manifest_checksum: String::new(),
            image: None,
            auto_backfill: v.auto_backfill.unwrap_or(false),
            struct_field: String::new(),
            group: vec![column.clone()],
            python: None,
            model: Some(model),
            native: None,
        };
        let mut md = super::define::user_metadata(v.field_metadata.as_ref())?;
        md.extend(metadata);
        md.insert(
            DEFINITION_KEY.to_string(),
            serde_json::to_string(&def).map_err(|e| ApiError::internal(e.to_string()))?,
        );
        Ok(Field::new(column, data_type, nullable).with_metadata(md))
    }

    /// Computes embedding column `field` (defined with `model`) over `input`, its text.
    pub(super) fn embed_column(
        &self,
        tenant: &str,
        model: &ModelRef,
        input: &ArrayRef,
        field: &Field,
    ) -> ApiResult<Computed> {
        compute(
            self.embedder()?,
            tenant,
            model,
            input,
            field,
            self.model_rows,
        )
    }
}

fn texts(input: &ArrayRef) -> ApiResult<Vec<Option<&str>>> {
    let any = input.as_any();
    if let Some(a) = any.downcast_ref::<StringArray>() {
        return Ok(a.iter().collect());
    }
    if let Some(a) = any.downcast_ref::<LargeStringArray>() {
        return Ok(a.iter().collect());
    }
    if let Some(a) = any.downcast_ref::<StringViewArray>() {
        return Ok(a.iter().collect());
    }
    Err(ApiError::invalid(format!(
        "an embedding column's input must be text, not {}",
        input.data_type()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Vectors of the text's length, so values show which text went where.
    struct Lengths(Mutex<Vec<usize>>);

    impl Embedder for Lengths {
        fn resolve<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, ApiResult<ModelRef>> {
            unreachable!()
        }
        fn embed_blocking(&self, _: &str, m: &ModelRef, texts: Vec<String>) -> ApiResult<Vec<f32>> {
            self.0.lock().unwrap().push(texts.len());
            Ok(texts
                .iter()
                .flat_map(|t| std::iter::repeat_n(t.len() as f32, m.dimension))
                .collect())
        }
    }

    #[test]
    fn nulls_stay_null_and_calls_are_chunked() {
        let model = ModelRef {
            name: "m".into(),
            digest: "d".into(),
            dimension: 2,
        };
        let field = Field::new("v", vector_type(2).unwrap(), true);
        let input: ArrayRef = Arc::new(StringArray::from(vec![
            Some("a"),
            None,
            Some("abc"),
            Some(""),
        ]));
        let e = Lengths(Mutex::new(Vec::new()));
        let out = compute(&e, "t", &model, &input, &field, 2).unwrap();
        assert_eq!(*e.0.lock().unwrap(), vec![2, 1]);
        let list = out
            .values
            .as_any()
            .downcast_ref::<arrow_array::FixedSizeListArray>()
            .unwrap();
        assert_eq!(list.data_type(), field.data_type());
        assert!(list.is_null(1) && !list.is_null(3));
        let row = |i: usize| {
            list.value(i)
                .as_any()
                .downcast_ref::<arrow_array::Float32Array>()
                .unwrap()
                .values()
                .to_vec()
        };
        assert_eq!(
            (row(0), row(2), row(3)),
            (vec![1.0; 2], vec![3.0; 2], vec![0.0; 2])
        );
    }

    #[test]
    fn declared_types_must_match_the_model() {
        let model = ModelRef {
            name: "m".into(),
            digest: "d".into(),
            dimension: 384,
        };
        check_declared("v", &vector_type(384).unwrap(), &model).unwrap();
        let e = check_declared("v", &vector_type(512).unwrap(), &model).unwrap_err();
        assert!(e.message.contains("384-dimensional"), "{}", e.message);
        assert!(check_input("t", &DataType::Int64).is_err());
    }
}
