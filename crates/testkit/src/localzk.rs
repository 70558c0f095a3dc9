//! Local ZooKeeper servers under a test's control: a standalone server or an ensemble, with
//! fault injection (stop, kill, restart, pause, resume one server; find the leader; route the
//! peer links of an ensemble through link cutters; bring a server back diverged from its
//! quorum, and heal it).
//!
//! Built on [`zkgate_localzk::ServerSet`], which starts the JVMs and guarantees that none
//! outlives the test process (see that module's docs); this module adds only what tests need,
//! so none of it is compiled into the gateway.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zkgate_localzk::{
    admin_command, four_letter_word, loopback, parse_admin_mode, parse_mode, ClientListener,
    ServerSet, ServerSetSpec, ZkServer,
};

pub use zkgate_localzk::{Divergence, LocalZkError};

/// Upper bound for one `srvr` exchange: a paused server accepts the TCP connection (the kernel
/// does that) but never answers.
const FOUR_LETTER_TIMEOUT: Duration = Duration::from_secs(2);

/// Options for [`LocalZk::start_standalone`] and [`LocalZk::start_ensemble`].
#[derive(Debug, Clone)]
pub struct LocalZkOptions {
    /// ZooKeeper's `tickTime`.  The server clamps every session timeout to
    /// 2..=20 ticks, so the default of 250 ms lets tests use session timeouts
    /// between 500 ms and 5 s (ZooKeeper's own default, 2 s, would force
    /// sessions of at least 4 s and make expiry tests slow).
    pub tick_time: Duration,
    /// `maxClientCnxns`: connections allowed per client IP.  Everything here
    /// connects from 127.0.0.1, so the default is 0 (unlimited) rather than
    /// ZooKeeper's 60.
    pub max_client_cnxns: u32,
    /// `maxSessionTimeout`, when set: the server grants no longer session (tests of a
    /// gateway whose requested timeout is cut down). `None`: ZooKeeper's 20 ticks.
    pub max_session_timeout: Option<Duration>,
    /// How often the server reaps empty container znodes (`znode.container.checkIntervalMs`,
    /// with no per-minute cap when set). `None`: ZooKeeper's default, once a minute.
    pub container_check_interval: Option<Duration>,
    /// `syncLimit` of an ensemble, in ticks (default 5): how long a follower cut off from its
    /// leader keeps serving its clients by itself.
    pub sync_limit: u32,
    /// How server `from` reaches the quorum and election ports of server `to` in an ensemble
    /// (default: directly). A test puts a link cutter on each peer link with this, to cut one
    /// server off from the others while its clients still reach it.
    pub peer_route: Option<PeerRoute>,
    /// Where to put configuration, data and logs (one `zkN` directory per
    /// server).  `None` (the default) uses a fresh temporary directory that is
    /// deleted when the [`LocalZk`] is dropped; a given directory is kept, and
    /// existing data in it is reused.
    pub base_dir: Option<PathBuf>,
    /// TLS for clients on a `secureClientPort` of every server (see [`LocalZk::secure_address`]),
    /// served with Netty from PEM files, and no plaintext client port at all: the secure port
    /// is the servers' client port ([`LocalZk::connect_string`] lists it), and the kit checks
    /// health, [`LocalZk::mode`] included, over HTTP on the AdminServer
    /// ([`LocalZk::admin_address`]), since four-letter words need a plaintext port.
    pub secure_client: Option<SecureClient>,
    /// SASL for clients: the servers' JAAS file (see [`write_digest_jaas`]) and whether an
    /// unauthenticated client is refused (`enforce.auth.enabled`, ZooKeeper 3.8).
    pub sasl: Option<SaslServer>,
}

/// See [`LocalZkOptions::secure_client`].
#[derive(Debug, Clone)]
pub struct SecureClient {
    /// The server's certificate and key concatenated in one PEM file.
    pub key_store: PathBuf,
    /// The CA (PEM) that client certificates must be signed by.
    pub trust_store: PathBuf,
    /// `ssl.clientAuth`: `"need"`, `"want"` or `"none"`. With `need` or `want`, a client
    /// certificate authenticates the session as `x509:<subject DN>`.
    pub client_auth: &'static str,
}

/// See [`LocalZkOptions::sasl`].
#[derive(Debug, Clone)]
pub struct SaslServer {
    pub jaas: PathBuf,
    /// Refuse every request of a session that did not authenticate with SASL.
    pub required: bool,
    /// For Kerberos (GSSAPI): the realm's `krb5.conf` (`-Djava.security.krb5.conf`; see
    /// [`crate::kdc`] and [`crate::kdc::write_kerberos_jaas`]). `None` for DIGEST-MD5.
    pub krb5_conf: Option<PathBuf>,
}

