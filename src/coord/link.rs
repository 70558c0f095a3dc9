//! A session's link to ZooKeeper as its streams and queues see it: connected, suspended with
//! a deadline, or lost (G2). Kept apart from `session` so the queue actors can follow a link
//! without knowing the session that owns them.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::zk::Zk;

/// Where a session's link to ZooKeeper stands, as every stream on it sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    Connected,
    /// Disconnected; the session may still come back until `deadline`.
    Suspended {
        deadline: Instant,
    },
    /// Terminal: every stream on this session ends.
    Lost(LossReason),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReason {
    /// ZooKeeper said so.
    Expired,
    /// Disconnected for longer than the server would keep the session (our own clock).
    PresumedExpired,
    /// Authentication failed or the client closed.
    Closed,
    /// The gateway is shutting down.
    Draining,
}

impl LossReason {
    pub fn describe(self) -> &'static str {
        match self {
            LossReason::Expired => "leadership lost: ZooKeeper session expired",
            LossReason::PresumedExpired => {
                "leadership lost: ZooKeeper session presumed expired (disconnected past the session timeout minus the safety margin)"
            }
            LossReason::Closed => "leadership lost: ZooKeeper session closed",
            LossReason::Draining => "the gateway is draining for shutdown; retry on another gateway",
        }
    }
}

/// A stream's view of its session's link: suspension and resumption are reported once each.
/// Shared by `Candidacy` and `LockHold`.
#[derive(Debug)]
pub(crate) struct LinkFollower {
    link: watch::Receiver<Link>,
    suspended: bool,
}

/// A change of the link worth telling a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkChange {
    Suspended { stop_within: Duration },
    Resumed,
    Lost(LossReason),
}

impl LinkFollower {
    /// Follows `link` from its current state: a suspension that began while the member was
    /// joining is reported first, before any grant confirmed earlier can reach the client
    /// (found by the queue simulation, `queue::sim`). A receiver cloned from the session's
    /// did so already, since that one never marks a value seen; one from `subscribe` would
    /// not, so it is made explicit here.
    pub(crate) fn new(mut link: watch::Receiver<Link>) -> Self {
        link.mark_changed();
        Self {
            link,
            suspended: false,
        }
    }

    /// The next change to report.
    ///
    /// # Cancellation safety
    /// Cancellation safe.
    pub(crate) async fn next(&mut self) -> LinkChange {
        loop {
            if self.link.changed().await.is_err() {
                return LinkChange::Lost(LossReason::Closed);
            }
            let link = self.link.borrow_and_update().clone();
            match link {
                Link::Lost(reason) => return LinkChange::Lost(reason),
                Link::Suspended { deadline } if !self.suspended => {
                    self.suspended = true;
                    return LinkChange::Suspended {
                        stop_within: deadline.saturating_duration_since(Instant::now()),
                    };
                }
                Link::Connected if self.suspended => {
                    self.suspended = false;
                    return LinkChange::Resumed;
                }
                _ => {}
            }
        }
    }

    /// The queue said our znode is gone (`actor_stopped`: or it stopped altogether): was that
    /// a resign/release by lease (`None`), or is the session over (`Some(reason)`)?
    ///
    /// An expiring session's own NodeDeleted notifications can reach the gateway before it
    /// learns the session expired (ZooKeeper writes them just before closing the socket), so
    /// this decides only once the session's fate is known: `Lost` gives its reason; a
    /// `Connected` link must prove the session alive with one round trip; `Suspended` waits.
    /// A stopped queue actor means the session ended, so then only `Lost` will do (bounded by
    /// the session timeout, after which the session is taken as closed).
    pub(crate) async fn znode_gone_cause(
        &mut self,
        zk: &Zk,
        actor_stopped: bool,
        bound: Duration,
    ) -> Option<LossReason> {
        let deadline = Instant::now() + bound;
        loop {
            let link = self.link.borrow_and_update().clone();
            match link {
                Link::Lost(reason) => return Some(reason),
                Link::Connected if !actor_stopped => match zk.probe().await {
                    Ok(()) => return None,
                    Err(e) => {
                        tracing::debug!(error = %e, "session probe failed; waiting for the session's fate")
                    }
                },
                _ => {}
            }
            match tokio::time::timeout_at(deadline, self.link.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return Some(LossReason::Closed),
            }
        }
    }
}

/// Waits until the link is connected again; why the session ended if it ends first (`?` turns
/// that into `CoordError::SessionLost`).
pub(crate) async fn wait_usable(link: &mut watch::Receiver<Link>) -> Result<(), LossReason> {
    loop {
        match &*link.borrow_and_update() {
            Link::Connected => return Ok(()),
            Link::Lost(reason) => return Err(*reason),
            Link::Suspended { .. } => {}
        }
        if link.changed().await.is_err() {
            return Err(LossReason::Closed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_follower_made_while_suspended_reports_it_first() {
        let (tx, _keep) = watch::channel(Link::Connected);
        let deadline = Instant::now() + Duration::from_secs(5);
        tx.send_replace(Link::Suspended { deadline });
        // A receiver that has seen the suspension already, as `subscribe` makes them.
        let mut follower = LinkFollower::new(tx.subscribe());
        let change = tokio::time::timeout(Duration::from_secs(1), follower.next()).await;
        assert!(
            matches!(change, Ok(LinkChange::Suspended { .. })),
            "{change:?}"
        );
        tx.send_replace(Link::Connected);
        assert_eq!(follower.next().await, LinkChange::Resumed);
        // Connected from the start: nothing to report until something changes.
        let mut follower = LinkFollower::new(tx.subscribe());
        let quiet = tokio::time::timeout(Duration::from_millis(50), follower.next()).await;
        assert!(quiet.is_err(), "{quiet:?}");
    }
}
