//! A thin wrapper over one `zookeeper_client::Client` that counts and times every request
//! (`zkgate_zk_requests_total{op,result}`, `zkgate_zk_request_duration_seconds{op}`) and keeps a
//! per-session counter so tests can prove that a leader change costs O(1) requests (G4).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use zookeeper_client as zkc;
use zookeeper_client::{Acls, AddWatchMode, Client, CreateMode, PersistentWatcher, Stat};

use super::batch::{self, BatchLimits, Failure, Fate, Urgency, WriteOp};
use super::config::CoordConfig;
use super::paging::{ReadPlan, PAGES_IN_FLIGHT};
use crate::metrics as m;

pub type ZkResult<T> = Result<T, zkc::Error>;

/// How the gateway proves who it is to ZooKeeper, if at all: what decides the znodes' ACL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZkIdentity {
    /// No credentials: ZooKeeper cannot tell the gateway from any other client, so znodes are
    /// open to everyone (`world:anyone`), and the gateway says so at start and on `/readyz`.
    Anonymous,
    /// Digest, SASL or a TLS client certificate: every znode the gateway makes carries
    /// ZooKeeper's `CREATOR_ALL_ACL`, which the server expands to every identity the session
    /// authenticated with (`digest:user:hash`, `sasl:user`, `x509:<subject DN>`), and nobody
    /// else may read, list, change or delete it.
    Authenticated,
}

/// What the gateway says, at start and on `/readyz`, when it does not authenticate to ZooKeeper.
pub const ANONYMOUS_WARNING_LINE: &str = "warning: no ZooKeeper authentication (--zk-digest, --zk-sasl-user, --zk-kerberos-principal or --zk-tls-cert): every ZooKeeper client can read, list and delete the gateway's znodes\n";

impl ZkIdentity {
    pub fn of(cfg: &CoordConfig) -> Self {
        let client_cert = cfg.zk_tls.as_ref().is_some_and(|t| t.identity.is_some());
        if cfg.zk_digest.is_some()
            || cfg.zk_sasl.is_some()
            || cfg.zk_kerberos.is_some()
            || client_cert
        {
            Self::Authenticated
        } else {
            Self::Anonymous
        }
    }

    /// The ACL of every znode the gateway makes (G9).
    pub fn acls(self) -> Acls<'static> {
        match self {
            Self::Anonymous => Acls::anyone_all(),
            Self::Authenticated => Acls::creator_all(),
        }
    }
}

/// Opens one ZooKeeper session as configured: TLS, SASL and digest auth alike. Every session
/// of the gateway (each of the pool, and every reconnect of the supervisor) is opened here.
/// `connection_timeout` bounds how long the library waits on a silent connection.
///
/// # Errors
/// What the library reports: no server reachable, a TLS handshake or SASL exchange that
/// fails (the server then closes the connection), a bad connect string.
pub async fn open_session(
    cfg: &CoordConfig,
    session_timeout: std::time::Duration,
    connection_timeout: std::time::Duration,
) -> ZkResult<Client> {
    connect_as(cfg, session_timeout, connection_timeout, None).await
}

/// Attaches a new client to a session the gateway already had (its id and password), with the
/// same credentials. Used only to close a session the gateway gave up on
/// (`session::close_abandoned`).
pub async fn reattach_session(
    cfg: &CoordConfig,
    session: zkc::SessionInfo,
    session_timeout: std::time::Duration,
    connection_timeout: std::time::Duration,
) -> ZkResult<Client> {
    connect_as(cfg, session_timeout, connection_timeout, Some(session)).await
}

async fn connect_as(
    cfg: &CoordConfig,
    session_timeout: std::time::Duration,
    connection_timeout: std::time::Duration,
    session: Option<zkc::SessionInfo>,
) -> ZkResult<Client> {
    let mut connector = Client::connector()
        .with_session_timeout(session_timeout)
        .with_connection_timeout(connection_timeout);
    if let Some(session) = session {
        connector = connector.with_session(session);
    }
    if let Some(digest) = &cfg.zk_digest {
        connector = connector.with_auth("digest", digest.as_bytes());
    }
    if let Some(sasl) = &cfg.zk_sasl {
        connector = connector.with_sasl(zkc::SaslOptions::digest_md5(
            sasl.user.clone(),
            sasl.password.clone(),
        ));
    }
    // Kerberos: the process's ticket (crate::kerberos), for the service `zookeeper/<host>` of
    // the host the connect string names, as the Java client does by default.
    #[cfg(feature = "zk-kerberos")]
    if cfg.zk_kerberos.is_some() {
        connector = connector.with_sasl(zkc::SaslOptions::gssapi());
    }
    match &cfg.zk_tls {
        // `secure_connect`: endpoints without a scheme use TLS too.
        Some(tls) => {
            connector
                .with_tls(tls.options()?)
                .secure_connect(&cfg.zk)
                .await
        }
        None => connector.connect(&cfg.zk).await,
    }
}

/// Errors that say the connection failed, not that the request was refused: the request may or
/// may not have been applied. zookeeper-client fails requests in flight with whatever ended
/// the connection: `ConnectionLoss` on EOF, but a `Custom` error for a silent link ("no
/// response from connection in …") or a reset, and `Timeout` for its own deadlines.
pub fn is_transport_failure(e: &zkc::Error) -> bool {
    matches!(
        e,
        zkc::Error::ConnectionLoss | zkc::Error::Timeout | zkc::Error::Custom(_)
    )
}

/// Counts requests across every session of a gateway, for tests and the benchmark: in all,
/// and by operation (the `op` label of `zkgate_zk_requests_total`, which is the process's,
/// while this is one gateway's: tests run many gateways in one process).
#[derive(Debug, Default)]
pub struct RequestCounter {
    all: AtomicU64,
    by_op: std::sync::Mutex<Vec<(&'static str, u64)>>,
}

impl RequestCounter {
    pub fn get(&self) -> u64 {
        self.all.load(Ordering::Relaxed)
    }

