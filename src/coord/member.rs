//! One queue member: one EPHEMERAL_SEQUENTIAL znode with a protected name, registered with
//! its queue's actor, following its session's link, and deleted when it is dropped. Elections
//! and locks are the same lifecycle; [`Candidacy`](super::election::Candidacy) adds only
//! proclaim, [`LockHold`](super::lock::LockHold) only its wait and ttl.
//!
//! # Never an orphan
//! The znode's deletion is armed before the create is sent: its protected id is known by
//! then, so a join dropped at any await (the client went away) finds its znode again and
//! deletes it in the background, and a member dropped later deletes it by name. Every delete
//! is a tracked task retried until the znode is gone or the session is over (a drain waits
//! for them), so stream loss is release (G3) and joining is cancellation safe.
//!
//! # Gone: resigned or lost?
//! When the queue reports the znode gone, [`Member::next_event`] decides why before saying
//! anything (see `LinkFollower::znode_gone_cause`): a resign or release by lease from any
//! gateway, or the session's end.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use zookeeper_client as zkc;

use super::error::{CoordError, Retry};
use super::link::{
    through_link, wait_usable, LinkChange, LinkFollower, LossReason, LINK_RETRY_PAUSE,
};
use super::pool::SessionPool;
use super::queue::{Created, Enlisted, MemberSignal, QueueHandle, Refusal};
use super::record::{now_ms, NodeRecord};
use super::session::{UnaryWork, Urgency, ZkSession};
use super::types::{Holder, Lease, MemberMode, MemberName, ProtectedId, QueueKind};

/// What a member's stream hears, in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum MemberEvent {
    /// Confirmed as holding (see `queue`); `failover` as in [`MemberSignal::Holds`].
    Holds {
        holder: Holder,
        failover: Option<Duration>,
    },
    /// The holder's value changed (elections).
    Proclaimed(Holder),
    Suspended {
        stop_within: Duration,
    },
    Resumed,
    /// A resign/release by lease (on any gateway) asked for this member to end. Its stream
    /// ends it by G3c: a holder is told `suspended` first and its znode goes once its stream
    /// ends or its silence limit has passed; a member that does not hold is deleted at once.
    EndRequested,
    /// The znode was deleted by a resign/release by lease, on any gateway.
    Left,
    /// The session is over (or presumed over).
    Lost(LossReason),
    /// The session is stranded on a diverged server and this member does not hold
    /// ([`MemberSignal::Unserved`]): dropping it deletes its znode.
    Unserved,
}

/// Deletes a member's znode when dropped while armed: by name once the create answered, else
/// by its protected prefix (the create may have been applied). Keeps the queue's actor
/// lingering after a created member goes (see [`ZkSession::linger`]).
#[derive(Debug)]
struct Cleanup {
    session: Arc<ZkSession>,
    queue: Arc<QueueHandle>,
    /// The create's protected id, and its prefix (mode and id).
    id: String,
    prefix: String,
    /// The znode's name, once created.
    node: Option<String>,
    /// An attempt of the create failed on the link: another znode of this id may still show
    /// up, so the queue watches for it once the member is gone (`queue::state::Strays`).
    retried: bool,
    armed: bool,
}

impl Cleanup {
    fn path(&self, node: &str) -> String {
        format!("{}/{}", self.queue.path, node)
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.node.is_some() {
            self.session.linger(self.queue.clone());
        }
        if !self.armed {
            return;
        }
        match self.node.take() {
            Some(node) => {
                self.queue.unregister(&node);
                if self.retried {
                    self.queue
                        .watch_strays(std::mem::take(&mut self.id), Some(node.clone()));
                }
                drop(release_in_background(
                    &self.session,
                    self.path(&node),
                    self.queue.member_delete_urgency(),
                ));
            }
            None => {
                // The create may be applied yet, even after the search below finds nothing:
                // the queue deletes any znode of this id it sees from now on.
                self.queue.watch_strays(std::mem::take(&mut self.id), None);
                let (session, queue_path) = (self.session.clone(), self.queue.path.clone());
                let prefix = std::mem::take(&mut self.prefix);
                self.session.releases.spawn(async move {
                    match find_protected(&session, &queue_path, &prefix).await {
                        Ok(Some((member, _))) => {
                            let path = format!("{queue_path}/{}", member.node_name());
                            let _ = session.delete_until_gone(&path, Urgency::Gather).await;
                        }
                        Ok(None) => {}
                        Err(e) => {
                            tracing::debug!(error = %e, "looking for an abandoned member znode failed; the session's end removes it")
                        }
                    }
                });
            }
        }
    }
}

