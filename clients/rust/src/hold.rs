//! One Campaign or Acquire stream — a hold — driven by a task of its own, so that loss is
//! noticed (and `lost()` fires) even while the caller is busy with leader-only work: the
//! gateway's `suspended`, the stream's end, and the silence watchdog.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tonic::{Code, Status};

use crate::endpoint::Endpoint;
use crate::pb::Leader;
use crate::raw::{Grant, SuspendCause, Update};
use crate::Error;

/// How long `resign()` / `release()` wait for the gateway to confirm (end the stream) before
/// they just cancel it, which releases the znode too, only unconfirmed.
pub const GIVE_UP_CONFIRMATION: Duration = Duration::from_secs(1);

/// Why a hold (leadership or a lock, or a place in the queue) was lost. Reported once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LossReason {
    /// The gateway sent `suspended` while we held: it lost ZooKeeper, so the hold is
    /// uncertain. Stop hold-only work now.
    Suspended,
    /// Nothing at all arrived for `silence_limit` while we held: the gateway may be frozen
    /// or cut off from us (the watchdog).
    Silence,
    /// The stream failed with `UNAVAILABLE` or on the transport: the gateway drains (SIGTERM)
    /// or crashed, or the connection broke. Campaign again on another gateway.
    Unavailable,
    /// The stream ended any other way: `ABORTED` (the gateway's session was lost), `OK` after a
    /// resign or release by lease elsewhere, an expired lock ttl, a wait timeout.
    Ended,
}

impl LossReason {
    /// `suspended`, `silence`, `unavailable` or `ended`, as in the conformance agent's output.
    pub fn as_str(self) -> &'static str {
        match self {
            LossReason::Suspended => "suspended",
            LossReason::Silence => "silence",
            LossReason::Unavailable => "unavailable",
            LossReason::Ended => "ended",
        }
    }

    /// Whether campaigning again should move to the next endpoint (the gateway itself is the
    /// likely problem) rather than stay on this one.
    pub fn moves_endpoint(self) -> bool {
        matches!(self, LossReason::Unavailable | LossReason::Silence)
    }
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a status means "this gateway cannot serve now, try another": `UNAVAILABLE`, or a
/// transport failure (tonic attaches the I/O or HTTP/2 error as the source; statuses the
/// gateway sends have none).
pub fn is_transport_failure(status: &Status) -> bool {
    status.code() == Code::Unavailable
        || (matches!(
            status.code(),
            Code::Unknown | Code::Internal | Code::Cancelled
        ) && std::error::Error::source(status).is_some())
}

/// The loss reason for a stream that failed with `status`.
pub fn classify(status: &Status) -> LossReason {
    if is_transport_failure(status) {
        LossReason::Unavailable
    } else {
        LossReason::Ended
    }
}

/// What a hold's stream reports, in order. Heartbeats are not reported (the watchdog
/// consumes them).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum HoldEvent {
    /// Always first: the znode exists, `position` members are ahead.
    Queued { position: u32 },
    /// `elected` / `acquired`.
    Granted(Grant),
    /// The gateway lost ZooKeeper, drains, saw a ttl lapse, or — with
    /// [`SuspendCause::EndRequested`] — is ending the hold because a `Resign`/`Release` with
    /// its lease asked it to (it keeps the znode until the stream ends or `stop_within` has
    /// passed). While holding, a [`HoldEvent::Lost`] follows at once: `Suspended`, or `Ended`
    /// for an end requested by lease (as the stream's OK end said before the gateway told
    /// holders first).
    Suspended {
        stop_within: Option<Duration>,
        cause: SuspendCause,
    },
    /// The same ZooKeeper session is back (only seen while queued: a holder has already lost).
    Resumed,
    /// The leader's value changed.
    Proclaimed(Leader),
    /// The hold (or the place in the queue) is gone or can no longer be trusted. Last event.
    Lost(LossReason),
}

pub(crate) type RawStream = Pin<Box<dyn Stream<Item = Result<Update, Status>> + Send>>;

/// A response stream of either call, decoded into [`Update`]s.
pub(crate) fn decoded<M>(responses: tonic::Streaming<M>) -> RawStream
where
    M: crate::raw::Response + Send + 'static,
{
    Box::pin(crate::raw::updates(responses))
}

/// Sends `keep_alive{}` on the stream.
pub(crate) type KeepAlive = (Duration, Box<dyn FnMut() + Send>);

