//! Rust client for [zkgate](../../README.md), the gRPC coordination gateway over ZooKeeper:
//! leader election and locks for a fleet of gateways, with the client's half of the contract
//! built in — the silence watchdog, loss on `suspended`, failover across endpoints, fencing
//! tokens that never go down in `observe`. The rules are those of every zkgate client
//! (`clients/CONFORMANCE.md`); `README.md` beside this crate shows the API.
//!
//! ```no_run
//! # async fn f() -> Result<(), zkgate_client::Error> {
//! let client = zkgate_client::Client::connect(zkgate_client::Endpoints::from_env()?).await?;
//! client.run_while_leader("billing-cron", "host-1", b"", |lead| async move {
//!     println!("leading with fencing token {}", lead.fencing_token);
//!     lead.lost.cancelled().await; // leader-only work goes here
//! }).await
//! # }
//! ```
//!
//! # Layout
//! - [`endpoint`]: endpoint parsing, `ZKGATE_ENDPOINT`, TLS options.
//! - [`backoff`]: the shared retry delay (full jitter, 50 ms doubling to 2 s).
//! - [`hold`]: one Campaign or Acquire stream driven by a task: events, loss reasons, watchdog.
//! - [`observe`]: the reconnecting `Observe` stream; [`observe_many`]: `ObserveMany`, likewise.
//! - [`raw`]: the two streaming calls as on the wire (open, send, read), which the helpers,
//!   the gateway's tests and its benchmark share.
//! - `runner`: [`Client::run_while_leader`] and [`Client::run_while_holding`].
//! - [`pb`]: the generated `zkgate.v1` client code.

pub mod backoff;
pub mod endpoint;
pub mod hold;
mod lease;
mod mailbox;
pub mod observe;
pub mod observe_many;
pub mod raw;
mod runner;

/// Generated `zkgate.v1` messages and client stubs (from the repository's `proto/`): the
/// `zkgate-proto` crate, whose messages the gateway serves too.
pub use zkgate_proto as pb;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How much longer than the call timeout `Resign`/`Release` by lease may take: the gateway
/// answers once the holder has been told and its znode is gone, up to the holder's
/// `silence_limit` + the gateway's keepalive timeout + 1 s (8.5 s with the gateway's defaults)
/// when the holder does not end its stream.
pub const BY_LEASE_EXTRA: Duration = Duration::from_secs(10);

use tokio_util::sync::CancellationToken;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic::{Code, Status};

pub use backoff::Backoff;
pub use endpoint::{Endpoint, Endpoints, TlsOptions, DEFAULT_ENDPOINT, ENDPOINT_ENV};
pub use hold::{HoldEvent, LossReason};
pub use observe::Observer;
pub use observe_many::{ManyEvent, ManyObserver};
pub use pb::{Candidate, Holder, Leader, LockMode};
pub use raw::{Grant, SuspendCause};
pub use runner::{HoldContext, LeaderContext};

use hold::HoldCore;
use pb::election_client::ElectionClient;
use pb::lock_client::LockClient;

/// Everything this crate can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid endpoint {0:?}: {1}")]
    InvalidEndpoint(String, String),
    #[error("TLS: {0}")]
    Tls(String),
    /// The gateway refused (or could not be reached: `UNAVAILABLE`). `NOT_FOUND` is a lease the
    /// gateway cannot honour, or nobody leading.
    #[error("{}: {}", .0.code(), .0.message())]
    Status(Status),
    /// The lock was not acquired within its `wait_timeout` (a try-lock found it taken).
    #[error("not acquired within the wait timeout")]
    NotAcquired,
    /// The hold was lost before it was granted, or is no longer held.
    #[error("lost: {0}")]
    Lost(LossReason),
}

impl Error {
    /// The gRPC code, for [`Error::Status`].
    pub fn code(&self) -> Option<Code> {
        match self {
            Error::Status(s) => Some(s.code()),
            _ => None,
        }
    }

