//! The loop shared by the two holder streams, `Election.Campaign` and `Lock.Acquire`.
//!
//! Both are the same contract seen from the client (contract "API", G3, G3b): `queued` first; then
//! the coordination layer's events in order; a heartbeat at least every `silence_limit / 3`
//! while the client holds, but only on a current view of the ZooKeeper link; the stream ends
//! `UNAVAILABLE` on drain, with the holder's status when the candidacy or hold is lost, `OK`
//! after an in-stream resign/release; a half-close keeps the hold; a cancelled or broken
//! inbound side is release. Keeping that loop in one place keeps the two services from
//! drifting apart in exactly the rules the fault suite checks. Each service supplies only what
//! differs: how its events and requests map to messages ([`HolderStream`]).

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::{Status, Streaming};

use crate::coord::CoordError;

/// What the loop does next, as decided by one service's event or request.
pub(super) enum Step<T> {
    /// Tell the client.
    Send(T),
    /// Tell the client it holds now: also restarts the heartbeat clock.
    Granted(T),
    /// Nothing to tell.
    Quiet,
    /// End the stream with this status (the hold is dropped, releasing what is left).
    Fail(Status),
    /// The client asked to resign/release in-stream: give up, then end (OK, or the error).
    Leave,
    /// Give up, then end with this status (a lock's wait or ttl ran out: the znode is gone
    /// before the client hears it).
    Expire(Status),
    /// The hold ended by itself (resigned or released by lease elsewhere): end OK.
    Done,
    /// A ZooKeeper request made for an in-stream message (a proclaim): the loop keeps serving
    /// events, link changes and heartbeats while it runs, reads no further message until it
    /// is done (so requests stay in order), then takes its step.
    Pending(BoxFuture<Step<T>>),
}

/// What a holder stream's task hands to the response stream. Boxed: a channel allocates its
/// slots in blocks of 32, and `Result<_, Status>` is large, so unboxed each open stream would
/// carry several KiB of mostly empty slots (`examples/scale_bench.rs`).
pub(super) type Outbound<T> = Box<Result<T, Status>>;

/// A resign/release in flight, and the status to end with once it is done (`None`: OK).
type Leaving = (BoxFuture<Result<(), CoordError>>, Option<Status>);

/// A request in flight that borrows nothing from the stream.
pub(super) type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// One holder stream's own part: its messages, its events and its requests.
#[tonic::async_trait]
pub(super) trait HolderStream: Send + Sized + 'static {
    type Request: Send + 'static;
    type Response: Send + 'static;

    /// `queued{lease, position}`: always the first message.
    fn queued(&self) -> Self::Response;

    fn heartbeat() -> Self::Response;

    fn silence_limit(&self) -> Duration;

    /// Whether the client holds now (leader, or lock acquired).
    fn holds(&self) -> bool;

    /// Whether the gateway's view of the link is current enough to vouch for the hold with a
    /// heartbeat (`ZkSession::may_heartbeat`).
    fn may_heartbeat(&self) -> bool;

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

/// Drives one holder stream until it ends. The holder lives in this task: when the task ends
/// for any reason the holder is dropped and its znode deleted (G3).
///
/// Nothing in the loop waits on ZooKeeper inline: an in-stream request's ZooKeeper work
/// (`pending`) and a resign/release (`leaving`) are futures polled beside the holder's events,
/// so `suspended`, heartbeats and the `ABORTED` deadline are never held up by them (G2).
pub(super) async fn drive<H: HolderStream>(
    mut holder: H,
    mut inbound: Streaming<H::Request>,
    tx: mpsc::Sender<Outbound<H::Response>>,
    draining: CancellationToken,
) {
    if tx.send(Box::new(Ok(holder.queued()))).await.is_err() {
        return;
    }
    let period = (holder.silence_limit() / 3).max(Duration::from_millis(50));
    let mut heartbeat = tokio::time::interval(period);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut inbound_open = true;
    let mut pending: Option<BoxFuture<Step<H::Response>>> = None;
    let mut leaving: Option<Leaving> = None;
    loop {
        let step = tokio::select! {
            biased;
            _ = draining.cancelled() => Step::Fail(Status::from(CoordError::Draining)),
            _ = tx.closed() => return,
            done = async { leaving.as_mut().expect("guarded").0.as_mut().await }, if leaving.is_some() => {
                let (_, then) = leaving.take().expect("guarded");
                match (done, then) {
                    (_, Some(status)) => {
                        let _ = tx.send(Box::new(Err(status))).await;
                    }
                    (Ok(()), None) => {}
                    (Err(e), None) => {
                        let _ = tx.send(Box::new(Err(Status::from(e)))).await;
                    }
                }
                return;
            }
            step = holder.next_event() => step,
            step = async { pending.as_mut().expect("guarded").as_mut().await }, if pending.is_some() => {
                pending = None;
                step
            }
            msg = inbound.message(), if inbound_open && pending.is_none() && leaving.is_none() => match msg {
                Ok(Some(request)) => holder.on_request(request),
                // Half-close (grpcurl -d does this): the hold stays.
                Ok(None) => {
                    inbound_open = false;
                    Step::Quiet
                }
                // Cancelled or broken: stream loss is release.
                Err(_) => return,
            },
            _ = heartbeat.tick(), if holder.holds() => {
                // No heartbeat on a stale view of the link (after a freeze the timer fires
                // before the session supervisor has judged the link).
                if holder.may_heartbeat() {
                    Step::Send(H::heartbeat())
                } else {
                    Step::Quiet
                }
            }
        };
        let out = match step {
            Step::Send(msg) => Ok(msg),
            Step::Granted(msg) => {
                heartbeat.reset();
                Ok(msg)
            }
            Step::Quiet => continue,
            Step::Fail(status) => Err(status),
            Step::Pending(fut) => {
                pending = Some(fut);
                continue;
            }
            Step::Leave => {
                if leaving.is_none() {
                    leaving = Some((holder.begin_leave(), None));
                }
                continue;
            }
            // A lock's wait or ttl ran out: the znode goes before the client hears it.
            Step::Expire(status) => {
                if leaving.is_none() {
                    leaving = Some((holder.begin_leave(), Some(status)));
                }
                continue;
            }
            Step::Done => return,
        };
        let end = out.is_err();
        if tx.send(Box::new(out)).await.is_err() || end {
            return;
        }
    }
}
