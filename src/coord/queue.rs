//! The per-queue actor: one per election (or lock) per ZooKeeper session of this gateway.
//!
//! It holds the gateway's only watch on the queue — a persistent recursive watch on the queue's
//! znode — and keeps the ordered member list in memory. Every local candidate and observer is
//! served from here, so a leader change costs one event plus O(1) requests per gateway, however
//! many candidates or observers it has (G4), and only the successor's stream is woken.
//!
//! After a reconnect the actor re-lists the queue before trusting its view again, because
//! persistent watches miss events while disconnected (ZOOKEEPER-4698).
//!
//! # Who holds
//! Elections and locks share this machinery. [`HolderScan`] states the one rule that decides
//! which members hold (lead, own a permit, share a read lock); the actor confirms each local
//! member the moment the rule admits it and signals only that member, so a change wakes
//! exactly the members that now hold (G4).
//! Elections additionally keep the observers' view of the head (`QueueView`).
//!
//! # Confirmation costs no write
//! "Elected" and "acquired" mean confirmed: the gateway has seen its own znode present and
//! owned by its current session while the rule admits it. ZooKeeper answers one session's
//! requests and sends its watch events in one order, so the view is exactly the queue as of
//! the newest reply or event. A member that holds the moment it registers is confirmed by its
//! own create reply (the view then includes every member made before it); one admitted later
//! by a read of its znode on the same session (present, and ours). Neither writes, so an
//! acquisition costs ZooKeeper the create and the delete — the raw recipe's two log writes —
//! and no other gateway hears of the confirmation. Nothing is confirmed while the link is
//! suspended: a follower cut off from its quorum still answers reads (G2).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use zookeeper_client as zkc;
use zookeeper_client::{EventType, SessionState, WatchedEvent};

use super::record::{ms_to_time, NodeRecord};
use super::session::{Link, QueueSlot, ZkSession};
use super::types::{FencingToken, LeaderInfo, MemberName, QueueKind, QueueName};

/// What observers see of a queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueView {
    /// False until the actor has listed the queue once.
    pub synced: bool,
    /// The confirmed leader; `None` while vacant (or while a new head awaits confirmation).
    pub leader: Option<LeaderInfo>,
}

/// What the actor tells one local member.
#[derive(Debug)]
pub enum MemberSignal {
    /// Confirmed holder (ownership checked): the head of an election, or a lock holder.
    /// `failover` is, for elections, the time from the predecessor's disappearance, when this
    /// gateway saw it.
    Elected {
        leader: LeaderInfo,
        failover: Option<Duration>,
    },
    /// The leader's value changed.
    Proclaimed(LeaderInfo),
    /// The znode was deleted by someone else (a `Resign` by lease on any gateway).
    Gone,
}

/// A member's place in the queue when it registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enlisted {
    /// Members ahead of it.
    pub ahead: u32,
    /// Whether it already holds by the actor's current view (it is confirmed and signalled
    /// right after). A try-lock succeeds exactly when this is true.
    pub holds: bool,
}

/// Why a member could not be registered. Its znode is left for the caller to delete.
#[derive(Debug)]
pub enum Refusal {
    /// The znode is already gone.
    Gone,
    /// A lock member ahead agreed to `recorded` permits, not to this member's count.
    PermitMismatch { recorded: u32 },
    /// Reading the members ahead (to compare permits) failed.
    Zk(zkc::Error),
}

/// A member znode this session has just created (or found again after a lost create reply),
/// ready to register with its queue.
#[derive(Debug, Clone)]
pub struct Created {
    pub member: MemberName,
    pub record: NodeRecord,
    /// The znode's creation zxid — its fencing token — when the reply carried it.
    pub czxid: Option<i64>,
}

enum Command {
    Register {
        member: MemberName,
        record: NodeRecord,
        czxid: Option<i64>,
        signals: mpsc::UnboundedSender<MemberSignal>,
        reply: oneshot::Sender<Result<Enlisted, Refusal>>,
    },
    Unregister {
        node: String,
    },
}

