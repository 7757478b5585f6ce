//! Pieces of the `lancet` command line besides `serve`: clients of a running server, and
//! one-shot workers over its root.

pub mod admin;
pub mod tasks;
pub mod watch;
