//! The coordination layer's settings: what `serve` says about ZooKeeper (where, as whom, the
//! session timeout and the timing rules' overrides) and the bounds the gateway keeps (values,
//! queues, packets). Read by the sessions, the timing rules and the paging; it reads only the
//! bounds and the paging arithmetic, so every room of `coord` can take it without a circle.

use std::time::Duration;

use zookeeper_client as zkc;

use super::bounds::DEFAULT_MAX_VALUE_BYTES;
use super::paging;
use super::types::QueueKind;

pub const DEFAULT_ROOT: &str = "/zkgate";
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// Distinct queues (elections + locks) one gateway serves at once, by default: each is an actor
/// with a persistent watch on the server.
pub const DEFAULT_MAX_QUEUES: usize = 10_000;
/// Proclaimed bytes (values plus 1 KiB a request) one session may have in flight, by default.
pub const DEFAULT_MAX_PROCLAIM_BYTES_IN_FLIGHT: usize = 4 * 1024 * 1024;

/// Settings of the coordination layer (the `serve` flags that concern ZooKeeper).
#[derive(Debug, Clone)]
pub struct CoordConfig {
    /// ZooKeeper connect string, `host:port[,host:port…]`.
    pub zk: String,
    /// Root znode, e.g. `/zkgate`.
    pub root: String,
    /// Requested session timeout; ZooKeeper clamps it to 2–20 × tickTime.
    pub session_timeout: Duration,
    /// Sessions in the pool (default 1).
    pub pool_size: usize,
    pub max_value_bytes: usize,
    /// Stop leaders this long before the server could expire the session (default T/10).
    pub stop_margin: Option<Duration>,
    /// Explicit silence limit (default 35% of the session timeout).
    pub silence_limit: Option<Duration>,
    /// `user:password` for ZooKeeper digest auth; znodes then get a creator-only ACL (G9).
    pub zk_digest: Option<String>,
    /// TLS to ZooKeeper's `secureClientPort` (SPEC §7); a client certificate also authenticates.
    pub zk_tls: Option<ZkTls>,
    /// SASL DIGEST-MD5 to ZooKeeper; znodes then get a creator-only ACL (G9).
    pub zk_sasl: Option<ZkSasl>,
    /// SASL GSSAPI (Kerberos) to ZooKeeper (cargo feature `zk-kerberos`); znodes then get a
    /// creator-only ACL, `sasl:<principal>` (G9). The ticket is the process's: see
    /// [`crate::kerberos`].
    pub zk_kerberos: Option<crate::kerberos::ZkKerberos>,
    /// The ensemble's `tickTime`, if the operator states it (unstated: the largest tick a server
    /// granting the session's timeout T can run with, T/2). The ensemble's leader hears
    /// of a session held by a follower only through the follower's ping replies, every half
    /// tick, so the G2 deadline allows for that lag (see `timing::Timing::quorum_lag`).
    /// Overstating it only shortens `stop_within`; understating it weakens G2, which is why
    /// nothing smaller than the worst case is assumed unless stated.
    pub zk_tick_time: Option<Duration>,
    /// HTTP/2 keepalive ping interval toward clients (default T/5; see [`super::timing::Timing`]).
    pub keepalive_interval: Option<Duration>,
    /// Unanswered keepalive → connection dead, its znodes released (default 2T/5).
    pub keepalive_timeout: Option<Duration>,
    /// Distinct queues (elections + locks) in use on this gateway at once; a stream or read
    /// that needs one more gets `ResourceExhausted` (G10).
    pub max_queues: usize,
    /// Proclaimed bytes in flight per session (values plus 1 KiB a request): the session's
    /// requests are answered in order, so this bounds how long a proclaim flood can hold up
    /// the liveness probe and confirmations queued behind it (G10).
    pub max_proclaim_bytes_in_flight: usize,
    /// Largest packet the gateway sends to or expects from ZooKeeper (`--zk-max-packet`): every
    /// multi-read is paged to stay within it, and it bounds the queue size (see [`paging`]).
    pub zk_max_packet: usize,
    /// Member creates and deletes that are ready while another write of the session is in
    /// flight leave together in one ZooKeeper `multi` (`--zk-batch`; see [`super::batch`]).
    pub zk_batch: bool,
    /// How long a proof that the session's server diverged from its quorum stands before the
    /// session is stranded there: its waiting members end `UNAVAILABLE` and it takes no new
    /// ones (`--zk-stranded-after`; see [`super::divergence`]).
    pub zk_stranded_after: Duration,
}