/// A handle on a running queue actor; the actor stops when the last handle is dropped.
#[derive(Debug)]
pub struct QueueHandle {
    pub kind: QueueKind,
    pub name: QueueName,
    pub path: String,
    cmd: mpsc::UnboundedSender<Command>,
    view: watch::Receiver<QueueView>,
    /// The gateway's `max_queues` place, given back when the last user drops the handle.
    _slot: QueueSlot,
    /// Members in the actor's view, kept by the actor (see [`QueueHandle::check_room`]).
    size: Arc<AtomicUsize>,
    /// Whether the queue's znode exists by the actor's view, so a member of a fresh name is
    /// created together with its queue in one round trip (see `create_member`).
    present: Arc<AtomicBool>,
}

impl QueueHandle {
    /// Places the queue's watch and lists it (one round trip), then runs the actor in the
    /// background.
    ///
    /// # Errors
    /// ZooKeeper errors from placing the watch or listing the queue.
    pub async fn start(
        session: Arc<ZkSession>,
        kind: QueueKind,
        name: QueueName,
        slot: QueueSlot,
    ) -> Result<Arc<Self>, zkc::Error> {
        let path = session.queue_path(kind, &name);
        let (watcher, listing) = session.zk.watch_and_list(&path).await;
        let watcher = watcher?;
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (view_tx, view_rx) = watch::channel(QueueView::default());
        let size = Arc::new(AtomicUsize::new(0));
        let present = Arc::new(AtomicBool::new(false));
        let mut actor = Actor {
            link: session.link(),
            link_open: true,
            listed: false,
            present: present.clone(),
            session,
            path: path.clone(),
            name: name.clone(),
            kind,
            watcher,
            watching: true,
            members: BTreeMap::new(),
            permits: HashMap::new(),
            local: HashMap::new(),
            head: None,
            head_gone_at: None,
            view_tx,
            cmd_rx,
            size: size.clone(),
        };
        actor.apply_listing(listing)?;
        tokio::spawn(actor.run());
        Ok(Arc::new(Self {
            kind,
            name,
            path,
            cmd: cmd_tx,
            view: view_rx,
            _slot: slot,
            size,
            present,
        }))
    }

    /// Whether the queue's znode exists, as far as the actor knows (a hint: acting on a stale
    /// one costs a failed request, never correctness).
    pub fn probably_exists(&self) -> bool {
        self.present.load(Ordering::Relaxed)
    }

    /// Refuses a new member once the queue has `limit` members (by this gateway's view), the
    /// most that one `getChildren` reply lists within the packet budget (G10; see
    /// [`paging`](super::paging)).
    ///
    /// # Errors
    /// `ResourceExhausted` naming the limit.
    pub fn check_room(&self, limit: usize) -> Result<(), super::CoordError> {
        let size = self.size.load(Ordering::Relaxed);
        if size >= limit {
            let what = match self.kind {
                QueueKind::Election => "election",
                QueueKind::Lock => "lock",
            };
            crate::metrics::limit_rejected("queue_members");
            return Err(super::CoordError::ResourceExhausted(format!(
                "{what} {:?} has {size} members, the most a queue may have \
                 ({limit}, from --zk-max-packet: one ZooKeeper listing must hold them all)",
                self.name.as_str()
            )));
        }
        Ok(())
    }

    pub fn is_closed(&self) -> bool {
        self.cmd.is_closed()
    }

    pub fn view(&self) -> watch::Receiver<QueueView> {
        self.view.clone()
    }

    /// Registers a freshly created local member; returns how many members are ahead of it, or
    /// `None` if its znode is already gone.
    pub async fn register(
        &self,
        created: Created,
        signals: mpsc::UnboundedSender<MemberSignal>,
    ) -> Option<u32> {
        self.enlist(created, signals).await.ok().map(|e| e.ahead)
    }

    /// Registers a freshly created local member. In a lock queue the member is refused when a
    /// member ahead agreed to a different permit count (`record.permits`, at least 1), so all
    /// members alive at the same time agree on it.
    ///
    /// # Errors
    /// [`Refusal`]; the caller then deletes the znode.
    pub async fn enlist(
        &self,
        created: Created,
        signals: mpsc::UnboundedSender<MemberSignal>,
    ) -> Result<Enlisted, Refusal> {
        let (reply, rx) = oneshot::channel();
        self.cmd
            .send(Command::Register {
                member: created.member,
                record: created.record,
                czxid: created.czxid,
                signals,
                reply,
            })
            .map_err(|_| Refusal::Gone)?;
        rx.await.unwrap_or(Err(Refusal::Gone))
    }

