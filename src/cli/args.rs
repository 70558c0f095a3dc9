//! The command line's grammar: the `zkgate` command and every verb's arguments (`serve`'s
//! settings are [`crate::config::ServeArgs`], declared and merged there).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::config::{ServeArgs, DEFAULT_HTTP, DEFAULT_LISTEN};

#[derive(Debug, Parser)]
#[command(
    name = "zkgate",
    version,
    about = "gRPC coordination gateway: leader election and locks over ZooKeeper"
)]
pub struct Cli {
    /// Log as JSON lines instead of human-readable text.
    #[arg(long, global = true, env = "ZKGATE_LOG_JSON")]
    pub log_json: bool,
    #[command(subcommand)]
    pub command: Command,
}

// `ServeArgs` is large, but the command line is parsed once.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway.
    Serve(ServeArgs),
    /// Start a local ZooKeeper (from the installed distribution) plus a gateway, for trying it.
    Dev(DevArgs),
    /// Campaign in an election; with `-- CMD…`, run CMD exactly while leader (like `etcdctl elect`).
    Elect(ElectArgs),
    /// Hold a lock; with `-- CMD…`, run CMD exactly while holding it (like `consul lock`).
    Lock(LockArgs),
    /// Print the election's leader whenever it changes; with --prefix, every election under
    /// the prefix (and any NAMEs), one line per election and change.
    Observe(ObserveArgs),
    /// Print the election's current leader (exit 4 when nobody leads).
    Leader(NameArgs),
    /// Print the election's queue in order.
    Candidates(NameArgs),
    /// Print who holds a lock and how many wait.
    Holders(NameArgs),
    /// Leave an election by lease, from anywhere (exit 4 for a lease the gateway cannot honour).
    Resign(LeaseArgs),
    /// Release a lock by lease, from anywhere (exit 4 for a lease the gateway cannot honour).
    Release(LeaseArgs),
    /// Is TOKEN the election's current leader's (with --lock: a current holder's)? Exit 0 if
    /// so, 5 if not.
    Validate(ValidateArgs),
}

/// `dev` flags. Port 0 picks a free port; the bound addresses are printed as `gRPC ADDR` and
/// `HTTP ADDR` lines, so scripts and tests can run several side by side.
#[derive(Debug, Args, Clone)]
pub struct DevArgs {
    /// gRPC listen address (port 0: any free port)
    #[arg(long, default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// HTTP address for /metrics, /healthz, /readyz (port 0: any free port)
    #[arg(long, default_value = DEFAULT_HTTP)]
    pub http: SocketAddr,
    /// Session timeout for the gateway. The local ZooKeeper runs with a 500 ms tick, so it
    /// grants 1s to 10s; the default matches `serve`.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub session_timeout: Duration,
}

/// How the client verbs reach the gateway fleet, and how they print.
#[derive(Debug, Args, Clone)]
pub struct ClientArgs {
    /// Gateway endpoint: host:port, http://host:port or https://host:port. Repeatable and
    /// comma-separated: the fleet, tried in order with failover [default: http://127.0.0.1:50051]
    #[arg(
        long = "endpoint",
        env = "ZKGATE_ENDPOINT",
        value_delimiter = ',',
        action = clap::ArgAction::Append
    )]
    pub endpoints: Vec<String>,
    /// PEM CA bundle for the gateways' certificates (TLS; bare host:port endpoints then use TLS)
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (needs --key)
    #[arg(long, requires = "key")]
    pub cert: Option<PathBuf>,
    /// PEM private key of --cert
    #[arg(long, requires = "cert")]
    pub key: Option<PathBuf>,
    /// Verify the gateways' certificates against this name instead of the endpoint's host
    #[arg(long)]
    pub server_name: Option<String>,
    /// File holding the bearer token sent as `authorization: Bearer …` (gateways with
    /// --auth-policy identify callers by it); without it, the token in ZKGATE_TOKEN if set
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// text (for people) or json (one JSON object per line on stdout, for scripts)
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

impl ClientArgs {
    /// Whether any TLS flag was given.
    pub fn tls_requested(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.server_name.is_some()
    }
}

/// `--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(Debug, Args, Clone)]
pub struct NameArgs {
    pub name: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Args, Clone)]
pub struct ObserveArgs {
    /// The election (without --prefix: exactly one); with --prefix, more elections to follow
    pub names: Vec<String>,
    /// Follow every election whose name starts with this, those created later included
    /// (ObserveMany; "" with no NAME: every election)
    #[arg(long)]
    pub prefix: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Args, Clone)]
