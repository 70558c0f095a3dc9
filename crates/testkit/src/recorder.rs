//! A recording client: one Campaign or Acquire stream (the client crate's raw streams) on its own
//! connection, every event logged with the instant it arrived, for the
//! [`checker`](crate::checker). Both services map onto the same events (`elected` and `acquired` are both `Granted`), so scenarios and the
//! checker treat elections and locks alike.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use tonic::transport::Endpoint;
use zkgate::proto as pb;
use zkgate::proto::acquire_request::Request as LockReq;
use zkgate::proto::campaign_request::Request as Req;
use zkgate_client::raw::{self, AcquireStream, CampaignStream, Update};

use crate::checker::{Ev, StreamLog};

static NEXT_STREAM: AtomicU64 = AtomicU64::new(1);

/// The request side of the stream: `resign{}` or `release{}` ends it.
#[derive(Debug)]
enum Requests {
    Campaign(mpsc::Sender<pb::CampaignRequest>),
    Acquire(mpsc::Sender<pb::AcquireRequest>),
}

fn resign() -> pb::CampaignRequest {
    Req::Resign(pb::ResignCandidacy {}).into()
}

fn release() -> pb::AcquireRequest {
    LockReq::Release(pb::ReleaseLock {}).into()
}

impl Requests {
    fn try_leave(&self) -> bool {
        match self {
            Requests::Campaign(tx) => tx.try_send(resign()).is_ok(),
            Requests::Acquire(tx) => tx.try_send(release()).is_ok(),
        }
    }

    async fn leave(&self) {
        let _ = match self {
            Requests::Campaign(tx) => tx.send(resign()).await.is_ok(),
            Requests::Acquire(tx) => tx.send(release()).await.is_ok(),
        };
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

/// The checker's event for one update of either stream.
fn event(u: Update) -> Ev {
    match u {
        Update::Queued { position, .. } => Ev::Queued { position },
        Update::Granted(g) => Ev::Granted {
            token: g.fencing_token,
            silence_limit: g.silence_limit.unwrap_or_default(),
        },
        Update::Suspended { stop_within, .. } => Ev::Suspended {
            stop_within: stop_within.unwrap_or_default(),
        },
        Update::Resumed => Ev::Resumed,
        Update::Proclaimed(leader) => Ev::Proclaimed {
            token: leader.fencing_token,
        },
        Update::Heartbeat { .. } => Ev::Heartbeat,
    }
}

/// Reads the stream's first update, which must be `queued`, logs it and hands the rest of the
/// stream to a task that logs every update until the end; the lease and the task.
async fn record<M>(
    responses: tonic::Streaming<M>,
    url: &str,
    log: &watch::Sender<StreamLog>,
    channel: tonic::transport::Channel,
) -> Result<(String, JoinHandle<()>), String>
where
    M: raw::Response + Send + 'static,
{
    let mut updates = Box::pin(raw::updates(responses));
    let first = tokio::time::timeout(Duration::from_secs(10), updates.next())
        .await
        .map_err(|_| format!("no queued from {url} in time"))?;
    let lease = match first {
        Some(Ok(Update::Queued {
            lease, position, ..
        })) => {
            log.send_modify(|l| l.events.push((Instant::now(), Ev::Queued { position })));
            lease
        }
        other => return Err(format!("first event from {url} was {other:?}, not queued")),
    };
    let writer = log.clone();
    let task = tokio::spawn(async move {
        let _channel = channel; // keeps the connection
        loop {
            let ev = match updates.next().await {
                Some(Ok(u)) => event(u),
                None => Ev::Ended {
                    code: None,
                    message: String::new(),
                },
                Some(Err(s)) => Ev::Ended {
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
    });
    Ok((lease, task))
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
        Self::acquire_with(
            url,
            pb::AcquireLock {
                name: lock.into(),
                owner: name.into(),
                permits,
                ..Default::default()
            },
            via,
        )
        .await
    }

    /// [`StreamClient::acquire`] with any `acquire{…}` (a ttl, a wait timeout, a mode).
    ///
    /// # Errors
    /// As [`StreamClient::acquire`].
    pub async fn acquire_with(url: &str, a: pb::AcquireLock, via: &str) -> Result<Self, String> {
        let (lock, name) = (a.name.clone(), a.owner.clone());
        let (lock, name) = (lock.as_str(), name.as_str());
        let channel = connect(url).await?;
        let open = AcquireStream::acquire(channel.clone(), a);
        let id = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
        let log = new_log(id, name, lock, via);
        let (tx, responses) = tokio::time::timeout(Duration::from_secs(10), open)
            .await
            .map_err(|_| format!("Acquire on {url} timed out"))?
            .map_err(|s| format!("Acquire on {url}: {s}"))?
            .into_parts();
        let (lease, task) = record(responses, url, &log, channel).await?;
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
        let channel = connect(url).await?;
        let open = CampaignStream::join(
            channel.clone(),
            pb::Join {
                ping_seq: 0,
                election: election.into(),
                candidate: name.into(),
                value: name.as_bytes().to_vec(),
            },
        );
        let id = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
        let log = new_log(id, name, election, via);
        let (tx, responses) = tokio::time::timeout(within, open)
            .await
            .map_err(|_| format!("Campaign on {url} timed out"))?
            .map_err(|s| format!("Campaign on {url}: {s}"))?
            .into_parts();
        let (lease, task) = record(responses, url, &log, channel).await?;
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

    /// Sends `keep_alive{}` on an Acquire stream every `period` from a task of its own, until
    /// the task is aborted or the request side closes (`None` on a Campaign stream).
    pub fn keep_alive_every(&self, period: Duration) -> Option<JoinHandle<()>> {
        let Some(Requests::Acquire(tx)) = &self.requests else {
            return None;
        };
        let tx = tx.clone();
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            loop {
                tick.tick().await;
                if tx
                    .send(LockReq::KeepAlive(pb::KeepAlive {}).into())
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }))
    }

    /// Sends `keep_alive{}` on an Acquire stream without waiting (false if the request side is
    /// full or closed, or this is a Campaign stream).
    pub fn try_keep_alive(&self) -> bool {
        match &self.requests {
            Some(Requests::Acquire(tx)) => tx
                .try_send(LockReq::KeepAlive(pb::KeepAlive {}).into())
                .is_ok(),
            _ => false,
        }
    }

    /// Sends `proclaim{value}` on a Campaign stream without waiting (false if the request side
    /// is full or closed, or this is an Acquire stream).
    pub fn try_proclaim(&self, value: &[u8]) -> bool {
        match &self.requests {
            Some(Requests::Campaign(tx)) => tx
                .try_send(
                    Req::Proclaim(pb::ProclaimValue {
                        value: value.to_vec(),
                    })
                    .into(),
                )
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
