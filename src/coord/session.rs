//! ZooKeeper sessions held by the gateway, and the clock that decides when a disconnected
//! session must be presumed lost (G2).
//!
//! The gateway multiplexes every stream over a small pool of sessions (contract "Facts that shape the design": never one per
//! stream). Each pool slot runs a supervisor that connects, publishes the session, follows its
//! state and, once the session is over, opens a fresh one: nothing is carried over.
//!
//! # Why our own clock
//! `zookeeper-client` reports `Expired` only at about 1.4× the negotiated timeout after the
//! last reply, while the server may expire the session at 1×. So on `Disconnected` we compute
//! the latest moment the server may still consider us alive, conservatively: the client
//! declares a connection dead when nothing arrived for its connection timeout (checked every
//! tick), so the last server contact was no earlier than `disconnected_at - connection_timeout
//! - tick`. Streams are told `suspended{stop_within}` at once, and are ended `ABORTED` at
//! `last_contact + negotiated_timeout - margin` unless the same session is back.
//!
//! The library only notices a link on which it *receives* nothing, so each session also runs
//! a liveness probe (`follow_session`): a `sync`, which only the ensemble's quorum answers. An
//! unanswered probe suspends streams even while notifications keep arriving (a one-way
//! partition) or while a follower cut off from its quorum still answers reads and pings, and
//! the send time of the newest answered probe, less the quorum lag, is a second lower bound on
//! the quorum's last contact, the one that stays true when the gateway itself was frozen.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zkc;
use zookeeper_client::SessionState;

pub use super::batch::Urgency;
use super::clock::{SessionClock, Verdict};
use super::config::CoordConfig;
use super::error::{CoordError, Limit};
use super::link::through_link;
use super::link::{Link, LossReason};
use super::queue::{QueueHandle, QueueRegistry, SessionIo};
use super::timing::Timing;
use super::types::{Holder, QueueKind, QueueName};
use super::zk::{RequestCounter, Zk};
use crate::metrics as m;

/// One live ZooKeeper session and the queues (elections, locks) it serves.
#[derive(Debug)]
pub struct ZkSession {
    pub zk: Zk,
    pub timing: Timing,
    pub cfg: Arc<CoordConfig>,
    link: watch::Receiver<Link>,
    queues: QueueRegistry,
    /// The elections folder's watcher, for `ObserveMany` (see [`super::directory`]).
    directory: super::directory::DirectoryRegistry,
    /// Background releases (znode deletes) still running: a drain waits for them.
    pub(crate) releases: tokio_util::task::TaskTracker,
    /// Room for proclaimed bytes in flight on this session (`max_proclaim_bytes_in_flight`).
    proclaims: Arc<tokio::sync::Semaphore>,
    /// Room for unary calls' ZooKeeper work, per kind ([`UnaryWork`], G10).
    unary_reads: tokio::sync::Semaphore,
    unary_writes: tokio::sync::Semaphore,
    /// The G2 clock, fed by `follow_session` (the only one to judge with it) and read for
    /// heartbeats: one rule for both ([`SessionClock`]).
    clock: Mutex<SessionClock>,
    /// Whether the session's server is proven diverged from its quorum: then none of its
    /// queues grants ([`super::divergence`]).
    divergence: Arc<super::divergence::Divergence>,
}

impl ZkSession {
    pub fn link(&self) -> watch::Receiver<Link> {
        self.link.clone()
    }

    pub fn is_connected(&self) -> bool {
        matches!(*self.link.borrow(), Link::Connected)
    }

    pub fn session_id(&self) -> i64 {
        self.zk.session_id()
    }

    /// Whether the session's server is proven diverged from its quorum, so that none of its
    /// queues grants ([`super::divergence`]).
    pub fn diverged(&self) -> bool {
        self.divergence.diverged()
    }

    /// Whether the session is stranded on a diverged server ([`super::divergence`]): it serves
    /// no waiting member, no new member and no read until the proof ends.
    pub fn stranded(&self) -> bool {
        self.divergence.stranded()
    }

    /// Changes of [`ZkSession::stranded`].
    pub fn stranded_changes(&self) -> watch::Receiver<bool> {
        self.divergence.subscribe_stranded()
    }

    /// Whether the session may take new members and reads: connected, and not stranded.
    pub fn is_serving(&self) -> bool {
        self.is_connected() && !self.stranded()
    }