pub struct LeaseArgs {
    /// The lease from the holder's `queued` (`-`: read it from standard input, which keeps it
    /// out of the process list)
    pub lease: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `zkgate validate [--lock] NAME TOKEN`.
#[derive(Debug, Args, Clone)]
pub struct ValidateArgs {
    /// NAME is a lock: is TOKEN a current holder's?
    #[arg(long)]
    pub lock: bool,
    /// Election (or, with --lock, lock) name
    pub name: String,
    /// The fencing token to check
    pub token: u64,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// How `elect -- CMD` and `lock -- CMD` stop CMD and what they do after losing the hold.
#[derive(Debug, Args, Clone)]
pub struct CommandArgs {
    /// After SIGTERM to CMD's process group (and descendants), wait at most this long before
    /// SIGKILL. Cut to the time until anyone else can be granted the hold: on `suspended` what
    /// is left of `stop_within`, after silence about 0, after the stream's end 0 (SIGKILL at
    /// once)
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub kill_grace: Duration,
    /// After losing the hold (and stopping CMD), campaign again [default: on for `elect`,
    /// off for `lock`]
    #[arg(long, overrides_with = "no_requeue")]
    pub requeue: bool,
    /// After losing the hold (and stopping CMD), exit 3 instead of campaigning again
    /// (`--once` is the conformance agent's name for it)
    #[arg(long, alias = "once", overrides_with = "requeue")]
    pub no_requeue: bool,
}

impl CommandArgs {
    /// `--requeue` / `--no-requeue`, whichever came last, else `default`.
    pub fn requeue_or(&self, default: bool) -> bool {
        if self.requeue {
            true
        } else if self.no_requeue {
            false
        } else {
            default
        }
    }
}

/// `zkgate elect NAME [-- CMD…]`.
///
/// With CMD, leadership and CMD go together (Curator's LeaderSelector): CMD starts when this
/// candidate is elected, with ZKGATE_FENCING_TOKEN in its environment, in a process group of its
/// own, behind a keeper process that kills it should the verb die or freeze. On `suspended`, on
/// the stream's end, or after `silence_limit` without any message, CMD is stopped (its process
/// group and every descendant: SIGTERM, SIGKILL after the grace), the candidacy is given up
/// once all are gone, and the verb campaigns again (unless --no-requeue). A queued standby
/// waits as long as it takes. When CMD exits by itself what it left is stopped, the candidacy
/// given up and the verb exits with CMD's exit code (128+N if a signal N killed it);
/// SIGINT/SIGTERM/SIGHUP/SIGTSTP to the verb stop CMD the same way.
#[derive(Debug, Args, Clone)]
#[command(after_long_help = ELECT_HELP)]
pub struct ElectArgs {
    /// Election name
    pub name: String,
    /// Candidate name shown to others [default: hostname-pid]
    #[arg(long, alias = "id")]
    pub candidate: Option<String>,
    /// Value to publish while leader
    #[arg(long, default_value = "")]
    pub value: String,
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(flatten)]
    pub command_args: CommandArgs,
    /// Command to run while leader; stopped when leadership is lost or uncertain
    #[arg(last = true)]
    pub command: Vec<String>,
}

const ELECT_HELP: &str = "\
With -- CMD…, CMD runs exactly while this candidate leads:
  - elected: CMD starts in its own process group, with ZKGATE_FENCING_TOKEN set to the
    leader's fencing token and ZKGATE_LEASE to the candidacy's lease.
  - suspended (the gateway lost ZooKeeper, drains or revokes the hold), the stream ends,
    or nothing is heard for silence_limit: CMD is stopped, then the candidacy is given up,
    and the verb campaigns again, on the next endpoint if the gateway failed or went silent
    (the default; --no-requeue exits 3 instead).
  - CMD exits: what it left running is stopped, the candidacy given up, and the verb exits
    with CMD's exit code (128+N when signal N killed it).
  - SIGINT, SIGTERM, SIGHUP or SIGTSTP to the verb: CMD is stopped, the candidacy given up,
    and the verb exits with CMD's exit code (128+N if CMD was not running). A second signal
    kills CMD at once.
  - The verb dies (SIGKILL, a crash) or is frozen (SIGSTOP) past the hold's validity: a
    keeper process (zkgate __keeper) kills CMD and everything it started.
Stopping CMD: SIGTERM to its process group and every descendant (those that left the group
too), SIGKILL after the grace, and the hold is given up only once all are gone. The grace is
--kill-grace at most, cut to the time until anyone else can be granted: on suspended what is
left of stop_within; after silence about 0; after the stream's end (a drain, a crash, a
resign by lease elsewhere) 0, SIGKILL at once.
A queued standby waits for as long as it takes.
Without CMD the verb prints its events and holds until SIGINT/SIGTERM, then resigns and exits
0; after a loss it campaigns again (--no-requeue: exit 3). --output json prints exactly the
conformance agent's lines (clients/CONFORMANCE.md): elected, lost, released, error.";

