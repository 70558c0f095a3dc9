//! A recording client: one Campaign or Acquire stream on its own connection, every event
//! logged with the instant it arrived, for the [`checker`](crate::checker). Both services map
//! onto the same events (`elected` and `acquired` are both `Granted`), so scenarios and the
//! checker treat elections and locks alike.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;
use zkgate::proto as pb;
use zkgate::proto::acquire_request::Request as LockReq;
use zkgate::proto::acquire_response::Event as LockEvent;
use zkgate::proto::campaign_request::Request as Req;
use zkgate::proto::campaign_response::Event;
use zkgate::proto::election_client::ElectionClient;
use zkgate::proto::lock_client::LockClient;

use crate::checker::{Ev, StreamLog};

static NEXT_STREAM: AtomicU64 = AtomicU64::new(1);

/// The request side of the stream: `resign{}` or `release{}` ends it.
#[derive(Debug)]
enum Requests {
    Campaign(mpsc::Sender<pb::CampaignRequest>),
    Acquire(mpsc::Sender<pb::AcquireRequest>),
}

impl Requests {
    fn try_leave(&self) -> bool {
        match self {
            Requests::Campaign(tx) => tx
                .try_send(pb::CampaignRequest {
                    request: Some(Req::Resign(pb::ResignCandidacy {})),
                })
                .is_ok(),
            Requests::Acquire(tx) => tx
                .try_send(pb::AcquireRequest {
                    request: Some(LockReq::Release(pb::ReleaseLock {})),
                })
                .is_ok(),
        }
    }

    async fn leave(&self) {
        match self {
            Requests::Campaign(tx) => {
                let _ = tx
                    .send(pb::CampaignRequest {
                        request: Some(Req::Resign(pb::ResignCandidacy {})),
                    })
                    .await;
            }
            Requests::Acquire(tx) => {
                let _ = tx
                    .send(pb::AcquireRequest {
                        request: Some(LockReq::Release(pb::ReleaseLock {})),
                    })
                    .await;
            }
        }
    }
}

/// One candidate (Campaign) or lock requester (Acquire): a stream over a connection of its own
/// (so cutting its link cuts nobody else's).
#[derive(Debug)]
pub struct StreamClient {
    pub id: u64,
    pub name: String,
    /// The election or lock name.
    pub election: String,
    pub lease: String,
    log: watch::Sender<StreamLog>,
    requests: Option<Requests>,
    task: JoinHandle<()>,
}

fn to_duration(d: Option<prost_types::Duration>) -> Duration {
    d.and_then(|d| Duration::try_from(d).ok())
        .unwrap_or_default()
}

async fn connect(url: &str) -> Result<tonic::transport::Channel, String> {
    let channel = Endpoint::from_shared(url.to_owned())
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(2))
        .tcp_nodelay(true);
    tokio::time::timeout(Duration::from_secs(5), channel.connect())
        .await
        .map_err(|_| format!("connecting to {url} timed out"))?
        .map_err(|e| format!("connecting to {url}: {e}"))
}

fn new_log(id: u64, name: &str, resource: &str, via: &str) -> watch::Sender<StreamLog> {
    watch::channel(StreamLog {
        id,
        client: name.into(),
        resource: resource.into(),
        via: via.into(),
        events: Vec::new(),
    })
    .0
}

/// Reads the stream's first message, which must be `queued` (`queued` gives its position and
/// lease), logs it and returns the lease; later messages are read by [`record`].
async fn read_queued<M: std::fmt::Debug>(
    stream: &mut tonic::Streaming<M>,
    url: &str,
    log: &watch::Sender<StreamLog>,
    queued: fn(&M) -> Option<(u32, String)>,
) -> Result<String, String> {
    let first = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .map_err(|_| format!("no queued from {url} in time"))?;
    match first {
        Ok(Some(m)) => match queued(&m) {
            Some((position, lease)) => {
                log.send_modify(|l| l.events.push((Instant::now(), Ev::Queued { position })));
                Ok(lease)
            }
            None => Err(format!("first event from {url} was {m:?}, not queued")),
        },
        other => Err(format!("first event from {url} was {other:?}, not queued")),
    }
}