    /// Refusals that trying again cannot fix: a bad name or candidate, a permits mismatch,
    /// missing credentials, bad configuration. Helpers that requeue give up on these.
    pub fn is_permanent(&self) -> bool {
        match self {
            Error::Status(s) => matches!(
                s.code(),
                Code::InvalidArgument
                    | Code::FailedPrecondition
                    | Code::PermissionDenied
                    | Code::Unauthenticated
                    | Code::Unimplemented
            ),
            Error::InvalidEndpoint(..) | Error::Tls(_) => true,
            Error::NotAcquired | Error::Lost(_) => false,
        }
    }
}

/// How a hold behaves on loss.
#[derive(Debug, Clone, Copy, Default)]
pub struct HoldOptions {
    /// Keep the stream (and so the znode) open after the loss is reported, until
    /// `resign()`/`release()` or drop. Off by default: the conformance rule is to cancel the
    /// stream at once. On for supervisors that must stop their work before anyone else may
    /// take over, like `zkgate elect -- CMD`.
    pub keep_after_loss: bool,
}

/// What to lock and how: [`Client::acquire`].
#[derive(Debug, Clone)]
pub struct LockOptions {
    pub name: String,
    /// Shown by `Holders` (default: `rust-<pid>`).
    pub owner: String,
    /// 0 or 1: a mutex; N: a semaphore with N permits (all users of a name must agree).
    pub permits: u32,
    /// Write (exclusive, the default) or read (shared).
    pub mode: LockMode,
    /// `None`: wait as long as it takes; zero: try once ([`Error::NotAcquired`] if taken).
    pub wait_timeout: Option<Duration>,
    /// `None`: the lease lives as long as the stream. Set: the gateway drops the lock unless a
    /// keep-alive arrives within each ttl (this client sends one every ttl / 3).
    pub ttl: Option<Duration>,
    pub hold: HoldOptions,
}

impl LockOptions {
    pub fn new(name: impl Into<String>) -> Self {
        LockOptions {
            name: name.into(),
            owner: format!("rust-{}", std::process::id()),
            permits: 0,
            mode: LockMode::Write,
            wait_timeout: None,
            ttl: None,
            hold: HoldOptions::default(),
        }
    }
}

/// `Holders`' answer, all pages.
#[derive(Debug, Clone, Default)]
pub struct Holders {
    pub holders: Vec<Holder>,
    /// Members waiting (not holding).
    pub waiting: u32,
}

/// `Validate`'s answer for an election.
#[derive(Debug, Clone)]
pub struct Validation {
    /// True only if the token is the current leader's.
    pub current: bool,
    pub leader: Option<Leader>,
}

struct Inner {
    endpoints: Vec<Endpoint>,
    channels: Vec<Channel>,
    /// The endpoint new calls and holds use; advanced round robin on failure.
    current: AtomicUsize,
    timeout: Duration,
    /// `authorization: Bearer <token>`, sent with every call and stream.
    authorization: Option<tonic::metadata::AsciiMetadataValue>,
}

/// A client of a gateway fleet. Cheap to clone; all clones share one HTTP/2 connection per
/// endpoint (connected on first use).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoints", &self.inner.endpoints)
            .field("current", &self.current_endpoint())
            .finish()
    }
}

/// The pings of a stream whose requests are `Req` (`ping` makes one of a `Ping`): ping 1 is
/// the first request, taken by the transport at `taken` (else `opened`); the rest go out
/// without waiting ([`hold::Pinger`]).
fn pinger<Req: Send + 'static>(
    taken: raw::FirstTaken,
    opened: tokio::time::Instant,
    requests: &tokio::sync::mpsc::Sender<Req>,
    ping: fn(pb::Ping) -> Req,
) -> hold::Pinger {
    let requests = requests.clone();
    (
        taken,
        opened,
        Box::new(move |seq| requests.try_send(ping(pb::Ping { seq })).is_ok()),
    )
}

fn proto_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration::try_from(d).unwrap_or(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 0,
    })
}

