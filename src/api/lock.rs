//! The Lock service: stream plumbing and conversions around `coord::lock`.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::convert;
use super::error::invalid;
use crate::coord::lock::{AcquireSpec, LockEnd, LockEvent, LockHold, LockMode};
use crate::coord::types::{FencingToken, MemberInfo, Participant, QueueKind};
use crate::coord::{CoordError, Coordinator};
use crate::proto as pb;
use crate::proto::acquire_request::Request as AcquireMsg;
use crate::proto::acquire_response::Event;
use crate::proto::lock_server::Lock;

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Serves `zkgate.v1.Lock`.
#[derive(Debug, Clone)]
pub struct LockApi {
    coord: Arc<Coordinator>,
}

impl LockApi {
    pub fn new(coord: Arc<Coordinator>) -> Self {
        Self { coord }
    }
}

/// A duration field: unset stays unset; negative is `INVALID_ARGUMENT`.
fn duration_field(
    field: &'static str,
    d: Option<prost_types::Duration>,
) -> Result<Option<Duration>, Status> {
    d.map(|d| {
        Duration::try_from(d).map_err(|_| {
            Status::invalid_argument(format!("{field} must not be negative (got {d})"))
        })
    })
    .transpose()
}

fn lock_mode(mode: i32) -> Result<LockMode, Status> {
    match pb::LockMode::try_from(mode) {
        Ok(pb::LockMode::Write) => Ok(LockMode::Write),
        Ok(pb::LockMode::Read) => Ok(LockMode::Read),
        Err(_) => Err(Status::invalid_argument(format!(
            "mode {mode} is not a LockMode: use LOCK_MODE_WRITE (0) or LOCK_MODE_READ (1)"
        ))),
    }
}

fn pb_mode(mode: LockMode) -> pb::LockMode {
    match mode {
        LockMode::Write => pb::LockMode::Write,
        LockMode::Read => pb::LockMode::Read,
    }
}

/// Validates `acquire{…}` at the edge.
fn acquire_spec(a: pb::AcquireLock) -> Result<AcquireSpec, Status> {
    AcquireSpec::new(
        convert::queue_name(a.name, "name")?,
        Participant::new("owner", a.owner).map_err(invalid)?,
        a.permits,
        lock_mode(a.mode)?,
        duration_field("wait_timeout", a.wait_timeout)?,
        duration_field("ttl", a.ttl)?,
    )
    .map_err(invalid)
}

fn holder(h: MemberInfo) -> pb::Holder {
    pb::Holder {
        owner: h.participant,
        fencing_token: h.fencing_token.0,
        since: h.leader_since.map(Into::into),
        mode: pb_mode(LockMode::of_letter(h.mode)).into(),
    }
}

fn event(e: Event) -> Result<pb::AcquireResponse, Status> {
    Ok(pb::AcquireResponse { event: Some(e) })
}

/// Gives up a hold whose stream must end with `status`: the znode is gone before the client
/// hears it.
async fn release_then(hold: LockHold, status: Status) -> Result<pb::AcquireResponse, Status> {
    if let Err(e) = hold.release().await {
        tracing::debug!(error = %e, "releasing an expired lock request failed; the session's end will remove it");
    }
    Err(status)
}

