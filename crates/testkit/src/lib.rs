//! The zkgate test kit: everything the integration tests, the examples and the soak share, and
//! nothing the gateway needs (a dev-dependency of the `zkgate` package).
//!
//! # Layout
//! - [`localzk`]: local ZooKeeper servers, standalone or ensembles, with fault injection
//!   (stop, kill, restart, pause, resume, the leader's index, routed peer links).
//! - [`ensemble`]: a 3-server ensemble whose peer links pass through [`linkcut`] cutters.
//! - [`linkcut`]: a TCP relay that passes, drops or blackholes a link on command.
//! - [`slowlink`]: a TCP relay that delivers everything a fixed delay late (a distant client).
//! - [`gateway`]: a gateway in this process ([`Gateway`], [`GatewayOpts`]: every setting of
//!   [`zkgate::server::ServeConfig`]), and the `Observe` and health helpers.
//! - [`streams`]: a test's `Campaign` and `Acquire` streams ([`Campaign`], [`Acquisition`]) on
//!   the client crate's raw streams, with bounded waits and end assertions.
//! - [`procgw`]: a gateway in a child process (`zkgate serve`), to kill, freeze and thaw.
//! - [`dev_process`]: the built binary run as `zkgate dev`, for tests with external clients.
//! - [`recorder`] and [`checker`]: recording clients and the safety checker of the fault
//!   scenarios and the soak.
//! - Here: the ZooKeeper a test binary shares ([`shared_zk`], [`shared_standalone`]), fresh
//!   roots ([`unique_root`]), member znodes ([`member_znodes`], [`wait_no_members`]) and the
//!   serial lock of timing-sensitive scenarios ([`serial`]).
#![allow(missing_docs)]

pub mod bench;
pub mod checker;
pub mod dev_process;
pub mod ensemble;
pub mod gateway;
pub mod kdc;
pub mod linkcut;
pub mod localzk;
pub mod pki;
pub mod procgw;
pub mod recorder;
pub mod slowlink;
pub mod streams;

pub use gateway::*;
pub use streams::*;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use localzk::{LocalZk, LocalZkOptions};

/// One scenario at a time, per test binary (scenarios measure timings on a small machine).
pub fn serial() -> &'static tokio::sync::Mutex<()> {
    static M: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    M.get_or_init(|| tokio::sync::Mutex::new(()))
}

/// A standalone ZooKeeper of a test's own, to stop and start: a 500 ms tick, so it grants
/// session timeouts up to 10 s.
pub async fn own_standalone() -> LocalZk {
    LocalZk::start_standalone(LocalZkOptions {
        tick_time: Duration::from_millis(500),
        ..Default::default()
    })
    .await
    .expect("start ZooKeeper")
}

/// A standalone ZooKeeper shared by one test binary's tests that do not stop it (each
/// isolated by its root), started with `options` on first use: the first caller's options
/// hold for the whole binary. It dies with the process (see [`zkgate_localzk`]).
pub fn shared_standalone(options: fn() -> LocalZkOptions) -> String {
    static ZK: OnceLock<LocalZk> = OnceLock::new();
    ZK.get_or_init(|| {
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(LocalZk::start_standalone(options()))
                .expect("start shared ZooKeeper")
        })
        .join()
        .unwrap()
    })
    .connect_string()
}

/// [`shared_standalone`] with the default options.
pub fn shared_zk() -> String {
    shared_standalone(LocalZkOptions::default)
}

/// A ZooKeeper of the test's own, for tests that stop or restart it.
pub async fn own_zk() -> LocalZk {
    LocalZk::start_standalone(LocalZkOptions::default())
        .await
        .expect("start ZooKeeper")
}

/// A fresh root znode for one test (`/t` and 16 hex digits).
pub fn unique_root() -> String {
    named_root("t")
}

/// A fresh root znode whose name starts with `prefix`, to tell a scenario's znodes apart.
pub fn named_root(prefix: &str) -> String {
    format!("/{prefix}{:016x}", rand::random::<u64>())
}

/// Direct ZooKeeper access for assertions about znodes.
pub async fn zk_client(zk: &str) -> zookeeper_client::Client {
    zookeeper_client::Client::connect(zk)
        .await
        .expect("test ZooKeeper client")
}

/// Every member znode under `root` (`<root>/{elections,locks}/<name>/<member>`).
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

/// Polls until no member znode is left under `root`; returns how long that took.
///
/// # Errors
/// The znodes still there after `within`.
pub async fn members_gone(
    zk: &zookeeper_client::Client,
    root: &str,
    within: Duration,
) -> Result<Duration, String> {
    let started = Instant::now();
    loop {
        let left = member_znodes(zk, root).await;
        if left.is_empty() {
            return Ok(started.elapsed());
        }
        if started.elapsed() > within {
            return Err(format!("znodes left behind after {within:?}: {left:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `check` (every 20 ms) until it holds.
///
/// # Panics
/// Saying `what` was awaited, when it still does not hold after `within`.
pub async fn wait_until<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "waited {within:?} for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until no member znode is left under `root`.
///
/// # Panics
/// With the znodes still there after `within`.
pub async fn wait_no_members(zk: &zookeeper_client::Client, root: &str, within: Duration) {
    if let Err(left) = members_gone(zk, root, within).await {
        panic!("{left}");
    }
}

/// [`members_gone`] on a connection of its own to `zk` (the fault scenarios' check after
/// every gateway was stopped).
///
/// # Errors
/// The connection failed, or the znodes still there after `within`.
pub async fn members_gone_at(zk: &str, root: &str, within: Duration) -> Result<Duration, String> {
    let client = tokio::time::timeout(
        Duration::from_secs(10),
        zookeeper_client::Client::connect(zk),
    )
    .await
    .map_err(|_| format!("connecting to ZooKeeper at {zk} timed out"))?
    .map_err(|e| format!("connecting to ZooKeeper at {zk}: {e}"))?;
    members_gone(&client, root, within).await
}

/// The `/metrics` text of the gateway whose HTTP server listens on `http` (one plain
/// HTTP/1.0 `GET`, as a scraper would).
pub async fn scrape_metrics(http: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(http)
        .await
        .expect("connect to /metrics");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .expect("ask for /metrics");
    let mut body = String::new();
    s.read_to_string(&mut body).await.expect("read /metrics");
    body
}

/// The value of the sample of `metric` whose labels include every one of `labels`
/// (`name="value"` pairs) in a `/metrics` text; 0 when there is none.
pub fn metric_value(body: &str, metric: &str, labels: &[(&str, &str)]) -> u64 {
    let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    body.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) || l.starts_with(&format!("{metric} ")))
        .filter(|l| wanted.iter().all(|w| l.contains(w.as_str())))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}
