//! The command line: `serve` settings from flags, environment variables (`ZKGATE_*`) and an
//! optional TOML file, in that order of precedence; and the `dev` and client verbs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde::Deserialize;

use crate::coord::{CoordConfig, DEFAULT_ROOT, DEFAULT_SESSION_TIMEOUT};
use crate::server::ServeConfig;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:50051";
pub const DEFAULT_HTTP: &str = "127.0.0.1:9090";
pub const DEFAULT_ZK: &str = "127.0.0.1:2181";

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
    /// Print the election's leader whenever it changes.
    Observe(NameArgs),
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

/// `serve` flags. Every flag also reads `ZKGATE_<NAME>` and the `--config` TOML file (keys as
/// the long flag names, with `_` for `-`).
#[derive(Debug, Args, Default, Clone)]
pub struct ServeArgs {
    /// TOML file with any of these settings.
    #[arg(long, env = "ZKGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// ZooKeeper connect string, HOST:PORT[,HOST:PORT…] [default: 127.0.0.1:2181]
    #[arg(long, env = "ZKGATE_ZK")]
    pub zk: Option<String>,
    /// Root znode [default: /zkgate]
    #[arg(long, env = "ZKGATE_ROOT")]
    pub root: Option<String>,
    /// gRPC listen address [default: 127.0.0.1:50051]
    #[arg(long, env = "ZKGATE_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// HTTP address for /metrics, /healthz, /readyz [default: 127.0.0.1:9090]
    #[arg(long, env = "ZKGATE_HTTP")]
    pub http: Option<SocketAddr>,
    /// Requested ZooKeeper session timeout, e.g. 10s [default: 10s]
    #[arg(long, env = "ZKGATE_SESSION_TIMEOUT", value_parser = humantime::parse_duration)]
    pub session_timeout: Option<Duration>,
    /// ZooKeeper sessions shared by all streams [default: 1]
    #[arg(long, env = "ZKGATE_ZK_SESSIONS")]
    pub zk_sessions: Option<usize>,
    /// Largest candidate value in bytes [default: 65536]
    #[arg(long, env = "ZKGATE_MAX_VALUE_BYTES")]
    pub max_value_bytes: Option<usize>,
    /// Leaders stop this long before the server could expire the session [default: 10% of the session timeout]
    #[arg(long, env = "ZKGATE_STOP_MARGIN", value_parser = humantime::parse_duration)]
    pub stop_margin: Option<Duration>,
    /// A leader hearing nothing for this long must assume it lost [default: 35% of the session timeout]
    #[arg(long, env = "ZKGATE_SILENCE_LIMIT", value_parser = humantime::parse_duration)]
    pub silence_limit: Option<Duration>,
    /// The ZooKeeper ensemble's tickTime: the G2 deadline allows half a tick for the ensemble's
    /// leader to hear of a session held by a follower [default: 2s, ZooKeeper's default]
    #[arg(long, env = "ZKGATE_ZK_TICK_TIME", value_parser = humantime::parse_duration)]
    pub zk_tick_time: Option<Duration>,
    /// HTTP/2 keepalive ping interval [default: 20% of the session timeout]
    #[arg(long, env = "ZKGATE_KEEPALIVE_INTERVAL", value_parser = humantime::parse_duration)]
    pub keepalive_interval: Option<Duration>,
    /// Unanswered keepalive ping → connection dead, znodes released [default: 40% of the session timeout]
    #[arg(long, env = "ZKGATE_KEEPALIVE_TIMEOUT", value_parser = humantime::parse_duration)]
    pub keepalive_timeout: Option<Duration>,
    /// ZooKeeper digest auth `user:password`; znodes then get a creator-only ACL
    #[arg(long, env = "ZKGATE_ZK_DIGEST")]
    pub zk_digest: Option<String>,
    /// Distinct election/lock names that get their own metric label before `other` [default: 100]
    #[arg(long, env = "ZKGATE_METRICS_NAME_CAP")]
    pub metrics_name_cap: Option<usize>,
    /// Open Campaign + Acquire streams on this gateway; past it RESOURCE_EXHAUSTED [default: 50000]
    #[arg(long, env = "ZKGATE_MAX_HOLDER_STREAMS")]
    pub max_holder_streams: Option<usize>,
    /// Open Campaign + Acquire streams per client connection [default: 1000]
    #[arg(long, env = "ZKGATE_MAX_HOLDER_STREAMS_PER_CONNECTION")]
    pub max_holder_streams_per_connection: Option<usize>,
    /// Open Observe streams per client connection [default: 1000]
    #[arg(long, env = "ZKGATE_MAX_OBSERVE_STREAMS_PER_CONNECTION")]
    pub max_observe_streams_per_connection: Option<usize>,
    /// Distinct elections + locks in use on this gateway at once [default: 10000]
    #[arg(long, env = "ZKGATE_MAX_QUEUES")]
    pub max_queues: Option<usize>,
    /// Proclaimed bytes in flight per ZooKeeper session; in-stream proclaims wait, Proclaim by lease gets RESOURCE_EXHAUSTED [default: 4194304]
    #[arg(long, env = "ZKGATE_MAX_PROCLAIM_BYTES_IN_FLIGHT")]
    pub max_proclaim_bytes_in_flight: Option<usize>,
    /// A Campaign/Acquire stream must send join/acquire within this [default: 10s]
    #[arg(long, env = "ZKGATE_FIRST_MESSAGE_TIMEOUT", value_parser = humantime::parse_duration)]
    pub first_message_timeout: Option<Duration>,
    /// Largest packet sent to or expected from ZooKeeper, in bytes; keep it below the servers'
    /// jute.maxbuffer. Multi-reads are paged to fit, and it bounds a queue's size [default: 983040, 1 MiB − 64 KiB]
    #[arg(long, env = "ZKGATE_ZK_MAX_PACKET")]
    pub zk_max_packet: Option<usize>,
    /// PEM certificate for TLS on the gRPC port (needs --tls-key; half a TLS setup is refused)
    #[arg(long, env = "ZKGATE_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for TLS (needs --tls-cert)
    #[arg(long, env = "ZKGATE_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA bundle: require client certificates signed by it (mTLS; needs --tls-cert and --tls-key)
    #[arg(long, env = "ZKGATE_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,
}

