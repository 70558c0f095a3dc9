//! A test's `Campaign` and `Acquire` streams: the client crate's raw streams
//! ([`zkgate_client::raw`]) with the waiting and asserting a test needs — every wait bounded by
//! [`STEP`], the first event checked to be `queued`, the end checked against a code.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use tonic::transport::Channel;
use tonic::{Code, Status};
use zkgate::proto as pb;
use zkgate::proto::acquire_request::Request as LockReq;
use zkgate::proto::acquire_response::Event as LockEvent;
use zkgate::proto::campaign_request::Request as Req;
use zkgate::proto::campaign_response::Event;
use zkgate::proto::election_client::ElectionClient;
use zkgate::proto::lock_client::LockClient;
pub use zkgate_client::raw::{self, AcquireStream, CampaignStream};

use crate::STEP;

/// What the helpers below must tell apart in either stream's events.
pub trait TestEvent: fmt::Debug + Send {
    fn is_heartbeat(&self) -> bool;
    /// `suspended` or `resumed`: the gateway's ZooKeeper link, not the member.
    fn is_link(&self) -> bool;
}

impl TestEvent for Event {
    fn is_heartbeat(&self) -> bool {
        matches!(self, Event::Heartbeat(_))
    }
    fn is_link(&self) -> bool {
        matches!(self, Event::Suspended(_) | Event::Resumed(_))
    }
}

impl TestEvent for LockEvent {
    fn is_heartbeat(&self) -> bool {
        matches!(self, LockEvent::Heartbeat(_))
    }
    fn is_link(&self) -> bool {
        matches!(self, LockEvent::Suspended(_) | LockEvent::Resumed(_))
    }
}

/// Either raw stream, read event by event.
pub trait EventStream: Send {
    type Event: TestEvent;
    fn next_event(&mut self) -> impl Future<Output = Result<Option<Self::Event>, Status>> + Send;
}

impl EventStream for CampaignStream {
    type Event = Event;
    fn next_event(&mut self) -> impl Future<Output = Result<Option<Event>, Status>> + Send {
        self.event()
    }
}

impl EventStream for AcquireStream {
    type Event = LockEvent;
    fn next_event(&mut self) -> impl Future<Output = Result<Option<LockEvent>, Status>> + Send {
        self.event()
    }
}

/// The next event for which `skip` is false: each event within [`STEP`], and the one wanted
/// within [`SKIPPING_AT_MOST`] however many skipped ones came before it (panics otherwise).
///
/// Why both: a stream sends heartbeats every few hundred milliseconds, so a per-event timeout
/// alone never fires while the awaited event never comes — a test waiting for a `proclaimed`
/// that was never to come read heartbeats until CI's 90 minutes ran out.
pub async fn next_unless<S: EventStream>(
    stream: &mut S,
    skip: impl Fn(&S::Event) -> bool,
) -> Result<Option<S::Event>, Status> {
    let deadline = tokio::time::Instant::now() + SKIPPING_AT_MOST;
    let mut skipped = 0usize;
    loop {
        let within = STEP.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
        let e = match tokio::time::timeout(within, stream.next_event()).await {
            Ok(e) => e?,
            Err(_) if tokio::time::Instant::now() >= deadline => panic!(
                "no wanted event within {SKIPPING_AT_MOST:?}: only {skipped} skipped ones (heartbeats, link events) came"
            ),
            Err(_) => panic!("no event within {STEP:?}"),
        };
        match e {
            Some(e) if skip(&e) => skipped += 1,
            other => return Ok(other),
        }
    }
}

/// `f`, a loop that reads a stream past heartbeats, given at most [`SKIPPING_AT_MOST`]: its
/// per-event timeouts never fire while heartbeats keep coming (see [`next_unless`]).
pub async fn skipping_at_most<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(SKIPPING_AT_MOST, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {SKIPPING_AT_MOST:?} of heartbeats"))
}

/// How long [`next_unless`] reads skipped events (heartbeats) before it gives up: far above any
/// wait a test means (a session timeout or two of a few seconds), far below CI's limit.
pub const SKIPPING_AT_MOST: Duration = Duration::from_secs(60);

