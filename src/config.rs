//! `serve`'s settings from flags, environment variables (`ZKGATE_*`) and an optional TOML
//! file, in that order of precedence, declared once ([`ServeArgs`]) and merged in one place
//! ([`load`]). The rest of the command line (the `zkgate` command, `dev` and the client verbs)
//! is [`crate::cli`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, FromArgMatches};
use serde::{Deserialize, Serialize};

use crate::api::limits;
use crate::auth::{Auth, LeaseKeys};
use crate::coord::{CoordConfig, DEFAULT_ROOT};
use crate::server::ServeConfig;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:50051";
pub const DEFAULT_HTTP: &str = "127.0.0.1:9090";
pub const DEFAULT_ZK: &str = "127.0.0.1:2181";

/// Every `zkgate serve` setting, declared once. A field is at the same time a flag (`zk_tick_time`
/// → `--zk-tick-time`), an environment variable (`ZKGATE_ZK_TICK_TIME`) and a key of the
/// `--config` TOML file (`zk_tick_time`), with its default in the `arg` attribute; [`load`]
/// merges them (flags > environment > file > defaults), and the test
/// `every_setting_is_reachable_from_flag_env_and_file` keeps the three in step. A group of
/// settings that one part of the gateway takes whole is declared on that part's own type and
/// flattened in ([`limits::StreamLimits`]), so [`ServeArgs::resolve`] copies nothing by hand.
/// (serde's `deny_unknown_fields` does not work beside `flatten`: [`load`] refuses unknown keys.)
#[derive(Debug, Args, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServeArgs {
    /// TOML file with any of these settings (keys as the flag names, with `_` for `-`)
    #[arg(long, env = "ZKGATE_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// ZooKeeper connect string, HOST:PORT[,HOST:PORT…]
    #[arg(long, env = "ZKGATE_ZK", default_value = DEFAULT_ZK)]
    pub zk: String,
    /// Root znode
    #[arg(long, env = "ZKGATE_ROOT", default_value = DEFAULT_ROOT)]
    pub root: String,
    /// gRPC listen address
    #[arg(long, env = "ZKGATE_LISTEN", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// HTTP address for /metrics, /healthz, /readyz
    #[arg(long, env = "ZKGATE_HTTP", default_value = DEFAULT_HTTP)]
    pub http: SocketAddr,
    /// Requested ZooKeeper session timeout, e.g. 10s
    #[arg(long, env = "ZKGATE_SESSION_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub session_timeout: Duration,
    /// ZooKeeper sessions shared by all streams
    #[arg(long, env = "ZKGATE_ZK_SESSIONS", default_value_t = 1)]
    pub zk_sessions: usize,
    /// Largest candidate value in bytes
    #[arg(long, env = "ZKGATE_MAX_VALUE_BYTES", default_value_t = crate::coord::bounds::DEFAULT_MAX_VALUE_BYTES)]
    pub max_value_bytes: usize,
    /// Leaders stop this long before the server could expire the session [default: 10% of the session timeout]
    #[arg(long, env = "ZKGATE_STOP_MARGIN", value_parser = humantime::parse_duration)]
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub stop_margin: Option<Duration>,
    /// A leader hearing nothing for this long must assume it lost [default: 35% of the session timeout]
    #[arg(long, env = "ZKGATE_SILENCE_LIMIT", value_parser = humantime::parse_duration)]
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub silence_limit: Option<Duration>,
    /// The ZooKeeper ensemble's tickTime: the G2 deadline allows half a tick for the ensemble's
    /// leader to hear of a session held by a follower [default: half the granted session
    /// timeout, the largest tick such a server can run with; state it to get longer
    /// `stop_within`]
    #[arg(long, env = "ZKGATE_ZK_TICK_TIME", value_parser = humantime::parse_duration)]
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub zk_tick_time: Option<Duration>,
    /// HTTP/2 keepalive ping interval [default: 20% of the session timeout]
    #[arg(long, env = "ZKGATE_KEEPALIVE_INTERVAL", value_parser = humantime::parse_duration)]
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub keepalive_interval: Option<Duration>,
    /// Unanswered keepalive ping → connection dead, znodes released [default: 40% of the session timeout]
    #[arg(long, env = "ZKGATE_KEEPALIVE_TIMEOUT", value_parser = humantime::parse_duration)]
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub keepalive_timeout: Option<Duration>,
    /// ZooKeeper digest auth `user:password`; znodes then get a creator-only ACL
    #[arg(long, env = "ZKGATE_ZK_DIGEST")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zk_digest: Option<String>,
    /// PEM CA bundle for ZooKeeper's certificates: TLS to its secureClientPort (the --zk
    /// hosts' secure ports; their certificates must name those hosts)
    #[arg(long, env = "ZKGATE_ZK_TLS_CA")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zk_tls_ca: Option<PathBuf>,
    /// PEM client certificate for ZooKeeper (needs --zk-tls-key and --zk-tls-ca); ZooKeeper's
    /// x509 provider then identifies the gateway by its subject DN, and znodes get a creator-only ACL
    #[arg(long, env = "ZKGATE_ZK_TLS_CERT")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zk_tls_cert: Option<PathBuf>,
    /// PEM private key of --zk-tls-cert
    #[arg(long, env = "ZKGATE_ZK_TLS_KEY")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zk_tls_key: Option<PathBuf>,
    /// SASL DIGEST-MD5 user for ZooKeeper (needs --zk-sasl-password-file); znodes then get a
    /// creator-only ACL
    #[arg(long, env = "ZKGATE_ZK_SASL_USER")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zk_sasl_user: Option<String>,
    /// File holding the password of --zk-sasl-user (one line; a trailing newline is ignored)
    #[arg(long, env = "ZKGATE_ZK_SASL_PASSWORD_FILE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zk_sasl_password_file: Option<PathBuf>,
    /// SASL mechanism toward ZooKeeper: `digest-md5` (the default, with --zk-sasl-user) or
    /// `gssapi` (Kerberos, with --zk-kerberos-principal and --zk-kerberos-keytab; needs a
    /// gateway built with the `zk-kerberos` feature)
    #[arg(long, env = "ZKGATE_ZK_SASL_MECHANISM")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zk_sasl_mechanism: Option<String>,
    /// Kerberos principal of the gateway toward ZooKeeper (`--zk-sasl-mechanism gssapi`);
    /// znodes then get a creator-only ACL, `sasl:<principal>`
    #[arg(long, env = "ZKGATE_ZK_KERBEROS_PRINCIPAL")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zk_kerberos_principal: Option<String>,
    /// Keytab of --zk-kerberos-principal: the gateway obtains and renews its tickets from it
    /// into a private credential cache (no kinit cron job needed)
    #[arg(long, env = "ZKGATE_ZK_KERBEROS_KEYTAB")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zk_kerberos_keytab: Option<PathBuf>,
    /// Distinct election/lock names that get their own metric label before `other`
    #[arg(long, env = "ZKGATE_METRICS_NAME_CAP", default_value_t = crate::metrics::DEFAULT_NAME_LABEL_CAP)]
    pub metrics_name_cap: usize,
    /// The stream limits (G10): `--max-holder-streams` …, `--first-message-timeout` (their
    /// flags, variables and keys are declared on [`limits::StreamLimits`]).
    #[command(flatten)]
    #[serde(flatten)]
    pub limits: limits::StreamLimits,
    /// Distinct elections + locks in use on this gateway at once
    #[arg(long, env = "ZKGATE_MAX_QUEUES", default_value_t = crate::coord::DEFAULT_MAX_QUEUES)]
    pub max_queues: usize,
    /// Proclaimed bytes in flight per ZooKeeper session; in-stream proclaims wait, Proclaim by lease gets RESOURCE_EXHAUSTED
    #[arg(long, env = "ZKGATE_MAX_PROCLAIM_BYTES_IN_FLIGHT", default_value_t = crate::coord::DEFAULT_MAX_PROCLAIM_BYTES_IN_FLIGHT)]
    pub max_proclaim_bytes_in_flight: usize,
    /// Largest packet sent to or expected from ZooKeeper, in bytes (default 1 MiB − 64 KiB); keep
    /// it below the servers' jute.maxbuffer. Multi-reads are paged to fit, and it bounds a queue's size
    #[arg(long, env = "ZKGATE_ZK_MAX_PACKET", default_value_t = crate::coord::paging::DEFAULT_ZK_MAX_PACKET)]
    pub zk_max_packet: usize,
    /// Send member creates and deletes that are ready while another write is in flight together,
    /// in one ZooKeeper multi (one transaction, one fsync); `false` sends each alone
    #[arg(long, env = "ZKGATE_ZK_BATCH", default_value_t = true, action = clap::ArgAction::Set)]
    pub zk_batch: bool,
    /// How long a proof that the gateway's ZooKeeper server diverged from its quorum may stand
    /// (the session tries another server every second meanwhile) before the session is
    /// stranded: its waiting members end UNAVAILABLE and it takes no new ones until healed
    #[arg(long, env = "ZKGATE_ZK_STRANDED_AFTER", default_value = "5s", value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub zk_stranded_after: Duration,
    /// PEM certificate for TLS on the gRPC port (needs --tls-key; half a TLS setup is refused)
    #[arg(long, env = "ZKGATE_TLS_CERT")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for TLS (needs --tls-cert)
    #[arg(long, env = "ZKGATE_TLS_KEY")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA bundle: require client certificates signed by it (mTLS; needs --tls-cert and --tls-key)
    #[arg(long, env = "ZKGATE_TLS_CLIENT_CA")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_ca: Option<PathBuf>,
    /// TOML policy of who may do which verb on which names (README "Security"); SIGHUP reloads it.
    /// Without it every caller may do everything
    #[arg(long, env = "ZKGATE_AUTH_POLICY")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_policy: Option<PathBuf>,
    /// The fleet's lease keys, one hex key per line (first signs, all verify; `openssl rand -hex
    /// 32`). Without it leases are signed with a random key of this process
    #[arg(long, env = "ZKGATE_LEASE_KEY_FILE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_key_file: Option<PathBuf>,
    /// Write the audit trail (grants, losses, resigns, releases, lapses, denials) as JSON lines
    /// to this file instead of the log
    #[arg(long, env = "ZKGATE_AUDIT_LOG")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_log: Option<PathBuf>,
    /// Log as JSON lines: the global `--log-json` / `ZKGATE_LOG_JSON` (which every verb takes),
    /// here so that the file can set it too.
    #[arg(skip)]
    #[serde(default)]
    pub log_json: bool,
}

