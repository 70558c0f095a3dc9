//! Limits that keep one client from using up a gateway that many services share (G10): open
//! holder streams (Campaign, Acquire) per gateway and per client connection, Observe streams
//! (ObserveMany included) per client connection, elections per ObserveMany stream, and the time a holder stream may take to send its first message.
//! Past a limit the caller gets `RESOURCE_EXHAUSTED` naming the limit and its value (a silent
//! stream: `DEADLINE_EXCEEDED`), and `zkgate_limit_rejections_total{limit}` counts it. The
//! number of distinct queues per gateway is the coordination layer's limit
//! (`CoordConfig::max_queues`).
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

use crate::coord::types::InvalidInput;
use crate::coord::{CoordError, Limit};
use crate::metrics as m;

pub const DEFAULT_HOLDER_STREAMS_PER_GATEWAY: usize = 50_000;
pub const DEFAULT_HOLDER_STREAMS_PER_CONNECTION: usize = 1_000;
pub const DEFAULT_OBSERVE_STREAMS_PER_CONNECTION: usize = 1_000;
pub const DEFAULT_FIRST_MESSAGE_TIMEOUT: Duration = Duration::from_secs(10);

/// The configured stream limits (flags/env/TOML: README "zkgate serve").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    pub holder_streams_per_gateway: usize,
    pub holder_streams_per_connection: usize,
    pub observe_streams_per_connection: usize,
    /// Elections one ObserveMany stream may follow at once (it counts as one Observe stream).
    pub observe_many_elections: usize,
    pub first_message_timeout: Duration,
}

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            holder_streams_per_gateway: DEFAULT_HOLDER_STREAMS_PER_GATEWAY,
            holder_streams_per_connection: DEFAULT_HOLDER_STREAMS_PER_CONNECTION,
            observe_streams_per_connection: DEFAULT_OBSERVE_STREAMS_PER_CONNECTION,
            observe_many_elections: crate::coord::observe_many::DEFAULT_MAX_OBSERVE_MANY_ELECTIONS,
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
}

/// One admitted stream; dropping it (the stream ended) gives its place back.
#[derive(Debug)]
pub struct StreamPermit {
    admission: Arc<Admission>,
    connection: Option<SocketAddr>,
    kind: StreamKind,
}

impl Admission {
    pub fn new(limits: StreamLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            holders: AtomicUsize::new(0),
            connections: Mutex::new(HashMap::new()),
        })
    }

    pub fn limits(&self) -> &StreamLimits {
        &self.limits
    }

    /// Admits a Campaign or Acquire stream from `connection`.
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` past the per-gateway or per-connection holder limit.
    pub fn holder(
        self: &Arc<Self>,
        connection: Option<SocketAddr>,
    ) -> Result<StreamPermit, CoordError> {
        let max = self.limits.holder_streams_per_gateway;
        if self.holders.fetch_add(1, Ordering::AcqRel) >= max {
            self.holders.fetch_sub(1, Ordering::AcqRel);
            return Err(Limit::HolderStreamsPerGateway(max).reject());
        }
        if let Err(status) = self.count(connection, StreamKind::Holder) {
            self.holders.fetch_sub(1, Ordering::AcqRel);
            return Err(status);
        }
        Ok(StreamPermit {
            admission: self.clone(),
            connection,
            kind: StreamKind::Holder,
        })
    }

    /// Admits an Observe stream from `connection`.
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` past the per-connection Observe limit.
    pub fn observer(
        self: &Arc<Self>,
        connection: Option<SocketAddr>,
    ) -> Result<StreamPermit, CoordError> {
        self.count(connection, StreamKind::Observer)?;
        Ok(StreamPermit {
            admission: self.clone(),
            connection,
            kind: StreamKind::Observer,
        })
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
        let h1 = a.holder(addr(1)).unwrap();
        let _h2 = a.holder(addr(1)).unwrap();
        let e = Status::from(a.holder(addr(1)).unwrap_err());
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(
            e.message()
                .contains("--max-holder-streams-per-connection = 2"),
            "{e:?}"
        );
        let _h3 = a.holder(addr(2)).unwrap();
        let e = Status::from(a.holder(addr(3)).unwrap_err());
        assert!(e.message().contains("--max-holder-streams = 3"), "{e:?}");
        assert_eq!(a.holder_streams(), 3);
        drop(h1);
        assert_eq!(a.holder_streams(), 2);
        let _h4 = a.holder(addr(1)).unwrap();
        let _o1 = a.observer(addr(1)).unwrap();
        assert!(a.observer(addr(1)).is_err());
        assert!(a.observer(addr(2)).is_ok());
    }
}
