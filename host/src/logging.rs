//! The server's log lines: to stderr, filtered by `LANCET_LOG` (default below), as text or
//! JSON. Colours only on a terminal: a log file or a collector gets plain lines.

use std::io::IsTerminal;

use crate::config::LogFormat;

/// What is logged when `LANCET_LOG` does not say.
pub const DEFAULT_FILTER: &str = "info,lance=warn,lance_namespace_impls=warn,lancet=info";

/// The subscriber `lancet` logs through, as a dispatcher (the binary installs it for the
/// process; the benchmarks put it on their serving threads to measure what logging costs).
pub fn dispatch(format: LogFormat) -> tracing::Dispatch {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LANCET_LOG")
        .unwrap_or_else(|_| DEFAULT_FILTER.into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.finish().into(),
        // Span fields (request_id, tenant...) flattened into each line's "span" object.
        LogFormat::Json => logs
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .finish()
            .into(),
    }
}
