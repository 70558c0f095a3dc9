//! Elections: campaigning (one EPHEMERAL_SEQUENTIAL znode per stream), observing, and the
//! by-lease and read-only operations any gateway can serve.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use zookeeper_client as zkc;

use super::queue::{Created, MemberSignal, QueueHandle, QueueView};
use super::record::{ms_to_time, now_ms, NodeRecord};
use super::session::{Link, LinkChange, LinkFollower, ZkSession};
use super::types::{
    FencingToken, LeaderInfo, Lease, MemberInfo, MemberName, Page, PageSpec, Participant,
    ProtectedId, QueueKind, QueueName, Value,
};
use super::{CoordError, Coordinator};
use crate::metrics as m;

/// A validated `join`.
#[derive(Debug, Clone)]
pub struct JoinSpec {
    pub election: QueueName,
    pub candidate: Participant,
    pub value: Value,
}

/// What a candidate's stream tells its client, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum CandidacyEvent {
    Elected(LeaderInfo),
    Proclaimed(LeaderInfo),
    Suspended { stop_within: Duration },
    Resumed,
    Ended(CandidacyEnd),
}

/// Why a candidacy ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CandidacyEnd {
    /// The znode was deleted: in-stream resign, or `Resign` by lease on any gateway. Ends `OK`.
    Resigned,
    /// The session is over (or presumed over). Ends `ABORTED`, or `UNAVAILABLE` when draining.
    Lost(super::session::LossReason),
}