    /// Whether a heartbeat may be sent to this session's leaders now: the clock's one rule
    /// ([`SessionClock::may_heartbeat`]) — connected with a quorum-confirmed probe younger than
    /// [`Timing::probe_stale_after`], or suspended before the deadline with the streams already
    /// told. After a freeze the timers fire before the supervisor has judged the link, which
    /// then still reads `Connected` with a stale probe: no heartbeat.
    pub fn may_heartbeat(&self) -> bool {
        let told_suspended = match *self.link.borrow() {
            Link::Connected => false,
            Link::Suspended { .. } => true,
            Link::Lost(_) => return false,
        };
        self.clock
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .may_heartbeat(Instant::now(), told_suspended)
    }

    fn with_clock<R>(&self, f: impl FnOnce(&mut SessionClock) -> R) -> R {
        f(&mut self.clock.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// See [`QueueRegistry::watched_leader`].
    pub fn watched_leader(&self, election: &QueueName) -> Option<Holder> {
        self.queues.watched_leader(election)
    }

    /// Keeps `queue` (its watch and its view of the members) for [`QUEUE_LINGER`] after the last
    /// stream that used it, or until the session is over (a drain must not wait for it): a
    /// client that campaigns or acquires again at once — the common loop — then pays neither
    /// the watch nor the listing again, and its member is confirmed by its create reply.
    pub fn linger(&self, queue: Arc<QueueHandle>) {
        let mut link = self.link();
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(QUEUE_LINGER) => {}
                _ = link.wait_for(|l| matches!(l, Link::Lost(_))) => {}
            }
            drop(queue);
        });
    }

    /// The queue actor for `name` on this session, started on first use. One persistent watch
    /// per queue per session, shared by every local candidate and observer (G4).
    ///
    /// # Errors
    /// `LimitReached` when the gateway already serves `max_queues` distinct queues;
    /// ZooKeeper errors placing the watch or listing the queue.
    pub async fn queue(
        &self,
        kind: QueueKind,
        name: &QueueName,
    ) -> Result<Arc<QueueHandle>, CoordError> {
        let io = || SessionIo {
            zk: self.zk.clone(),
            session_id: self.session_id(),
            link: self.link(),
            permit_reads: self.cfg.member_reads(QueueKind::Lock),
            divergence: self.divergence.clone(),
        };
        self.queues
            .get_or_start(io, kind, name, self.queue_path(kind, name))
            .await
    }

    /// The session's view of which elections exist, started on first use (`ObserveMany`).
    ///
    /// # Errors
    /// ZooKeeper errors making the folder, placing its watch or listing it.
    pub async fn directory(&self) -> Result<Arc<super::directory::Directory>, CoordError> {
        self.directory
            .get_or_start(&self.zk, self.cfg.root_path(), self.link())
            .await
    }

    /// Deletes `path`, retrying through connection losses until it is gone or this session is
    /// over, with no time limit of its own (CURATOR-678: a release lost to a blip leaves a
    /// holder behind while the session lives on; and a session that ends takes its ephemeral
    /// znodes with it, so "until the session's end" is always bounded by the G2 deadline).
    /// Returns whether this call (or an earlier attempt of it) removed the node. `urgency`: a
    /// member's delete that may admit another member does not wait for the next write batch
    /// ([`Urgency`]).
    ///
    /// # Errors
    /// `SessionLost` when the session ended first (the znode, if ephemeral, is gone with it);
    /// ZooKeeper refusals other than `NoNode`.
    ///
    /// # Cancellation safety
    /// Not cancellation safe: run it in a task of its own (`releases`) when it must finish.
    pub async fn delete_until_gone(
        &self,
        path: &str,
        urgency: Urgency,
    ) -> Result<bool, CoordError> {
        let mut link = self.link();
        let mut sent = 0;
        let answer = through_link(&mut link, || {
            sent += 1;
            self.zk.delete(path, urgency)
        })
        .await?;
        match answer {
            Ok(()) => Ok(true),
            // After a lost reply, NoNode may mean our own first attempt succeeded.
            Err(zkc::Error::NoNode) => Ok(sent > 1),
            Err(e) => Err(e.into()),
        }
    }

    /// What a proclaim of `value_len` bytes takes of the session's in-flight budget.
    fn proclaim_charge(&self, value_len: usize) -> u32 {
        (value_len + 1024).min(self.cfg.max_proclaim_bytes_in_flight.max(1)) as u32
    }

    /// Room for a proclaim in the session's in-flight budget, waiting for it (in-stream
    /// proclaims: the stream loop keeps running meanwhile).
    pub(crate) async fn proclaim_room(
        &self,
        value_len: usize,
    ) -> tokio::sync::OwnedSemaphorePermit {
        self.proclaims
            .clone()
            .acquire_many_owned(self.proclaim_charge(value_len))
            .await
            .expect("the semaphore is never closed")
    }

    /// Room for a proclaim now, or `ResourceExhausted` (`Proclaim` by lease).
    pub(crate) fn try_proclaim_room(
        &self,
        value_len: usize,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, CoordError> {
        self.proclaims
            .clone()
            .try_acquire_many_owned(self.proclaim_charge(value_len))
            .map_err(|_| {
                Limit::ProclaimBytesInFlight(self.cfg.max_proclaim_bytes_in_flight).reject()
            })
    }

    /// Room for one unary call's ZooKeeper work of `kind` on this session, waited for in turn
    /// ([`UNARY_WORK_IN_FLIGHT`]). Held while the call reads or writes, never while it waits
    /// for anything else (a by-lease end waiting for the member's own gateway holds none).
    pub(crate) async fn unary_room(&self, kind: UnaryWork) -> tokio::sync::SemaphorePermit<'_> {
        let room = match kind {
            UnaryWork::Read => &self.unary_reads,
            UnaryWork::ByLease => &self.unary_writes,
        };
        room.acquire().await.expect("the semaphore is never closed")
    }

    /// `/<root>/<folder>/<queue>`.
    pub fn queue_path(&self, kind: QueueKind, name: &QueueName) -> String {
        format!("{}/{}/{}", self.cfg.root_path(), kind.folder(), name)
    }
}