    /// Requests sent so far as `op` (`"create"`, `"exists"`, `"batch"`, …).
    pub fn of(&self, op: &str) -> u64 {
        let by_op = self.by_op.lock().unwrap_or_else(|p| p.into_inner());
        by_op.iter().find(|(o, _)| *o == op).map_or(0, |(_, n)| *n)
    }

    fn count(&self, op: &'static str) {
        self.all.fetch_add(1, Ordering::Relaxed);
        let mut by_op = self.by_op.lock().unwrap_or_else(|p| p.into_inner());
        match by_op.iter_mut().find(|(o, _)| *o == op) {
            Some((_, n)) => *n += 1,
            None => by_op.push((op, 1)),
        }
    }
}

/// Test seam for fault soaks that run gateways as child processes (`examples/soak.rs`), where
/// [`Zk::lose_next_create_reply`] and [`Zk::fail_next_unsent`] cannot be reached: read once
/// from the environment, off unless set.
///
/// * `ZKGATE_FAILPOINT_LOSE_CREATE_REPLY_EVERY=N`: every Nth member create of the process is
///   applied by ZooKeeper but reports `ConnectionLoss`, as if its reply had been lost.
/// * `ZKGATE_FAILPOINT_FAIL_DELETE_EVERY=N`: every Nth delete of the process fails with
///   `ConnectionLoss` without being sent.
/// * `ZKGATE_FAILPOINT_KEEP_GIVEN_UP_CLIENT_EVERY=N`: of every Nth session the gateway gives up,
///   a handle (a client clone) is kept for the rest of the process, as a task or actor that
///   still held one would keep it ([`Zk::give_up`] must make that harmless).
///
/// Each firing is logged at WARN ("failpoint: …"). Not a configuration option: never set
/// these outside tests.
#[derive(Debug, Default)]
struct EnvFailpoints {
    lose_create: EveryNth,
    fail_delete: EveryNth,
    keep_given_up: EveryNth,
}

#[derive(Debug, Default)]
struct EveryNth {
    every: u64,
    seen: AtomicU64,
}

impl EveryNth {
    fn from_env(var: &str) -> Self {
        let every = std::env::var(var)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if every > 0 {
            tracing::warn!(var, every, "test failpoint armed");
        }
        Self {
            every,
            seen: AtomicU64::new(0),
        }
    }

    fn fire(&self) -> bool {
        self.every > 0 && (self.seen.fetch_add(1, Ordering::Relaxed) + 1).is_multiple_of(self.every)
    }
}

fn env_failpoints() -> &'static EnvFailpoints {
    static FP: std::sync::OnceLock<EnvFailpoints> = std::sync::OnceLock::new();
    FP.get_or_init(|| EnvFailpoints {
        lose_create: EveryNth::from_env("ZKGATE_FAILPOINT_LOSE_CREATE_REPLY_EVERY"),
        fail_delete: EveryNth::from_env("ZKGATE_FAILPOINT_FAIL_DELETE_EVERY"),
        keep_given_up: EveryNth::from_env("ZKGATE_FAILPOINT_KEEP_GIVEN_UP_CLIENT_EVERY"),
    })
}

/// Requests a session has in flight at most, the liveness probe aside.
///
/// ZooKeeper answers one session's requests in order, so a probe sent behind a flood of
/// requests waits for every one of them: 256 clients joining fresh names put about a thousand
/// requests ahead of it, and on a loaded ensemble their round trip outlasts
/// [`super::timing::Timing::probe_stale_after`] (T/5): the session is suspended, new joins are
/// refused and leaders hear `suspended` although nothing is wrong with the link. Requests past
/// this many wait in the gateway instead (first come, first served), where the probe overtakes
/// them, so its answer waits for at most this many. Measured with
/// `isolation::a_flood_of_names_comes_and_goes` on 2 cores: unbounded it failed at load
/// average 8 or more; at 8–11, 128 suspended the session (the probe unanswered for 0.81 and
/// 0.92 s) and 16 and 32 never did.
/// ZooKeeper commits a session's writes in groups, so 32 still keeps its pipeline busy.
pub const REQUESTS_IN_FLIGHT: usize = 32;

#[derive(Clone, Debug)]
pub struct Zk {
    client: Client,
    acls: Acls<'static>,
    counter: Arc<RequestCounter>,
    /// Room for requests in flight ([`REQUESTS_IN_FLIGHT`]); the probe takes none.
    in_flight: Arc<tokio::sync::Semaphore>,
    lose_create_reply: Arc<std::sync::atomic::AtomicBool>,
    /// Test seams: `op` → how many of its next requests fail with `ConnectionLoss` unsent.
    fail_unsent: Arc<std::sync::Mutex<std::collections::HashMap<&'static str, u32>>>,
    /// Member creates and deletes gathered into `multi`s, when batching is on
    /// ([`Zk::with_batching`]; see [`batch`]).
    batcher: Option<Arc<Batcher>>,
    /// Test seam: the next batch of several operations is applied but reports `ConnectionLoss`.
    lose_batch_reply: Arc<std::sync::atomic::AtomicBool>,
    /// Test seam: the next member create reports `ConnectionLoss` and is sent this much later
    /// ([`Zk::delay_next_create`]).
    delay_create: Arc<std::sync::Mutex<Option<std::time::Duration>>>,
    /// That delayed create has been applied.
    delayed_create_applied: Arc<std::sync::atomic::AtomicBool>,
}

/// The session's write batcher: creates and deletes waiting for the batch in flight.
#[derive(Debug)]
struct Batcher {
    limits: BatchLimits,
    queue: std::sync::Mutex<BatchQueue>,
}

