//! Limits that keep one client from using up a gateway that many services share (G10): open
//! holder streams (Campaign, Acquire) per gateway and per client connection, Observe streams
//! (ObserveMany included) per client connection, elections per ObserveMany stream, and the time a holder stream may take to send its first message.
//! Past a limit the caller gets `RESOURCE_EXHAUSTED` naming the limit and its value (a silent
//! stream: `DEADLINE_EXCEEDED`), and `zkgate_limit_rejections_total{limit}` counts it. The
//! number of distinct queues per gateway is the coordination layer's limit
//! (`CoordConfig::max_queues`).
//!
//! With an `--auth-policy` in force each identity also has limits of its own (G10: one tenant's
//! flood meets its own limit before a gateway-wide one), all on this gateway:
//! - holder streams and Observe streams open;
//! - queues: distinct election and lock names its holder streams are in (a second stream on a
//!   name it already uses takes no new place; Observe streams take none, they are bounded by
//!   their own limit) — beside `--max-queues`;
//! - unary calls: a rate (a token bucket per identity, [`TokenBucket`], refilled at the rate
//!   and holding one second of it) and the number in flight at once — beside the HTTP/2
//!   stream limit per connection;
//! - bytes in flight: the election values it has outstanding, i.e. the value each of its
//!   Campaign streams keeps in ZooKeeper (the join's, then each in-stream proclaim's) plus the
//!   value of each Proclaim by lease while that call runs. What a tenant can pile up is values
//!   stored for it, not the milliseconds of a write; a proclaim that grows the total past the
//!   limit is refused (in a stream: the stream ends, its candidacy with it) — beside
//!   `--max-proclaim-bytes-in-flight` per ZooKeeper session.
//!
//! The rejection is `RESOURCE_EXHAUSTED` naming the limit, the identity and the value, and
//! `zkgate_identity_limit_rejections_total{limit,identity}` counts it (identities capped like
//! names). Without a policy there are no tenants to tell apart, and only the limits above apply,
//! with one stand-in for the per-identity unary limit: unary calls of each kind in flight per
//! client address (IP, every connection from it together: `--max-unary-in-flight-per-client`),
//! so one client machine cannot fill the gateway-wide `--max-unary-in-flight` for the others.
//!
//! A client connection is told apart by its peer address (one per TCP connection). The
//! HTTP/2 limit on concurrent streams is set above these (`server::run_with`), so a client
//! over the limit gets this status instead of waiting for an HTTP/2 slot.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tonic::{Status, Streaming};

use crate::auth::Identity;
use crate::coord::session::UnaryWork;
use crate::coord::types::InvalidInput;
use crate::coord::{CoordError, Limit};
use crate::metrics as m;

pub const DEFAULT_HOLDER_STREAMS_PER_GATEWAY: usize = 100_000;
pub const DEFAULT_HOLDER_STREAMS_PER_CONNECTION: usize = 1_000;
pub const DEFAULT_OBSERVE_STREAMS_PER_CONNECTION: usize = 1_000;
/// Per identity, under a policy: a fifth of the gateway-wide holder limit, so one tenant can
/// never take it all.
pub const DEFAULT_HOLDER_STREAMS_PER_IDENTITY: usize = 10_000;
pub const DEFAULT_OBSERVE_STREAMS_PER_IDENTITY: usize = 10_000;
/// A fifth of `--max-queues`, as for holder streams.
pub const DEFAULT_QUEUES_PER_IDENTITY: usize = crate::coord::DEFAULT_MAX_QUEUES / 5;
/// Unary calls per second per identity: far above a client validating a fencing token per
/// write, far below what lets one tenant keep a gateway's cores busy.
pub const DEFAULT_UNARY_RATE_PER_IDENTITY: u32 = 5_000;
/// As the HTTP/2 room for unary calls on one connection (`http2_max_concurrent_streams`).
pub const DEFAULT_UNARY_IN_FLIGHT_PER_IDENTITY: usize = 1_000;
/// Unary calls in flight on the whole gateway, with or without a policy: twice one identity's,
/// so one tenant at its own limit leaves the others half. The calls past the few whose work is
/// on the ZooKeeper session at once (`coord::session::UNARY_WORK_IN_FLIGHT`) wait in the
/// gateway; this bounds that wait (1–3 s under the isolation test's flood on this project's
/// 2-core machine, which answered ≈ 600 reads/s with a debug build, ≈ 1,700/s with a release
/// one) and its memory, and turns a flood from one client without a policy into `RESOURCE_EXHAUSTED`
/// instead of a queue.
pub const DEFAULT_UNARY_IN_FLIGHT_PER_GATEWAY: usize = 2_000;
/// Without a policy, unary calls of one kind in flight from one client address (IP, every
/// connection from it together): half the gateway's, so one client machine's flood leaves the
/// others at least half, as a tenant's does under a policy.
pub const DEFAULT_UNARY_IN_FLIGHT_PER_CLIENT: usize = 1_000;
/// Client connections from one client address (IP) open at once: a client process needs one
/// per gateway, a machine a few hundred at most; a flood of connections from one machine stops
/// here, leaving the gateway's other connections to everyone else.
pub const DEFAULT_CONNECTIONS_PER_CLIENT: usize = 1_000;
/// File descriptors left for everything but client connections when `--max-connections` is 0
/// (its default): the ZooKeeper sessions and their reconnects, the HTTP port's scrapes, the
/// files the gateway opens. A connection flood then meets `--max-connections` before the
/// open-file limit, so a ZooKeeper reconnect always finds a descriptor.
pub const CONNECTION_FD_RESERVE: usize = 256;
/// 16 MiB of election values per identity (256 default-sized values of 64 KiB).
pub const DEFAULT_BYTES_IN_FLIGHT_PER_IDENTITY: usize = 16 * 1024 * 1024;
pub const DEFAULT_FIRST_MESSAGE_TIMEOUT: Duration = Duration::from_secs(10);

