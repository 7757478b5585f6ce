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
    /// UDF helpers.
    #[command(subcommand)]
    Udf(UdfCommand),
    /// Background jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
}

#[derive(Subcommand)]
enum JobsCommand {
    /// Draw a job's progress until it ends (exit status 1 unless it ends DONE).
    Watch {
        job_id: String,
        /// The server.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        url: String,
        /// Sent as `x-api-key` and `Authorization: Bearer`.
        #[arg(long, env = "LANCET_API_KEY")]
        api_key: Option<String>,
        /// Seconds between polls (fractions allowed).
        #[arg(long, default_value_t = 0.5)]
        interval: f64,
    },
}

#[derive(Subcommand)]
enum UdfCommand {
    /// Check a Wasm module and print its manifest, checksum and a `virtual_column` JSON.
    Package {
        /// The compiled module (wasm32-unknown-unknown).
        file: std::path::PathBuf,
        /// The exported entry point.
        #[arg(long)]
        entry: String,
        /// Configuration passed to the guest's init, as key=value (repeatable).
        #[arg(long = "config", value_parser = parse_kv)]
        config: Vec<(String, String)>,
    },
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("'{s}' is not key=value"))
}

fn package(
    file: &std::path::Path,
    entry: &str,
    config: Vec<(String, String)>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use base64::Engine;
    let wasm = std::fs::read(file)?;
    let packaged = lancet_udf::package(&wasm, entry, config.into_iter().collect())?;
    println!("module sha256:      {}", packaged.module_sha256);
    println!("manifest checksum:  {}", packaged.manifest_checksum);
    let vc = serde_json::json!({
        "input_columns": [],
        "udf": base64::engine::general_purpose::STANDARD.encode(&wasm),
        "udf_name": entry,
        "udf_backend": "wasm",
        "manifest": packaged.manifest_text,
        "manifest_checksum": packaged.manifest_checksum,
        "auto_backfill": false,
    });
    println!("virtual_column (fill in input_columns, and outputs for struct results):");
    println!("{}", serde_json::to_string_pretty(&vc)?);
    Ok(())
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
        Command::Udf(UdfCommand::Package {
            file,
            entry,
            config,
        }) => package(&file, &entry, config),
        Command::Jobs(JobsCommand::Watch {
            job_id,
            url,
            api_key,
            interval,
        }) => runtime
            .block_on(lancet::jobs::watch::watch(
                &url,
                &job_id,
                api_key.as_deref(),
                std::time::Duration::from_secs_f64(interval.max(0.05)),
            ))
            .map(|_| ())
            .map_err(Into::into),
    };
    if let Err(e) = result {
        eprintln!("lancet: {e}");
        std::process::exit(1);
    }
}
