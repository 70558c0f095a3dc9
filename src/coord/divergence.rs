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
//! A server can also *lack* a committed member. One that is this gateway's own betrays it:
//! a listing that does not show it, with no event of its deletion, is checked at the leader,
//! and a leader that has it proves the server diverged the other way
//! (`QueueState::lacked`, [`Divergence::prove_lacked`]); that part of a proof ends when a
//! listing shows the member again or the member leaves ([`Divergence::withdraw_lacked`]).
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
//! # Stranded: a proof that outlasts the moves
//! Waiting there is not free for everyone else. The session's waiting members keep their
//! znodes, and in the quorum's order one of them may head its queue: nobody on any gateway is
//! then granted until the server is healed, and observers everywhere show a leader that was
//! never told it leads. So a proof that has stood for [`STRANDED_AFTER`] (the move was tried
//! every second meanwhile) *strands* the session: its queues end their waiting members with
//! `UNAVAILABLE` (their znodes go, and their clients retry on another gateway,
//! `QueueState::set_session_stranded`), so do its observers (`QueueView::stranded`), and
//! the pool gives it no new member or read (`SessionPool::session_from`; with every session
//! stranded the gateway's health is `NOT_SERVING`). Holders confirmed before keep their holds,
//! as under any proof. The session is no longer stranded once the proof ends.
//!
//! [`Action::Diverged`]: super::queue::state::Action::Diverged

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::link::Link;
use super::zk::Zk;

/// How often a standing proof is checked against a fresh listing of its queue.
pub const HEAL_CHECK_EVERY: Duration = Duration::from_secs(1);

/// How long a proof stands, by default, before the session is stranded (see the module docs;
/// `--zk-stranded-after`): five tries of the move, each a second apart, and short beside the
/// stall it ends.
pub const STRANDED_AFTER: Duration = Duration::from_secs(5);

/// What proves one queue's server diverged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueProof {
    /// Members the leader does not have that the session's server lists (kept ghosts): the
    /// proof stands while a listing shows any of them.
    pub kept: BTreeSet<String>,
    /// This gateway's own members, which the leader has, that the session's server does not
    /// list (a committed member lacking): each stands until a listing shows it or it leaves
    /// ([`Divergence::withdraw_lacked`]).
    pub lacked: BTreeSet<String>,
}

impl QueueProof {
    fn is_empty(&self) -> bool {
        self.kept.is_empty() && self.lacked.is_empty()
    }
}

/// Queue path → what proves that queue's server diverged.
pub type Proofs = BTreeMap<String, QueueProof>;

/// One session's proofs of divergence (see the module docs).
#[derive(Debug)]
pub struct Divergence {
    proofs: watch::Sender<Proofs>,
    /// Since when a proof has stood (`None` while none does).
    since: Mutex<Option<Instant>>,
    /// How long a proof stands before it strands the session ([`STRANDED_AFTER`] unless set).
    stranded_after: Duration,
    /// Whether the standing proof has outlasted `stranded_after` (module docs).
    stranded: watch::Sender<bool>,
    gauge: Mutex<crate::metrics::SessionShare>,
    stranded_gauge: Mutex<crate::metrics::SessionShare>,
}

impl Default for Divergence {
    fn default() -> Self {
        Self::new(STRANDED_AFTER)
    }
}

impl Divergence {
    /// A session's divergence that strands it once a proof has stood for `stranded_after`.
    pub fn new(stranded_after: Duration) -> Self {
        Self {
            proofs: watch::Sender::new(Proofs::new()),
            since: Mutex::default(),
            stranded_after,
            stranded: watch::Sender::new(false),
            gauge: Mutex::new(crate::metrics::SessionShare::diverged()),
            stranded_gauge: Mutex::new(crate::metrics::SessionShare::stranded()),
        }
    }

    /// Whether the session's server is proven diverged.
    pub fn diverged(&self) -> bool {
        !self.proofs.borrow().is_empty()
    }

