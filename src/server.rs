//! `run(listener, …, shutdown)`: the whole gateway on listeners the caller made, so tests start
//! it in-process on port 0 and `main` stays thin.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Server;
use tonic_health::ServingStatus;

use crate::api::limits::{Admission, Connections, StreamLimits};
use crate::api::{ApiDeps, ElectionApi, LockApi};
use crate::auth::{Auth, LeaseKeys};
use crate::batched_writes::BatchedWrites;
use crate::coord::timing::{Timing, TimingError};
use crate::coord::{CoordConfig, Coordinator};
use crate::proto::election_server::ElectionServer;
use crate::proto::lock_server::LockServer;

/// Everything `run` needs besides its listeners.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub coord: CoordConfig,
    /// Upper bound for each drain phase at shutdown, beyond the silence limit that revoked
    /// holders get (see [`Coordinator::drain`]).
    pub drain_grace: Duration,
    /// Distinct election/lock names with their own metric label.
    pub name_label_cap: usize,
    pub tls: Option<tonic::transport::ServerTlsConfig>,
    /// Stream limits per gateway, per client connection and per identity, and the
    /// first-message timeout.
    pub limits: StreamLimits,
    /// The keys that sign and verify leases (`--lease-key-file`; default: this process's
    /// random key, see [`LeaseKeys`]).
    pub lease_keys: LeaseKeys,
    /// The policy (`--auth-policy`; default: none, everything allowed).
    pub auth: Arc<Auth>,
}

impl ServeConfig {
    pub fn new(coord: CoordConfig) -> Self {
        Self {
            coord,
            drain_grace: Duration::from_secs(5),
            name_label_cap: crate::metrics::DEFAULT_NAME_LABEL_CAP,
            tls: None,
            limits: StreamLimits::default(),
            lease_keys: LeaseKeys::per_process(),
            auth: Auth::open(),
        }
    }

    /// The timing of the requested session timeout (see [`Timing`]).
    pub fn timing(&self) -> Timing {
        Timing::requested(&self.coord)
    }