/// The configured stream limits, declared once: each field is a `serve` flag, a `ZKGATE_*`
/// variable and a `--config` key (README "zkgate serve"), flattened into
/// [`crate::config::ServeArgs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args, serde::Serialize, serde::Deserialize)]
pub struct StreamLimits {
    /// Open Campaign + Acquire streams on this gateway; past it RESOURCE_EXHAUSTED
    #[arg(id = "max_holder_streams", value_name = "MAX_HOLDER_STREAMS", long = "max-holder-streams", env = "ZKGATE_MAX_HOLDER_STREAMS", default_value_t = DEFAULT_HOLDER_STREAMS_PER_GATEWAY)]
    #[serde(rename = "max_holder_streams")]
    pub holder_streams_per_gateway: usize,
    /// Open Campaign + Acquire streams per client connection
    #[arg(id = "max_holder_streams_per_connection", value_name = "MAX_HOLDER_STREAMS_PER_CONNECTION", long = "max-holder-streams-per-connection", env = "ZKGATE_MAX_HOLDER_STREAMS_PER_CONNECTION", default_value_t = DEFAULT_HOLDER_STREAMS_PER_CONNECTION)]
    #[serde(rename = "max_holder_streams_per_connection")]
    pub holder_streams_per_connection: usize,
    /// Open Observe streams per client connection
    #[arg(id = "max_observe_streams_per_connection", value_name = "MAX_OBSERVE_STREAMS_PER_CONNECTION", long = "max-observe-streams-per-connection", env = "ZKGATE_MAX_OBSERVE_STREAMS_PER_CONNECTION", default_value_t = DEFAULT_OBSERVE_STREAMS_PER_CONNECTION)]
    #[serde(rename = "max_observe_streams_per_connection")]
    pub observe_streams_per_connection: usize,
    /// Elections one ObserveMany stream may follow at once; past it RESOURCE_EXHAUSTED
    #[arg(id = "max_observe_many_elections", value_name = "MAX_OBSERVE_MANY_ELECTIONS", long = "max-observe-many-elections", env = "ZKGATE_MAX_OBSERVE_MANY_ELECTIONS", default_value_t = crate::coord::observe_many::DEFAULT_MAX_OBSERVE_MANY_ELECTIONS)]
    #[serde(rename = "max_observe_many_elections")]
    pub observe_many_elections: usize,
    /// Under --auth-policy: open Campaign/Acquire streams per identity on this gateway
    #[arg(id = "max_holder_streams_per_identity", value_name = "MAX_HOLDER_STREAMS_PER_IDENTITY", long = "max-holder-streams-per-identity", env = "ZKGATE_MAX_HOLDER_STREAMS_PER_IDENTITY", default_value_t = DEFAULT_HOLDER_STREAMS_PER_IDENTITY)]
    #[serde(rename = "max_holder_streams_per_identity")]
    pub holder_streams_per_identity: usize,
    /// Under --auth-policy: open Observe streams per identity on this gateway
    #[arg(id = "max_observe_streams_per_identity", value_name = "MAX_OBSERVE_STREAMS_PER_IDENTITY", long = "max-observe-streams-per-identity", env = "ZKGATE_MAX_OBSERVE_STREAMS_PER_IDENTITY", default_value_t = DEFAULT_OBSERVE_STREAMS_PER_IDENTITY)]
    #[serde(rename = "max_observe_streams_per_identity")]
    pub observe_streams_per_identity: usize,
    /// Under --auth-policy: distinct elections + locks one identity's Campaign/Acquire streams are in
    #[arg(id = "max_queues_per_identity", value_name = "MAX_QUEUES_PER_IDENTITY", long = "max-queues-per-identity", env = "ZKGATE_MAX_QUEUES_PER_IDENTITY", default_value_t = DEFAULT_QUEUES_PER_IDENTITY)]
    #[serde(rename = "max_queues_per_identity")]
    pub queues_per_identity: usize,
    /// Unary calls in flight at once on this gateway; past it RESOURCE_EXHAUSTED
    #[arg(id = "max_unary_in_flight", value_name = "MAX_UNARY_IN_FLIGHT", long = "max-unary-in-flight", env = "ZKGATE_MAX_UNARY_IN_FLIGHT", default_value_t = DEFAULT_UNARY_IN_FLIGHT_PER_GATEWAY)]
    #[serde(rename = "max_unary_in_flight")]
    pub unary_in_flight_per_gateway: usize,
    /// Without --auth-policy: unary calls of each kind in flight at once from one client address (IP)
    #[arg(id = "max_unary_in_flight_per_client", value_name = "MAX_UNARY_IN_FLIGHT_PER_CLIENT", long = "max-unary-in-flight-per-client", env = "ZKGATE_MAX_UNARY_IN_FLIGHT_PER_CLIENT", default_value_t = DEFAULT_UNARY_IN_FLIGHT_PER_CLIENT)]
    #[serde(rename = "max_unary_in_flight_per_client")]
    pub unary_in_flight_per_client: usize,
    /// Client connections open at once; 0: the open-file limit less 256, the descriptors kept for ZooKeeper and the HTTP port
    #[arg(
        id = "max_connections",
        value_name = "MAX_CONNECTIONS",
        long = "max-connections",
        env = "ZKGATE_MAX_CONNECTIONS",
        default_value_t = 0
    )]
    #[serde(rename = "max_connections")]
    pub connections_per_gateway: usize,
    /// Client connections open at once from one client address (IP)
    #[arg(id = "max_connections_per_client", value_name = "MAX_CONNECTIONS_PER_CLIENT", long = "max-connections-per-client", env = "ZKGATE_MAX_CONNECTIONS_PER_CLIENT", default_value_t = DEFAULT_CONNECTIONS_PER_CLIENT)]
    #[serde(rename = "max_connections_per_client")]
    pub connections_per_client: usize,
    /// Under --auth-policy: unary calls per second per identity (bursts of one second's worth)
    #[arg(id = "max_unary_rate_per_identity", value_name = "MAX_UNARY_RATE_PER_IDENTITY", long = "max-unary-rate-per-identity", env = "ZKGATE_MAX_UNARY_RATE_PER_IDENTITY", default_value_t = DEFAULT_UNARY_RATE_PER_IDENTITY)]
    #[serde(rename = "max_unary_rate_per_identity")]
    pub unary_rate_per_identity: u32,
    /// Under --auth-policy: unary calls in flight at once per identity
    #[arg(id = "max_unary_in_flight_per_identity", value_name = "MAX_UNARY_IN_FLIGHT_PER_IDENTITY", long = "max-unary-in-flight-per-identity", env = "ZKGATE_MAX_UNARY_IN_FLIGHT_PER_IDENTITY", default_value_t = DEFAULT_UNARY_IN_FLIGHT_PER_IDENTITY)]
    #[serde(rename = "max_unary_in_flight_per_identity")]
    pub unary_in_flight_per_identity: usize,
    /// Under --auth-policy: election value bytes per identity its Campaign streams keep in
    /// ZooKeeper, plus Proclaim-by-lease values while the call runs
    #[arg(id = "max_bytes_in_flight_per_identity", value_name = "MAX_BYTES_IN_FLIGHT_PER_IDENTITY", long = "max-bytes-in-flight-per-identity", env = "ZKGATE_MAX_BYTES_IN_FLIGHT_PER_IDENTITY", default_value_t = DEFAULT_BYTES_IN_FLIGHT_PER_IDENTITY)]
    #[serde(rename = "max_bytes_in_flight_per_identity")]
    pub bytes_in_flight_per_identity: usize,
    /// A Campaign/Acquire stream must send join/acquire within this
    #[arg(long, env = "ZKGATE_FIRST_MESSAGE_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub first_message_timeout: Duration,
}

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            holder_streams_per_gateway: DEFAULT_HOLDER_STREAMS_PER_GATEWAY,
            holder_streams_per_connection: DEFAULT_HOLDER_STREAMS_PER_CONNECTION,
            observe_streams_per_connection: DEFAULT_OBSERVE_STREAMS_PER_CONNECTION,
            observe_many_elections: crate::coord::observe_many::DEFAULT_MAX_OBSERVE_MANY_ELECTIONS,
            holder_streams_per_identity: DEFAULT_HOLDER_STREAMS_PER_IDENTITY,
            observe_streams_per_identity: DEFAULT_OBSERVE_STREAMS_PER_IDENTITY,
            queues_per_identity: DEFAULT_QUEUES_PER_IDENTITY,
            unary_in_flight_per_gateway: DEFAULT_UNARY_IN_FLIGHT_PER_GATEWAY,
            unary_in_flight_per_client: DEFAULT_UNARY_IN_FLIGHT_PER_CLIENT,
            connections_per_gateway: 0,
            connections_per_client: DEFAULT_CONNECTIONS_PER_CLIENT,
            unary_rate_per_identity: DEFAULT_UNARY_RATE_PER_IDENTITY,
            unary_in_flight_per_identity: DEFAULT_UNARY_IN_FLIGHT_PER_IDENTITY,
            bytes_in_flight_per_identity: DEFAULT_BYTES_IN_FLIGHT_PER_IDENTITY,
            first_message_timeout: DEFAULT_FIRST_MESSAGE_TIMEOUT,
        }
    }
}

