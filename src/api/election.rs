//! The Election service: stream plumbing and conversions around `coord::election`.

use tonic::{Request, Response, Status, Streaming};

use super::convert;
use super::deps::ApiDeps;
use super::holder_stream::{self, BoxFuture, BoxStream, HolderStream, Step, Suspension, Tenant};
use super::limits::{BytesPermit, QueuePermit};
use crate::auth::{self, audit, LeaseKeys, Verb};
use crate::coord::election::{Candidacy, CandidacyEnd, CandidacyEvent};
use crate::coord::member::Member;
use crate::coord::session::UnaryWork;
use crate::coord::types::{FencingToken, Holder, InvalidInput, QueueKind};
use crate::coord::CoordError;
use crate::proto as pb;
use crate::proto::campaign_request::Request as CampaignMsg;
use crate::proto::campaign_response::Event;
use crate::proto::election_server::Election;

/// Serves `zkgate.v1.Election`: the shared [`ApiDeps`] (reached through `Deref`) and the
/// methods below.
#[derive(Debug, Clone)]
pub struct ElectionApi(ApiDeps);

impl std::ops::Deref for ElectionApi {
    type Target = ApiDeps;

    fn deref(&self) -> &ApiDeps {
        &self.0
    }
}

impl ElectionApi {
    pub fn new(deps: ApiDeps) -> Self {
        Self(deps)
    }

    /// The caller may `observe` `name` (the check of every read).
    fn may_observe<T>(&self, request: &Request<T>, name: &str) -> Result<(), CoordError> {
        self.auth.check(&auth::caller(request), Verb::Observe, name)
    }

    fn max_value(&self) -> usize {
        self.coord.cfg.max_value_bytes
    }
}

fn event(e: Event) -> pb::CampaignResponse {
    pb::CampaignResponse { event: Some(e) }
}

/// A Campaign stream's own part of the shared holder-stream loop.
struct CampaignStream {
    candidacy: Candidacy,
    max_value: usize,
    keys: LeaseKeys,
    /// The identity's place in this election's queue (per-identity limit), for the stream's life.
    _queue: QueuePermit,
    /// The stream's value, counted against its identity's bytes in flight.
    bytes: BytesPermit,
}

#[tonic::async_trait]
impl HolderStream for CampaignStream {
    type Request = pb::CampaignRequest;
    type Response = pb::CampaignResponse;

    fn queued(&self) -> pb::CampaignResponse {
        let member = self.candidacy.member();
        event(Event::Queued(pb::Queued {
            lease: member.lease().encode(&self.keys),
            position: member.position(),
            answers_pings: true,
            silence_limit: Some(convert::duration(member.silence_limit())),
        }))
    }

    fn heartbeat(seq: u64) -> pb::CampaignResponse {
        event(Event::Heartbeat(pb::Heartbeat { seq }))
    }

    fn first_ping(first: &pb::CampaignRequest) -> u64 {
        match &first.request {
            Some(CampaignMsg::Join(j)) => j.ping_seq,
            _ => 0,
        }
    }

    fn ping_of(request: &pb::CampaignRequest) -> Option<u64> {
        match &request.request {
            Some(CampaignMsg::Ping(p)) => Some(p.seq),
            _ => None,
        }
    }

    fn with_ping(mut msg: pb::CampaignResponse, seq: u64) -> pb::CampaignResponse {
        if let Some(Event::Elected(e)) = msg.event.as_mut() {
            e.ping_seq = seq;
        }
        msg
    }

    fn suspended(stop_within: std::time::Duration, why: Suspension) -> pb::CampaignResponse {
        event(Event::Suspended(convert::suspended(stop_within, why)))
    }

    fn is_leave(request: &pb::CampaignRequest) -> bool {
        matches!(request.request, Some(CampaignMsg::Resign(_)))
    }

    fn member(&self) -> &Member {
        self.candidacy.member()
    }

    fn holds(&self) -> bool {
        self.candidacy.is_elected()
    }

    async fn next_event(&mut self) -> Step<pb::CampaignResponse> {
        match self.candidacy.next_event().await {
            CandidacyEvent::Elected(l) => {
                let token = l.fencing_token.0;
                Step::Granted(
                    event(Event::Elected(pb::Elected {
                        leader: Some(convert::leader(l)),
                        silence_limit: Some(convert::duration(
                            self.candidacy.member().silence_limit(),
                        )),
                        // Set by the stream's loop, which reads the pings.
                        ping_seq: 0,
                    })),
                    token,
                )
            }
            CandidacyEvent::Proclaimed(l) => Step::Send(event(Event::Proclaimed(pb::Proclaimed {
                leader: Some(convert::leader(l)),
            }))),
            CandidacyEvent::Suspended { stop_within } => {
                Step::Send(Self::suspended(stop_within, Suspension::Connection))
            }
            CandidacyEvent::Resumed => Step::Send(event(Event::Resumed(pb::Resumed {}))),
            // Told first, deleted later (G3c); then OK, a resign.
            CandidacyEvent::EndRequested => Step::Revoke(Suspension::EndRequested, None),
            CandidacyEvent::Ended(CandidacyEnd::Resigned) => Step::Done,
            CandidacyEvent::Ended(CandidacyEnd::Lost(reason)) => {
                Step::Fail(CoordError::SessionLost(reason))
            }
            CandidacyEvent::Ended(CandidacyEnd::Unserved) => {
                Step::Fail(crate::coord::error::Retry::Stranded.into())
            }
        }
    }