    pub fn unregister(&self, node: &str) {
        let _ = self.cmd.send(Command::Unregister {
            node: node.to_owned(),
        });
    }
}

struct Local {
    sequence: i64,
    record: NodeRecord,
    signals: mpsc::UnboundedSender<MemberSignal>,
    confirmed: bool,
    /// From the create reply, until the first confirmation looks: a member that holds the
    /// moment it registers is confirmed by that reply alone.
    czxid: Option<i64>,
}

struct Head {
    sequence: i64,
    /// Known data (None until fetched).
    leader: Option<LeaderInfo>,
    fetched: bool,
    /// mzxid of the last write we know the content of, to skip refetching it.
    known_mzxid: i64,
    /// When this gateway saw it become the head; `None` for a head it found in office when it
    /// first listed the queue (then its join time is the best lower bound: see `since`).
    seen_at: Option<std::time::SystemTime>,
}

struct Actor {
    session: Arc<ZkSession>,
    /// The session's link: confirmations wait while it is suspended, and resume with it.
    link: watch::Receiver<Link>,
    link_open: bool,
    /// The queue has been listed and its head read once (heads found before have no `seen_at`).
    listed: bool,
    present: Arc<AtomicBool>,
    path: String,
    name: QueueName,
    kind: QueueKind,
    watcher: zkc::PersistentWatcher,
    watching: bool,
    /// sequence → node name
    members: BTreeMap<i64, String>,
    /// Lock queues: sequence → the permit count that member agreed to, as far as read. A
    /// member's permits never change, so entries stay valid until it leaves.
    permits: HashMap<i64, u32>,
    local: HashMap<String, Local>,
    head: Option<Head>,
    head_gone_at: Option<Instant>,
    view_tx: watch::Sender<QueueView>,
    cmd_rx: mpsc::UnboundedReceiver<Command>,
    /// `members.len()`, published for [`QueueHandle::check_room`].
    size: Arc<AtomicUsize>,
}

enum Step {
    Continue,
    Stop,
}

/// The outcome of confirming a holder (see `Actor::claim`).
enum Claim {
    /// Ours, present, and now marked as holding.
    Confirmed(LeaderInfo),
    /// Gone, or not ours: forgotten; whatever follows it may now hold.
    Vanished,
    /// Not now (the link is suspended, or the read failed): retried after the next event or
    /// link change (a reconnect re-lists).
    Retry,
}

/// The mode letter of a member's node name (`c`, `w` or `r`).
fn mode_of(node: &str) -> char {
    node.chars().next().unwrap_or('w')
}

/// The one rule that decides who holds, applied to a queue in sequence order.
///
/// A writer (`w`, and an election candidate `c`) holds when fewer than `permits` members are
/// ahead of it and none of them is a reader; a reader (`r`) holds when no writer is ahead of
/// it. So an election (one permit, no readers) is led by its head, a mutex or an N-permit
/// semaphore is held by its first N members, and a read-write lock (one permit) admits a run
/// of readers at the head or a single writer — in FIFO order, so a writer queued behind
/// readers goes before every later reader.
///
/// Each condition can only turn true while a member waits (members ahead leave, newcomers
/// queue behind), never back: a member that holds keeps holding until it leaves. That is why
/// a gateway whose view lags can only be late, never wrong.
#[derive(Debug, Default, Clone)]
pub struct HolderScan {
    ahead: usize,
    writers: usize,
    readers: usize,
}

impl HolderScan {
    /// Whether a member of `mode` would hold with the members pushed so far ahead of it.
    /// `permits` of 0 counts as 1.
    pub fn admits(&self, mode: char, permits: u32) -> bool {
        if mode == 'r' {
            self.writers == 0
        } else {
            self.readers == 0 && self.ahead < permits.max(1) as usize
        }
    }

    /// Counts a member as ahead of the ones still to come.
    pub fn push(&mut self, mode: char) {
        self.ahead += 1;
        if mode == 'r' {
            self.readers += 1;
        } else {
            self.writers += 1;
        }
    }

    /// True when no later member can hold with at most `max_permits` permits.
    pub fn exhausted(&self, max_permits: u32) -> bool {
        self.writers > 0 && (self.readers > 0 || self.ahead >= max_permits.max(1) as usize)
    }
}