impl StreamLimits {
    /// The HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS` to advertise: room for every stream the
    /// limits admit on one connection plus unary calls, so our own limits answer first.
    pub fn http2_max_concurrent_streams(&self) -> u32 {
        (self.holder_streams_per_connection + self.observe_streams_per_connection + 1_000)
            .min(u32::MAX as usize) as u32
    }
}

/// Client connections open at once, gateway-wide and per client address (G10). A connection
/// past either is closed as soon as it is accepted: before HTTP/2 there is no status to send,
/// and the client sees `UNAVAILABLE`. The gateway-wide bound keeps the open-file limit out of
/// a flood's reach: a ZooKeeper session that has to reconnect needs a descriptor, and without
/// one it expires, and every hold on it is lost.
#[derive(Debug)]
pub struct Connections {
    max: usize,
    per_client: usize,
    open: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

impl Connections {
    /// `max` 0 means the open-file limit less [`CONNECTION_FD_RESERVE`] (at least 16).
    pub fn new(limits: &StreamLimits) -> Arc<Self> {
        let max = match limits.connections_per_gateway {
            0 => open_file_limit().map_or(usize::MAX, |n| {
                n.saturating_sub(CONNECTION_FD_RESERVE).max(16)
            }),
            n => n,
        };
        Arc::new(Self {
            max,
            per_client: limits.connections_per_client,
            open: Mutex::new((0, HashMap::new())),
        })
    }

    /// The gateway-wide bound in force.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Admits a connection from `ip`, or names the bound it is past (counted in
    /// `zkgate_limit_rejections_total`).
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionPermit, Limit> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let (total, by_ip) = &mut *open;
        let from_ip = by_ip.get(&ip).copied().unwrap_or(0);
        let refused = if *total >= self.max {
            Some(Limit::ConnectionsPerGateway(self.max))
        } else if from_ip >= self.per_client {
            Some(Limit::ConnectionsPerClient(ip, self.per_client))
        } else {
            None
        };
        if let Some(limit) = refused {
            crate::metrics::limit_rejected(limit.label());
            return Err(limit);
        }
        *total += 1;
        by_ip.insert(ip, from_ip + 1);
        Ok(ConnectionPermit {
            connections: self.clone(),
            ip,
        })
    }
}

/// One admitted connection's place; given back when the connection is dropped.
#[derive(Debug)]
pub struct ConnectionPermit {
    connections: Arc<Connections>,
    ip: IpAddr,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        let mut open = self
            .connections
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (total, by_ip) = &mut *open;
        *total = total.saturating_sub(1);
        if let Some(n) = by_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                by_ip.remove(&self.ip);
            }
        }
    }
}

/// Raises the process's soft open-file limit to its hard limit, as Go's runtime does for every
/// Go server (etcd, Consul): a shell's soft limit is often 1,024 while the hard one allows
/// far more, and `--max-connections` defaults to what the soft limit leaves. Nothing in the
/// gateway uses `select(2)`, the only reason to keep descriptors below 1,024.
pub fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::debug!(error = %e, "could not raise the open-file limit");
        }
    }
}