/// Unary calls of one kind ([`UnaryWork`]) whose ZooKeeper work is on one session at once; the
/// rest wait in the gateway, in turn, bounded by `--max-unary-in-flight` (G10).
///
/// The session answers its requests in order, so every request a unary call has in flight is
/// one more that a member's create or delete, a queue's listing or a heartbeat's probe can
/// find ahead of it. Without this bound a flood of reads reached the session as fast as
/// clients sent them: with 2,200 reads in flight over 8 connections, an unrelated lock on the
/// same gateway was acquired twice in 5 s, after 1.0 s, and released by lease in 3.8 s; with
/// it, 115–117 times, a median of 13–14 ms, and released by lease in a median of 38–42 ms
/// (`isolation::a_read_flood_meets_the_limit_and_leaves_holds_on_time`). A hold's request
/// now finds at most this many calls' requests (a `sync` and a read or two each) ahead of it.
pub const UNARY_WORK_IN_FLIGHT: usize = 8;

/// What a unary call does on the session, so a flood of one kind never delays or refuses the
/// other: a client's by-lease resign or release (which ends a hold and lets the next one in)
/// never waits behind a flood of `Validate`s, here or in `--max-unary-in-flight`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryWork {
    /// `Leader`, `Candidates`, `Holders`, `Validate`.
    Read,
    /// `Resign`, `Release` and `Proclaim` by lease.
    ByLease,
}

impl std::fmt::Display for UnaryWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            UnaryWork::Read => "read",
            UnaryWork::ByLease => "by-lease",
        })
    }
}

/// How long an unused queue actor lingers (see [`ZkSession::linger`]).
const QUEUE_LINGER: Duration = Duration::from_secs(2);

/// A slot of the session pool: the current session, if any.
pub type Slot = watch::Receiver<Option<Arc<ZkSession>>>;

