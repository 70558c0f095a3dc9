//! Elections: campaigning (one EPHEMERAL_SEQUENTIAL znode per stream), observing, and the
//! by-lease and read-only operations any gateway can serve.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use prost::bytes::Bytes;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zkc;

use super::error::{CoordError, Retry};
use super::fanout::{EndFn, Told};
use super::link::{Link, LossReason};
use super::member::{self, list_members, read_data, Member, MemberEvent};
use super::pool::SessionPool;
use super::queue::{QueueHandle, QueueView};
use super::record::{ms_to_time, since, NodeRecord};
use super::session::{UnaryWork, ZkSession};
use super::types::{
    FencingToken, Holder, Lease, MemberInfo, MemberMode, MemberName, Page, PageSpec, Participant,
    QueueKind, QueueName, Value,
};
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
    Elected(Holder),
    Proclaimed(Holder),
    Suspended {
        stop_within: Duration,
    },
    Resumed,
    /// A `Resign` by lease (any gateway) asked for this candidacy to end: the stream ends it
    /// by G3c (told first, deleted once its stream ends or its silence limit passed).
    EndRequested,
    Ended(CandidacyEnd),
}

/// Why a candidacy ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CandidacyEnd {
    /// The znode was deleted: in-stream resign, or `Resign` by lease on any gateway. Ends `OK`.
    Resigned,
    /// The session is over (or presumed over). Ends `ABORTED`, or `UNAVAILABLE` when draining.
    Lost(super::link::LossReason),
    /// Waiting on a session stranded on a diverged server (`coord::divergence`): its znode is
    /// deleted so that the election moves on without it. Ends `UNAVAILABLE`.
    Unserved,
}

/// One open Campaign stream's candidacy: its [`Member`] plus what only elections have — the
/// leadership in office and proclaim. Dropping it (the stream ended for any reason) deletes its
/// znode: stream loss is release (G3).
#[derive(Debug)]
pub struct Candidacy {
    member: Member,
    /// The leadership in office: what was announced, since when, and its
    /// `zkgate_election_leaders` guard, so the gauge falls exactly when the leadership is taken.
    /// Boxed: most candidacies wait, and a waiting stream should not carry a leader's room
    /// (issue 21, memory per waiting stream).
    elected: Option<Box<(Holder, Instant, m::LabelledGaugeGuard)>>,
    _gauge: m::GaugeGuard,
    /// `zkgate_election_candidates{election}`; also holds the election's capped label.
    candidates: m::LabelledGaugeGuard,
    /// Its place on the gateway's board (per-name metrics, `/ui`).
    presence: super::board::Presence,
}

/// [`Coordinator::campaign`](super::Coordinator::campaign), served over the pool.
pub(super) async fn campaign(pool: &SessionPool, join: JoinSpec) -> Result<Candidacy, CoordError> {
    let record = NodeRecord {
        participant: join.candidate.as_str().to_owned(),
        value: join.value.into_bytes(),
        ..Default::default()
    };
    let member = member::join_member(
        pool,
        QueueKind::Election,
        &join.election,
        MemberMode::Candidate,
        record,
    )
    .await?;
    let label = m::name_label(join.election.as_str());
    let presence = pool
        .board
        .queued(QueueKind::Election, &join.election, join.candidate.as_str());
    Ok(Candidacy {
        presence,
        member,
        elected: None,
        _gauge: m::GaugeGuard::raise(m::campaigns_active),
        candidates: m::election_candidate(label),
    })
}

impl Candidacy {
    /// Its member: lease, position, timing.
    pub fn member(&self) -> &Member {
        &self.member
    }

    /// Whether this candidate leads as far as the gateway knows: elected, and its znode not
    /// reported gone (heartbeats stop as soon as it is, even while the cause is being decided).
    pub fn is_elected(&self) -> bool {
        self.elected.is_some() && !self.member.is_settling()
    }

