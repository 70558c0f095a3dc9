//! Coordination over ZooKeeper: sessions, queues, elections, locks and leases. No tonic types
//! here; the API layer converts to and from the wire.
//!
//! Data flows one way: `api` → `coord` → ZooKeeper; events flow back through channels.
//!
//! - [`session`]: the session pool's supervisors, the G2 clock and the liveness probe;
//!   [`link`]: the link state every stream and queue follows.
//! - [`queue`]: one actor per queue per session around the pure [`queue::state::QueueState`]
//!   (who holds, confirmation, what observers see), and the session's [`queue::QueueRegistry`].
//! - [`member`]: one member znode's lifecycle, shared by [`election`] (adds proclaim and
//!   observing) and [`lock`] (adds the wait and the ttl).
//! - [`config`]: the layer's settings ([`CoordConfig`]); [`bounds`]: the limits the types
//!   check and the settings start from.
//! - [`error`]: every refusal, named by meaning; [`types`]: validated domain types;
//!   [`record`]: what a member znode stores; [`zk`], [`paging`]: the ZooKeeper client.
//! - [`board`]: this gateway's holders and waiters per name, for the per-name metrics and `/ui`.
//! - [`directory`]: the elections folder's one watch per session, and [`observe_many`]: the
//!   `ObserveMany` stream over it and the elections' queue actors.

pub mod board;
pub mod bounds;
pub mod clock;
pub mod config;
pub mod directory;
pub mod election;
pub mod error;
pub mod link;
pub mod lock;
pub mod member;
pub mod observe_many;
pub mod paging;
pub mod queue;
pub mod record;
pub mod session;
pub mod timing;
pub mod types;
pub mod zk;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use self::config::{
    CoordConfig, ZkSasl, ZkTls, DEFAULT_MAX_PROCLAIM_BYTES_IN_FLIGHT, DEFAULT_MAX_QUEUES,
    DEFAULT_ROOT, DEFAULT_SESSION_TIMEOUT,
};
pub use self::error::{CoordError, Limit, Retry};
use self::session::{Slot, ZkSession};
use self::zk::RequestCounter;

/// The gateway's coordination core: the session pool and everything served over it.
#[derive(Debug)]
pub struct Coordinator {
    pub cfg: Arc<CoordConfig>,
    slots: Vec<Slot>,
    next: AtomicUsize,
    counter: Arc<RequestCounter>,
    /// Cancelled first on shutdown: streams end `UNAVAILABLE`.
    draining: CancellationToken,
    /// Cancelled after streams are gone: sessions close.
    shutdown: CancellationToken,
    supervisors: TaskTracker,
    streams: TaskTracker,
    /// This gateway's holders and waiters per name (per-name metrics, `/ui`).
    pub board: Arc<board::Board>,
}

impl Coordinator {
    /// Starts the session pool in the background; sessions connect (and reconnect) on their own.
    pub fn start(cfg: CoordConfig) -> Arc<Self> {
        let cfg = Arc::new(cfg);
        let counter = Arc::new(RequestCounter::default());
        let shutdown = CancellationToken::new();
        let supervisors = TaskTracker::new();
        let draining = CancellationToken::new();
        let live_queues = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut slots = Vec::new();
        for _ in 0..cfg.pool_size.max(1) {
            let (tx, rx) = watch::channel(None);
            supervisors.spawn(session::supervise_slot(
                cfg.clone(),
                counter.clone(),
                live_queues.clone(),
                tx,
                shutdown.clone(),
            ));
            slots.push(rx);
        }
        supervisors.close();
        Arc::new(Self {
            cfg,
            slots,
            next: AtomicUsize::new(0),
            counter,
            draining,
            shutdown,
            supervisors,
            streams: TaskTracker::new(),
            board: Arc::default(),
        })
    }

    /// ZooKeeper requests sent so far by this gateway (all sessions).
    pub fn zk_requests(&self) -> u64 {
        self.counter.get()
    }

    pub fn draining(&self) -> CancellationToken {
        self.draining.clone()
    }

