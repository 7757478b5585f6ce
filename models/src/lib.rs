//! Embedding models for Lancet: text in, one vector per text out, computed on the host by
//! ONNX Runtime so that sandboxed UDFs (and the server itself, for text queries) can ask for
//! embeddings without a model runtime of their own.
//!
//! - [`Manifest`]: what a tenant registers: the files by sha256, the dimension, maximum
//!   tokens, pooling, normalisation, the graph's input and output names.
//! - [`runtime::init`]: loads ONNX Runtime's shared library once per process (`ort`'s
//!   `load-dynamic`: the build downloads nothing; a server without the library refuses models
//!   by name and runs everything else).
//! - [`Model`]: a checked, loaded model; [`Model::embed`] tokenises (Hugging Face
//!   `tokenizers`), runs the graph under a deadline ONNX Runtime enforces, pools and
//!   normalises.
//! - [`ModelCache`]: models loaded once per process, keyed by digest, within a memory bound.
//!
//! Storage (where the files live) and tenancy (who may call what, how often) are the host's:
//! this crate knows neither HTTP, lance nor Wasm.

mod cache;
mod embed;
mod error;
mod manifest;
mod model;
pub mod runtime;

pub use cache::ModelCache;
pub use embed::{CallLimits, Embeddings};
pub use error::ModelError;
pub use manifest::{
    InputNames, MAX_DIMENSION, MAX_TOKENS, MODEL_FILE, Manifest, Pooling, TOKENIZER_FILE,
    check_name, is_sha256, verify,
};
pub use model::{LoadOptions, Model};
