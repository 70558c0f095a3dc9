//! The two streaming calls as they are on the wire: open a `Campaign` or `Acquire` stream, send
//! its in-stream requests, read its messages — and nothing decided for the caller: no watchdog,
//! no loss, no failover, every heartbeat and the exact status the stream ends with.
//!
//! The helpers of this crate ([`crate::Leadership`], [`crate::LockHold`]) are built on it, and
//! so are the gateway's own tests, test kit and benchmark, which must see the protocol itself:
//! one way to open a stream and speak it, instead of a wrapper around the generated stubs in
//! each of them. Applications want the helpers: this layer does not keep the client's half of
//! the contract (`clients/CONFORMANCE.md`) by itself.
//!
//! ```no_run
//! # async fn f(ch: tonic::transport::Channel) -> Result<(), tonic::Status> {
//! use zkgate_client::{pb, raw::CampaignStream};
//! let mut s = CampaignStream::join(ch, pb::Join {
//!     election: "billing-cron".into(), candidate: "host-1".into(), value: vec![],
//!     ping_seq: 0, // no pings: this stream gets unsolicited heartbeats
//! }).await?;
//! while let Some(event) = s.event().await? {
//!     println!("{event:?}"); // queued, elected, heartbeats, …
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::Channel;
use tonic::{Status, Streaming};

use crate::pb::{self, acquire_request, acquire_response, campaign_request, campaign_response};
use crate::pb::{election_client::ElectionClient, lock_client::LockClient, Leader};

/// Requests that may wait unsent on one stream. In-stream requests are rare (resign, release,
/// proclaim, keep-alive every ttl/3); a full buffer means the gateway has stopped reading.
const REQUEST_BUFFER: usize = 16;

/// One open streaming call: the request side and the response side.
#[derive(Debug)]
pub struct Duplex<Req, Resp> {
    requests: mpsc::Sender<Req>,
    responses: Streaming<Resp>,
    first_taken: FirstTaken,
    end_requests: tokio_util::sync::CancellationToken,
}

/// When the transport took the call's first request from the buffer (set once): a moment
/// before it was sent, after the connection was made — what a helper counts its ping 1 from
/// (clients/CONFORMANCE.md: a client that counted from before a slow first connection lost its
/// first grant on arrival).
pub type FirstTaken = std::sync::Arc<std::sync::OnceLock<tokio::time::Instant>>;

/// An open `Election.Campaign` stream.
pub type CampaignStream = Duplex<pb::CampaignRequest, pb::CampaignResponse>;
/// An open `Lock.Acquire` stream.
pub type AcquireStream = Duplex<pb::AcquireRequest, pb::AcquireResponse>;

/// The request side is closed: the call has ended (or its response side was dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the stream's request side is closed")]
pub struct Closed;

impl<Req, Resp> Duplex<Req, Resp> {
    /// Sends one in-stream request, waiting while the buffer is full.
    ///
    /// # Errors
    /// [`Closed`] once the call has ended.
    pub async fn send(&self, request: Req) -> Result<(), Closed> {
        self.requests.send(request).await.map_err(|_| Closed)
    }

    /// Sends one in-stream request without waiting; false if the buffer is full or the call
    /// has ended.
    pub fn try_send(&self, request: Req) -> bool {
        self.requests.try_send(request).is_ok()
    }

    /// Closes the request side — a half-close, like `grpcurl -d` after its last message. The
    /// gateway keeps the stream (and the member); later sends fail with [`Closed`].
    pub fn close_requests(&mut self) {
        let (closed, _) = mpsc::channel(1);
        self.requests = closed;
    }

    /// The next message as it came (heartbeats included); `Ok(None)` once the gateway ended
    /// the stream OK.
    ///
    /// # Errors
    /// The status the stream ended with.
    ///
    /// # Cancellation safety
    /// Cancellation safe: a message is never lost by dropping this future.
    pub async fn message(&mut self) -> Result<Option<Resp>, Status> {
        self.responses.message().await
    }