/// Drives one Acquire stream until it ends. The hold lives in this task: when the task ends
/// for any reason the hold is dropped and its znode deleted (G3).
async fn drive_acquire(
    mut hold: LockHold,
    mut inbound: Streaming<pb::AcquireRequest>,
    tx: mpsc::Sender<Result<pb::AcquireResponse, Status>>,
    coord: Arc<Coordinator>,
) {
    let draining = coord.draining();
    let silence = hold.silence_limit();
    let lease = hold.lease().encode();
    let queued = pb::Queued {
        lease: lease.clone(),
        position: hold.position(),
    };
    if tx.send(event(Event::Queued(queued))).await.is_err() {
        return;
    }
    let mut heartbeat = tokio::time::interval((silence / 3).max(Duration::from_millis(50)));
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut inbound_open = true;
    loop {
        let out = tokio::select! {
            biased;
            _ = draining.cancelled() => Some(Err(Status::from(CoordError::Draining))),
            _ = tx.closed() => return,
            ev = hold.next_event() => match ev {
                LockEvent::Acquired(a) => {
                    heartbeat.reset();
                    Some(event(Event::Acquired(pb::Acquired {
                        lease: lease.clone(),
                        fencing_token: a.fencing_token.0,
                        silence_limit: Some(convert::duration(silence)),
                    })))
                }
                LockEvent::Suspended { stop_within } => Some(event(Event::Suspended(pb::Suspended {
                    stop_within: Some(convert::duration(stop_within)),
                }))),
                LockEvent::Resumed => Some(event(Event::Resumed(pb::Resumed {}))),
                LockEvent::WaitExpired(wait) => {
                    let status = Status::from(CoordError::DeadlineExceeded(format!(
                        "lock {:?} was not acquired within wait_timeout {wait:?}; the request was withdrawn",
                        hold.name().as_str()
                    )));
                    let _ = tx.send(release_then(hold, status).await).await;
                    return;
                }
                LockEvent::LeaseExpired(ttl) => {
                    let status = Status::aborted(format!(
                        "lease expired: no keep_alive within ttl {ttl:?}; lock {:?} was released",
                        hold.name().as_str()
                    ));
                    let _ = tx.send(release_then(hold, status).await).await;
                    return;
                }
                LockEvent::Ended(LockEnd::Released) => return,
                LockEvent::Ended(LockEnd::Lost(reason)) => Some(Err(Status::from(CoordError::SessionLost(reason)))),
            },
            msg = inbound.message(), if inbound_open => match msg {
                Ok(Some(pb::AcquireRequest { request: Some(AcquireMsg::KeepAlive(_)) })) => {
                    hold.keep_alive();
                    None
                }
                Ok(Some(pb::AcquireRequest { request: Some(AcquireMsg::Release(_)) })) => {
                    if let Err(e) = hold.release().await {
                        let _ = tx.send(Err(Status::from(e))).await;
                    }
                    return;
                }
                Ok(Some(pb::AcquireRequest { request: Some(AcquireMsg::Acquire(_)) })) => {
                    Some(Err(Status::invalid_argument("acquire may only be the first message of an Acquire stream")))
                }
                Ok(Some(pb::AcquireRequest { request: None })) => {
                    Some(Err(Status::invalid_argument("empty AcquireRequest: set keep_alive or release")))
                }
                // Half-close (grpcurl -d does this): the hold stays (a ttl then runs out).
                Ok(None) => {
                    inbound_open = false;
                    None
                }
                // Cancelled or broken: stream loss is release.
                Err(_) => return,
            },
            // No heartbeat on a stale view of the link (see `ZkSession::may_heartbeat`).
            _ = heartbeat.tick(), if hold.is_held() => hold.may_heartbeat().then(|| event(Event::Heartbeat(pb::Heartbeat {}))),
        };
        if let Some(out) = out {
            let end = out.is_err();
            if tx.send(out).await.is_err() || end {
                return;
            }
        }
    }
}

#[tonic::async_trait]
impl Lock for LockApi {
    type AcquireStream = BoxStream<pb::AcquireResponse>;

    async fn acquire(
        &self,
        request: Request<Streaming<pb::AcquireRequest>>,
    ) -> Result<Response<Self::AcquireStream>, Status> {
        let mut inbound = request.into_inner();
        let first = inbound.message().await?.ok_or_else(|| {
            Status::invalid_argument("Acquire stream closed before its first message (acquire)")
        })?;
        let spec = match first.request {
            Some(AcquireMsg::Acquire(a)) => acquire_spec(a)?,
            _ => {
                return Err(Status::invalid_argument(
                    "the first Acquire message must be acquire{name, owner, permits, mode, wait_timeout, ttl}",
                ))
            }
        };
        // Queue in a task of its own: if the client goes away while the znode is being made,
        // this handler is dropped, but the task still finishes, finds the stream closed and
        // drops the hold, which deletes the znode (no orphan until the session's end).
        let (tx, rx) = mpsc::channel(16);
        let (started_tx, started_rx) = oneshot::channel();
        let coord = self.coord.clone();
        tokio::spawn(async move {
            match coord.acquire(spec).await {
                Ok(hold) => {
                    let _ = started_tx.send(Ok(()));
                    drive_acquire(hold, inbound, tx, coord).await;
                }
                Err(e) => {
                    let _ = started_tx.send(Err(Status::from(e)));
                }
            }
        });
        started_rx
            .await
            .map_err(|_| Status::internal("the lock request's task ended unexpectedly"))??;
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let lease = convert::lease(&request.into_inner().lease, QueueKind::Lock)?;
        self.coord.release(&lease).await?;
        Ok(Response::new(pb::ReleaseResponse {}))
    }

    async fn holders(
        &self,
        request: Request<pb::HoldersRequest>,
    ) -> Result<Response<pb::HoldersResponse>, Status> {
        let name = convert::queue_name(request.into_inner().name, "name")?;
        let h = self.coord.holders(&name).await?;
        Ok(Response::new(pb::HoldersResponse {
            holders: h.holders.into_iter().map(holder).collect(),
            waiting: h.waiting,
        }))
    }

    async fn validate(
        &self,
        request: Request<pb::LockValidateRequest>,
    ) -> Result<Response<pb::LockValidateResponse>, Status> {
        let r = request.into_inner();
        let name = convert::queue_name(r.name, "name")?;
        let current = self
            .coord
            .validate_holder(&name, FencingToken(r.fencing_token))
            .await?;
        Ok(Response::new(pb::LockValidateResponse { current }))
    }
}
