//! Pieces of the `lancet` command line that are clients of a running server, not the server.

pub mod watch;
