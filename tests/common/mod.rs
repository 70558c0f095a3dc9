//! Test harness: real ZooKeeper servers (shared or per test), gateways started in-process on
//! port 0 with a unique root each, and small gRPC client helpers.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};
use zkgate::coord::{CoordConfig, Coordinator};
use zkgate::localzk::{LocalZk, LocalZkOptions};
use zkgate::proto as pb;
use zkgate::proto::campaign_request::Request as Req;
use zkgate::proto::campaign_response::Event;
use zkgate::proto::election_client::ElectionClient;
use zkgate::server::{self, ServeConfig};

pub const STEP: Duration = Duration::from_secs(10);

/// One standalone ZooKeeper shared by every test in this binary (isolated by root). It dies
/// with the test process (the harness's wrapper guarantees that).
pub fn shared_zk() -> String {
    static ZK: OnceLock<LocalZk> = OnceLock::new();
    ZK.get_or_init(|| {
        std::thread::spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(LocalZk::start_standalone(LocalZkOptions::default()))
                .expect("start shared ZooKeeper")
        })
        .join()
        .unwrap()
    })
    .connect_string()
}

/// A ZooKeeper of the test's own, for tests that stop or restart it.
pub async fn own_zk() -> LocalZk {
    LocalZk::start_standalone(LocalZkOptions::default())
        .await
        .expect("start ZooKeeper")
}

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

pub fn unique_root() -> String {
    format!("/t{:016x}", rand::random::<u64>())
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

pub struct GatewayOpts {
    pub session_timeout: Duration,
    pub root: Option<String>,
    pub max_value_bytes: Option<usize>,
    pub zk_sessions: Option<usize>,
    /// The ZooKeeper's tickTime (default: the harness's, `LocalZkOptions::default()`).
    pub zk_tick_time: Option<Duration>,
    pub silence_limit: Option<Duration>,
    pub limits: Option<zkgate::api::limits::StreamLimits>,
    pub max_queues: Option<usize>,
    pub zk_max_packet: Option<usize>,
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
        }
    }
}

impl Gateway {
    pub async fn start(zk: &str) -> Gateway {
        Self::start_with(zk, GatewayOpts::default()).await
    }

    pub async fn start_with(zk: &str, opts: GatewayOpts) -> Gateway {
        Self::spawn(zk, opts, true).await
    }

    /// Starts without waiting for a ZooKeeper session (for tests of the unavailable case).
    pub async fn start_unconnected(zk: &str) -> Gateway {
        Self::spawn(zk, GatewayOpts::default(), false).await
    }

