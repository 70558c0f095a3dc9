//! Gateways started in-process on port 0 with a unique root each, and small gRPC client
//! helpers.

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::transport::Channel;
use tonic::Streaming;
use zkgate::coord::{CoordConfig, Coordinator};
use zkgate::proto as pb;
use zkgate::proto::election_client::ElectionClient;
use zkgate::server::{self, ServeConfig};

use crate::localzk::LocalZkOptions;
use crate::unique_root;

pub const STEP: Duration = Duration::from_secs(10);

/// Logs for debugging a test: `ZKGATE_TEST_LOG=debug cargo test …`.
pub fn init_tracing() {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| {
        if let Ok(filter) = std::env::var("ZKGATE_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_test_writer()
                .try_init();
        }
    });
}

/// A gateway running in this process.
pub struct Gateway {
    pub addr: SocketAddr,
    pub http: SocketAddr,
    pub coord: Arc<Coordinator>,
    pub root: String,
    stop: Option<oneshot::Sender<()>>,
    pub task: tokio::task::JoinHandle<Result<(), server::ServeError>>,
}

/// A change to a gateway's settings, applied after [`GatewayOpts`]' named ones.
pub type Configure = Box<dyn FnOnce(&mut ServeConfig) + Send>;

/// How to start a [`Gateway`]: the settings tests vary most by name, and any other setting of
/// [`ServeConfig`] (and its [`CoordConfig`]) through [`GatewayOpts::configure`].
pub struct GatewayOpts {
    pub session_timeout: Duration,
    /// Default: a fresh [`unique_root`]. Several gateways on one root serve the same elections.
    pub root: Option<String>,
    pub max_value_bytes: Option<usize>,
    pub zk_sessions: Option<usize>,
    /// The ZooKeeper's tickTime (default: the harness's, `LocalZkOptions::default()`).
    pub zk_tick_time: Option<Duration>,
    pub silence_limit: Option<Duration>,
    pub limits: Option<zkgate::api::limits::StreamLimits>,
    pub max_queues: Option<usize>,
    pub zk_max_packet: Option<usize>,
    /// Distinct election/lock names with a metric label of their own.
    pub name_label_cap: Option<usize>,
    /// Anything else, applied last: `configure: Some(Box::new(|cfg| cfg.drain_grace = …))`.
    pub configure: Option<Configure>,
    /// Whether [`Gateway::start_with`] waits for the ZooKeeper session (default: yes).
    pub wait_connected: bool,
}

impl Default for GatewayOpts {
    fn default() -> Self {
        Self {
            session_timeout: Duration::from_secs(4),
            root: None,
            max_value_bytes: None,
            zk_sessions: None,
            zk_tick_time: None,
            silence_limit: None,
            limits: None,
            max_queues: None,
            zk_max_packet: None,
            name_label_cap: None,
            configure: None,
            wait_connected: true,
        }
    }
}

impl fmt::Debug for GatewayOpts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatewayOpts")
            .field("session_timeout", &self.session_timeout)
            .field("root", &self.root)
            .field("configure", &self.configure.as_ref().map(|_| ".."))
            .finish_non_exhaustive()
    }
}

impl Gateway {
    pub async fn start(zk: &str) -> Gateway {
        Self::start_with(zk, GatewayOpts::default()).await
    }

    /// Another gateway of `first`'s fleet: on `first`'s root, with the default options.
    pub async fn start_beside(zk: &str, first: &Gateway) -> Gateway {
        let opts = GatewayOpts {
            root: Some(first.root.clone()),
            ..Default::default()
        };
        Self::start_with(zk, opts).await
    }

    /// Starts without waiting for a ZooKeeper session (for tests of the unavailable case).
    pub async fn start_unconnected(zk: &str) -> Gateway {
        let opts = GatewayOpts {
            wait_connected: false,
            ..Default::default()
        };
        Self::start_with(zk, opts).await
    }

