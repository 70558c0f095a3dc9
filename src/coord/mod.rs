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
//! - [`error`]: every refusal, named by meaning; [`types`]: validated domain types;
//!   [`record`]: what a member znode stores; [`zk`], [`paging`]: the ZooKeeper client.
//! - [`board`]: this gateway's holders and waiters per name, for the per-name metrics; [`fleet`]:
//!   every gateway's, as ZooKeeper shows them, for `/ui` (one watch per prefix per gateway).
//! - [`directory`]: the elections folder's one watch per session, and [`observe_many`]: the
//!   `ObserveMany` stream over it and the elections' queue actors.

pub mod board;
pub mod clock;
pub mod directory;
pub mod election;
pub mod error;
pub mod fleet;
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

pub use self::error::{CoordError, Limit, Retry};
use self::session::{Slot, ZkSession};
use self::types::DEFAULT_MAX_VALUE_BYTES;
use self::zk::RequestCounter;

pub const DEFAULT_ROOT: &str = "/zkgate";
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// Distinct queues (elections + locks) one gateway serves at once, by default: each is an actor
/// with a persistent watch on the server.
pub const DEFAULT_MAX_QUEUES: usize = 10_000;
/// Proclaimed bytes (values plus 1 KiB a request) one session may have in flight, by default.
pub const DEFAULT_MAX_PROCLAIM_BYTES_IN_FLIGHT: usize = 4 * 1024 * 1024;

/// Settings of the coordination layer (the `serve` flags that concern ZooKeeper).
#[derive(Debug, Clone)]
pub struct CoordConfig {
    /// ZooKeeper connect string, `host:port[,host:port…]`.
    pub zk: String,
    /// Root znode, e.g. `/zkgate`.
    pub root: String,
    /// Requested session timeout; ZooKeeper clamps it to 2–20 × tickTime.
    pub session_timeout: Duration,
    /// Sessions in the pool (default 1).
    pub pool_size: usize,
    pub max_value_bytes: usize,
    /// Stop leaders this long before the server could expire the session (default T/10).
    pub stop_margin: Option<Duration>,
    /// Explicit silence limit (default 35% of the session timeout).
    pub silence_limit: Option<Duration>,
    /// `user:password` for ZooKeeper digest auth; znodes then get a creator-only ACL (G9).
    pub zk_digest: Option<String>,
    /// TLS to ZooKeeper's `secureClientPort` (SPEC §7); a client certificate also authenticates.
    pub zk_tls: Option<zk::ZkTls>,
    /// SASL DIGEST-MD5 to ZooKeeper; znodes then get a creator-only ACL (G9).
    pub zk_sasl: Option<zk::ZkSasl>,
    /// The ensemble's `tickTime`, if the operator states it (unstated: the largest tick a server
    /// granting the session's timeout T can run with, T/2). The ensemble's leader hears
    /// of a session held by a follower only through the follower's ping replies, every half
    /// tick, so the G2 deadline allows for that lag (see `timing::Timing::quorum_lag`).
    /// Overstating it only shortens `stop_within`; understating it weakens G2, which is why
    /// nothing smaller than the worst case is assumed unless stated.
    pub zk_tick_time: Option<Duration>,
    /// HTTP/2 keepalive ping interval toward clients (default T/5; see [`timing::Timing`]).
    pub keepalive_interval: Option<Duration>,
    /// Unanswered keepalive → connection dead, its znodes released (default 2T/5).
    pub keepalive_timeout: Option<Duration>,
    /// Distinct queues (elections + locks) in use on this gateway at once; a stream or read
    /// that needs one more gets `ResourceExhausted` (G10).
    pub max_queues: usize,
    /// Proclaimed bytes in flight per session (values plus 1 KiB a request): the session's
    /// requests are answered in order, so this bounds how long a proclaim flood can hold up
    /// the liveness probe and confirmations queued behind it (G10).
    pub max_proclaim_bytes_in_flight: usize,
    /// Largest packet the gateway sends to or expects from ZooKeeper (`--zk-max-packet`): every
    /// multi-read is paged to stay within it, and it bounds the queue size (see [`paging`]).
    pub zk_max_packet: usize,
}

impl CoordConfig {
    pub fn new(zk: impl Into<String>) -> Self {
        Self {
            zk: zk.into(),
            root: DEFAULT_ROOT.to_owned(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            pool_size: 1,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            stop_margin: None,
            silence_limit: None,
            zk_digest: None,
            zk_tls: None,
            zk_sasl: None,
            zk_tick_time: None,
            keepalive_interval: None,
            keepalive_timeout: None,
            max_queues: DEFAULT_MAX_QUEUES,
            max_proclaim_bytes_in_flight: DEFAULT_MAX_PROCLAIM_BYTES_IN_FLIGHT,
            zk_max_packet: paging::DEFAULT_ZK_MAX_PACKET,
        }
    }

    /// How to page a multi-read of the members of a queue of `kind` (see [`paging`]).
    pub fn member_reads(&self, kind: types::QueueKind) -> paging::ReadPlan {
        paging::ReadPlan {
            budget: self.zk_max_packet,
            data_bound: paging::member_data_bound(kind, self.max_value_bytes),
        }
    }

    /// The most members a queue may have: one `getChildren` must list them all within
    /// `zk_max_packet`.
    pub fn max_queue_members(&self) -> usize {
        paging::max_queue_members(self.zk_max_packet)
    }

    /// Checks that `zk_max_packet` leaves room for the largest member.
    ///
    /// # Errors
    /// A sentence naming both settings.
    pub fn check_packet_budget(&self) -> Result<(), String> {
        let plan = self.member_reads(types::QueueKind::Election);
        if !plan.fits_one() || self.max_queue_members() < 1 {
            return Err(format!(
                "--zk-max-packet {} is too small for one member with --max-value-bytes {} \
                 (it needs at least {} bytes)",
                self.zk_max_packet,
                self.max_value_bytes,
                plan.min_budget()
            ));
        }
        Ok(())
    }

    /// The root without a trailing slash ("" for "/").
    pub fn root_path(&self) -> &str {
        self.root.trim_end_matches('/')
    }
}

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
    /// This gateway's holders and waiters per name (per-name metrics).
    pub board: Arc<board::Board>,
    /// The fleet's holders and waiters per prefix, as ZooKeeper shows them (`/ui`).
    fleet: fleet::FleetRegistry,
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
            fleet: Default::default(),
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