/// The stream's pings: when the transport took its first message (ping 1; the moment before
/// the stream was opened if it was not recorded), and how to send `ping{seq}` (false when it
/// could not be sent). Used only with a gateway whose `queued` said `answers_pings`; the lease
/// is then anchored on this process's clock ([`crate::lease`]).
pub(crate) type Pinger = (
    crate::raw::FirstTaken,
    Instant,
    Box<dyn FnMut(u64) -> bool + Send>,
);

#[derive(Debug, Clone, Default)]
pub(crate) struct State {
    pub granted: Option<Grant>,
    pub lost: Option<LossReason>,
    /// How the stream ended, once it has.
    pub end: Option<(Code, String)>,
    /// While holding: when the watchdog fires — with a gateway that answers pings, the send of
    /// the newest answered ping plus `silence_limit`; with an older one, the last message heard
    /// plus `silence_limit`. Updated without waking watchers.
    pub heard_until: Option<Instant>,
}

/// The shared part of [`crate::Leadership`] and [`crate::LockHold`].
pub(crate) struct HoldCore {
    pub lease: String,
    pub position: u32,
    pub endpoint: Endpoint,
    give_up: Option<Box<dyn FnOnce() + Send + Sync>>,
    state: watch::Receiver<State>,
    events: mpsc::UnboundedReceiver<HoldEvent>,
    lost: CancellationToken,
    stop: CancellationToken,
    releasing: Arc<AtomicBool>,
    task: Option<JoinHandle<()>>,
}

impl HoldCore {
    /// Reads the first message (`queued`) and hands the stream to a task. `keep_after_loss`:
    /// see [`crate::HoldOptions`].
    pub(crate) async fn start(
        mut stream: RawStream,
        give_up: Box<dyn FnOnce() + Send + Sync>,
        keep_alive: Option<KeepAlive>,
        pinger: Option<Pinger>,
        end_requests: Option<CancellationToken>,
        endpoint: Endpoint,
        keep_after_loss: bool,
    ) -> Result<HoldCore, Error> {
        let (lease, position, pinger) = match stream.next().await {
            Some(Ok(Update::Queued {
                lease,
                position,
                answers_pings,
                silence_limit,
            })) => {
                // Waiters ping every third of the limit a grant would carry, so that the grant
                // names a recent ping; holders every quarter of their grant's.
                let pinger = pinger
                    .filter(|_| answers_pings)
                    .map(|(taken, opened, send)| Pings {
                        lease: crate::lease::Lease::new(taken.get().copied().unwrap_or(opened)),
                        waiting_every: silence_limit.map(|l| l / 3),
                        send,
                    });
                (lease, position, pinger)
            }
            Some(Err(status)) => return Err(Error::Status(status)),
            None => {
                return Err(Error::Status(Status::unknown(
                    "the gateway ended the stream before queued",
                )))
            }
            Some(Ok(other)) => {
                return Err(Error::Status(Status::internal(format!(
                    "the gateway sent {other:?} before queued"
                ))))
            }
        };
        let (state_tx, state) = watch::channel(State::default());
        let (events_tx, events) = mpsc::unbounded_channel();
        let _ = events_tx.send(HoldEvent::Queued { position });
        let lost = CancellationToken::new();
        let stop = CancellationToken::new();
        let releasing = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(drive(Drive {
            stream,
            state: state_tx,
            events: events_tx,
            lost: lost.clone(),
            stop: stop.clone(),
            releasing: releasing.clone(),
            keep_alive,
            pings: pinger,
            end_requests,
            keep_after_loss,
        }));
        Ok(HoldCore {
            lease,
            position,
            endpoint,
            give_up: Some(give_up),
            state,
            events,
            lost,
            stop,
            releasing,
            task: Some(task),
        })
    }

    pub(crate) fn state(&self) -> State {
        self.state.borrow().clone()
    }

    /// Waits until the hold is granted.
    pub(crate) async fn granted(&self) -> Result<Grant, Error> {
        let mut rx = self.state.clone();
        loop {
            {
                let s = rx.borrow_and_update();
                if let Some(reason) = s.lost {
                    return Err(match &s.end {
                        Some((Code::DeadlineExceeded, _)) => Error::NotAcquired,
                        Some((code, msg)) if s.granted.is_none() && *code != Code::Ok => {
                            Error::Status(Status::new(*code, msg.clone()))
                        }
                        _ => Error::Lost(reason),
                    });
                }
                if let Some(g) = &s.granted {
                    return Ok(g.clone());
                }
            }
            if rx.changed().await.is_err() {
                return Err(Error::Lost(LossReason::Ended));
            }
        }
    }