/// Runs one pool slot until `shutdown`: connect, serve, and after a loss connect afresh.
pub async fn supervise_slot(
    cfg: Arc<CoordConfig>,
    counter: Arc<RequestCounter>,
    live_queues: Arc<AtomicUsize>,
    slot: watch::Sender<Option<Arc<ZkSession>>>,
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    // What the next connection asks for: the configured timeout, or the granted one after a
    // grant too short for the library's connection timeout (see `Timing::needs_reconnect`).
    let mut ask_next: Option<Duration> = None;
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        let ask = ask_next.take().unwrap_or(cfg.session_timeout);
        let client = tokio::select! {
            _ = shutdown.cancelled() => return,
            c = connect(&cfg, ask) => c,
        };
        let client = match client {
            Ok(c) => c,
            Err(e) => {
                // How the link was tried: a plaintext client on a secureClientPort (or TLS on a
                // plain port) times out, a refused SASL login closes the connection.
                tracing::warn!(
                    error = %e,
                    zk = %cfg.zk,
                    tls = cfg.zk_tls.is_some(),
                    sasl_user = cfg.zk_sasl.as_ref().map(|s| s.user.as_str()),
                    "cannot connect to ZooKeeper; retrying"
                );
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        backoff = Duration::from_millis(100);
        let timing = Timing::derive(&cfg, ask, client.session_timeout());
        if timing.needs_reconnect() {
            // No stream has used this session yet: closing it costs nothing, and asking again
            // for what was granted makes the library's connection timeout a fifth of it.
            tracing::error!(
                session = format_args!("{:#x}", client.session_id().0),
                asked = ?ask,
                granted = ?timing.negotiated,
                library_connection_timeout = ?timing.connection_timeout,
                "ZooKeeper granted a shorter session timeout than asked (its maxSessionTimeout): reconnecting asking for the granted timeout, so that every timing bound derives from it (G2); raise the server's maxSessionTimeout or lower --session-timeout to avoid this"
            );
            drop(client);
            ask_next = Some(timing.negotiated);
            continue;
        }
        let acls = super::zk::ZkIdentity::of(&cfg).acls();
        let (link_tx, link_rx) = watch::channel(Link::Connected);
        let mut states = client.state_watcher();
        let session = Arc::new(ZkSession {
            zk: Zk::new(client, acls, counter.clone())
                .with_batching(cfg.zk_batch, cfg.zk_max_packet),
            timing,
            cfg: cfg.clone(),
            link: link_rx,
            queues: QueueRegistry::new(live_queues.clone(), cfg.max_queues),
            directory: Default::default(),
            releases: tokio_util::task::TaskTracker::new(),
            proclaims: Arc::new(tokio::sync::Semaphore::new(
                cfg.max_proclaim_bytes_in_flight.max(1),
            )),
            unary_reads: tokio::sync::Semaphore::new(UNARY_WORK_IN_FLIGHT),
            unary_writes: tokio::sync::Semaphore::new(UNARY_WORK_IN_FLIGHT),
            clock: Mutex::new(SessionClock::new(timing, Instant::now())),
            divergence: Arc::new(super::divergence::Divergence::new(cfg.zk_stranded_after)),
        });
        tokio::spawn(super::divergence::watch_healing(
            session.zk.clone(),
            session.link(),
            session.divergence.clone(),
            cfg.zk_servers(),
        ));
        tracing::info!(
            session = format_args!("{:#x}", session.session_id()),
            negotiated_timeout = ?timing.negotiated,
            silence_limit = ?timing.silence_limit,
            quorum_lag = ?timing.quorum_lag,
            "ZooKeeper session established"
        );
        for clamp in timing.clamps() {
            tracing::error!(
                requested_timeout = ?cfg.session_timeout,
                negotiated_timeout = ?timing.negotiated,
                "{clamp} (G2, G3b)"
            );
        }
        let mut connected = m::SessionShare::connected();
        connected.set(true);
        slot.send_replace(Some(session.clone()));

        let reason = follow_session(
            &session,
            &mut states,
            &link_tx,
            &timing,
            &shutdown,
            &mut connected,
        )
        .await;
        slot.send_replace(None);
        connected.set(false);
        if reason != LossReason::Draining {
            m::zk_session_lost();
            tracing::warn!(
                session = format_args!("{:#x}", session.session_id()),
                ?reason,
                "ZooKeeper session lost"
            );
        }
        link_tx.send_replace(Link::Lost(reason));
        if reason == LossReason::Draining {
            // Streams end UNAVAILABLE and release their znodes; wait for those deletes so the
            // znodes vanish at once (G7), then close the session for every handle.
            session.releases.close();
            let _ = tokio::time::timeout(Duration::from_secs(5), session.releases.wait()).await;
            session.zk.give_up();
            return;
        }
        // Nobody may keep it open now: every stream on it was ended.
        session.zk.give_up();
        if reason == LossReason::PresumedExpired {
            let info = session.zk.client().session().clone();
            tokio::spawn(close_abandoned(cfg.clone(), info, timing, shutdown.clone()));
        }
        drop(session);
    }
}

/// How long the gateway keeps trying to close a session it gave up on, in session timeouts.
/// ZooKeeper renews every session for a full timeout at each leader change, so under a barrage
/// of elections a session can outlive its owner's interest for several timeouts.
const CLOSE_ABANDONED_FOR: u32 = 10;

/// The longest pause between attempts to re-attach to an abandoned session: short, because
/// every moment it stays open is a moment its members block their queues.
const REATTACH_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// Closes a session the gateway gave up on (its clock said "presumed expired") as soon as
/// ZooKeeper answers again, so that its members leave their queues then rather than whenever
/// ZooKeeper gets round to expiring it.
///
/// Why it is needed: the client library closes a given-up session itself (`Zk::give_up` closed
/// it for every handle) when it reconnects within 7/5 T of last hearing the server, but its
/// reconnect backoff can keep it away for seconds after ZooKeeper is back, and past 7/5 T it
/// gives up on its own side while ZooKeeper may still hold the session. A ZooKeeper leader
/// election (or a standalone server's restart) renews every session it knows for a full T from
/// the moment it serves again, so the members of a session given up during an election longer
/// than `stop_within` used to head their queues for election + T — the "dense barrage" stalls
/// of the soak (docs/faults.md).
///
/// Why it is safe (and why [`Zk::give_up`] is, for the same verdict): closing does exactly what
/// expiry does, and it happens only after the gateway's own loss verdict: every stream on the
/// session was told `suspended` with a `stop_within` that has run out and was then ended ABORTED
/// (G2), and a holder that could not hear its gateway had its last heartbeat early enough for its
/// `silence_limit` to run out by that same deadline (G3b, [`Timing::silence_bound`]). Nobody can
/// act on the session's holds any more, so nobody needs its znodes to stay.
async fn close_abandoned(
    cfg: Arc<CoordConfig>,
    session: zkc::SessionInfo,
    timing: Timing,
    shutdown: CancellationToken,
) {
    let id = format_args!("{:#x}", session.id().0).to_string();
    let until = Instant::now() + timing.negotiated * CLOSE_ABANDONED_FOR;
    // Whoever reaches ZooKeeper first closes the session: the library when it reconnects (it
    // sends `closeSession` then, since `Zk::give_up`), or the client re-attached here, as soon
    // as ZooKeeper answers rather than after the library's reconnect backoff (seconds) or its
    // own deadline (7/5 T). Two closers are harmless: the second is refused as expired. The
    // library's own state is not trusted to say which happened (it reads `Closed` after some
    // failures to reconnect too): only ZooKeeper refusing the session is.
    let mut backoff = Duration::from_millis(100);
    while Instant::now() < until {
        let attached = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = super::zk::reattach_session(&cfg, session.clone(), timing.negotiated, timing.negotiated / 5) => r,
        };
        match attached {
            Ok(client) => {
                let mut states = client.state_watcher();
                // Dropping the only client sends `closeSession`; its state says when it is done.
                drop(client);
                let closed = tokio::time::timeout(timing.negotiated, async {
                    while !states.changed().await.is_terminated() {}
                })
                .await
                .is_ok();
                tracing::info!(
                    session = %id,
                    closed,
                    "abandoned ZooKeeper session re-attached and closed, so its members leave their queues now"
                );
                return;
            }
            Err(zkc::Error::SessionExpired) => {
                tracing::info!(session = %id, "abandoned ZooKeeper session closed or expired");
                return;
            }
            Err(e) => {
                tracing::debug!(session = %id, error = %e, "cannot re-attach the abandoned ZooKeeper session yet");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(REATTACH_BACKOFF_MAX);
            }
        }
    }
    tracing::warn!(session = %id, "could not close the abandoned ZooKeeper session; ZooKeeper will expire it");
}