/// Why `zkgate serve` refuses to start: a setting that cannot be read or does not fit.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `matches` are not those of a command with the `serve` settings (a bug).
    #[error(transparent)]
    Args(#[from] clap::Error),
    /// The `--config` file cannot be read.
    #[error("reading {}: {source}", path.display())]
    ReadFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The `--config` file is not TOML, has an unknown key, or a value of the wrong type.
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    /// The root znode is not an absolute path.
    #[error("--root {0:?} must be an absolute znode path like /zkgate")]
    Root(String),
    /// A candidate value could not be stored in one znode.
    #[error("--max-value-bytes must stay below ZooKeeper's 1 MiB jute limit (at most {MAX_VALUE_BYTES})")]
    ValueTooLarge,
    /// `--zk-max-packet` leaves no room for the largest value (the sentence names both).
    #[error("{0}")]
    PacketBudget(String),
    /// Half a TLS setup: never served as plaintext.
    #[error("{0}: refusing to start without TLS")]
    HalfTls(&'static str),
    /// Half a setup of the link to ZooKeeper (TLS or SASL): never connected without it.
    #[error("{0}: refusing to start without it")]
    HalfZkLink(&'static str),
    /// SASL settings that do not fit the chosen mechanism (or a mechanism this build lacks).
    #[error("{0}; refusing to start")]
    ZkSaslMechanism(&'static str),
    /// A ZooKeeper TLS file holds no usable certificate or key.
    #[error("{}: {reason}", path.display())]
    ZkTlsPem { path: PathBuf, reason: String },
    /// The SASL password file is empty.
    #[error("{}: the ZooKeeper SASL password file is empty", .0.display())]
    EmptyPassword(PathBuf),
    /// A TLS file cannot be read.
    #[error("reading {}: {source}", path.display())]
    ReadTls {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `--lease-key-file` cannot be used.
    #[error(transparent)]
    LeaseKeys(#[from] crate::auth::lease_key::KeyFileError),
    /// `--auth-policy` cannot be read or parsed.
    #[error("{0}")]
    Policy(String),
    /// The timing settings break the order under README "Timing" (the sentence names them).
    #[error("{0}")]
    Timing(#[from] crate::coord::timing::TimingError),
}

/// The largest `--max-value-bytes`: a value and its znode's overhead fit ZooKeeper's 1 MiB.
pub const MAX_VALUE_BYTES: usize = 900 * 1024;

/// The `serve` settings of one command line: its flags and environment (parsed into `matches`
/// by clap), over the `--config` file, over the defaults.
///
/// A setting comes from the file only where clap took its default: clap already put flags
/// over the environment over the defaults, and says which of them each value came from.
///
/// # Errors
/// [`ConfigError::ReadFile`], and [`ConfigError::File`] for a file that is no TOML, has an
/// unknown key or a value of the wrong type.
pub fn load(matches: &ArgMatches) -> Result<ServeArgs, ConfigError> {
    let mut args = ServeArgs::from_arg_matches(matches)?;
    let has = |id: &str| matches.ids().any(|known| known.as_str() == id);
    if has("log_json") {
        args.log_json = matches.get_flag("log_json");
    }
    let Some(path) = args.config.clone() else {
        return Ok(args);
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::ReadFile {
        path: path.clone(),
        source,
    })?;
    let file_error = |source| ConfigError::File {
        path: path.clone(),
        source,
    };
    let mut merged: toml::Table = text.parse().map_err(file_error)?;
    let known = file_keys();
    if let Some(key) = merged.keys().find(|key| !known.contains(key)) {
        return Err(file_error(serde::de::Error::custom(format!(
            "unknown key `{key}`: the keys are the `serve` flags' names with `_` for `-`"
        ))));
    }
    let given = toml::Table::try_from(&args).expect("the settings serialize to a TOML table");
    for (key, value) in given {
        let from_flag_or_env = has(&key)
            && matches!(
                matches.value_source(&key),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            );
        if from_flag_or_env || !merged.contains_key(&key) {
            merged.insert(key, value);
        }
    }
    let mut settings: ServeArgs = merged.try_into().map_err(file_error)?;
    settings.config = Some(path);
    Ok(settings)
}

/// The keys a `--config` file may hold: every `serve` setting's id (its flag with `_` for
/// `-`, clap's and serde's name alike) but `config` itself, and `log_json`.
fn file_keys() -> Vec<String> {
    let cmd = ServeArgs::augment_args(clap::Command::new("serve"));
    let mut keys: Vec<String> = cmd
        .get_arguments()
        .map(|a| a.get_id().as_str().to_owned())
        .filter(|id| id != "config")
        .collect();
    keys.push("log_json".into());
    keys
}

/// Fully resolved `serve` settings.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub serve: ServeConfig,
    pub listen: SocketAddr,
    pub http: SocketAddr,
    pub log_json: bool,
    /// `--audit-log`: the audit trail's own file.
    pub audit_log: Option<PathBuf>,
}

impl ServeArgs {
    /// Checks the merged settings ([`load`]) and turns them into the gateway's configuration,
    /// loading the TLS material.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the setting at fault.
    pub fn resolve(self) -> Result<Resolved, ConfigError> {
        let root = self.root;
        if !root.starts_with('/') || (root.len() > 1 && root.ends_with('/')) || root.contains("//")
        {
            return Err(ConfigError::Root(root));
        }
        if self.max_value_bytes > MAX_VALUE_BYTES {
            return Err(ConfigError::ValueTooLarge);
        }
        let mut coord = CoordConfig::new(self.zk);
        coord.root = root;
        coord.pool_size = self.zk_sessions.max(1);
        // The settings the coordination layer takes as they are, under the same names: named
        // once here. (Its own type, `coord::CoordConfig`, carries no command-line attributes.)
        macro_rules! as_they_are {
            ($($field:ident),+) => { $(coord.$field = self.$field;)+ };
        }
        as_they_are!(
            session_timeout,
            max_value_bytes,
            zk_max_packet,
            zk_batch,
            zk_stranded_after,
            stop_margin,
            silence_limit,
            zk_tick_time,
            keepalive_interval,
            keepalive_timeout,
            zk_digest,
            max_queues,
            max_proclaim_bytes_in_flight
        );
        coord
            .check_packet_budget()
            .map_err(ConfigError::PacketBudget)?;
        coord.zk_tls = zk_tls(self.zk_tls_ca, self.zk_tls_cert, self.zk_tls_key)?;
        let (zk_sasl, zk_kerberos) = zk_sasl_any(
            self.zk_sasl_mechanism.as_deref(),
            (self.zk_sasl_user, self.zk_sasl_password_file),
            (self.zk_kerberos_principal, self.zk_kerberos_keytab),
        )?;
        coord.zk_sasl = zk_sasl;
        coord.zk_kerberos = zk_kerberos;
        let mut serve = ServeConfig::new(coord);
        serve.name_label_cap = self.metrics_name_cap;
        serve.limits = self.limits;
        // Under a policy a client certificate is one way to be identified, not a condition of
        // connecting: callers with a token or none (`anonymous`) get what the policy gives them.
        let optional_client_cert = self.auth_policy.is_some();
        serve.tls = tls(
            self.tls_cert,
            self.tls_key,
            self.tls_client_ca,
            optional_client_cert,
        )?;
        if let Some(path) = &self.lease_key_file {
            serve.lease_keys = LeaseKeys::from_file(path)?;
        }
        if let Some(path) = &self.auth_policy {
            serve.auth = Auth::from_file(path).map_err(ConfigError::Policy)?;
        }
        serve.check_timing()?;
        Ok(Resolved {
            serve,
            listen: self.listen,
            http: self.http,
            log_json: self.log_json,
            audit_log: self.audit_log,
        })
    }
}

/// The TLS setup, or none. Fails closed: half a TLS setup must not start a plaintext gateway.
/// Checked after the merge, so each half may come from a different source (flag, env, file).
fn tls(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
    optional_client_cert: bool,
) -> Result<Option<tonic::transport::ServerTlsConfig>, ConfigError> {
    let (cert, key) = match (cert, key) {
        (Some(cert), Some(key)) => (cert, key),
        (Some(_), None) => return Err(ConfigError::HalfTls("tls_cert is set but tls_key is not (--tls-key, ZKGATE_TLS_KEY or tls_key in the config file)")),
        (None, Some(_)) => return Err(ConfigError::HalfTls("tls_key is set but tls_cert is not (--tls-cert, ZKGATE_TLS_CERT or tls_cert in the config file)")),
        (None, None) if client_ca.is_some() => return Err(ConfigError::HalfTls("tls_client_ca is set but tls_cert and tls_key are not: mTLS needs the server's own certificate and key")),
        (None, None) => return Ok(None),
    };
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|source| ConfigError::ReadTls {
            path: path.clone(),
            source,
        })
    };
    let mut tls = tonic::transport::ServerTlsConfig::new().identity(
        tonic::transport::Identity::from_pem(read(&cert)?, read(&key)?),
    );
    if let Some(ca) = client_ca {
        tls = tls
            .client_ca_root(tonic::transport::Certificate::from_pem(read(&ca)?))
            .client_auth_optional(optional_client_cert);
    }
    Ok(Some(tls))
}

fn read_text(path: &PathBuf) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::ReadTls {
        path: path.clone(),
        source,
    })
}

/// TLS to ZooKeeper, or none. Fails closed like [`tls`]: a certificate without its key, a key
/// without its certificate, or a client certificate without the CA that checks the server must
/// not connect in plaintext (or to an unchecked server). The PEM files are read and parsed now,
/// so a bad file refuses to start.
fn zk_tls(
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<Option<crate::coord::ZkTls>, ConfigError> {
    let identity = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (Some(_), None) => return Err(ConfigError::HalfZkLink("zk_tls_cert is set but zk_tls_key is not (--zk-tls-key, ZKGATE_ZK_TLS_KEY or zk_tls_key in the config file)")),
        (None, Some(_)) => return Err(ConfigError::HalfZkLink("zk_tls_key is set but zk_tls_cert is not (--zk-tls-cert, ZKGATE_ZK_TLS_CERT or zk_tls_cert in the config file)")),
        (None, None) => None,
    };
    let ca = match (ca, &identity) {
        (Some(ca), _) => ca,
        (None, Some(_)) => return Err(ConfigError::HalfZkLink("zk_tls_cert and zk_tls_key are set but zk_tls_ca is not: TLS to ZooKeeper needs the CA that signed its certificates (--zk-tls-ca, ZKGATE_ZK_TLS_CA or zk_tls_ca in the config file)")),
        (None, None) => return Ok(None),
    };
    let tls = crate::coord::ZkTls {
        ca: read_text(&ca)?,
        identity: match &identity {
            Some((cert, key)) => Some((read_text(cert)?, read_text(key)?)),
            None => None,
        },
    };
    if let Err(e) = tls.options() {
        // Name the file at fault: the CA when it alone is wrong, else the identity's pair.
        let ca_alone = crate::coord::ZkTls {
            ca: tls.ca.clone(),
            identity: None,
        };
        let path = match (ca_alone.options(), identity) {
            (Err(_), _) | (Ok(_), None) => ca,
            (Ok(_), Some((cert, _))) => cert,
        };
        return Err(ConfigError::ZkTlsPem {
            path,
            reason: e.to_string(),
        });
    }
    Ok(Some(tls))
}

/// A SASL login as the settings give it: DIGEST-MD5's user and password file, or Kerberos'
/// principal and keytab; either half may be missing.
type SaslLogin = (Option<String>, Option<PathBuf>);

/// SASL to ZooKeeper by `mechanism` (`digest-md5` when unset, or `gssapi`): DIGEST-MD5's
/// user and password file, or Kerberos' principal and keytab. Settings of the other mechanism
/// are refused rather than ignored, and so is `gssapi` in a gateway built without Kerberos.
fn zk_sasl_any(
    mechanism: Option<&str>,
    digest: SaslLogin,
    kerberos: SaslLogin,
) -> Result<
    (
        Option<crate::coord::ZkSasl>,
        Option<crate::kerberos::ZkKerberos>,
    ),
    ConfigError,
> {
    match mechanism.map(str::to_ascii_lowercase).as_deref() {
        None | Some("digest-md5") => {
            if kerberos.0.is_some() || kerberos.1.is_some() {
                return Err(ConfigError::ZkSaslMechanism("zk_kerberos_principal and zk_kerberos_keytab need zk_sasl_mechanism = \"gssapi\" (--zk-sasl-mechanism gssapi)"));
            }
            Ok((zk_sasl(digest.0, digest.1)?, None))
        }
        Some("gssapi") => {
            if digest.0.is_some() || digest.1.is_some() {
                return Err(ConfigError::ZkSaslMechanism("zk_sasl_user and zk_sasl_password_file are DIGEST-MD5's: with zk_sasl_mechanism = \"gssapi\" the gateway logs in with zk_kerberos_principal and zk_kerberos_keytab"));
            }
            if !cfg!(feature = "zk-kerberos") {
                return Err(ConfigError::ZkSaslMechanism("zk_sasl_mechanism = \"gssapi\": this gateway was built without Kerberos (build it with `--features zk-kerberos`)"));
            }
            match kerberos {
                (Some(principal), Some(keytab)) => Ok((
                    None,
                    Some(crate::kerberos::ZkKerberos { principal, keytab }),
                )),
                (None, _) => Err(ConfigError::HalfZkLink("zk_sasl_mechanism = \"gssapi\" needs zk_kerberos_principal (--zk-kerberos-principal, ZKGATE_ZK_KERBEROS_PRINCIPAL or zk_kerberos_principal in the config file)")),
                (Some(_), None) => Err(ConfigError::HalfZkLink("zk_sasl_mechanism = \"gssapi\" needs zk_kerberos_keytab (--zk-kerberos-keytab, ZKGATE_ZK_KERBEROS_KEYTAB or zk_kerberos_keytab in the config file)")),
            }
        }
        Some(_) => Err(ConfigError::ZkSaslMechanism(
            "zk_sasl_mechanism is `digest-md5` or `gssapi`",
        )),
    }
}

/// SASL DIGEST-MD5 to ZooKeeper, or none; a user without a password file or a password file
/// without a user is half a setup and refuses to start.
fn zk_sasl(
    user: Option<String>,
    password_file: Option<PathBuf>,
) -> Result<Option<crate::coord::ZkSasl>, ConfigError> {
    let (user, file) = match (user, password_file) {
        (Some(user), Some(file)) => (user, file),
        (Some(_), None) => return Err(ConfigError::HalfZkLink("zk_sasl_user is set but zk_sasl_password_file is not (--zk-sasl-password-file, ZKGATE_ZK_SASL_PASSWORD_FILE or zk_sasl_password_file in the config file)")),
        (None, Some(_)) => return Err(ConfigError::HalfZkLink("zk_sasl_password_file is set but zk_sasl_user is not (--zk-sasl-user, ZKGATE_ZK_SASL_USER or zk_sasl_user in the config file)")),
        (None, None) => return Ok(None),
    };
    let text = read_text(&file)?;
    // Secret files are written with a final newline by most tools (and Kubernetes keeps it).
    let password = text.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        return Err(ConfigError::EmptyPassword(file));
    }
    Ok(Some(crate::coord::ZkSasl {
        user,
        password: password.to_owned(),
    }))
}

