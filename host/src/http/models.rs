//! `/v1/model/...`: a tenant's embedding models (`crate::models`).
//!
//! - `POST /v1/model/file`: a file's bytes (`model.onnx`, `tokenizer.json`); answers its
//!   `sha256`, which the manifest then names.
//! - `POST /v1/model/{name}/create`: the manifest; the model is loaded and run once before it
//!   is registered.
//! - `POST /v1/model/{name}/describe`, `GET /v1/model/list`, `POST /v1/model/{name}/drop`.
//! - `POST /v1/model/{name}/embed`: `{"texts": [...]}` to `{"vectors": [[...]], ...}`.

use axum::extract::{FromRequest, Path, Request, State};
use axum::response::Response;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

use super::pipeline::auth::Caller;
use super::pipeline::extract::JsonBody;
use super::{AppState, reply};
use crate::error::{ApiError, ApiResult};

/// A raw request body: a model file's bytes.
pub struct FileBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for FileBody {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        Bytes::from_request(req, state)
            .await
            .map(FileBody)
            .map_err(|e| ApiError::invalid(format!("model file body: {e}")))
    }
}

impl super::openapi::Documented for FileBody {
    fn document(op: &mut super::openapi::Operation) {
        op.body = super::openapi::Body::Octets;
    }
}

pub async fn upload_file(
    State(app): State<AppState>,
    caller: Caller,
    FileBody(bytes): FileBody,
) -> ApiResult<Response> {
    let (sha256, size) = app.models.put_file(caller.tenant(), bytes).await?;
    Ok(reply(json!({ "sha256": sha256, "size": size })))
}

pub async fn create(
    State(app): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    JsonBody(mut manifest): JsonBody<Value>,
) -> ApiResult<Response> {
    lancet_models::check_name(&name).map_err(crate::models::api_error)?;
    let Some(object) = manifest.as_object_mut() else {
        return Err(ApiError::invalid("a model manifest is a JSON object"));
    };
    match object.get("name") {
        None => {
            object.insert("name".into(), Value::String(name.clone()));
        }
        Some(Value::String(n)) if *n == name => {}
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "the manifest's name {other} differs from the path's '{name}'"
            )));
        }
    }
    let bytes = serde_json::to_vec(&manifest).map_err(|e| ApiError::internal(e.to_string()))?;
    let manifest = lancet_models::Manifest::from_json(&bytes).map_err(crate::models::api_error)?;
    let stored = app.models.register(caller.tenant(), manifest).await?;
    Ok(reply(stored.public()))
}

pub async fn describe(
    State(app): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    let stored = app.models.get(caller.tenant(), &name).await?;
    Ok(reply(stored.public()))
}

pub async fn list(State(app): State<AppState>, caller: Caller) -> ApiResult<Response> {
    let models: Vec<Value> = app
        .models
        .list(caller.tenant())
        .await?
        .iter()
        .map(|m| m.public())
        .collect();
    Ok(reply(json!({ "models": models })))
}

pub async fn drop(
    State(app): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    let users = crate::models::columns_using(&app, caller.tenant(), &name).await?;
    app.models
        .drop_model(caller.tenant(), &name, &users)
        .await?;
    Ok(reply(json!({ "dropped": name })))
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmbedBody {
    /// The texts, one vector each, in order.
    texts: Vec<String>,
}

pub async fn embed(
    State(app): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<EmbedBody>,
) -> ApiResult<Response> {
    let (stored, embeddings) = app.models.embed(caller.tenant(), &name, body.texts).await?;
    let vectors: Vec<&[f32]> = (0..embeddings.vectors())
        .map(|i| embeddings.row(i))
        .collect();
    Ok(reply(json!({
        "model": stored.manifest.name,
        "digest": stored.digest,
        "dimension": embeddings.dimension(),
        "tokens": embeddings.tokens(),
        "vectors": vectors,
    })))
}