/// Creates a member znode with a protected name in `queue`. A fresh name's queue znode is made
/// in the same transaction (one round trip and one log write for both). A create whose reply
/// was lost to a connection loss is found again by its protected id and our session as owner
/// (G5), then adopted.
pub(crate) async fn create_member(
    session: &ZkSession,
    queue: &QueueHandle,
    mode: char,
    record: &NodeRecord,
) -> Result<Created, CoordError> {
    let queue_path = queue.path.as_str();
    let id = ProtectedId::random();
    let prefix = MemberName::prefix(mode, &id);
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
    let created = |sequence, czxid| Created {
        member: MemberName {
            mode,
            id: id.hex(),
            sequence,
        },
        record: record.clone(),
        czxid,
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
                .map(|(stat, seq)| (seq, Some(stat.czxid)))
        };
        match made {
            Ok((sequence, czxid)) => return Ok(created(sequence, czxid)),
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
                if let Some((sequence, czxid)) =
                    find_protected(session, queue_path, &prefix).await?
                {
                    return Ok(created(sequence, Some(czxid)));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(CoordError::Unavailable(
        "could not create the candidate znode after several attempts".into(),
    ))
}

/// Looks for our own znode by protected prefix after a lost create reply (G5). Every read that
/// fails on the link is tried again once the link is back, so a maybe-applied create is never
/// taken for a failed one while the session lives; a lost session ends the search (the znode,
/// if it was made, went with it).
async fn find_protected(
    session: &ZkSession,
    queue_path: &str,
    prefix: &str,
) -> Result<Option<(i64, i64)>, CoordError> {
    let mut link = session.link();
    'look: loop {
        super::session::wait_usable(&mut link)
            .await
            .map_err(|e| match e {
                // Never joined, so nothing was lost: the client may simply retry.
                CoordError::SessionLost(r) => CoordError::Unavailable(format!(
                    "ZooKeeper session ended while joining ({}); retry",
                    r.describe()
                )),
                e => e,
            })?;
        let children = match session.zk.list_children(queue_path).await {
            Ok(c) => c,
            Err(zkc::Error::NoNode) => return Ok(None),
            Err(e) if super::zk::is_transport_failure(&e) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue 'look;
            }
            Err(e) => return Err(e.into()),
        };
        for child in children.iter().filter(|c| c.starts_with(prefix)) {
            let path = format!("{queue_path}/{child}");
            match session.zk.get_data(&path).await {
                Ok((_, stat)) if stat.ephemeral_owner == session.session_id() => {
                    return Ok(MemberName::parse(child).map(|m| (m.sequence, stat.czxid)));
                }
                // Not ours (cannot happen with a 128-bit id, but never adopt a stranger's node),
                // or deleted since the listing.
                Ok(_) | Err(zkc::Error::NoNode) => {}
                Err(e) if super::zk::is_transport_failure(&e) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
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
pub(crate) fn release_in_background(
    session: &Arc<ZkSession>,
    path: String,
) -> tokio::task::JoinHandle<Result<bool, CoordError>> {
    let s = session.clone();
    session.releases.spawn(async move {
        let r = s.delete_until_gone(&path).await;
        if let Err(e) = &r {
            tracing::debug!(error = %e, "background release ended without a confirmed delete; the session's end removes the znode");
        }
        r
    })
}

/// Awaits a [`release_in_background`] for a client that asked to leave: `Ok` once the znode is
/// gone (whoever deleted it).
pub(crate) async fn release_outcome(
    handle: tokio::task::JoinHandle<Result<bool, CoordError>>,
) -> Result<(), CoordError> {
    match handle.await {
        Ok(r) => r.map(|_| ()),
        Err(_) => Err(CoordError::Unavailable(
            "the release task failed; the session's end removes the znode".into(),
        )),
    }
}

/// One open Campaign stream's candidacy. Dropping it (the stream ended for any reason) deletes
/// its znode: stream loss is release (G3).
#[derive(Debug)]
pub struct Candidacy {
    session: Arc<ZkSession>,
    queue: Arc<QueueHandle>,
    lease: Lease,
    path: String,
    position: u32,
    record: NodeRecord,
    signals: mpsc::UnboundedReceiver<MemberSignal>,
    link: LinkFollower,
    /// The leadership in office: what was announced, since when, and its
    /// `zkgate_election_leaders` guard, so the gauge falls exactly when the leadership is taken.
    elected: Option<(LeaderInfo, Instant, m::LabelledGaugeGuard)>,
    /// The znode is known gone (resigned): nothing to delete on drop.
    released: bool,
    /// The queue reported the znode gone (`Some(actor_stopped)`) and the cause is still being
    /// decided: kept here so `next_event` stays cancellation safe.
    pending_gone: Option<bool>,
    /// The client resigned in-stream: the delete runs in the background
    /// ([`Candidacy::begin_resign`]) and only the link is followed until it is done.
    leaving: bool,
    _gauge: m::GaugeGuard,
    /// `zkgate_election_candidates{election}`; also holds the election's capped label.
    candidates: m::LabelledGaugeGuard,
    _stream: tokio_util::task::task_tracker::TaskTrackerToken,
}

impl Coordinator {
    /// Joins an election: creates the candidate's znode and registers it with the queue.
    ///
    /// # Errors
    /// `Unavailable`/`Draining` without a session; ZooKeeper errors.
    ///
    /// # Cancellation safety
    /// Not cancellation safe: a future dropped after the znode was created leaves it to the
    /// session's end. The API never drops it midway.
    pub async fn campaign(&self, join: JoinSpec) -> Result<Candidacy, CoordError> {
        let stream = self.stream_token();
        let session = self.session()?;
        let queue = session.queue(QueueKind::Election, &join.election).await?;
        queue.check_room(session.cfg.max_queue_members())?;
        let record = NodeRecord {
            participant: join.candidate.as_str().to_owned(),
            value: join.value.into_bytes(),
            ..Default::default()
        };
        let created = create_member(&session, &queue, 'c', &record).await?;
        let (member, record) = (created.member.clone(), created.record.clone());
        let path = format!("{}/{}", queue.path, member.node_name());
        let (tx, rx) = mpsc::unbounded_channel();
        let Some(position) = queue.register(created, tx).await else {
            // Gone before we could register it: deleted by nobody we know of; clean up anyway.
            drop(release_in_background(&session, path));
            return Err(CoordError::Unavailable(
                "the candidate znode vanished right after creation".into(),
            ));
        };
        let label = m::name_label(join.election.as_str());
        let lease = Lease {
            kind: QueueKind::Election,
            queue: join.election,
            member,
        };
        let link = session.link();
        Ok(Candidacy {
            session,
            queue,
            lease,
            path,
            position,
            record,
            signals: rx,
            link: LinkFollower::new(link),
            elected: None,
            released: false,
            pending_gone: None,
            leaving: false,
            _gauge: m::GaugeGuard::raise(m::campaigns_active),
            candidates: m::election_candidate(label),
            _stream: stream,
        })
    }
}

impl Candidacy {
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Candidates ahead of this one when it joined.
    pub fn position(&self) -> u32 {
        self.position
    }

    pub fn silence_limit(&self) -> Duration {
        self.session.timing.silence_limit
    }

    /// See [`ZkSession::may_heartbeat`].
    pub fn may_heartbeat(&self) -> bool {
        self.session.may_heartbeat()
    }

    /// Whether this candidate leads as far as the gateway knows: elected, and its znode not
    /// reported gone (heartbeats stop as soon as it is, even while the cause is being decided).
    pub fn is_elected(&self) -> bool {
        self.elected.is_some() && self.pending_gone.is_none() && !self.leaving
    }

    /// The next thing to tell the client. After `Ended` the candidacy is over.
    ///
    /// # Cancellation safety
    /// Cancellation safe: it only reads channels, so it can sit in a `select!` loop.
    pub async fn next_event(&mut self) -> CandidacyEvent {
        if let Some(actor_stopped) = self.pending_gone {
            return self.resolve_gone(actor_stopped).await;
        }
        if self.leaving {
            return match self.link.next().await {
                LinkChange::Lost(reason) => self.end(CandidacyEnd::Lost(reason)),
                LinkChange::Suspended { stop_within } => CandidacyEvent::Suspended { stop_within },
                LinkChange::Resumed => CandidacyEvent::Resumed,
            };
        }
        tokio::select! {
            biased;
            change = self.link.next() => match change {
                LinkChange::Lost(reason) => self.end(CandidacyEnd::Lost(reason)),
                LinkChange::Suspended { stop_within } => CandidacyEvent::Suspended { stop_within },
                LinkChange::Resumed => CandidacyEvent::Resumed,
            },
            signal = self.signals.recv() => match signal {
                Some(MemberSignal::Elected { leader, failover }) => {
                    m::leader_elected(leader.election.as_str(), failover);
                    tracing::info!(
                        election = %leader.election, candidate = %leader.candidate,
                        fencing_token = leader.fencing_token.0, "leader elected"
                    );
                    let leading = m::election_leader(self.candidates.label().to_owned());
                    self.elected = Some((leader.clone(), Instant::now(), leading));
                    CandidacyEvent::Elected(leader)
                }
                Some(MemberSignal::Proclaimed(leader)) => {
                    if let Some((l, _, _)) = self.elected.as_mut() {
                        *l = leader.clone();
                    }
                    CandidacyEvent::Proclaimed(leader)
                }
                gone @ (Some(MemberSignal::Gone) | None) => {
                    self.pending_gone = Some(gone.is_none());
                    self.resolve_gone(gone.is_none()).await
                }
            },
        }
    }

    /// A resign by lease, or a session going away? Decided only once known (see
    /// `LinkFollower::znode_gone_cause`).
    async fn resolve_gone(&mut self, actor_stopped: bool) -> CandidacyEvent {
        let bound = self.session.timing.negotiated;
        let cause = self
            .link
            .znode_gone_cause(&self.session.zk, actor_stopped, bound)
            .await;
        self.pending_gone = None;
        match cause {
            Some(reason) => self.end(CandidacyEnd::Lost(reason)),
            None => {
                self.released = true;
                self.end(CandidacyEnd::Resigned)
            }
        }
    }

    fn end(&mut self, why: CandidacyEnd) -> CandidacyEvent {
        if let Some((leader, at, leading)) = self.elected.take() {
            m::leader_tenure(at.elapsed());
            drop(leading);
            tracing::info!(election = %leader.election, candidate = %leader.candidate, fencing_token = leader.fencing_token.0, ?why, "leadership ended");
        }
        CandidacyEvent::Ended(why)
    }

    /// Starts replacing the leader's value and returns the write in flight, which borrows
    /// nothing: the stream keeps serving link changes and heartbeats while it runs, so a
    /// proclaim sent during an outage never holds up `suspended` or the `ABORTED` deadline
    /// (G2). The change reaches this stream (and observers) as `proclaimed` through the
    /// queue's watch.
    ///
    /// A write lost to the link is repeated once the link is back (it is idempotent); if the
    /// session ends first, the future ends quietly and the stream ends `ABORTED` by its link.
    ///
    /// # Errors
    /// `FailedPrecondition` unless elected (at once); the write's ZooKeeper refusals (from the
    /// returned future).
    pub fn start_proclaim(
        &self,
        value: Value,
    ) -> Result<
        impl std::future::Future<Output = Result<(), CoordError>> + Send + 'static,
        CoordError,
    > {
        let Some((leader, _, _)) = self.elected.as_ref().filter(|_| self.is_elected()) else {
            return Err(CoordError::FailedPrecondition(
                "proclaim refused: this candidate is not the leader".into(),
            ));
        };
        let mut record = self.record.clone();
        record.value = value.into_bytes();
        record.elected_at_ms = leader
            .since
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let session = self.session.clone();
        let path = self.path.clone();
        Ok(async move {
            let data = record.encode_to_vec();
            let _room = session.proclaim_room(data.len()).await;
            let mut link = session.link();
            loop {
                match session.zk.set_data(&path, &data, None).await {
                    Ok(_) => return Ok(()),
                    // Lost to the link: the same write again once it is back (idempotent). If
                    // the session goes instead, the stream ends ABORTED through its link.
                    Err(e) if super::zk::is_transport_failure(&e) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        if super::session::wait_usable(&mut link).await.is_err() {
                            return Ok(());
                        }
                    }
                    // The znode is gone: the queue's signal tells the stream why.
                    Err(zkc::Error::NoNode) => return Ok(()),
                    Err(e) => return Err(e.into()),
                }
            }
        })
    }

    /// Starts leaving the election: the znode is deleted by a tracked background task that
    /// retries until it is gone or the session is over (so dropping the stream meanwhile
    /// cannot orphan it), and the returned future reports the outcome. From now on
    /// `next_event` follows only the link, so the stream still hears `suspended` and ends
    /// `ABORTED` in time if the session goes before the delete is confirmed.
    pub fn begin_resign(
        &mut self,
    ) -> impl std::future::Future<Output = Result<(), CoordError>> + Send + 'static {
        self.queue.unregister(&self.lease.member.node_name());
        self.leaving = true;
        // The background task owns the delete now: nothing more for `Drop` to do.
        self.released = true;
        if let Some((_, at, leading)) = self.elected.take() {
            m::leader_tenure(at.elapsed());
            drop(leading);
        }
        release_outcome(release_in_background(&self.session, self.path.clone()))
    }
}

impl Drop for Candidacy {
    fn drop(&mut self) {
        self.session.linger(self.queue.clone());
        if let Some((_, at, leading)) = self.elected.take() {
            m::leader_tenure(at.elapsed());
            drop(leading);
        }
        if self.released {
            return;
        }
        self.queue.unregister(&self.lease.member.node_name());
        drop(release_in_background(
            &self.session,
            std::mem::take(&mut self.path),
        ));
    }
}

/// An open Observe stream: the current state first, then each change.
#[derive(Debug)]
pub struct Observation {
    _queue: Arc<QueueHandle>,
    view: watch::Receiver<QueueView>,
    link: watch::Receiver<Link>,
    sent_any: bool,
    last: Option<LeaderInfo>,
    _gauge: m::GaugeGuard,
    _stream: tokio_util::task::task_tracker::TaskTrackerToken,
}

impl Coordinator {
    /// Starts observing an election (it need not exist yet).
    ///
    /// # Errors
    /// `Unavailable`/`Draining` without a session; ZooKeeper errors placing the watch.
    pub async fn observe(&self, election: &QueueName) -> Result<Observation, CoordError> {
        let stream = self.stream_token();
        let session = self.session()?;
        let queue = session.queue(QueueKind::Election, election).await?;
        Ok(Observation {
            view: queue.view(),
            _queue: queue,
            link: session.link(),
            sent_any: false,
            last: None,
            _gauge: m::GaugeGuard::raise(m::observers_active),
            _stream: stream,
        })
    }
}

impl Observation {
    /// The next state to send: the first call returns the current one (leader or vacant).
    ///
    /// # Errors
    /// `SessionLost` when the gateway's session ends: the client re-observes, on any gateway.
    ///
    /// # Cancellation safety
    /// Cancellation safe.
    pub async fn next(&mut self) -> Result<Option<LeaderInfo>, CoordError> {
        loop {
            {
                let view = self.view.borrow_and_update();
                if view.synced && (!self.sent_any || view.leader != self.last) {
                    let stale = matches!((&self.last, &view.leader), (Some(o), Some(n)) if n.fencing_token < o.fencing_token);
                    if !stale {
                        self.sent_any = true;
                        self.last = view.leader.clone();
                        return Ok(view.leader.clone());
                    }
                }
            }
            tokio::select! {
                r = self.view.changed() => if r.is_err() {
                    return Err(CoordError::Unavailable("the election's watch ended; observe again".into()));
                },
                r = self.link.changed() => {
                    if r.is_err() {
                        return Err(CoordError::Unavailable("ZooKeeper session closed; observe again".into()));
                    }
                    if let Link::Lost(reason) = &*self.link.borrow_and_update() {
                        return Err(CoordError::SessionLost(*reason));
                    }
                }
            }
        }
    }
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
    members.sort_by_key(|m| m.sequence);
    Ok(members)
}

/// Reads the data of `members` of the queue at `path`, in paged multi-reads (G10); members gone
/// meanwhile are `None`.
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
        .map(|d| d.map(|(bytes, stat)| (NodeRecord::decode_lossy(&bytes), stat)))
        .collect())
}