/// Records the stream's messages (already mapped by `map`) until it ends.
fn record<M: Send + 'static>(
    mut stream: tonic::Streaming<M>,
    writer: watch::Sender<StreamLog>,
    map: fn(M) -> Option<Ev>,
    keep: impl Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let _keep = keep; // the client, which keeps the connection
        loop {
            let ev = match stream.message().await {
                Ok(Some(m)) => match map(m) {
                    Some(ev) => ev,
                    None => continue,
                },
                Ok(None) => Ev::Ended {
                    code: None,
                    message: String::new(),
                },
                Err(s) => Ev::Ended {
                    code: Some(s.code()),
                    message: s.message().to_owned(),
                },
            };
            let end = ev.is_end();
            writer.send_modify(|l| l.events.push((Instant::now(), ev)));
            if end {
                return;
            }
        }
    })
}

fn campaign_event(m: pb::CampaignResponse) -> Option<Ev> {
    Some(match m.event? {
        Event::Queued(q) => Ev::Queued {
            position: q.position,
        },
        Event::Elected(e) => Ev::Granted {
            token: e.leader.map_or(0, |l| l.fencing_token),
            silence_limit: to_duration(e.silence_limit),
        },
        Event::Suspended(s) => Ev::Suspended {
            stop_within: to_duration(s.stop_within),
        },
        Event::Resumed(_) => Ev::Resumed,
        Event::Proclaimed(p) => Ev::Proclaimed {
            token: p.leader.map_or(0, |l| l.fencing_token),
        },
        Event::Heartbeat(_) => Ev::Heartbeat,
    })
}

fn acquire_event(m: pb::AcquireResponse) -> Option<Ev> {
    Some(match m.event? {
        LockEvent::Queued(q) => Ev::Queued {
            position: q.position,
        },
        LockEvent::Acquired(a) => Ev::Granted {
            token: a.fencing_token,
            silence_limit: to_duration(a.silence_limit),
        },
        LockEvent::Suspended(s) => Ev::Suspended {
            stop_within: to_duration(s.stop_within),
        },
        LockEvent::Resumed(_) => Ev::Resumed,
        LockEvent::Heartbeat(_) => Ev::Heartbeat,
    })
}

impl StreamClient {
    /// Connects to `url`, asks for `permits` of lock `lock` (1 = a mutex, waiting as long as it
    /// takes, no ttl) and waits for `queued`. `via` names the path for reports.
    ///
    /// # Errors
    /// A sentence saying what failed (connect, the call, or the first event).
    pub async fn acquire(
        url: &str,
        lock: &str,
        name: &str,
        permits: u32,
        via: &str,
    ) -> Result<Self, String> {
        let mut client = LockClient::new(connect(url).await?);
        let (tx, rx) = mpsc::channel(16);
        tx.send(pb::AcquireRequest {
            request: Some(LockReq::Acquire(pb::AcquireLock {
                name: lock.into(),
                owner: name.into(),
                permits,
                ..Default::default()
            })),
        })
        .await
        .map_err(|_| "request channel closed".to_owned())?;
        let id = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
        let log = new_log(id, name, lock, via);
        let mut stream = tokio::time::timeout(
            Duration::from_secs(10),
            client.acquire(ReceiverStream::new(rx)),
        )
        .await
        .map_err(|_| format!("Acquire on {url} timed out"))?
        .map_err(|s| format!("Acquire on {url}: {s}"))?
        .into_inner();
        let lease = read_queued(&mut stream, url, &log, |m| match &m.event {
            Some(LockEvent::Queued(q)) => Some((q.position, q.lease.clone())),
            _ => None,
        })
        .await?;
        let task = record(stream, log.clone(), acquire_event, client);
        Ok(StreamClient {
            id,
            name: name.into(),
            election: lock.into(),
            lease,
            log,
            requests: Some(Requests::Acquire(tx)),
            task,
        })
    }

    /// Connects to `url` (a gateway, or a link cutter in front of one), joins `election` and
    /// waits for `queued`. `via` names the path for reports.
    ///
    /// # Errors
    /// A sentence saying what failed (connect, the call, or the first event).
    pub async fn join(url: &str, election: &str, name: &str, via: &str) -> Result<Self, String> {
        Self::join_within(url, election, name, via, Duration::from_secs(10)).await
    }