#[derive(Debug, Default)]
struct BatchQueue {
    waiting: std::collections::VecDeque<Waiting>,
    /// Driver tasks sending (each has a batch in flight or about to be): while there is one,
    /// new operations wait for the next batch.
    drivers: usize,
    /// The most drivers ever running at once (a test seam: [`Zk::peak_batch_drivers`]).
    peak_drivers: usize,
    next_id: u64,
}

impl BatchQueue {
    fn add_driver(&mut self) {
        self.drivers += 1;
        self.peak_drivers = self.peak_drivers.max(self.drivers);
    }
}

/// An operation waiting to be sent, with where its answer goes.
#[derive(Debug)]
struct Waiting {
    id: u64,
    op: WriteOp,
    alone: bool,
    reply: tokio::sync::oneshot::Sender<ZkResult<Written>>,
}

/// A batched write's answer.
#[derive(Debug)]
enum Written {
    /// The member's sequence number and creation zxid (its fencing token): from its stat
    /// when sent alone, from the `multi`'s reply header when batched ([`multi_czxid`]).
    Created {
        sequence: i64,
        czxid: i64,
    },
    Deleted,
}

/// How a sent batch failed.
#[derive(Debug)]
enum BatchError {
    /// One operation sent alone failed: its own answer.
    Alone(zkc::Error),
    /// ZooKeeper refused operation `index` of a `multi`: nothing of it was applied.
    Refused { index: usize, source: zkc::Error },
    /// The client would not send the `multi` (a path it refuses): nothing was sent.
    Unsent(zkc::Error),
    /// Anything after the `multi` was sent that names no operation (a lost reply above
    /// all, but also a reply the client could not read): it may have been applied.
    Unknown(zkc::Error),
}

/// Withdraws a caller's operation from the batch queue when the caller is dropped before it
/// was sent, so a join dropped while waiting never creates its znode after its cleanup looked
/// for it (G5). Taking a batch and sending it happen under the queue's lock: an operation not
/// found here is already on the wire, ahead of whatever the cleanup sends next.
struct Withdraw<'a> {
    batcher: &'a Batcher,
    id: u64,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        let mut q = self.batcher.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.waiting.retain(|w| w.id != self.id);
    }
}

fn result_label<T>(r: &ZkResult<T>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(zkc::Error::NoNode) => "no_node",
        Err(zkc::Error::NodeExists) => "node_exists",
        Err(zkc::Error::BadVersion) => "bad_version",
        Err(zkc::Error::ConnectionLoss) => "connection_loss",
        Err(zkc::Error::SessionExpired) => "session_expired",
        Err(zkc::Error::NoAuth) => "no_auth",
        Err(_) => "error",
    }
}

impl Zk {
    pub fn new(client: Client, acls: Acls<'static>, counter: Arc<RequestCounter>) -> Self {
        env_failpoints();
        Self {
            client,
            acls,
            counter,
            in_flight: Arc::new(tokio::sync::Semaphore::new(REQUESTS_IN_FLIGHT)),
            lose_create_reply: Arc::default(),
            fail_unsent: Arc::default(),
            batcher: None,
            lose_batch_reply: Arc::default(),
            delay_create: Arc::default(),
            delayed_create_applied: Arc::default(),
        }
    }

    /// Gathers member creates and deletes into `multi`s (see [`batch`]) when `on`, each within
    /// `max_packet` bytes (`--zk-batch`, `--zk-max-packet`).
    #[must_use]
    pub fn with_batching(mut self, on: bool, max_packet: usize) -> Self {
        self.batcher = on.then(|| {
            Arc::new(Batcher {
                limits: BatchLimits::new(max_packet),
                queue: Default::default(),
            })
        });
        self
    }

    /// Whether creates and deletes are batched.
    pub fn batching(&self) -> bool {
        self.batcher.is_some()
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The gateway is done with this session (it was lost, given up or drained): closes it on
    /// behalf of every handle at once ([`Client::close_for_all`]) rather than when the last
    /// clone of the client is dropped. A clone still held anywhere — a task not yet finished, a
    /// queue actor someone still references — would otherwise let the client library
    /// reconnect a session whose streams were all ended, and keep its members at the head of
    /// their queues for as long as it lives (docs/faults.md, "A given-up session kept open").
    /// Requests made through any handle afterwards fail at once.
    /// Drops the connection and reconnects the session to another server of the connect
    /// string (the vendored client's `move_server`, PATCHED.md item 8): for a server proven
    /// diverged from its quorum ([`super::divergence`]). Requests in flight fail as on any
    /// connection loss, and the link goes through `suspended` as on one.
    pub fn move_server(&self) {
        self.client.move_server();
    }

    pub fn give_up(&self) {
        if env_failpoints().keep_given_up.fire() {
            tracing::warn!("failpoint: a handle of a session given up is kept");
            let kept = self.client.clone();
            tokio::spawn(async move {
                std::future::pending::<()>().await;
                drop(kept);
            });
        }
        self.client.close_for_all();
    }

    pub fn session_id(&self) -> i64 {
        self.client.session_id().0
    }

    /// Sends the request that `send` makes once the session has room for it
    /// ([`REQUESTS_IN_FLIGHT`]; zookeeper-client sends when the future is made, not when it is
    /// polled: hence a closure, so a failpoint can keep it unsent).
    async fn instrument<T, F: std::future::Future<Output = ZkResult<T>>>(
        &self,
        op: &'static str,
        send: impl FnOnce() -> F,
    ) -> ZkResult<T> {
        let _slot = self.slots(1).await;
        self.send_now(op, send).await
    }

    /// Room for `n` requests in flight, waited for in turn ([`REQUESTS_IN_FLIGHT`]).
    async fn slots(&self, n: u32) -> tokio::sync::SemaphorePermit<'_> {
        self.in_flight
            .acquire_many(n)
            .await
            .expect("the semaphore is never closed")
    }