    /// True while at least one pool session is connected.
    pub fn is_connected(&self) -> bool {
        self.slots
            .iter()
            .any(|s| s.borrow().as_ref().is_some_and(|s| s.is_connected()))
    }

    /// Resolves whenever any slot changes (a session appears, goes, or its link changes).
    pub async fn connection_changed(&self) {
        let mut futs = Vec::new();
        for s in &self.slots {
            // Clones inherit the stored receiver's last-seen version, which nobody updates:
            // mark them seen, or `changed()` would return at once and callers would spin.
            let mut slot = s.clone();
            let link = slot.borrow_and_update().as_ref().map(|s| {
                let mut link = s.link();
                link.borrow_and_update();
                link
            });
            futs.push(Box::pin(async move {
                match link {
                    Some(mut link) => {
                        tokio::select! {
                            _ = slot.changed() => {},
                            _ = link.changed() => {},
                        }
                    }
                    None => {
                        let _ = slot.changed().await;
                    }
                }
            }));
        }
        futures::future::select_all(futs).await;
    }

    /// Waits until a session is connected, up to `timeout`.
    pub async fn wait_connected(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, async {
            while !self.is_connected() {
                self.connection_changed().await;
            }
        })
        .await
        .is_ok()
    }

    /// A connected session for a request that concerns no queue, round-robin over the pool.
    ///
    /// # Errors
    /// `Draining` during shutdown, `Unavailable` when no session is connected.
    pub fn session(&self) -> Result<Arc<ZkSession>, CoordError> {
        self.session_from(self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// The session of queue `kind`/`name`: every stream and read of one queue goes to the same
    /// session of the pool while it is connected (the next connected one otherwise), so the
    /// gateway keeps one watch and one queue actor per queue — not one per session — and a
    /// queue's members see one order of events. Queues, not streams, are spread over the pool.
    ///
    /// # Errors
    /// As [`Coordinator::session`].
    pub fn session_for(
        &self,
        kind: types::QueueKind,
        name: &types::QueueName,
    ) -> Result<Arc<ZkSession>, CoordError> {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        (kind, name.as_str()).hash(&mut h);
        self.session_from(h.finish() as usize)
    }

    fn session_from(&self, start: usize) -> Result<Arc<ZkSession>, CoordError> {
        if self.draining.is_cancelled() {
            return Err(CoordError::Draining);
        }
        let n = self.slots.len();
        for i in 0..n {
            if let Some(s) = self.slots[(start + i) % n].borrow().as_ref() {
                if s.is_connected() {
                    return Ok(s.clone());
                }
            }
        }
        Err(Retry::NotConnected(self.cfg.zk.clone()).into())
    }

    /// A token every long stream holds, so a drain can wait for them to finish.
    pub(crate) fn stream_token(&self) -> tokio_util::task::task_tracker::TaskTrackerToken {
        self.streams.token()
    }

    /// Graceful drain (G7, G3c): waiters and observers end `UNAVAILABLE` at once and their
    /// znodes go; holders are revoked (told `suspended`, their znodes deleted once they end their
    /// streams or their silence limit has passed since the last message sent to them, then
    /// `UNAVAILABLE`); then the sessions close, taking anything left with them.
    ///
    /// Every stream ends by itself within its silence limit (plus a delete's round trip), even
    /// one whose client stopped reading, so the wait for streams is bounded by the silence
    /// limit plus `grace`, and closing the sessions by `grace`: a session never closes before
    /// every holder's bound has passed.
    pub async fn drain(&self, grace: Duration) {
        self.draining.cancel();
        self.streams.close();
        // The requested timeout's silence limit: no session's (negotiated) limit is longer.
        let silence_limit = timing::Timing::requested(&self.cfg).silence_limit;
        if tokio::time::timeout(silence_limit + grace, self.streams.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                ?silence_limit,
                ?grace,
                "streams did not finish within the silence limit plus the drain grace period"
            );
        }
        self.shutdown.cancel();
        let _ = tokio::time::timeout(grace, self.supervisors.wait()).await;
    }
}
