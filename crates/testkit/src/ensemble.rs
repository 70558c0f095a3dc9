//! A 3-server ZooKeeper ensemble whose quorum and election links all pass through link
//! cutters (one per direction and port), so one server can be cut off from the other two
//! while its clients still reach it (`tests/faults.rs` `follower_partition`, and the soak's
//! follower partitions).

use std::collections::HashMap;
use std::sync::Arc;

use crate::localzk::{LocalZk, LocalZkOptions, PeerLink, PeerRoute};

use crate::linkcut::LinkCutter;

/// The peer-link cutters of an ensemble, by link.
pub type PeerCutters = Arc<HashMap<PeerLink, LinkCutter>>;

/// Starts the ensemble with `syncLimit` = `sync_limit` ticks (the harness's tick, 250 ms).
///
/// # Panics
/// If the ensemble does not start.
pub async fn ensemble_with_peer_cutters(sync_limit: u32) -> (LocalZk, PeerCutters) {
    ensemble_with_peer_cutters_and(LocalZkOptions {
        sync_limit,
        ..Default::default()
    })
    .await
}

/// [`ensemble_with_peer_cutters`] with other server options (a real-world `tickTime`, a
/// `maxSessionTimeout` below what gateways ask for, …); `peer_route` is set here.
///
/// # Panics
/// If the ensemble does not start.
pub async fn ensemble_with_peer_cutters_and(opts: LocalZkOptions) -> (LocalZk, PeerCutters) {
    let unused: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    let mut cutters = HashMap::new();
    for from in 0..3 {
        for to in (0..3).filter(|&to| to != from) {
            for election in [false, true] {
                let link = PeerLink { from, to, election };
                cutters.insert(link, LinkCutter::start(unused).await.unwrap());
            }
        }
    }
    let cutters = Arc::new(cutters);
    let routes = cutters.clone();
    let peer_route = PeerRoute(Arc::new(move |link, real| {
        let cutter = &routes[&link];
        cutter.retarget(real);
        cutter.addr()
    }));
    let zk = LocalZk::start_ensemble(
        3,
        LocalZkOptions {
            peer_route: Some(peer_route),
            ..opts
        },
    )
    .await
    .expect("start a ZooKeeper ensemble with cut-able peer links");
    (zk, cutters)
}

/// Blackholes every peer link from and to server `f` (its clients still reach it).
pub fn cut_off(cutters: &PeerCutters, f: usize) {
    for (link, cutter) in cutters.iter() {
        if link.from == f || link.to == f {
            cutter.blackhole();
        }
    }
}

/// Lets every peer link pass again.
pub fn heal(cutters: &PeerCutters) {
    for cutter in cutters.values() {
        cutter.pass();
    }
}
