//! Everything the gateway can refuse or fail with, named by what happened. The API maps each
//! variant to exactly one gRPC code, in one place (`api::error`); the texts here are the
//! status messages clients see, so they read as sentences a person can act on.

use std::time::Duration;

use zookeeper_client as zkc;

use super::link::LossReason;
use super::types::{InvalidInput, QueueKind, QueueName};

#[derive(Debug, thiserror::Error)]
pub enum CoordError {
    /// Bad input at the edge (`INVALID_ARGUMENT`).
    #[error("{0}")]
    Invalid(#[from] InvalidInput),
    /// Nobody leads the election.
    #[error("election \"{0}\" has no leader")]
    NoLeader(QueueName),
    /// A lease naming no znode: never issued, malformed, or spent (contract "API": all the same).
    #[error("lease not found: it was never issued, is malformed, or is already spent")]
    LeaseNotFound,
    /// A proclaim by a candidate that does not lead.
    #[error("proclaim refused: this candidate is not the leader")]
    NotLeader,
    /// A lock request whose permit count differs from a member ahead of it.
    #[error(
        "lock {:?} is held or awaited with {recorded} permit(s), but this request asked for {asked}: everyone on a name must agree on permits",
        lock.as_str()
    )]
    PermitMismatch {
        lock: QueueName,
        recorded: u32,
        asked: u32,
    },
    /// A lock's `wait_timeout` passed before it was acquired (its znode is gone by then).
    #[error(
        "lock {:?} was not acquired within wait_timeout {wait:?}; the request was withdrawn",
        lock.as_str()
    )]
    WaitExpired { lock: QueueName, wait: Duration },
    /// No keep-alive within a held lock's `ttl` (its znode is gone by then).
    #[error(
        "lease expired: no keep_alive within ttl {ttl:?}; lock {:?} was released",
        lock.as_str()
    )]
    LeaseExpired { lock: QueueName, ttl: Duration },
    /// The session a holder relied on is over (or presumed over).
    #[error("{}", .0.describe())]
    SessionLost(LossReason),
    /// A grant the session's clock, read at the moment of sending it, could not vouch for:
    /// the gateway's view of its ZooKeeper link was stale (after a freeze, before it judged the
    /// link again), so the member may already be gone with an expired session.
    #[error(
        "not granted: the gateway could not confirm its ZooKeeper session at the moment of the grant (its view of the link was stale, e.g. after a pause); campaign again"
    )]
    GrantUnconfirmed,
    #[error("the gateway is draining for shutdown; retry on another gateway")]
    Draining,
    /// A limit that keeps one client from using up a shared gateway (G10).
    #[error("{0}")]
    LimitReached(Limit),
    /// A holder stream sent nothing within the first-message timeout.
    #[error(
        "no {what} within the first-message timeout ({within:?}, --first-message-timeout): send it as soon as the stream opens"
    )]
    FirstMessageTimeout {
        what: &'static str,
        within: Duration,
    },
    /// Worth retrying, here or on another gateway: see [`Retry`]. (Not "no session": the
    /// session may well be alive and resume; what failed is this request.)
    #[error("ZooKeeper unavailable: {0}")]
    Unavailable(Retry),
    #[error("ZooKeeper refused the request: not authorised ({0})")]
    NotAuthorised(zkc::Error),
    /// A policy is in force and the caller's credentials are not ones it accepts.
    #[error("unauthenticated: {0}")]
    Unauthenticated(&'static str),
    /// The policy does not let this identity do this verb on this name.
    #[error("permission denied: identity {identity:?} may not {verb} on {name:?} (--auth-policy)")]
    PermissionDenied {
        identity: String,
        verb: crate::auth::policy::Verb,
        name: String,
    },
    /// A ZooKeeper answer the gateway has no rule for.
    #[error("ZooKeeper error: {0}")]
    Zk(zkc::Error),
}