/// One member znode of this gateway's session and everything that follows it.
#[derive(Debug)]
pub struct Member {
    cleanup: Cleanup,
    lease: Lease,
    path: String,
    record: NodeRecord,
    enlisted: Enlisted,
    signals: mpsc::UnboundedReceiver<super::queue::Signal>,
    link: LinkFollower,
    /// The queue reported the znode gone (`Some(actor_stopped)`) and the cause is still being
    /// decided: kept here so `next_event` stays cancellation safe.
    pending_gone: Option<bool>,
    /// The client asked to leave: the delete runs in the background ([`Member::begin_leave`])
    /// and only the link is followed until it is done.
    leaving: bool,
    _stream: tokio_util::task::task_tracker::TaskTrackerToken,
}

/// A new member of the queue `kind`/`name` on a session of the pool (see [`Member::join`]),
/// counted as a stream for the drain.
pub(crate) async fn join_member(
    pool: &SessionPool,
    kind: QueueKind,
    name: &super::types::QueueName,
    mode: MemberMode,
    record: NodeRecord,
) -> Result<Member, CoordError> {
    let stream = pool.stream_token();
    let session = pool.session_for(kind, name)?;
    let queue = session.queue(kind, name).await?;
    Member::join(session, queue, mode, record, stream).await
}

impl Member {
    /// Creates the member's znode in `queue` and registers it. A lock queue refuses a permit
    /// count that differs from the members ahead; a refused member's znode is deleted before
    /// this returns (G8).
    ///
    /// # Errors
    /// `LimitReached` for a full queue, `PermitMismatch`, `Unavailable` without a usable
    /// session; ZooKeeper errors.
    ///
    /// # Cancellation safety
    /// Cancellation safe: a future dropped at any point leaves no znode behind (see the module
    /// docs).
    pub(crate) async fn join(
        session: Arc<ZkSession>,
        queue: Arc<QueueHandle>,
        mode: MemberMode,
        record: NodeRecord,
        stream: tokio_util::task::task_tracker::TaskTrackerToken,
    ) -> Result<Self, CoordError> {
        queue.check_room(session.cfg.max_queue_members())?;
        let id = ProtectedId::random();
        let mut cleanup = Cleanup {
            session: session.clone(),
            id: id.hex(),
            prefix: MemberName::prefix(mode, &id),
            queue,
            node: None,
            retried: false,
            armed: true,
        };
        let mut expecting = cleanup.queue.expect(id.hex());
        let created = match create_member(&session, &cleanup.queue, mode, &id, &record).await {
            Ok(c) => c,
            Err(e) => {
                // Failed rather than dropped: the client is told and may retry. Whatever an
                // attempt lost to the link may still leave is no stream's: the queue deletes
                // any znode of this id it sees.
                cleanup.armed = false;
                cleanup.queue.watch_strays(id.hex(), None);
                return Err(e);
            }
        };
        let member = created.member.clone();
        let record = created.record.clone();
        cleanup.node = Some(member.node_name());
        cleanup.retried = created.retried;
        let path = cleanup.path(&member.node_name());
        let (tx, rx) = mpsc::unbounded_channel();
        let enlisted = match cleanup.queue.enlist(created, tx).await {
            Ok(e) => {
                expecting.registered();
                e
            }
            Err(refusal) => {
                // Leave no znode behind (G8): delete it before answering.
                if let Err(e) = session.delete_until_gone(&path, Urgency::Gather).await {
                    tracing::debug!(error = %e, "deleting a refused member failed; the session's end will remove it");
                }
                cleanup.armed = false;
                if cleanup.retried {
                    cleanup
                        .queue
                        .watch_strays(id.hex(), Some(member.node_name()));
                }
                let kind = cleanup.queue.kind;
                return Err(match refusal {
                    Refusal::PermitMismatch { recorded } => CoordError::PermitMismatch {
                        lock: cleanup.queue.name.clone(),
                        recorded,
                        asked: record.permits,
                    },
                    Refusal::Gone => Retry::VanishedAfterCreate(kind).into(),
                    Refusal::Zk(e) => e.into(),
                    Refusal::Stranded => Retry::Stranded.into(),
                });
            }
        };
        let lease = Lease {
            kind: cleanup.queue.kind,
            queue: cleanup.queue.name.clone(),
            member,
        };
        Ok(Self {
            link: LinkFollower::new(session.link()),
            cleanup,
            lease,
            path,
            record,
            enlisted,
            signals: rx,
            pending_gone: None,
            leaving: false,
            _stream: stream,
        })
    }