/// The process's soft open-file limit, `None` when unlimited.
pub fn open_file_limit() -> Option<usize> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}

#[derive(Debug, Default, Clone, Copy)]
struct PerConnection {
    holders: usize,
    observers: usize,
}

/// What one identity has open on this gateway, under a policy.
#[derive(Debug, Default)]
struct PerIdentity {
    holders: usize,
    observers: usize,
    /// Holder streams per name (a name is one queue however many streams are in it).
    queues: HashMap<String, usize>,
    unary: usize,
    bytes: usize,
    /// `None` until its first unary call: a full bucket.
    bucket: Option<TokenBucket>,
}

impl PerIdentity {
    /// Nothing open and a full bucket: forgetting the entry loses nothing (a fresh one is the
    /// same), so idle identities take no memory.
    fn idle(&self, now: Instant, rate: u32) -> bool {
        self.holders == 0
            && self.observers == 0
            && self.queues.is_empty()
            && self.unary == 0
            && self.bytes == 0
            && self.bucket.is_none_or(|b| b.full(now, rate))
    }
}

/// A token bucket: `rate` tokens a second, holding at most one second's worth (at least one
/// token). Pure: the caller passes the time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn full_at(now: Instant, rate: u32) -> Self {
        Self {
            tokens: Self::capacity(rate),
            at: now,
        }
    }

    fn capacity(rate: u32) -> f64 {
        f64::from(rate.max(1))
    }

    fn refill(&mut self, now: Instant, rate: u32) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * f64::from(rate)).min(Self::capacity(rate));
        self.at = self.at.max(now);
    }

    /// Takes one token at `now` if there is one.
    pub fn take(&mut self, now: Instant, rate: u32) -> bool {
        self.refill(now, rate);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Whether the bucket is full at `now`.
    pub fn full(&self, now: Instant, rate: u32) -> bool {
        let mut b = *self;
        b.refill(now, rate);
        b.tokens >= Self::capacity(rate)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamKind {
    Holder,
    Observer,
}

/// Counts open streams against [`StreamLimits`]; shared by both services.
#[derive(Debug)]
pub struct Admission {
    limits: StreamLimits,
    holders: AtomicUsize,
    /// Unary calls in flight on this gateway, per kind (`--max-unary-in-flight` each).
    unary: [AtomicUsize; 2],
    /// Without a policy: unary calls in flight per client address and kind
    /// (`--max-unary-in-flight-per-client`); entries leave at zero.
    clients: Mutex<HashMap<(IpAddr, UnaryWork), usize>>,
    connections: Mutex<HashMap<SocketAddr, PerConnection>>,
    /// Under a policy: what each identity has open.
    identities: Mutex<HashMap<Identity, PerIdentity>>,
}

/// One admitted stream; dropping it (the stream ended) gives its place back.
#[derive(Debug)]
pub struct StreamPermit {
    admission: Arc<Admission>,
    connection: Option<SocketAddr>,
    identity: Option<Identity>,
    kind: StreamKind,
}

impl Admission {
    pub fn new(limits: StreamLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            holders: AtomicUsize::new(0),
            unary: Default::default(),
            clients: Mutex::new(HashMap::new()),
            connections: Mutex::new(HashMap::new()),
            identities: Mutex::new(HashMap::new()),
        })
    }

    pub fn limits(&self) -> &StreamLimits {
        &self.limits
    }

    /// Admits a Campaign or Acquire stream from `connection` by `identity` (`None`: no policy,
    /// no per-identity limit). The identity's own limit is checked first, so a tenant's flood
    /// meets it before the gateway-wide one.
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` past the per-identity, per-gateway or per-connection holder limit.
    pub fn holder(
        self: &Arc<Self>,
        connection: Option<SocketAddr>,
        identity: Option<&Identity>,
    ) -> Result<StreamPermit, CoordError> {
        self.count_identity(identity, StreamKind::Holder)?;
        let identity = identity.cloned();
        let undo_identity = |a: &Self| a.uncount_identity(identity.as_ref(), StreamKind::Holder);
        let max = self.limits.holder_streams_per_gateway;
        if self.holders.fetch_add(1, Ordering::AcqRel) >= max {
            self.holders.fetch_sub(1, Ordering::AcqRel);
            undo_identity(self);
            return Err(Limit::HolderStreamsPerGateway(max).reject());
        }
        if let Err(status) = self.count(connection, StreamKind::Holder) {
            self.holders.fetch_sub(1, Ordering::AcqRel);
            undo_identity(self);
            return Err(status);
        }
        Ok(StreamPermit {
            admission: self.clone(),
            connection,
            identity,
            kind: StreamKind::Holder,
        })
    }

    /// Admits an Observe stream from `connection` by `identity` (as [`Admission::holder`]).
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` past the per-identity or per-connection Observe limit.
    pub fn observer(
        self: &Arc<Self>,
        connection: Option<SocketAddr>,
        identity: Option<&Identity>,
    ) -> Result<StreamPermit, CoordError> {
        self.count_identity(identity, StreamKind::Observer)?;
        if let Err(e) = self.count(connection, StreamKind::Observer) {
            self.uncount_identity(identity, StreamKind::Observer);
            return Err(e);
        }
        Ok(StreamPermit {
            admission: self.clone(),
            connection,
            identity: identity.cloned(),
            kind: StreamKind::Observer,
        })
    }

    /// Runs `f` on `identity`'s entry and forgets the entry when it is left idle.
    fn with_identity<R>(&self, id: &Identity, f: impl FnOnce(&mut PerIdentity) -> R) -> R {
        let mut map = self.identities.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(id.clone()).or_default();
        let r = f(entry);
        if entry.idle(Instant::now(), self.limits.unary_rate_per_identity) {
            map.remove(id);
        }
        r
    }

    /// Counts the refusal of `limit` for `id` and returns its error.
    fn refuse(id: &Identity, limit: Limit) -> CoordError {
        m::identity_limit_rejected(limit.label(), id.as_str());
        limit.reject()
    }

    fn count_identity(
        &self,
        identity: Option<&Identity>,
        kind: StreamKind,
    ) -> Result<(), CoordError> {
        let Some(id) = identity else {
            return Ok(());
        };
        self.with_identity(id, |entry| {
            let (open, max, limit) = match kind {
                StreamKind::Holder => (
                    &mut entry.holders,
                    self.limits.holder_streams_per_identity,
                    Limit::HolderStreamsPerIdentity as fn(String, usize) -> Limit,
                ),
                StreamKind::Observer => (
                    &mut entry.observers,
                    self.limits.observe_streams_per_identity,
                    Limit::ObserveStreamsPerIdentity as fn(String, usize) -> Limit,
                ),
            };
            if *open >= max {
                return Err(Self::refuse(id, limit(id.to_string(), max)));
            }
            *open += 1;
            Ok(())
        })
    }

    fn uncount_identity(&self, identity: Option<&Identity>, kind: StreamKind) {
        let Some(id) = identity else {
            return;
        };
        self.with_identity(id, |entry| match kind {
            StreamKind::Holder => entry.holders = entry.holders.saturating_sub(1),
            StreamKind::Observer => entry.observers = entry.observers.saturating_sub(1),
        });
    }

    /// Admits `identity`'s holder stream into the queue `name` (`None`: no policy). Checked
    /// after the first message names it and before the coordination layer's `--max-queues`.
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` when `name` would be one name more than `--max-queues-per-identity`.
    pub fn queue(
        self: &Arc<Self>,
        identity: Option<&Identity>,
        name: &str,
    ) -> Result<QueuePermit, CoordError> {
        let Some(id) = identity else {
            return Ok(QueuePermit {
                admission: self.clone(),
                counted: None,
            });
        };
        let max = self.limits.queues_per_identity;
        self.with_identity(id, |entry| {
            if !entry.queues.contains_key(name) && entry.queues.len() >= max {
                return Err(Self::refuse(
                    id,
                    Limit::QueuesPerIdentity(id.to_string(), max),
                ));
            }
            *entry.queues.entry(name.to_owned()).or_default() += 1;
            Ok(())
        })?;
        Ok(QueuePermit {
            admission: self.clone(),
            counted: Some((id.clone(), name.to_owned())),
        })
    }

    /// Admits one unary call of `kind` by `identity` from `peer`: first the identity's calls in
    /// flight and its rate under a policy (a refused call takes no token), or without one
    /// (`identity` `None`) the calls of that kind in flight from the peer's address, so one
    /// tenant's or one client machine's flood meets its own limit first; then the gateway's
    /// calls of that kind in flight (so a flood of reads never refuses a by-lease release, nor
    /// the reverse).
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` past `--max-unary-in-flight-per-identity`,
    /// `--max-unary-rate-per-identity`, `--max-unary-in-flight-per-client` or
    /// `--max-unary-in-flight`.
    pub fn unary(
        self: &Arc<Self>,
        identity: Option<&Identity>,
        peer: Option<SocketAddr>,
        kind: UnaryWork,
    ) -> Result<UnaryPermit, CoordError> {
        let client = match identity {
            Some(id) => {
                self.count_unary(id)?;
                None
            }
            None => match peer {
                Some(addr) => Some(self.count_client(addr.ip(), kind)?),
                None => None,
            },
        };
        let permit = UnaryPermit {
            admission: self.clone(),
            identity: identity.cloned(),
            client,
            kind,
        };
        let max = self.limits.unary_in_flight_per_gateway;
        // Counted before the check: the permit's drop gives it back, refused or not.
        if self.unary[kind as usize].fetch_add(1, Ordering::AcqRel) >= max {
            drop(permit);
            return Err(Limit::UnaryInFlightPerGateway(kind, max).reject());
        }
        Ok(permit)
    }

    /// Counts one unary call of `kind` from `ip` (no policy) against its calls in flight.
    fn count_client(&self, ip: IpAddr, kind: UnaryWork) -> Result<IpAddr, CoordError> {
        let max = self.limits.unary_in_flight_per_client;
        let mut map = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry((ip, kind)).or_default();
        if *n >= max {
            if *n == 0 {
                map.remove(&(ip, kind));
            }
            return Err(Limit::UnaryInFlightPerClient(kind, ip, max).reject());
        }
        *n += 1;
        Ok(ip)
    }

    /// Gives back one unary call of `kind` from `ip`.
    fn uncount_client(&self, ip: IpAddr, kind: UnaryWork) {
        let mut map = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&(ip, kind)) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&(ip, kind));
            }
        }
    }

    /// Counts one unary call of `id` against its calls in flight and its rate.
    fn count_unary(&self, id: &Identity) -> Result<(), CoordError> {
        let (max, rate) = (
            self.limits.unary_in_flight_per_identity,
            self.limits.unary_rate_per_identity,
        );
        self.with_identity(id, |entry| {
            if entry.unary >= max {
                return Err(Self::refuse(
                    id,
                    Limit::UnaryInFlightPerIdentity(id.to_string(), max),
                ));
            }
            let now = Instant::now();
            let bucket = entry
                .bucket
                .get_or_insert_with(|| TokenBucket::full_at(now, rate));
            if !bucket.take(now, rate) {
                return Err(Self::refuse(
                    id,
                    Limit::UnaryRatePerIdentity(id.to_string(), rate),
                ));
            }
            entry.unary += 1;
            Ok(())
        })
    }

    /// Admits `len` election value bytes of `identity` (`None`: no policy), held until the
    /// permit is dropped or [`BytesPermit::resize`]d.
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` past `--max-bytes-in-flight-per-identity`.
    pub fn bytes(
        self: &Arc<Self>,
        identity: Option<&Identity>,
        len: usize,
    ) -> Result<BytesPermit, CoordError> {
        let mut permit = BytesPermit {
            admission: self.clone(),
            identity: identity.cloned(),
            len: 0,
        };
        permit.resize(len)?;
        Ok(permit)
    }

    fn count(&self, connection: Option<SocketAddr>, kind: StreamKind) -> Result<(), CoordError> {
        let Some(addr) = connection else {
            return Ok(());
        };
        let mut map = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(addr).or_default();
        match kind {
            StreamKind::Holder => {
                let max = self.limits.holder_streams_per_connection;
                if entry.holders >= max {
                    return Err(Limit::HolderStreamsPerConnection(max).reject());
                }
                entry.holders += 1;
            }
            StreamKind::Observer => {
                let max = self.limits.observe_streams_per_connection;
                if entry.observers >= max {
                    return Err(Limit::ObserveStreamsPerConnection(max).reject());
                }
                entry.observers += 1;
            }
        }
        Ok(())
    }

    /// Open holder streams on this gateway (tests, metrics).
    pub fn holder_streams(&self) -> usize {
        self.holders.load(Ordering::Acquire)
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        if self.kind == StreamKind::Holder {
            self.admission.holders.fetch_sub(1, Ordering::AcqRel);
        }
        self.admission
            .uncount_identity(self.identity.as_ref(), self.kind);
        let Some(addr) = self.connection else {
            return;
        };
        let mut map = self
            .admission
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = map.get_mut(&addr) {
            match self.kind {
                StreamKind::Holder => entry.holders = entry.holders.saturating_sub(1),
                StreamKind::Observer => entry.observers = entry.observers.saturating_sub(1),
            }
            if entry.holders == 0 && entry.observers == 0 {
                map.remove(&addr);
            }
        }
    }
}

/// One identity's place in one queue (see [`Admission::queue`]); dropping it gives it back.
#[derive(Debug)]
pub struct QueuePermit {
    admission: Arc<Admission>,
    counted: Option<(Identity, String)>,
}

impl Drop for QueuePermit {
    fn drop(&mut self) {
        let Some((id, name)) = self.counted.take() else {
            return;
        };
        self.admission.with_identity(&id, |entry| {
            if let Some(n) = entry.queues.get_mut(&name) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    entry.queues.remove(&name);
                }
            }
        });
    }
}

/// One unary call in flight (see [`Admission::unary`]).
#[derive(Debug)]
pub struct UnaryPermit {
    admission: Arc<Admission>,
    identity: Option<Identity>,
    /// The client address it was counted for (no policy).
    client: Option<IpAddr>,
    kind: UnaryWork,
}

impl Drop for UnaryPermit {
    fn drop(&mut self) {
        self.admission.unary[self.kind as usize].fetch_sub(1, Ordering::AcqRel);
        if let Some(ip) = self.client {
            self.admission.uncount_client(ip, self.kind);
        }
        if let Some(id) = &self.identity {
            self.admission
                .with_identity(id, |entry| entry.unary = entry.unary.saturating_sub(1));
        }
    }
}

/// Election value bytes an identity has outstanding (see [`Admission::bytes`]).
#[derive(Debug)]
pub struct BytesPermit {
    admission: Arc<Admission>,
    identity: Option<Identity>,
    len: usize,
}

impl BytesPermit {
    /// Holds `len` bytes instead of what it held (a proclaim replacing a value). On refusal it
    /// keeps what it held.
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` when the growth passes `--max-bytes-in-flight-per-identity`.
    pub fn resize(&mut self, len: usize) -> Result<(), CoordError> {
        let Some(id) = &self.identity else {
            return Ok(());
        };
        let (old, max) = (self.len, self.admission.limits.bytes_in_flight_per_identity);
        self.admission.with_identity(id, |entry| {
            let others = entry.bytes.saturating_sub(old);
            if len > old && others + len > max {
                return Err(Admission::refuse(
                    id,
                    Limit::BytesInFlightPerIdentity(id.to_string(), max),
                ));
            }
            entry.bytes = others + len;
            Ok(())
        })?;
        self.len = len;
        Ok(())
    }
}