/// The same settings as a TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct FileConfig {
    zk: Option<String>,
    root: Option<String>,
    listen: Option<SocketAddr>,
    http: Option<SocketAddr>,
    #[serde(with = "humantime_serde")]
    session_timeout: Option<Duration>,
    zk_sessions: Option<usize>,
    max_value_bytes: Option<usize>,
    #[serde(with = "humantime_serde")]
    stop_margin: Option<Duration>,
    #[serde(with = "humantime_serde")]
    silence_limit: Option<Duration>,
    #[serde(with = "humantime_serde")]
    zk_tick_time: Option<Duration>,
    #[serde(with = "humantime_serde")]
    keepalive_interval: Option<Duration>,
    #[serde(with = "humantime_serde")]
    keepalive_timeout: Option<Duration>,
    zk_digest: Option<String>,
    metrics_name_cap: Option<usize>,
    max_holder_streams: Option<usize>,
    max_holder_streams_per_connection: Option<usize>,
    max_observe_streams_per_connection: Option<usize>,
    max_queues: Option<usize>,
    max_proclaim_bytes_in_flight: Option<usize>,
    #[serde(with = "humantime_serde")]
    first_message_timeout: Option<Duration>,
    zk_max_packet: Option<usize>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
}

/// Fully resolved `serve` settings.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub serve: ServeConfig,
    pub listen: SocketAddr,
    pub http: SocketAddr,
}

