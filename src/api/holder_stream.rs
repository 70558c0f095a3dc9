//! The loop shared by the two holder streams, `Election.Campaign` and `Lock.Acquire`.
//!
//! Both are the same contract seen from the client (contract "API", G3, G3b): `queued` first; then
//! the coordination layer's events in order; a heartbeat at least every `silence_limit / 3`
//! while the client holds, but only on a current view of the ZooKeeper link; the stream ends
//! `UNAVAILABLE` on drain, with the holder's status when the candidacy or hold is lost, `OK`
//! after an in-stream resign/release; a half-close keeps the hold; a cancelled or broken
//! inbound side is release.
//!
//! # Nobody is replaced before they can know (G3c)
//! A hold the gateway ends without the holder's own word — a drain, a lock's ttl lapsing, a
//! resign/release by lease from any gateway (`member::end_by_lease` marks the znode; this
//! gateway's queue watch brings the request here) — is first *revoked* ([`Step::Revoke`]): the
//! holder hears `suspended{stop_within, reason}` on a stream
//! that stays open, heartbeats stop, and the znode stays until the holder ends its stream
//! (cancel, half-close or an in-stream resign/release: the client helpers do that on
//! `suspended`, so a live holder is handed off at once) or until `silence_limit` has passed
//! since the last message the gateway actually sent it ([`Outbox::last_sent`]): by then a holder
//! that could not hear has stopped by its own watchdog. Only then is the znode deleted and the
//! stream ended (`UNAVAILABLE` for a drain, `ABORTED` for a lapsed ttl, `OK` for a resign or
//! release by lease; a member asked to end by lease that does not hold is deleted at once).
//! The rule itself is
//! [`revocation`], a pure core with table tests. Waiters hold nothing: on drain they end at
//! once.
//!
//! # A lease on the holder's own clock (`ping`)
//! A client helper numbers pings on its stream (the first in its join/acquire); the loop
//! answers each with `heartbeat{seq}` only while the client holds and the session vouches for
//! the hold ([`pings`]), and a grant carries the newest ping read before it. The holder's
//! deadline is the moment *it sent* the newest answered ping + `silence_limit`, so neither a
//! late answer nor a slow link can stretch it past the session (G1, G3b; a frozen gateway's
//! session expires `silence_bound` + margin after its last vouching at the earliest, and the
//! ping was sent before that). Such a stream gets no unsolicited heartbeats, and its revocation
//! and dead-client bounds need no allowance for the link's delay ([`revocation::due`]).
//!
//! # A client that stops reading holds nothing up
//! Every send happens inside the loop's `select!` ([`Outbox`]): while a message waits for room
//! the loop still follows the drain, the client's cancellation, a resign in flight and a
//! revocation's deadline, and the final status never waits. So a stalled stream is bounded like
//! any other: a drain ends it `silence_limit` after its last sent message at the latest. Keeping that loop in one place keeps the two services from
//! drifting apart in exactly the rules the fault suite checks. Each service supplies only what
//! differs: how its events and requests map to messages ([`HolderStream`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

use super::limits::{self, Admission};
use super::outbox::{self, Outbox, TrySend};
use crate::auth::{audit, Auth, Identity, Verb};
use crate::coord::member::Member;
use crate::coord::{CoordError, Coordinator};

/// Who holds a stream and under which verb: for the audit trail and for a policy reload that
/// withdraws the right (G3c: such a holder is revoked like a drained one).
pub(super) struct Tenant {
    pub auth: Arc<Auth>,
    pub identity: Identity,
    pub verb: Verb,
    /// For the per-identity limits the stream's first message decides (queues, bytes).
    pub admission: Arc<Admission>,
}

impl Tenant {
    /// The identity the per-identity limits count (none without a policy).
    pub fn limited(&self) -> Option<&Identity> {
        self.auth.enforced().then_some(&self.identity)
    }
}