    /// The capability naming this member's znode (given only on its own stream).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Members ahead of this one when it joined.
    pub fn position(&self) -> u32 {
        self.enlisted.ahead
    }

    /// How long a holder hearing nothing may assume it still holds (G3b).
    pub fn silence_limit(&self) -> Duration {
        self.cleanup.session.timing.silence_limit
    }

    /// See [`super::timing::Timing::client_delay_allowance`].
    pub fn client_delay_allowance(&self) -> Duration {
        self.cleanup.session.timing.client_delay_allowance()
    }

    /// See [`ZkSession::may_heartbeat`].
    pub fn may_heartbeat(&self) -> bool {
        self.cleanup.session.may_heartbeat()
    }

    /// While the session's link is suspended, the G2 deadline by which this member's stream
    /// ends `ABORTED` unless the session is back; `None` otherwise.
    pub fn link_deadline(&self) -> Option<tokio::time::Instant> {
        match *self.cleanup.session.link().borrow() {
            super::link::Link::Suspended { deadline } => Some(deadline),
            _ => None,
        }
    }

    /// Whether it held by its queue's view the moment it joined.
    pub(crate) fn held_at_join(&self) -> bool {
        self.enlisted.holds
    }

    /// What the znode stored when it was created.
    pub(crate) fn record(&self) -> &NodeRecord {
        &self.record
    }

    /// The znode was reported gone (its cause is being decided) or the client is leaving:
    /// either way it holds no more.
    pub(crate) fn is_settling(&self) -> bool {
        self.pending_gone.is_some() || self.leaving
    }

    /// The next thing to tell the client. After `Left` or `Lost` the member is over.
    ///
    /// # Cancellation safety
    /// Cancellation safe: it only reads channels, so it can sit in a `select!` loop.
    pub(crate) async fn next_event(&mut self) -> MemberEvent {
        if let Some(actor_stopped) = self.pending_gone {
            return self.resolve_gone(actor_stopped).await;
        }
        if self.leaving {
            return link_event(self.link.next().await);
        }
        tokio::select! {
            biased;
            change = self.link.next() => link_event(change),
            signal = self.signals.recv() => match signal.map(|s| *s) {
                Some(MemberSignal::Holds { holder, failover }) => MemberEvent::Holds { holder, failover },
                Some(MemberSignal::Proclaimed(holder)) => MemberEvent::Proclaimed(holder),
                Some(MemberSignal::EndRequested) => MemberEvent::EndRequested,
                Some(MemberSignal::Unserved) => MemberEvent::Unserved,
                gone @ (Some(MemberSignal::Gone) | None) => {
                    self.pending_gone = Some(gone.is_none());
                    self.resolve_gone(gone.is_none()).await
                }
            },
        }
    }

    /// A resign/release by lease, or a session going away? Decided only once known (see
    /// `LinkFollower::znode_gone_cause`).
    async fn resolve_gone(&mut self, actor_stopped: bool) -> MemberEvent {
        let session = &self.cleanup.session;
        let cause = self
            .link
            .znode_gone_cause(&session.zk, actor_stopped, session.timing.negotiated)
            .await;
        self.pending_gone = None;
        match cause {
            Some(reason) => MemberEvent::Lost(reason),
            None => {
                // Deleted by someone else: nothing left to delete.
                self.cleanup.armed = false;
                MemberEvent::Left
            }
        }
    }