    /// [`StreamClient::join`], giving up (cancelling the RPC) if the gateway has not answered
    /// the call within `within`.
    ///
    /// # Errors
    /// As [`StreamClient::join`].
    pub async fn join_within(
        url: &str,
        election: &str,
        name: &str,
        via: &str,
        within: Duration,
    ) -> Result<Self, String> {
        let mut client = ElectionClient::new(connect(url).await?);
        let (tx, rx) = mpsc::channel(16);
        tx.send(pb::CampaignRequest {
            request: Some(Req::Join(pb::Join {
                election: election.into(),
                candidate: name.into(),
                value: name.as_bytes().to_vec(),
            })),
        })
        .await
        .map_err(|_| "request channel closed".to_owned())?;
        let id = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
        let log = new_log(id, name, election, via);
        let mut stream = tokio::time::timeout(within, client.campaign(ReceiverStream::new(rx)))
            .await
            .map_err(|_| format!("Campaign on {url} timed out"))?
            .map_err(|s| format!("Campaign on {url}: {s}"))?
            .into_inner();
        let lease = read_queued(&mut stream, url, &log, |m| match &m.event {
            Some(Event::Queued(q)) => Some((q.position, q.lease.clone())),
            _ => None,
        })
        .await?;
        let task = record(stream, log.clone(), campaign_event, client);
        Ok(StreamClient {
            id,
            name: name.into(),
            election: election.into(),
            lease,
            log,
            requests: Some(Requests::Campaign(tx)),
            task,
        })
    }

    /// A live view of the log, which outlives the client.
    pub fn watch(&self) -> watch::Receiver<StreamLog> {
        self.log.subscribe()
    }

    /// Everything seen so far.
    pub fn log(&self) -> StreamLog {
        self.log.borrow().clone()
    }

    pub fn ended(&self) -> bool {
        self.log.borrow().ended().is_some()
    }

    /// Kills the client abruptly: its stream and connection are dropped without a resign
    /// (the gateway sees a cancelled stream and a closed connection).
    pub fn kill(&mut self) {
        if self.ended() {
            return;
        }
        self.log
            .send_modify(|l| l.events.push((Instant::now(), Ev::Killed)));
        self.task.abort();
        self.requests = None;
    }

    /// Sends `resign{}` (Campaign) or `release{}` (Acquire) on the stream.
    pub async fn resign(&self) {
        self.log
            .send_modify(|l| l.events.push((Instant::now(), Ev::Resigning)));
        if let Some(r) = &self.requests {
            r.leave().await;
        }
    }

    /// Sends `resign{}` without waiting (false if the request side is full or closed).
    pub fn try_resign(&self) -> bool {
        self.log
            .send_modify(|l| l.events.push((Instant::now(), Ev::Resigning)));
        self.requests.as_ref().is_some_and(Requests::try_leave)
    }

    /// Sends `proclaim{value}` on a Campaign stream without waiting (false if the request side
    /// is full or closed, or this is an Acquire stream).
    pub fn try_proclaim(&self, value: &[u8]) -> bool {
        match &self.requests {
            Some(Requests::Campaign(tx)) => tx
                .try_send(pb::CampaignRequest {
                    request: Some(Req::Proclaim(pb::ProclaimValue {
                        value: value.to_vec(),
                    })),
                })
                .is_ok(),
            _ => false,
        }
    }

    /// The first event at or after `since` (any time when `None`) matching `pred`, waiting up
    /// to `within`.
    pub async fn wait_for(
        &self,
        since: Option<Instant>,
        within: Duration,
        pred: impl Fn(&Ev) -> bool,
    ) -> Option<(Instant, Ev)> {
        let mut rx = self.log.subscribe();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            {
                let log = rx.borrow_and_update();
                let found = log
                    .events
                    .iter()
                    .find(|(t, e)| since.is_none_or(|s| *t >= s) && pred(e));
                if let Some((t, e)) = found {
                    return Some((*t, e.clone()));
                }
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return None,
            }
        }
    }

    /// Waits for `elected`; returns when it arrived and the token.
    pub async fn wait_granted(&self, within: Duration) -> Option<(Instant, u64)> {
        match self
            .wait_for(None, within, |e| matches!(e, Ev::Granted { .. }))
            .await
        {
            Some((t, Ev::Granted { token, .. })) => Some((t, token)),
            _ => None,
        }
    }

    /// Waits for the stream's end; returns when and the code (`None` = OK, `Cancelled` when
    /// the test killed it).
    pub async fn wait_end(&self, within: Duration) -> Option<(Instant, Option<tonic::Code>)> {
        match self.wait_for(None, within, Ev::is_end).await {
            Some((t, Ev::Ended { code, .. })) => Some((t, code)),
            Some((t, Ev::Killed)) => Some((t, Some(tonic::Code::Cancelled))),
            _ => None,
        }
    }
}

impl Drop for StreamClient {
    fn drop(&mut self) {
        self.task.abort();
    }
}