    /// When the transport took the first request (see [`FirstTaken`]); empty until it has.
    pub fn first_taken(&self) -> FirstTaken {
        self.first_taken.clone()
    }

    /// Cancelling this ends the request side whoever still holds a sender: a half-close, and
    /// once the response side is dropped too, the call is reset (HTTP/2 `RST_STREAM`), which is
    /// what makes the gateway release at once. Dropping only the response side resets nothing
    /// while a sender lives: the transport keeps the stream open for the requests still to
    /// come, and the gateway keeps the znode until it gives the connection up.
    pub fn request_ender(&self) -> tokio_util::sync::CancellationToken {
        self.end_requests.clone()
    }

    /// The two sides, for a caller that reads in one task and writes from another. Dropping
    /// the response side cancels the call (the gateway then deletes the znode).
    pub fn into_parts(self) -> (mpsc::Sender<Req>, Streaming<Resp>) {
        (self.requests, self.responses)
    }
}

/// The first messages go into the request buffer before the call starts, so the gateway reads
/// them with the call's headers (it refuses a stream whose first message is not a join or an
/// acquire).
fn request_buffer<Req: Send + 'static>(
    first: Vec<Req>,
) -> (
    mpsc::Sender<Req>,
    impl Stream<Item = Req> + Send + 'static,
    FirstTaken,
    tokio_util::sync::CancellationToken,
) {
    let (tx, rx) = mpsc::channel(REQUEST_BUFFER.max(first.len()));
    for m in first {
        tx.try_send(m).expect("the buffer holds the first messages");
    }
    let taken = FirstTaken::default();
    let stamp = taken.clone();
    let rx = ReceiverStream::new(rx).map(move |m| {
        stamp.get_or_init(tokio::time::Instant::now);
        m
    });
    let end = tokio_util::sync::CancellationToken::new();
    let rx = Ending {
        inner: Box::pin(rx),
        end: Box::pin(end.clone().cancelled_owned()),
    };
    (tx, rx, taken, end)
}

/// A request stream that ends when its token is cancelled (see [`Duplex::request_ender`]).
struct Ending<Req> {
    inner: std::pin::Pin<Box<dyn Stream<Item = Req> + Send>>,
    end: std::pin::Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
}

impl<Req> Stream for Ending<Req> {
    type Item = Req;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Req>> {
        if std::future::Future::poll(self.end.as_mut(), cx).is_ready() {
            return std::task::Poll::Ready(None);
        }
        self.inner.as_mut().poll_next(cx)
    }
}

impl CampaignStream {
    /// Starts `Campaign` on `channel` with `first` as its first requests (normally one join).
    ///
    /// # Errors
    /// The status the call was refused with (`UNAVAILABLE` when the gateway is unreachable).
    pub async fn open(
        channel: Channel,
        first: impl IntoIterator<Item = pb::CampaignRequest>,
    ) -> Result<Self, Status> {
        Self::open_with(&mut ElectionClient::new(channel), first).await
    }

    /// [`CampaignStream::open`] through a stub the caller also uses for other calls.
    ///
    /// # Errors
    /// As [`CampaignStream::open`].
    pub async fn open_with(
        client: &mut ElectionClient<Channel>,
        first: impl IntoIterator<Item = pb::CampaignRequest>,
    ) -> Result<Self, Status> {
        let (requests, rx, first_taken, end_requests) = request_buffer(first.into_iter().collect());
        let responses = client.campaign(rx).await?.into_inner();
        Ok(Duplex {
            requests,
            responses,
            first_taken,
            end_requests,
        })
    }