impl ServeArgs {
    /// Merges flags/env over the TOML file over defaults, and loads TLS material.
    ///
    /// # Errors
    /// Unreadable or invalid config file or TLS files; a bad root.
    pub fn resolve(self) -> Result<Resolved, String> {
        let file: FileConfig = match &self.config {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| format!("reading {}: {e}", p.display()))?;
                toml::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?
            }
            None => FileConfig::default(),
        };
        let root = self
            .root
            .or(file.root)
            .unwrap_or_else(|| DEFAULT_ROOT.to_owned());
        if !root.starts_with('/') || (root.len() > 1 && root.ends_with('/')) || root.contains("//")
        {
            return Err(format!(
                "--root {root:?} must be an absolute znode path like /zkgate"
            ));
        }
        let mut coord =
            CoordConfig::new(self.zk.or(file.zk).unwrap_or_else(|| DEFAULT_ZK.to_owned()));
        coord.root = root;
        coord.session_timeout = self
            .session_timeout
            .or(file.session_timeout)
            .unwrap_or(DEFAULT_SESSION_TIMEOUT);
        coord.pool_size = self.zk_sessions.or(file.zk_sessions).unwrap_or(1).max(1);
        coord.max_value_bytes = self
            .max_value_bytes
            .or(file.max_value_bytes)
            .unwrap_or(crate::coord::types::DEFAULT_MAX_VALUE_BYTES);
        if coord.max_value_bytes > 900 * 1024 {
            return Err(
                "--max-value-bytes must stay below ZooKeeper's 1 MiB jute limit (at most 921600)"
                    .into(),
            );
        }
        coord.zk_max_packet = self
            .zk_max_packet
            .or(file.zk_max_packet)
            .unwrap_or(crate::coord::paging::DEFAULT_ZK_MAX_PACKET);
        coord.check_packet_budget()?;
        coord.stop_margin = self.stop_margin.or(file.stop_margin);
        coord.silence_limit = self.silence_limit.or(file.silence_limit);
        coord.zk_tick_time = self.zk_tick_time.or(file.zk_tick_time);
        coord.zk_digest = self.zk_digest.or(file.zk_digest);
        let mut serve = ServeConfig::new(coord);
        serve.coord.keepalive_interval = self.keepalive_interval.or(file.keepalive_interval);
        serve.coord.keepalive_timeout = self.keepalive_timeout.or(file.keepalive_timeout);
        serve.name_label_cap = self
            .metrics_name_cap
            .or(file.metrics_name_cap)
            .unwrap_or(crate::metrics::DEFAULT_NAME_LABEL_CAP);
        let defaults = crate::api::limits::StreamLimits::default();
        serve.limits = crate::api::limits::StreamLimits {
            holder_streams_per_gateway: self
                .max_holder_streams
                .or(file.max_holder_streams)
                .unwrap_or(defaults.holder_streams_per_gateway),
            holder_streams_per_connection: self
                .max_holder_streams_per_connection
                .or(file.max_holder_streams_per_connection)
                .unwrap_or(defaults.holder_streams_per_connection),
            observe_streams_per_connection: self
                .max_observe_streams_per_connection
                .or(file.max_observe_streams_per_connection)
                .unwrap_or(defaults.observe_streams_per_connection),
            first_message_timeout: self
                .first_message_timeout
                .or(file.first_message_timeout)
                .unwrap_or(defaults.first_message_timeout),
        };
        serve.coord.max_queues = self
            .max_queues
            .or(file.max_queues)
            .unwrap_or(crate::coord::DEFAULT_MAX_QUEUES);
        serve.coord.max_proclaim_bytes_in_flight = self
            .max_proclaim_bytes_in_flight
            .or(file.max_proclaim_bytes_in_flight)
            .unwrap_or(crate::coord::DEFAULT_MAX_PROCLAIM_BYTES_IN_FLIGHT);
        let cert = self.tls_cert.or(file.tls_cert);
        let key = self.tls_key.or(file.tls_key);
        let client_ca = self.tls_client_ca.or(file.tls_client_ca);
        // Fail closed: half a TLS setup must not start a plaintext gateway. Checked after the
        // merge, so each setting may come from a different source (flag, env, file).
        match (&cert, &key) {
            (Some(_), None) => {
                return Err("tls_cert is set but tls_key is not (--tls-key, ZKGATE_TLS_KEY or tls_key in the config file): refusing to start without TLS".into());
            }
            (None, Some(_)) => {
                return Err("tls_key is set but tls_cert is not (--tls-cert, ZKGATE_TLS_CERT or tls_cert in the config file): refusing to start without TLS".into());
            }
            (None, None) if client_ca.is_some() => {
                return Err("tls_client_ca is set but tls_cert and tls_key are not: mTLS needs the server's own certificate and key; refusing to start without TLS".into());
            }
            _ => {}
        }
        if let (Some(cert), Some(key)) = (cert, key) {
            let read =
                |p: &PathBuf| std::fs::read(p).map_err(|e| format!("reading {}: {e}", p.display()));
            let mut tls = tonic::transport::ServerTlsConfig::new().identity(
                tonic::transport::Identity::from_pem(read(&cert)?, read(&key)?),
            );
            if let Some(ca) = client_ca {
                tls = tls.client_ca_root(tonic::transport::Certificate::from_pem(read(&ca)?));
            }
            serve.tls = Some(tls);
        }
        serve.check_timing().map_err(|e| e.to_string())?;
        Ok(Resolved {
            serve,
            listen: self
                .listen
                .or(file.listen)
                .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid")),
            http: self
                .http
                .or(file.http)
                .unwrap_or_else(|| DEFAULT_HTTP.parse().expect("valid")),
        })
    }
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
    /// After SIGTERM to CMD's process group, wait this long for CMD to exit before SIGKILL.
    /// On `suspended` the wait is also cut to the gateway's `stop_within`.
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
/// own. On `suspended`, on the stream's end, or after `silence_limit` without any message, CMD
/// is stopped (SIGTERM to its process group, SIGKILL after --kill-grace), the candidacy is given
/// up, and the verb campaigns again (unless --no-requeue). A queued standby waits as long as it
/// takes. When CMD exits by itself the candidacy is given up and the verb exits with CMD's exit
/// code (128+N if a signal N killed it); SIGINT/SIGTERM to the verb stop CMD the same way.
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
    leader's fencing token.
  - suspended (the gateway lost ZooKeeper), the stream ends, or nothing is heard for
    silence_limit: CMD's process group gets SIGTERM, then SIGKILL after --kill-grace (on
    suspended at most stop_within); then the candidacy is given up, and the verb campaigns
    again, on the next endpoint if the gateway failed or went silent (the default; --no-requeue
    exits 3 instead).
  - CMD exits: the candidacy is given up and the verb exits with CMD's exit code (128+N when
    signal N killed it).
  - SIGINT/SIGTERM to the verb: CMD is stopped as above, the candidacy given up, and the verb
    exits with CMD's exit code (128+N if CMD was not running).
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
    hold's fencing token.
  - suspended (the gateway lost ZooKeeper), the stream ends, or nothing is heard for
    silence_limit: CMD's process group gets SIGTERM, then SIGKILL after --kill-grace (on
    suspended at most stop_within); then the lock is released, and the verb exits 3 (with
    --requeue it waits for the lock again and reruns CMD).
  - CMD exits: the lock is released and the verb exits with CMD's exit code (128+N when
    signal N killed it).
  - SIGINT/SIGTERM to the verb: CMD is stopped as above, the lock released, and the verb
    exits with CMD's exit code (128+N if CMD was not running).
