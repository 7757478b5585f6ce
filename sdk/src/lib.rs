//! Lancet's guest SDK: write a UDF as a Rust function over Arrow arrays and export it.
//!
//! ```ignore
//! use lancet_sdk::prelude::*;
//!
//! pub fn score(batch: &RecordBatch) -> Result<ArrayRef, UdfError> {
//!     zip_f64(arg(batch, 0)?, arg(batch, 1)?, |a, b| a * 0.7 + b * 0.3)
//! }
//! export_udf!(score);
//! ```
//! Build with `cargo build --target wasm32-unknown-unknown --release` (crate-type `cdylib`).
//! The ABI the exports implement is described in this crate's README.md.

#![warn(missing_docs)]

pub mod abi;
mod config;
pub mod embed;
mod error;
pub mod ipc;
pub mod layout;
mod macros;
pub mod map;

pub use arrow_array;
pub use arrow_buffer;
pub use arrow_schema;
pub use config::{Config, config};
pub use error::UdfError;

/// Everything a typical UDF needs in one `use`.
pub mod prelude {
    pub use crate::embed::{Embeddings, embed};
    pub use crate::map::{
        arg, for_each_str, map_f64, map_i64, map_str, map_str_bounded, map_str_to_f32s, map_values,
        struct_of, to_f64, to_i64, utf8_column, utf8_column_from_bytes, zip_f64, zip_values,
    };
    pub use crate::{Config, UdfError, config, export_init, export_udf, udf_error};
    pub use arrow_array::cast::AsArray;
    pub use arrow_array::{
        Array, ArrayRef, FixedSizeListArray, Float32Array, Float64Array, Int64Array, RecordBatch,
        StringArray, StructArray,
    };
    pub use arrow_schema::{DataType, Field};
    pub use std::sync::Arc;
}

#[cfg(test)]
mod tests;
