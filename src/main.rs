//! Thin binary: parse the command line, set up logging, call the library.

use std::process::ExitCode;

use clap::{ArgMatches, CommandFactory, FromArgMatches};
use tokio::net::TcpListener;
use zkgate::cli::{Cli, Command};

fn main() -> ExitCode {
    // `zkgate __keeper …`: the keeper of a verb's CMD (see `zkgate::keeper`), before any
    // runtime or thread exists: it reaps every child of the process, and must be small.
    let mut args = std::env::args_os().skip(1);
    if args.next().is_some_and(|a| a == zkgate::cli::keeper::ARG) {
        let rest: Vec<_> = args.collect();
        return ExitCode::from(u8::try_from(zkgate::cli::keeper::main(&rest)).unwrap_or(1));
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime")
        .block_on(run())
}

async fn run() -> ExitCode {
    // The matches, not just the parsed `Cli`: `serve` merges its file under what clap says
    // came from flags or the environment.
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(serve_matches) = matches.subcommand_matches("serve") {
        return report(serve(serve_matches).await);
    }
    zkgate::logging::init(cli.log_json);
    let code = match cli.command {
        Command::Serve(_) => unreachable!("served above"),
        Command::Dev(args) => return zkgate::cli::verbs::dev(args).await,
        Command::Elect(args) => zkgate::cli::verbs::elect(args).await,
        Command::Lock(args) => zkgate::cli::verbs::lock(args).await,
        Command::Observe(args) => zkgate::cli::verbs::observe(args).await,
        Command::Leader(args) => zkgate::cli::verbs::leader(args).await,
        Command::Candidates(args) => zkgate::cli::verbs::candidates(args).await,
        Command::Holders(args) => zkgate::cli::verbs::holders(args).await,
        Command::Resign(args) => zkgate::cli::verbs::give_up_by_lease(args, false).await,
        Command::Release(args) => zkgate::cli::verbs::give_up_by_lease(args, true).await,
        Command::Validate(args) => zkgate::cli::verbs::validate(args).await,
    };
    ExitCode::from(code)
}

fn report(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zkgate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `zkgate serve`: merges the settings, then logs (the file may ask for JSON) and serves.
async fn serve(matches: &ArgMatches) -> Result<(), String> {
    let r = zkgate::config::load(matches)
        .and_then(zkgate::config::ServeArgs::resolve)
        .map_err(|e| e.to_string())?;
    zkgate::logging::init_serve(r.log_json, r.audit_log.as_deref()).map_err(|e| {
        format!(
            "--audit-log {}: {e}",
            r.audit_log
                .as_deref()
                .unwrap_or_else(|| "".as_ref())
                .display()
        )
    })?;
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
