//! Thin binary: parse the command line, set up logging, call the library.

use std::process::ExitCode;

use clap::Parser;
use tokio::net::TcpListener;
use zkgate::config::{Cli, Command};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    zkgate::logging::init(cli.log_json);
    let result = match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::Dev(args) => return zkgate::cli::dev(args).await,
        Command::Elect(args) => return ExitCode::from(zkgate::cli::elect(args).await),
        Command::Lock(args) => return ExitCode::from(zkgate::cli::lock(args).await),
        Command::Observe(args) => return ExitCode::from(zkgate::cli::observe(args).await),
        Command::Leader(args) => return ExitCode::from(zkgate::cli::leader(args).await),
        Command::Candidates(args) => return ExitCode::from(zkgate::cli::candidates(args).await),
        Command::Holders(args) => return ExitCode::from(zkgate::cli::holders(args).await),
        Command::Resign(args) => {
            return ExitCode::from(zkgate::cli::give_up_by_lease(args, false).await)
        }
        Command::Release(args) => {
            return ExitCode::from(zkgate::cli::give_up_by_lease(args, true).await)
        }
        Command::Validate(args) => return ExitCode::from(zkgate::cli::validate(args).await),
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