    /// The next thing to tell the client. After `Ended` the candidacy is over.
    ///
    /// # Cancellation safety
    /// Cancellation safe: it only reads channels, so it can sit in a `select!` loop.
    pub async fn next_event(&mut self) -> CandidacyEvent {
        match self.member.next_event().await {
            MemberEvent::Holds { holder, failover } => {
                m::leader_elected(holder.queue.as_str(), failover);
                tracing::info!(
                    election = %holder.queue, candidate = %holder.participant,
                    fencing_token = holder.fencing_token.0, "leader elected"
                );
                self.presence.granted(&holder);
                let leading = m::election_leader(self.candidates.label().to_owned());
                self.elected = Some(Box::new((holder.clone(), Instant::now(), leading)));
                CandidacyEvent::Elected(holder)
            }
            MemberEvent::Proclaimed(holder) => {
                if let Some((l, _, _)) = self.elected.as_deref_mut() {
                    *l = holder.clone();
                }
                CandidacyEvent::Proclaimed(holder)
            }
            MemberEvent::Suspended { stop_within } => CandidacyEvent::Suspended { stop_within },
            MemberEvent::Resumed => CandidacyEvent::Resumed,
            MemberEvent::EndRequested => CandidacyEvent::EndRequested,
            MemberEvent::Left => self.end(CandidacyEnd::Resigned),
            MemberEvent::Lost(reason) => self.end(CandidacyEnd::Lost(reason)),
            MemberEvent::Unserved => self.end(CandidacyEnd::Unserved),
        }
    }

    fn end(&mut self, why: CandidacyEnd) -> CandidacyEvent {
        if let Some((leader, at, leading)) = self.elected.take().map(|b| *b) {
            m::leader_tenure(at.elapsed());
            drop(leading);
            tracing::info!(election = %leader.queue, candidate = %leader.participant, fencing_token = leader.fencing_token.0, ?why, "leadership ended");
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
    /// `NotLeader` unless elected (at once); the write's ZooKeeper refusals (from the
    /// returned future).
    pub fn start_proclaim(
        &self,
        value: Value,
    ) -> Result<
        impl std::future::Future<Output = Result<(), CoordError>> + Send + 'static,
        CoordError,
    > {
        let Some((leader, _, _)) = self.elected.as_deref().filter(|_| self.is_elected()) else {
            return Err(CoordError::NotLeader);
        };
        let mut record = self.member.record().clone();
        record.value = value.into_bytes();
        record.elected_at_ms = leader
            .since
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        Ok(self.member.write_record(record))
    }

    /// Starts leaving the election (see [`Member::begin_leave`]).
    pub fn begin_resign(
        &mut self,
    ) -> impl std::future::Future<Output = Result<(), CoordError>> + Send + 'static {
        if let Some((_, at, leading)) = self.elected.take().map(|b| *b) {
            m::leader_tenure(at.elapsed());
            drop(leading);
        }
        self.member.begin_leave()
    }
}

impl Drop for Candidacy {
    fn drop(&mut self) {
        if let Some((_, at, leading)) = self.elected.take().map(|b| *b) {
            m::leader_tenure(at.elapsed());
            drop(leading);
        }
        // The member's own drop deletes the znode unless it is known gone.
    }
}

/// An open Observe stream: the current state first, then each change.
pub struct Observation {
    _queue: Arc<QueueHandle>,
    /// Closed by the fan-out when the drain starts or the session is lost, so this is the one
    /// thing an observer polls (`coord::fanout`); why it closed is asked only then.
    view: watch::Receiver<QueueView>,
    draining: CancellationToken,
    link: watch::Receiver<Link>,
    /// The view has closed: the observation is over.
    ended: bool,
    sent: Sent,
    _gauge: m::GaugeGuard,
}

/// What an observation sent last, to tell what it must send next.
#[derive(Debug, Default)]
struct Sent {
    /// The bytes sent last; `None` before the first.
    last: Option<Bytes>,
    told: Told,
}

impl Sent {
    /// The bytes to send for `view`, if any, by the rule of [`Told`]. Equal states encode to
    /// equal bytes, and a state's observers share one copy, so mostly the comparison is of a
    /// pointer; nothing is encoded before the queue is listed.
    fn next(
        &mut self,
        view: &QueueView,
        encode: impl Fn(&Option<Holder>) -> Bytes,
    ) -> Option<Bytes> {
        if !view.synced() {
            return None;
        }
        let token = view.leader().as_ref().map(|l| l.fencing_token);
        let bytes = view.encoded(encode);
        let same = self.last.as_ref().is_some_and(|last| {
            (last.as_ptr() == bytes.as_ptr() && last.len() == bytes.len()) || *last == bytes
        });
        if !self.told.news(true, same, token) {
            return None;
        }
        self.told.sent(token);
        self.last = Some(bytes.clone());
        Some(bytes)
    }
}

impl std::fmt::Debug for Observation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observation")
            .field("sent", &self.sent)
            .finish_non_exhaustive()
    }
}

