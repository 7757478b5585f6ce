//! The `lancet` command: `lancet serve` and helper subcommands.

use clap::{Parser, Subcommand};
use lancet::config::ServeConfig;

#[derive(Parser)]
#[command(
    name = "lancet",
    version,
    about = "A server for versioned Lance tables with Wasm UDF virtual columns"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the REST API over a data directory or object store root.
    Serve(ServeConfig),
}

fn main() {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LANCET_LOG")
                .unwrap_or_else(|_| "info,lance=warn,lance_namespace_impls=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = match cli.command {
        Command::Serve(config) => runtime.block_on(lancet::server::serve(config)),
    };
    if let Err(e) = result {
        eprintln!("lancet: {e}");
        std::process::exit(1);
    }
}