/// Asserts that only events `tolerated` arrive for `d`.
pub async fn quiet_unless<S: EventStream>(
    stream: &mut S,
    d: Duration,
    tolerated: impl Fn(&S::Event) -> bool,
) {
    let deadline = tokio::time::Instant::now() + d;
    loop {
        match tokio::time::timeout_at(deadline, stream.next_event()).await {
            Err(_) => return,
            Ok(Ok(Some(e))) if tolerated(&e) => continue,
            Ok(other) => panic!("expected no event, got {other:?}"),
        }
    }
}

/// Asserts that `end` is the stream's end with `code` (OK when `None`); the status if any.
pub fn assert_end<E: fmt::Debug>(
    end: Result<Option<E>, Status>,
    code: Option<Code>,
) -> Option<Status> {
    match end {
        Ok(None) => {
            assert_eq!(code, None, "stream ended OK, expected {code:?}");
            None
        }
        Err(s) => {
            assert_eq!(Some(s.code()), code, "stream ended with {s:?}");
            Some(s)
        }
        Ok(Some(e)) => panic!("expected the stream to end, got {e:?}"),
    }
}

/// The status a stream is refused with — by the call itself or as the stream's first answer.
pub async fn refusal<S: EventStream>(open: impl Future<Output = Result<S, Status>>) -> Status {
    match open.await {
        Err(status) => status,
        Ok(mut stream) => match tokio::time::timeout(STEP, stream.next_event())
            .await
            .expect("an answer in time")
        {
            Err(status) => status,
            Ok(other) => panic!("expected a refusal, got {other:?}"),
        },
    }
}

/// A channel to `url` with small HTTP/2 flow-control windows (16 KiB per stream, 64 KiB per
/// connection): a stream on it that is never read fills its window with one large state, the
/// way a client that stops reading does.
pub async fn small_window_channel(url: &str) -> Channel {
    tonic::transport::Endpoint::from_shared(url.to_owned())
        .expect("gateway url")
        .initial_stream_window_size(Some(16 * 1024))
        .initial_connection_window_size(Some(64 * 1024))
        .connect()
        .await
        .expect("connect with small windows")
}

pub fn join_msg(election: &str, candidate: &str, value: &[u8]) -> pb::CampaignRequest {
    Req::Join(pb::Join {
        ping_seq: 0,
        election: election.into(),
        candidate: candidate.into(),
        value: value.to_vec(),
    })
    .into()
}

/// One Campaign stream, driven by the test.
pub struct Campaign {
    pub stream: CampaignStream,
    pub lease: String,
    pub position: u32,
}

impl Campaign {
    pub async fn join(
        client: &mut ElectionClient<Channel>,
        election: &str,
        candidate: &str,
        value: &[u8],
    ) -> Campaign {
        let stream = CampaignStream::open_with(client, [join_msg(election, candidate, value)])
            .await
            .expect("campaign accepted");
        Self::queued(stream).await.expect("stream ok")
    }

    /// Reads the stream's first event, which must be `queued`; the status if the stream ended
    /// instead.
    pub async fn queued(mut stream: CampaignStream) -> Result<Campaign, Status> {
        let first = tokio::time::timeout(STEP, stream.event())
            .await
            .expect("queued in time")?;
        match first {
            Some(Event::Queued(q)) => Ok(Campaign {
                stream,
                lease: q.lease,
                position: q.position,
            }),
            other => panic!("first event must be queued, got {other:?}"),
        }
    }

    /// The next event that is not a heartbeat.
    pub async fn next(&mut self) -> Result<Option<Event>, Status> {
        next_unless(&mut self.stream, Event::is_heartbeat).await
    }

    /// The next `elected`, past any suspension of the gateway's ZooKeeper link and its
    /// resumption while queued: on a loaded machine the shared ZooKeeper may answer the
    /// liveness probe late, and the member is still queued after it (G2). Any other event
    /// fails the test.
    pub async fn elected(&mut self) -> pb::Leader {
        let link = |e: &Event| {
            e.is_heartbeat()
                || matches!(e, Event::Resumed(_))
                || matches!(e, Event::Suspended(s) if s.reason == pb::SuspendReason::Connection as i32)
        };
        match next_unless(&mut self.stream, link).await {
            Ok(Some(Event::Elected(e))) => e.leader.expect("elected carries leader"),
            other => panic!("expected elected, got {other:?}"),
        }
    }