Waiting for the lock takes as long as it takes, unless --timeout (exit 6 when it passes; 0
tries once). Without CMD the lock is held until SIGINT/SIGTERM, then released (exit 0).";

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Resolved, String> {
        let cli = Cli::try_parse_from(
            std::iter::once("zkgate")
                .chain(std::iter::once("serve"))
                .chain(args.iter().copied()),
        )
        .map_err(|e| e.to_string())?;
        match cli.command {
            Command::Serve(a) => a.resolve(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn defaults_satisfy_g3b() {
        let r = parse(&[]).unwrap();
        assert_eq!(r.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(r.serve.coord.session_timeout, Duration::from_secs(10));
        assert!(r.serve.check_timing().is_ok());
    }

    #[test]
    fn refuses_silence_longer_than_keepalive_or_session() {
        let e = parse(&["--silence-limit", "9s"]).unwrap_err();
        assert!(e.contains("silence limit"), "{e}");
        let e = parse(&["--silence-limit", "3s", "--keepalive-timeout", "2s"]).unwrap_err();
        assert!(e.contains("keepalive"), "{e}");
        assert!(parse(&["--root", "zkgate"]).is_err());
    }

    /// Half a TLS setup is refused, never served as plaintext: from flags and from the file
    /// (the environment is checked with the real binary in tests/security.rs, since tests in
    /// this process share one environment).
    #[test]
    fn half_a_tls_setup_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("x.pem");
        std::fs::write(&pem, "not used").unwrap();
        let pem = pem.to_str().unwrap();
        for (flags, missing) in [
            (vec!["--tls-cert", pem], "tls_key"),
            (vec!["--tls-key", pem], "tls_cert"),
            (vec!["--tls-client-ca", pem], "tls_cert"),
            (vec!["--tls-cert", pem, "--tls-client-ca", pem], "tls_key"),
        ] {
            let e = parse(&flags).unwrap_err();
            assert!(
                e.contains(missing) && e.contains("refusing"),
                "{flags:?}: {e}"
            );
        }
        let p = dir.path().join("z.toml");
        for (toml, missing) in [
            (format!("tls_cert = {pem:?}\n"), "tls_key"),
            (format!("tls_key = {pem:?}\n"), "tls_cert"),
            (format!("tls_client_ca = {pem:?}\n"), "tls_cert"),
        ] {
            std::fs::write(&p, &toml).unwrap();
            let e = parse(&["--config", p.to_str().unwrap()]).unwrap_err();
            assert!(e.contains(missing) && e.contains("refusing"), "{toml}: {e}");
        }
        // The halves may come from different sources.
        std::fs::write(&p, format!("tls_key = {pem:?}\n")).unwrap();
        match parse(&["--config", p.to_str().unwrap(), "--tls-cert", pem]) {
            Ok(r) => assert!(r.serve.tls.is_some()),
            Err(e) => assert!(
                !e.contains("refusing"),
                "cert from a flag, key from the file: {e}"
            ),
        }
    }

    #[test]
    fn zk_max_packet_default_and_floor() {
        let r = parse(&[]).unwrap();
        assert_eq!(r.serve.coord.zk_max_packet, 1024 * 1024 - 64 * 1024);
        assert_eq!(r.serve.coord.max_queue_members(), 20_061);
        let e = parse(&["--zk-max-packet", "65536"]).unwrap_err();
        assert!(
            e.contains("--zk-max-packet") && e.contains("--max-value-bytes"),
            "{e}"
        );
        let r = parse(&["--zk-max-packet", "65536", "--max-value-bytes", "1024"]).unwrap();
        assert_eq!(r.serve.coord.zk_max_packet, 65536);
    }

    #[test]
    fn file_is_overridden_by_flags() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("z.toml");
        std::fs::write(
            &p,
            "zk = \"10.0.0.1:2181\"\nroot = \"/file\"\nsession_timeout = \"6s\"\n",
        )
        .unwrap();
        let r = parse(&["--config", p.to_str().unwrap(), "--root", "/flag"]).unwrap();
        assert_eq!(r.serve.coord.zk, "10.0.0.1:2181");
        assert_eq!(r.serve.coord.root, "/flag");
        assert_eq!(r.serve.coord.session_timeout, Duration::from_secs(6));
        std::fs::write(&p, "zk_max_packet = 500000\n").unwrap();
        let r = parse(&["--config", p.to_str().unwrap()]).unwrap();
        assert_eq!(r.serve.coord.zk_max_packet, 500_000);
        assert_eq!(r.serve.coord.max_queue_members(), 10_203);
        std::fs::write(&p, "bogus = 1\n").unwrap();
        assert!(parse(&["--config", p.to_str().unwrap()]).is_err());
    }

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