/// Resolves when the session is lost, or its link goes with it.
async fn session_lost(mut link: watch::Receiver<Link>) {
    loop {
        if let Link::Lost(_) = &*link.borrow_and_update() {
            return;
        }
        if link.changed().await.is_err() {
            return;
        }
    }
}

/// [`Coordinator::observe`](super::Coordinator::observe), served over the pool. Not counted as
/// a stream for the drain: an observation holds nothing to hand over or delete, it ends
/// `UNAVAILABLE` once the drain starts if its client reads, and the drain must not wait for one
/// whose client does not (see `api::election::observe_stream`).
pub(super) async fn observe(
    pool: &SessionPool,
    election: &QueueName,
) -> Result<Observation, CoordError> {
    let session = pool.session_for(QueueKind::Election, election)?;
    let queue = session.queue(QueueKind::Election, election).await?;
    // The queue belongs to this session, so every Observe of it passes the same end.
    let (draining, link) = (pool.draining.clone(), session.link());
    let end: EndFn = {
        let (draining, link) = (draining.clone(), link.clone());
        Box::new(move || {
            Box::pin(async move {
                tokio::select! {
                    () = draining.cancelled_owned() => {}
                    () = session_lost(link) => {}
                }
            })
        })
    };
    Ok(Observation {
        view: queue.observe_view_until(end),
        _queue: queue,
        draining,
        link,
        ended: false,
        sent: Sent::default(),
        _gauge: m::GaugeGuard::raise(m::observers_active),
    })
}

impl Observation {
    /// The next state to send, as `encode` encodes it: the first call returns the current one
    /// (leader or vacant). `encode` runs once per state on this gateway, for whichever of its
    /// observers sends it first; the rest share its bytes (issue 21: a leader change at 10,000
    /// observers).
    ///
    /// A state equal to the one sent last is not sent again, whether it is the same published
    /// value or an equal one published later (a leader seen again after a vacancy this observer
    /// skipped): equal states encode to equal bytes. Tokens never go down.
    ///
    /// # Errors
    /// `SessionLost` when the gateway's session ends, or with `Draining` once the drain starts,
    /// and `Unavailable` (`Retry::Stranded`) once the session is stranded on a diverged server:
    /// the client re-observes, on any gateway. A state that changed before may come first. The
    /// observation is over then; a further call fails `ObserveClosed`.
    ///
    /// # Cancellation safety
    /// Cancellation safe.
    pub async fn next_encoded(
        &mut self,
        encode: impl Fn(&Option<Holder>) -> Bytes,
    ) -> Result<Bytes, CoordError> {
        loop {
            {
                let view = self.view.borrow_and_update();
                if view.is_stranded() {
                    // There it would be shown a vacancy while another gateway shows the
                    // leader (`QueueView::stranded`).
                    self.ended = true;
                    return Err(Retry::Stranded.into());
                }
                if let Some(bytes) = self.sent.next(&view, &encode) {
                    return Ok(bytes);
                }
            }
            if self.ended {
                return Err(Retry::ObserveClosed.into());
            }
            if self.view.changed().await.is_err() {
                self.ended = true;
                return Err(self.why_ended());
            }
        }
    }