impl Client {
    /// A client for `endpoints`. Connections are made on first use, so this succeeds while
    /// gateways are down; calls then fail over between them. A host name with several
    /// addresses of one family becomes one endpoint per address (see [`Client::endpoints`]).
    ///
    /// # Errors
    /// [`Error::InvalidEndpoint`] or [`Error::Tls`] (bad certificate material).
    pub async fn connect(endpoints: Endpoints) -> Result<Client, Error> {
        let tls_configured = endpoints.tls.is_some();
        let authorization = match &endpoints.token {
            Some(t) => Some(format!("Bearer {t}").parse().map_err(|_| {
                Error::InvalidEndpoint(
                    "token".into(),
                    "a bearer token must be printable ASCII".into(),
                )
            })?),
            None => None,
        };
        let list = endpoint::expand(endpoints.list, endpoints.timeout).await;
        let mut channels = Vec::with_capacity(list.len());
        for ep in &list {
            let uri = ep.uri(tls_configured);
            let invalid =
                |e: tonic::transport::Error| Error::InvalidEndpoint(ep.to_string(), e.to_string());
            let mut builder = tonic::transport::Endpoint::from_shared(uri.clone())
                .map_err(invalid)?
                .connect_timeout(endpoints.timeout)
                .tcp_nodelay(true);
            let named = ep.named(tls_configured);
            if let Some((origin, _)) = &named {
                let origin =
                    origin
                        .parse()
                        .map_err(|e: tonic::codegen::http::uri::InvalidUri| {
                            Error::InvalidEndpoint(ep.to_string(), e.to_string())
                        })?;
                builder = builder.origin(origin);
            }
            if ep.uses_tls(tls_configured) {
                let mut tls = ClientTlsConfig::new();
                match endpoints.tls.as_ref() {
                    Some(t) => {
                        match &t.ca_pem {
                            Some(ca) => tls = tls.ca_certificate(Certificate::from_pem(ca)),
                            None => tls = tls.with_webpki_roots(),
                        }
                        if let Some((cert, key)) = &t.identity {
                            tls = tls.identity(Identity::from_pem(cert, key));
                        }
                        if let Some(name) = &t.server_name {
                            tls = tls.domain_name(name.clone());
                        } else if let Some((_, name)) = &named {
                            tls = tls.domain_name(*name);
                        }
                    }
                    None => {
                        tls = tls.with_webpki_roots();
                        if let Some((_, name)) = &named {
                            tls = tls.domain_name(*name);
                        }
                    }
                }
                builder = builder
                    .tls_config(tls)
                    .map_err(|e| Error::Tls(format!("{ep}: {e}")))?;
            }
            channels.push(builder.connect_lazy());
        }
        Ok(Client {
            inner: Arc::new(Inner {
                endpoints: list,
                channels,
                current: AtomicUsize::new(0),
                timeout: endpoints.timeout,
                authorization,
            }),
        })
    }

    /// A client for `ZKGATE_ENDPOINT` (or the default endpoint).
    ///
    /// # Errors
    /// See [`Client::connect`].
    pub async fn from_env() -> Result<Client, Error> {
        Self::connect(Endpoints::from_env()?).await
    }

    pub fn endpoints(&self) -> &[Endpoint] {
        &self.inner.endpoints
    }

    /// The endpoint the next call or hold starts with.
    pub fn current_endpoint(&self) -> &Endpoint {
        &self.inner.endpoints[self.current_index()]
    }

    fn current_index(&self) -> usize {
        self.inner.current.load(Ordering::Relaxed) % self.inner.endpoints.len()
    }