impl Actor {
    async fn run(mut self) {
        // Read the head once before anything happens, so observers get their first state.
        self.reconcile().await;
        loop {
            let step = tokio::select! {
                ev = self.watcher.changed(), if self.watching => self.on_event(ev).await,
                // A suspended link that comes back without a reconnect (a stale probe answered
                // again) triggers no event: confirmations that waited for it run now.
                r = self.link.changed(), if self.link_open => {
                    self.link_open = r.is_ok();
                    Step::Continue
                }
                cmd = self.cmd_rx.recv() => match cmd {
                    None => Step::Stop,
                    Some(cmd) => {
                        // Apply every event already received first: our own znode's creation
                        // event precedes the create reply, so the view then includes it.
                        let mut step = self.drain_events().await;
                        if matches!(step, Step::Continue) {
                            step = self.on_command(cmd).await;
                        }
                        step
                    }
                },
            };
            if matches!(step, Step::Stop) {
                break;
            }
            self.reconcile().await;
        }
        // Whatever is still local hears nothing more; its stream follows the session link.
        self.view_tx.send_modify(|v| v.leader = None);
    }

    async fn drain_events(&mut self) -> Step {
        while self.watching {
            match self.watcher.changed().now_or_never() {
                Some(ev) => {
                    if let Step::Stop = self.on_event(ev).await {
                        return Step::Stop;
                    }
                }
                None => break,
            }
        }
        Step::Continue
    }

