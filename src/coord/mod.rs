//! Coordination over ZooKeeper: sessions, queues, elections, locks and leases. No tonic types
//! here; the API layer converts to and from the wire.
//!
//! Data flows one way: `api` → `coord` → ZooKeeper; events flow back through channels.
//!
//! - [`session`]: the session pool's supervisors, the G2 clock and the liveness probe;
//!   [`divergence`]: a session's proof that its server diverged from the quorum;
//!   [`link`]: the link state every stream and queue follows.
//! - [`queue`]: one actor per queue per session around the pure [`queue::state::QueueState`]
//!   (who holds, confirmation, what observers see), and the session's [`queue::QueueRegistry`].
//! - [`member`]: one member znode's lifecycle, shared by [`election`] (adds proclaim and
//!   observing) and [`lock`] (adds the wait and the ttl).
//! - [`config`]: the layer's settings ([`CoordConfig`]); [`bounds`]: the limits the types
//!   check and the settings start from.
//! - [`error`]: every refusal, named by meaning; [`types`]: validated domain types;
//!   [`record`]: what a member znode stores; [`zk`], [`paging`]: the ZooKeeper client.
//! - [`board`]: this gateway's holders and waiters per name, for the per-name metrics; [`fleet`]:
//!   every gateway's, as ZooKeeper shows them, for `/ui` (one watch per prefix per gateway).
//! - [`directory`]: the elections folder's one watch per session, and [`observe_many`]: the
//!   `ObserveMany` stream over it and the elections' queue actors.

pub mod batch;
pub mod board;
pub mod bounds;
pub mod clock;
pub mod config;
pub mod directory;
pub mod divergence;
pub mod election;
pub mod error;
pub mod fanout;
pub mod fleet;
mod folder_watch;
pub mod link;
pub mod lock;
pub mod member;
pub mod observe_many;
pub mod paging;
pub mod pool;
pub mod queue;
pub mod record;
pub mod session;
pub mod timing;
pub mod types;
pub mod zk;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use self::config::{
    CoordConfig, ZkSasl, ZkTls, DEFAULT_MAX_PROCLAIM_BYTES_IN_FLIGHT, DEFAULT_MAX_QUEUES,
    DEFAULT_ROOT, DEFAULT_SESSION_TIMEOUT,
};
use self::election::{Candidacy, JoinSpec, Observation};
pub use self::error::{CoordError, Limit, Retry};
use self::lock::{AcquireSpec, LockHold, LockHolders};
use self::observe_many::{ManyObservation, ManySpec};
use self::pool::SessionPool;
use self::session::ZkSession;
use self::types::{
    FencingToken, Holder, Lease, MemberInfo, Page, PageSpec, QueueKind, QueueName, Value,
};
use self::zk::RequestCounter;

/// The gateway's coordination core: the session pool and everything served over it. Every
/// operation the API layer calls is a method here; each hands the pool to its recipe
/// ([`election`], [`lock`], [`observe_many`]), where the body lives.
#[derive(Debug)]
pub struct Coordinator {
    pub cfg: Arc<CoordConfig>,
    /// This gateway's holders and waiters per name (per-name metrics, `/ui`); the pool's.
    pub board: Arc<board::Board>,
    pool: Arc<SessionPool>,
    counter: Arc<RequestCounter>,
    /// Cancelled after streams are gone: sessions close.
    shutdown: CancellationToken,
    supervisors: TaskTracker,
    /// The fleet's holders and waiters per prefix, as ZooKeeper shows them (`/ui`).
    fleet: fleet::FleetRegistry,
}

/// The pool and the drain.
impl Coordinator {
    /// Starts the session pool in the background; sessions connect (and reconnect) on their own.
    pub fn start(cfg: CoordConfig) -> Arc<Self> {
        let cfg = Arc::new(cfg);
        let counter = Arc::new(RequestCounter::default());
        let shutdown = CancellationToken::new();
        let supervisors = TaskTracker::new();
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
        let board = Arc::<board::Board>::default();
        Arc::new(Self {
            pool: Arc::new(SessionPool::new(cfg.clone(), slots, board.clone())),
            cfg,
            board,
            counter,
            shutdown,
            supervisors,
            fleet: Default::default(),
        })
    }

