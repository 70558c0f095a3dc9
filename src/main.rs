//! Thin binary: parse the command line, set up logging, call the library.

use std::process::ExitCode;

use clap::Parser;
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;
use zkgate::config::{Cli, Command};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = EnvFilter::try_from_env("ZKGATE_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    if cli.log_json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    let result = match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::Dev(args) => return zkgate::cli::dev(args).await,
        Command::Elect(args) => return ExitCode::from(zkgate::cli::elect(args).await),
        Command::Lock(args) => return ExitCode::from(zkgate::cli::lock(args).await),
        Command::Observe(args) => zkgate::cli::observe(args).await,
        Command::Leader(args) => zkgate::cli::leader(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zkgate: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: zkgate::config::ServeArgs) -> Result<(), String> {
    let r = args.resolve()?;
    let listener = TcpListener::bind(r.listen)
        .await
        .map_err(|e| format!("listen {}: {e}", r.listen))?;
    let http = TcpListener::bind(r.http)
        .await
        .map_err(|e| format!("http {}: {e}", r.http))?;
    zkgate::server::run(
        r.serve,
        listener,
        Some(http),
        zkgate::cli::shutdown_signal(),
    )
    .await
    .map_err(|e| e.to_string())
}