/// Why a request could not be served now, though a retry may succeed (`UNAVAILABLE`).
#[derive(Debug, thiserror::Error)]
pub enum Retry {
    #[error("the gateway is not connected to ZooKeeper at {0}")]
    NotConnected(String),
    /// Every connected session is on a ZooKeeper server proven diverged from its quorum for
    /// longer than the session's moves could mend (`coord::divergence`, "Stranded").
    #[error("the gateway's ZooKeeper server diverged from its quorum, so this gateway cannot tell who holds; retry on another gateway")]
    Stranded,
    /// The request was lost with the connection, or the session ended under it.
    #[error("ZooKeeper request failed: {0}")]
    RequestFailed(zkc::Error),
    #[error("could not create the candidate znode after several attempts")]
    CreateGaveUp,
    /// The session ended while a member was being created: nothing was joined.
    #[error("ZooKeeper session ended while joining ({}); retry", .0.describe())]
    LostWhileJoining(LossReason),
    #[error("the {} znode vanished right after creation", created_what(*.0))]
    VanishedAfterCreate(QueueKind),
    #[error("the release task failed; the session's end removes the znode")]
    ReleaseTaskFailed,
    /// A by-lease resign or release whose delete was not confirmed before this gateway's
    /// session ended: the znode (another session's) may still be there.
    #[error("{}; retry the resign (NOT_FOUND then means it was done)", .0.describe())]
    LostDuringResign(LossReason),
    #[error("proclaim kept racing with concurrent writes; retry")]
    ProclaimContended,
    #[error("the election's watch ended; observe again")]
    WatchEnded,
    #[error("ZooKeeper session closed; observe again")]
    ObserveClosed,
}

fn created_what(kind: QueueKind) -> &'static str {
    match kind {
        QueueKind::Election => "candidate",
        QueueKind::Lock => "lock request's",
    }
}

/// Which limit refused a request (`RESOURCE_EXHAUSTED`), with its configured value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Limit {
    #[error(
        "{} {:?} has {size} members, the most a queue may have ({max}, from --zk-max-packet: one ZooKeeper listing must hold them all)",
        kind_word(*kind), name.as_str()
    )]
    QueueMembers {
        kind: QueueKind,
        name: QueueName,
        size: usize,
        max: usize,
    },
    #[error("limit reached: distinct elections and locks in use on this gateway (--max-queues = {0}); use fewer names at once or another gateway")]
    QueuesPerGateway(usize),
    #[error("limit reached: proclaimed bytes in flight on this gateway's ZooKeeper session (--max-proclaim-bytes-in-flight = {0}); retry shortly")]
    ProclaimBytesInFlight(usize),
    #[error("limit reached: open Campaign and Acquire streams on this gateway (--max-holder-streams = {0}); close some streams or use another gateway")]
    HolderStreamsPerGateway(usize),
    #[error("limit reached: open Campaign and Acquire streams on this client connection (--max-holder-streams-per-connection = {0}); close some streams or use another gateway")]
    HolderStreamsPerConnection(usize),
    #[error("limit reached: open Observe streams on this client connection (--max-observe-streams-per-connection = {0}); close some streams or use another gateway")]
    ObserveStreamsPerConnection(usize),
    #[error("limit reached: elections on one ObserveMany stream (--max-observe-many-elections = {0}); use a longer prefix or more streams")]
    ElectionsPerObserveMany(usize),
    #[error("limit reached: open Campaign and Acquire streams of identity {0:?} on this gateway (--max-holder-streams-per-identity = {1}); close some streams")]
    HolderStreamsPerIdentity(String, usize),
    #[error("limit reached: open Observe streams of identity {0:?} on this gateway (--max-observe-streams-per-identity = {1}); close some streams")]
    ObserveStreamsPerIdentity(String, usize),
    #[error("limit reached: distinct elections and locks identity {0:?} holds streams in on this gateway (--max-queues-per-identity = {1}); use fewer names at once")]
    QueuesPerIdentity(String, usize),
    #[error("limit reached: unary {0} calls in flight on this gateway (--max-unary-in-flight = {1}, for each kind); wait for answers before sending more, or retry with backoff")]
    UnaryInFlightPerGateway(super::session::UnaryWork, usize),
    #[error("limit reached: unary {0} calls in flight from client address {1} on this gateway (--max-unary-in-flight-per-client = {2}, for each kind, without --auth-policy); wait for answers before sending more, or retry with backoff")]
    UnaryInFlightPerClient(super::session::UnaryWork, std::net::IpAddr, usize),
    #[error("limit reached: client connections open on this gateway (--max-connections = {0})")]
    ConnectionsPerGateway(usize),
    #[error("limit reached: client connections open from client address {0} (--max-connections-per-client = {1})")]
    ConnectionsPerClient(std::net::IpAddr, usize),
    #[error("limit reached: unary calls per second of identity {0:?} on this gateway (--max-unary-rate-per-identity = {1}); slow down and retry with backoff")]
    UnaryRatePerIdentity(String, u32),
    #[error("limit reached: unary calls in flight of identity {0:?} on this gateway (--max-unary-in-flight-per-identity = {1}); wait for answers before sending more")]
    UnaryInFlightPerIdentity(String, usize),
    #[error("limit reached: election value bytes in flight of identity {0:?} on this gateway (--max-bytes-in-flight-per-identity = {1}); use smaller values or fewer streams")]
    BytesInFlightPerIdentity(String, usize),
}