    /// G3b, checked once at start-up ([`Timing::check`]).
    ///
    /// # Errors
    /// The rule broken, naming the settings that break it.
    pub fn check_timing(&self) -> Result<(), TimingError> {
        self.timing().check(&self.coord)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("refusing to start: {0}")]
    Config(String),
    #[error("refusing to start: {0}")]
    Timing(#[from] TimingError),
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
}

/// Runs the gateway until `shutdown` resolves, then drains (G7, G3c): health goes NOT_SERVING,
/// holders are revoked (`suspended` first, their znodes deleted once they end their streams or
/// their silence limit passed), other streams end `UNAVAILABLE` and their znodes go, the
/// ZooKeeper session closes, and connections still owing bytes to clients that do not read are
/// cut a second later.
///
/// # Errors
/// Refuses settings that break G3b; transport errors.
pub async fn run(
    cfg: ServeConfig,
    listener: TcpListener,
    http: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    cfg.check_timing()?;
    // The recorder first, so nothing the coordinator records at start-up is lost.
    crate::metrics::install(cfg.name_label_cap);
    // The Kerberos ticket before the first session asks GSSAPI for it.
    if let Some(k) = &cfg.coord.zk_kerberos {
        crate::kerberos::login(k)
            .await
            .map_err(|e| ServeError::Config(format!("Kerberos: {e}")))?;
    }
    let kerberos = cfg.coord.zk_kerberos.is_some();
    let coord = Coordinator::start(cfg.coord.clone());
    let served = run_with(coord, cfg, listener, http, shutdown).await;
    if kerberos {
        crate::kerberos::logout();
    }
    served
}

/// [`run`] with a coordinator the caller started (tests read its request counter).
///
/// # Errors
/// As [`run`].
pub async fn run_with(
    coord: Arc<Coordinator>,
    cfg: ServeConfig,
    listener: TcpListener,
    http: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    cfg.check_timing()?;
    cfg.coord
        .check_packet_budget()
        .map_err(ServeError::Config)?;
    let metrics = crate::metrics::install(cfg.name_label_cap);
    if crate::coord::zk::ZkIdentity::of(&coord.cfg) == crate::coord::zk::ZkIdentity::Anonymous {
        tracing::warn!(
            "no ZooKeeper authentication (--zk-digest, --zk-sasl-user, --zk-kerberos-principal or --zk-tls-cert): the gateway's znodes carry the open ACL world:anyone, so every ZooKeeper client can read, list and delete them (G9)"
        );
    }

    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    let health_task = tokio::spawn(follow_health(coord.clone(), health_reporter.clone()));
    if let Some(http) = http {
        tokio::spawn(crate::http::serve(
            http,
            coord.clone(),
            metrics,
            cfg.auth.clone(),
        ));
    }

    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    let timing = cfg.timing();
    let (ka_interval, ka_timeout) = (timing.keepalive_interval, timing.keepalive_timeout);
    let admission = Admission::new(cfg.limits);
    crate::api::limits::raise_open_file_limit();
    let connections = Connections::new(&cfg.limits);
    if let Some(files) = crate::api::limits::open_file_limit() {
        let room = files.saturating_sub(crate::api::limits::CONNECTION_FD_RESERVE);
        if connections.max() > room {
            tracing::warn!(max_connections = connections.max(), open_file_limit = files, "--max-connections leaves fewer than 256 of the open-file limit for ZooKeeper and the HTTP port: a flood of connections can leave a ZooKeeper reconnect without a descriptor, and the session's holds would be lost");
        }
    }
    tracing::info!(
        max_connections = connections.max(),
        per_client = cfg.limits.connections_per_client,
        "client connections bounded"
    );
    let mut builder = Server::builder()
        .max_concurrent_streams(cfg.limits.http2_max_concurrent_streams())
        .http2_keepalive_interval(Some(ka_interval))
        // Dead clients are found by the connections' own read watch (`incoming`), which marks
        // a connection given up before it ends it (`conn_fate`); hyper's timeout, later, only
        // backs it up.
        .http2_keepalive_timeout(Some(ka_timeout * 2))
        .tcp_nodelay(true)
        .layer(crate::grpc_metrics::GrpcMetricsLayer);
    if let Some(tls) = cfg.tls.clone() {
        builder = builder.tls_config(tls)?;
    }
    let drain_coord = coord.clone();
    let grace = cfg.drain_grace;
    let drained = Arc::new(tokio::sync::Notify::new());
    let drained_tx = drained.clone();
    let signal = async move {
        shutdown.await;
        tracing::info!("draining: ending streams, releasing znodes, closing the ZooKeeper session");
        health_task.abort();
        notify_systemd(&[sd_notify::NotifyState::Stopping]);
        // Wait until it is really gone: a poll in progress on another thread could otherwise
        // still write SERVING after the NOT_SERVING below.
        let _ = health_task.await;
        // Every name a client may check: the server ("") and each zkgate service.
        for svc in HEALTH_SERVICES {
            health_reporter
                .set_service_status(svc, ServingStatus::NotServing)
                .await;
        }
        drain_coord.drain(grace).await;
        drained_tx.notify_one();
    };
    announce_tenancy(&cfg);
    if cfg.auth.path().is_some() {
        tokio::spawn(reload_on_sighup(cfg.auth.clone()));
    }
    let interceptor = cfg.auth.interceptor();
    let deps = ApiDeps::new(
        coord.clone(),
        admission,
        cfg.auth.clone(),
        cfg.lease_keys.clone(),
    );
    let local = listener.local_addr().ok();
    tracing::info!(grpc = ?local, zk = %cfg.coord.zk, root = %cfg.coord.root, "zkgate serving");
    let serve = builder
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(ElectionServer::with_interceptor(
            ElectionApi::new(deps.clone()),
            interceptor.clone(),
        ))
        .add_service(LockServer::with_interceptor(
            LockApi::new(deps),
            interceptor,
        ))
        .serve_with_incoming_shutdown(
            incoming(listener, timing.dead_client_bound(), connections),
            signal,
        );
    // After the drain every stream has ended on our side, but HTTP/2 still owes a client that
    // stopped reading the bytes its flow-control window has no room for, and graceful shutdown
    // would wait for them forever (G3c: a client that stops reading never delays a drain past
    // its bound). Readers get their ends within milliseconds; the rest are cut.
    tokio::select! {
        r = serve => r?,
        () = async {
            drained.notified().await;
            tokio::time::sleep(CONNECTIONS_AFTER_DRAIN).await;
        } => {
            tracing::warn!(
                after = ?CONNECTIONS_AFTER_DRAIN,
                "client connections still open after the drain (a client that does not read its stream); closing them"
            );
        }
    }
    Ok(())
}

/// Says at start what protects this gateway: warnings where it is open to everyone.
fn announce_tenancy(cfg: &ServeConfig) {
    match cfg.auth.path() {
        Some(path) => tracing::info!(policy = %path.display(), "--auth-policy in force; SIGHUP reloads it"),
        None if cfg.auth.enforced() => tracing::info!("an authorisation policy is in force"),
        None => tracing::warn!(
            "no --auth-policy: every caller may campaign on, lock, observe and resign any name (README \"Security\")"
        ),
    }
    if cfg.lease_keys.is_per_process() {
        tracing::warn!(
            "no --lease-key-file: leases are signed with a random key of this process, so Resign/Release/Proclaim by lease work only on this gateway (README \"Security\")"
        );
    } else {
        tracing::info!(keys = %cfg.lease_keys.origin(), "leases signed with the fleet key");
    }
}

/// SIGHUP re-reads `--auth-policy`; a file that does not parse keeps the old policy, and the
/// log says why (`zkgate_auth_policy_reloads_total{result="error"}` counts it).
async fn reload_on_sighup(auth: Arc<Auth>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGHUP: the policy will not reload");
            return;
        }
    };
    while hup.recv().await.is_some() {
        match auth.reload() {
            Ok(()) => tracing::info!("SIGHUP: --auth-policy reloaded"),
            Err(e) => {
                tracing::error!(error = %e, "SIGHUP: --auth-policy not reloaded; the old policy stays")
            }
        }
    }
}

