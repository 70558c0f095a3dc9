//! What one session knows of its ZooKeeper server's divergence from the quorum.
//!
//! ZooKeeper can leave a restarted follower with a tree its quorum does not have
//! (ZOOKEEPER-5010): ephemerals of a long-expired session kept, and — as session 25's soak
//! saw — committed znodes missing. Every read of the session is answered by that server, so
//! every queue of the session sees that tree. A queue proves it when the leader refuses a
//! member its server still lists after a `sync` (`queue::state`, [`Action::Diverged`]); from
//! then on *no* queue of the session may grant, because a missing member cannot be asked about
//! (nobody knows its name) and may hold elsewhere.
//!
//! The proof is kept here, per session, with the queue and members that made it, and it ends
//! only when a listing of that queue no longer shows any of them: the server was restarted and
//! synced again, or the session moved to another server. [`watch_healing`] makes that listing
//! every [`HEAL_CHECK_EVERY`] while a proof stands, so it ends even when the queue's actor has
//! stopped; and when the connect string names other servers, it moves the session to another
//! one first (`Zk::move_server`), as a client of a server that lies must: a session whose
//! listings then no longer show the refuted members grants again, with no operator. A gateway
//! that reaches the diverged server only waits for its restart. The cost is liveness on that
//! server alone, never a second holder; `zkgate_zk_diverged_sessions` tells operators which
//! gateways wait, and the log names the queue.
//!
//! [`Action::Diverged`]: super::queue::state::Action::Diverged

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use super::link::Link;
use super::zk::Zk;

/// How often a standing proof is checked against a fresh listing of its queue.
pub const HEAL_CHECK_EVERY: Duration = Duration::from_secs(1);

/// Queue path → the members the leader does not have that the session's server listed.
pub type Proofs = BTreeMap<String, BTreeSet<String>>;

/// One session's proofs of divergence (see the module docs).
#[derive(Debug)]
pub struct Divergence {
    proofs: watch::Sender<Proofs>,
    gauge: Mutex<crate::metrics::ZkDiverged>,
}

impl Default for Divergence {
    fn default() -> Self {
        Self {
            proofs: watch::Sender::new(Proofs::new()),
            gauge: Mutex::default(),
        }
    }
}

impl Divergence {
    /// Whether the session's server is proven diverged.
    pub fn diverged(&self) -> bool {
        !self.proofs.borrow().is_empty()
    }

    /// Changes of the proofs (a queue waits for their end to grant again).
    pub fn subscribe(&self) -> watch::Receiver<Proofs> {
        self.proofs.subscribe()
    }

    /// The leader does not have `member` of the queue at `queue`, which the session's server
    /// still lists after a `sync`.
    pub fn prove(&self, queue: &str, member: String) {
        self.proofs.send_modify(|p| {
            p.entry(queue.to_owned()).or_default().insert(member);
        });
        self.update_gauge();
    }

    /// A listing of `queue` (`None`: the queue's znode is gone) ends its proof when it shows
    /// none of the members that made it.
    pub fn listed(&self, queue: &str, children: Option<&[String]>) {
        let healed = self.proofs.borrow().get(queue).is_some_and(|members| {
            !children.is_some_and(|c| c.iter().any(|child| members.contains(child)))
        });
        if healed {
            self.proofs.send_modify(|p| {
                p.remove(queue);
            });
            tracing::warn!(
                queue,
                diverged = self.diverged(),
                "a listing no longer shows the members that proved the session's server diverged"
            );
            self.update_gauge();
        }
    }

    fn update_gauge(&self) {
        let diverged = self.diverged();
        self.gauge
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set(diverged);
    }
}

/// Lists each queue with a standing proof every [`HEAL_CHECK_EVERY`] while the link is up,
/// ending proofs whose members are gone ([`Divergence::listed`]), and, while a proof stands
/// and `servers` (of the connect string) is more than one, moves the session to another
/// server once per check. Runs for the session's life.
pub async fn watch_healing(
    zk: Zk,
    mut link: watch::Receiver<Link>,
    divergence: std::sync::Arc<Divergence>,
    servers: usize,
) {
    let mut proofs = divergence.subscribe();
    loop {
        tokio::select! {
            r = proofs.wait_for(|p| !p.is_empty()) => if r.is_err() { return },
            _ = link.wait_for(|l| matches!(l, Link::Lost(_))) => return,
        }
        if servers > 1 && matches!(*link.borrow(), Link::Connected) {
            tracing::warn!(
                "moving the session to another ZooKeeper server: its server diverged from the quorum"
            );
            zk.move_server();
        }
        tokio::time::sleep(HEAL_CHECK_EVERY).await;
        if matches!(*link.borrow(), Link::Lost(_)) {
            return;
        }
        if !matches!(*link.borrow(), Link::Connected) {
            continue;
        }
        let queues: Vec<String> = proofs.borrow().keys().cloned().collect();
        for queue in queues {
            match zk.list_children(&queue).await {
                Ok(children) => divergence.listed(&queue, Some(&children)),
                Err(zookeeper_client::Error::NoNode) => divergence.listed(&queue, None),
                Err(e) => {
                    tracing::debug!(queue, error = %e, "listing a queue to see whether its server still diverges failed; trying again")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_ends_only_when_a_listing_shows_none_of_its_members() {
        let d = Divergence::default();
        assert!(!d.diverged());
        d.prove("/q1", "g1".into());
        d.prove("/q1", "g2".into());
        d.prove("/q2", "h1".into());
        // (queue, listing, diverged after it)
        let table: [(&str, Option<&[&str]>, bool); 5] = [
            // Another queue's listing says nothing of /q1.
            ("/q3", Some(&[]), true),
            // One of the two still shown.
            ("/q1", Some(&["g2", "m5"]), true),
            // Neither shown: /q1 healed, /q2 still stands.
            ("/q1", Some(&["m5"]), true),
            ("/q2", Some(&["h1"]), true),
            // The queue's znode gone: its ghosts with it.
            ("/q2", None, false),
        ];
        for (queue, listing, diverged) in table {
            let listing: Option<Vec<String>> =
                listing.map(|l| l.iter().map(|s| s.to_string()).collect());
            d.listed(queue, listing.as_deref());
            assert_eq!(d.diverged(), diverged, "{queue} {listing:?}");
        }
    }
}