    /// ZooKeeper requests sent so far by this gateway (all sessions).
    pub fn zk_requests(&self) -> u64 {
        self.counter.get()
    }

    /// ZooKeeper requests sent so far by this gateway as `op` (the `op` label of
    /// `zkgate_zk_requests_total`: `"create"`, `"exists"`, `"batch"`, …).
    pub fn zk_requests_of(&self, op: &str) -> u64 {
        self.counter.of(op)
    }

    /// Cancelled when the drain begins: streams end `UNAVAILABLE`.
    pub fn draining(&self) -> CancellationToken {
        self.pool.draining.clone()
    }

    /// True while at least one pool session is connected.
    pub fn is_connected(&self) -> bool {
        self.pool.is_connected()
    }

    /// True while a session serves: connected and not stranded on a diverged server.
    pub fn is_serving(&self) -> bool {
        self.pool.is_serving()
    }

    /// Resolves whenever any slot changes (a session appears, goes, or its link changes).
    pub async fn connection_changed(&self) {
        self.pool.connection_changed().await;
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
        self.pool.session()
    }

    /// The session of queue `kind`/`name` (see [`SessionPool::session_for`]).
    ///
    /// # Errors
    /// As [`Coordinator::session`].
    pub fn session_for(
        &self,
        kind: QueueKind,
        name: &QueueName,
    ) -> Result<Arc<ZkSession>, CoordError> {
        self.pool.session_for(kind, name)
    }

    /// Graceful drain (G7, G3c): waiters and observers end `UNAVAILABLE` at once and their
    /// znodes go; holders are revoked (told `suspended`, their znodes deleted once they end their
    /// streams or their silence limit has passed since the last message sent to them, then
    /// `UNAVAILABLE`); then the sessions close, taking anything left with them.
    ///
    /// Every stream ends by itself within its silence limit and the client delay allowance
    /// (plus a delete's round trip), even one whose client stopped reading, so the wait for
    /// streams is bounded by those plus `grace`, and closing the sessions by `grace`: a session
    /// never closes before every holder's bound has passed.
    pub async fn drain(&self, grace: Duration) {
        self.pool.draining.cancel();
        self.pool.streams.close();
        // The requested timeout's: no session's (negotiated) limit is longer, and the
        // allowance is the keepalive timeout, which follows the requested timeout.
        let requested = timing::Timing::requested(&self.cfg);
        let revoked_within = requested.silence_limit + requested.client_delay_allowance();
        if tokio::time::timeout(revoked_within + grace, self.pool.streams.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                ?revoked_within,
                ?grace,
                "streams did not finish within the silence limit and the client delay allowance plus the drain grace period"
            );
        }
        self.shutdown.cancel();
        let _ = tokio::time::timeout(grace, self.supervisors.wait()).await;
    }
}

/// What the API serves: each method hands the pool to its recipe.
impl Coordinator {
    /// Joins an election: creates the candidate's znode and registers it with the queue.
    ///
    /// # Errors
    /// `Unavailable`/`Draining` without a session; a full queue; ZooKeeper errors.
    ///
    /// # Cancellation safety
    /// Cancellation safe: a future dropped midway leaves no znode behind ([`member::Member::join`]).
    pub async fn campaign(&self, join: JoinSpec) -> Result<Candidacy, CoordError> {
        election::campaign(&self.pool, join).await
    }

    /// Starts observing an election (it need not exist yet).
    ///
    /// # Errors
    /// `Unavailable`/`Draining` without a session; ZooKeeper errors placing the watch.
    pub async fn observe(&self, election: &QueueName) -> Result<Observation, CoordError> {
        election::observe(&self.pool, election).await
    }

    /// The current leader, read from ZooKeeper: the head of the queue, once confirmed.
    ///
    /// # Errors
    /// `NoLeader` when nobody leads; `Unavailable` without a session.
    pub async fn leader(&self, election: &QueueName) -> Result<Holder, CoordError> {
        election::leader(&self.pool, election).await
    }

    /// One page of the queue in order, for operators. Never reveals leases. `position` is the
    /// member's place in the queue when it was listed (members that leave while the page is
    /// read are left out); `total` counts the members listed.
    ///
    /// # Errors
    /// `Unavailable` without a session.
    pub async fn candidates(
        &self,
        election: &QueueName,
        page: PageSpec,
    ) -> Result<Page<MemberInfo>, CoordError> {
        election::candidates(&self.pool, election, page).await
    }