/// Members whose data a Candidates page reads at a time: the page's byte budget usually ends it
/// long before the queue does, so it does not read the whole queue.
const CANDIDATES_READ_CHUNK: usize = 1024;

/// The head of an election's queue as its leader. The head leads: its gateway confirms it
/// without a write (see `queue`), so nothing in the znode says "confirmed".
fn leader_of(election: &QueueName, record: &NodeRecord, stat: &zkc::Stat) -> LeaderInfo {
    LeaderInfo {
        election: election.clone(),
        candidate: record.participant.clone(),
        value: record.value.clone(),
        fencing_token: FencingToken(stat.czxid as u64),
        since: super::queue::since(record, stat),
    }
}

impl Coordinator {
    /// The current leader, read from ZooKeeper: the head of the queue, once confirmed.
    ///
    /// # Errors
    /// `NotFound` when nobody leads; `Unavailable` without a session.
    pub async fn leader(&self, election: &QueueName) -> Result<LeaderInfo, CoordError> {
        leader_on(&*self.session()?, election).await
    }

    /// One page of the queue in order, for operators. Never reveals leases. `position` is the
    /// member's place in the queue when it was listed (members that leave while the page is
    /// read are left out); `total` counts the members listed.
    ///
    /// # Errors
    /// `Unavailable` without a session.
    pub async fn candidates(
        &self,
        election: &QueueName,
        page: PageSpec,
    ) -> Result<Page<MemberInfo>, CoordError> {
        let session = self.session()?;
        let kind = QueueKind::Election;
        let path = session.queue_path(kind, election);
        let members = list_members(&session, &path).await?;
        let start = page
            .after
            .map_or(0, |a| members.partition_point(|m| m.sequence <= a));
        let mut out = Page {
            items: Vec::new(),
            next_after: None,
            total: members.len(),
        };
        let mut bytes = 0;
        // Only the first member found on the first page can lead (the queue's head).
        let mut head = page.after.is_none();
        let mut at = start;
        while at < members.len() {
            let want = match page.max_entries {
                0 => CANDIDATES_READ_CHUNK,
                n => (n - out.items.len()).clamp(1, CANDIDATES_READ_CHUNK),
            };
            let chunk = &members[at..(at + want).min(members.len())];
            let data = read_data(&session, kind, &path, chunk).await?;
            for (i, (m, d)) in chunk.iter().zip(data).enumerate() {
                let Some((record, stat)) = d else { continue };
                let info = MemberInfo {
                    sequence: m.sequence,
                    leader_since: head.then(|| super::queue::since(&record, &stat)),
                    participant: record.participant,
                    value: record.value,
                    position: (at + i) as u32,
                    fencing_token: FencingToken(stat.czxid as u64),
                    joined: ms_to_time(stat.ctime),
                    mode: m.mode,
                };
                head = false;
                let size = info.wire_size_hint();
                if page.full(out.items.len(), bytes, size) {
                    out.next_after = out.items.last().map(|m: &MemberInfo| m.sequence);
                    return Ok(out);
                }
                bytes += size;
                out.items.push(info);
            }
            at += chunk.len();
        }
        Ok(out)
    }

