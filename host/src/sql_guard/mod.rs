//! Checks on a client's SQL text before any engine sees it: how deeply it nests (`depth`:
//! deep trees overflowed stacks and aborted the process) and what it holds (`constructs`:
//! literals, casts and function arguments lance's planner or DataFusion's kernels panic on).
//! Each refusal is a 400 that names the request field.

mod constructs;
mod depth;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod grammar;

pub use depth::{MAX_DEPTH, depth};

use crate::error::ApiResult;

/// For text lance plans (filters, predicates, column expressions): bounded nesting, and only
/// constructs lance plans and runs safely.
pub fn check(sql: &str, field: &str) -> ApiResult<()> {
    depth::check(sql, field)?;
    constructs::check(sql, field)
}

/// For whole queries DataFusion plans (views): bounded nesting only; DataFusion answers any
/// literal it cannot take with an error of its own.
pub fn check_depth(sql: &str, field: &str) -> ApiResult<()> {
    depth::check(sql, field)
}