    /// Starts leaving: the znode is deleted by a tracked background task that retries until
    /// it is gone or the session is over (so dropping the stream meanwhile cannot orphan it),
    /// and the returned future reports the outcome. From now on `next_event` follows only the
    /// link, so the stream still hears `suspended` and ends `ABORTED` in time if the session
    /// goes before the delete is confirmed.
    pub(crate) fn begin_leave(
        &mut self,
    ) -> impl std::future::Future<Output = Result<(), CoordError>> + Send + 'static {
        self.cleanup
            .queue
            .unregister(&self.lease.member.node_name());
        self.leaving = true;
        // The background task owns the delete now: nothing more for `Drop` to do.
        self.cleanup.armed = false;
        release_outcome(release_in_background(
            &self.cleanup.session,
            self.path.clone(),
            self.cleanup.queue.member_delete_urgency(),
        ))
    }

    /// Writes `record` over the znode's data, repeating a write lost to the link once it is
    /// back (it is idempotent). Borrows nothing, so the stream keeps serving its link while it
    /// runs; if the session ends first it ends quietly (the stream ends by its link), and a
    /// znode already gone is left to the queue's signal.
    pub(crate) fn write_record(
        &self,
        record: NodeRecord,
    ) -> impl std::future::Future<Output = Result<(), CoordError>> + Send + 'static {
        let session = self.cleanup.session.clone();
        let path = self.path.clone();
        async move {
            let data = record.encode_to_vec();
            let _room = session.proclaim_room(data.len()).await;
            let mut link = session.link();
            match through_link(&mut link, || session.zk.set_data(&path, &data, None)).await {
                // The session ended first.
                Err(_) => Ok(()),
                Ok(Ok(_) | Err(zkc::Error::NoNode)) => Ok(()),
                Ok(Err(e)) => Err(e.into()),
            }
        }
    }
}

fn link_event(change: LinkChange) -> MemberEvent {
    match change {
        LinkChange::Lost(reason) => MemberEvent::Lost(reason),
        LinkChange::Suspended { stop_within } => MemberEvent::Suspended { stop_within },
        LinkChange::Resumed => MemberEvent::Resumed,
    }
}