    /// Whether `token` is the current leader's (Chubby's CheckSequencer).
    ///
    /// # Errors
    /// `Unavailable` without a session.
    pub async fn validate_leader(
        &self,
        election: &QueueName,
        token: FencingToken,
    ) -> Result<(bool, Option<LeaderInfo>), CoordError> {
        // A CheckSequencer must not answer from a follower that lags behind the quorum: a
        // `sync` first, on the session that then reads (one more round trip; see README).
        let session = self.session()?;
        session
            .zk
            .sync(&session.queue_path(QueueKind::Election, election))
            .await?;
        match leader_on(&session, election).await {
            Ok(l) => Ok((l.fencing_token == token, Some(l))),
            Err(CoordError::NotFound(_)) => Ok((false, None)),
            Err(e) => Err(e),
        }
    }

    /// Leaves an election by lease, from any gateway. Idempotent: a spent lease is `NotFound`.
    ///
    /// # Errors
    /// `NotFound` for a lease naming no znode; `Unavailable` without a session.
    pub async fn resign(&self, lease: &Lease) -> Result<(), CoordError> {
        let session = self.session()?;
        let path = format!(
            "{}/{}",
            session.queue_path(lease.kind, &lease.queue),
            lease.member.node_name()
        );
        match session.delete_until_gone(&path).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(lease_not_found()),
            // This gateway's session went before the delete was confirmed: the candidate's
            // znode (another session's) may still be there. A retry answers OK or NOT_FOUND.
            Err(CoordError::SessionLost(r)) => Err(CoordError::Unavailable(format!(
                "{}; retry the resign (NOT_FOUND then means it was done)",
                r.describe()
            ))),
            Err(e) => Err(e),
        }
    }

    /// The leader replaces its value, by lease, from any gateway.
    ///
    /// # Errors
    /// `NotFound` for a spent lease; `FailedPrecondition` if the lease's candidate does not lead.
    pub async fn proclaim(&self, lease: &Lease, value: Value) -> Result<LeaderInfo, CoordError> {
        let session = self.session()?;
        let path = format!(
            "{}/{}",
            session.queue_path(lease.kind, &lease.queue),
            lease.member.node_name()
        );
        let value = value.into_bytes();
        let _room = session.try_proclaim_room(value.len())?;
        let members = list_members(&session, &session.queue_path(lease.kind, &lease.queue)).await?;
        if !members.iter().any(|m| m == &lease.member) {
            return Err(lease_not_found());
        }
        // The head leads; a member stays the head until it leaves, so this holds for the write.
        if members.first() != Some(&lease.member) {
            return Err(CoordError::FailedPrecondition(
                "proclaim refused: this candidate is not the leader".into(),
            ));
        }
        for _ in 0..10 {
            let (data, stat) = match session.zk.get_data(&path).await {
                Ok(r) => r,
                Err(zkc::Error::NoNode) => return Err(lease_not_found()),
                Err(e) => return Err(e.into()),
            };
            let mut record = NodeRecord::decode_lossy(&data);
            record.value = value.clone();
            match session
                .zk
                .set_data(&path, &record.encode_to_vec(), Some(stat.version))
                .await
            {
                Ok(new_stat) => return Ok(leader_of(&lease.queue, &record, &new_stat)),
                Err(zkc::Error::BadVersion) => continue,
                Err(zkc::Error::NoNode) => return Err(lease_not_found()),
                Err(e) => return Err(e.into()),
            }
        }
        Err(CoordError::Unavailable(
            "proclaim kept racing with concurrent writes; retry".into(),
        ))
    }
}