    fn child_of<'a>(&self, path: &'a str) -> Option<&'a str> {
        path.strip_prefix(self.path.as_str())?
            .strip_prefix('/')
            .filter(|c| !c.contains('/'))
    }

    async fn on_event(&mut self, ev: WatchedEvent) -> Step {
        match ev.event_type {
            EventType::Session => match ev.session_state {
                SessionState::SyncConnected | SessionState::ConnectedReadOnly => {
                    // zookeeper-client 0.11.2 restores watches after a reconnect with
                    // SetWatches, not SetWatches2 (`index = index.max(index)` in
                    // session/watch.rs), so the server forgets persistent watches: place ours
                    // again before re-reading. The old watcher is dropped after the new one
                    // exists, so no RemoveWatches reaches the server.
                    match self.session.zk.watch_queue(&self.path).await {
                        Ok(w) => self.watcher = w,
                        Err(e) => {
                            tracing::warn!(queue = %self.name, error = %e, "re-placing the queue watch failed")
                        }
                    }
                    if let Err(e) = self.resync().await {
                        tracing::warn!(queue = %self.name, error = %e, "re-reading the queue after reconnect failed");
                    }
                }
                SessionState::Disconnected => {}
                // Terminal: the watcher must not be polled again; streams end via the link.
                _ => {
                    self.watching = false;
                    return Step::Stop;
                }
            },
            EventType::NodeCreated if ev.path == self.path => {
                self.present.store(true, Ordering::Relaxed);
            }
            EventType::NodeDeleted if ev.path == self.path => {
                self.present.store(false, Ordering::Relaxed);
            }
            EventType::NodeCreated => {
                if let Some(m) = self.child_of(&ev.path).and_then(MemberName::parse) {
                    self.members.insert(m.sequence, m.node_name());
                }
            }
            EventType::NodeDeleted => {
                if let Some(m) = self.child_of(&ev.path).and_then(MemberName::parse) {
                    self.forget(m.sequence, &m.node_name());
                }
            }
            EventType::NodeDataChanged => {
                if let Some(m) = self.child_of(&ev.path).and_then(MemberName::parse) {
                    if let Some(head) = self.head.as_mut().filter(|h| h.sequence == m.sequence) {
                        if ev.zxid != head.known_mzxid {
                            head.fetched = false;
                        }
                    }
                }
            }
            EventType::NodeChildrenChanged => {}
        }
        Step::Continue
    }

    /// A member's znode is gone: drop it from the view and tell its local stream, if any.
    fn forget(&mut self, sequence: i64, node: &str) {
        self.members.remove(&sequence);
        self.permits.remove(&sequence);
        if self.head.as_ref().is_some_and(|h| h.sequence == sequence) {
            self.head_gone_at = Some(Instant::now());
        }
        if let Some(local) = self.local.remove(node) {
            let _ = local.signals.send(MemberSignal::Gone);
        }
    }

    async fn on_command(&mut self, cmd: Command) -> Step {
        match cmd {
            Command::Register {
                member,
                record,
                czxid,
                signals,
                reply,
            } => {
                let node = member.node_name();
                if !self.members.contains_key(&member.sequence) {
                    // Not seen by the watch: confirm with ZooKeeper rather than guess.
                    match self
                        .session
                        .zk
                        .get_data(&format!("{}/{}", self.path, node))
                        .await
                    {
                        Ok(_) => {
                            self.members.insert(member.sequence, node.clone());
                            // Events that arrived meanwhile (members created before ours among
                            // them) must be in the view before it decides anything.
                            if let Step::Stop = self.drain_events().await {
                                let _ = reply.send(Err(Refusal::Gone));
                                return Step::Stop;
                            }
                        }
                        Err(_) => {
                            let _ = reply.send(Err(Refusal::Gone));
                            return Step::Continue;
                        }
                    }
                }
                let permits = record.permits.max(1);
                if self.kind == QueueKind::Lock {
                    if let Err(refusal) = self.check_permits(member.sequence, permits).await {
                        let _ = reply.send(Err(refusal));
                        return Step::Continue;
                    }
                    self.permits.insert(member.sequence, permits);
                }
                let ahead = self.members.range(..member.sequence).count() as u32;
                let holds = self.would_hold(member.sequence, member.mode, permits);
                self.local.insert(
                    node,
                    Local {
                        sequence: member.sequence,
                        record,
                        signals,
                        confirmed: false,
                        // Its create reply confirms it only if it holds right now; later it
                        // takes a read (see the module docs).
                        czxid: czxid.filter(|_| holds),
                    },
                );
                let _ = reply.send(Ok(Enlisted { ahead, holds }));
            }
            Command::Unregister { node } => {
                self.local.remove(&node);
            }
        }
        Step::Continue
    }

    /// Lock queues: refuses a member whose permit count differs from that of any member ahead
    /// of it. Checking every member ahead (not only the head) makes any two members alive at
    /// the same time agree: the younger one saw the older one when it joined. Permits of members
    /// not seen before are read in one round trip; local and known members cost nothing.
    async fn check_permits(&mut self, sequence: i64, ours: u32) -> Result<(), Refusal> {
        let unknown: Vec<(i64, String)> = self
            .members
            .range(..sequence)
            .filter(|(s, _)| !self.permits.contains_key(s))
            .map(|(s, n)| (*s, format!("{}/{}", self.path, n)))
            .collect();
        if !unknown.is_empty() {
            let paths: Vec<String> = unknown.iter().map(|(_, p)| p.clone()).collect();
            let data = self
                .session
                .zk
                .get_many(&paths, self.session.cfg.member_reads(QueueKind::Lock))
                .await
                .map_err(Refusal::Zk)?;
            for ((seq, _), found) in unknown.into_iter().zip(data) {
                // Missing: deleted meanwhile; its deletion event follows.
                if let Some((bytes, _)) = found {
                    self.permits
                        .insert(seq, NodeRecord::decode_lossy(&bytes).permits.max(1));
                }
            }
        }
        let mismatch = self
            .members
            .range(..sequence)
            .find_map(|(s, _)| self.permits.get(s).copied().filter(|&p| p != ours));
        match mismatch {
            Some(recorded) => Err(Refusal::PermitMismatch { recorded }),
            None => Ok(()),
        }
    }

    /// Whether the member `sequence` holds by the current view ([`HolderScan`]).
    fn would_hold(&self, sequence: i64, mode: char, permits: u32) -> bool {
        let mut scan = HolderScan::default();
        for node in self.members.range(..sequence).map(|(_, n)| n) {
            scan.push(mode_of(node));
            if scan.exhausted(permits) {
                return false;
            }
        }
        scan.admits(mode, permits)
    }

    /// Re-lists the queue and rebuilds the view from ZooKeeper.
    async fn resync(&mut self) -> Result<(), zkc::Error> {
        let listing = self.session.zk.list_children(&self.path).await;
        self.apply_listing(listing)
    }

    /// Rebuilds the view from a listing of the queue.
    fn apply_listing(
        &mut self,
        listing: Result<Vec<String>, zkc::Error>,
    ) -> Result<(), zkc::Error> {
        let children = match listing {
            Ok(c) => {
                self.present.store(true, Ordering::Relaxed);
                c
            }
            Err(zkc::Error::NoNode) => {
                self.present.store(false, Ordering::Relaxed);
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        self.members = children
            .iter()
            .filter_map(|c| MemberName::parse(c))
            .map(|m| (m.sequence, m.node_name()))
            .collect();
        let gone: Vec<(i64, String)> = self
            .local
            .iter()
            .filter(|(_, l)| !self.members.contains_key(&l.sequence))
            .map(|(n, l)| (l.sequence, n.clone()))
            .collect();
        for (seq, node) in gone {
            self.forget(seq, &node);
        }
        let members = &self.members;
        self.permits.retain(|s, _| members.contains_key(s));
        if let Some(h) = self.head.as_mut() {
            h.fetched = false;
        }
        self.size.store(self.members.len(), Ordering::Relaxed);
        // `synced` is set by the next `publish`, once the head has been read: an observer's
        // first message must be the real state, never a vacancy we have not checked.
        Ok(())
    }

    fn publish(&self, leader: Option<LeaderInfo>) {
        self.view_tx.send_if_modified(|v| {
            if v.leader == leader && v.synced {
                return false;
            }
            // Tokens never go down in what observers see.
            if let (Some(old), Some(new)) = (&v.leader, &leader) {
                if new.fencing_token < old.fencing_token {
                    return false;
                }
            }
            v.leader = leader;
            v.synced = true;
            true
        });
    }

    async fn reconcile(&mut self) {
        self.size.store(self.members.len(), Ordering::Relaxed);
        match self.kind {
            QueueKind::Election => self.reconcile_head().await,
            QueueKind::Lock => self.reconcile_holders().await,
        }
        self.listed = true;
    }

    /// Whether confirmations may run: only while the link is up. A follower cut off from its
    /// quorum keeps answering reads for a while, so a read while suspended proves nothing
    /// (G2); the link's return re-runs `reconcile`.
    fn link_up(&self) -> bool {
        matches!(*self.link.borrow(), Link::Connected)
    }

    /// Lock queues: confirms every local member that the rule now admits, all checks in
    /// parallel (a writer leaving may admit a whole run of readers), and signals each one.
    /// Nothing is written, so a hand-over costs the delete, one event and at most one read per
    /// new holder on its own gateway (G4).
    async fn reconcile_holders(&mut self) {
        if !self.link_up() {
            return;
        }
        // Each pass either settles or removes a vanished member, so this ends.
        for _ in 0..16 {
            let due = self.due_holders();
            if due.is_empty() {
                return;
            }
            let checks = self.ownership(&due).await;
            let mut rerun = false;
            for ((sequence, node), check) in due.into_iter().zip(checks) {
                match self.claim(sequence, &node, check) {
                    Claim::Confirmed(holder) => {
                        if let Some(local) = self.local.get(&node) {
                            let _ = local.signals.send(MemberSignal::Elected {
                                leader: holder,
                                failover: None,
                            });
                        }
                    }
                    Claim::Vanished => rerun = true,
                    Claim::Retry => {}
                }
            }
            if !rerun {
                return;
            }
        }
    }

    /// Local members that hold by the rule but are not confirmed yet.
    fn due_holders(&self) -> Vec<(i64, String)> {
        let mut waiting = self.local.values().filter(|l| !l.confirmed).count();
        if waiting == 0 {
            return Vec::new();
        }
        let max_permits = self
            .local
            .values()
            .map(|l| l.record.permits.max(1))
            .max()
            .unwrap_or(1);
        let mut scan = HolderScan::default();
        let mut due = Vec::new();
        for (&sequence, node) in &self.members {
            if waiting == 0 || scan.exhausted(max_permits) {
                break;
            }
            let mode = mode_of(node);
            if let Some(local) = self.local.get(node).filter(|l| !l.confirmed) {
                waiting -= 1;
                if scan.admits(mode, local.record.permits) {
                    due.push((sequence, node.clone()));
                }
            }
            scan.push(mode);
        }
        due
    }

    /// Elections: brings the head up to date: confirm it if it is ours, else read who it is.
    async fn reconcile_head(&mut self) {
        // Each pass either settles or removes a vanished head, so this ends.
        for _ in 0..16 {
            let Some((&sequence, node)) = self.members.iter().next() else {
                self.head = None;
                // A vacancy nobody waited through is not a failover.
                self.head_gone_at = None;
                self.publish(None);
                return;
            };
            let node = node.clone();
            if self.head.as_ref().is_none_or(|h| h.sequence != sequence) {
                self.head = Some(Head {
                    sequence,
                    leader: None,
                    fetched: false,
                    known_mzxid: 0,
                    seen_at: self.listed.then(std::time::SystemTime::now),
                });
                // The previous leader is gone; until the new head is confirmed, nobody leads.
                // (Only a change if a leader was published: the first state is read first.)
                if self.view_tx.borrow().leader.is_some() {
                    self.publish(None);
                }
            }
            let path = format!("{}/{}", self.path, node);
            let local_unconfirmed = self.local.get(&node).is_some_and(|l| !l.confirmed);
            if local_unconfirmed {
                if self.confirm(sequence, &node).await {
                    continue;
                }
                return;
            }
            if self.head.as_ref().is_some_and(|h| h.fetched) {
                return;
            }
            match self.session.zk.get_data(&path).await {
                Ok((data, stat)) => {
                    let record = NodeRecord::decode_lossy(&data);
                    let seen_at = self.head.as_ref().and_then(|h| h.seen_at);
                    let leader = LeaderInfo {
                        election: self.name.clone(),
                        candidate: record.participant.clone(),
                        value: record.value.clone(),
                        fencing_token: FencingToken(stat.czxid as u64),
                        since: seen_at.unwrap_or_else(|| since(&record, &stat)),
                    };
                    if let Some(head) = self.head.as_mut() {
                        head.fetched = true;
                        head.known_mzxid = stat.mzxid;
                        let changed = head.leader.as_ref() != Some(&leader);
                        head.leader = Some(leader.clone());
                        if changed {
                            if let Some(local) = self.local.get(&node).filter(|l| l.confirmed) {
                                let _ =
                                    local.signals.send(MemberSignal::Proclaimed(leader.clone()));
                            }
                        }
                    }
                    self.publish(Some(leader));
                    return;
                }
                Err(zkc::Error::NoNode) => {
                    self.forget(sequence, &node);
                }
                Err(e) => {
                    tracing::debug!(queue = %self.name, error = %e, "reading the queue head failed; will retry on the next event");
                    return;
                }
            }
        }
    }

    /// Confirms our own head (see the module's "Confirmation costs no write") and tells its
    /// stream and the observers. Returns true to re-run reconcile (the head vanished), false
    /// when settled.
    async fn confirm(&mut self, sequence: i64, node: &str) -> bool {
        let due = [(sequence, node.to_owned())];
        let check = if self.link_up() {
            self.ownership(&due).await.remove(0)
        } else {
            Ownership::NotNow
        };
        match self.claim(sequence, node, check) {
            Claim::Confirmed(mut leader) => {
                // It has led since this gateway saw it become the head (observers may have
                // been told already, if its creation event came before its registration).
                if let Some(seen) = self.head.as_ref().and_then(|h| h.seen_at) {
                    leader.since = seen;
                }
                let failover = self.head_gone_at.take().map(|t| t.elapsed());
                if let Some(local) = self.local.get(node) {
                    let _ = local.signals.send(MemberSignal::Elected {
                        leader: leader.clone(),
                        failover,
                    });
                }
                if let Some(head) = self.head.as_mut() {
                    head.leader = Some(leader.clone());
                    head.fetched = true;
                    head.seen_at = Some(leader.since);
                }
                self.publish(Some(leader));
                false
            }
            Claim::Vanished => true,
            Claim::Retry => false,
        }
    }

    /// What proves each of `due` (local members the rule admits) ours: the creation zxid from
    /// its create reply, if it held the moment it registered, else a read of its znode on this
    /// session — all reads in flight at once.
    async fn ownership(&self, due: &[(i64, String)]) -> Vec<Ownership> {
        let session = self.session.session_id();
        let checks = due.iter().map(|(_, node)| {
            let known = self.local.get(node).and_then(|l| l.czxid);
            let path = format!("{}/{}", self.path, node);
            let zk = &self.session.zk;
            async move {
                if let Some(czxid) = known {
                    return Ownership::Ours(czxid);
                }
                match zk.stat(&path).await {
                    Ok(Some(stat)) if stat.ephemeral_owner == session => {
                        Ownership::Ours(stat.czxid)
                    }
                    Ok(Some(stat)) => Ownership::Foreign(stat.ephemeral_owner),
                    Ok(None) => Ownership::Gone,
                    Err(e) => Ownership::Failed(e),
                }
            }
        });
        futures::future::join_all(checks).await
    }

    /// Settles one ownership check: only a znode present *and* owned by our current session
    /// confirms its member (CURATOR-696); a vanished or foreign znode is forgotten.
    fn claim(&mut self, sequence: i64, node: &str, check: Ownership) -> Claim {
        match check {
            Ownership::Ours(czxid) => {
                let Some(local) = self.local.get_mut(node) else {
                    return Claim::Vanished;
                };
                local.confirmed = true;
                local.czxid = None;
                Claim::Confirmed(LeaderInfo {
                    election: self.name.clone(),
                    candidate: local.record.participant.clone(),
                    value: local.record.value.clone(),
                    fencing_token: FencingToken(czxid as u64),
                    since: std::time::SystemTime::now(),
                })
            }
            Ownership::Foreign(owner) => {
                tracing::error!(queue = %self.name, owner, "member znode is not owned by our session; not confirming it");
                self.forget(sequence, node);
                Claim::Vanished
            }
            Ownership::Gone => {
                self.forget(sequence, node);
                Claim::Vanished
            }
            Ownership::Failed(e) => {
                tracing::debug!(queue = %self.name, error = %e, "confirming a holder failed; will retry after the next event");
                Claim::Retry
            }
            Ownership::NotNow => Claim::Retry,
        }
    }
}

/// What an ownership check found (see `Actor::ownership`).
enum Ownership {
    /// Present and ours, created at this zxid.
    Ours(i64),
    /// Present but another session's.
    Foreign(i64),
    Gone,
    Failed(zkc::Error),
    /// The link is suspended: not looked at.
    NotNow,
}

/// `since` for a holder this gateway did not see take office: the time its own gateway
/// recorded, if any (gateways before 0.2 wrote the confirmation time), else when it joined
/// the queue — a lower bound.
pub(crate) fn since(record: &NodeRecord, stat: &zkc::Stat) -> std::time::SystemTime {
    record
        .elected_at()
        .unwrap_or_else(|| ms_to_time(stat.ctime))
}

#[cfg(test)]
mod tests {
    use super::HolderScan;

    /// Which members of a queue (mode letters in sequence order) hold with `permits`.
    fn holders(modes: &str, permits: u32) -> String {
        let mut scan = HolderScan::default();
        modes
            .chars()
            .map(|m| {
                let holds = scan.admits(m, permits);
                scan.push(m);
                if holds {
                    m.to_ascii_uppercase()
                } else {
                    m
                }
            })
            .collect()
    }

    #[test]
    fn elections_mutexes_and_semaphores() {
        assert_eq!(holders("ccc", 0), "Ccc", "an election is led by its head");
        assert_eq!(holders("www", 1), "Www");
        assert_eq!(holders("www", 0), "Www", "0 permits is a mutex");
        assert_eq!(holders("wwwww", 3), "WWWww");
        assert_eq!(holders("w", 3), "W");
    }

    #[test]
    fn read_write_in_fifo_order() {
        assert_eq!(holders("rrr", 1), "RRR", "readers share");
        assert_eq!(
            holders("rrwr", 1),
            "RRwr",
            "a writer behind readers blocks later readers"
        );
        assert_eq!(holders("wrr", 1), "Wrr", "a writer excludes readers");
        assert_eq!(holders("rwwr", 1), "Rwwr");
        assert_eq!(
            holders("wwr", 2),
            "WWr",
            "permits bound writers; readers wait for all"
        );
        assert_eq!(holders("rww", 2), "Rww");
    }

    #[test]
    fn exhausted_only_when_nobody_later_can_hold() {
        for (modes, permits) in [
            ("ccc", 1),
            ("rrwr", 1),
            ("wwwww", 3),
            ("rrr", 1),
            ("rww", 2),
        ] {
            let mut scan = HolderScan::default();
            let chars: Vec<char> = modes.chars().collect();
            for (i, &m) in chars.iter().enumerate() {
                scan.push(m);
                if scan.exhausted(permits) {
                    let mut rest = scan.clone();
                    for &later in &chars[i + 1..] {
                        assert!(!rest.admits(later, permits), "{modes} {permits}");
                        rest.push(later);
                    }
                }
            }
        }
    }
}