/// Writes a JAAS file whose `Server` section accepts the given DIGEST-MD5 logins.
pub fn write_digest_jaas(path: &Path, users: &[(&str, &str)]) {
    let mut text =
        String::from("Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required");
    for (user, password) in users {
        let _ = write!(text, "\n  user_{user}=\"{password}\"");
    }
    text.push_str(";\n};\n");
    std::fs::write(path, text).expect("writing the JAAS file");
}

impl Default for LocalZkOptions {
    fn default() -> Self {
        let product = zkgate_localzk::LocalZkOptions::default();
        Self {
            tick_time: product.tick_time,
            max_client_cnxns: product.max_client_cnxns,
            max_session_timeout: None,
            container_check_interval: None,
            sync_limit: 5,
            peer_route: None,
            base_dir: None,
            secure_client: None,
            sasl: None,
        }
    }
}

/// One direction of one peer link of an ensemble (0-based server indexes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerLink {
    pub from: usize,
    pub to: usize,
    /// The leader-election port rather than the quorum port.
    pub election: bool,
}

/// Maps a peer link and the real address of its target port to the address server `from`
/// should use instead (see [`LocalZkOptions::peer_route`]). Called again for every start
/// attempt, since ports are picked afresh each time.
#[derive(Clone)]
pub struct PeerRoute(pub Arc<dyn Fn(PeerLink, SocketAddr) -> SocketAddr + Send + Sync>);

impl std::fmt::Debug for PeerRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerRoute(..)")
    }
}

/// One standalone ZooKeeper server or an ensemble, running as child processes
/// on loopback ports, which a test can stop, kill, restart, pause and resume.
///
/// Servers are addressed by a 0-based index.  Dropping a `LocalZk` kills all
/// of its servers (and deletes its temporary directory); even if it is never
/// dropped, the servers die together with the current process.
#[derive(Debug)]
pub struct LocalZk {
    set: ServerSet,
}

impl LocalZk {
    /// Whether Java and the ZooKeeper jars can be found, so that tests can
    /// skip (with [`LocalZk::install_hint`]) instead of failing obscurely.
    pub fn is_installed() -> bool {
        zkgate_localzk::LocalZk::is_installed()
    }

