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
    if accepted::contains(sql) {
        return Ok(());
    }
    depth::check(sql, field)?;
    constructs::check(sql, field)?;
    accepted::insert(sql);
    Ok(())
}

/// Texts [`check`] has accepted. Clients send the same few filters again and again, and
/// parsing one (twice, as a filter and as an expression) costs tens of µs per request; the
/// verdict depends on the text alone. Bounded in entries and in the length of a text kept.
mod accepted {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};

    const MAX_ENTRIES: usize = 4096;
    const MAX_LEN: usize = 1024;

    fn set() -> &'static Mutex<HashSet<String>> {
        static SET: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
        SET.get_or_init(Mutex::default)
    }

    pub fn contains(sql: &str) -> bool {
        sql.len() <= MAX_LEN
            && set()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(sql)
    }

    pub fn insert(sql: &str) {
        if sql.len() > MAX_LEN {
            return;
        }
        let mut set = set().lock().unwrap_or_else(|p| p.into_inner());
        // Starting over when full keeps the hot texts (they come back at once) without an
        // LRU's bookkeeping on every hit.
        if set.len() >= MAX_ENTRIES {
            set.clear();
        }
        set.insert(sql.to_string());
    }
}

/// For whole queries DataFusion plans (views): bounded nesting only; DataFusion answers any
/// literal it cannot take with an error of its own.
pub fn check_depth(sql: &str, field: &str) -> ApiResult<()> {
    depth::check(sql, field)
}