    pub(crate) fn lost(&self) -> impl Future<Output = LossReason> + Send + 'static {
        let mut rx = self.state.clone();
        async move {
            loop {
                if let Some(r) = rx.borrow_and_update().lost {
                    return r;
                }
                if rx.changed().await.is_err() {
                    // Released by us: the task is gone without a loss. Nothing will come.
                    std::future::pending::<()>().await;
                }
            }
        }
    }

    /// `Ok` while holding: granted, not lost, and the watchdog's deadline not passed. The
    /// last part answers right even before the reading task has run again (a process just
    /// thawed, a starved runtime): that task decides the loss as soon as it runs, and then
    /// only by silence (see `drive`).
    pub(crate) fn check(&self) -> Result<(), Error> {
        let s = self.state.borrow();
        match (s.lost, &s.granted) {
            (Some(r), _) => Err(Error::Lost(r)),
            (None, Some(_)) if s.heard_until.is_some_and(|at| Instant::now() >= at) => {
                Err(Error::Lost(LossReason::Silence))
            }
            (None, Some(_)) => Ok(()),
            (None, None) => Err(Error::Lost(LossReason::Ended)),
        }
    }

    pub(crate) fn end_status(&self) -> Option<Status> {
        self.state
            .borrow()
            .end
            .as_ref()
            .map(|(code, msg)| Status::new(*code, msg.clone()))
    }

    pub(crate) fn lost_token(&self) -> CancellationToken {
        self.lost.clone()
    }

    pub(crate) async fn next_event(&mut self) -> Option<HoldEvent> {
        self.events.recv().await
    }

    /// Gives the hold up in-stream and waits (at most [`GIVE_UP_CONFIRMATION`]) for the
    /// gateway to end the stream; then cancels whatever is left.
    pub(crate) async fn release(mut self) {
        self.releasing.store(true, Ordering::SeqCst);
        if let Some(give_up) = self.give_up.take() {
            give_up();
        }
        if let Some(task) = self.task.as_mut() {
            let _ = tokio::time::timeout(GIVE_UP_CONFIRMATION, task).await;
        }
        // Drop cancels the stream if the gateway did not end it.
    }
}

impl Drop for HoldCore {
    fn drop(&mut self) {
        // The task returns and drops the response stream: tonic resets the HTTP/2 stream, and
        // the gateway deletes the znode.
        self.stop.cancel();
    }
}

struct Drive {
    stream: RawStream,
    state: watch::Sender<State>,
    events: mpsc::UnboundedSender<HoldEvent>,
    lost: CancellationToken,
    stop: CancellationToken,
    releasing: Arc<AtomicBool>,
    keep_alive: Option<KeepAlive>,
    /// With a gateway that answers pings.
    pings: Option<Pings>,
    /// Ends the request side ([`crate::raw::Duplex::request_ender`]).
    end_requests: Option<CancellationToken>,
    keep_after_loss: bool,
}

/// A stream's pings and the lease they anchor.
struct Pings {
    lease: crate::lease::Lease,
    /// How often a waiter pings (a third of `queued.silence_limit`).
    waiting_every: Option<Duration>,
    send: Box<dyn FnMut(u64) -> bool + Send>,
}