/// The response stream of a streaming call.
pub(super) type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Opens a holder stream: admits it (G10), reads its first message (`what`: join, acquire)
/// within the first-message timeout, lets `open` turn that message into the hold, then drives
/// the hold in a task of its own. `open` may be dropped midway (the client went away): the
/// coordination layer's join and acquire are cancellation safe.
pub(super) async fn open<H, F, Fut>(
    admission: &Arc<Admission>,
    coord: &Coordinator,
    tenant: Tenant,
    request: Request<Streaming<H::Request>>,
    what: &'static str,
    open: F,
) -> Result<Response<BoxStream<H::Response>>, Status>
where
    H: HolderStream,
    F: FnOnce(H::Request, &Tenant) -> Fut,
    Fut: Future<Output = Result<H, CoordError>>,
{
    let permit = admission.holder(request.remote_addr(), tenant.limited())?;
    let conn = crate::conn_fate::ConnFate::of_request(&request);
    let mut inbound = request.into_inner();
    let first = limits::first_message(
        &mut inbound,
        admission.limits().first_message_timeout,
        &coord.draining(),
        what,
    )
    .await?;
    let first_ping = H::first_ping(&first);
    let mut holder = open(first, &tenant).await?;
    let (out, responses) = Outbox::new();
    let opened = Opened::now(&mut holder, out, conn, first_ping);
    let draining = coord.draining();
    tokio::spawn(async move {
        let _permit = permit;
        drive(holder, inbound, opened, draining, tenant).await;
    });
    Ok(Response::new(Box::pin(responses)))
}

/// What a stream tells its client before its task starts: `queued`, and the grant when the
/// member holds the moment it joined (a free lock, a vacant election). Both are in the outbox
/// before the response is returned, so the response's headers and both messages leave together
/// and the client learns that it holds without waiting for the stream's task to be scheduled
/// (on a reused name that wait was ≈ 0.1 ms of the acquire's latency, issue 21). What the task
/// still has to do about it is kept here, with the outbox.
struct Opened<T> {
    out: Outbox<T>,
    /// How the stream's connection ends ([`crate::conn_fate`]), when the gateway accepted it.
    conn: Option<Arc<crate::conn_fate::ConnFate>>,
    /// `queued` is in the outbox (else the client is gone and the task ends at once).
    queued: bool,
    /// The grant sent, with its fencing token: the task audits it and starts the heartbeat.
    granted: Option<u64>,
    /// The pings read so far: the first message's.
    pings: pings::Pings,
    /// The first step, when it was ready but is not a grant sent here: the task takes it first.
    /// Boxed: it lives in every waiting stream's task for the stream's whole life, where an
    /// unboxed `Step` cost ≈ 0.7 KiB per stream (the bench's 100,000 waiting streams).
    first: Option<Box<Step<T>>>,
}

impl<T: Send + 'static> Opened<T> {
    fn now<H: HolderStream<Response = T>>(
        holder: &mut H,
        out: Outbox<T>,
        conn: Option<Arc<crate::conn_fate::ConnFate>>,
        first_ping: u64,
    ) -> Self {
        use futures::FutureExt;
        let mut pings = pings::Pings::default();
        pings.read(first_ping);
        let mut opened = Self {
            queued: matches!(out.try_send(holder.queued()), TrySend::Sent),
            out,
            conn,
            granted: None,
            pings,
            first: None,
        };
        if !opened.queued {
            return opened;
        }
        // `next_event` is cancellation safe (it sits in the task's `select!`): polled once here,
        // a step not yet ready is simply awaited by the task.
        let first = holder.next_event().now_or_never();
        match first.map(|s| vouched(s, || holder.may_heartbeat())) {
            Some(Step::Granted(msg, token)) => {
                match opened.out.try_send(H::with_ping(msg, opened.pings.vouch())) {
                    TrySend::Sent => opened.granted = Some(token),
                    TrySend::Full(msg) => opened.first = Some(Box::new(Step::Granted(msg, token))),
                    TrySend::Closed => opened.queued = false,
                }
            }
            step => opened.first = step.map(Box::new),
        }
        opened
    }
}