    /// Why the view closed: the drain, the session's loss (or its link gone with it), else the
    /// queue's actor ended.
    fn why_ended(&self) -> CoordError {
        if self.draining.is_cancelled() {
            return CoordError::SessionLost(LossReason::Draining);
        }
        match &*self.link.borrow() {
            Link::Lost(reason) => CoordError::SessionLost(*reason),
            _ if self.link.has_changed().is_err() => Retry::ObserveClosed.into(),
            _ => Retry::WatchEnded.into(),
        }
    }
}

/// Members whose data a Candidates page reads at a time: the page's byte budget usually ends it
/// long before the queue does, so it does not read the whole queue.
const CANDIDATES_READ_CHUNK: usize = 1024;

/// The head of an election's queue as its leader. The head leads: its gateway confirms it
/// without a write (see `queue`), so nothing in the znode says "confirmed".
fn leader_of(election: &QueueName, record: &NodeRecord, stat: &zkc::Stat) -> Holder {
    Holder {
        queue: election.clone(),
        participant: record.participant.clone(),
        value: record.value.clone(),
        fencing_token: FencingToken(stat.czxid as u64),
        since: since(record, stat),
    }
}

/// [`Coordinator::leader`](super::Coordinator::leader), served over the pool.
pub(super) async fn leader(pool: &SessionPool, election: &QueueName) -> Result<Holder, CoordError> {
    let session = pool.session_for(QueueKind::Election, election)?;
    let _room = session.unary_room(UnaryWork::Read).await;
    leader_on(&session, election).await
}