    /// Starts a gateway with `opts` (and, unless `opts.wait_connected` is off, waits for its
    /// ZooKeeper session).
    ///
    /// # Panics
    /// If it does not connect within 20 s, or a port cannot be bound.
    pub async fn start_with(zk: &str, opts: GatewayOpts) -> Gateway {
        init_tracing();
        let root = opts.root.unwrap_or_else(unique_root);
        let mut coord_cfg = CoordConfig::new(zk);
        coord_cfg.root = root.clone();
        coord_cfg.session_timeout = opts.session_timeout;
        coord_cfg.zk_tick_time = Some(
            opts.zk_tick_time
                .unwrap_or(LocalZkOptions::default().tick_time),
        );
        coord_cfg.silence_limit = opts.silence_limit;
        if let Some(n) = opts.max_queues {
            coord_cfg.max_queues = n;
        }
        if let Some(m) = opts.max_value_bytes {
            coord_cfg.max_value_bytes = m;
        }
        if let Some(n) = opts.zk_sessions {
            coord_cfg.pool_size = n;
        }
        if let Some(n) = opts.zk_max_packet {
            coord_cfg.zk_max_packet = n;
        }
        let mut cfg = ServeConfig::new(coord_cfg);
        if let Some(limits) = opts.limits {
            cfg.limits = limits;
        }
        if let Some(cap) = opts.name_label_cap {
            cfg.name_label_cap = cap;
        }
        if let Some(configure) = opts.configure {
            configure(&mut cfg);
        }
        let coord_cfg = cfg.coord.clone();
        let root = coord_cfg.root.clone();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let http_addr = http.local_addr().unwrap();
        let coord = Coordinator::start(coord_cfg);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server::run_with(
            coord.clone(),
            cfg,
            listener,
            Some(http),
            async move {
                let _ = stopped.await;
            },
        ));
        if opts.wait_connected {
            assert!(
                coord.wait_connected(Duration::from_secs(20)).await,
                "gateway never connected to ZooKeeper at {zk}"
            );
        }
        Gateway {
            addr,
            http: http_addr,
            coord,
            root,
            stop: Some(stop),
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn client(&self) -> ElectionClient<Channel> {
        ElectionClient::connect(self.url())
            .await
            .expect("connect to gateway")
    }

    pub async fn lock_client(&self) -> zkgate::proto::lock_client::LockClient<Channel> {
        zkgate::proto::lock_client::LockClient::connect(self.url())
            .await
            .expect("connect to gateway")
    }

    /// Graceful shutdown (SIGTERM path); waits for the server to return.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(20), &mut self.task).await;
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

pub async fn observe(
    client: &mut ElectionClient<Channel>,
    election: &str,
) -> Streaming<pb::ObserveResponse> {
    client
        .observe(pb::ObserveRequest {
            election: election.into(),
        })
        .await
        .expect("observe accepted")
        .into_inner()
}

pub async fn next_observed(s: &mut Streaming<pb::ObserveResponse>) -> Option<pb::Leader> {
    tokio::time::timeout(STEP, s.message())
        .await
        .expect("observe event in time")
        .expect("observe ok")
        .expect("open")
        .leader
}

/// A gateway on a whole [`ServeConfig`] of the test's making (TLS, digest auth …), served on
/// a free port until the test process ends; its address and coordinator, once connected to
/// ZooKeeper.
pub async fn serve(cfg: ServeConfig) -> (SocketAddr, Arc<Coordinator>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let coord = Coordinator::start(cfg.coord.clone());
    tokio::spawn(server::run_with(
        coord.clone(),
        cfg,
        listener,
        None,
        std::future::pending(),
    ));
    assert!(coord.wait_connected(Duration::from_secs(20)).await);
    (addr, coord)
}

/// A gRPC health client for the gateway.
pub async fn health_client(gw: &Gateway) -> tonic_health::pb::health_client::HealthClient<Channel> {
    let ch = Channel::from_shared(gw.url())
        .unwrap()
        .connect()
        .await
        .expect("connect");
    tonic_health::pb::health_client::HealthClient::new(ch)
}

/// Two gateways of one fleet (one root, default options), the tests' "the other gateway":
/// a stream on one, a call by lease or an observer on the other.
pub async fn two_gateways_on_one_root(zk: &str) -> (Gateway, Gateway) {
    let first = Gateway::start(zk).await;
    let second = Gateway::start_beside(zk, &first).await;
    (first, second)
}