    /// [`CampaignStream::open`] with the metadata of `meta` (a bearer token: the body is
    /// ignored).
    ///
    /// # Errors
    /// As [`CampaignStream::open`].
    pub async fn open_request(
        channel: Channel,
        first: impl IntoIterator<Item = pb::CampaignRequest>,
        meta: tonic::Request<()>,
    ) -> Result<Self, Status> {
        let (requests, rx, first_taken, end_requests) = request_buffer(first.into_iter().collect());
        let (metadata, extensions, ()) = meta.into_parts();
        let request = tonic::Request::from_parts(metadata, extensions, rx);
        let responses = ElectionClient::new(channel)
            .campaign(request)
            .await?
            .into_inner();
        Ok(Duplex {
            requests,
            responses,
            first_taken,
            end_requests,
        })
    }

    /// Starts `Campaign` with `join`.
    ///
    /// # Errors
    /// As [`CampaignStream::open`].
    pub async fn join(channel: Channel, join: pb::Join) -> Result<Self, Status> {
        Self::open(channel, [campaign_request::Request::Join(join).into()]).await
    }

    /// The next event (heartbeats included); `Ok(None)` once the stream ended OK.
    ///
    /// # Errors
    /// The status the stream ended with.
    pub async fn event(&mut self) -> Result<Option<campaign_response::Event>, Status> {
        loop {
            match self.message().await? {
                None => return Ok(None),
                Some(pb::CampaignResponse { event: Some(e) }) => return Ok(Some(e)),
                // An event this version does not know.
                Some(pb::CampaignResponse { event: None }) => continue,
            }
        }
    }

    /// Sends `resign{}` without waiting; false if it could not be sent.
    pub fn resign(&self) -> bool {
        self.try_send(campaign_request::Request::Resign(pb::ResignCandidacy {}).into())
    }

    /// Sends `proclaim{value}` without waiting; false if it could not be sent.
    pub fn proclaim(&self, value: &[u8]) -> bool {
        let value = value.to_vec();
        self.try_send(campaign_request::Request::Proclaim(pb::ProclaimValue { value }).into())
    }

    /// Sends `ping{seq}` without waiting (only to a gateway whose `queued` said
    /// `answers_pings`); false if it could not be sent.
    pub fn ping(&self, seq: u64) -> bool {
        self.try_send(campaign_request::Request::Ping(pb::Ping { seq }).into())
    }
}

impl AcquireStream {
    /// Starts `Acquire` on `channel` with `first` as its first requests (normally one acquire).
    ///
    /// # Errors
    /// The status the call was refused with (`UNAVAILABLE` when the gateway is unreachable).
    pub async fn open(
        channel: Channel,
        first: impl IntoIterator<Item = pb::AcquireRequest>,
    ) -> Result<Self, Status> {
        Self::open_with(&mut LockClient::new(channel), first).await
    }

    /// [`AcquireStream::open`] through a stub the caller also uses for other calls.
    ///
    /// # Errors
    /// As [`AcquireStream::open`].
    pub async fn open_with(
        client: &mut LockClient<Channel>,
        first: impl IntoIterator<Item = pb::AcquireRequest>,
    ) -> Result<Self, Status> {
        let (requests, rx, first_taken, end_requests) = request_buffer(first.into_iter().collect());
        let responses = client.acquire(rx).await?.into_inner();
        Ok(Duplex {
            requests,
            responses,
            first_taken,
            end_requests,
        })
    }

    /// [`AcquireStream::open`] with the metadata of `meta` (a bearer token: the body is
    /// ignored).
    ///
    /// # Errors
    /// As [`AcquireStream::open`].
    pub async fn open_request(
        channel: Channel,
        first: impl IntoIterator<Item = pb::AcquireRequest>,
        meta: tonic::Request<()>,
    ) -> Result<Self, Status> {
        let (requests, rx, first_taken, end_requests) = request_buffer(first.into_iter().collect());
        let (metadata, extensions, ()) = meta.into_parts();
        let request = tonic::Request::from_parts(metadata, extensions, rx);
        let responses = LockClient::new(channel)
            .acquire(request)
            .await?
            .into_inner();
        Ok(Duplex {
            requests,
            responses,
            first_taken,
            end_requests,
        })
    }

