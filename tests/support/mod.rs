//! Fault-injection support shared by `tests/faults.rs` and `examples/soak.rs` (which includes
//! it with `#[path]`): a link cutter, gateways as child processes, recording clients, and the
//! safety checker.
#![allow(dead_code)]

pub mod checker;
pub mod ensemble;
pub mod linkcut;
pub mod pki;
pub mod procgw;
pub mod recorder;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use zkgate::localzk::{LocalZk, LocalZkOptions};

/// One scenario at a time, per test binary (scenarios measure timings on a small machine).
pub fn serial() -> &'static tokio::sync::Mutex<()> {
    static M: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    M.get_or_init(|| tokio::sync::Mutex::new(()))
}

/// A standalone ZooKeeper shared by one test binary's scenarios that do not stop it (each
/// isolated by its root), started with `options` on first use. It dies with the process.
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

/// Waits until no member znode is left under `root`; returns how long that took.
///
/// # Errors
/// The znodes still there after `within`.
pub async fn wait_no_members(zk: &str, root: &str, within: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    let client = tokio::time::timeout(
        Duration::from_secs(10),
        zookeeper_client::Client::connect(zk),
    )
    .await
    .map_err(|_| format!("connecting to ZooKeeper at {zk} timed out"))?
    .map_err(|e| format!("connecting to ZooKeeper at {zk}: {e}"))?;
    loop {
        let left = member_znodes(&client, root).await;
        if left.is_empty() {
            return Ok(started.elapsed());
        }
        if started.elapsed() > within {
            return Err(format!("znodes left behind after {within:?}: {left:?}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A fresh root znode for one scenario.
pub fn unique_root(prefix: &str) -> String {
    format!("/{prefix}{:012x}", rand::random::<u64>() >> 16)
}