    async fn spawn(zk: &str, opts: GatewayOpts, wait: bool) -> Gateway {
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
        let mut cfg = ServeConfig::new(coord_cfg.clone());
        if let Some(limits) = opts.limits {
            cfg.limits = limits;
        }
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
        if wait {
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

/// One Campaign stream, driven by the test.
pub struct Campaign {
    pub tx: mpsc::Sender<pb::CampaignRequest>,
    pub stream: Streaming<pb::CampaignResponse>,
    pub lease: String,
    pub position: u32,
}

pub fn join_msg(election: &str, candidate: &str, value: &[u8]) -> pb::CampaignRequest {
    pb::CampaignRequest {
        request: Some(Req::Join(pb::Join {
            election: election.into(),
            candidate: candidate.into(),
            value: value.to_vec(),
        })),
    }
}

/// Opens a Campaign stream with the given first messages; returns the response stream or the
/// status the call failed with.
pub async fn open_campaign(
    client: &mut ElectionClient<Channel>,
    first: Vec<pb::CampaignRequest>,
) -> Result<
    (
        mpsc::Sender<pb::CampaignRequest>,
        Streaming<pb::CampaignResponse>,
    ),
    Status,
> {
    let (tx, rx) = mpsc::channel(16);
    for m in first {
        tx.send(m).await.unwrap();
    }
    let resp = client.campaign(ReceiverStream::new(rx)).await?;
    Ok((tx, resp.into_inner()))
}

impl Campaign {
    pub async fn join(
        client: &mut ElectionClient<Channel>,
        election: &str,
        candidate: &str,
        value: &[u8],
    ) -> Campaign {
        let (tx, mut stream) = open_campaign(client, vec![join_msg(election, candidate, value)])
            .await
            .expect("campaign accepted");
        let first = tokio::time::timeout(STEP, stream.message())
            .await
            .expect("queued in time")
            .expect("stream ok");
        match first.and_then(|r| r.event) {
            Some(Event::Queued(q)) => Campaign {
                tx,
                stream,
                lease: q.lease,
                position: q.position,
            },
            other => panic!("first event must be queued, got {other:?}"),
        }
    }

    /// The next event that is not a heartbeat.
    pub async fn next(&mut self) -> Result<Option<Event>, Status> {
        loop {
            let m = tokio::time::timeout(STEP, self.stream.message())
                .await
                .expect("an event in time")?;
            match m {
                None => return Ok(None),
                Some(pb::CampaignResponse {
                    event: Some(Event::Heartbeat(_)),
                }) => continue,
                Some(pb::CampaignResponse { event }) => return Ok(event),
            }
        }
    }

    pub async fn elected(&mut self) -> pb::Leader {
        match self.next().await {
            Ok(Some(Event::Elected(e))) => e.leader.expect("elected carries leader"),
            other => panic!("expected elected, got {other:?}"),
        }
    }

    /// Asserts that nothing but heartbeats arrives for `d`.
    pub async fn quiet_for(&mut self, d: Duration) {
        let deadline = tokio::time::Instant::now() + d;
        loop {
            match tokio::time::timeout_at(deadline, self.stream.message()).await {
                Err(_) => return,
                Ok(Ok(Some(pb::CampaignResponse {
                    event: Some(Event::Heartbeat(_)),
                }))) => continue,
                Ok(other) => panic!("expected no event, got {other:?}"),
            }
        }
    }

    pub async fn send(&self, r: Req) {
        self.tx
            .send(pb::CampaignRequest { request: Some(r) })
            .await
            .expect("request side open");
    }

    /// Ends with `code` (or OK when `None`).
    pub async fn expect_end(&mut self, code: Option<Code>) {
        loop {
            match self.next().await {
                Ok(Some(Event::Suspended(_))) | Ok(Some(Event::Resumed(_))) => continue,
                Ok(None) => {
                    assert_eq!(code, None, "stream ended OK, expected {code:?}");
                    return;
                }
                Err(s) => {
                    assert_eq!(Some(s.code()), code, "stream ended with {s:?}");
                    return;
                }
                Ok(Some(e)) => panic!("expected the stream to end, got {e:?}"),
            }
        }
    }
}

/// Direct ZooKeeper access for assertions about znodes.
pub async fn zk_client(zk: &str) -> zookeeper_client::Client {
    zookeeper_client::Client::connect(zk)
        .await
        .expect("test ZooKeeper client")
}

/// Every member znode under `root`, at any depth below its queues.
pub async fn member_znodes(zk: &zookeeper_client::Client, root: &str) -> Vec<String> {
    let mut out = Vec::new();
    for folder in ["elections", "locks"] {
        let base = format!("{root}/{folder}");
        let Ok(queues) = zk.list_children(&base).await else {
            continue;
        };
        for q in queues {
            if let Ok(children) = zk.list_children(&format!("{base}/{q}")).await {
                out.extend(children.into_iter().map(|c| format!("{base}/{q}/{c}")));
            }
        }
    }
    out
}

/// Waits until no member znode is left under `root`.
pub async fn wait_no_members(zk: &zookeeper_client::Client, root: &str, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = member_znodes(zk, root).await;
        if left.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "znodes left behind: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
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

/// A gRPC health client for the gateway.
pub async fn health_client(gw: &Gateway) -> tonic_health::pb::health_client::HealthClient<Channel> {
    let ch = Channel::from_shared(gw.url())
        .unwrap()
        .connect()
        .await
        .expect("connect");
    tonic_health::pb::health_client::HealthClient::new(ch)
}
