//! The Lock service: stream plumbing and conversions around `coord::lock`.

use tonic::{Request, Response, Status, Streaming};

use super::convert::{self, Converted};
use super::deps::ApiDeps;
use super::holder_stream::{self, BoxFuture, BoxStream, HolderStream, Step, Suspension, Tenant};
use super::limits::QueuePermit;
use crate::auth::{self, audit, Verb};
use crate::coord::lock::{AcquireSpec, LockEnd, LockEvent, LockHold, LockMode};
use crate::coord::member::Member;
use crate::coord::session::UnaryWork;
use crate::coord::types::{FencingToken, InvalidInput, MemberInfo, Participant, QueueKind};
use crate::coord::CoordError;
use crate::proto as pb;
use crate::proto::acquire_request::Request as AcquireMsg;
use crate::proto::acquire_response::Event;
use crate::proto::lock_server::Lock;

/// Serves `zkgate.v1.Lock`: the shared [`ApiDeps`] (reached through `Deref`) and the
/// methods below.
#[derive(Debug, Clone)]
pub struct LockApi(ApiDeps);

impl std::ops::Deref for LockApi {
    type Target = ApiDeps;

    fn deref(&self) -> &ApiDeps {
        &self.0
    }
}

impl LockApi {
    pub fn new(deps: ApiDeps) -> Self {
        Self(deps)
    }
}

fn lock_mode(mode: i32) -> Converted<LockMode> {
    match pb::LockMode::try_from(mode) {
        Ok(pb::LockMode::Write) => Ok(LockMode::Write),
        Ok(pb::LockMode::Read) => Ok(LockMode::Read),
        Err(_) => Err(InvalidInput::LockMode(mode).into()),
    }
}

fn pb_mode(mode: LockMode) -> pb::LockMode {
    match mode {
        LockMode::Write => pb::LockMode::Write,
        LockMode::Read => pb::LockMode::Read,
    }
}

/// Validates `acquire{…}` at the edge.
impl TryFrom<pb::AcquireLock> for AcquireSpec {
    type Error = CoordError;

    fn try_from(a: pb::AcquireLock) -> Converted<Self> {
        Ok(AcquireSpec::new(
            convert::queue_name(a.name, "name")?,
            Participant::new("owner", a.owner)?,
            a.permits,
            lock_mode(a.mode)?,
            convert::duration_field("wait_timeout", a.wait_timeout)?,
            convert::duration_field("ttl", a.ttl)?,
        )?)
    }
}

fn holder(h: MemberInfo) -> pb::Holder {
    pb::Holder {
        owner: h.participant,
        fencing_token: h.fencing_token.0,
        since: h.leader_since.map(Into::into),
        mode: pb_mode(LockMode::of_member(h.mode)).into(),
    }
}

fn event(e: Event) -> pb::AcquireResponse {
    pb::AcquireResponse { event: Some(e) }
}

/// An Acquire stream's own part of the shared holder-stream loop.
struct AcquireStream {
    hold: LockHold,
    /// The encoded lease, sent in `queued` and again in `acquired`.
    lease: String,
    /// The identity's place in this lock's queue (per-identity limit), for the stream's life.
    _queue: QueuePermit,
}

#[tonic::async_trait]
impl HolderStream for AcquireStream {
    type Request = pb::AcquireRequest;
    type Response = pb::AcquireResponse;

    fn queued(&self) -> pb::AcquireResponse {
        let member = self.hold.member();
        event(Event::Queued(pb::Queued {
            lease: self.lease.clone(),
            position: member.position(),
            answers_pings: true,
            silence_limit: Some(convert::duration(member.silence_limit())),
        }))
    }

    fn heartbeat(seq: u64) -> pb::AcquireResponse {
        event(Event::Heartbeat(pb::Heartbeat { seq }))
    }

    fn first_ping(first: &pb::AcquireRequest) -> u64 {
        match &first.request {
            Some(AcquireMsg::Acquire(a)) => a.ping_seq,
            _ => 0,
        }
    }

    fn ping_of(request: &pb::AcquireRequest) -> Option<u64> {
        match &request.request {
            Some(AcquireMsg::Ping(p)) => Some(p.seq),
            _ => None,
        }
    }

    fn with_ping(mut msg: pb::AcquireResponse, seq: u64) -> pb::AcquireResponse {
        if let Some(Event::Acquired(a)) = msg.event.as_mut() {
            a.ping_seq = seq;
        }
        msg
    }

    fn suspended(stop_within: std::time::Duration, why: Suspension) -> pb::AcquireResponse {
        event(Event::Suspended(convert::suspended(stop_within, why)))
    }

    fn is_leave(request: &pb::AcquireRequest) -> bool {
        matches!(request.request, Some(AcquireMsg::Release(_)))
    }

    fn member(&self) -> &Member {
        self.hold.member()
    }

    fn holds(&self) -> bool {
        self.hold.is_held()
    }

