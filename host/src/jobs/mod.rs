//! Background jobs. The machinery here keeps every job's record in memory and on the root
//! (`state`), runs a job on the node holding its lease and hands it over when that node goes
//! (`ownership`), logs what happens to it (`events`), and answers describe, list, cancel,
//! pause/resume and the spec's transactions. Jobs belong to a tenant: another tenant neither
//! sees nor cancels them.
//!
//! What a job does is its kind's: `kinds/` holds backfills, table upkeep and materialized view
//! refreshes, each behind the [`JobKind`] contract, handed to the [`JobManager`] at start-up.
//! The machinery never imports a kind.

pub mod events;
mod job;
mod kind;
pub mod kinds;
mod manager;
mod ownership;
mod pause;
pub mod state;
pub mod transaction;

pub use job::{Job, Progress, Stop};
pub use kind::{JobKind, JobSpec};
pub use manager::JobManager;