/// [`Coordinator::candidates`](super::Coordinator::candidates), served over the pool.
pub(super) async fn candidates(
    pool: &SessionPool,
    election: &QueueName,
    page: PageSpec,
) -> Result<Page<MemberInfo>, CoordError> {
    let kind = QueueKind::Election;
    let session = pool.session_for(kind, election)?;
    let _room = session.unary_room(UnaryWork::Read).await;
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
                leader_since: head.then(|| since(&record, &stat)),
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

/// [`Coordinator::validate_leader`](super::Coordinator::validate_leader), served over the pool.
pub(super) async fn validate_leader(
    pool: &SessionPool,
    election: &QueueName,
    token: FencingToken,
) -> Result<(bool, Option<Holder>), CoordError> {
    // A CheckSequencer must not answer from a follower that lags behind the quorum: a
    // `sync` first, on the session that then reads (one more round trip; see README).
    let session = pool.session_for(QueueKind::Election, election)?;
    let _room = session.unary_room(UnaryWork::Read).await;
    session
        .zk
        .sync(&session.queue_path(QueueKind::Election, election))
        .await?;
    match leader_on(&session, election).await {
        Ok(l) => Ok((l.fencing_token == token, Some(l))),
        Err(CoordError::NoLeader(_)) => Ok((false, None)),
        Err(e) => Err(e),
    }
}

/// [`Coordinator::resign`](super::Coordinator::resign), served over the pool.
pub(super) async fn resign(pool: &SessionPool, lease: &Lease) -> Result<(), CoordError> {
    member::end_by_lease(&*pool.session_for(lease.kind, &lease.queue)?, lease).await
}

/// [`Coordinator::proclaim`](super::Coordinator::proclaim), served over the pool.
pub(super) async fn proclaim(
    pool: &SessionPool,
    lease: &Lease,
    value: Value,
) -> Result<Holder, CoordError> {
    let session = pool.session_for(lease.kind, &lease.queue)?;
    let value = value.into_bytes();
    let _bytes = session.try_proclaim_room(value.len())?;
    let _room = session.unary_room(UnaryWork::ByLease).await;
    let members = list_members(&session, &session.queue_path(lease.kind, &lease.queue)).await?;
    if !members.iter().any(|m| m == &lease.member) {
        return Err(CoordError::LeaseNotFound);
    }
    // The head leads; a member stays the head until it leaves, so this holds for the write.
    if members.first() != Some(&lease.member) {
        return Err(CoordError::NotLeader);
    }
    let (record, stat) = member::update_by_lease(&session, lease, value).await?;
    Ok(leader_of(&lease.queue, &record, &stat))
}

/// The current leader as `session`'s server sees it: the head of the queue, once confirmed.
async fn leader_on(session: &ZkSession, election: &QueueName) -> Result<Holder, CoordError> {
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
    Err(CoordError::NoLeader(election.clone()))
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::coord::types::QueueName;

    fn holder(token: u64, value: &str) -> Holder {
        Holder {
            queue: QueueName::new("e").expect("a name"),
            participant: "p".into(),
            value: value.as_bytes().to_vec(),
            fencing_token: FencingToken(token),
            since: std::time::UNIX_EPOCH,
        }
    }

    /// What a state encodes to: enough to tell states apart.
    fn encode(leader: &Option<Holder>) -> Bytes {
        let text = match leader {
            Some(l) => format!(
                "{}:{}",
                l.fencing_token.0,
                String::from_utf8_lossy(&l.value)
            ),
            None => "vacant".into(),
        };
        Bytes::from(text)
    }

    #[test]
    fn an_observer_sends_each_state_once_in_token_order() {
        let unsynced = QueueView::default();
        let vacant = QueueView::new(true, None);
        let a = QueueView::new(true, Some(holder(10, "x")));
        let a_again = QueueView::new(true, Some(holder(10, "x")));
        let proclaimed = QueueView::new(true, Some(holder(10, "y")));
        let b = QueueView::new(true, Some(holder(20, "x")));
        let vacant_again = QueueView::new(true, None);
        // (the view the observer sees, what it sends)
        let table: [(&QueueView, Option<&str>); 11] = [
            (&unsynced, None),
            (&vacant, Some("vacant")),
            (&vacant, None),
            (&a, Some("10:x")),
            (&a.clone(), None),
            // Published again after a vacancy this observer never saw: equal, not sent.
            (&a_again, None),
            (&proclaimed, Some("10:y")),
            (&b, Some("20:x")),
            // Published before `b` but seen after it: stale.
            (&a, None),
            (&vacant_again, Some("vacant")),
            // Stale even after a vacancy: tokens never go down in the stream.
            (&a, None),
        ];
        let mut sent = Sent::default();
        for (i, (view, want)) in table.into_iter().enumerate() {
            let got = sent.next(view, encode);
            assert_eq!(got.as_deref(), want.map(str::as_bytes), "row {i}");
        }
    }

    #[test]
    fn a_state_is_encoded_once_for_all_its_observers() {
        let calls = Cell::new(0);
        let counting = |l: &Option<Holder>| {
            calls.set(calls.get() + 1);
            encode(l)
        };
        let view = QueueView::new(true, Some(holder(10, "x")));
        let (mut first, mut second) = (Sent::default(), Sent::default());
        let one = first.next(&view, counting).expect("sent");
        let two = second.next(&view.clone(), counting).expect("sent");
        assert_eq!(calls.get(), 1);
        assert_eq!(one.as_ptr(), two.as_ptr(), "the same bytes, shared");
        // A new state, even an equal one, has its own encoding.
        let equal = QueueView::new(true, Some(holder(10, "x")));
        assert_eq!(first.next(&equal, counting), None);
        assert_eq!(calls.get(), 2);
    }
}