    /// Asserts that nothing but heartbeats arrives for `d`.
    pub async fn quiet_for(&mut self, d: Duration) {
        quiet_unless(&mut self.stream, d, Event::is_heartbeat).await;
    }

    pub async fn send(&self, r: Req) {
        self.stream.send(r.into()).await.expect("request side open");
    }

    /// Ends with `code` (or OK when `None`), after any suspensions and resumptions.
    pub async fn expect_end(&mut self, code: Option<Code>) {
        let end = next_unless(&mut self.stream, |e| e.is_heartbeat() || e.is_link()).await;
        assert_end(end, code);
    }
}

pub fn acquire_msg(name: &str, owner: &str) -> pb::AcquireLock {
    pb::AcquireLock {
        name: name.into(),
        owner: owner.into(),
        ..Default::default()
    }
}

/// One Acquire stream, driven by the test.
pub struct Acquisition {
    pub stream: AcquireStream,
    pub lease: String,
    pub position: u32,
}

impl Acquisition {
    /// Opens a stream with `first` messages; the call's status on refusal.
    pub async fn try_start(
        client: &mut LockClient<Channel>,
        first: Vec<pb::AcquireRequest>,
    ) -> Result<Acquisition, Status> {
        let mut stream = AcquireStream::open_with(client, first).await?;
        let first = tokio::time::timeout(STEP, stream.event())
            .await
            .expect("queued in time")?;
        match first {
            Some(LockEvent::Queued(q)) => Ok(Acquisition {
                stream,
                lease: q.lease,
                position: q.position,
            }),
            other => panic!("first event must be queued, got {other:?}"),
        }
    }

    pub async fn try_open(
        client: &mut LockClient<Channel>,
        a: pb::AcquireLock,
    ) -> Result<Acquisition, Status> {
        Self::try_start(client, vec![LockReq::Acquire(a).into()]).await
    }

    pub async fn open(client: &mut LockClient<Channel>, a: pb::AcquireLock) -> Acquisition {
        Self::try_open(client, a).await.expect("acquire accepted")
    }

    /// The next event that is not a heartbeat.
    pub async fn next_any(&mut self) -> Result<Option<LockEvent>, Status> {
        next_unless(&mut self.stream, LockEvent::is_heartbeat).await
    }

    /// The next lock event: neither a heartbeat nor a suspension and resumption (a loaded test
    /// machine can stall a ZooKeeper session for a moment; only some tests are about that).
    pub async fn next(&mut self) -> Result<Option<LockEvent>, Status> {
        next_unless(&mut self.stream, |e| e.is_heartbeat() || e.is_link()).await
    }

    pub async fn acquired(&mut self) -> pb::Acquired {
        match self.next().await {
            Ok(Some(LockEvent::Acquired(a))) => {
                assert_eq!(a.lease, self.lease, "acquired names the stream's own lease");
                assert!(a.fencing_token > 0 && a.silence_limit.is_some());
                a
            }
            other => panic!("expected acquired, got {other:?}"),
        }
    }

    /// Asserts that no lock event arrives for `d` (see [`Acquisition::next`]).
    pub async fn quiet_for(&mut self, d: Duration) {
        quiet_unless(&mut self.stream, d, |e| e.is_heartbeat() || e.is_link()).await;
    }

    pub async fn send(&self, r: LockReq) {
        self.stream.send(r.into()).await.expect("request side open");
    }

    /// Ends with `code` (or OK when `None`).
    pub async fn expect_end(&mut self, code: Option<Code>) -> Option<Status> {
        let end = self.next().await;
        assert_end(end, code)
    }

    /// In-stream release: the stream ends OK.
    pub async fn release(mut self) {
        self.send(LockReq::Release(pb::ReleaseLock {})).await;
        self.expect_end(None).await;
    }
}