    /// Like [`Zk::instrument`], but `send` runs *now*, before this returns: requests made in a
    /// row this way are on the wire in that order, so their round trips overlap (ZooKeeper
    /// answers one session's requests in order).
    fn send_now<T, F: std::future::Future<Output = ZkResult<T>>>(
        &self,
        op: &'static str,
        send: impl FnOnce() -> F,
    ) -> impl std::future::Future<Output = ZkResult<T>> {
        self.counter.count(op);
        let start = Instant::now();
        let sent = if self.take_failure(op) {
            futures::future::Either::Left(std::future::ready(Err(zkc::Error::ConnectionLoss)))
        } else {
            futures::future::Either::Right(send())
        };
        async move {
            let r = sent.await;
            m::zk_request(op, result_label(&r), start.elapsed());
            r
        }
    }

    /// The failpoints of a member create whose request was applied: a test can make its reply
    /// look lost (G5).
    fn lose_reply_of_applied_create(&self, prefix_path: &str) -> bool {
        if self.lose_create_reply.swap(false, Ordering::Relaxed) {
            return true;
        }
        if env_failpoints().lose_create.fire() {
            tracing::warn!(
                path = prefix_path,
                "failpoint: member create applied, reply lost"
            );
            return true;
        }
        false
    }

    /// Creates an EPHEMERAL_SEQUENTIAL znode; returns its creation zxid (its fencing token) and
    /// sequence number, alone or batched.
    pub async fn create_member(&self, prefix_path: &str, data: &[u8]) -> ZkResult<(i64, i64)> {
        if let Some(delay) = self
            .delay_create
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let (client, acls) = (self.client.clone(), self.acls);
            let (path, data) = (prefix_path.to_owned(), data.to_vec());
            let applied = self.delayed_create_applied.clone();
            applied.store(false, Ordering::Relaxed);
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let opts = CreateMode::EphemeralSequential.with_acls(acls);
                if client.create(&path, &data, &opts).await.is_ok() {
                    applied.store(true, Ordering::Relaxed);
                }
            });
            return Err(zkc::Error::ConnectionLoss);
        }
        let r = match &self.batcher {
            None => {
                let opts = CreateMode::EphemeralSequential.with_acls(self.acls);
                self.instrument("create", || async {
                    let (stat, seq) = self.client.create(prefix_path, data, &opts).await?;
                    Ok((stat.czxid, seq.into_i64()))
                })
                .await
            }
            Some(batcher) => {
                let op = WriteOp::Create {
                    prefix: prefix_path.to_owned(),
                    data: data.to_vec(),
                };
                match self.write(batcher, op, Urgency::Gather).await {
                    Ok(Written::Created { sequence, czxid }) => Ok((czxid, sequence)),
                    Ok(Written::Deleted) => Err(zkc::Error::UnexpectedError(
                        "a create answered as a delete".into(),
                    )),
                    Err(e) => Err(e),
                }
            }
        };
        if r.is_ok() && self.lose_reply_of_applied_create(prefix_path) {
            return Err(zkc::Error::ConnectionLoss);
        }
        r
    }

    /// Sends `op` through the batcher and waits for its answer: at once, alone, when nothing
    /// is in flight; else in the next batch (see [`batch`]).
    ///
    /// # Cancellation safety
    /// Dropped before its operation was sent, the operation is never sent ([`Withdraw`]).
    async fn write(
        &self,
        batcher: &Arc<Batcher>,
        op: WriteOp,
        urgency: Urgency,
    ) -> ZkResult<Written> {
        if self.take_failure(op.label()) {
            self.counter.count(op.label());
            m::zk_request(op.label(), "connection_loss", std::time::Duration::ZERO);
            return Err(zkc::Error::ConnectionLoss);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (id, start_driver) = {
            let mut q = batcher.queue.lock().unwrap_or_else(|p| p.into_inner());
            let id = q.next_id;
            q.next_id += 1;
            q.waiting.push_back(Waiting {
                id,
                op,
                alone: false,
                reply: tx,
            });
            let start = batch::starts_driver(q.drivers, urgency);
            if start {
                q.add_driver();
            }
            (id, start)
        };
        let _withdraw = Withdraw { batcher, id };
        if start_driver {
            tokio::spawn(self.clone().drive(batcher.clone()));
        }
        // The driver answers every operation it takes; a driver gone without answering (the
        // runtime shutting down) is reported as the link's failure: the caller then looks
        // for what may have been applied.
        rx.await.unwrap_or(Err(zkc::Error::ConnectionLoss))
    }

    /// A batch driver: sends what is waiting, one request at a time, until nothing is.
    ///
    /// What a batch leaves waiting when it is sent — a second member create of one queue
    /// ([`batch::next_batch`]), or what did not fit — gets a driver of its own at once while a
    /// request slot is free, so it goes out pipelined behind the batch instead of a round
    /// trip later. One driver per round trip made 2,000 candidates joining one election wait
    /// for 2,000 round trips in turn (the bench's W5: 2.05 s with batching on, 0.25 s off).
    /// Operations asked while drivers are in flight still gather for the next batch, except a
    /// hand-over's delete, which joins one batch in flight with a driver of its own
    /// ([`batch::starts_driver`]).
    ///
    /// A batch of n operations takes n of the session's request slots ([`REQUESTS_IN_FLIGHT`]),
    /// not one: ZooKeeper applies a `multi`'s operations one by one (and sends the session a
    /// watch event for each) before it answers the liveness probe queued behind it, so the
    /// slots keep bounding the work ahead of the probe exactly as they did for single
    /// requests. Batching saves transactions and fsyncs, not that work.
    async fn drive(self, batcher: Arc<Batcher>) {
        loop {
            let mut slots = self
                .in_flight
                .clone()
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            let mut taken = Vec::new();
            let Some(request) = self.take_and_send(&batcher, &mut taken, &mut slots) else {
                return;
            };
            let answer = request.await;
            drop(slots);
            self.answer(&batcher, taken, answer);
        }
    }

    /// Takes the next batch into `taken` and sends it, under the queue's lock (see
    /// [`Withdraw`]); `None`, and the driver stops, when nothing is waiting.
    fn take_and_send<'a>(
        &'a self,
        batcher: &Arc<Batcher>,
        taken: &'a mut Vec<Waiting>,
        slots: &mut tokio::sync::OwnedSemaphorePermit,
    ) -> Option<futures::future::BoxFuture<'a, Result<Vec<Written>, BatchError>>> {
        let mut q = batcher.queue.lock().unwrap_or_else(|p| p.into_inner());
        // Callers gone before their operation was sent: never sent (see `Withdraw`).
        q.waiting.retain(|w| !w.reply.is_closed());
        let queued: Vec<batch::Queued> = q
            .waiting
            .iter()
            .map(|w| batch::Queued {
                bytes: w.op.bytes(),
                alone: w.alone,
                queue: w.op.queue(),
                create: matches!(w.op, WriteOp::Create { .. }),
            })
            .collect();
        // One slot is held; the batch may use as many more as are free now (see `drive`).
        let limits = BatchLimits {
            max_ops: batcher
                .limits
                .max_ops
                .min(1 + self.in_flight.available_permits()),
            ..batcher.limits
        };
        let mut picked = batch::next_batch(&queued, limits);
        if picked.is_empty() {
            q.drivers -= 1;
            return None;
        }
        let more = u32::try_from(picked.len() - 1).unwrap_or(u32::MAX);
        if more > 0 {
            match self.in_flight.clone().try_acquire_many_owned(more) {
                Ok(extra) => slots.merge(extra),
                // Taken meanwhile by another request: the first operation goes alone (any
                // prefix of a batch is a valid batch).
                Err(_) => picked.truncate(1),
            }
        }
        let mut picked_ops: Vec<Waiting> = picked
            .iter()
            .rev()
            .filter_map(|&i| q.waiting.remove(i))
            .collect();
        picked_ops.reverse();
        taken.extend(picked_ops);
        // Left waiting by this batch, not asked after it: send it now, pipelined.
        if !q.waiting.is_empty() && self.in_flight.available_permits() > 0 {
            q.add_driver();
            tokio::spawn(self.clone().drive(batcher.clone()));
        }
        let taken: &'a Vec<Waiting> = taken;
        Some(self.send_batch(taken))
    }

    /// Puts `taken` on the wire now: one operation as its plain request, several as a `multi`.
    fn send_batch<'a>(
        &'a self,
        taken: &'a [Waiting],
    ) -> futures::future::BoxFuture<'a, Result<Vec<Written>, BatchError>> {
        use futures::FutureExt;
        let start = Instant::now();
        let member = CreateMode::EphemeralSequential.with_acls(self.acls);
        if let [one] = taken {
            let label = one.op.label();
            self.counter.count(label);
            let client = &self.client;
            let sent: futures::future::BoxFuture<'a, ZkResult<Written>> = match &one.op {
                WriteOp::Create { prefix, data } => {
                    let f = client.create(prefix, data, &member);
                    async move {
                        let (stat, seq) = f.await?;
                        Ok(Written::Created {
                            sequence: seq.into_i64(),
                            czxid: stat.czxid,
                        })
                    }
                    .boxed()
                }
                WriteOp::Delete { path } => {
                    let f = client.delete(path, None);
                    async move { f.await.map(|()| Written::Deleted) }.boxed()
                }
            };
            return async move {
                let r = sent.await;
                m::zk_request(label, result_label(&r), start.elapsed());
                r.map(|w| vec![w]).map_err(BatchError::Alone)
            }
            .boxed();
        }
        self.counter.count("batch");
        let mut txn = self.client.new_multi_writer();
        for w in taken {
            let added = match &w.op {
                WriteOp::Create { prefix, data } => txn.add_create(prefix, data, &member),
                WriteOp::Delete { path } => txn.add_delete(path, None),
            };
            if let Err(source) = added {
                // A path the client refuses: nothing is sent; each goes again alone and gets
                // its own answer.
                return futures::future::ready(Err(BatchError::Unsent(source))).boxed();
            }
        }
        let sent = txn.commit_with_zxid();
        let lose = self.lose_batch_reply.swap(false, Ordering::Relaxed);
        async move {
            let mut r = match sent.await {
                Ok((results, zxid)) => results
                    .into_iter()
                    .map(|r| match r {
                        zkc::MultiWriteResult::Create { path, stat } => Ok(Written::Created {
                            sequence: sequence_of(&path)?,
                            czxid: multi_czxid(&stat, zxid)?,
                        }),
                        _ => Ok(Written::Deleted),
                    })
                    .collect::<ZkResult<Vec<_>>>()
                    .map_err(BatchError::Unknown),
                Err(zkc::MultiWriteError::OperationFailed { index, source }) => {
                    Err(BatchError::Refused { index, source })
                }
                Err(zkc::MultiWriteError::RequestFailed { source }) => {
                    Err(BatchError::Unknown(source))
                }
            };
            if lose && r.is_ok() {
                tracing::warn!("failpoint: batch applied, reply lost");
                r = Err(BatchError::Unknown(zkc::Error::ConnectionLoss));
            }
            let label = match &r {
                Ok(_) => "ok",
                Err(
                    BatchError::Refused { source, .. }
                    | BatchError::Unknown(source)
                    | BatchError::Unsent(source)
                    | BatchError::Alone(source),
                ) => result_label::<()>(&Err(source.clone())),
            };
            m::zk_request("batch", label, start.elapsed());
            r
        }
        .boxed()
    }

    /// Gives each operation of a sent batch its answer, or queues it again (see
    /// [`batch::after_failure`]).
    fn answer(
        &self,
        batcher: &Batcher,
        taken: Vec<Waiting>,
        answer: Result<Vec<Written>, BatchError>,
    ) {
        let (failure, error) = match answer {
            Ok(results) if results.len() == taken.len() => {
                for (w, r) in taken.into_iter().zip(results) {
                    let _ = w.reply.send(Ok(r));
                }
                return;
            }
            Ok(results) => (
                Failure::Link,
                ambiguous(zkc::Error::UnexpectedError(format!(
                    "a multi of {} operations answered {}",
                    taken.len(),
                    results.len()
                ))),
            ),
            // One operation's own answer, as without batching.
            Err(BatchError::Alone(e)) => (Failure::Link, e),
            Err(BatchError::Refused { index, source }) => (Failure::Refused { index }, source),
            Err(BatchError::Unsent(e)) => (Failure::Other, e),
            Err(BatchError::Unknown(e)) => (Failure::Link, ambiguous(e)),
        };
        let fates = batch::after_failure(taken.len(), failure);
        let mut again = Vec::new();
        for (mut w, fate) in taken.into_iter().zip(fates) {
            match fate {
                Fate::Fail => {
                    let _ = w.reply.send(Err(error.clone()));
                }
                Fate::Again { alone } => {
                    w.alone = alone;
                    again.push(w);
                }
            }
        }
        let mut q = batcher.queue.lock().unwrap_or_else(|p| p.into_inner());
        for w in again.into_iter().rev() {
            q.waiting.push_front(w);
        }
    }

    /// Creates a queue's container znode and its first member in one transaction: one round
    /// trip and one log write where creating them in turn takes two of each (a fresh name).
    /// Returns the member's creation zxid (the transaction's, [`multi_czxid`]) and sequence
    /// number.
    ///
    /// # Errors
    /// `NodeExists` when the queue exists after all (then create the member alone); `NoNode`
    /// when the queue's folder is missing.
    pub async fn create_queue_and_member(
        &self,
        queue_path: &str,
        prefix_path: &str,
        data: &[u8],
    ) -> ZkResult<(i64, i64)> {
        let container = CreateMode::Container.with_acls(self.acls);
        let member = CreateMode::EphemeralSequential.with_acls(self.acls);
        let r = self
            .instrument("multi", || async {
                let mut txn = self.client.new_multi_writer();
                txn.add_create(queue_path, &[], &container)?;
                txn.add_create(prefix_path, data, &member)?;
                let (results, zxid) = txn.commit_with_zxid().await.map_err(zkc::Error::from)?;
                // Both znodes are made by one transaction: the member's fencing token is its
                // zxid (ZooKeeper 3.8 leaves the member's stat blank in a multi reply,
                // ZOOKEEPER-4026, but fills in the container's).
                match results.last() {
                    Some(zkc::MultiWriteResult::Create { path, stat }) => {
                        Ok((multi_czxid(stat, zxid)?, sequence_of(path)?))
                    }
                    _ => Err(zkc::Error::UnexpectedError(
                        "a multi create answered without the member's path".into(),
                    )),
                }
            })
            .await;
        if r.is_ok() && self.lose_reply_of_applied_create(prefix_path) {
            return Err(zkc::Error::ConnectionLoss);
        }
        r
    }

    /// Whether `path` exists in the ensemble leader's view. Reads are answered by whichever
    /// server the session is on, which may lag or (ZOOKEEPER-5010) keep znodes the quorum no
    /// longer has; a `multi` holding one `check` (any version) is decided by the leader
    /// against every change it has proposed, so `false` is the committed truth.
    pub async fn exists_at_leader(&self, path: &str) -> ZkResult<bool> {
        let r = self
            .instrument("multi", || async {
                let mut txn = self.client.new_multi_writer();
                txn.add_check_version(path, -1)?;
                txn.commit().await.map_err(zkc::Error::from)
            })
            .await;
        match r {
            Ok(_) => Ok(true),
            Err(zkc::Error::NoNode) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Test seam (a failpoint, as etcd has them): the next member create succeeds in ZooKeeper
    /// but reports `ConnectionLoss`, exactly as if its reply had been lost with the connection.
    /// Proves G5 (the orphan is found again by its protected id and adopted) deterministically.
    #[doc(hidden)]
    pub fn lose_next_create_reply(&self) {
        self.lose_create_reply.store(true, Ordering::Relaxed);
    }

    /// Test seam: the next member create fails with `ConnectionLoss` at once, and its request
    /// reaches ZooKeeper `delay` later, where it is applied: a lost attempt applied *after* the
    /// gateway's search for it found nothing and it created again, as a soak saw ZooKeeper do
    /// when a connection was dropped while a frozen server woke up (`queue::state::Strays`).
    #[doc(hidden)]
    pub fn delay_next_create(&self, delay: std::time::Duration) {
        *self.delay_create.lock().unwrap_or_else(|p| p.into_inner()) = Some(delay);
    }

    /// Whether the create delayed by [`Zk::delay_next_create`] has been applied.
    #[doc(hidden)]
    pub fn delayed_create_applied(&self) -> bool {
        self.delayed_create_applied.load(Ordering::Relaxed)
    }

    /// Test seam: takes every request slot of the session ([`REQUESTS_IN_FLIGHT`]) until the
    /// permit is dropped, so writes asked meanwhile gather in the batcher (the liveness probe
    /// takes no slot: the link stays up).
    #[doc(hidden)]
    pub async fn hold_requests(&self) -> tokio::sync::OwnedSemaphorePermit {
        self.in_flight
            .clone()
            .acquire_many_owned(REQUESTS_IN_FLIGHT as u32)
            .await
            .expect("the semaphore is never closed")
    }

    /// Test seam: creates and deletes waiting in the batcher, not yet sent.
    #[doc(hidden)]
    pub fn queued_writes(&self) -> usize {
        self.batch_queue(|q| q.waiting.len())
    }

    /// Test seam: the most batch drivers that ever ran at once (more than one: batches went out
    /// pipelined, see `Zk::drive`).
    #[doc(hidden)]
    pub fn peak_batch_drivers(&self) -> usize {
        self.batch_queue(|q| q.peak_drivers)
    }

    /// A count read from the batch queue for the test seams above; 0 without batching.
    fn batch_queue(&self, read: impl FnOnce(&BatchQueue) -> usize) -> usize {
        self.batcher.as_ref().map_or(0, |b| {
            read(&b.queue.lock().unwrap_or_else(|p| p.into_inner()))
        })
    }

    /// Test seam: the next batch of several operations is applied by ZooKeeper but every one
    /// of its operations reports `ConnectionLoss`, as if the batch's reply had been lost with
    /// the connection (G5 per member of a batch).
    #[doc(hidden)]
    pub fn lose_next_batch_reply(&self) {
        self.lose_batch_reply.store(true, Ordering::Relaxed);
    }

    /// Test seam: whether the failure armed by [`Zk::lose_next_batch_reply`] is still waiting.
    #[doc(hidden)]
    pub fn batch_reply_loss_armed(&self) -> bool {
        self.lose_batch_reply.load(Ordering::Relaxed)
    }

    /// Test seam: the next `times` requests of kind `op` (`"get_data"`, `"get_children"`,
    /// `"delete"`, `"exists"`, …, as in `zkgate_zk_requests_total{op}`) fail with
    /// `ConnectionLoss` without being sent, as if the link had died just before them. Proves
    /// that every path which may follow a lost reply looks again instead of giving up (G5).
    #[doc(hidden)]
    pub fn fail_next_unsent(&self, op: &'static str, times: u32) {
        *self
            .fail_unsent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(op)
            .or_default() += times;
    }

    /// Test seam: disarms the failures [`Zk::fail_next_unsent`] armed for `op` that no request
    /// has used yet.
    #[doc(hidden)]
    pub fn clear_unsent_failures(&self, op: &'static str) {
        self.fail_unsent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(op);
    }

    /// Test seam: how many of the failures armed by [`Zk::fail_next_unsent`] for `op` are
    /// still waiting for a request (0 once every one was used).
    #[doc(hidden)]
    pub fn unsent_failures_left(&self, op: &'static str) -> u32 {
        self.fail_unsent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(op)
            .copied()
            .unwrap_or(0)
    }

    fn take_failure(&self, op: &'static str) -> bool {
        if op == "delete" && env_failpoints().fail_delete.fire() {
            tracing::warn!("failpoint: delete failed unsent");
            return true;
        }
        let mut map = self.fail_unsent.lock().unwrap_or_else(|p| p.into_inner());
        match map.get_mut(op) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }

    /// Makes the persistent folders a queue lives in (the root and `elections` or `locks`);
    /// the queue itself is a container znode made with its first member
    /// ([`Zk::create_queue_and_member`]), so an emptied queue disappears by itself.
    pub async fn ensure_folders(&self, root: &str, folder: &str) -> ZkResult<()> {
        let persistent = CreateMode::Persistent.with_acls(self.acls);
        let mut path = String::new();
        for seg in root
            .split('/')
            .filter(|s| !s.is_empty())
            .chain(std::iter::once(folder))
        {
            path.push('/');
            path.push_str(seg);
            match self
                .instrument("create", || self.client.create(&path, &[], &persistent))
                .await
            {
                Ok(_) | Err(zkc::Error::NodeExists) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Proof that the session is alive *through the quorum*: a `sync`, which a follower
    /// answers only once the ensemble's leader has answered it. A read or a ping would not do:
    /// a follower cut off from its leader keeps answering those for up to `syncLimit ×
    /// tickTime` while the quorum expires the session (G2).
    pub async fn probe(&self) -> ZkResult<()> {
        self.instrument("sync", || self.client.sync("/")).await
    }

    /// The session supervisor's liveness probe (see `session::follow_session`): the same
    /// quorum round trip as [`Zk::probe`], timed under `op="probe"` but left out of the
    /// per-session request counter, which measures what coordination itself costs (G4).
    pub fn liveness_probe(
        &self,
    ) -> impl std::future::Future<Output = ZkResult<()>> + Send + 'static {
        let client = self.client.clone();
        async move {
            let start = Instant::now();
            let r = client.sync("/").await;
            m::zk_request("probe", result_label(&r), start.elapsed());
            r
        }
    }

    /// Brings this session's server up to date with the quorum before a read whose answer
    /// must be at least as new as the call (`Validate`, Chubby's CheckSequencer).
    pub async fn sync(&self, path: &str) -> ZkResult<()> {
        self.instrument("sync", || self.client.sync(path)).await
    }

    /// Deletes `path` (any version); batched with other writes when batching is on, where
    /// `urgency` says whether it may wait for the next batch ([`Urgency`]); without batching
    /// it is sent at once either way.
    pub async fn delete(&self, path: &str, urgency: Urgency) -> ZkResult<()> {
        match &self.batcher {
            None => {
                self.instrument("delete", || self.client.delete(path, None))
                    .await
            }
            Some(batcher) => {
                let op = WriteOp::Delete {
                    path: path.to_owned(),
                };
                self.write(batcher, op, urgency).await.map(|_| ())
            }
        }
    }

    pub async fn get_data(&self, path: &str) -> ZkResult<(Vec<u8>, Stat)> {
        self.instrument("get_data", || self.client.get_data(path))
            .await
    }

    pub async fn set_data(&self, path: &str, data: &[u8], version: Option<i32>) -> ZkResult<Stat> {
        self.instrument("set_data", || self.client.set_data(path, data, version))
            .await
    }

    pub async fn list_children(&self, path: &str) -> ZkResult<Vec<String>> {
        self.instrument("get_children", || self.client.list_children(path))
            .await
    }

    /// Reads the data of many znodes, in order (`None` for one that is gone), in multi-read
    /// pages that each stay within `plan`'s byte budget, request and worst-case reply alike
    /// (G10: a packet above ZooKeeper's `jute.maxbuffer` makes the server drop the whole
    /// connection). Up to [`PAGES_IN_FLIGHT`] pages are in flight at once.
    ///
    /// # Errors
    /// The first ZooKeeper error of any page; the pages after it are not awaited.
    ///
    /// # Cancellation safety
    /// Cancellation safe: it only reads.
    pub async fn get_many(
        &self,
        paths: &[String],
        plan: ReadPlan,
    ) -> ZkResult<Vec<Option<(Vec<u8>, Stat)>>> {
        let pages = plan.pages(paths);
        let mut out = Vec::with_capacity(paths.len());
        let mut results = futures::stream::iter(pages)
            .map(|page| self.read_page(&paths[page]))
            .buffered(PAGES_IN_FLIGHT);
        while let Some(page) = results.next().await {
            out.extend(page?);
        }
        Ok(out)
    }

    /// One multi-read page (see [`Zk::get_many`]).
    async fn read_page(&self, paths: &[String]) -> ZkResult<Vec<Option<(Vec<u8>, Stat)>>> {
        self.instrument("multi_read", || async {
            let mut reader = self.client.new_multi_reader();
            for p in paths {
                reader.add_get_data(p)?;
            }
            let results = reader.commit().await?;
            Ok(results
                .into_iter()
                .map(|r| match r {
                    zkc::MultiReadResult::Data { data, stat } => Some((data, stat)),
                    _ => None,
                })
                .collect())
        })
        .await
    }

    /// One persistent recursive watch per queue per session: the only watch zkgate places.
    pub async fn watch_queue(&self, path: &str) -> ZkResult<PersistentWatcher> {
        self.instrument("add_watch", || {
            self.client.watch(path, AddWatchMode::PersistentRecursive)
        })
        .await
    }

    /// A non-recursive persistent watch on a folder (`ObserveMany`'s elections folder): it
    /// fires when a child appears or goes, not for anything inside the children.
    pub async fn watch_folder(&self, path: &str) -> ZkResult<PersistentWatcher> {
        self.instrument("add_watch", || {
            self.client.watch(path, AddWatchMode::Persistent)
        })
        .await
    }

    /// Places a queue's watch and lists the queue in one round trip: both requests are sent
    /// before either reply is awaited, the watch first, so the listing and the events that
    /// follow it leave no gap.
    pub async fn watch_and_list(
        &self,
        path: &str,
    ) -> (ZkResult<PersistentWatcher>, ZkResult<Vec<String>>) {
        let _slots = self.slots(2).await;
        let watch = self.send_now("add_watch", || {
            self.client.watch(path, AddWatchMode::PersistentRecursive)
        });
        let list = self.send_now("get_children", || self.client.list_children(path));
        futures::join!(watch, list)
    }

    /// The znode's stat (`None` once it is gone) and a one-shot watch on it: the next change
    /// (created, deleted, data changed) or session event. Only `member::end_by_lease` waits
    /// this way, for one znode it asked to end.
    pub async fn watch_stat(&self, path: &str) -> ZkResult<(Option<Stat>, zkc::OneshotWatcher)> {
        self.instrument("exists", || self.client.check_and_watch_stat(path))
            .await
    }

    /// The znode's stat, `None` once it is gone: a read, answered in this session's order
    /// (after every event the session was sent before it).
    pub async fn stat(&self, path: &str) -> ZkResult<Option<Stat>> {
        self.instrument("exists", || self.client.check_stat(path))
            .await
    }
}

/// The error every operation of a batch gets when the batch may or may not have been applied:
/// the link's failure as it is; anything else (a reply the client could not read) is logged and
/// reported as `ConnectionLoss`, so that each caller looks for what may have been applied — a
/// member create by its protected name (G5), a delete by deleting again — instead of taking it
/// for a refusal.
/// The creation zxid of a znode created by a `multi`: the zxid in the `multi`'s reply header
/// (zookeeper-client patch 5, third_party/zookeeper-client/PATCHED.md).
///
/// Why the header's zxid is the creation zxid: ZooKeeper applies one transaction's operations
/// with its one header (`DataTree.processTxn` gives every sub-transaction the `multi`'s zxid,
/// so every znode it creates has that czxid), and the server that answers
/// (`FinalRequestProcessor.processRequest`, 3.8) puts in the reply header the data tree's
/// last processed zxid read right after it applied this transaction, on the one thread that
/// applies committed transactions in order — this transaction's zxid. A reply that does carry
/// a stat (a container create; `create2` on servers with ZOOKEEPER-4026 fixed) must agree:
/// if it ever does not, the reply is not trusted and the member is treated like one whose
/// reply was lost (`ConnectionLoss`: its protected-name search reads the czxid from its stat).
fn multi_czxid(stat: &Stat, header_zxid: i64) -> ZkResult<i64> {
    if stat.is_invalid() || stat.czxid == header_zxid {
        return if header_zxid > 0 {
            Ok(header_zxid)
        } else {
            Err(ambiguous(zkc::Error::UnexpectedError(format!(
                "a multi reply with zxid {header_zxid}"
            ))))
        };
    }
    Err(ambiguous(zkc::Error::UnexpectedError(format!(
        "a multi reply's zxid {header_zxid} differs from a created znode's czxid {}",
        stat.czxid
    ))))
}

fn ambiguous(e: zkc::Error) -> zkc::Error {
    if is_transport_failure(&e) {
        return e;
    }
    tracing::warn!(error = %e, "a batch of writes failed without naming an operation: treated as a lost reply");
    zkc::Error::ConnectionLoss
}

/// The sequence number at the end of a sequential znode's path (ZooKeeper appends ten digits).
fn sequence_of(path: &str) -> ZkResult<i64> {
    path.len()
        .checked_sub(10)
        .and_then(|at| path.get(at..))
        .and_then(|digits| digits.parse().ok())
        .ok_or_else(|| zkc::Error::UnexpectedError(format!("no sequence number in {path:?}")))
}