/// What the loop does next, as decided by one service's event or request.
pub(super) enum Step<T> {
    /// Tell the client.
    Send(T),
    /// Tell the client it holds now, with this fencing token: also restarts the heartbeat
    /// clock.
    Granted(T, u64),
    /// Nothing to tell.
    Quiet,
    /// End the stream with this error (the hold is dropped, releasing what is left).
    Fail(CoordError),
    /// The client asked to resign/release in-stream: give up, then end (OK, or the error).
    Leave,
    /// Give up, then end with this error (a lock's wait ran out: the znode is gone before the
    /// client hears it; a waiter holds nothing another could be granted).
    Expire(CoordError),
    /// End a hold without the holder's word (a drain, a lapsed ttl, a resign/release by lease
    /// from any gateway): tell it `suspended` (saying why), wait for its stream's end or its
    /// silence bound, give up, then end with this error — or `OK` for `None`, a resign or
    /// release (G3c). A member that does not hold takes this as [`Step::Expire`] (`None`: as
    /// [`Step::Leave`]).
    Revoke(Suspension, Option<CoordError>),
    /// The hold ended by itself (resigned or released by lease elsewhere): end OK.
    Done,
    /// A ZooKeeper request made for an in-stream message (a proclaim): the loop keeps serving
    /// events, link changes and heartbeats while it runs, reads no further message until it
    /// is done (so requests stay in order), then takes its step.
    Pending(BoxFuture<Step<T>>),
}

/// Why a holder hears `suspended` (its `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Suspension {
    /// The gateway's link to ZooKeeper is suspended (G2).
    Connection,
    /// The gateway drains (G3c, G7).
    Drain,
    /// A lock's ttl lapsed (G3c).
    LeaseExpired,
    /// A resign/release by lease, on any gateway (G3c).
    EndRequested,
    /// A policy reload withdrew the caller's right to the name (G3c): reason RIGHT_WITHDRAWN,
    /// and the stream ends `PERMISSION_DENIED`.
    PolicyWithdrawn,
}

/// A resign/release in flight, and the error to end with once it is done (`None`: OK).
type Leaving = (BoxFuture<Result<(), CoordError>>, Option<CoordError>);

/// A request in flight that borrows nothing from the stream.
pub(super) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One holder stream's own part: its messages, its events and its requests.
#[tonic::async_trait]
pub(super) trait HolderStream: Send + Sized + 'static {
    type Request: Send + 'static;
    type Response: Send + 'static;

    /// `queued{lease, position}`: always the first message.
    fn queued(&self) -> Self::Response;

    /// `heartbeat{seq}`: the answer to ping `seq`, or unsolicited (0).
    fn heartbeat(seq: u64) -> Self::Response;

    /// The ping number the first message (join, acquire) carries: 0 for none.
    fn first_ping(first: &Self::Request) -> u64;

    /// The number of an in-stream `ping{seq}`; `None` for any other request.
    fn ping_of(request: &Self::Request) -> Option<u64>;

    /// A grant made by [`HolderStream::next_event`] with `ping_seq` set: the newest ping read
    /// before it, which the session vouched for with the grant.
    fn with_ping(msg: Self::Response, seq: u64) -> Self::Response;

    /// `suspended{stop_within, reason}`.
    fn suspended(stop_within: Duration, why: Suspension) -> Self::Response;

    /// Whether an in-stream request is the client's own resign/release.
    fn is_leave(request: &Self::Request) -> bool;

    /// The member behind the hold.
    fn member(&self) -> &Member;

    fn silence_limit(&self) -> Duration {
        self.member().silence_limit()
    }

    /// How much later than it was sent a message may reach the client (G3c's allowance).
    fn client_delay_allowance(&self) -> Duration {
        self.member().client_delay_allowance()
    }

    /// Whether the client holds now (leader, or lock acquired).
    fn holds(&self) -> bool;

    /// Whether the gateway's view of the link is current enough to vouch for the hold with a
    /// heartbeat (`ZkSession::may_heartbeat`).
    fn may_heartbeat(&self) -> bool {
        self.member().may_heartbeat()
    }

    /// The G2 deadline while the session's link is suspended (see [`Member::link_deadline`]).
    fn link_deadline(&self) -> Option<Instant> {
        self.member().link_deadline()
    }

    /// The next event of the candidacy or hold, as a step. Must be cancellation safe: it sits
    /// in a `select!` with the inbound side.
    async fn next_event(&mut self) -> Step<Self::Response>;

    /// A request after the first one (the first was the join/acquire that made the hold).
    /// Never waits on ZooKeeper itself: a request that needs it returns [`Step::Pending`].
    fn on_request(&mut self, request: Self::Request) -> Step<Self::Response>;

    /// Resign or release: starts the delete (a tracked task retried until the znode is gone or
    /// the session is over) and returns its outcome. From then on `next_event` reports only
    /// link changes and `holds` is false.
    fn begin_leave(&mut self) -> BoxFuture<Result<(), CoordError>>;
}