#[cfg(test)]
mod tests {
    use clap::{Args, CommandFactory};

    use super::*;
    use crate::cli::Cli;

    /// The tests that read the environment (clap reads `ZKGATE_*` for every parse) or set it
    /// take this lock.
    fn env_lock() -> std::sync::MutexGuard<'static, ()> {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        LOCK.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `zkgate serve ARGS…` merged ([`load`]), not yet resolved.
    fn settings(args: &[&str]) -> Result<ServeArgs, String> {
        let matches = Cli::command()
            .try_get_matches_from(
                std::iter::once("zkgate")
                    .chain(std::iter::once("serve"))
                    .chain(args.iter().copied()),
            )
            .map_err(|e| e.to_string())?;
        load(matches.subcommand_matches("serve").unwrap()).map_err(|e| e.to_string())
    }

    fn parse(args: &[&str]) -> Result<Resolved, String> {
        let _env = env_lock();
        settings(args)?.resolve().map_err(|e| e.to_string())
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

    /// The link to ZooKeeper fails closed like the gRPC port: half a TLS or SASL setup, from
    /// whichever source, refuses to start rather than connecting in plaintext or anonymously.
    #[test]
    fn half_a_zookeeper_link_setup_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("x.pem");
        std::fs::write(&pem, "not used").unwrap();
        let pem = pem.to_str().unwrap();
        for (flags, missing) in [
            (vec!["--zk-tls-cert", pem], "zk_tls_key"),
            (vec!["--zk-tls-key", pem], "zk_tls_cert"),
            (vec!["--zk-tls-ca", pem, "--zk-tls-cert", pem], "zk_tls_key"),
            (vec!["--zk-tls-ca", pem, "--zk-tls-key", pem], "zk_tls_cert"),
            (vec!["--zk-tls-cert", pem, "--zk-tls-key", pem], "zk_tls_ca"),
            (vec!["--zk-sasl-user", "gw"], "zk_sasl_password_file"),
            (vec!["--zk-sasl-password-file", pem], "zk_sasl_user"),
        ] {
            let e = parse(&flags).unwrap_err();
            assert!(
                e.contains(missing) && e.contains("refusing"),
                "{flags:?}: {e}"
            );
        }
        let p = dir.path().join("z.toml");
        for (toml, missing) in [
            (format!("zk_tls_cert = {pem:?}\n"), "zk_tls_key"),
            (format!("zk_tls_key = {pem:?}\n"), "zk_tls_cert"),
            (
                "zk_sasl_user = \"gw\"\n".to_owned(),
                "zk_sasl_password_file",
            ),
            (format!("zk_sasl_password_file = {pem:?}\n"), "zk_sasl_user"),
        ] {
            std::fs::write(&p, &toml).unwrap();
            let e = parse(&["--config", p.to_str().unwrap()]).unwrap_err();
            assert!(e.contains(missing) && e.contains("refusing"), "{toml}: {e}");
        }
        // The halves may come from different sources: the user from the file, the password
        // file from a flag.
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "s3cret\n").unwrap();
        std::fs::write(&p, "zk_sasl_user = \"gw\"\n").unwrap();
        let r = parse(&[
            "--config",
            p.to_str().unwrap(),
            "--zk-sasl-password-file",
            pw.to_str().unwrap(),
        ])
        .unwrap();
        let sasl = r.serve.coord.zk_sasl.expect("a SASL setup");
        assert_eq!(
            (sasl.user.as_str(), sasl.password.as_str()),
            ("gw", "s3cret")
        );
        assert!(!format!("{:?}", r.serve.coord.zk_tls).contains("s3cret"));
        // An empty password file and a CA file that holds no certificate are refused too.
        std::fs::write(&pw, "\n").unwrap();
        let e = parse(&[
            "--zk-sasl-user",
            "gw",
            "--zk-sasl-password-file",
            pw.to_str().unwrap(),
        ])
        .unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let e = parse(&["--zk-tls-ca", pem]).unwrap_err();
        assert!(e.contains(pem), "{e}");
        let e = parse(&["--zk-tls-ca", "/nonexistent/ca.pem"]).unwrap_err();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }

    /// Which settings make the gateway authenticated to ZooKeeper, and so decide its znodes'
    /// ACL (G9): any login or a client certificate; TLS without a certificate is not a login.
    #[test]
    fn zookeeper_identity_follows_the_login_settings() {
        use crate::coord::zk::ZkIdentity::{Anonymous, Authenticated};
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "s3cret").unwrap();
        let pw = pw.to_str().unwrap();
        let identity = |args: &[&str]| {
            let r = parse(args).unwrap();
            crate::coord::zk::ZkIdentity::of(&r.serve.coord)
        };
        for (args, want) in [
            (vec![], Anonymous),
            (vec!["--zk-digest", "gw:s3cret"], Authenticated),
            (
                vec!["--zk-sasl-user", "gw", "--zk-sasl-password-file", pw],
                Authenticated,
            ),
        ] {
            assert_eq!(identity(&args), want, "{args:?}");
        }
        let mut cc = crate::coord::CoordConfig::new("zk:2281");
        cc.zk_tls = Some(crate::coord::ZkTls {
            ca: "CA".into(),
            identity: None,
        });
        assert_eq!(crate::coord::zk::ZkIdentity::of(&cc), Anonymous);
        cc.zk_tls = Some(crate::coord::ZkTls {
            ca: "CA".into(),
            identity: Some(("CERT".into(), "KEY".into())),
        });
        assert_eq!(crate::coord::zk::ZkIdentity::of(&cc), Authenticated);
        assert_eq!(Authenticated.acls(), zookeeper_client::Acls::creator_all());
        assert_eq!(Anonymous.acls(), zookeeper_client::Acls::anyone_all());
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

    /// Two values for each setting, neither its default, as they are written in the TOML file
    /// (a flag or a variable takes the same text, or for `log_json` the bare flag).
    fn samples(key: &str) -> Option<(toml::Value, toml::Value)> {
        use toml::Value::{Boolean as B, Integer as I, String as S};
        let s = |a: &str, b: &str| Some((S(a.into()), S(b.into())));
        let i = |a: i64, b: i64| Some((I(a), I(b)));
        match key {
            "zk" => s("zk1:2181", "zk2:2181"),
            "root" => s("/one", "/two"),
            "listen" => s("127.0.0.1:1001", "127.0.0.1:1002"),
            "http" => s("127.0.0.1:1003", "127.0.0.1:1004"),
            "session_timeout" => s("7s", "8s"),
            "zk_sessions" => i(2, 3),
            "max_value_bytes" => i(2048, 4096),
            "stop_margin" => s("300ms", "400ms"),
            "silence_limit" => s("2s", "3s"),
            "zk_tick_time" => s("1s", "500ms"),
            "keepalive_interval" => s("1s", "2s"),
            "keepalive_timeout" => s("3s", "4s"),
            "zk_digest" => s("a:1", "b:2"),
            "metrics_name_cap" => i(7, 8),
            "max_holder_streams" => i(11, 12),
            "max_holder_streams_per_connection" => i(13, 14),
            "max_observe_streams_per_connection" => i(15, 16),
            "max_observe_many_elections" => i(21, 22),
            "max_queues" => i(17, 18),
            "max_proclaim_bytes_in_flight" => i(19, 20),
            "max_unary_in_flight" => i(33, 34),
            "max_unary_in_flight_per_client" => i(35, 36),
            "max_connections" => i(37, 38),
            "max_connections_per_client" => i(39, 40),
            "first_message_timeout" => s("3s", "4s"),
            "zk_max_packet" => i(500_000, 600_000),
            "zk_batch" => Some((B(false), B(true))),
            "zk_stranded_after" => s("7s", "9s"),
            "tls_cert" => s("/one.pem", "/two.pem"),
            "tls_key" => s("/one.key", "/two.key"),
            "tls_client_ca" => s("/one-ca.pem", "/two-ca.pem"),
            "zk_tls_ca" => s("/zk-one-ca.pem", "/zk-two-ca.pem"),
            "zk_tls_cert" => s("/zk-one.pem", "/zk-two.pem"),
            "zk_tls_key" => s("/zk-one.key", "/zk-two.key"),
            "zk_sasl_user" => s("gw1", "gw2"),
            "zk_sasl_password_file" => s("/one.pw", "/two.pw"),
            "zk_sasl_mechanism" => s("gssapi", "digest-md5"),
            "zk_kerberos_principal" => s("gw1@R", "gw2@R"),
            "zk_kerberos_keytab" => s("/one.keytab", "/two.keytab"),
            "auth_policy" => s("/one-policy.toml", "/two-policy.toml"),
            "lease_key_file" => s("/one.keys", "/two.keys"),
            "audit_log" => s("/one-audit.log", "/two-audit.log"),
            "max_holder_streams_per_identity" => i(21, 22),
            "max_observe_streams_per_identity" => i(23, 24),
            "max_queues_per_identity" => i(25, 26),
            "max_unary_rate_per_identity" => i(27, 28),
            "max_unary_in_flight_per_identity" => i(29, 30),
            "max_bytes_in_flight_per_identity" => i(31, 32),
            "log_json" => Some((B(true), B(false))),
            _ => None,
        }
    }

    /// Every setting: the field names that are flags (clap) and keys (serde), except the file
    /// itself; `log_json` is the global flag.
    fn every_setting() -> Vec<String> {
        file_keys()
    }

    /// The merged value of `key`, as the file would write it.
    fn value_of(settings: &ServeArgs, key: &str) -> Option<toml::Value> {
        toml::Table::try_from(settings).unwrap().get(key).cloned()
    }

    /// The command line that sets `key` to `value` with a flag.
    fn flag(key: &str, value: &toml::Value) -> Vec<String> {
        let name = format!("--{}", key.replace('_', "-"));
        match value {
            // `--log-json` is a bare flag; `--zk-batch` takes its value.
            toml::Value::Boolean(true) if key == "log_json" => vec![name],
            toml::Value::String(s) => vec![name, s.clone()],
            other => vec![name, other.to_string()],
        }
    }

    /// Sets `ZKGATE_<KEY>` to `value` (or removes it), under [`env_lock`].
    fn set_env(key: &str, value: Option<&toml::Value>) {
        let var = format!("ZKGATE_{}", key.to_uppercase());
        match value {
            Some(toml::Value::String(s)) => std::env::set_var(var, s),
            Some(other) => std::env::set_var(var, other.to_string()),
            None => std::env::remove_var(var),
        }
    }

    /// The SASL mechanism decides which login settings count: the other mechanism's are refused
    /// (not silently ignored), halves of a login are refused, and `gssapi` needs a gateway
    /// built with Kerberos.
    #[test]
    fn zk_sasl_mechanism_settings_go_together() {
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "secret\n").unwrap();
        let kt = || Some(PathBuf::from("/gw.keytab"));
        let principal = || Some("gw@R".to_owned());
        let user = || Some("gw".to_owned());
        let digest = |u: Option<String>, p: bool| (u, p.then(|| pw.clone()));
        let kerberos = cfg!(feature = "zk-kerberos");
        #[rustfmt::skip]
        // Ok((a DIGEST-MD5 login?, a Kerberos login?)), or words of the error.
        type Want = Result<(bool, bool), &'static str>;
        let cases: Vec<(Option<&str>, SaslLogin, SaslLogin, Want)> = vec![
            // mechanism, digest login, kerberos login, Ok((digest?, kerberos?)) or the error's words
            (None, digest(None, false), (None, None), Ok((false, false))),
            (None, digest(user(), true), (None, None), Ok((true, false))),
            (
                Some("DIGEST-MD5"),
                digest(user(), true),
                (None, None),
                Ok((true, false)),
            ),
            (
                None,
                digest(None, false),
                (principal(), kt()),
                Err("need zk_sasl_mechanism = \"gssapi\""),
            ),
            (
                None,
                digest(None, false),
                (None, kt()),
                Err("need zk_sasl_mechanism = \"gssapi\""),
            ),
            (
                Some("gssapi"),
                digest(user(), true),
                (principal(), kt()),
                Err("are DIGEST-MD5's"),
            ),
            (
                Some("kerberos"),
                digest(None, false),
                (principal(), kt()),
                Err("`digest-md5` or `gssapi`"),
            ),
            (
                Some("gssapi"),
                digest(None, false),
                (principal(), kt()),
                if kerberos {
                    Ok((false, true))
                } else {
                    Err("built without Kerberos")
                },
            ),
            (
                Some("gssapi"),
                digest(None, false),
                (None, kt()),
                Err(if kerberos {
                    "needs zk_kerberos_principal"
                } else {
                    "built without Kerberos"
                }),
            ),
            (
                Some("gssapi"),
                digest(None, false),
                (principal(), None),
                Err(if kerberos {
                    "needs zk_kerberos_keytab"
                } else {
                    "built without Kerberos"
                }),
            ),
        ];
        for (mechanism, d, k, want) in cases {
            let case = format!("{mechanism:?} {d:?} {k:?}");
            match (zk_sasl_any(mechanism, d, k), want) {
                (Ok((sasl, krb)), Ok((want_sasl, want_krb))) => {
                    assert_eq!(
                        (sasl.is_some(), krb.is_some()),
                        (want_sasl, want_krb),
                        "{case}"
                    );
                }
                (Err(e), Err(words)) => assert!(e.to_string().contains(words), "{case}: {e}"),
                (got, want) => panic!("{case}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// So a setting cannot fall out of one source again (as `log_json` once fell out of the
    /// file): each one is reachable as a flag, a variable and a key, and flags > environment >
    /// file > defaults holds for each.
    #[test]
    fn every_setting_is_reachable_from_flag_env_and_file() {
        let _env = env_lock();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("z.toml");
        let with_file = |value: &toml::Value, key: &str, more: &[String]| {
            std::fs::write(&file, format!("{key} = {value}\n")).unwrap();
            let mut args = vec!["--config".to_owned(), file.to_str().unwrap().to_owned()];
            args.extend_from_slice(more);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            settings(&args).unwrap_or_else(|e| panic!("{key}: {e}"))
        };
        let plain = |more: &[String]| {
            let args: Vec<&str> = more.iter().map(String::as_str).collect();
            settings(&args).unwrap_or_else(|e| panic!("{more:?}: {e}"))
        };
        let cmd = ServeArgs::augment_args(clap::Command::new("serve"));
        for key in every_setting() {
            let (a, b) = samples(&key)
                .unwrap_or_else(|| panic!("setting {key} has no samples in this test: add two"));
            if let Some(arg) = cmd.get_arguments().find(|x| x.get_id() == key.as_str()) {
                let env = format!("ZKGATE_{}", key.to_uppercase());
                assert_eq!(
                    arg.get_long(),
                    Some(key.replace('_', "-").as_str()),
                    "{key}"
                );
                assert_eq!(arg.get_env(), Some(std::ffi::OsStr::new(&env)), "{key}");
            }
            let default = value_of(&plain(&[]), &key);
            assert_ne!(default.as_ref(), Some(&a), "{key}: sample a is the default");
            // Each source alone.
            assert_eq!(
                value_of(&plain(&flag(&key, &a)), &key),
                Some(a.clone()),
                "{key} flag"
            );
            set_env(&key, Some(&a));
            assert_eq!(value_of(&plain(&[]), &key), Some(a.clone()), "{key} env");
            set_env(&key, None);
            assert_eq!(
                value_of(&with_file(&a, &key, &[]), &key),
                Some(a.clone()),
                "{key} file"
            );
            // The environment over the file, a flag over the environment.
            set_env(&key, Some(&b));
            assert_eq!(
                value_of(&with_file(&a, &key, &[]), &key),
                Some(b.clone()),
                "{key}: env > file"
            );
            let flagged = with_file(&b, &key, &flag(&key, &a));
            assert_eq!(
                value_of(&flagged, &key),
                Some(a.clone()),
                "{key}: flag > env"
            );
            set_env(&key, None);
            assert_eq!(
                value_of(&plain(&[]), &key),
                default,
                "{key}: back to the default"
            );
        }
    }

    /// The defaults written in the `arg` attributes as text are the library's constants.
    #[test]
    fn flag_defaults_are_the_library_defaults() {
        let r = parse(&[]).unwrap();
        assert_eq!(
            r.serve.coord.session_timeout,
            crate::coord::DEFAULT_SESSION_TIMEOUT
        );
        assert_eq!(r.serve.coord.root, DEFAULT_ROOT);
        assert_eq!(r.serve.coord.zk, DEFAULT_ZK);
        assert_eq!(r.http.to_string(), DEFAULT_HTTP);
        let limits = limits::StreamLimits::default();
        assert_eq!(
            r.serve.limits.first_message_timeout,
            limits.first_message_timeout
        );
        assert_eq!(
            r.serve.limits.holder_streams_per_gateway,
            limits.holder_streams_per_gateway
        );
        assert!(!r.log_json);
    }

    /// A bad setting is a typed error that names it.
    #[test]
    fn bad_settings_are_typed_startup_errors() {
        let _env = env_lock();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("z.toml");
        let path = p.to_str().unwrap();
        let load_args = |args: &[&str]| -> Result<Resolved, ConfigError> {
            let matches = Cli::command()
                .try_get_matches_from(["zkgate", "serve"].iter().chain(args))
                .unwrap();
            load(matches.subcommand_matches("serve").unwrap()).and_then(ServeArgs::resolve)
        };
        let missing = dir.path().join("missing.toml");
        let e = load_args(&["--config", missing.to_str().unwrap()]).unwrap_err();
        assert!(matches!(e, ConfigError::ReadFile { .. }), "{e}");
        for (text, word) in [
            ("bogus = 1\n", "bogus"),
            ("zk_sessions = \"many\"\n", "zk_sessions"),
            ("session_timeout = \"soon\"\n", "session_timeout"),
            ("config = \"/etc/other.toml\"\n", "config"),
            ("zk = \n", ""),
        ] {
            std::fs::write(&p, text).unwrap();
            let e = load_args(&["--config", path]).unwrap_err();
            assert!(matches!(e, ConfigError::File { .. }), "{text}: {e}");
            assert!(
                e.to_string().contains(path) && e.to_string().contains(word),
                "{text}: {e}"
            );
        }
        let e = load_args(&["--root", "zkgate"]).unwrap_err();
        assert!(matches!(e, ConfigError::Root(_)), "{e}");
        let e = load_args(&["--max-value-bytes", "2000000"]).unwrap_err();
        assert!(matches!(e, ConfigError::ValueTooLarge), "{e}");
        let e = load_args(&["--zk-max-packet", "65536"]).unwrap_err();
        assert!(matches!(e, ConfigError::PacketBudget(_)), "{e}");
        let e = load_args(&["--tls-key", path]).unwrap_err();
        assert!(matches!(e, ConfigError::HalfTls(_)), "{e}");
        let e = load_args(&["--tls-cert", "/nonexistent.pem", "--tls-key", path]).unwrap_err();
        assert!(matches!(e, ConfigError::ReadTls { .. }), "{e}");
        let e = load_args(&["--silence-limit", "9s"]).unwrap_err();
        assert!(matches!(e, ConfigError::Timing(_)), "{e}");
    }

    /// `log_json` from the file, and the global flag over it.
    #[test]
    fn log_json_from_the_file_and_the_global_flag() {
        let _env = env_lock();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("z.toml");
        std::fs::write(&p, "log_json = true\n").unwrap();
        let path = p.to_str().unwrap();
        assert!(settings(&["--config", path]).unwrap().log_json);
        std::fs::write(&p, "log_json = false\n").unwrap();
        let matches = Cli::command()
            .try_get_matches_from(["zkgate", "--log-json", "serve", "--config", path])
            .unwrap();
        assert!(
            load(matches.subcommand_matches("serve").unwrap())
                .unwrap()
                .log_json
        );
    }
}