    fn on_request(&mut self, request: pb::CampaignRequest) -> Step<pb::CampaignResponse> {
        match request.request {
            Some(CampaignMsg::Proclaim(p)) => match convert::value(p.value, self.max_value)
                .and_then(|v| {
                    // The new value replaces the old one in the identity's bytes: counted
                    // before the write (a write that fails ends the stream, releasing it all).
                    self.bytes.resize(v.as_bytes().len())?;
                    self.candidacy.start_proclaim(v)
                }) {
                Err(e) => Step::Fail(e),
                // The change comes back as `proclaimed` through the queue's watch.
                Ok(write) => Step::Pending(Box::pin(async move {
                    match write.await {
                        Ok(()) => Step::Quiet,
                        Err(e) => Step::Fail(e),
                    }
                })),
            },
            Some(CampaignMsg::Resign(_)) => Step::Leave,
            // Taken by the stream's loop before it gets here.
            Some(CampaignMsg::Ping(_)) => Step::Quiet,
            Some(CampaignMsg::Join(_)) => Step::Fail(
                InvalidInput::FirstOnly {
                    what: "join",
                    stream: "a Campaign",
                }
                .into(),
            ),
            None => Step::Fail(
                InvalidInput::EmptyRequest {
                    message: "CampaignRequest",
                    set: "proclaim or resign",
                }
                .into(),
            ),
        }
    }

    fn begin_leave(&mut self) -> BoxFuture<Result<(), CoordError>> {
        Box::pin(self.candidacy.begin_resign())
    }
}

#[tonic::async_trait]
impl Election for ElectionApi {
    type CampaignStream = BoxStream<pb::CampaignResponse>;
    type ObserveStream = BoxStream<pb::EncodedObserveResponse>;
    type ObserveManyStream = BoxStream<pb::ObserveManyResponse>;

    async fn campaign(
        &self,
        request: Request<Streaming<pb::CampaignRequest>>,
    ) -> Result<Response<Self::CampaignStream>, Status> {
        let (coord, max_value) = (self.coord.clone(), self.max_value());
        let keys = self.keys.clone();
        let tenant = Tenant {
            auth: self.auth.clone(),
            identity: auth::caller(&request),
            verb: Verb::Campaign,
            admission: self.admission.clone(),
        };
        holder_stream::open(
            &self.admission,
            &self.coord,
            tenant,
            request,
            "join",
            |first: pb::CampaignRequest, tenant: &Tenant| {
                let (auth, identity) = (tenant.auth.clone(), tenant.identity.clone());
                let (admission, limited) = (tenant.admission.clone(), tenant.limited().cloned());
                async move {
                    let join = match first.request {
                        Some(CampaignMsg::Join(j)) => convert::join(j, max_value)?,
                        _ => {
                            return Err(InvalidInput::FirstMessage {
                                stream: "Campaign",
                                expected: "join{election, candidate, value}",
                            }
                            .into())
                        }
                    };
                    auth.check(&identity, Verb::Campaign, join.election.as_str())?;
                    // The identity's own limits first, then the gateway's (`--max-queues`).
                    let queue = admission.queue(limited.as_ref(), join.election.as_str())?;
                    let bytes = admission.bytes(limited.as_ref(), join.value.as_bytes().len())?;
                    let candidacy = coord.campaign(join).await?;
                    Ok(CampaignStream {
                        candidacy,
                        max_value,
                        keys,
                        _queue: queue,
                        bytes,
                    })
                }
            },
        )
        .await
    }

    async fn proclaim(
        &self,
        request: Request<pb::ProclaimRequest>,
    ) -> Result<Response<pb::ProclaimResponse>, Status> {
        let _call = self.unary(&request, UnaryWork::ByLease)?;
        let identity = auth::caller(&request);
        let r = request.into_inner();
        let lease = convert::lease(&r.lease, QueueKind::Election, &self.keys)?;
        self.auth
            .check(&identity, Verb::Campaign, lease.queue.as_str())?;
        let value = convert::value(r.value, self.max_value())?;
        // In flight while the call runs (the member's stream, wherever it is, counts its own).
        let _bytes = self
            .admission
            .bytes(self.limited(&identity).as_ref(), value.as_bytes().len())?;
        let leader = self.coord.proclaim(&lease, value).await?;
        Ok(Response::new(pb::ProclaimResponse {
            leader: Some(convert::leader(leader)),
        }))
    }