    /// Starts `Acquire` with `acquire`.
    ///
    /// # Errors
    /// As [`AcquireStream::open`].
    pub async fn acquire(channel: Channel, acquire: pb::AcquireLock) -> Result<Self, Status> {
        Self::open(channel, [acquire_request::Request::Acquire(acquire).into()]).await
    }

    /// The next event (heartbeats included); `Ok(None)` once the stream ended OK.
    ///
    /// # Errors
    /// The status the stream ended with.
    pub async fn event(&mut self) -> Result<Option<acquire_response::Event>, Status> {
        loop {
            match self.message().await? {
                None => return Ok(None),
                Some(pb::AcquireResponse { event: Some(e) }) => return Ok(Some(e)),
                // An event this version does not know.
                Some(pb::AcquireResponse { event: None }) => continue,
            }
        }
    }

    /// Sends `release{}` without waiting; false if it could not be sent.
    pub fn release(&self) -> bool {
        self.try_send(acquire_request::Request::Release(pb::ReleaseLock {}).into())
    }

    /// Sends `keep_alive{}` (renews a ttl lease) without waiting; false if it could not be
    /// sent.
    pub fn keep_alive(&self) -> bool {
        self.try_send(acquire_request::Request::KeepAlive(pb::KeepAlive {}).into())
    }

    /// Sends `ping{seq}` without waiting (only to a gateway whose `queued` said
    /// `answers_pings`); false if it could not be sent.
    pub fn ping(&self, seq: u64) -> bool {
        self.try_send(acquire_request::Request::Ping(pb::Ping { seq }).into())
    }
}

/// The hold was granted: `elected` or `acquired`.
#[derive(Debug, Clone)]
pub struct Grant {
    pub fencing_token: u64,
    /// A holder that hears nothing for this long must assume it lost (the watchdog does).
    pub silence_limit: Option<Duration>,
    /// For leadership: the leader as elected, then as proclaimed.
    pub leader: Option<Leader>,
    /// The newest ping the gateway had read when it granted (0: none, or a gateway that does
    /// not answer pings): the holder's lease runs from that ping's send + `silence_limit`.
    pub ping_seq: u64,
}

/// Why the gateway sent `suspended` (its `reason`): what the holder is told to expect next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SuspendCause {
    /// The gateway lost its ZooKeeper link: `resumed` may follow, or the stream ends `ABORTED`.
    Connection,
    /// The gateway drains for shutdown: the stream ends `UNAVAILABLE`.
    Drain,
    /// A lock's ttl lapsed without `keep_alive`: the stream ends `ABORTED`.
    LeaseExpired,
    /// A `Resign`/`Release` with this hold's lease asked the gateway to end it: stop, then end
    /// the stream; it ends `OK`.
    EndRequested,
    /// A policy reload withdrew the caller's right to the name: the stream ends
    /// `PERMISSION_DENIED`.
    RightWithdrawn,
    /// No reason this client knows: a gateway older than the field, or a newer reason.
    Unspecified,
}

impl SuspendCause {
    /// The cause a `suspended.reason` names; a value this client does not know is
    /// [`SuspendCause::Unspecified`] (a newer gateway's reason is still a suspension).
    pub fn of(reason: i32) -> Self {
        match pb::SuspendReason::try_from(reason) {
            Ok(pb::SuspendReason::Connection) => Self::Connection,
            Ok(pb::SuspendReason::Drain) => Self::Drain,
            Ok(pb::SuspendReason::LeaseExpired) => Self::LeaseExpired,
            Ok(pb::SuspendReason::EndRequested) => Self::EndRequested,
            Ok(pb::SuspendReason::RightWithdrawn) => Self::RightWithdrawn,
            Ok(pb::SuspendReason::Unspecified) | Err(_) => Self::Unspecified,
        }
    }