impl Drop for BytesPermit {
    fn drop(&mut self) {
        let _ = self.resize(0);
    }
}

/// The first message of a holder stream, within the first-message timeout. A stream that
/// sends nothing ends `DEADLINE_EXCEEDED` and never delays a drain (it ends `UNAVAILABLE` at
/// once when the gateway drains).
///
/// # Errors
/// `DEADLINE_EXCEEDED` on timeout, `UNAVAILABLE` when draining, `INVALID_ARGUMENT` when the
/// client closes its side first, or the transport's status.
pub(super) async fn first_message<T>(
    inbound: &mut Streaming<T>,
    within: Duration,
    draining: &CancellationToken,
    what: &'static str,
) -> Result<T, Status> {
    tokio::select! {
        biased;
        _ = draining.cancelled() => Err(CoordError::Draining.into()),
        r = tokio::time::timeout(within, inbound.message()) => match r {
            Err(_) => {
                m::limit_rejected("first_message_timeout");
                Err(CoordError::FirstMessageTimeout { what, within }.into())
            }
            Ok(Ok(Some(msg))) => Ok(msg),
            Ok(Ok(None)) => Err(CoordError::from(InvalidInput::ClosedBeforeFirst { what }).into()),
            // The transport's own status, passed on as it is.
            Ok(Err(status)) => Err(status),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use UnaryWork::{ByLease, Read};

    fn addr(port: u16) -> Option<SocketAddr> {
        Some(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    #[test]
    fn per_connection_and_per_gateway_limits_and_release_on_drop() {
        let a = Admission::new(StreamLimits {
            holder_streams_per_gateway: 3,
            holder_streams_per_connection: 2,
            observe_streams_per_connection: 1,
            ..Default::default()
        });
        let h1 = a.holder(addr(1), None).unwrap();
        let _h2 = a.holder(addr(1), None).unwrap();
        let e = Status::from(a.holder(addr(1), None).unwrap_err());
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(
            e.message()
                .contains("--max-holder-streams-per-connection = 2"),
            "{e:?}"
        );
        let _h3 = a.holder(addr(2), None).unwrap();
        let e = Status::from(a.holder(addr(3), None).unwrap_err());
        assert!(e.message().contains("--max-holder-streams = 3"), "{e:?}");
        assert_eq!(a.holder_streams(), 3);
        drop(h1);
        assert_eq!(a.holder_streams(), 2);
        let _h4 = a.holder(addr(1), None).unwrap();
        let _o1 = a.observer(addr(1), None).unwrap();
        assert!(a.observer(addr(1), None).is_err());
        assert!(a.observer(addr(2), None).is_ok());
    }

    #[test]
    fn per_identity_limits_come_first_and_spare_other_tenants() {
        let a = Admission::new(StreamLimits {
            holder_streams_per_gateway: 4,
            holder_streams_per_identity: 2,
            observe_streams_per_identity: 1,
            ..Default::default()
        });
        let flood = Identity::Named("flood".into());
        let quiet = Identity::Named("quiet".into());
        let h1 = a.holder(addr(1), Some(&flood)).unwrap();
        let _h2 = a.holder(addr(2), Some(&flood)).unwrap();
        let e = Status::from(a.holder(addr(3), Some(&flood)).unwrap_err());
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        for part in ["flood", "--max-holder-streams-per-identity = 2"] {
            assert!(e.message().contains(part), "{e:?}");
        }
        assert_eq!(a.holder_streams(), 2, "a refused stream takes no place");
        let _q1 = a.holder(addr(3), Some(&quiet)).unwrap();
        let _q2 = a.holder(addr(3), Some(&quiet)).unwrap();
        drop(h1);
        let _h3 = a.holder(addr(1), Some(&flood)).unwrap();
        // The gateway-wide limit still stands behind them, and a refusal there gives the
        // identity's place back.
        let e = Status::from(a.holder(addr(4), Some(&Identity::Anonymous)).unwrap_err());
        assert!(e.message().contains("--max-holder-streams = 4"), "{e:?}");
        let _o = a.observer(addr(1), Some(&flood)).unwrap();
        let e = Status::from(a.observer(addr(2), Some(&flood)).unwrap_err());
        assert!(
            e.message()
                .contains("--max-observe-streams-per-identity = 1"),
            "{e:?}"
        );
        assert!(a.observer(addr(2), Some(&quiet)).is_ok());
        assert!(
            a.observer(addr(2), None).is_ok(),
            "no policy: no per-identity limit"
        );
    }

    #[test]
    fn unary_calls_in_flight_on_the_gateway_with_or_without_a_policy() {
        let a = Admission::new(StreamLimits {
            unary_in_flight_per_gateway: 2,
            unary_in_flight_per_identity: 1,
            ..Default::default()
        });
        let tenant = Identity::Named("tenant".into());
        let other = Identity::Named("other".into());
        let u1 = a.unary(None, None, Read).unwrap();
        // The identity's own limit first: a refusal there takes no gateway place.
        let t1 = a.unary(Some(&tenant), None, Read).unwrap();
        let e = Status::from(a.unary(Some(&tenant), None, Read).unwrap_err());
        assert!(
            e.message()
                .contains("--max-unary-in-flight-per-identity = 1"),
            "{e:?}"
        );
        // The gateway is full: refused without a policy and with one, and a refusal here
        // gives the identity's place back.
        for who in [None, Some(&other)] {
            let e = Status::from(a.unary(who, None, Read).unwrap_err());
            assert_eq!(e.code(), tonic::Code::ResourceExhausted);
            assert!(e.message().contains("--max-unary-in-flight = 2"), "{e:?}");
        }
        drop(u1);
        let o1 = a.unary(Some(&other), None, Read).unwrap();
        assert!(a.unary(None, None, Read).is_err(), "refusals took no place");
        // Reads fill it, not the by-lease calls, which have a count of their own.
        let _ends = (
            a.unary(None, None, ByLease).unwrap(),
            a.unary(None, None, ByLease).unwrap(),
        );
        let e = Status::from(a.unary(None, None, ByLease).unwrap_err());
        assert!(e.message().contains("by-lease calls"), "{e:?}");
        drop((t1, o1));
        let _both = (
            a.unary(None, None, Read).unwrap(),
            a.unary(None, None, Read).unwrap(),
        );
    }

    #[test]
    fn connections_per_client_address_and_per_gateway() {
        let c = Connections::new(&StreamLimits {
            connections_per_gateway: 3,
            connections_per_client: 2,
            ..Default::default()
        });
        let (a, b): (IpAddr, IpAddr) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        let a1 = c.admit(a).unwrap();
        let _a2 = c.admit(a).unwrap();
        assert_eq!(
            c.admit(a).unwrap_err(),
            Limit::ConnectionsPerClient(a, 2),
            "the address's bound"
        );
        let b1 = c.admit(b).unwrap();
        assert_eq!(c.admit(b).unwrap_err(), Limit::ConnectionsPerGateway(3));
        // Places come back with the connections, refusals took none.
        drop(a1);
        let _b2 = c.admit(b).unwrap();
        drop(b1);
        assert_eq!(c.open.lock().unwrap().0, 2);
        assert_eq!(c.open.lock().unwrap().1.get(&a), Some(&1));
        // 0: the open-file limit less the reserve.
        let auto = Connections::new(&StreamLimits::default());
        match open_file_limit() {
            Some(n) => assert_eq!(auto.max(), n.saturating_sub(CONNECTION_FD_RESERVE).max(16)),
            None => assert_eq!(auto.max(), usize::MAX),
        }
    }

    #[test]
    fn without_a_policy_one_client_address_gets_half_the_gateway() {
        let a = Admission::new(StreamLimits {
            unary_in_flight_per_gateway: 4,
            unary_in_flight_per_client: 2,
            ..Default::default()
        });
        let (flood, other) = (addr(1), Some(SocketAddr::from(([10, 0, 0, 2], 1))));
        let same_host = addr(2);
        let f1 = a.unary(None, flood, Read).unwrap();
        // Every connection from one address counts together.
        let _f2 = a.unary(None, same_host, Read).unwrap();
        let e = Status::from(a.unary(None, flood, Read).unwrap_err());
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        for part in ["127.0.0.1", "--max-unary-in-flight-per-client = 2", "read"] {
            assert!(e.message().contains(part), "{e:?}");
        }
        // The other kind, and other addresses, still get in; the refusal took no place.
        let _l = a.unary(None, flood, ByLease).unwrap();
        let _o = (
            a.unary(None, other, Read).unwrap(),
            a.unary(None, other, Read).unwrap(),
        );
        let e = Status::from(
            a.unary(None, Some(SocketAddr::from(([10, 0, 0, 3], 1))), Read)
                .unwrap_err(),
        );
        assert!(e.message().contains("--max-unary-in-flight = 4"), "{e:?}");
        // A gateway refusal gives the address's place back; a finished call too.
        drop(f1);
        let _f3 = a.unary(None, flood, Read).unwrap();
        assert_eq!(a.clients.lock().unwrap()[&(flood.unwrap().ip(), Read)], 2);
        // Under a policy the identity's limits count instead of the address.
        let tenant = Identity::Named("tenant".into());
        assert!(a.unary(Some(&tenant), flood, ByLease).is_ok());
    }

    /// (rate, the times of successive takes in ms from a full bucket, which are granted)
    #[test]
    fn token_bucket_refills_at_its_rate_and_holds_one_second() {
        type Row = (u32, &'static [u64], &'static [bool]);
        let table: [Row; 6] = [
            // A burst of one second's worth, then nothing until a token has come back.
            (2, &[0, 0, 0], &[true, true, false]),
            (2, &[0, 0, 0, 499, 500], &[true, true, false, false, true]),
            // Idle time refills, but never past one second's worth.
            (
                2,
                &[0, 0, 5_000, 5_000, 5_000],
                &[true, true, true, true, false],
            ),
            (
                10,
                &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                &[
                    true, true, true, true, true, true, true, true, true, true, false,
                ],
            ),
            // A rate of 0 still holds one token (never a gateway no call gets through), and never refills.
            (0, &[0, 0, 10_000], &[true, false, false]),
            // Time going backwards (another thread's `now`) takes nothing back.
            (1, &[1_000, 0, 2_000], &[true, false, true]),
        ];
        let start = Instant::now();
        for (rate, at, want) in table {
            let mut b = TokenBucket::full_at(start, rate);
            let got: Vec<bool> = at
                .iter()
                .map(|ms| b.take(start + Duration::from_millis(*ms), rate))
                .collect();
            assert_eq!(got, want, "rate {rate} at {at:?}");
        }
        let mut b = TokenBucket::full_at(start, 4);
        assert!(b.full(start, 4));
        assert!(b.take(start, 4));
        assert!(!b.full(start + Duration::from_millis(200), 4));
        assert!(b.full(start + Duration::from_millis(250), 4));
    }

    fn map_idle(a: &Admission, id: &Identity, at: Instant) -> bool {
        let map = a.identities.lock().unwrap();
        map[id].idle(at, a.limits.unary_rate_per_identity)
    }

    #[test]
    fn per_identity_queues_unary_calls_and_bytes_spare_other_tenants_and_are_given_back() {
        let a = Admission::new(StreamLimits {
            queues_per_identity: 2,
            unary_in_flight_per_identity: 2,
            unary_rate_per_identity: 3,
            bytes_in_flight_per_identity: 100,
            ..Default::default()
        });
        let flood = Identity::Named("flood".into());
        let quiet = Identity::Named("quiet".into());
        let message = |e: CoordError| Status::from(e).message().to_owned();
        // (what, result, the parts its refusal names)
        let q1 = a.queue(Some(&flood), "a").unwrap();
        let _q1b = a.queue(Some(&flood), "a").unwrap();
        let _q2 = a.queue(Some(&flood), "b").unwrap();
        let refused = message(a.queue(Some(&flood), "c").unwrap_err());
        let _q3 = a.queue(Some(&quiet), "c").unwrap();
        let _q4 = a.queue(None, "d").unwrap();
        drop(q1);
        assert!(
            a.queue(Some(&flood), "c").is_err(),
            "a is still in use by _q1b"
        );
        let u1 = a.unary(Some(&flood), None, Read).unwrap();
        let _u2 = a.unary(Some(&flood), None, Read).unwrap();
        let in_flight = message(a.unary(Some(&flood), None, Read).unwrap_err());
        drop(u1);
        let _u3 = a.unary(Some(&flood), None, Read).unwrap();
        drop(_u3);
        let rate = message(a.unary(Some(&flood), None, Read).unwrap_err());
        assert!(a.unary(Some(&quiet), None, Read).is_ok());
        assert!(a.unary(None, None, Read).is_ok());
        let mut b1 = a.bytes(Some(&flood), 60).unwrap();
        let bytes = message(a.bytes(Some(&flood), 41).unwrap_err());
        let b2 = a.bytes(Some(&flood), 40).unwrap();
        assert!(b1.resize(61).is_err(), "growing past it is refused");
        b1.resize(10).unwrap();
        let _b3 = a.bytes(Some(&flood), 50).unwrap();
        assert!(a.bytes(Some(&quiet), 100).is_ok());
        let table = [
            (refused, ["flood", "--max-queues-per-identity = 2"]),
            (
                in_flight,
                ["flood", "--max-unary-in-flight-per-identity = 2"],
            ),
            (rate, ["flood", "--max-unary-rate-per-identity = 3"]),
            (bytes, ["flood", "--max-bytes-in-flight-per-identity = 100"]),
        ];
        for (msg, parts) in table {
            for part in parts {
                assert!(msg.contains(part), "{part} in {msg}");
            }
        }
        drop((b1, b2, _b3, _q1b, _q2, _q3, _q4, _u2));
        // Everything given back; an entry stays only for a bucket not yet refilled.
        let map = a.identities.lock().unwrap();
        assert_eq!(map.len(), 2, "{map:?}");
        for e in map.values() {
            assert_eq!((e.holders, e.observers, e.unary, e.bytes), (0, 0, 0, 0));
            assert!(e.queues.is_empty() && e.bucket.is_some());
        }
        drop(map);
        // A refilled bucket is the same as none: the next change forgets the entry.
        let later = Instant::now() + Duration::from_secs(2);
        assert!(map_idle(&a, &quiet, later));
    }
}
