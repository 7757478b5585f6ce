//! Black-box tests: each starts the real `lancet` binary and drives it over HTTP.

mod common;

mod auth;
mod batch;
mod data;
mod errors;
mod history;
mod indexes;
mod jobs;
mod namespaces;
mod protocol;
mod query;
mod udf;