/// Creates a member znode named by `id` in `queue`. A fresh name's queue znode is made in the
/// same transaction (one round trip and one log write for both). A create whose reply was lost
/// to a connection loss is found again by its protected id and our session as owner (G5), then
/// adopted.
async fn create_member(
    session: &ZkSession,
    queue: &QueueHandle,
    mode: MemberMode,
    id: &ProtectedId,
    record: &NodeRecord,
) -> Result<Created, CoordError> {
    let queue_path = queue.path.as_str();
    let prefix = MemberName::prefix(mode, id);
    let prefix_path = format!("{queue_path}/{prefix}");
    // Gateways before 0.2 took `elected_at_ms` as their own confirmation write and show a head
    // without it as vacant; this gateway confirms without writing (see `queue`), so it stamps
    // the join time for them. It never reads the field as a sign of leadership.
    let record = NodeRecord {
        elected_at_ms: now_ms(),
        ..record.clone()
    };
    let data = record.encode_to_vec();
    let mut with_queue = !queue.probably_exists();
    let mut made_folders = false;
    // An attempt failed on the link: ZooKeeper may still apply it (see `queue::state::Strays`).
    let mut retried = false;
    let created = |sequence, czxid, retried| Created {
        member: MemberName {
            mode,
            id: id.hex(),
            sequence,
        },
        record: record.clone(),
        czxid,
        retried,
    };
    for _attempt in 0..6 {
        let made = if with_queue {
            session
                .zk
                .create_queue_and_member(queue_path, &prefix_path, &data)
                .await
                .map(|(czxid, seq)| (seq, czxid))
        } else {
            session
                .zk
                .create_member(&prefix_path, &data)
                .await
                .map(|(czxid, seq)| (seq, czxid))
        };
        match made {
            Ok((sequence, czxid)) => return Ok(created(sequence, Some(czxid), retried)),
            // The queue exists after all (another member made it meanwhile).
            Err(zkc::Error::NodeExists) if with_queue => with_queue = false,
            // The queue is gone (reaped since the actor last saw it): make it with the member.
            Err(zkc::Error::NoNode) if !with_queue => with_queue = true,
            // No folder either: a fresh tree.
            Err(zkc::Error::NoNode) if !made_folders => {
                made_folders = true;
                let root = session.cfg.root_path();
                let folder = queue_path[root.len() + 1..]
                    .split('/')
                    .next()
                    .unwrap_or_default();
                session.zk.ensure_folders(root, folder).await?;
            }
            // The reply was lost: the create may have been applied (G5).
            Err(e) if super::zk::is_transport_failure(&e) => {
                retried = true;
                if let Some((member, czxid)) = find_protected(session, queue_path, &prefix).await? {
                    return Ok(created(member.sequence, Some(czxid), retried));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Retry::CreateGaveUp.into())
}

/// Looks for our own znode by protected prefix after a lost create reply (G5). Every read that
/// fails on the link is tried again once the link is back, so a maybe-applied create is never
/// taken for a failed one while the session lives; a lost session ends the search (the znode,
/// if it was made, went with it).
///
/// Each look starts with a `sync` of the queue: after a fast reconnect the session may sit on
/// a server that has not yet applied the create (a lagging follower), whose listing would
/// miss it; we would then create a second znode while the first, ours but unknown to us, heads
/// the queue for as long as the session lives. A `sync` makes the server catch up with the
/// quorum first, and ZooKeeper answers one session's requests in order, so the listing after
/// it includes every create the quorum applied before it. The queue simulation (`queue::sim`,
/// `a_search_without_sync_leaves_an_orphan_and_the_simulation_finds_it`) finds that schedule
/// without the `sync`.
async fn find_protected(
    session: &ZkSession,
    queue_path: &str,
    prefix: &str,
) -> Result<Option<(MemberName, i64)>, CoordError> {
    let mut link = session.link();
    'look: loop {
        // Never joined, so nothing was lost: the client may simply retry.
        wait_usable(&mut link)
            .await
            .map_err(|r| CoordError::from(Retry::LostWhileJoining(r)))?;
        match session.zk.sync(queue_path).await {
            // A missing queue is answered by the listing below.
            Ok(()) | Err(zkc::Error::NoNode) => {}
            Err(e) if super::zk::is_transport_failure(&e) => {
                tokio::time::sleep(LINK_RETRY_PAUSE).await;
                continue 'look;
            }
            Err(e) => return Err(e.into()),
        }
        let children = match session.zk.list_children(queue_path).await {
            Ok(c) => c,
            Err(zkc::Error::NoNode) => return Ok(None),
            Err(e) if super::zk::is_transport_failure(&e) => {
                tokio::time::sleep(LINK_RETRY_PAUSE).await;
                continue 'look;
            }
            Err(e) => return Err(e.into()),
        };
        // Two attempts of one create may both have been applied (the first after an earlier
        // search missed it): the earliest is adopted, the other deleted as a stray once the
        // member registers (`queue::state::Strays`).
        let mut ours: Vec<MemberName> = children
            .iter()
            .filter(|c| c.starts_with(prefix))
            .filter_map(|c| MemberName::parse(c))
            .collect();
        ours.sort_by_key(|m| m.sequence);
        for member in ours {
            let path = format!("{queue_path}/{}", member.node_name());
            match session.zk.get_data(&path).await {
                Ok((_, stat)) if stat.ephemeral_owner == session.session_id() => {
                    return Ok(Some((member, stat.czxid)));
                }
                // Not ours (cannot happen with a 128-bit id, but never adopt a stranger's node),
                // or deleted since the listing.
                Ok(_) | Err(zkc::Error::NoNode) => {}
                Err(e) if super::zk::is_transport_failure(&e) => {
                    tokio::time::sleep(LINK_RETRY_PAUSE).await;
                    continue 'look;
                }
                Err(e) => return Err(e.into()),
            }
        }
        return Ok(None);
    }
}

/// Deletes a member znode in the background, retried until gone or the session is over, and
/// tracked so a drain waits for it. The returned handle reports the outcome; dropping it does
/// not stop the delete.
fn release_in_background(
    session: &Arc<ZkSession>,
    path: String,
    urgency: Urgency,
) -> tokio::task::JoinHandle<Result<bool, CoordError>> {
    let s = session.clone();
    session.releases.spawn(async move {
        let r = s.delete_until_gone(&path, urgency).await;
        if let Err(e) = &r {
            tracing::debug!(error = %e, "background release ended without a confirmed delete; the session's end removes the znode");
        }
        r
    })
}

/// Awaits a [`release_in_background`] for a client that asked to leave: `Ok` once the znode is
/// gone (whoever deleted it).
async fn release_outcome(
    handle: tokio::task::JoinHandle<Result<bool, CoordError>>,
) -> Result<(), CoordError> {
    match handle.await {
        Ok(r) => r.map(|_| ()),
        Err(_) => Err(Retry::ReleaseTaskFailed.into()),
    }
}

/// The path of the znode a lease names, on `session`.
pub(crate) fn lease_path(session: &ZkSession, lease: &Lease) -> String {
    format!(
        "{}/{}",
        session.queue_path(lease.kind, &lease.queue),
        lease.member.node_name()
    )
}

/// How much longer than its own silence limit a by-lease end waits for the member's gateway
/// before deleting the znode itself: that gateway's notice (one watch event and one read) and
/// its delete, with room for a loaded machine.
pub(crate) const END_BY_LEASE_MARGIN: Duration = Duration::from_secs(1);

/// Ends the member a lease names, from any gateway (Resign, Release), and returns once its
/// znode is gone. Idempotent: a spent lease is `LeaseNotFound`; a repeat while the first is
/// still being served waits for the same end.
///
/// # Nobody is replaced before they can know (G3c)
/// A by-lease end is not the holder's own word on its stream, so this does not delete a
/// member whose stream may hold. It *asks* the member's own gateway, by marking the znode
/// (`NodeRecord::end_requested_ms`, a versioned `setData`). That gateway sees the change on
/// its queue watch and ends the member as it ends a drained one: a holder is told
/// `suspended{stop_within}` first and its znode is deleted once it ends its stream or its
/// silence limit has passed since the last message sent to it; a member that does not hold
/// (queued) is deleted at once. Same path when the member's stream is on this very gateway.
///
/// Bounded: if the znode is still there `silence_limit` + the client delay allowance
/// (`Timing::client_delay_allowance`, which the member's gateway waits too) +
/// [`END_BY_LEASE_MARGIN`] after the mark (a gateway of an older version that does not read the mark, a gateway whose session
/// is cut off from ZooKeeper, a mark overwritten before its gateway read it), this deletes it
/// directly, as every version before did, and says so in the log.
///
/// # Errors
/// `LeaseNotFound` for a lease naming no znode; `Unavailable` without a session, or when this
/// gateway's session went before the end was confirmed.
pub(crate) async fn end_by_lease(session: &ZkSession, lease: &Lease) -> Result<(), CoordError> {
    let path = lease_path(session, lease);
    let requested = {
        let _room = session.unary_room(UnaryWork::ByLease).await;
        request_end(session, &path).await?
    };
    if !requested {
        // Marked, then gone before we looked again: ended (by our request, or otherwise).
        return Ok(());
    }
    let bound = session.timing.silence_limit
        + session.timing.client_delay_allowance()
        + END_BY_LEASE_MARGIN;
    match wait_gone(session, &path, tokio::time::Instant::now() + bound).await {
        Ok(true) => return Ok(()),
        Ok(false) => {}
        Err(CoordError::SessionLost(r)) => return Err(Retry::LostDuringResign(r).into()),
        Err(e) => return Err(e),
    }
    // Never the path: its protected name is the lease's secret.
    tracing::warn!(
        queue = %lease.queue, ?bound,
        "the member's gateway did not end it within its silence limit after a resign/release by lease; deleting it directly"
    );
    let _room = session.unary_room(UnaryWork::ByLease).await;
    match session.delete_until_gone(&path, Urgency::Gather).await {
        // Gone either way: by this delete or by its own gateway meanwhile.
        Ok(_) => Ok(()),
        Err(CoordError::SessionLost(r)) => Err(Retry::LostDuringResign(r).into()),
        Err(e) => Err(e),
    }
}

/// Marks the member at `path` as asked to end (see [`end_by_lease`]), keeping the rest of its
/// record: a versioned write, re-read and retried when another write came first. A mark that
/// is already there is left as it is (a repeated request). `Ok(false)`: the znode went after
/// the first read showed it.
///
/// # Errors
/// `LeaseNotFound` when the first read finds no znode.
async fn request_end(session: &ZkSession, path: &str) -> Result<bool, CoordError> {
    for attempt in 0..10 {
        let (data, stat) = match session.zk.get_data(path).await {
            Ok(r) => r,
            Err(zkc::Error::NoNode) if attempt == 0 => return Err(CoordError::LeaseNotFound),
            Err(zkc::Error::NoNode) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        let mut record = NodeRecord::decode_lossy(&data);
        if record.end_requested_ms > 0 {
            return Ok(true);
        }
        record.end_requested_ms = now_ms();
        match session
            .zk
            .set_data(path, &record.encode_to_vec(), Some(stat.version))
            .await
        {
            Ok(_) => return Ok(true),
            Err(zkc::Error::BadVersion) => continue,
            Err(zkc::Error::NoNode) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
    Err(Retry::ProclaimContended.into())
}

/// Waits until the znode at `path` is gone (`true`) or `deadline` has passed (`false`), with
/// an exists-watch: one request per change of the znode, none while it stays.
async fn wait_gone(
    session: &ZkSession,
    path: &str,
    deadline: tokio::time::Instant,
) -> Result<bool, CoordError> {
    let mut link = session.link();
    loop {
        let watcher = match session.zk.watch_stat(path).await {
            Ok((None, _)) => return Ok(true),
            Ok((Some(_), w)) => w,
            Err(e) if super::zk::is_transport_failure(&e) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => return Ok(false),
                    usable = async {
                        tokio::time::sleep(LINK_RETRY_PAUSE).await;
                        wait_usable(&mut link).await
                    } => usable?,
                }
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return Ok(false),
            // Any event (deleted, data changed, a session event): look again.
            _ = watcher.changed() => {}
        }
    }
}

/// Replaces the value in the znode a lease names, from any gateway, keeping the rest of its
/// record: a versioned write, re-read and retried when a concurrent write came first.
/// Returns the record written and the znode's new stat.
///
/// # Errors
/// `LeaseNotFound` once the znode is gone; `Unavailable` after repeated races.
pub(crate) async fn update_by_lease(
    session: &ZkSession,
    lease: &Lease,
    value: Vec<u8>,
) -> Result<(NodeRecord, zkc::Stat), CoordError> {
    let path = lease_path(session, lease);
    for _ in 0..10 {
        let (data, stat) = match session.zk.get_data(&path).await {
            Ok(r) => r,
            Err(zkc::Error::NoNode) => return Err(CoordError::LeaseNotFound),
            Err(e) => return Err(e.into()),
        };
        let mut record = NodeRecord::decode_lossy(&data);
        record.value = value.clone();
        match session
            .zk
            .set_data(&path, &record.encode_to_vec(), Some(stat.version))
            .await
        {
            Ok(new_stat) => return Ok((record, new_stat)),
            Err(zkc::Error::BadVersion) => continue,
            Err(zkc::Error::NoNode) => return Err(CoordError::LeaseNotFound),
            Err(e) => return Err(e.into()),
        }
    }
    Err(Retry::ProclaimContended.into())
}

/// Lists a queue's members in order, without their data. One `getChildren`, whose reply the
/// queue-size limit keeps within the packet budget (G10; see [`paging`](super::paging)).
pub(crate) async fn list_members(
    session: &ZkSession,
    path: &str,
) -> Result<Vec<MemberName>, CoordError> {
    let children = match session.zk.list_children(path).await {
        Ok(c) => c,
        Err(zkc::Error::NoNode) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut members: Vec<MemberName> = children
        .iter()
        .filter_map(|c| MemberName::parse(c))
        .collect();
    // Sequence, then name: two children with one sequence number (one of them someone else's)
    // are listed in the same order everywhere.
    members.sort_by_key(|m| (m.sequence, m.node_name()));
    Ok(members)
}

/// Reads the data of `members` of the queue at `path`, in paged multi-reads (G10); members gone
/// meanwhile are `None`, and so is a child that is not ephemeral: named like a member, but no
/// member's (every member znode is EPHEMERAL_SEQUENTIAL), so never a leader or a holder.
pub(crate) async fn read_data(
    session: &ZkSession,
    kind: QueueKind,
    path: &str,
    members: &[MemberName],
) -> Result<Vec<Option<(NodeRecord, zkc::Stat)>>, CoordError> {
    let paths: Vec<String> = members
        .iter()
        .map(|m| format!("{path}/{}", m.node_name()))
        .collect();
    let data = session
        .zk
        .get_many(&paths, session.cfg.member_reads(kind))
        .await?;
    Ok(data
        .into_iter()
        .map(|d| {
            d.filter(|(_, stat)| stat.ephemeral_owner != 0)
                .map(|(bytes, stat)| (NodeRecord::decode_lossy(&bytes), stat))
        })
        .collect())
}
