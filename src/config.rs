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
    /// Campaign in an election; with `-- CMD…`, run CMD while leader (like `etcdctl elect`).
    Elect(ElectArgs),
    /// Hold a lock while running `CMD…` (like `consul lock`).
    Lock(LockArgs),
    /// Print the election's leader whenever it changes.
    Observe(NameArgs),
    /// Print the election's current leader.
    Leader(NameArgs),
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
    /// Largest packet sent to or expected from ZooKeeper, in bytes; keep it below the servers'
    /// jute.maxbuffer. Multi-reads are paged to fit, and it bounds a queue's size [default: 983040, 1 MiB − 64 KiB]
    #[arg(long, env = "ZKGATE_ZK_MAX_PACKET")]
    pub zk_max_packet: Option<usize>,
    /// PEM certificate for TLS on the gRPC port
    #[arg(long, env = "ZKGATE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for TLS
    #[arg(long, env = "ZKGATE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA bundle: require client certificates signed by it (mTLS)
    #[arg(long, env = "ZKGATE_TLS_CLIENT_CA", requires = "tls_cert")]
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
    keepalive_interval: Option<Duration>,
    #[serde(with = "humantime_serde")]
    keepalive_timeout: Option<Duration>,
    zk_digest: Option<String>,
    metrics_name_cap: Option<usize>,
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
        coord.zk_digest = self.zk_digest.or(file.zk_digest);
        let mut serve = ServeConfig::new(coord);
        serve.keepalive_interval = self.keepalive_interval.or(file.keepalive_interval);
        serve.keepalive_timeout = self.keepalive_timeout.or(file.keepalive_timeout);
        serve.name_label_cap = self
            .metrics_name_cap
            .or(file.metrics_name_cap)
            .unwrap_or(crate::metrics::DEFAULT_NAME_LABEL_CAP);
        let cert = self.tls_cert.or(file.tls_cert);
        let key = self.tls_key.or(file.tls_key);
        let client_ca = self.tls_client_ca.or(file.tls_client_ca);
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
        serve.check_timing()?;
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

#[derive(Debug, Args, Clone)]
pub struct EndpointArgs {
    /// Gateway address
    #[arg(
        long,
        env = "ZKGATE_ENDPOINT",
        default_value = "http://127.0.0.1:50051"
    )]
    pub endpoint: String,
}

#[derive(Debug, Args, Clone)]
pub struct NameArgs {
    pub name: String,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
}

#[derive(Debug, Args, Clone)]
pub struct ElectArgs {
    pub name: String,
    /// Candidate name shown to others [default: hostname-pid]
    #[arg(long)]
    pub candidate: Option<String>,
    /// Value to publish while leader
    #[arg(long, default_value = "")]
    pub value: String,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
    /// Command to run while leader; killed when leadership is lost
    #[arg(last = true)]
    pub command: Vec<String>,
}

#[derive(Debug, Args, Clone)]
pub struct LockArgs {
    pub name: String,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

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
}