impl CoordConfig {
    pub fn new(zk: impl Into<String>) -> Self {
        Self {
            zk: zk.into(),
            root: DEFAULT_ROOT.to_owned(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            pool_size: 1,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            stop_margin: None,
            silence_limit: None,
            zk_digest: None,
            zk_tls: None,
            zk_sasl: None,
            zk_kerberos: None,
            zk_tick_time: None,
            keepalive_interval: None,
            keepalive_timeout: None,
            max_queues: DEFAULT_MAX_QUEUES,
            max_proclaim_bytes_in_flight: DEFAULT_MAX_PROCLAIM_BYTES_IN_FLIGHT,
            zk_max_packet: paging::DEFAULT_ZK_MAX_PACKET,
            zk_batch: true,
            zk_stranded_after: super::divergence::STRANDED_AFTER,
        }
    }

    /// How to page a multi-read of the members of a queue of `kind` (see [`paging`]).
    pub fn member_reads(&self, kind: QueueKind) -> paging::ReadPlan {
        paging::ReadPlan {
            budget: self.zk_max_packet,
            data_bound: paging::member_data_bound(kind, self.max_value_bytes),
        }
    }

    /// The most members a queue may have: one `getChildren` must list them all within
    /// `zk_max_packet`.
    pub fn max_queue_members(&self) -> usize {
        paging::max_queue_members(self.zk_max_packet)
    }

    /// Checks that `zk_max_packet` leaves room for the largest member.
    ///
    /// # Errors
    /// A sentence naming both settings.
    pub fn check_packet_budget(&self) -> Result<(), String> {
        let plan = self.member_reads(QueueKind::Election);
        if !plan.fits_one() || self.max_queue_members() < 1 {
            return Err(format!(
                "--zk-max-packet {} is too small for one member with --max-value-bytes {} \
                 (it needs at least {} bytes)",
                self.zk_max_packet,
                self.max_value_bytes,
                plan.min_budget()
            ));
        }
        Ok(())
    }

    /// The root without a trailing slash ("" for "/").
    pub fn root_path(&self) -> &str {
        self.root.trim_end_matches('/')
    }

    /// How many servers the connect string names (`host:port,host:port/chroot`): a session
    /// can move away from a diverged server only if there is another ([`super::divergence`]).
    pub fn zk_servers(&self) -> usize {
        let hosts = self.zk.split('/').next().unwrap_or_default();
        hosts.split(',').filter(|h| !h.trim().is_empty()).count()
    }
}

/// TLS to ZooKeeper's `secureClientPort` (`--zk-tls-ca`, `--zk-tls-cert`, `--zk-tls-key`): the
/// PEM text, read once at start so that a missing or unreadable file refuses to start rather
/// than failing every reconnect. The server's certificate must be signed by `ca` and name the
/// host of the connect string (hostname verification stays on).
#[derive(Clone)]
pub struct ZkTls {
    pub ca: String,
    /// Client certificate and key: ZooKeeper's x509 provider then identifies the gateway by
    /// the certificate's subject DN, and the znodes it makes carry an ACL for that identity.
    pub identity: Option<(String, String)>,
}

impl std::fmt::Debug for ZkTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkTls")
            .field("client_certificate", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

impl ZkTls {
    /// The library's TLS options; checking them at start is what makes a bad PEM file refuse to
    /// start ([`crate::config`]).
    ///
    /// # Errors
    /// A PEM file that holds no certificate or key.
    pub fn options(&self) -> Result<zkc::TlsOptions, zkc::Error> {
        let options = zkc::TlsOptions::new().with_pem_ca(&self.ca)?;
        match &self.identity {
            Some((cert, key)) => options.with_pem_identity(cert, key),
            None => Ok(options),
        }
    }
}

/// SASL DIGEST-MD5 to ZooKeeper (`--zk-sasl-user`, `--zk-sasl-password-file`). The password
/// never appears in `Debug` output.
#[derive(Clone)]
pub struct ZkSasl {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for ZkSasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkSasl")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}