    /// Changes of the proofs (a queue waits for their end to grant again).
    pub fn subscribe(&self) -> watch::Receiver<Proofs> {
        self.proofs.subscribe()
    }

    /// Whether the session is stranded on its diverged server (module docs): it serves no
    /// waiting member, no new member and no read until the proof ends.
    pub fn stranded(&self) -> bool {
        *self.stranded.borrow()
    }

    /// Changes of [`Divergence::stranded`].
    pub fn subscribe_stranded(&self) -> watch::Receiver<bool> {
        self.stranded.subscribe()
    }

    /// Strands the session if a proof has stood for `stranded_after` by `now`; returns
    /// whether it is stranded.
    pub fn strand_if_standing(&self, now: Instant) -> bool {
        let since = *self.since.lock().unwrap_or_else(|p| p.into_inner());
        if since.is_some_and(|since| now.saturating_duration_since(since) >= self.stranded_after) {
            let newly = self
                .stranded
                .send_if_modified(|s| !std::mem::replace(s, true));
            if newly {
                set_share(&self.stranded_gauge, true);
                tracing::error!(
                    after = ?self.stranded_after,
                    "the session's ZooKeeper server still diverges from its quorum: its waiting members end UNAVAILABLE and it takes no new ones until the server is healed (restart it from an empty data directory); holders keep their holds"
                );
            }
        }
        self.stranded()
    }

    /// The leader does not have `member` of the queue at `queue`, which the session's server
    /// still lists after a `sync`.
    pub fn prove(&self, queue: &str, member: String) {
        self.proofs.send_modify(|p| {
            p.entry(queue.to_owned()).or_default().kept.insert(member);
        });
        self.proved();
    }

    /// The leader has `member`, a member of this gateway in the queue at `queue`, which the
    /// session's server does not list: the server lacks a committed member.
    pub fn prove_lacked(&self, queue: &str, member: String) {
        self.proofs.send_modify(|p| {
            p.entry(queue.to_owned()).or_default().lacked.insert(member);
        });
        self.proved();
    }

    /// A member that [`Divergence::prove_lacked`] named is gone (it left, and the leader
    /// deleted it): what it proved ends with it.
    pub fn withdraw_lacked(&self, queue: &str, member: &str) {
        let withdrawn = self.proofs.send_if_modified(|p| {
            let Some(proof) = p.get_mut(queue) else {
                return false;
            };
            let withdrawn = proof.lacked.remove(member);
            if proof.is_empty() {
                p.remove(queue);
            }
            withdrawn
        });
        if withdrawn {
            self.maybe_ended(queue);
        }
    }

    fn proved(&self) {
        let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
        if since.is_none() {
            *since = Some(Instant::now());
            crate::metrics::divergence_proven();
        }
        drop(since);
        self.update_gauge();
    }

    /// A listing of `queue` (`None`: the queue's znode is gone) ends the part of its proof
    /// made by kept members when it shows none of them, and each lacked member's when it shows
    /// that member (a queue gone shows nothing and lacks nothing).
    pub fn listed(&self, queue: &str, children: Option<&[String]>) {
        let shows = |m: &String| children.is_some_and(|c| c.contains(m));
        let healed = self.proofs.send_if_modified(|p| {
            let Some(proof) = p.get_mut(queue) else {
                return false;
            };
            let before = proof.clone();
            if !proof.kept.iter().any(shows) {
                proof.kept.clear();
            }
            proof.lacked.retain(|m| children.is_some() && !shows(m));
            let changed = *proof != before;
            if proof.is_empty() {
                p.remove(queue);
            }
            changed
        });
        if healed {
            self.maybe_ended(queue);
        }
    }