/// `zkgate lock NAME -- CMD…` (in the style of `consul lock`). The same rules as `elect -- CMD`,
/// except that after losing the lock it exits 3 unless --requeue is given: re-running a job
/// that was cut short is the caller's decision.
#[derive(Debug, Args, Clone)]
#[command(after_long_help = LOCK_HELP)]
pub struct LockArgs {
    /// Lock name
    pub name: String,
    /// Owner name shown to others [default: hostname-pid]
    #[arg(long, alias = "id")]
    pub owner: Option<String>,
    /// 1: a mutex; N: a semaphore with N permits (everyone on NAME must agree)
    #[arg(long, default_value_t = 1)]
    pub permits: u32,
    /// A shared (read) lock; without it the lock is exclusive (write)
    #[arg(long)]
    pub read: bool,
    /// Give up (exit 6) if not acquired within this long; 0 tries once [default: wait as long as it takes]
    #[arg(long, value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
    /// The lease lives only while keep-alives arrive within each ttl (sent every ttl/3)
    #[arg(long, value_parser = humantime::parse_duration)]
    pub ttl: Option<Duration>,
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(flatten)]
    pub command_args: CommandArgs,
    /// Command to run while holding the lock; stopped when the lock is lost or uncertain.
    /// Without it the lock is held until SIGINT/SIGTERM
    #[arg(last = true)]
    pub command: Vec<String>,
}

const LOCK_HELP: &str = "\
CMD runs exactly while the lock is held:
  - acquired: CMD starts in its own process group, with ZKGATE_FENCING_TOKEN set to the
    hold's fencing token and ZKGATE_LEASE to its lease.
  - suspended (the gateway lost ZooKeeper, drains or revokes the hold), the stream ends,
    or nothing is heard for silence_limit: CMD is stopped, then the lock is released, and
    the verb exits 3 (with --requeue it waits for the lock again and reruns CMD).
  - CMD exits: what it left running is stopped, the lock released, and the verb exits with
    CMD's exit code (128+N when signal N killed it).
  - SIGINT, SIGTERM, SIGHUP or SIGTSTP to the verb: CMD is stopped, the lock released, and
    the verb exits with CMD's exit code (128+N if CMD was not running). A second signal kills
    CMD at once.
  - The verb dies (SIGKILL, a crash) or is frozen (SIGSTOP) past the hold's validity: a
    keeper process (zkgate __keeper) kills CMD and everything it started.
Stopping CMD: SIGTERM to its process group and every descendant (those that left the group
too), SIGKILL after the grace, and the lock is released only once all are gone. The grace is
--kill-grace at most, cut to the time until anyone else can be granted: on suspended what is
left of stop_within; after silence about 0; after the stream's end (a drain, a lapsed --ttl,
a release by lease elsewhere) 0, SIGKILL at once.
Waiting for the lock takes as long as it takes, unless --timeout (exit 6 when it passes; 0
tries once). Without CMD the lock is held until SIGINT/SIGTERM, then released (exit 0).";

#[cfg(test)]
mod tests {
    use super::*;

    fn client_verb(args: &[&str]) -> Result<Command, String> {
        Cli::try_parse_from(std::iter::once("zkgate").chain(args.iter().copied()))
            .map(|c| c.command)
            .map_err(|e| e.to_string())
    }

    /// Endpoints are repeatable and comma-separated; the agent's `--id`/`--once` are accepted;
    /// `--timeout 0` is a try-lock; half a client identity is refused.
    #[test]
    fn client_verb_flags() {
        let Ok(Command::Lock(l)) = client_verb(&[
            "lock",
            "n",
            "--endpoint",
            "a:1,b:2",
            "--endpoint",
            "https://c:3",
            "--id",
            "me",
            "--once",
            "--timeout",
            "0",
            "--permits",
            "3",
            "--read",
            "--output",
            "json",
        ]) else {
            panic!("lock parses")
        };
        assert_eq!(l.client.endpoints, ["a:1", "b:2", "https://c:3"]);
        assert_eq!(l.owner.as_deref(), Some("me"));
        assert!(!l.command_args.requeue_or(true));
        assert_eq!(l.timeout, Some(Duration::ZERO));
        assert_eq!((l.permits, l.read), (3, true));
        assert_eq!(l.client.output, Output::Json);
        assert!(l.command.is_empty(), "CMD is optional");
        let Ok(Command::Elect(e)) = client_verb(&["elect", "n", "--id", "c"]) else {
            panic!("elect parses")
        };
        assert_eq!(e.candidate.as_deref(), Some("c"));
        assert!(e.command_args.requeue_or(true));
        assert!(client_verb(&["leader", "n", "--cert", "c.pem"]).is_err());
        assert!(client_verb(&["leader", "n", "--cert", "c.pem", "--key", "k.pem"]).is_ok());
        let Ok(Command::Validate(v)) = client_verb(&["validate", "--lock", "n", "42"]) else {
            panic!("validate parses")
        };
        assert!(v.lock && v.token == 42);
        assert!(client_verb(&["validate", "n", "-1"]).is_err());
    }
}