fn kind_word(kind: QueueKind) -> &'static str {
    match kind {
        QueueKind::Election => "election",
        QueueKind::Lock => "lock",
    }
}

impl Limit {
    /// The `limit` label of `zkgate_limit_rejections_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Limit::QueueMembers { .. } => "queue_members",
            Limit::QueuesPerGateway(_) => "queues_per_gateway",
            Limit::ProclaimBytesInFlight(_) => "proclaim_bytes_in_flight",
            Limit::HolderStreamsPerGateway(_) => "holder_streams_per_gateway",
            Limit::HolderStreamsPerConnection(_) => "holder_streams_per_connection",
            Limit::ObserveStreamsPerConnection(_) => "observe_streams_per_connection",
            Limit::ElectionsPerObserveMany(_) => "observe_many_elections",
            Limit::HolderStreamsPerIdentity(..) => "holder_streams_per_identity",
            Limit::ObserveStreamsPerIdentity(..) => "observe_streams_per_identity",
            Limit::QueuesPerIdentity(..) => "queues_per_identity",
            Limit::UnaryInFlightPerGateway(..) => "unary_in_flight_per_gateway",
            Limit::UnaryInFlightPerClient(..) => "unary_in_flight_per_client",
            Limit::ConnectionsPerGateway(..) => "connections_per_gateway",
            Limit::ConnectionsPerClient(..) => "connections_per_client",
            Limit::UnaryRatePerIdentity(..) => "unary_rate_per_identity",
            Limit::UnaryInFlightPerIdentity(..) => "unary_in_flight_per_identity",
            Limit::BytesInFlightPerIdentity(..) => "bytes_in_flight_per_identity",
        }
    }

    /// Counts the rejection (`zkgate_limit_rejections_total{limit}`) and returns the error.
    pub fn reject(self) -> CoordError {
        crate::metrics::limit_rejected(self.label());
        CoordError::LimitReached(self)
    }
}

impl From<zkc::Error> for CoordError {
    fn from(e: zkc::Error) -> Self {
        match e {
            e if super::zk::is_transport_failure(&e) => {
                CoordError::Unavailable(Retry::RequestFailed(e))
            }
            zkc::Error::SessionExpired | zkc::Error::ClientClosed => {
                CoordError::Unavailable(Retry::RequestFailed(e))
            }
            zkc::Error::NoAuth | zkc::Error::AuthFailed => CoordError::NotAuthorised(e),
            e => CoordError::Zk(e),
        }
    }
}

/// The session ended: what waiting on the link ([`super::link::wait_usable`]) reports.
impl From<LossReason> for CoordError {
    fn from(reason: LossReason) -> Self {
        CoordError::SessionLost(reason)
    }
}

impl From<Retry> for CoordError {
    fn from(r: Retry) -> Self {
        CoordError::Unavailable(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_clients_match_on() {
        let name = QueueName::new("db").unwrap();
        assert_eq!(
            CoordError::NoLeader(name.clone()).to_string(),
            "election \"db\" has no leader"
        );
        assert_eq!(
            Limit::QueueMembers {
                kind: QueueKind::Lock,
                name: name.clone(),
                size: 668,
                max: 668
            }
            .to_string(),
            "lock \"db\" has 668 members, the most a queue may have (668, from --zk-max-packet: one ZooKeeper listing must hold them all)"
        );
        assert_eq!(
            CoordError::from(Retry::VanishedAfterCreate(QueueKind::Lock)).to_string(),
            "ZooKeeper unavailable: the lock request's znode vanished right after creation"
        );
        assert!(CoordError::WaitExpired {
            lock: name,
            wait: Duration::ZERO
        }
        .to_string()
        .contains("wait_timeout"));
    }
}