    /// Whether `token` is the current leader's (Chubby's CheckSequencer).
    ///
    /// # Errors
    /// `Unavailable` without a session.
    pub async fn validate_leader(
        &self,
        election: &QueueName,
        token: FencingToken,
    ) -> Result<(bool, Option<Holder>), CoordError> {
        election::validate_leader(&self.pool, election, token).await
    }

    /// Leaves an election by lease, from any gateway: the leader is told first and this returns
    /// once its znode is gone (G3c, [`member::end_by_lease`]). Idempotent: a spent lease is
    /// `LeaseNotFound`.
    ///
    /// # Errors
    /// `LeaseNotFound` for a lease naming no znode; `Unavailable` without a session.
    pub async fn resign(&self, lease: &Lease) -> Result<(), CoordError> {
        election::resign(&self.pool, lease).await
    }

    /// The leader replaces its value, by lease, from any gateway.
    ///
    /// # Errors
    /// `LeaseNotFound` for a spent lease; `NotLeader` if the lease's candidate does not lead.
    pub async fn proclaim(&self, lease: &Lease, value: Value) -> Result<Holder, CoordError> {
        election::proclaim(&self.pool, lease, value).await
    }

    /// Queues for a lock: creates the member znode, registers it with the lock's queue actor
    /// (which refuses a permit count that differs from the members ahead) and returns the
    /// hold, which reports `acquired` once the actor has confirmed it.
    ///
    /// # Errors
    /// `PermitMismatch` (the znode is deleted before this returns); a full queue;
    /// `Unavailable`/`Draining` without a session; ZooKeeper errors.
    ///
    /// # Cancellation safety
    /// Cancellation safe: a future dropped midway leaves no znode behind ([`member::Member::join`]).
    pub async fn acquire(&self, spec: AcquireSpec) -> Result<LockHold, CoordError> {
        lock::acquire(&self.pool, spec).await
    }

    /// One page of the lock's holders (confirmed by their gateways) and the number of waiters,
    /// read from ZooKeeper. Never reveals leases.
    ///
    /// # Errors
    /// `Unavailable` without a session.
    pub async fn holders(
        &self,
        name: &QueueName,
        page: PageSpec,
    ) -> Result<LockHolders, CoordError> {
        lock::holders(&self.pool, name, page).await
    }

    /// Whether `token` is a current holder's (for services that fence writes).
    ///
    /// # Errors
    /// `Unavailable` without a session.
    pub async fn validate_holder(
        &self,
        name: &QueueName,
        token: FencingToken,
    ) -> Result<bool, CoordError> {
        lock::validate_holder(&self.pool, name, token).await
    }

    /// Releases by lease, from any gateway: the same by-lease end as `resign` (it is keyed by
    /// the lease's kind, so an election lease never decodes here): the holder is told first and
    /// this returns once its znode is gone (G3c, [`member::end_by_lease`]). Idempotent: a spent
    /// lease is `LeaseNotFound`.
    ///
    /// # Errors
    /// `LeaseNotFound` for a lease naming no znode; `Unavailable` without a session.
    pub async fn release(&self, lease: &Lease) -> Result<(), CoordError> {
        lock::release(&self.pool, lease).await
    }

    /// Opens an `ObserveMany` stream: waits for the session's view of the elections folder,
    /// then follows every wanted election.
    ///
    /// # Errors
    /// `Unavailable`/`Draining` without a session; `LimitReached` past `max_elections` or the
    /// gateway's `max_queues`; ZooKeeper errors placing the folder's watch.
    pub async fn observe_many(&self, spec: ManySpec) -> Result<ManyObservation, CoordError> {
        observe_many::observe_many(&self.pool, spec).await
    }

    /// The fleet-wide view of the queues whose names start with `prefix` (the `/ui` page),
    /// started (watch placed, queues listed and read) on first use and shared by every caller
    /// of the prefix.
    ///
    /// # Errors
    /// `Unavailable`/`Draining` without a session; ZooKeeper errors placing the watch,
    /// listing or reading.
    pub async fn fleet(&self, prefix: &str) -> Result<Arc<fleet::Fleet>, CoordError> {
        fleet::fleet(&self.pool, &self.fleet, prefix).await
    }
}
