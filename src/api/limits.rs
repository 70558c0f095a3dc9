//! Limits that keep one client from using up a gateway that many services share (G10): open
//! holder streams (Campaign, Acquire) per gateway and per client connection, Observe streams
//! (ObserveMany included) per client connection, elections per ObserveMany stream, and the time a holder stream may take to send its first message.
//! Past a limit the caller gets `RESOURCE_EXHAUSTED` naming the limit and its value (a silent
//! stream: `DEADLINE_EXCEEDED`), and `zkgate_limit_rejections_total{limit}` counts it. The
//! number of distinct queues per gateway is the coordination layer's limit
//! (`CoordConfig::max_queues`).
//!
//! With an `--auth-policy` in force the holder and Observe streams are also counted per
//! identity (G10: one tenant's flood meets its own limit before a gateway-wide one); the
//! rejection names the limit, the identity and the value, and
//! `zkgate_identity_limit_rejections_total{limit,identity}` counts it (identities capped like
//! names). Without a policy there are no tenants to tell apart, and only the limits above apply.
//!
//! A client connection is told apart by its peer address (one per TCP connection). The
//! HTTP/2 limit on concurrent streams is set above these (`server::run_with`), so a client
//! over the limit gets this status instead of waiting for an HTTP/2 slot.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tonic::{Status, Streaming};

use crate::auth::Identity;
use crate::coord::types::InvalidInput;
use crate::coord::{CoordError, Limit};
use crate::metrics as m;

pub const DEFAULT_HOLDER_STREAMS_PER_GATEWAY: usize = 50_000;
pub const DEFAULT_HOLDER_STREAMS_PER_CONNECTION: usize = 1_000;
pub const DEFAULT_OBSERVE_STREAMS_PER_CONNECTION: usize = 1_000;
/// Per identity, under a policy: a fifth of the gateway-wide holder limit, so one tenant can
/// never take it all.
pub const DEFAULT_HOLDER_STREAMS_PER_IDENTITY: usize = 10_000;
pub const DEFAULT_OBSERVE_STREAMS_PER_IDENTITY: usize = 10_000;
pub const DEFAULT_FIRST_MESSAGE_TIMEOUT: Duration = Duration::from_secs(10);

/// The configured stream limits (flags/env/TOML: README "zkgate serve").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    pub holder_streams_per_gateway: usize,
    pub holder_streams_per_connection: usize,
    pub observe_streams_per_connection: usize,
    /// Elections one ObserveMany stream may follow at once (it counts as one Observe stream).
    pub observe_many_elections: usize,
    /// Under a policy only (see the module docs).
    pub holder_streams_per_identity: usize,
    pub observe_streams_per_identity: usize,
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

#[derive(Debug, Default, Clone, Copy)]
struct PerConnection {
    holders: usize,
    observers: usize,
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
    connections: Mutex<HashMap<SocketAddr, PerConnection>>,
    /// Under a policy: open streams per identity.
    identities: Mutex<HashMap<Identity, PerConnection>>,
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

    fn count_identity(
        &self,
        identity: Option<&Identity>,
        kind: StreamKind,
    ) -> Result<(), CoordError> {
        let Some(id) = identity else {
            return Ok(());
        };
        let mut map = self.identities.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(id.clone()).or_default();
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
            let limit = limit(id.to_string(), max);
            m::identity_limit_rejected(limit.label(), id.as_str());
            if entry.holders == 0 && entry.observers == 0 {
                map.remove(id);
            }
            return Err(limit.reject());
        }
        *open += 1;
        Ok(())
    }

    fn uncount_identity(&self, identity: Option<&Identity>, kind: StreamKind) {
        let Some(id) = identity else {
            return;
        };
        let mut map = self.identities.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = map.get_mut(id) {
            match kind {
                StreamKind::Holder => entry.holders = entry.holders.saturating_sub(1),
                StreamKind::Observer => entry.observers = entry.observers.saturating_sub(1),
            }
            if entry.holders == 0 && entry.observers == 0 {
                map.remove(id);
            }
        }
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
}