    /// How to make [`LocalZk::is_installed`] true.
    pub fn install_hint() -> &'static str {
        zkgate_localzk::LocalZk::install_hint()
    }

    /// Starts one standalone server and waits until it serves requests.
    ///
    /// # Errors
    /// As for [`ServerSet::start`].
    pub async fn start_standalone(opts: LocalZkOptions) -> Result<LocalZk, LocalZkError> {
        Self::start_cluster(1, false, opts).await
    }

    /// Starts an ensemble of `size` servers (`server.1` ... `server.N`) and
    /// waits until every member answers `ruok` and reports its `Mode`, i.e. a
    /// leader has been elected and everyone has joined.  Use 3 (or 5) to
    /// test fail-over: a majority must survive.
    ///
    /// # Errors
    /// [`LocalZkError::InvalidSize`] for `size == 0`, otherwise as for
    /// [`LocalZk::start_standalone`].
    pub async fn start_ensemble(
        size: usize,
        opts: LocalZkOptions,
    ) -> Result<LocalZk, LocalZkError> {
        Self::start_cluster(size, true, opts).await
    }

    async fn start_cluster(
        size: usize,
        ensemble: bool,
        opts: LocalZkOptions,
    ) -> Result<LocalZk, LocalZkError> {
        // Port 0 is the client port (the secure one with TLS), then an ensemble's quorum and
        // election ports, then with TLS the AdminServer's.
        let plain_ports = if ensemble { 3 } else { 1 };
        let client = match opts.secure_client {
            Some(_) => ClientListener::NoPlaintext { admin: plain_ports },
            None => ClientListener::Plaintext,
        };
        let extra_config = |servers: &[ZkServer], i: usize| -> String {
            let mut cfg = String::new();
            if let Some(tls) = &opts.secure_client {
                let _ = writeln!(
                    cfg,
                    "secureClientPort={}\nsecureClientPortAddress=127.0.0.1\n\
                     serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                     ssl.keyStore.location={}\nssl.keyStore.type=PEM\n\
                     ssl.trustStore.location={}\nssl.trustStore.type=PEM\n\
                     ssl.clientAuth={}\n\
                     authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider",
                    servers[i].port(0),
                    tls.key_store.display(),
                    tls.trust_store.display(),
                    tls.client_auth,
                );
            }
            if let Some(sasl) = &opts.sasl {
                let _ = writeln!(
                    cfg,
                    "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
                );
                if sasl.required {
                    let _ = writeln!(cfg, "enforce.auth.enabled=true\nenforce.auth.schemes=sasl");
                }
            }
            if let Some(max) = opts.max_session_timeout {
                let _ = writeln!(cfg, "maxSessionTimeout={}", max.as_millis());
            }
            if ensemble {
                let _ = writeln!(cfg, "initLimit=10\nsyncLimit={}", opts.sync_limit);
                for (j, s) in servers.iter().enumerate() {
                    // A server binds its own line's ports: only the others' go through routes.
                    let route = |election, port| {
                        let real = loopback(port);
                        match &opts.peer_route {
                            Some(route) if j != i => (route.0)(
                                PeerLink {
                                    from: i,
                                    to: j,
                                    election,
                                },
                                real,
                            ),
                            _ => real,
                        }
                    };
                    let (peer, election) = (route(false, s.port(1)), route(true, s.port(2)));
                    let _ = writeln!(
                        cfg,
                        "server.{}={}:{}:{}",
                        s.id(),
                        peer.ip(),
                        peer.port(),
                        election.port()
                    );
                }
            }
            cfg
        };
        let jvm_options =
            opts.container_check_interval
                .into_iter()
                .flat_map(|d| {
                    [
                        format!("-Dznode.container.checkIntervalMs={}", d.as_millis().max(1)),
                        "-Dznode.container.maxPerMinute=100000000".to_owned(),
                    ]
                })
                .chain(opts.sasl.iter().map(|sasl| {
                    format!("-Djava.security.auth.login.config={}", sasl.jaas.display())
                }))
                .chain(
                    opts.sasl
                        .iter()
                        .filter_map(|sasl| sasl.krb5_conf.as_ref())
                        .map(|conf| format!("-Djava.security.krb5.conf={}", conf.display())),
                )
                .collect();
        let set = ServerSet::start(ServerSetSpec {
            size,
            ports_per_server: plain_ports + usize::from(opts.secure_client.is_some()),
            tick_time: opts.tick_time,
            max_client_cnxns: opts.max_client_cnxns,
            base_dir: opts.base_dir.clone(),
            jvm_options,
            extra_config: &extra_config,
            myid: ensemble,
            client,
        })
        .await?;
        Ok(LocalZk { set })
    }

    /// The ZooKeeper connect string, `127.0.0.1:p1,127.0.0.1:p2,...`.
    pub fn connect_string(&self) -> String {
        self.set.connect_string()
    }

    /// Client address of server `i` (0-based).  It stays the same across
    /// [`LocalZk::stop`] / [`LocalZk::start`].
    ///
    /// # Panics
    /// If `i >= self.len()`.
    pub fn server_address(&self, i: usize) -> SocketAddr {
        self.set.servers()[i].client_addr()
    }

    /// The `secureClientPort` address of server `i` (0-based), when started with
    /// [`LocalZkOptions::secure_client`]: the same as [`LocalZk::server_address`], since such
    /// a server has no other client port.
    ///
    /// # Panics
    /// If `i >= self.len()` or the servers have no secure port.
    pub fn secure_address(&self, i: usize) -> SocketAddr {
        assert!(
            self.admin_address(i).is_some(),
            "the servers were started without secure_client"
        );
        self.server_address(i)
    }

    /// The AdminServer (HTTP, 127.0.0.1) of server `i`, for servers started with
    /// [`LocalZkOptions::secure_client`]; `None` for the others, whose AdminServer is off.
    pub fn admin_address(&self, i: usize) -> Option<SocketAddr> {
        self.set.admin_address(i)
    }

    /// Number of servers (1 for a standalone server).
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Always `false`: there is at least one server.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// The directory holding every server's `zkN` directory.
    pub fn base_dir(&self) -> &Path {
        self.set.base_dir()
    }

    /// The console log (JVM stdout and stderr) of server `i`, for printing
    /// when a test fails.
    ///
    /// # Panics
    /// If `i >= self.len()`.
    pub fn log_path(&self, i: usize) -> PathBuf {
        self.set.servers()[i].log_path()
    }

    /// The JVM pid of server `i`, or `None` if it was stopped or killed (or
    /// `i` is out of range).  A server that crashed on its own keeps its pid
    /// here until the next call that takes `&mut self` notices the exit.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.set.servers().get(i)?.pid()
    }

    /// Whether server `i`'s process is alive (it may still be paused or not
    /// yet serving).  Also forgets a process that exited on its own.
    pub fn is_running(&mut self, i: usize) -> bool {
        self.set.is_running(i)
    }

    /// Stops server `i` gracefully (see [`ServerSet::stop`]).
    ///
    /// # Errors
    /// As for [`ServerSet::stop`].
    pub async fn stop(&mut self, i: usize) -> Result<(), LocalZkError> {
        self.set.stop(i).await
    }

    /// Kills server `i` with SIGKILL, simulating a crash, and returns once the
    /// process is gone.  Killing a stopped server does nothing.
    ///
    /// # Errors
    /// As for [`ServerSet::kill`].
    pub async fn kill(&mut self, i: usize) -> Result<(), LocalZkError> {
        self.set.kill(i).await
    }

    /// (Re)starts stopped server `i` on the same ports and data directory, and
    /// waits (up to ~30 s) until it answers `ruok` and reports a `Mode`, i.e.
    /// for an ensemble member until it has joined the quorum.  Note that an
    /// ensemble member cannot become healthy while a majority is down.
    ///
    /// # Errors
    /// [`LocalZkError::NoSuchServer`], [`LocalZkError::AlreadyRunning`],
    /// [`LocalZkError::Io`] if it cannot be spawned, and
    /// [`LocalZkError::Unhealthy`] (the process is then killed again).
    pub async fn start(&mut self, i: usize) -> Result<(), LocalZkError> {
        self.set.spawn(i).await?;
        if let Err(err) = self.set.wait_healthy(&[i]).await {
            let _ = self.set.kill(i).await;
            return Err(err);
        }
        Ok(())
    }

    /// Rewrites stopped server `i`'s database so that, started again, it lists what its quorum
    /// does not ([`Divergence::ghosts`]) and lacks what its quorum has
    /// ([`Divergence::delete`]) while following its leader for everything after: the
    /// symptom of ZOOKEEPER-5010, made deterministic (see [`ServerSet::diverge`] for when
    /// the leader would undo it). [`LocalZk::wipe`] heals it.
    ///
    /// # Errors
    /// As for [`ServerSet::diverge`].
    pub async fn diverge(&mut self, i: usize, edits: &Divergence) -> Result<(), LocalZkError> {
        self.set.diverge(i, edits).await
    }

    /// Wipes stopped server `i`'s database (keeping `myid`), so that it comes back with the
    /// leader's full state: how an operator heals a diverged server.
    ///
    /// # Errors
    /// As for [`ServerSet::wipe`].
    pub async fn wipe(&mut self, i: usize) -> Result<(), LocalZkError> {
        self.set.wipe(i).await
    }

    /// Freezes server `i` with SIGSTOP: its sockets stay open but it answers
    /// nothing, like a hung or partitioned machine.  Followers notice a paused
    /// leader after `syncLimit` ticks, and clients' sessions time out.
    ///
    /// Returns once the kernel reports the JVM stopped: a signal is delivered asynchronously,
    /// so reading the state right after sending it could still see the process running.
    ///
    /// # Errors
    /// [`LocalZkError::NoSuchServer`], [`LocalZkError::NotRunning`],
    /// [`LocalZkError::Io`] if the signal cannot be sent.
    pub async fn pause(&mut self, i: usize) -> Result<(), LocalZkError> {
        self.set.signal(i, "STOP")?;
        self.wait_state(i, |state| state == Some('T')).await;
        Ok(())
    }

    /// Continues server `i` after [`LocalZk::pause`] (SIGCONT).
    ///
    /// # Errors
    /// As for [`LocalZk::pause`].
    pub async fn resume(&mut self, i: usize) -> Result<(), LocalZkError> {
        self.set.signal(i, "CONT")?;
        self.wait_state(i, |state| state != Some('T')).await;
        Ok(())
    }

    /// Polls server `i`'s process state (Linux `/proc`) until `done` holds, for up to 5 s.
    async fn wait_state(&mut self, i: usize, done: impl Fn(Option<char>) -> bool) {
        let Some(pid) = self.pid(i) else {
            return;
        };
        let state = || zkgate_localzk::process::process_state(pid);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done(state()) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Server `i`'s role according to `srvr`: `"leader"`, `"follower"` or
    /// `"standalone"` (or `"observer"`).  `None` if it is stopped, paused, not
    /// (yet) part of a quorum, or `i` is out of range.
    pub async fn mode(&self, i: usize) -> Option<String> {
        self.pid(i)?;
        if let Some(admin) = self.admin_address(i) {
            let answer = admin_command(admin, "srvr", FOUR_LETTER_TIMEOUT)
                .await
                .ok()?;
            return parse_admin_mode(&answer);
        }
        let answer = four_letter_word(self.server_address(i), "srvr", FOUR_LETTER_TIMEOUT)
            .await
            .ok()?;
        parse_mode(&answer).map(str::to_owned)
    }

    /// Index of the server that currently reports `Mode: leader`, so that tests
    /// can kill or pause it.  `None` during an election or for a standalone
    /// server.
    pub async fn leader_index(&self) -> Option<usize> {
        for i in 0..self.len() {
            if self.mode(i).await.as_deref() == Some("leader") {
                return Some(i);
            }
        }
        None
    }

    /// Stops every server gracefully and waits for all of them (see
    /// [`ServerSet::shutdown`]).  Prefer this over dropping when there is an
    /// async context, as `Drop` has to block.
    pub async fn shutdown(self) {
        self.set.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_zk_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<LocalZk>();
    }
}