    async fn next_event(&mut self) -> Step<pb::AcquireResponse> {
        match self.hold.next_event().await {
            LockEvent::Acquired(a) => Step::Granted(
                event(Event::Acquired(pb::Acquired {
                    lease: self.lease.clone(),
                    fencing_token: a.fencing_token.0,
                    silence_limit: Some(convert::duration(self.hold.member().silence_limit())),
                    // Set by the stream's loop, which reads the pings.
                    ping_seq: 0,
                })),
                a.fencing_token.0,
            ),
            LockEvent::Suspended { stop_within } => {
                Step::Send(Self::suspended(stop_within, Suspension::Connection))
            }
            LockEvent::Resumed => Step::Send(event(Event::Resumed(pb::Resumed {}))),
            LockEvent::WaitExpired(wait) => Step::Expire(CoordError::WaitExpired {
                lock: self.hold.name().clone(),
                wait,
            }),
            // Told first, deleted later (G3c).
            LockEvent::LeaseExpired(ttl) => Step::Revoke(
                Suspension::LeaseExpired,
                Some(CoordError::LeaseExpired {
                    lock: self.hold.name().clone(),
                    ttl,
                }),
            ),
            // Told first, deleted later (G3c); then OK, a release.
            LockEvent::EndRequested => Step::Revoke(Suspension::EndRequested, None),
            LockEvent::Ended(LockEnd::Released) => Step::Done,
            LockEvent::Ended(LockEnd::Lost(reason)) => Step::Fail(CoordError::SessionLost(reason)),
            LockEvent::Ended(LockEnd::Unserved) => {
                Step::Fail(crate::coord::error::Retry::Stranded.into())
            }
        }
    }

    fn on_request(&mut self, request: pb::AcquireRequest) -> Step<pb::AcquireResponse> {
        match request.request {
            Some(AcquireMsg::KeepAlive(_)) => {
                self.hold.keep_alive();
                Step::Quiet
            }
            Some(AcquireMsg::Release(_)) => Step::Leave,
            // Taken by the stream's loop before it gets here.
            Some(AcquireMsg::Ping(_)) => Step::Quiet,
            Some(AcquireMsg::Acquire(_)) => Step::Fail(
                InvalidInput::FirstOnly {
                    what: "acquire",
                    stream: "an Acquire",
                }
                .into(),
            ),
            None => Step::Fail(
                InvalidInput::EmptyRequest {
                    message: "AcquireRequest",
                    set: "keep_alive or release",
                }
                .into(),
            ),
        }
    }

    fn begin_leave(&mut self) -> BoxFuture<Result<(), CoordError>> {
        Box::pin(self.hold.begin_release())
    }
}

#[tonic::async_trait]
impl Lock for LockApi {
    type AcquireStream = BoxStream<pb::AcquireResponse>;

    async fn acquire(
        &self,
        request: Request<Streaming<pb::AcquireRequest>>,
    ) -> Result<Response<Self::AcquireStream>, Status> {
        let coord = self.coord.clone();
        let keys = self.keys.clone();
        let tenant = Tenant {
            auth: self.auth.clone(),
            identity: auth::caller(&request),
            verb: Verb::Lock,
            admission: self.admission.clone(),
        };
        holder_stream::open(
            &self.admission,
            &self.coord,
            tenant,
            request,
            "acquire",
            |first: pb::AcquireRequest, tenant: &Tenant| {
                let (auth, identity) = (tenant.auth.clone(), tenant.identity.clone());
                let (admission, limited) = (tenant.admission.clone(), tenant.limited().cloned());
                async move {
                    let spec = match first.request {
                        Some(AcquireMsg::Acquire(a)) => AcquireSpec::try_from(a)?,
                        _ => {
                            return Err(InvalidInput::FirstMessage {
                                stream: "Acquire",
                                expected: "acquire{name, owner, permits, mode, wait_timeout, ttl}",
                            }
                            .into())
                        }
                    };
                    auth.check(&identity, Verb::Lock, spec.name.as_str())?;
                    // The identity's own limit first, then the gateway's (`--max-queues`).
                    let queue = admission.queue(limited.as_ref(), spec.name.as_str())?;
                    let hold = coord.acquire(spec).await?;
                    let lease = hold.member().lease().encode(&keys);
                    Ok(AcquireStream {
                        hold,
                        lease,
                        _queue: queue,
                    })
                }
            },
        )
        .await
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let _call = self.unary(&request, UnaryWork::ByLease)?;
        let identity = auth::caller(&request);
        let lease = convert::lease(&request.into_inner().lease, QueueKind::Lock, &self.keys)?;
        self.auth
            .check(&identity, Verb::Lock, lease.queue.as_str())?;
        self.coord.release(&lease).await?;
        audit::gave_up(
            &identity,
            Verb::Lock,
            lease.queue.as_str(),
            None,
            "by lease",
        );
        Ok(Response::new(pb::ReleaseResponse {}))
    }

    async fn holders(
        &self,
        request: Request<pb::HoldersRequest>,
    ) -> Result<Response<pb::HoldersResponse>, Status> {
        let _call = self.unary(&request, UnaryWork::Read)?;
        let name = convert::queue_name(request.get_ref().name.clone(), "name")?;
        self.auth
            .check(&auth::caller(&request), Verb::Observe, name.as_str())?;
        let r = request.into_inner();
        let page = convert::page(r.page_size, &r.page_token)?;
        let h = self.coord.holders(&name, page).await?;
        Ok(Response::new(pb::HoldersResponse {
            holders: h.holders.into_iter().map(holder).collect(),
            waiting: h.waiting,
            next_page_token: convert::page_token(h.next_after),
            total: h.total,
        }))
    }

    async fn validate(
        &self,
        request: Request<pb::LockValidateRequest>,
    ) -> Result<Response<pb::LockValidateResponse>, Status> {
        let _call = self.unary(&request, UnaryWork::Read)?;
        let name = convert::queue_name(request.get_ref().name.clone(), "name")?;
        self.auth
            .check(&auth::caller(&request), Verb::Observe, name.as_str())?;
        let r = request.into_inner();
        let current = self
            .coord
            .validate_holder(&name, FencingToken(r.fencing_token))
            .await?;
        Ok(Response::new(pb::LockValidateResponse { current }))
    }
}