    async fn resign(
        &self,
        request: Request<pb::ResignRequest>,
    ) -> Result<Response<pb::ResignResponse>, Status> {
        let _call = self.unary(&request, UnaryWork::ByLease)?;
        let identity = auth::caller(&request);
        let lease = convert::lease(&request.into_inner().lease, QueueKind::Election, &self.keys)?;
        self.auth
            .check(&identity, Verb::Campaign, lease.queue.as_str())?;
        self.coord.resign(&lease).await?;
        audit::gave_up(
            &identity,
            Verb::Campaign,
            lease.queue.as_str(),
            None,
            "by lease",
        );
        Ok(Response::new(pb::ResignResponse {}))
    }

    async fn leader(
        &self,
        request: Request<pb::LeaderRequest>,
    ) -> Result<Response<pb::LeaderResponse>, Status> {
        let _call = self.unary(&request, UnaryWork::Read)?;
        let election = convert::queue_name(request.get_ref().election.clone(), "election")?;
        self.may_observe(&request, election.as_str())?;
        let leader = self.coord.leader(&election).await?;
        Ok(Response::new(pb::LeaderResponse {
            leader: Some(convert::leader(leader)),
        }))
    }

    async fn observe(
        &self,
        request: Request<pb::ObserveRequest>,
    ) -> Result<Response<Self::ObserveStream>, Status> {
        let identity = auth::caller(&request);
        let election = convert::queue_name(request.get_ref().election.clone(), "election")?;
        self.auth
            .check(&identity, Verb::Observe, election.as_str())?;
        let permit = self.admission.observer(
            request.remote_addr(),
            self.auth.enforced().then_some(&identity),
        )?;
        let observation = self.coord.observe(&election).await?;
        Ok(Response::new(Box::pin(observe_stream(observation, permit))))
    }

    async fn candidates(
        &self,
        request: Request<pb::CandidatesRequest>,
    ) -> Result<Response<pb::CandidatesResponse>, Status> {
        let _call = self.unary(&request, UnaryWork::Read)?;
        let election = convert::queue_name(request.get_ref().election.clone(), "election")?;
        self.may_observe(&request, election.as_str())?;
        let r = request.into_inner();
        let page = convert::page(r.page_size, &r.page_token)?;
        let page = self.coord.candidates(&election, page).await?;
        Ok(Response::new(pb::CandidatesResponse {
            candidates: page.items.into_iter().map(convert::candidate).collect(),
            next_page_token: convert::page_token(page.next_after),
            total: page.total as u32,
        }))
    }

    async fn validate(
        &self,
        request: Request<pb::ElectionValidateRequest>,
    ) -> Result<Response<pb::ElectionValidateResponse>, Status> {
        let _call = self.unary(&request, UnaryWork::Read)?;
        let election = convert::queue_name(request.get_ref().election.clone(), "election")?;
        self.may_observe(&request, election.as_str())?;
        let r = request.into_inner();
        let (current, leader) = self
            .coord
            .validate_leader(&election, FencingToken(r.fencing_token))
            .await?;
        Ok(Response::new(pb::ElectionValidateResponse {
            current,
            leader: leader.map(convert::leader),
        }))
    }

    /// See `api::observe_many` (under a policy it shows only the names the caller may observe).
    async fn observe_many(
        &self,
        request: Request<pb::ObserveManyRequest>,
    ) -> Result<Response<Self::ObserveManyStream>, Status> {
        super::observe_many::serve(&self.coord, &self.admission, &self.auth, request).await
    }
}

/// An Observe stream's responses, polled by the transport itself: no task and no channel of its
/// own. Fan-out is the cost of a leader change seen by thousands of observers (issue 21: 10,000
/// observers on one election); a task per observer and a channel between it and the transport
/// doubled the wake-ups and the copies per observer and kept each state twice.
///
/// An observer that stops reading holds up nothing (G3c): the transport polls this stream only
/// once the previous message has gone out, so a stalled observer's stream is simply not polled
/// — it keeps no queue of states, and when it reads again its next message is the newest state
/// (states, not a log). Nor does it hold the drain: the observation counts as no stream for
/// it ([`crate::coord::Coordinator::observe`]); a reader ends `UNAVAILABLE` as soon as the drain
/// starts (the fan-out closes the observation's view, `coord::fanout`), and a connection still
/// owing bytes to a client that does not read is cut after the drain.
///
/// Each state is encoded once for all of this gateway's observers of the election
/// ([`observe_response`]), and each stream sends those bytes as they are.
fn observe_stream(
    observation: crate::coord::election::Observation,
    permit: super::limits::StreamPermit,
) -> impl futures::Stream<Item = Result<pb::EncodedObserveResponse, Status>> + Send + 'static {
    let state = Some((observation, permit));
    futures::stream::unfold(state, |state| async move {
        let (mut observation, permit) = state?;
        match observation.next_encoded(observe_response).await {
            Ok(bytes) => Some((
                Ok(pb::EncodedObserveResponse::from_bytes(bytes)),
                Some((observation, permit)),
            )),
            Err(e) => Some((Err(Status::from(e)), None)),
        }
    })
}

/// An `Observe` message for `leader`, encoded: the one encoding every observer shares.
fn observe_response(leader: &Option<Holder>) -> prost::bytes::Bytes {
    pb::EncodedObserveResponse::new(&pb::ObserveResponse {
        leader: leader.clone().map(convert::leader),
    })
    .into()
}