/// A grant goes out only while the session's clock, read now, vouches for the session — as a
/// heartbeat does (G2, `ZkSession::may_heartbeat`). After a freeze (SIGSTOP, a stalled VM) the
/// published link is stale until the session supervisor's overdue timer has run, and a watch
/// event that waited in the socket meanwhile could admit a member of a session ZooKeeper has
/// already expired, while another gateway's member holds. A waiter has no silence watchdog, so
/// it could not tell: instead of the grant it gets `ABORTED` ([`CoordError::GrantUnconfirmed`];
/// its helper campaigns again), as it would a moment later when the link is judged. Not seen in
/// 48 runs of a probe that froze a gateway with such an event unread (its supervisor ran first
/// each time); closed here by construction rather than by the scheduler's order.
fn vouched<T>(step: Step<T>, may_grant: impl FnOnce() -> bool) -> Step<T> {
    match step {
        Step::Granted(..) if !may_grant() => Step::Fail(CoordError::GrantUnconfirmed),
        step => step,
    }
}

/// The pings a stream has read (proto `Ping`), kept pure so its table tests need no stream.
pub(super) mod pings {
    /// What a stream knows of its client's pings: the newest number read, and whether the
    /// session has vouched for one (a grant or an answer carried it) — from then on the
    /// holder's lease is anchored on its own clock, at or before the moment the gateway read
    /// that ping.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub(crate) struct Pings {
        newest: u64,
        vouched: bool,
    }

    impl Pings {
        /// A ping read (0: none). A number at or below the newest moves nothing: an answer
        /// carries the newest, which the client sent last.
        pub(crate) fn read(&mut self, seq: u64) {
            self.newest = self.newest.max(seq);
        }

        /// Whether the client pings: it then gets no unsolicited heartbeats.
        pub(crate) fn pinged(&self) -> bool {
            self.newest > 0
        }

        /// The session vouches for the hold now (a grant, or the answer to a ping): the number
        /// the message carries, 0 when the client never pinged.
        pub(crate) fn vouch(&mut self) -> u64 {
            self.vouched |= self.newest > 0;
            self.newest
        }

        /// Whether the holder's lease is anchored on its own clock (see the module docs).
        pub(crate) fn anchored(&self) -> bool {
            self.vouched
        }
    }
}

/// The arithmetic of a revoked hold (G3c), kept pure so its table tests need no stream.
pub(super) mod revocation {
    use std::time::Duration;

    use tokio::time::Instant;

    /// What `suspended{stop_within}` tells a revoked holder: its silence limit — the znode
    /// stays at least that long after this very message — or less when the session's link is
    /// already suspended and its G2 deadline comes sooner.
    pub(crate) fn stop_within(
        silence_limit: Duration,
        now: Instant,
        link_deadline: Option<Instant>,
    ) -> Duration {
        match link_deadline {
            Some(d) => silence_limit.min(d.saturating_duration_since(now)),
            None => silence_limit,
        }
    }

    /// When a revoked holder's znode may go if it does not end its stream first:
    /// `silence_limit` after the last message the gateway actually sent it — when its own
    /// watchdog has fired even if it heard nothing since — plus `delay`, how much later than
    /// it was sent that message may have reached it (`Timing::client_delay_allowance`): a
    /// holder that does not ping counts from when it hears.
    pub(crate) fn due(silence_limit: Duration, delay: Duration, last_sent: Instant) -> Instant {
        last_sent + silence_limit + delay
    }

    /// The `delay` of [`due`]: none for a holder whose lease is anchored on its own clock
    /// ([`super::pings`]). Its deadline is the moment it sent a ping the gateway read *before*
    /// vouching for it + `silence_limit`, so no later than the last vouching message's send +
    /// `silence_limit`, however late that message arrives.
    pub(crate) fn delay_allowance(anchored: bool, allowance: Duration) -> Duration {
        if anchored {
            Duration::ZERO
        } else {
            allowance
        }
    }