    /// Moves on to the endpoint after `from` (round robin), unless another call already moved.
    fn fail_over_index(&self, from: usize) {
        let next = (from + 1) % self.inner.endpoints.len();
        let _ =
            self.inner
                .current
                .compare_exchange(from, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Moves on to the next endpoint: the helpers do this when a hold was lost with
    /// [`LossReason::moves_endpoint`].
    pub fn fail_over(&self) {
        self.fail_over_index(self.current_index());
    }

    /// Moves on from `endpoint` if it is still the current one (a hold on it was lost with
    /// [`LossReason::moves_endpoint`]).
    pub fn fail_over_from(&self, endpoint: &Endpoint) {
        if let Some(i) = self.inner.endpoints.iter().position(|e| e == endpoint) {
            self.fail_over_index(i);
        }
    }

    fn request_within<T>(&self, msg: T, timeout: Duration) -> tonic::Request<T> {
        let mut r = self.authorized(msg);
        r.set_timeout(timeout);
        r
    }

    /// The deadline of `Resign`/`Release` by lease: the call timeout plus
    /// [`BY_LEASE_EXTRA`]. The gateway returns once the holder has been told and its znode is
    /// gone, which takes up to the holder's `silence_limit` + 1 s when the holder does not end
    /// its stream (contract G3c).
    fn by_lease_timeout(&self) -> Duration {
        self.inner.timeout + BY_LEASE_EXTRA
    }

    /// `msg` with the bearer token, if the client has one (streams: no deadline).
    pub(crate) fn authorized<T>(&self, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        if let Some(a) = &self.inner.authorization {
            r.metadata_mut().insert("authorization", a.clone());
        }
        r
    }

    /// Runs a unary call of `req` with the deadline, through [`Client::with_failover`].
    async fn unary<Req, T, F, Fut>(&self, req: Req, call: F) -> Result<T, Error>
    where
        Req: Clone,
        F: Fn(Channel, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        self.unary_within(self.inner.timeout, req, call).await
    }

    /// [`Client::unary`] with a deadline of its own.
    async fn unary_within<Req, T, F, Fut>(
        &self,
        timeout: Duration,
        req: Req,
        call: F,
    ) -> Result<T, Error>
    where
        Req: Clone,
        F: Fn(Channel, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        self.with_failover(timeout, |ch, _| {
            let answer = call(ch, self.request_within(req.clone(), timeout));
            async move {
                answer
                    .await
                    .map(tonic::Response::into_inner)
                    .map_err(Error::Status)
            }
        })
        .await
    }

    /// The client's one failover loop, for unary calls and for opening holds: tries `attempt`
    /// on each endpoint at most once (starting with the current one), each within `timeout`,
    /// while the answer is a transport failure, `UNAVAILABLE` or no answer; a failed endpoint
    /// is failed over from, and the next is tried after a backoff.
    async fn with_failover<T, F, Fut>(&self, timeout: Duration, mut attempt: F) -> Result<T, Error>
    where
        F: FnMut(Channel, Endpoint) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let n = self.inner.endpoints.len();
        let mut backoff = Backoff::default();
        let mut last = None;
        for tried in 0..n {
            let i = self.current_index();
            let ep = self.inner.endpoints[i].clone();
            let ch = self.inner.channels[i].clone();
            match tokio::time::timeout(timeout, attempt(ch, ep.clone())).await {
                Ok(Err(Error::Status(s))) if hold::is_transport_failure(&s) => {
                    last = Some(Error::Status(s))
                }
                Ok(answer) => return answer,
                Err(_) => {
                    last = Some(Error::Status(Status::unavailable(format!(
                        "{ep} did not answer within {timeout:?}"
                    ))))
                }
            }
            self.fail_over_index(i);
            if tried + 1 < n {
                tokio::time::sleep(backoff.next_delay()).await;
            }
        }
        Err(last.expect("at least one endpoint"))
    }

    /// Who leads `election` now; `None` when nobody does.
    ///
    /// # Errors
    /// [`Error::Status`].
    pub async fn leader(&self, election: &str) -> Result<Option<Leader>, Error> {
        let req = pb::LeaderRequest {
            election: election.into(),
        };
        match self
            .unary(req, |ch, r| async move {
                ElectionClient::new(ch).leader(r).await
            })
            .await
        {
            Ok(r) => Ok(r.leader),
            Err(Error::Status(s)) if s.code() == Code::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The queue of `election` in order (all pages).
    ///
    /// # Errors
    /// [`Error::Status`].
    pub async fn candidates(&self, election: &str) -> Result<Vec<Candidate>, Error> {
        let mut out = Vec::new();
        let mut page_token = String::new();
        loop {
            let req = pb::CandidatesRequest {
                election: election.into(),
                page_size: 0,
                page_token: page_token.clone(),
            };
            let r = self
                .unary(req, |ch, r| async move {
                    ElectionClient::new(ch).candidates(r).await
                })
                .await?;
            out.extend(r.candidates);
            if r.next_page_token.is_empty() {
                return Ok(out);
            }
            page_token = r.next_page_token;
        }
    }

    /// Who holds lock `name` (all pages) and how many wait.
    ///
    /// # Errors
    /// [`Error::Status`].
    pub async fn holders(&self, name: &str) -> Result<Holders, Error> {
        let mut out = Holders::default();
        let mut page_token = String::new();
        loop {
            let req = pb::HoldersRequest {
                name: name.into(),
                page_size: 0,
                page_token: page_token.clone(),
            };
            let r = self
                .unary(
                    req,
                    |ch, r| async move { LockClient::new(ch).holders(r).await },
                )
                .await?;
            out.holders.extend(r.holders);
            out.waiting = r.waiting;
            if r.next_page_token.is_empty() {
                return Ok(out);
            }
            page_token = r.next_page_token;
        }
    }

    /// Leaves an election by lease, from anywhere. Returns once the leadership is over: the
    /// leader was told (`suspended`, END_REQUESTED) and its znode is gone; the deadline is the
    /// call timeout plus [`BY_LEASE_EXTRA`].
    ///
    /// # Errors
    /// `NOT_FOUND` for a lease the gateway cannot honour (spent, never issued, malformed).
    pub async fn resign(&self, lease: &str) -> Result<(), Error> {
        let req = pb::ResignRequest {
            lease: lease.into(),
        };
        self.unary_within(self.by_lease_timeout(), req, |ch, r| async move {
            ElectionClient::new(ch).resign(r).await
        })
        .await
        .map(|_| ())
    }

    /// Releases a lock by lease, from anywhere.
    ///
    /// # Errors
    /// As [`Client::resign`].
    pub async fn release(&self, lease: &str) -> Result<(), Error> {
        let req = pb::ReleaseRequest {
            lease: lease.into(),
        };
        self.unary_within(self.by_lease_timeout(), req, |ch, r| async move {
            LockClient::new(ch).release(r).await
        })
        .await
        .map(|_| ())
    }

    /// The leader with `lease` replaces its value (the unary RPC, so a refusal does not end
    /// the campaign).
    ///
    /// # Errors
    /// `FAILED_PRECONDITION` when the lease's candidate does not lead; `NOT_FOUND`.
    pub async fn proclaim(&self, lease: &str, value: &[u8]) -> Result<Leader, Error> {
        let req = pb::ProclaimRequest {
            lease: lease.into(),
            value: value.to_vec(),
        };
        let r = self
            .unary(req, |ch, r| async move {
                ElectionClient::new(ch).proclaim(r).await
            })
            .await?;
        Ok(r.leader.unwrap_or_default())
    }

    /// Is `fencing_token` the current leader's of `election`? Answered from state at least as
    /// new as the call.
    ///
    /// # Errors
    /// [`Error::Status`].
    pub async fn validate(&self, election: &str, fencing_token: u64) -> Result<Validation, Error> {
        let req = pb::ElectionValidateRequest {
            election: election.into(),
            fencing_token,
        };
        let r = self
            .unary(req, |ch, r| async move {
                ElectionClient::new(ch).validate(r).await
            })
            .await?;
        Ok(Validation {
            current: r.current,
            leader: r.leader,
        })
    }

    /// Is `fencing_token` a current holder's of lock `name`?
    ///
    /// # Errors
    /// [`Error::Status`].
    pub async fn validate_lock(&self, name: &str, fencing_token: u64) -> Result<bool, Error> {
        let req = pb::LockValidateRequest {
            name: name.into(),
            fencing_token,
        };
        let r = self
            .unary(
                req,
                |ch, r| async move { LockClient::new(ch).validate(r).await },
            )
            .await?;
        Ok(r.current)
    }

    /// Joins `election` as `candidate` with `value`; returns once queued (the znode exists).
    /// Wait for [`Leadership::elected`], or use [`Client::elect`].
    ///
    /// # Errors
    /// The gateway's refusal (`INVALID_ARGUMENT` for a bad name …), or `UNAVAILABLE` when no
    /// endpoint could take it.
    ///
    /// # Cancellation safety
    /// Dropping the future cancels the stream being opened; nothing stays queued.
    pub async fn campaign(
        &self,
        election: &str,
        candidate: &str,
        value: &[u8],
    ) -> Result<Leadership, Error> {
        self.campaign_with(election, candidate, value, HoldOptions::default())
            .await
    }

    /// [`Client::campaign`] with [`HoldOptions`].
    ///
    /// # Errors
    /// As [`Client::campaign`].
    pub async fn campaign_with(
        &self,
        election: &str,
        candidate: &str,
        value: &[u8],
        options: HoldOptions,
    ) -> Result<Leadership, Error> {
        let join = pb::Join {
            election: election.into(),
            candidate: candidate.into(),
            value: value.to_vec(),
            // The join is ping 1 (`crate::lease`).
            ping_seq: 1,
        };
        let core = self
            .with_failover(self.inner.timeout, |ch, ep| {
                let join = join.clone();
                let auth = self.authorized(());
                async move {
                    // Ping 1's send: when the transport takes the join (`FirstTaken`), else now;
                    // either is before it leaves, which only shortens the lease.
                    let opened = tokio::time::Instant::now();
                    let stream = raw::CampaignStream::open_request(
                        ch,
                        [pb::campaign_request::Request::Join(join).into()],
                        auth,
                    )
                    .await
                    .map_err(Error::Status)?;
                    let taken = stream.first_taken();
                    let end_requests = stream.request_ender();
                    let (requests, responses) = stream.into_parts();
                    let pinger = pinger(taken, opened, &requests, |p| {
                        pb::campaign_request::Request::Ping(p).into()
                    });
                    let give_up = Box::new(move || {
                        let _ = requests.try_send(
                            pb::campaign_request::Request::Resign(pb::ResignCandidacy {}).into(),
                        );
                    });
                    HoldCore::start(
                        hold::decoded(responses),
                        give_up,
                        None,
                        Some(pinger),
                        Some(end_requests),
                        ep,
                        options.keep_after_loss,
                    )
                    .await
                }
            })
            .await?;
        Ok(Leadership {
            core,
            client: self.clone(),
        })
    }

    /// Campaigns and waits until elected.
    ///
    /// # Errors
    /// As [`Client::campaign`]; [`Error::Lost`] if the candidacy ended before it was elected.
    pub async fn elect(
        &self,
        election: &str,
        candidate: &str,
        value: &[u8],
    ) -> Result<Leadership, Error> {
        let lead = self.campaign(election, candidate, value).await?;
        lead.elected().await?;
        Ok(lead)
    }

    /// Queues for a lock; returns once queued. Wait for [`LockHold::acquired`], or use
    /// [`Client::acquire`].
    ///
    /// # Errors
    /// The gateway's refusal (`FAILED_PRECONDITION` for a permits mismatch …), or
    /// `UNAVAILABLE` when no endpoint could take it.
    ///
    /// # Cancellation safety
    /// As [`Client::campaign`].
    pub async fn queue_lock(&self, options: LockOptions) -> Result<LockHold, Error> {
        let acquire = pb::AcquireLock {
            // The acquire is ping 1 (`crate::lease`).
            ping_seq: 1,
            name: options.name.clone(),
            owner: options.owner.clone(),
            permits: options.permits,
            mode: options.mode as i32,
            wait_timeout: options.wait_timeout.map(proto_duration),
            ttl: options.ttl.map(proto_duration),
        };
        let ttl = options.ttl;
        let keep_after_loss = options.hold.keep_after_loss;
        let core = self
            .with_failover(self.inner.timeout, |ch, ep| {
                let acquire = acquire.clone();
                let auth = self.authorized(());
                async move {
                    // Ping 1's send, as for a join.
                    let opened = tokio::time::Instant::now();
                    let stream = raw::AcquireStream::open_request(
                        ch,
                        [pb::acquire_request::Request::Acquire(acquire).into()],
                        auth,
                    )
                    .await
                    .map_err(Error::Status)?;
                    let taken = stream.first_taken();
                    let end_requests = stream.request_ender();
                    let (requests, responses) = stream.into_parts();
                    let keep_alive = ttl.map(|ttl| {
                        let requests = requests.clone();
                        let send: Box<dyn FnMut() + Send> = Box::new(move || {
                            let _ = requests.try_send(
                                pb::acquire_request::Request::KeepAlive(pb::KeepAlive {}).into(),
                            );
                        });
                        (ttl / 3, send)
                    });
                    let pinger = pinger(taken, opened, &requests, |p| {
                        pb::acquire_request::Request::Ping(p).into()
                    });
                    let give_up = Box::new(move || {
                        let _ = requests.try_send(
                            pb::acquire_request::Request::Release(pb::ReleaseLock {}).into(),
                        );
                    });
                    HoldCore::start(
                        hold::decoded(responses),
                        give_up,
                        keep_alive,
                        Some(pinger),
                        Some(end_requests),
                        ep,
                        keep_after_loss,
                    )
                    .await
                }
            })
            .await?;
        Ok(LockHold { core })
    }

    /// Queues for a lock and waits until it is held.
    ///
    /// # Errors
    /// As [`Client::queue_lock`]; [`Error::NotAcquired`] when `wait_timeout` passed (or a
    /// try-lock found it taken); [`Error::Lost`] if the request ended another way.
    ///
    /// # Cancellation safety
    /// Dropping the future cancels the request; nothing stays queued.
    pub async fn acquire(&self, options: LockOptions) -> Result<LockHold, Error> {
        let hold = self.queue_lock(options).await?;
        hold.acquired().await?;
        Ok(hold)
    }

    /// The leader of `election` now and after every change, reconnecting across endpoints;
    /// see [`Observer`].
    pub fn observe(&self, election: &str) -> Observer {
        observe::start(self.clone(), election.to_owned())
    }

    /// Every election whose name starts with `prefix` (those appearing later included) plus
    /// every name in `elections`, now and after every change, reconnecting across endpoints;
    /// see [`ManyObserver`]. An empty prefix with no names follows every election.
    pub fn observe_many(&self, prefix: &str, elections: &[&str]) -> ManyObserver {
        observe_many::start(
            self.clone(),
            prefix.to_owned(),
            elections.iter().map(|e| e.to_string()).collect(),
        )
    }

    pub(crate) fn channel(&self, i: usize) -> (Channel, Endpoint) {
        (
            self.inner.channels[i].clone(),
            self.inner.endpoints[i].clone(),
        )
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    pub(crate) fn current(&self) -> usize {
        self.current_index()
    }

    pub(crate) fn fail_over_after(&self, i: usize) {
        self.fail_over_index(i);
    }
}

/// What a [`Leadership`] and a [`LockHold`] share: both are one stream and one znode (a
/// [`HoldCore`]); `$what` names the hold in the docs.
macro_rules! hold_api {
    ($ty:ident, $what:literal) => {
        impl std::fmt::Debug for $ty {
            // The lease is a capability: never printed.
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("endpoint", &self.core.endpoint)
                    .field("position", &self.core.position)
                    .field("state", &self.core.state())
                    .finish()
            }
        }

        impl $ty {
            #[doc = concat!("The lease: give the ", $what, " up with it from anywhere. Keep it secret.")]
            pub fn lease(&self) -> &str {
                &self.core.lease
            }

            /// Members ahead at join time.
            pub fn position(&self) -> u32 {
                self.core.position
            }

            /// The gateway this stream runs on.
            pub fn endpoint(&self) -> &Endpoint {
                &self.core.endpoint
            }

            /// The fencing token once granted (it stays that tenure's token after a loss).
            pub fn fencing_token(&self) -> Option<u64> {
                self.core.state().granted.map(|g| g.fencing_token)
            }

            /// A holder that hears nothing for this long must assume it lost (the watchdog
            /// does).
            pub fn silence_limit(&self) -> Option<Duration> {
                self.core.state().granted.and_then(|g| g.silence_limit)
            }

            /// While holding: the moment the silence watchdog declares the hold lost unless
            /// another message arrives first (the last message heard plus `silence_limit`).
            /// Work that must never outlive the hold can be given this as its deadline (the
            /// CLI's command keeper is). `None` before the grant or without a `silence_limit`;
            /// after a loss it stays the last value.
            pub fn heard_until(&self) -> Option<tokio::time::Instant> {
                self.core.state().heard_until
            }

            #[doc = concat!("Resolves with the reason when the ", $what, " is lost (queued or holding); never after it is given up. A `'static` future: select on it beside hold-only work.")]
            pub fn lost(&self) -> impl Future<Output = LossReason> + Send + 'static {
                self.core.lost()
            }

            #[doc = concat!("Cancelled at the moment the ", $what, " is lost: hand it to hold-only tasks.")]
            pub fn lost_token(&self) -> CancellationToken {
                self.core.lost_token()
            }

            /// Why it was lost, once it was: `Silence` as soon as `heard_until` has passed,
            /// even before the reading task has run again to decide it (as `check` says).
            pub fn loss_reason(&self) -> Option<LossReason> {
                match self.core.check() {
                    Err(Error::Lost(r)) if self.core.state().granted.is_some() => Some(r),
                    _ => self.core.state().lost,
                }
            }

            /// `Ok` while holding.
            ///
            /// # Errors
            /// [`Error::Lost`] once lost (or [`LossReason::Ended`] when not granted yet).
            pub fn check(&self) -> Result<(), Error> {
                self.core.check()
            }

            /// How the stream ended, once it has (`OK` after a give-up by lease elsewhere,
            /// `ABORTED`, `UNAVAILABLE`, `DEADLINE_EXCEEDED` after a lock's wait timeout …).
            pub fn end_status(&self) -> Option<Status> {
                self.core.end_status()
            }

            /// The next event of the stream (`queued` first, `lost` last; no heartbeats).
            ///
            /// # Cancellation safety
            /// Cancel safe.
            pub async fn next_event(&mut self) -> Option<HoldEvent> {
                self.core.next_event().await
            }
        }
    };
}

/// One candidacy: one Campaign stream, one znode at the gateway. Dropping it cancels the
/// stream, which makes the gateway delete the znode (the next candidate is elected at once);
/// [`Leadership::resign`] does the same with a confirmation.
pub struct Leadership {
    core: HoldCore,
    client: Client,
}

hold_api!(Leadership, "candidacy");

impl Leadership {
    /// Waits until elected.
    ///
    /// # Errors
    /// [`Error::Lost`] (or the gateway's status) if the candidacy ended first.
    ///
    /// # Cancellation safety
    /// Cancel safe: it only watches the candidacy's state.
    pub async fn elected(&self) -> Result<Leader, Error> {
        let g = self.core.granted().await?;
        Ok(g.leader.unwrap_or_default())
    }

    /// Leading now: elected and not lost.
    pub fn is_leader(&self) -> bool {
        self.core.check().is_ok()
    }

    /// The leader as elected, then as proclaimed.
    pub fn leader(&self) -> Option<Leader> {
        self.core.state().granted.and_then(|g| g.leader)
    }

    /// Replaces the leader's value (by lease, on the unary RPC).
    ///
    /// # Errors
    /// As [`Client::proclaim`].
    pub async fn proclaim(&self, value: &[u8]) -> Result<Leader, Error> {
        self.client.proclaim(&self.core.lease, value).await
    }

    /// Leaves the election (in-stream `resign{}`), waiting up to a second for the gateway's
    /// confirmation; the next candidate is elected at once.
    pub async fn resign(self) {
        self.core.release().await;
    }
}

/// One lock request: one Acquire stream, one znode. Dropping it cancels the stream (the lock
/// is released); [`LockHold::release`] does the same with a confirmation. With a ttl the
/// keep-alives are sent by this client.
pub struct LockHold {
    core: HoldCore,
}

hold_api!(LockHold, "lock request");

impl LockHold {
    /// Waits until the lock is held; returns its fencing token.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] after the wait timeout; [`Error::Lost`] or the gateway's status
    /// if the request ended another way.
    ///
    /// # Cancellation safety
    /// Cancel safe.
    pub async fn acquired(&self) -> Result<u64, Error> {
        Ok(self.core.granted().await?.fencing_token)
    }

    /// Held now: acquired and not lost.
    pub fn is_held(&self) -> bool {
        self.core.check().is_ok()
    }

    /// Releases the lock (in-stream `release{}`), waiting up to a second for the gateway's
    /// confirmation.
    pub async fn release(self) {
        self.core.release().await;
    }
}
