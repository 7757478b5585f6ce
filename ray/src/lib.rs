//! Lancet's Ray executor.
//!
//! A backfill whose `cluster` names a Ray cluster runs its tasks there: the Lancet node that
//! owns the job submits one Ray job through Ray's own [Job Submission REST API][jobs] (no
//! Python inside the server), and that job's driver runs each open task of the backfill as a
//! Ray task with the CPUs, GPUs and memory the cluster's settings ask for. A Ray task runs the
//! same `lancet` binary as the server (`lancet jobs run-task`): same sandbox, limits and
//! tenants, reading the job from the shared root and writing its checkpoints there. The owner
//! keeps staging and committing from those checkpoints, as for its own tasks.
//!
//! This crate knows Ray and nothing of lance or HTTP routing:
//! - [`Clusters`] and [`RayCluster`]: the operator's settings (`--clusters FILE`).
//! - [`JobClient`]: submit (idempotently, see [`JobClient::submit_once`]), look up, stop
//!   and read the logs of a Ray job.
//! - [`TaskRunSpec`] and [`entrypoint`]: the command Ray runs, the driver in `driver.py`.
//!
//! [jobs]: https://docs.ray.io/en/latest/cluster/running-applications/job-submission/rest.html

#![warn(missing_docs)]

mod client;
mod config;
mod driver;

pub use client::{Attachment, JobClient, JobInfo, JobStatus, RayError, Submission};
pub use config::{ClusterError, Clusters, RayCluster};
pub use driver::{FAILURE_PREFIX, TaskRunSpec, entrypoint, failure_in};