    /// Whether a stream that ended under a granted holder (G3, G3b) keeps its znode until
    /// [`due`]: only when the gateway gave the connection up as dead (`given_up`: nothing read
    /// from it in time) and the holder had not already given the hold up (`leaving`). Such a
    /// holder may be alive — its pings lost or late, or paused — and still hearing heartbeats
    /// sent before the end, each one restarting its watchdog. A stream the client cancelled,
    /// or a connection its side closed, is its own word: released at once.
    pub(crate) fn keeps_after_loss(holds: bool, leaving: bool, given_up: bool) -> bool {
        holds && !leaving && given_up
    }
}

/// Drives one holder stream until it ends. The holder lives in this task: when the task ends
/// for any reason the holder is dropped and its znode deleted (G3).
///
/// Nothing in the loop waits on ZooKeeper inline: an in-stream request's ZooKeeper work
/// (`pending`) and a resign/release (`leaving`) are futures polled beside the holder's events,
/// so `suspended`, heartbeats and the `ABORTED` deadline are never held up by them (G2). Nor
/// does it wait on the client: a message the channel has no room for waits in `unsent`,
/// sent from inside the `select!` (see the module docs).
async fn drive<H: HolderStream>(
    mut holder: H,
    inbound: Streaming<H::Request>,
    opened: Opened<H::Response>,
    draining: CancellationToken,
    tenant: Tenant,
) {
    let name = holder.member().lease().queue.as_str().to_owned();
    let mut ended = Ended {
        tenant: &tenant,
        name: &name,
        held: None,
        how: "stream ended",
    };
    drive_audited(
        &mut holder,
        inbound,
        opened,
        draining,
        &tenant,
        &name,
        &mut ended,
    )
    .await;
}

/// Audits the end of a hold that was granted (resign/release, loss, lapse), once, when the
/// loop is left whichever way.
struct Ended<'a> {
    tenant: &'a Tenant,
    name: &'a str,
    /// The fencing token while granted.
    held: Option<u64>,
    /// How the holder gave up, if it was its own word: "in-stream", "stream ended".
    how: &'static str,
}

impl Ended<'_> {
    fn lost(&mut self, e: &CoordError) {
        let Some(token) = self.held.take() else {
            return;
        };
        let t = self.tenant;
        match e {
            CoordError::LeaseExpired { .. } => audit::lapsed(&t.identity, self.name, Some(token)),
            e => audit::lost(&t.identity, t.verb, self.name, Some(token), &e.to_string()),
        }
    }
}

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        if let Some(token) = self.held {
            let t = self.tenant;
            audit::gave_up(&t.identity, t.verb, self.name, Some(token), self.how);
        }
    }
}

