//! A session's link to ZooKeeper as its streams and queues see it: connected, suspended with
//! a deadline, or lost (G2). Kept apart from `session` so the queue actors can follow a link
//! without knowing the session that owns them.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use zookeeper_client as zkc;

use super::zk::{is_transport_failure, Zk};

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

/// How long a request lost to the link waits before it is sent again (once the link is usable):
/// enough not to spin on a connection that fails at once, little against any session timeout
/// (ZooKeeper's smallest is two ticks).
pub const LINK_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// How soon a failed re-listing of an unsynced queue or of the elections folder is tried again
/// (while the link is up).
pub const RELIST_RETRY: Duration = Duration::from_millis(100);

/// Sends a request until ZooKeeper answers it, through losses of the link: after a transport
/// failure it waits [`LINK_RETRY_PAUSE`], then until the link is usable, and sends it again,
/// so the request must be safe to repeat. `Ok` holds ZooKeeper's answer (a success or a
/// refusal such as `NoNode`, never a transport failure); `Err` why the session ended first.
///
/// # Cancellation safety
/// As the request's: dropping this drops the request in flight.
pub(crate) async fn through_link<T, F, Fut>(
    link: &mut watch::Receiver<Link>,
    mut send: F,
) -> Result<Result<T, zkc::Error>, LossReason>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, zkc::Error>>,
{
    loop {
        match send().await {
            Err(e) if is_transport_failure(&e) => {
                tokio::time::sleep(LINK_RETRY_PAUSE).await;
                wait_usable(link).await?;
            }
            answer => return Ok(answer),
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

    /// A transport failure is sent again once the link is usable; a refusal is the answer; a
    /// session that ends while the link is down ends the retries with its reason.
    #[tokio::test]
    async fn a_request_is_sent_through_the_link_until_zookeeper_answers() {
        let (tx, mut link) = watch::channel(Link::Connected);
        let mut sent = 0;
        let answer = through_link(&mut link, || {
            sent += 1;
            let reply: Result<(), zkc::Error> = if sent < 3 {
                Err(zkc::Error::ConnectionLoss)
            } else {
                Err(zkc::Error::NoNode)
            };
            async move { reply }
        })
        .await;
        assert!(matches!(answer, Ok(Err(zkc::Error::NoNode))), "{answer:?}");
        assert_eq!(sent, 3);

        tx.send_replace(Link::Suspended {
            deadline: Instant::now() + Duration::from_secs(60),
        });
        let ended = tokio::spawn(async move {
            through_link(&mut link, || async { Err::<(), _>(zkc::Error::Timeout) }).await
        });
        tx.send_replace(Link::Lost(LossReason::Expired));
        let ended = ended.await.expect("no panic");
        assert!(matches!(ended, Err(LossReason::Expired)), "{ended:?}");
    }
}