/// How long connections may take to deliver the ends of their streams once the drain is done.
const CONNECTIONS_AFTER_DRAIN: Duration = Duration::from_secs(1);

/// Accepted connections with `TCP_NODELAY`: the builder's `tcp_nodelay` only applies to
/// listeners tonic binds itself, and without it small stream messages (`elected`) wait ~40 ms
/// for delayed ACKs (measured: campaign → elected 52 ms p50 without, see README).
/// Each is wrapped in [`BatchedWrites`], so a change many streams follow leaves in few writes,
/// and given up as dead once nothing was read from it for `dead_after` (the keepalive
/// interval + timeout: a live client answers the pings sent every interval).
///
/// A connection past `--max-connections` or `--max-connections-per-client` is closed as soon as
/// it is accepted (G10). An accept that fails (out of descriptors: `EMFILE`) is retried after
/// [`ACCEPT_RETRY`], not at once: the listener stays readable while the backlog holds
/// connections, and retrying at once spun a core (measured: 93 % of one with the open-file
/// limit reached). The accepting task ends when the server drops the stream.
fn incoming(
    listener: TcpListener,
    dead_after: Duration,
    connections: Arc<Connections>,
) -> impl tokio_stream::Stream<Item = std::io::Result<BatchedWrites>> + Send + 'static {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = tx.closed() => return,
            };
            let (conn, peer) = match accepted {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a client connection failed; retrying shortly");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            };
            let place = match connections.admit(peer.ip()) {
                Ok(place) => place,
                Err(limit) => {
                    tracing::debug!(%peer, %limit, "connection refused");
                    continue;
                }
            };
            if conn.set_nodelay(true).is_err() {
                continue;
            }
            let conn = BatchedWrites::new(conn, Some(dead_after)).holding(place);
            if tx.send(Ok(conn)).await.is_err() {
                return;
            }
        }
    });
    ReceiverStream::new(rx)
}

/// How long the accepting task waits after a failed accept before it tries again.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// The names health answers for: the whole server (`""`) and each zkgate service. They all
/// follow the ZooKeeper connection, and all turn `NOT_SERVING` on drain.
const HEALTH_SERVICES: [&str; 3] = ["", "zkgate.v1.Election", "zkgate.v1.Lock"];

/// Health is `SERVING` only while a ZooKeeper session serves: connected, and not stranded on
/// a server that diverged from its quorum (`coord::divergence`). The first time it is,
/// systemd (`Type=notify`, deploy/systemd/zkgate.service) hears `READY=1`.
async fn follow_health(coord: Arc<Coordinator>, reporter: tonic_health::server::HealthReporter) {
    let mut told_ready = false;
    loop {
        let serving = coord.is_serving();
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for svc in HEALTH_SERVICES {
            reporter.set_service_status(svc, status).await;
        }
        if serving && !told_ready {
            told_ready = true;
            notify_systemd(&[sd_notify::NotifyState::Ready]);
        }
        coord.connection_changed().await;
    }
}

/// Tells systemd about the gateway's state; does nothing unless systemd set `NOTIFY_SOCKET`.
fn notify_systemd(state: &[sd_notify::NotifyState]) {
    if let Err(e) = sd_notify::notify(state) {
        tracing::warn!(error = %e, "could not notify systemd");
    }
}
