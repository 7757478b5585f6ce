//! Black-box tests: each starts the real `lancet` binary and drives it over HTTP.

mod common;

mod auth;
mod batch;
mod blobs;
mod branch_merge;
mod clone;
mod concurrency;
mod crash;
mod crash_support;
mod crash_upkeep;
mod data;
mod declared_columns;
mod deep_sql;
mod errors;
mod history;
mod hostile_bodies;
mod indexes;
mod job_control;
mod jobs;
mod metadata;
mod multipart;
mod namespaces;
mod object_store;
mod openapi;
mod operability;
mod predicate_fuzz;
mod protocol;
mod python_udf;
mod query;
mod s3;
mod table_versions;
mod transactions;
mod udf;
mod upkeep;
mod views;