    /// A stable lower-case name (`connection`, `drain`, `lease_expired`, `end_requested`,
    /// `right_withdrawn`, `unspecified`), for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connection => "connection",
            Self::Drain => "drain",
            Self::LeaseExpired => "lease_expired",
            Self::EndRequested => "end_requested",
            Self::RightWithdrawn => "right_withdrawn",
            Self::Unspecified => "unspecified",
        }
    }
}

/// An event of either stream in one vocabulary: what the helpers (and the test recorder) act
/// on, with the durations decoded.
#[derive(Debug, Clone)]
pub enum Update {
    /// Always first: the znode exists, `position` members are ahead.
    Queued {
        lease: String,
        position: u32,
        /// The gateway answers `ping{seq}` (`queued.answers_pings`).
        answers_pings: bool,
        /// The silence limit a grant would carry now (a waiter pings every third of it).
        silence_limit: Option<Duration>,
    },
    /// `elected` / `acquired`.
    Granted(Grant),
    Suspended {
        stop_within: Option<Duration>,
        /// Why, as the gateway said (`suspended.reason`).
        cause: SuspendCause,
    },
    Resumed,
    /// The leader's value changed (Campaign only).
    Proclaimed(Leader),
    /// `seq`: the ping it answers; 0 for an unsolicited heartbeat.
    Heartbeat {
        seq: u64,
    },
}

impl From<campaign_response::Event> for Update {
    fn from(e: campaign_response::Event) -> Self {
        use campaign_response::Event;
        match e {
            Event::Queued(q) => Update::Queued {
                lease: q.lease,
                position: q.position,
                answers_pings: q.answers_pings,
                silence_limit: duration(q.silence_limit),
            },
            Event::Elected(e) => {
                let leader = e.leader.unwrap_or_default();
                Update::Granted(Grant {
                    fencing_token: leader.fencing_token,
                    silence_limit: duration(e.silence_limit),
                    leader: Some(leader),
                    ping_seq: e.ping_seq,
                })
            }
            Event::Suspended(s) => Update::Suspended {
                cause: SuspendCause::of(s.reason),
                stop_within: duration(s.stop_within),
            },
            Event::Resumed(_) => Update::Resumed,
            Event::Proclaimed(p) => Update::Proclaimed(p.leader.unwrap_or_default()),
            Event::Heartbeat(h) => Update::Heartbeat { seq: h.seq },
        }
    }
}

impl From<acquire_response::Event> for Update {
    fn from(e: acquire_response::Event) -> Self {
        use acquire_response::Event;
        match e {
            Event::Queued(q) => Update::Queued {
                lease: q.lease,
                position: q.position,
                answers_pings: q.answers_pings,
                silence_limit: duration(q.silence_limit),
            },
            Event::Acquired(a) => Update::Granted(Grant {
                fencing_token: a.fencing_token,
                silence_limit: duration(a.silence_limit),
                leader: None,
                ping_seq: a.ping_seq,
            }),
            Event::Suspended(s) => Update::Suspended {
                cause: SuspendCause::of(s.reason),
                stop_within: duration(s.stop_within),
            },
            Event::Resumed(_) => Update::Resumed,
            Event::Heartbeat(h) => Update::Heartbeat { seq: h.seq },
        }
    }
}

/// A response message of either call: one event, or none when it is one this version does
/// not know.
pub trait Response {
    fn into_update(self) -> Option<Update>;
}

impl Response for pb::CampaignResponse {
    fn into_update(self) -> Option<Update> {
        self.event.map(Update::from)
    }
}

impl Response for pb::AcquireResponse {
    fn into_update(self) -> Option<Update> {
        self.event.map(Update::from)
    }
}

/// A response stream decoded into [`Update`]s (unknown events skipped), ending with the
/// call's status if it is not OK.
pub fn updates<M>(responses: Streaming<M>) -> impl Stream<Item = Result<Update, Status>> + Send
where
    M: Response + Send + 'static,
{
    responses.filter_map(|m| match m {
        Err(s) => Some(Err(s)),
        Ok(m) => m.into_update().map(Ok),
    })
}