/// The current leader as `session`'s server sees it: the head of the queue, once confirmed.
async fn leader_on(session: &ZkSession, election: &QueueName) -> Result<LeaderInfo, CoordError> {
    let path = session.queue_path(QueueKind::Election, election);
    for _ in 0..5 {
        let children = match session.zk.list_children(&path).await {
            Ok(c) => c,
            Err(zkc::Error::NoNode) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        let Some(head) = children
            .iter()
            .filter_map(|c| MemberName::parse(c))
            .min_by_key(|m| m.sequence)
        else {
            break;
        };
        match session
            .zk
            .get_data(&format!("{path}/{}", head.node_name()))
            .await
        {
            Ok((data, stat)) => {
                let mut leader = leader_of(election, &NodeRecord::decode_lossy(&data), &stat);
                // This gateway saw it take office: that moment beats the join time.
                if let Some(seen) = session.watched_leader(election) {
                    if seen.fencing_token == leader.fencing_token {
                        leader.since = seen.since;
                    }
                }
                return Ok(leader);
            }
            Err(zkc::Error::NoNode) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(no_leader(election))
}

fn no_leader(election: &QueueName) -> CoordError {
    CoordError::NotFound(format!("election \"{election}\" has no leader"))
}

pub(crate) fn lease_not_found() -> CoordError {
    CoordError::NotFound(
        "lease not found: it was never issued, is malformed, or is already spent".into(),
    )
}