async fn connect(cfg: &CoordConfig, ask: Duration) -> Result<zkc::Client, zkc::Error> {
    // Bound the initial connect so a dead ensemble does not hang the supervisor forever.
    match tokio::time::timeout(
        cfg.session_timeout.max(Duration::from_secs(2)),
        super::zk::open_session(cfg, ask, ask / 5),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => Err(zkc::Error::Timeout),
    }
}

/// Follows one session until it is over, publishing `Link` changes, and returns why it ended.
///
/// Two signals decide whether the link is usable:
/// - the client library's state (`Disconnected` when nothing arrived for the connection
///   timeout, or the socket closed);
/// - our own liveness probe: one `sync` every [`Timing::probe_interval`], at most one
///   in flight. The library only notices a link on which it *receives* nothing; a one-way
///   partition (ZooKeeper's notifications still arrive, our requests and pings do not) keeps
///   it "connected" until the server has already expired the session, and so does a follower
///   cut off from its quorum, which answers reads and pings by itself for up to `syncLimit ×
///   tickTime`. A `sync` is answered only through the ensemble's leader, so an unanswered
///   probe notices both within [`Timing::probe_stale_after`].
///
/// Both give a lower bound on when the quorum last heard from us, and the abort deadline is
/// the earliest bound minus the quorum lag plus the negotiated timeout minus the margin
/// ([`Timing::quorum_deadline`]). The probe's bound (the
/// send time of the newest answered probe) also stays right when the gateway itself was
/// frozen: after SIGSTOP/SIGCONT the library reports the closed socket as a fresh disconnect,
/// but the last answered probe is from before the freeze, so the deadline has already passed
/// and streams end at once instead of being handed a `stop_within` the server never granted.
async fn follow_session(
    session: &ZkSession,
    states: &mut zkc::StateWatcher,
    link: &watch::Sender<Link>,
    timing: &Timing,
    shutdown: &CancellationToken,
    connected: &mut m::SessionShare,
) -> LossReason {
    type ProbeFuture =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), zkc::Error>> + Send>>;
    let zk = &session.zk;
    let mut probe: Option<(Instant, ProbeFuture)> = None;
    let mut disconnected = false;
    let mut published = Verdict::Connected;
    let mut tick = tokio::time::interval(timing.probe_interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let wake = session.with_clock(|c| c.next_change(Instant::now()));
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return LossReason::Draining,
            // The clock's verdict changes by time alone (a probe going stale, a deadline).
            _ = async { tokio::time::sleep_until(wake.expect("guarded")).await }, if wake.is_some() => {}
            s = states.changed() => match s {
                SessionState::Disconnected => {
                    disconnected = true;
                    session.with_clock(|c| c.disconnected(Instant::now()));
                    // Replies to a probe sent on the dead connection will never come.
                    probe = None;
                }
                SessionState::SyncConnected | SessionState::ConnectedReadOnly => {
                    disconnected = false;
                    session.with_clock(SessionClock::reconnected);
                    // The same session is back; a fresh probe proves it to the quorum.
                    let sent = Instant::now();
                    probe = Some((sent, Box::pin(zk.liveness_probe())));
                }
                SessionState::Expired => session.with_clock(|c| c.end(LossReason::Expired)),
                SessionState::AuthFailed | SessionState::Closed => {
                    session.with_clock(|c| c.end(LossReason::Closed));
                }
            },
            r = async { probe.as_mut().expect("guarded").1.as_mut().await }, if probe.is_some() => {
                let (sent, _) = probe.take().expect("guarded");
                match r {
                    // A refusal is an answer too (say, a chroot whose root is gone): the server
                    // heard the session. Lost requests, an expired session or a closed client
                    // are not.
                    Ok(()) | Err(zkc::Error::NoNode | zkc::Error::NoAuth) => {
                        session.with_clock(|c| c.answered(sent));
                        // An answer that was long in coming (ZooKeeper was frozen or slow):
                        // ask again at once rather than at the next tick, so fresh evidence
                        // follows before this answer goes stale.
                        if !disconnected && sent.elapsed() > timing.probe_interval() {
                            probe = Some((Instant::now(), Box::pin(zk.liveness_probe())));
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "liveness probe failed"),
                }
            }
            _ = tick.tick() => {
                if !disconnected && probe.is_none() {
                    probe = Some((Instant::now(), Box::pin(zk.liveness_probe())));
                }
            }
        }

        // What the evidence says now, published when it changes.
        let now = Instant::now();
        let (verdict, last_answered) = session.with_clock(|c| (c.judge(now), c.last_answered()));
        if verdict == published {
            continue;
        }
        match verdict {
            Verdict::Lost(reason) => return reason,
            Verdict::Connected => {
                tracing::info!("ZooKeeper session resumed");
                connected.set(true);
                link.send_replace(Link::Connected);
            }
            Verdict::Suspended { deadline } => {
                if published == Verdict::Connected {
                    connected.set(false);
                    let stop_within = deadline.saturating_duration_since(now);
                    if disconnected {
                        tracing::warn!(?stop_within, "ZooKeeper disconnected; streams suspended");
                    } else {
                        tracing::warn!(
                            unanswered_for = ?now.saturating_duration_since(last_answered),
                            ?stop_within,
                            "ZooKeeper does not answer although the connection looks up; streams suspended"
                        );
                    }
                }
                link.send_replace(Link::Suspended { deadline });
            }
        }
        published = verdict;
    }
}