impl Pings {
    fn send(&mut self) {
        let seq = self.lease.ping(Instant::now());
        // A full buffer (the gateway stopped reading): the lease simply runs out.
        let _ = (self.send)(seq);
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A ping timer whose first tick is at `first`, then every `every`.
fn ping_interval(every: Duration, first: Instant) -> tokio::time::Interval {
    let every = every.max(Duration::from_millis(1));
    let mut i = tokio::time::interval_at(first, every);
    i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    i
}

/// What a grant means for the watchdog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Granted {
    /// Held, with this silence limit, until this deadline.
    Held(Duration, Instant),
    /// Held, and no silence limit to watch (an old gateway that sent none).
    NoWatchdog,
    /// Anchored, and its lease is over already, or it names no ping this stream sent.
    Expired,
}

/// The watchdog a grant sets at `now`: without pings, the grant's arrival + its limit; with
/// them, the send of the ping it names + its limit ([`crate::lease`]).
fn granted_until(pings: Option<&mut Pings>, g: &Grant, now: Instant) -> Granted {
    match (pings, g.silence_limit) {
        (None, Some(limit)) => Granted::Held(limit, now + limit),
        (None, None) => Granted::NoWatchdog,
        (Some(p), limit) => match (limit, p.lease.granted(limit, g.ping_seq)) {
            (Some(limit), Some(until)) if until > now => Granted::Held(limit, until),
            _ => Granted::Expired,
        },
    }
}

/// Reads the stream until it ends or the hold is dropped; decides loss once.
async fn drive(mut d: Drive) {
    // The watchdog runs only while holding: queued members get no heartbeats.
    let mut watchdog: Option<(Duration, Instant)> = None;
    let mut holding = false;
    let mut lost = false;
    // A `suspended` heard while queued and not followed by `resumed`: carried into a later
    // grant, which is then lost as it is granted (clients/CONFORMANCE.md).
    let mut suspended_queued = false;
    // Such a grant, recorded together with its loss.
    let mut granted_lost: Option<Grant> = None;
    // With a gateway that answers pings the lease is anchored on this process's clock: only
    // the grant and answers to pings move the deadline, never the mere arrival of a message.
    let mut pinging = d
        .pings
        .as_ref()
        .and_then(|p| p.waiting_every)
        .map(|every| ping_interval(every, Instant::now() + every));
    let mut keep_alive = d.keep_alive.take().map(|(every, send)| {
        let every = every.max(Duration::from_millis(1));
        (
            tokio::time::interval_at(Instant::now() + every, every),
            send,
        )
    });
    loop {
        let deadline = watchdog.map(|(_, at)| at);
        let reason = tokio::select! {
            biased;
            () = d.stop.cancelled() => return,
            m = d.stream.next() => match m {
                None => {
                    d.state.send_modify(|s| s.end = Some((Code::Ok, String::new())));
                    if lost || d.releasing.load(Ordering::SeqCst) {
                        return;
                    }
                    LossReason::Ended
                }
                Some(Err(status)) => {
                    let reason = classify(&status);
                    d.state.send_modify(|s| {
                        s.end = Some((status.code(), status.message().to_owned()));
                    });
                    if lost || d.releasing.load(Ordering::SeqCst) {
                        return;
                    }
                    reason
                }
                // Heard after the deadline (this process was frozen, or its runtime starved,
                // while the timer came due): the message waited in the socket and says nothing
                // about now. The silence came first and is final (G3b), whichever of the two
                // the select saw first.
                Some(Ok(_)) if !lost && deadline.is_some_and(|at| Instant::now() >= at) => {
                    LossReason::Silence
                }
                Some(Ok(raw)) => {
                    if lost {
                        // Kept open for the caller's release; nothing changes any more.
                        continue;
                    }
                    if let Some((limit, at)) = watchdog.as_mut() {
                        let moved = match (&raw, d.pings.as_mut()) {
                            (_, None) => Some(Instant::now() + *limit),
                            (Update::Heartbeat { seq }, Some(p)) => p.lease.answered(*seq),
                            (_, Some(_)) => None,
                        };
                        if let Some(moved) = moved.filter(|m| m > at) {
                            *at = moved;
                            d.state.send_if_modified(|s| {
                                s.heard_until = Some(moved);
                                false
                            });
                        }
                    }
                    match raw {
                        Update::Heartbeat { .. } | Update::Queued { .. } => continue,
                        Update::Granted(g) if suspended_queued => {
                            holding = true;
                            granted_lost = Some(g);
                            LossReason::Suspended
                        }
                        Update::Granted(g) => {
                            holding = true;
                            match granted_until(d.pings.as_mut(), &g, Instant::now()) {
                                // A grant whose lease ran out on its way (a link slower than
                                // the limit allows) or that names no ping: never held.
                                Granted::Expired => {
                                    granted_lost = Some(g);
                                    LossReason::Silence
                                }
                                Granted::Held(limit, until) => {
                                    watchdog = Some((limit, until));
                                    // Held on a lease: ping now, then every quarter of it.
                                    if let Some(p) = d.pings.as_mut() {
                                        p.send();
                                        let every = limit / 4;
                                        pinging = Some(ping_interval(every, Instant::now() + every));
                                    }
                                    d.state.send_modify(|s| {
                                        s.granted = Some(g.clone());
                                        s.heard_until = watchdog.map(|(_, at)| at);
                                    });
                                    let _ = d.events.send(HoldEvent::Granted(g));
                                    continue;
                                }
                                Granted::NoWatchdog => {
                                    watchdog = None;
                                    d.state.send_modify(|s| s.granted = Some(g.clone()));
                                    let _ = d.events.send(HoldEvent::Granted(g));
                                    continue;
                                }
                            }
                        }
                        Update::Suspended { stop_within, cause } => {
                            let _ = d.events.send(HoldEvent::Suspended { stop_within, cause });
                            if !holding {
                                suspended_queued = true;
                                continue;
                            }
                            // A Resign/Release with this hold's lease (contract G3c): told
                            // before anyone else can be granted it; over, as an OK end says.
                            if cause == SuspendCause::EndRequested {
                                LossReason::Ended
                            } else {
                                LossReason::Suspended
                            }
                        }
                        Update::Resumed => {
                            suspended_queued = false;
                            let _ = d.events.send(HoldEvent::Resumed);
                            continue;
                        }
                        Update::Proclaimed(leader) => {
                            d.state.send_modify(|s| {
                                if let Some(g) = s.granted.as_mut() {
                                    g.leader = Some(leader.clone());
                                }
                            });
                            let _ = d.events.send(HoldEvent::Proclaimed(leader));
                            continue;
                        }
                    }
                }
            },
            () = sleep_until_some(deadline), if deadline.is_some() && !lost => LossReason::Silence,
            _ = async { pinging.as_mut().expect("guarded").tick().await }, if pinging.is_some() && !lost => {
                if let Some(p) = d.pings.as_mut() {
                    p.send();
                }
                continue;
            }
            // Kept after a loss too (`keep_after_loss`): the lease must not lapse while the
            // caller still stops its work.
            _ = async { keep_alive.as_mut().expect("guarded").0.tick().await }, if keep_alive.is_some() => {
                (keep_alive.as_mut().expect("guarded").1)();
                continue;
            }
        };
        // The loss, decided once.
        // The token first: whoever sees the loss in the state also finds the token cancelled.
        lost = true;
        watchdog = None;
        d.lost.cancel();
        let grant = granted_lost.take();
        d.state.send_modify(|s| {
            if let Some(g) = &grant {
                s.granted = Some(g.clone());
            }
            s.lost = Some(reason);
        });
        if let Some(g) = grant {
            let _ = d.events.send(HoldEvent::Granted(g));
        }
        let _ = d.events.send(HoldEvent::Lost(reason));
        let ended = d.state.borrow().end.is_some();
        if ended || !d.keep_after_loss {
            // Cancel the call: the response side dropped first, then the request side ended
            // (the senders live on in the caller's handle), so the transport resets the stream
            // and the gateway deletes the znode now, not when the handle is dropped or the
            // connection given up.
            d.stream = Box::pin(tokio_stream::empty());
            if let Some(end) = &d.end_requests {
                end.cancel();
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core(
        msgs: Vec<Result<Update, Status>>,
        keep_after_loss: bool,
    ) -> (
        mpsc::UnboundedSender<Result<Update, Status>>,
        impl Future<Output = Result<HoldCore, Error>>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        for m in msgs {
            tx.send(m).unwrap();
        }
        let stream = Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx));
        let ep = Endpoint::parse("127.0.0.1:1").unwrap();
        (
            tx,
            HoldCore::start(
                stream,
                Box::new(|| {}),
                None,
                None,
                None,
                ep,
                keep_after_loss,
            ),
        )
    }

    fn queued() -> Result<Update, Status> {
        Ok(Update::Queued {
            lease: "l".into(),
            position: 0,
            answers_pings: false,
            silence_limit: None,
        })
    }

    fn granted(limit_ms: u64) -> Result<Update, Status> {
        Ok(Update::Granted(Grant {
            fencing_token: 7,
            silence_limit: Some(Duration::from_millis(limit_ms)),
            leader: None,
            ping_seq: 0,
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn silence_while_holding_is_loss_but_not_while_queued() {
        let (tx, open) = core(vec![queued()], false);
        let mut h = open.await.unwrap();
        // Queued: no watchdog, however long it is quiet.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(h.state().lost.is_none());
        tx.send(granted(300)).unwrap();
        assert_eq!(h.granted().await.unwrap().fencing_token, 7);
        // Heartbeats keep it alive…
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            tx.send(Ok(Update::Heartbeat { seq: 0 })).unwrap();
        }
        assert!(h.state().lost.is_none());
        // …silence does not.
        let started = Instant::now();
        assert_eq!(h.lost().await, LossReason::Silence);
        assert!(started.elapsed() <= Duration::from_millis(301));
        assert!(h.lost_token().is_cancelled());
        assert!(matches!(
            h.next_event().await,
            Some(HoldEvent::Queued { .. })
        ));
        assert!(matches!(h.next_event().await, Some(HoldEvent::Granted(_))));
        assert!(matches!(
            h.next_event().await,
            Some(HoldEvent::Lost(LossReason::Silence))
        ));
    }

    /// `heard_until` follows every message: the last one heard plus `silence_limit`.
    #[tokio::test(start_paused = true)]
    async fn heard_until_is_the_watchdogs_deadline() {
        let (tx, open) = core(vec![queued()], false);
        let h = open.await.unwrap();
        assert_eq!(h.state().heard_until, None, "not while queued");
        tx.send(granted(300)).unwrap();
        h.granted().await.unwrap();
        let first = h.state().heard_until.expect("set at the grant");
        assert!(first <= Instant::now() + Duration::from_millis(300));
        tokio::time::sleep(Duration::from_millis(200)).await;
        tx.send(Ok(Update::Heartbeat { seq: 0 })).unwrap();
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        let moved = h.state().heard_until.unwrap();
        assert_eq!(moved - first, Duration::from_millis(200));
        assert_eq!(moved, Instant::now() + Duration::from_millis(300));
    }

    /// A process frozen past its deadline (SIGSTOP, a stalled VM) finds, when it runs again,
    /// both its timer due and messages that waited in its socket meanwhile — heartbeats sent
    /// before its gateway froze too, say. Heard late they say nothing about now: the silence
    /// came first and is final (G3b; found by a probe that froze a holder, then its gateway,
    /// and saw the thawed holder hold on for another `silence_limit` beside its successor).
    #[tokio::test(start_paused = true)]
    async fn a_message_heard_after_the_deadline_does_not_revive_the_hold() {
        let (tx, open) = core(vec![queued()], false);
        let h = open.await.unwrap();
        tx.send(granted(300)).unwrap();
        h.granted().await.unwrap();
        let deadline = h.state().heard_until.expect("set at the grant");
        // The heartbeat is there before the hold's task runs again, after the deadline.
        tx.send(Ok(Update::Heartbeat { seq: 0 })).unwrap();
        tokio::time::advance(Duration::from_millis(500)).await;
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        assert_eq!(h.state().lost, Some(LossReason::Silence));
        assert_eq!(
            h.state().heard_until,
            Some(deadline),
            "not moved by the late heartbeat"
        );
        assert_eq!(h.lost().await, LossReason::Silence);
    }

    /// Asked after the deadline, before the reading task has run again (its timer not yet
    /// turned), the hold answers lost: a thawed application never reads "holding" first.
    #[tokio::test(start_paused = true)]
    async fn a_passed_deadline_is_loss_before_the_reading_task_runs() {
        let (tx, open) = core(vec![queued()], false);
        let h = open.await.unwrap();
        tx.send(granted(300)).unwrap();
        h.granted().await.unwrap();
        assert!(h.check().is_ok());
        tokio::time::advance(Duration::from_millis(301)).await;
        assert!(matches!(h.check(), Err(Error::Lost(LossReason::Silence))));
        assert_eq!(h.lost().await, LossReason::Silence);
    }

    #[tokio::test]
    async fn a_grant_after_a_suspension_heard_while_queued_is_lost_at_once() {
        let (tx, open) = core(vec![queued()], false);
        let mut h = open.await.unwrap();
        tx.send(Ok(Update::Suspended {
            stop_within: None,
            cause: SuspendCause::Connection,
        }))
        .unwrap();
        tx.send(granted(10_000)).unwrap();
        assert_eq!(h.lost().await, LossReason::Suspended);
        assert!(matches!(
            h.granted().await,
            Err(Error::Lost(LossReason::Suspended))
        ));
        assert_eq!(h.state().granted.map(|g| g.fencing_token), Some(7));
        let mut seen = Vec::new();
        while let Some(ev) = h.next_event().await {
            seen.push(match ev {
                HoldEvent::Queued { .. } => "queued",
                HoldEvent::Suspended { .. } => "suspended",
                HoldEvent::Granted(_) => "granted",
                HoldEvent::Lost(LossReason::Suspended) => "lost",
                other => panic!("{other:?}"),
            });
        }
        assert_eq!(seen, ["queued", "suspended", "granted", "lost"]);
    }

    #[tokio::test]
    async fn suspended_is_loss_only_while_holding_and_statuses_classify() {
        let (tx, open) = core(vec![queued()], false);
        let h = open.await.unwrap();
        tx.send(Ok(Update::Suspended {
            stop_within: None,
            cause: SuspendCause::Connection,
        }))
        .unwrap();
        tx.send(Ok(Update::Resumed)).unwrap();
        tx.send(granted(10_000)).unwrap();
        h.granted().await.unwrap();
        tx.send(Ok(Update::Suspended {
            stop_within: None,
            cause: SuspendCause::Connection,
        }))
        .unwrap();
        assert_eq!(h.lost().await, LossReason::Suspended);
        // A resign/release by lease elsewhere: told first, reported as the OK end was.
        let (tx, open) = core(vec![queued()], false);
        let h = open.await.unwrap();
        tx.send(granted(10_000)).unwrap();
        h.granted().await.unwrap();
        tx.send(Ok(Update::Suspended {
            stop_within: Some(Duration::from_secs(1)),
            cause: SuspendCause::EndRequested,
        }))
        .unwrap();
        assert_eq!(h.lost().await, LossReason::Ended);

        for (status, reason) in [
            (Status::unavailable("draining"), LossReason::Unavailable),
            (Status::aborted("session lost"), LossReason::Ended),
        ] {
            let (tx, open) = core(vec![queued()], false);
            let h = open.await.unwrap();
            tx.send(Err(status)).unwrap();
            assert_eq!(h.lost().await, reason);
            assert!(matches!(h.granted().await, Err(Error::Status(_))));
        }
        // A wait timeout: not acquired.
        let (tx, open) = core(vec![queued()], false);
        let h = open.await.unwrap();
        tx.send(Err(Status::deadline_exceeded("not in time")))
            .unwrap();
        assert!(matches!(h.granted().await, Err(Error::NotAcquired)));
        // The end of the stream after holding.
        let (tx, open) = core(vec![queued(), granted(10_000)], false);
        let h = open.await.unwrap();
        h.granted().await.unwrap();
        drop(tx);
        assert_eq!(h.lost().await, LossReason::Ended);
        assert!(matches!(
            h.granted().await,
            Err(Error::Lost(LossReason::Ended))
        ));
    }

    /// On loss the stream is cancelled at once (the gateway then deletes the znode), unless
    /// `keep_after_loss`: then only on release or drop.
    #[tokio::test(start_paused = true)]
    async fn the_stream_is_cancelled_on_loss_unless_kept() {
        let (tx, open) = core(vec![queued(), granted(100)], false);
        let h = open.await.unwrap();
        assert_eq!(h.lost().await, LossReason::Silence);
        tokio::task::yield_now().await;
        assert!(tx.is_closed(), "cancelled on loss");

        let (tx, open) = core(vec![queued(), granted(100)], true);
        let h = open.await.unwrap();
        assert_eq!(h.lost().await, LossReason::Silence);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!tx.is_closed(), "kept until released");
        drop(h);
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        assert!(tx.is_closed(), "cancelled on drop");
    }

    #[tokio::test]
    async fn a_first_message_other_than_queued_is_refused() {
        let (_tx, open) = core(vec![granted(1)], false);
        assert!(open.await.is_err());
        let (_tx, open) = core(vec![Err(Status::invalid_argument("bad name"))], false);
        match open.await {
            Err(Error::Status(s)) => assert_eq!(s.code(), Code::InvalidArgument),
            other => panic!("{:?}", other.map(|_| ())),
        }
    }

    /// A stream to a gateway that answers pings: the pings it sent (seq, when).
    type Sent = Arc<std::sync::Mutex<Vec<(u64, Instant)>>>;

    fn anchored_core(
        limit_hint_ms: u64,
    ) -> (
        mpsc::UnboundedSender<Result<Update, Status>>,
        Sent,
        impl Future<Output = Result<HoldCore, Error>>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(Ok(Update::Queued {
            lease: "l".into(),
            position: 1,
            answers_pings: true,
            silence_limit: Some(Duration::from_millis(limit_hint_ms)),
        }))
        .unwrap();
        let stream = Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx));
        let sent: Sent = Arc::default();
        let record = sent.clone();
        let pinger: Pinger = (
            crate::raw::FirstTaken::default(),
            Instant::now(),
            Box::new(move |seq| {
                record.lock().unwrap().push((seq, Instant::now()));
                true
            }),
        );
        let ep = Endpoint::parse("127.0.0.1:1").unwrap();
        let open = HoldCore::start(stream, Box::new(|| {}), None, Some(pinger), None, ep, false);
        (tx, sent, open)
    }

    fn granted_on(limit_ms: u64, ping_seq: u64) -> Result<Update, Status> {
        Ok(Update::Granted(Grant {
            fencing_token: 7,
            silence_limit: Some(Duration::from_millis(limit_ms)),
            leader: None,
            ping_seq,
        }))
    }

    async fn settle() {
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
    }

    /// With a gateway that answers pings, the deadline is the send of the newest answered
    /// ping + the limit: a waiter pings every third of the limit `queued` announced, a holder
    /// at once and every quarter of its own; messages that answer nothing move nothing, and an
    /// answer arriving late gives only what its ping's send allowed (the slow-link overlap of
    /// a frozen gateway, contract G3b).
    #[tokio::test(start_paused = true)]
    async fn an_anchored_lease_runs_from_the_send_of_the_newest_answered_ping() {
        let t0 = Instant::now();
        let (tx, sent, open) = anchored_core(900);
        let h = open.await.unwrap();
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let waiting: Vec<u64> = sent.lock().unwrap().iter().map(|(s, _)| *s).collect();
        assert_eq!(waiting, [2, 3, 4], "a waiter pings every 300 ms");
        // Granted on ping 4 (sent at 900 ms), read now at 1000 ms: held until 1800 ms.
        tx.send(granted_on(900, 4)).unwrap();
        h.granted().await.unwrap();
        assert_eq!(
            h.state().heard_until,
            Some(t0 + Duration::from_millis(1800))
        );
        settle().await;
        let (seq, at) = *sent.lock().unwrap().last().unwrap();
        assert_eq!(
            (seq, at),
            (5, t0 + Duration::from_millis(1000)),
            "pinged at the grant"
        );
        // Unsolicited heartbeats and other messages move nothing.
        tokio::time::sleep(Duration::from_millis(100)).await;
        tx.send(Ok(Update::Heartbeat { seq: 0 })).unwrap();
        settle().await;
        assert_eq!(
            h.state().heard_until,
            Some(t0 + Duration::from_millis(1800))
        );
        // The answer to ping 5 arrives 600 ms late: the lease runs from its send.
        tokio::time::sleep(Duration::from_millis(500)).await;
        tx.send(Ok(Update::Heartbeat { seq: 5 })).unwrap();
        settle().await;
        assert_eq!(
            h.state().heard_until,
            Some(t0 + Duration::from_millis(1900))
        );
        let holding: Vec<u64> = sent
            .lock()
            .unwrap()
            .iter()
            .skip(3)
            .map(|(s, _)| *s)
            .collect();
        assert_eq!(holding, [5, 6, 7], "a holder pings every 225 ms");
        // Nothing more answered: lost at 1900 ms, not 900 ms after the last message heard.
        assert_eq!(h.lost().await, LossReason::Silence);
        assert_eq!(Instant::now(), t0 + Duration::from_millis(1900));
    }

    /// A grant whose lease is over when it arrives (its ping sent longer than the limit ago:
    /// a link slower than the limit allows), or that names no ping this stream sent, is
    /// recorded and lost at once with reason silence.
    #[tokio::test(start_paused = true)]
    async fn a_grant_whose_lease_ran_out_on_its_way_is_lost_at_once() {
        for (ping_seq, late_ms, what) in [(1, 600, "late"), (0, 0, "no ping"), (9, 0, "unknown")] {
            let (tx, _sent, open) = anchored_core(10_000);
            let mut h = open.await.unwrap();
            tokio::time::sleep(Duration::from_millis(late_ms)).await;
            tx.send(granted_on(500, ping_seq)).unwrap();
            assert_eq!(h.lost().await, LossReason::Silence, "{what}");
            assert!(
                matches!(h.granted().await, Err(Error::Lost(LossReason::Silence))),
                "{what}"
            );
            assert_eq!(
                h.state().granted.map(|g| g.fencing_token),
                Some(7),
                "{what}"
            );
            let mut seen = Vec::new();
            while let Some(ev) = h.next_event().await {
                seen.push(match ev {
                    HoldEvent::Queued { .. } => "queued",
                    HoldEvent::Granted(_) => "granted",
                    HoldEvent::Lost(LossReason::Silence) => "lost",
                    other => panic!("{other:?}"),
                });
            }
            assert_eq!(seen, ["queued", "granted", "lost"], "{what}");
        }
    }

    #[test]
    fn transport_failures_are_recognised() {
        assert!(is_transport_failure(&Status::unavailable("x")));
        assert!(!is_transport_failure(&Status::unknown("x")));
        assert!(!is_transport_failure(&Status::aborted("x")));
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let from_transport = Status::from_error(Box::new(io));
        assert!(is_transport_failure(&from_transport), "{from_transport:?}");
    }
}
