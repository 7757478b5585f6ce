//! Lancet's native Python tier: UDFs that need the whole Python ecosystem (numpy, pyarrow,
//! model libraries, pickled functions) run by a real CPython inside an operating-system sandbox
//! instead of the Wasm one.
//!
//! - [`Interpreter`]: a host CPython, probed once (its version and prefix).
//! - [`Sandbox`]: how a worker is started: bubblewrap with user, pid, network, mount, IPC and
//!   UTS namespaces, read-only views of the interpreter and the function's environment and
//!   nothing else of the host's files, a private tmpfs, a seccomp filter, rlimits (memory,
//!   CPU time, processes, file size), an unprivileged uid when the server runs as root.
//! - [`Worker`]: one sandboxed interpreter holding one function; batches go in and results come
//!   out as Arrow IPC over pipes, every read and write under a deadline (the worker is killed
//!   when it passes one).
//! - [`Pipeline`]: one worker fed batch after batch, the next written while it computes the
//!   last (a backfill's calls), so it never waits for the host between batches.
//! - [`Pool`]: warm workers kept per (tenant, function), never shared between tenants.
//! - [`Environments`]: a function's requirements installed with pip into a directory named by
//!   the hash of the request, shared read-only between workers.
//!
//! Tenancy policy (who may use this tier) and storage are the host's: this crate knows neither
//! HTTP, lance nor Wasm.

mod env;
mod error;
mod frame;
mod interpreter;
mod pipeline;
mod pool;
mod sandbox;
mod seccomp;
mod shm;
mod slots;
mod worker;

pub use env::Environments;
pub use error::NativeError;
pub use interpreter::Interpreter;
pub use pipeline::{Pending, Pipeline};
pub use pool::{Pool, WorkerKey};
pub use sandbox::{Limits, Sandbox};
pub use worker::{CallOutput, Code, FunctionSpec, Mode, Worker};