/// A protobuf duration as a std one; `None` when absent or negative.
pub fn duration(d: Option<prost_types::Duration>) -> Option<Duration> {
    d.and_then(|d| Duration::try_from(d).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ping 1 counts from when the transport takes the first request, not from before a
    /// connection that may take long (a cold client): stamped on the first poll, once.
    #[tokio::test(start_paused = true)]
    async fn the_first_request_is_stamped_when_the_transport_takes_it() {
        let (_tx, rx, taken, _) = request_buffer(vec![1u32, 2]);
        tokio::pin!(rx);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(taken.get().is_none(), "not before the transport takes it");
        let took = tokio::time::Instant::now();
        assert_eq!(rx.next().await, Some(1));
        assert_eq!(taken.get().copied(), Some(took));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(rx.next().await, Some(2));
        assert_eq!(taken.get().copied(), Some(took), "the first one only");
    }

    #[test]
    fn first_messages_fit_however_many() {
        let first: Vec<u32> = (0..(REQUEST_BUFFER as u32 + 5)).collect();
        let (tx, _rx, _, _) = request_buffer(first);
        assert_eq!(tx.max_capacity(), REQUEST_BUFFER + 5);
        assert_eq!(tx.capacity(), 0);
    }

    #[test]
    fn updates_decode_durations_and_tokens() {
        let e = campaign_response::Event::Elected(pb::Elected {
            ping_seq: Default::default(),
            leader: Some(Leader {
                fencing_token: 42,
                ..Default::default()
            }),
            silence_limit: Some(prost_types::Duration {
                seconds: 3,
                nanos: 0,
            }),
        });
        match Update::from(e) {
            Update::Granted(g) => {
                assert_eq!(g.fencing_token, 42);
                assert_eq!(g.silence_limit, Some(Duration::from_secs(3)));
                assert!(g.leader.is_some());
            }
            other => panic!("{other:?}"),
        }
        let a = acquire_response::Event::Suspended(pb::Suspended {
            stop_within: Some(prost_types::Duration {
                seconds: -1,
                nanos: 0,
            }),
            ..Default::default()
        });
        assert!(matches!(
            Update::from(a),
            Update::Suspended {
                stop_within: None,
                cause: SuspendCause::Unspecified
            }
        ));
        // A by-lease end says so (reason END_REQUESTED).
        let e = campaign_response::Event::Suspended(pb::Suspended {
            stop_within: Some(prost_types::Duration {
                seconds: 1,
                nanos: 0,
            }),
            reason: pb::SuspendReason::EndRequested.into(),
        });
        assert!(matches!(
            Update::from(e),
            Update::Suspended {
                stop_within: Some(_),
                cause: SuspendCause::EndRequested
            }
        ));
    }

    #[test]
    fn each_suspend_reason_is_its_own_cause() {
        use pb::SuspendReason as R;
        let cases = [
            (R::Unspecified as i32, SuspendCause::Unspecified),
            (R::Connection as i32, SuspendCause::Connection),
            (R::Drain as i32, SuspendCause::Drain),
            (R::LeaseExpired as i32, SuspendCause::LeaseExpired),
            (R::EndRequested as i32, SuspendCause::EndRequested),
            (R::RightWithdrawn as i32, SuspendCause::RightWithdrawn),
            (99, SuspendCause::Unspecified),
            (-1, SuspendCause::Unspecified),
        ];
        for (reason, want) in cases {
            let got = Update::from(lock_suspended(reason));
            assert!(
                matches!(got, Update::Suspended { cause, .. } if cause == want),
                "reason {reason}: {got:?}"
            );
        }
    }

    fn lock_suspended(reason: i32) -> acquire_response::Event {
        acquire_response::Event::Suspended(pb::Suspended {
            stop_within: None,
            reason,
        })
    }
}