async fn drive_audited<H: HolderStream>(
    holder: &mut H,
    mut inbound: Streaming<H::Request>,
    opened: Opened<H::Response>,
    draining: CancellationToken,
    tenant: &Tenant,
    name: &str,
    ended: &mut Ended<'_>,
) {
    let Opened {
        out,
        conn,
        queued,
        granted,
        mut pings,
        first,
    } = opened;
    let given_up = || conn.as_ref().is_some_and(|c| c.given_up_as_dead());
    if !queued {
        return;
    }
    let mut policy = tenant.auth.changes();
    let mut follow_policy = true;
    let silence_limit = holder.silence_limit();
    let allowance = holder.client_delay_allowance();
    let period = (silence_limit / 3).max(Duration::from_millis(50));
    let mut heartbeat = tokio::time::interval(period);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut inbound_open = true;
    let mut pending: Option<BoxFuture<Step<H::Response>>> = None;
    let mut leaving: Option<Leaving> = None;
    // A message waiting for room (the client reads slower than we send).
    let mut unsent: Option<H::Response> = None;
    // Revoked (G3c): from then on nothing is sent but the end, and `revoked` holds the error to
    // end with once the holder ended its stream or its silence bound passed.
    let mut revoking = false;
    let mut revoked: Option<CoordError> = None;
    // The stream is gone with a connection given up as dead while the hold was granted: nothing
    // can be sent or read any more, and the znode stays until `due` (G3b).
    let mut cut = false;
    let mut kept = false;
    if let Some(token) = granted {
        audit::granted(&tenant.identity, tenant.verb, name, token);
        ended.held = Some(token);
        heartbeat.reset();
    }
    let mut first = first;
    loop {
        if cut && !kept {
            kept = true;
            revoking = true;
            inbound_open = false;
            pending = None;
            unsent = None;
            tracing::info!(
                ?silence_limit,
                "a holder's connection was given up as dead; its znode stays until its silence limit has passed since the last message sent (it may still be hearing them)"
            );
        }
        let delay_allowance = revocation::delay_allowance(pings.anchored(), allowance);
        let due = (revoking && leaving.is_none())
            .then(|| revocation::due(silence_limit, delay_allowance, out.last_sent()));
        let step = if let Some(step) = first.take() {
            *step
        } else {
            tokio::select! {
            biased;
            _ = draining.cancelled(), if !revoking => {
                if holder.holds() && leaving.is_none() {
                    Step::Revoke(Suspension::Drain, Some(CoordError::Draining))
                } else {
                    Step::Fail(CoordError::Draining)
                }
            }
            changed = policy.changed(), if follow_policy && !revoking => match changed {
                Err(_) => {
                    follow_policy = false;
                    Step::Quiet
                }
                Ok(()) if tenant.auth.allows(&tenant.identity, tenant.verb, name) => Step::Quiet,
                // A reload withdrew the right: ended like a drain, the holder told first (G3c).
                Ok(()) => {
                    let e = CoordError::PermissionDenied {
                        identity: tenant.identity.to_string(),
                        verb: tenant.verb,
                        name: name.to_owned(),
                    };
                    if holder.holds() && leaving.is_none() {
                        Step::Revoke(Suspension::PolicyWithdrawn, Some(e))
                    } else {
                        Step::Fail(e)
                    }
                }
            },
            _ = out.closed(), if !cut => {
                if !revocation::keeps_after_loss(holder.holds(), leaving.is_some(), given_up()) {
                    return;
                }
                cut = true;
                Step::Quiet
            }
            done = async { leaving.as_mut().expect("guarded").0.as_mut().await }, if leaving.is_some() => {
                let (_, then) = leaving.take().expect("guarded");
                match (done, then) {
                    (_, Some(e)) | (Err(e), None) => {
                        ended.lost(&e);
                        out.end(Status::from(e));
                    }
                    (Ok(()), None) => {}
                }
                return;
            }
            permit = out.reserve(), if unsent.is_some() => {
                match permit {
                    Ok(p) => outbox::send(p, unsent.take().expect("guarded")),
                    Err(()) => return,
                }
                continue;
            }
            _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                // A message buffered earlier may have gone out meanwhile: judge afresh.
                if revocation::due(silence_limit, delay_allowance, out.last_sent()) <= Instant::now() {
                    let then = revoked.take();
                    tracing::info!(
                        silent_for = ?out.last_sent().elapsed(),
                        "revoked holder did not end its stream within its silence limit; releasing"
                    );
                    leaving = Some((holder.begin_leave(), then));
                }
                continue;
            }
            step = holder.next_event(), if unsent.is_none() || revoking => {
                if revoking {
                    // Only the end of the member still matters; nothing else is sent.
                    match step {
                        s @ (Step::Fail(_) | Step::Done) => s,
                        _ => Step::Quiet,
                    }
                } else {
                    step
                }
            }
            step = async { pending.as_mut().expect("guarded").as_mut().await }, if pending.is_some() && unsent.is_none() => {
                pending = None;
                step
            }
            msg = inbound.message(), if inbound_open && pending.is_none() && leaving.is_none() && (unsent.is_none() || revoking) => match msg {
                Ok(Some(request)) if revoking => {
                    if H::is_leave(&request) {
                        Step::Leave
                    } else {
                        Step::Quiet
                    }
                }
                Ok(Some(request)) => match H::ping_of(&request) {
                    // Answered only while the client holds and the session vouches now, on a
                    // connected link (not a suspended one that heartbeats still may cover):
                    // the answer extends the holder's lease to the ping's send + its limit.
                    Some(seq) => {
                        pings.read(seq);
                        if !holder.holds() {
                            crate::metrics::holder_ping("waiting");
                            Step::Quiet
                        } else if holder.link_deadline().is_none() && holder.may_heartbeat() {
                            crate::metrics::holder_ping("answered");
                            Step::Send(H::heartbeat(pings.vouch()))
                        } else {
                            crate::metrics::holder_ping("unvouched");
                            Step::Quiet
                        }
                    }
                    None => holder.on_request(request),
                },
                // Half-close (grpcurl -d does this): the hold stays — unless it is being
                // revoked, when it is the holder's word that it has stopped.
                Ok(None) => {
                    inbound_open = false;
                    if revoking {
                        leaving = Some((holder.begin_leave(), revoked.take()));
                    }
                    Step::Quiet
                }
                // Cancelled or broken: stream loss is release — unless the gateway gave the
                // connection up under a holder that may still be hearing it (G3b).
                Err(_) if revocation::keeps_after_loss(holder.holds(), leaving.is_some(), given_up()) => {
                    cut = true;
                    Step::Quiet
                }
                Err(_) => return,
            },
            _ = heartbeat.tick(), if holder.holds() && !revoking && unsent.is_none() && !pings.pinged() => {
                // No heartbeat on a stale view of the link (after a freeze the timer fires
                // before the session supervisor has judged the link).
                if holder.may_heartbeat() {
                    Step::Send(H::heartbeat(0))
                } else {
                    Step::Quiet
                }
            }
            }
        };
        let msg = match vouched(step, || holder.may_heartbeat()) {
            Step::Send(msg) => msg,
            Step::Granted(msg, token) => {
                audit::granted(&tenant.identity, tenant.verb, name, token);
                ended.held = Some(token);
                heartbeat.reset();
                H::with_ping(msg, pings.vouch())
            }
            Step::Quiet => continue,
            Step::Fail(e) => {
                ended.lost(&e);
                out.end(Status::from(e));
                return;
            }
            Step::Pending(fut) => {
                pending = Some(fut);
                continue;
            }
            Step::Leave => {
                if leaving.is_none() {
                    ended.how = "in-stream";
                    leaving = Some((holder.begin_leave(), None));
                }
                continue;
            }
            // A lock's wait ran out: the znode goes before the client hears it.
            Step::Expire(e) => {
                if leaving.is_none() {
                    leaving = Some((holder.begin_leave(), Some(e)));
                }
                continue;
            }
            // Nothing held, nobody to protect: a resign/release by lease deletes at once
            // (and ends OK once done); anything else ends now.
            Step::Revoke(_, None) if !holder.holds() || leaving.is_some() => {
                if leaving.is_none() {
                    leaving = Some((holder.begin_leave(), None));
                }
                continue;
            }
            Step::Revoke(_, Some(e)) if !holder.holds() || leaving.is_some() => {
                ended.lost(&e);
                out.end(Status::from(e));
                return;
            }
            Step::Revoke(why, then) => {
                match &then {
                    Some(e) => ended.lost(e),
                    // Asked by lease: audited where that call was served (the caller's
                    // identity) and here as the holder's end.
                    None => ended.how = "by lease, holder told first",
                }
                let stop_within =
                    revocation::stop_within(silence_limit, Instant::now(), holder.link_deadline());
                tracing::info!(
                    ?why, ?stop_within,
                    "revoking a hold: the holder is told first; its znode goes when it ends its stream or its silence limit has passed"
                );
                revoking = true;
                revoked = then;
                pending = None;
                // Unsent because the client does not read: it would not read this either.
                unsent = None;
                H::suspended(stop_within, why)
            }
            Step::Done => {
                // Resigned or released by lease: audited where that call was served.
                ended.held = None;
                return;
            }
        };
        match out.try_send(msg) {
            TrySend::Sent => {}
            TrySend::Full(m) if !revoking => unsent = Some(m),
            TrySend::Full(_) => {}
            TrySend::Closed => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{revocation, vouched, Step};
    use crate::coord::CoordError;

    #[test]
    fn a_grant_goes_out_only_while_the_session_clock_vouches_for_it() {
        let grant = || Step::<&str>::Granted("elected", 7);
        // (step, the clock vouches now) → what the stream does
        assert!(matches!(
            vouched(grant(), || true),
            Step::Granted("elected", 7)
        ));
        assert!(matches!(
            vouched(grant(), || false),
            Step::Fail(CoordError::GrantUnconfirmed)
        ));
        // Anything else is not a grant: the clock is not asked.
        let asked = std::cell::Cell::new(false);
        let ask = || {
            asked.set(true);
            false
        };
        assert!(matches!(
            vouched(Step::Send("queued"), ask),
            Step::Send("queued")
        ));
        assert!(matches!(vouched(Step::<&str>::Quiet, ask), Step::Quiet));
        assert!(!asked.get());
    }

    #[test]
    fn a_revoked_holder_is_told_its_silence_limit_or_what_is_left_of_the_link() {
        let now = Instant::now();
        let s = Duration::from_millis(1400);
        let ms = Duration::from_millis;
        // (link deadline, told)
        let table = [
            (None, s),
            (Some(now + ms(5000)), s),
            (Some(now + ms(900)), ms(900)),
            (Some(now), Duration::ZERO),
            (now.checked_sub(ms(10)), Duration::ZERO),
        ];
        for (deadline, told) in table {
            assert_eq!(
                revocation::stop_within(s, now, deadline),
                told,
                "{deadline:?}"
            );
        }
    }

    #[test]
    fn a_revoked_znode_goes_a_silence_limit_and_a_client_delay_after_the_last_message_sent() {
        let sent = Instant::now();
        let s = Duration::from_millis(1400);
        let delay = Duration::from_millis(1600);
        // (last sent, delay allowance) → due
        for (last, d, due) in [
            (sent, Duration::ZERO, sent + s),
            (sent, delay, sent + s + delay),
            // A later send (the `suspended` itself, or a buffered message a slow reader took)
            // moves it on.
            (
                sent + Duration::from_millis(300),
                delay,
                sent + Duration::from_millis(300) + s + delay,
            ),
        ] {
            assert_eq!(revocation::due(s, d, last), due, "{last:?} {d:?}");
        }
    }

    #[test]
    fn a_ping_anchors_the_lease_once_the_session_vouched_for_it() {
        use super::pings::Pings;
        // (pings read, what a vouching then carries, or no vouching) → (pinged, anchored)
        type Row = (&'static [u64], Option<u64>, (bool, bool), &'static str);
        let table: [Row; 6] = [
            (
                &[],
                Some(0),
                (false, false),
                "a client that never pings: grpcurl",
            ),
            (
                &[1],
                None,
                (true, false),
                "the join's ping, not yet vouched",
            ),
            (&[1], Some(1), (true, true), "granted on the join's ping"),
            (&[1, 2, 3], Some(3), (true, true), "the newest read"),
            (
                &[1, 5, 3],
                Some(5),
                (true, true),
                "an older number moves nothing back",
            ),
            (&[0], Some(0), (false, false), "a join without a ping"),
        ];
        for (read, carried, (pinged, anchored), what) in table {
            let mut p = Pings::default();
            for seq in read {
                p.read(*seq);
            }
            if let Some(carried) = carried {
                assert_eq!(p.vouch(), carried, "{what}");
            }
            assert_eq!((p.pinged(), p.anchored()), (pinged, anchored), "{what}");
        }
    }

    #[test]
    fn an_anchored_holder_needs_no_allowance_for_the_links_delay() {
        let allowance = Duration::from_millis(1600);
        assert_eq!(revocation::delay_allowance(false, allowance), allowance);
        assert_eq!(revocation::delay_allowance(true, allowance), Duration::ZERO);
    }

    #[test]
    fn only_a_holder_whose_connection_the_gateway_gave_up_keeps_its_znode_after_the_loss() {
        // (holds, leaving in-stream, connection given up as dead) → keeps until `due`
        let cases = [
            ((true, false, true), true, "a holder that may still hear us"),
            (
                (true, false, false),
                false,
                "cancelled, or its side closed: its word",
            ),
            (
                (true, true, true),
                false,
                "it had already resigned or released",
            ),
            (
                (false, false, true),
                false,
                "a waiter holds nothing to overlap",
            ),
            ((false, false, false), false, "a waiter that went away"),
        ];
        for ((holds, leaving, given_up), keeps, what) in cases {
            assert_eq!(
                revocation::keeps_after_loss(holds, leaving, given_up),
                keeps,
                "{what}"
            );
        }
    }
}