    /// After part of `queue`'s proof ended: the session is no longer diverged (nor stranded)
    /// once no proof stands.
    fn maybe_ended(&self, queue: &str) {
        if !self.diverged() {
            *self.since.lock().unwrap_or_else(|p| p.into_inner()) = None;
            self.stranded.send_if_modified(std::mem::take);
            set_share(&self.stranded_gauge, false);
        }
        tracing::warn!(
            queue,
            diverged = self.diverged(),
            "what proved the session's server diverged no longer stands in this queue (a listing, or a lacked member gone)"
        );
        self.update_gauge();
    }

    fn update_gauge(&self) {
        set_share(&self.gauge, self.diverged());
    }
}

fn set_share(share: &Mutex<crate::metrics::SessionShare>, counted: bool) {
    share.lock().unwrap_or_else(|p| p.into_inner()).set(counted);
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
        divergence.strand_if_standing(Instant::now());
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

    #[test]
    fn a_lacked_member_proves_until_it_is_listed_again_or_leaves() {
        let d = Divergence::default();
        d.prove_lacked("/q1", "m1".into());
        d.prove_lacked("/q2", "m2".into());
        // (queue, listing or withdrawal, diverged after it)
        enum Step<'a> {
            Listed(&'a str, Option<&'a [&'a str]>),
            Withdrawn(&'a str, &'a str),
        }
        let table = [
            // Still lacking it: the proof stands.
            (Step::Listed("/q1", Some(&["m5"])), true),
            // Another queue's member withdrawn says nothing of /q1's.
            (Step::Withdrawn("/q2", "m1"), true),
            // Shown again: /q1 healed; /q2 still stands.
            (Step::Listed("/q1", Some(&["m1", "m5"])), true),
            // m2 left: nothing stands.
            (Step::Withdrawn("/q2", "m2"), false),
        ];
        for (step, diverged) in table {
            match step {
                Step::Listed(queue, listing) => {
                    let listing: Option<Vec<String>> =
                        listing.map(|l| l.iter().map(|s| s.to_string()).collect());
                    d.listed(queue, listing.as_deref());
                }
                Step::Withdrawn(queue, member) => d.withdraw_lacked(queue, member),
            }
            assert_eq!(d.diverged(), diverged);
        }
        // A queue with both: its kept ghost gone from the listing still leaves the lacked
        // member's proof standing.
        d.prove("/q3", "g1".into());
        d.prove_lacked("/q3", "m3".into());
        d.listed("/q3", Some(&[]));
        assert!(d.diverged(), "m3 still lacked");
        d.listed("/q3", Some(&["m3".to_string()]));
        assert!(!d.diverged());
    }

    #[test]
    fn a_proof_strands_the_session_once_it_has_stood_for_the_bound() {
        let d = Divergence::default();
        let start = Instant::now();
        assert!(!d.strand_if_standing(start + STRANDED_AFTER), "no proof");
        d.prove("/q1", "g1".into());
        let stranded = d.subscribe_stranded();
        // (seconds after the proof, stranded by then)
        for (after, stranded_then) in [(0, false), (4, false), (5, true), (6, true)] {
            let now = Instant::now() + Duration::from_secs(after);
            assert_eq!(d.strand_if_standing(now), stranded_then, "{after} s");
            assert_eq!(d.stranded(), stranded_then, "{after} s");
        }
        assert!(*stranded.borrow(), "subscribers hear it");
        // Another queue's proof does not restart the clock, and the first one's end alone
        // does not end the stranding.
        d.prove("/q2", "h1".into());
        d.listed("/q1", Some(&[]));
        assert!(d.stranded(), "/q2 still stands");
        d.listed("/q2", None);
        assert!(!d.stranded() && !*stranded.borrow(), "no proof stands");
        // A new proof counts from its own moment.
        d.prove("/q1", "g2".into());
        assert!(!d.strand_if_standing(Instant::now() + Duration::from_secs(4)));
        assert!(d.strand_if_standing(Instant::now() + STRANDED_AFTER));
    }
}
