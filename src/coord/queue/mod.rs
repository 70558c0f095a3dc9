//! The per-queue actor: one per election (or lock) per ZooKeeper session of this gateway.
//!
//! It holds the gateway's only watch on the queue — a persistent recursive watch on the queue's
//! znode — and keeps the ordered member list in memory. Every local candidate and observer is
//! served from here, so a leader change costs one event plus O(1) requests per gateway, however
//! many candidates or observers it has (G4), and only the successor's stream is woken.
//!
//! After a reconnect the actor re-lists the queue before trusting its view again, because
//! persistent watches miss events while disconnected (ZOOKEEPER-4698). Any change of the
//! session's link — seen on the link itself, or as the watch's reconnect event, whichever comes
//! first — makes the view unsynced ([`state`]: nothing is confirmed or answered until a
//! listing succeeds); a failed listing is retried every [`RELIST_RETRY`] while the link is up.
//!
//! Every decision — who holds, when a member is confirmed, what observers see — is made by the
//! pure [`QueueState`] (see [`state`] for the rules); the actor here only turns ZooKeeper's
//! events and replies into its events and performs the reads and signals it asks for, one at a
//! time and in order, so the state sees exactly the queue as of the newest reply or event.
//! Handles are owned by the session's [`QueueRegistry`]; an actor knows only its session's
//! [`Zk`], id and link.

#[cfg(test)]
mod sim;
pub mod state;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use futures::FutureExt;
use tokio::sync::{mpsc, oneshot, watch};
use zookeeper_client as zkc;
use zookeeper_client::{EventType, SessionState, WatchedEvent};

use super::batch::Urgency;
use super::error::{CoordError, Limit};
use super::fanout::Fanout;
use super::link::{Link, RELIST_RETRY};
use super::paging::ReadPlan;
use super::record::NodeRecord;
use super::types::{Holder, MemberName, QueueKind, QueueName};
use super::zk::Zk;
use state::{Action, Due, Event, MemberData, Ownership};
pub use state::{Created, Enlisted, HolderScan, MemberSignal, QueueState, QueueView, Refusal};

/// What an actor needs of its session: the client, whose session owns the members it
/// confirms, and the link, which says when confirmations may run.
#[derive(Debug, Clone)]
pub struct SessionIo {
    pub zk: Zk,
    pub session_id: i64,
    pub link: watch::Receiver<Link>,
    /// How to page the multi-read of members' permits.
    pub permit_reads: ReadPlan,
    /// Whether the session's server is proven diverged (no queue of it grants then).
    pub divergence: Arc<super::divergence::Divergence>,
}

/// What a local member's channel carries: boxed, because every member's channel allocates room
/// for 32 items up front (tokio's block) and a bare [`MemberSignal`] carries a whole
/// [`Holder`](crate::coord::types::Holder): that first block was ≈ 3.5 KiB of every waiting
/// stream, boxed it is ≈ 0.3 KiB (`examples/scale_bench.rs`, issue 21).
pub(crate) type Signal = Box<MemberSignal>;

enum Command {
    Register {
        created: Created,
        signals: mpsc::UnboundedSender<Signal>,
        reply: oneshot::Sender<Result<Enlisted, Refusal>>,
    },
    Unregister {
        node: String,
    },
    /// A join ended without registering: a head it left unread is read now.
    Wake,
    /// A create of this protected id met a transport failure; `adopted`, the znode a member
    /// took for it, if any.
    Strays {
        id: String,
        adopted: Option<String>,
    },
}

/// Protected ids of this gateway's members being created in a queue: their creation events
/// may reach the actor before their registrations (see [`QueueHandle::expect`]).
type Creating = Arc<std::sync::Mutex<HashSet<String>>>;

/// A handle on a running queue actor; the actor stops when the last handle is dropped.
#[derive(Debug)]
pub struct QueueHandle {
    pub kind: QueueKind,
    pub name: QueueName,
    pub path: String,
    cmd: mpsc::UnboundedSender<Command>,
    view: watch::Receiver<QueueView>,
    /// The view for `Observe` streams, a bounded group woken at a time (see [`Fanout`]),
    /// closed when the drain starts or the session is lost.
    observers: Fanout<QueueView>,
    /// The same for `ObserveMany` streams, which end on their own terms.
    many_observers: Fanout<QueueView>,
    /// The gateway's `max_queues` place, given back when the last user drops the handle.
    _slot: QueueSlot,
    /// Members in the actor's view, kept by the actor (see [`QueueHandle::check_room`]).
    size: Arc<AtomicUsize>,
    /// Whether the queue's znode exists by the actor's view, so a member of a fresh name is
    /// created together with its queue in one round trip (see `member::create_member`).
    present: Arc<AtomicBool>,
    creating: Creating,
}

impl QueueHandle {
    /// Places the queue's watch and lists it (one round trip), then runs the actor in the
    /// background.
    ///
    /// # Errors
    /// ZooKeeper errors from placing the watch or listing the queue.
    async fn start(
        io: SessionIo,
        kind: QueueKind,
        name: QueueName,
        path: String,
        slot: QueueSlot,
    ) -> Result<Arc<Self>, zkc::Error> {
        let mut io = io;
        // Link changes from now on are the actor's to notice: the listing below postdates the
        // ones before.
        io.link.borrow_and_update();
        let (watcher, listing) = io.zk.watch_and_list(&path).await;
        let watcher = watcher?;
        let listing = absent_as_none(listing)?;
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (view_tx, view_rx) = watch::channel(QueueView::default());
        let size = Arc::new(AtomicUsize::new(0));
        let present = Arc::new(AtomicBool::new(false));
        let creating = Creating::default();
        let diverged = io.divergence.subscribe();
        let stranded = io.divergence.subscribe_stranded();
        let mut actor = Actor {
            diverged,
            stranded,
            state: QueueState::new(kind, name.clone()),
            io,
            link_open: true,
            path: path.clone(),
            watcher,
            watching: true,
            rewatch: false,
            signals: HashMap::new(),
            pending: None,
            answer: None,
            view_tx,
            cmd_rx,
            size: size.clone(),
            present: present.clone(),
            creating: creating.clone(),
        };
        actor.apply(Event::Listed(listing)).await;
        tokio::spawn(actor.run());
        Ok(Arc::new(Self {
            kind,
            name,
            path,
            cmd: cmd_tx,
            observers: Fanout::new(view_rx.clone()),
            many_observers: Fanout::new(view_rx.clone()),
            view: view_rx,
            _slot: slot,
            size,
            present,
            creating,
        }))
    }

    /// Announces a member about to be created with protected id `id` (hex), until the guard
    /// is dropped. An election's actor that sees such a member become the head waits for its
    /// registration — whose create reply confirms it — instead of reading the head for its
    /// observers first: on a reused name that read was a round trip on the new leader's path.
    /// An announcement the actor has not seen yet only costs that read.
    pub fn expect(&self, id: String) -> Expecting {
        self.creating
            .lock()
            .expect("creating set")
            .insert(id.clone());
        Expecting {
            creating: self.creating.clone(),
            cmd: self.cmd.clone(),
            id,
            registered: false,
        }
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
    /// `LimitReached` naming the limit.
    pub fn check_room(&self, limit: usize) -> Result<(), CoordError> {
        let size = self.size.load(Ordering::Relaxed);
        if size >= limit {
            return Err(Limit::QueueMembers {
                kind: self.kind,
                name: self.name.clone(),
                size,
                max: limit,
            }
            .reject());
        }
        Ok(())
    }

    pub fn is_closed(&self) -> bool {
        self.cmd.is_closed()
    }

    /// How urgent the delete of one of this queue's members is: a hand-over when the queue
    /// has other members by the actor's view (the one leaving still counts until its deletion
    /// is seen), so one of them may be admitted by it. A hint: a stale count costs a request
    /// pipelined or a batch waited for, never correctness.
    pub fn member_delete_urgency(&self) -> Urgency {
        if self.size.load(Ordering::Relaxed) > 1 {
            Urgency::HandOver
        } else {
            Urgency::Gather
        }
    }

    pub fn view(&self) -> watch::Receiver<QueueView> {
        self.view.clone()
    }

    /// The view for an `ObserveMany` stream: the same states as [`QueueHandle::view`],
    /// delivered to at most [`super::fanout::OBSERVERS_PER_WAKE`] observers at a time so
    /// thousands of them never hold up the gateway's other streams (a new leader's `elected`
    /// among them).
    pub fn observe_view(&self) -> watch::Receiver<QueueView> {
        self.many_observers.subscribe()
    }

    /// The view for an `Observe` stream, as [`QueueHandle::observe_view`], and closed once the
    /// future `end` makes resolves (the drain, the session's loss): every `Observe` of a queue
    /// passes the same end, and only the first one's is made ([`Fanout::subscribe_until`]).
    pub fn observe_view_until(&self, end: super::fanout::EndFn) -> watch::Receiver<QueueView> {
        self.observers.subscribe_until(end)
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
        signals: mpsc::UnboundedSender<Signal>,
    ) -> Result<Enlisted, Refusal> {
        let (reply, rx) = oneshot::channel();
        self.cmd
            .send(Command::Register {
                created,
                signals,
                reply,
            })
            .map_err(|_| Refusal::Gone)?;
        rx.await.unwrap_or(Err(Refusal::Gone))
    }

    /// A create of protected id `id` met a transport failure and its join or its member ended:
    /// any znode with that id that shows up, other than `adopted` (the member's own, which its
    /// release deletes), is ours and no stream's, and is deleted (`state::Strays`).
    pub fn watch_strays(&self, id: String, adopted: Option<String>) {
        let _ = self.cmd.send(Command::Strays { id, adopted });
    }

    pub fn unregister(&self, node: &str) {
        let _ = self.cmd.send(Command::Unregister {
            node: node.to_owned(),
        });
    }
}

/// A member being created ([`QueueHandle::expect`]); dropping it withdraws the announcement.
#[derive(Debug)]
pub struct Expecting {
    creating: Creating,
    cmd: mpsc::UnboundedSender<Command>,
    id: String,
    registered: bool,
}

impl Expecting {
    /// The member registered: the actor knows it now.
    pub fn registered(&mut self) {
        self.registered = true;
    }
}

impl Drop for Expecting {
    fn drop(&mut self) {
        if let Ok(mut creating) = self.creating.lock() {
            creating.remove(&self.id);
        }
        if !self.registered {
            // A head the actor left unread for it is read now (if the znode is still there).
            let _ = self.cmd.send(Command::Wake);
        }
    }
}

/// A listing's children, `None` when the queue's znode does not exist.
fn absent_as_none(
    listing: Result<Vec<String>, zkc::Error>,
) -> Result<Option<Vec<String>>, zkc::Error> {
    match listing {
        Ok(c) => Ok(Some(c)),
        Err(zkc::Error::NoNode) => Ok(None),
        Err(e) => Err(e),
    }
}

/// One of the gateway's `max_queues` places, held by a queue's handle for as long as it lives.
#[derive(Debug)]
pub struct QueueSlot(Arc<AtomicUsize>);

impl QueueSlot {
    fn reserve(live: &Arc<AtomicUsize>, max: usize) -> Result<Self, CoordError> {
        if live.fetch_add(1, Ordering::AcqRel) >= max {
            live.fetch_sub(1, Ordering::AcqRel);
            return Err(Limit::QueuesPerGateway(max).reject());
        }
        Ok(Self(live.clone()))
    }
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The queues one session serves: at most one actor per queue (G4), started on first use and
/// stopped when its last user is gone, within the gateway's `max_queues`.
#[derive(Debug)]
pub struct QueueRegistry {
    queues: Mutex<HashMap<(QueueKind, QueueName), Weak<QueueHandle>>>,
    /// Queues alive on every session of the gateway (the `max_queues` limit).
    live: Arc<AtomicUsize>,
    max: usize,
}

impl QueueRegistry {
    pub fn new(live: Arc<AtomicUsize>, max: usize) -> Self {
        Self {
            queues: Mutex::new(HashMap::new()),
            live,
            max,
        }
    }

    fn running(&self, key: &(QueueKind, QueueName)) -> Option<Arc<QueueHandle>> {
        self.queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .and_then(Weak::upgrade)
            .filter(|q| !q.is_closed())
    }

    /// The leader as this session's watch on the election sees it, if it watches it (a local
    /// candidate or observer, or a queue still lingering): it knows when that leader took
    /// office, which a one-off read cannot tell.
    pub fn watched_leader(&self, election: &QueueName) -> Option<Holder> {
        let queue = self.running(&(QueueKind::Election, election.clone()))?;
        let leader = queue.view().borrow().leader().clone();
        leader
    }

    /// The actor for the queue at `path`, started on first use.
    ///
    /// # Errors
    /// `LimitReached` when the gateway already serves `max_queues` distinct queues;
    /// ZooKeeper errors placing the watch or listing the queue.
    pub async fn get_or_start(
        &self,
        io: impl FnOnce() -> SessionIo,
        kind: QueueKind,
        name: &QueueName,
        path: String,
    ) -> Result<Arc<QueueHandle>, CoordError> {
        let key = (kind, name.clone());
        if let Some(q) = self.running(&key) {
            return Ok(q);
        }
        let slot = QueueSlot::reserve(&self.live, self.max)?;
        let q = QueueHandle::start(io(), kind, name.clone(), path, slot).await?;
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        // Another task may have started one meanwhile: keep the first, drop ours.
        if let Some(existing) = queues.get(&key).and_then(Weak::upgrade) {
            if !existing.is_closed() {
                return Ok(existing);
            }
        }
        queues.retain(|_, w| w.strong_count() > 0);
        queues.insert(key, Arc::downgrade(&q));
        Ok(q)
    }
}

/// A registration's reply and what it is to say ([`Actor::send_answer`]).
type Answer = (
    oneshot::Sender<Result<Enlisted, Refusal>>,
    Result<Enlisted, Refusal>,
);

/// A registration being decided: its node, channel and reply.
type Pending = (
    String,
    mpsc::UnboundedSender<Signal>,
    oneshot::Sender<Result<Enlisted, Refusal>>,
);

/// The I/O around one [`QueueState`].
struct Actor {
    state: QueueState,
    /// The session's proofs of divergence: their end lets the queue grant again.
    diverged: watch::Receiver<super::divergence::Proofs>,
    /// Whether the session is stranded on its diverged server: its waiting members end.
    stranded: watch::Receiver<bool>,
    io: SessionIo,
    link_open: bool,
    path: String,
    watcher: zkc::PersistentWatcher,
    watching: bool,
    /// A reconnect may have dropped the watch: it is placed again before the next listing.
    rewatch: bool,
    /// Local members' channels, by node name.
    signals: HashMap<String, mpsc::UnboundedSender<Signal>>,
    /// The registration being decided.
    pending: Option<Pending>,
    /// A registration's answer, decided but not sent yet: it goes out before the actor next
    /// waits on anything (see [`Actor::send_answer`]).
    answer: Option<Answer>,
    view_tx: watch::Sender<QueueView>,
    cmd_rx: mpsc::UnboundedReceiver<Command>,
    /// The state's size, published for [`QueueHandle::check_room`].
    size: Arc<AtomicUsize>,
    present: Arc<AtomicBool>,
    creating: Creating,
}

enum Step {
    Continue,
    Stop,
}

/// The session ended while an action ran: the actor stops.
struct Stopped;

impl Actor {
    async fn run(mut self) {
        // Read the head once before anything happens, so observers get their first state.
        self.reconcile().await;
        loop {
            let step = tokio::select! {
                ev = self.watcher.changed(), if self.watching => self.on_event(ev).await,
                // A suspended link that comes back without a reconnect (a stale probe answered
                // again) triggers no event: confirmations that waited for it run now, after a
                // listing (any change of the link may have hidden a reconnect).
                r = self.io.link.changed(), if self.link_open => {
                    self.link_open = r.is_ok();
                    tracing::debug!(queue = %self.path, link = ?*self.io.link.borrow(), "the link changed: the view is unsynced");
                    self.apply(Event::Unsynced).await
                }
                // A proof of the server's divergence made or ended (by any queue of the
                // session): the reconcile below decides again.
                r = self.diverged.changed() => {
                    if r.is_err() {
                        Step::Stop
                    } else {
                        Step::Continue
                    }
                }
                // Stranded on that server, or no longer: the reconcile below ends the
                // waiting members.
                r = self.stranded.changed() => {
                    if r.is_err() {
                        Step::Stop
                    } else {
                        Step::Continue
                    }
                }
                // A failed re-listing is tried again (the reconcile below asks for it).
                () = tokio::time::sleep(RELIST_RETRY), if self.state.unsynced() => Step::Continue,
                // One registration at a time: one that waits for a listing holds the rest.
                cmd = self.cmd_rx.recv(), if self.pending.is_none() => match cmd {
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
            let step = self.reconcile().await;
            self.send_answer();
            self.show_stranding();
            if let Step::Stop = step {
                break;
            }
        }
        self.send_answer();
        // Whatever is still local hears nothing more; its stream follows the session link.
        self.view_tx
            .send_modify(|v| *v = QueueView::new(v.synced(), None));
    }

    /// Shows observers [`QueueView::stranded`] while the session is stranded on a diverged
    /// server, so that they end `UNAVAILABLE` and observe again elsewhere (there they would
    /// be shown a vacancy while another gateway shows the leader), and the state's own view
    /// again when it no longer is. Through the queue's one view, so observers pay nothing for
    /// it until it happens (10,000 observers of one election, issue 21).
    fn show_stranding(&mut self) {
        let stranded = *self.stranded.borrow();
        if stranded != self.view_tx.borrow().is_stranded() {
            let view = if stranded {
                QueueView::stranded()
            } else {
                self.state.published().clone()
            };
            self.view_tx.send_replace(view);
        }
    }

    /// Whether confirmations may run: only while the link is up. A follower cut off from its
    /// quorum keeps answering reads for a while, so a read while suspended proves nothing
    /// (G2); the link's return re-runs the reconcile.
    async fn reconcile(&mut self) -> Step {
        if self.link_moved() {
            if let Step::Stop = self.apply(Event::Unsynced).await {
                return Step::Stop;
            }
        }
        let link_up = matches!(*self.io.link.borrow(), Link::Connected);
        let creating = self.creating.lock().expect("creating set").clone();
        self.state.set_creating(creating);
        self.state
            .set_session_diverged(!self.diverged.borrow_and_update().is_empty());
        let unsynced = self.state.unsynced();
        if let Step::Stop = self.apply(Event::Reconcile { link_up }).await {
            return Step::Stop;
        }
        if unsynced && !self.state.unsynced() {
            // That reconcile only re-listed the queue: decide from the fresh view now.
            return self.apply(Event::Reconcile { link_up }).await;
        }
        Step::Continue
    }

    /// Whether the link changed since the actor last looked (and marks it seen): whatever
    /// happened meanwhile, a reconnect included, the view may have missed events.
    fn link_moved(&mut self) -> bool {
        if !self.link_open {
            return false;
        }
        match self.io.link.has_changed() {
            Ok(true) => {
                self.io.link.borrow_and_update();
                true
            }
            Ok(false) => false,
            // The session is over: the actor stops with its watcher.
            Err(_) => false,
        }
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

    fn member_of(&self, path: &str) -> Option<MemberName> {
        path.strip_prefix(self.path.as_str())?
            .strip_prefix('/')
            .filter(|c| !c.contains('/'))
            .and_then(MemberName::parse)
    }

    async fn on_event(&mut self, ev: WatchedEvent) -> Step {
        let event = match ev.event_type {
            EventType::Session => match ev.session_state {
                SessionState::SyncConnected | SessionState::ConnectedReadOnly => {
                    // zookeeper-client 0.11.2 restores watches after a reconnect with
                    // SetWatches, not SetWatches2 (`index = index.max(index)` in
                    // session/watch.rs), so the server forgets persistent watches: ours is
                    // placed again before the re-listing (`Action::List`), which the state
                    // asks for once the link is up.
                    self.rewatch = true;
                    Event::Unsynced
                }
                SessionState::Disconnected => return Step::Continue,
                // Terminal: the watcher must not be polled again; streams end via the link.
                _ => {
                    self.watching = false;
                    return Step::Stop;
                }
            },
            EventType::NodeCreated if ev.path == self.path => Event::QueueCreated,
            EventType::NodeDeleted if ev.path == self.path => Event::QueueDeleted,
            EventType::NodeCreated => match self.member_of(&ev.path) {
                Some(m) => Event::MemberCreated(m),
                None => return Step::Continue,
            },
            EventType::NodeDeleted => match self.member_of(&ev.path) {
                Some(m) => Event::MemberDeleted(m),
                None => return Step::Continue,
            },
            EventType::NodeDataChanged => match self.member_of(&ev.path) {
                Some(m) => {
                    self.check_end_requested(&m, &ev.path);
                    Event::DataChanged(m, ev.zxid)
                }
                None => return Step::Continue,
            },
            EventType::NodeChildrenChanged => return Step::Continue,
        };
        self.apply(event).await
    }

    /// A local member's data changed: a `Resign`/`Release` by lease may have asked for it to
    /// end (`NodeRecord::end_requested_ms`, written by `member::end_by_lease` on any gateway).
    /// Read in a task of its own so the actor never waits on it, and only for this gateway's
    /// own members (one read per data change of a local member: proclaims and end requests).
    /// Its signal may overtake or trail the actor's own; the member copes with either order
    /// (an end requested of a member not holding, or already leaving, just deletes it).
    fn check_end_requested(&self, member: &MemberName, path: &str) {
        self.check_end_requested_of(&member.node_name(), path);
    }

    fn check_end_requested_of(&self, node: &str, path: &str) {
        let Some(tx) = self.signals.get(node) else {
            return;
        };
        let (tx, zk, path) = (tx.clone(), self.io.zk.clone(), path.to_owned());
        tokio::spawn(async move {
            match zk.get_data(&path).await {
                Ok((data, _)) if NodeRecord::decode_lossy(&data).end_requested_ms > 0 => {
                    let _ = tx.send(Box::new(MemberSignal::EndRequested));
                }
                Ok(_) | Err(zkc::Error::NoNode) => {}
                // The requester deletes the znode itself after its bound (see
                // `member::end_by_lease`): a lost read only makes that the way it ends.
                // Never the path: its protected name is a lease's secret.
                Err(e) => {
                    tracing::debug!(error = %e, "reading a member after a data change failed")
                }
            }
        });
    }

    async fn on_command(&mut self, cmd: Command) -> Step {
        match cmd {
            Command::Register {
                created,
                signals,
                reply,
            } => {
                self.pending = Some((created.member.node_name(), signals, reply));
                // A link that moved since the last look makes the view unsynced first: the
                // registration (and its create reply's confirmation) waits for a listing.
                if self.link_moved() {
                    if let Step::Stop = self.apply(Event::Unsynced).await {
                        return Step::Stop;
                    }
                }
                self.apply(Event::Register(created)).await
            }
            Command::Unregister { node } => {
                self.signals.remove(&node);
                self.apply(Event::Unregister(node)).await
            }
            // The reconcile after every step does the rest.
            Command::Wake => Step::Continue,
            Command::Strays { id, adopted } => self.apply(Event::Strays { id, adopted }).await,
        }
    }

    /// Applies `event` and performs what it calls for, feeding each answer back, until the
    /// state asks for nothing more. Nothing else is looked at meanwhile, so every answer is
    /// applied to the state that asked for it.
    async fn apply(&mut self, event: Event) -> Step {
        let mut queue = std::collections::VecDeque::from([event]);
        while let Some(event) = queue.pop_front() {
            // Another queue's proof of divergence counts from the moment it is made, for a
            // registration's `holds` and an answer's confirmation alike (its change also
            // wakes the actor to decide again).
            let diverged = !self.diverged.borrow().is_empty();
            self.state.set_session_diverged(diverged);
            self.state
                .set_session_stranded(*self.stranded.borrow_and_update());
            for action in self.state.apply(event) {
                match self.perform(action).await {
                    Ok(answers) => queue.extend(answers),
                    Err(Stopped) => return Step::Stop,
                }
            }
        }
        self.size.store(self.state.members(), Ordering::Relaxed);
        self.present.store(self.state.present(), Ordering::Relaxed);
        Step::Continue
    }

    /// Sends a registration's answer held back by [`Actor::perform`].
    ///
    /// Why it is held back: a member that holds the moment it registers (a free lock, a vacant
    /// election, confirmed by its create reply) is told so by the reconcile that follows the
    /// registration, without a ZooKeeper request in between. Answered only after it, the
    /// joining stream finds `Holds` already in its channel and sends `queued` and the grant
    /// with its response (`api::holder_stream::Opened`); answered first, it usually wakes too
    /// early for that. The answer still goes before anything the actor waits on — a read, the
    /// next event or command — so it is never delayed by a round trip.
    fn send_answer(&mut self) {
        if let Some((reply, result)) = self.answer.take() {
            let _ = reply.send(result);
        }
    }

    /// Performs one action; a read's answer comes back as the events to apply next.
    async fn perform(&mut self, action: Action) -> Result<Vec<Event>, Stopped> {
        if !matches!(
            action,
            Action::Reply(_) | Action::Signal(..) | Action::Publish(_)
        ) {
            self.send_answer();
        }
        match action {
            Action::CheckOwnership(due) => {
                let owned = Event::Owned(self.ownership(due).await);
                // Judged when the answer arrives: a link that moved while the reads were out
                // (suspended, back, reconnected) makes the view unsynced before the answer is
                // applied, so it confirms nothing (G2).
                if self.link_moved() || !matches!(*self.io.link.borrow(), Link::Connected) {
                    Ok(vec![Event::Unsynced, owned])
                } else {
                    Ok(vec![owned])
                }
            }
            Action::List => Ok(vec![self.list().await]),
            Action::CheckPresent(node) => {
                let read = self.io.zk.get_data(&format!("{}/{node}", self.path)).await;
                Ok(vec![Event::Present(state::presence(read))])
            }
            // Events that arrived meanwhile (members created before ours among them) must be
            // in the view before it decides anything.
            Action::Settle => match Box::pin(self.drain_events()).await {
                Step::Continue => Ok(vec![Event::Settled]),
                Step::Stop => Err(Stopped),
            },
            Action::ReadPermits(members) => {
                let paths: Vec<String> = members
                    .iter()
                    .map(|(_, n)| format!("{}/{n}", self.path))
                    .collect();
                let read = self
                    .io
                    .zk
                    .get_many(&paths, self.io.permit_reads)
                    .await
                    .map(|data| {
                        members
                            .iter()
                            .zip(data)
                            .map(|((_, n), d)| {
                                // A child that is not ephemeral is no member (see `state`).
                                let member = d.filter(|(_, stat)| stat.ephemeral_owner != 0);
                                (
                                    n.clone(),
                                    member.map(|(b, _)| NodeRecord::decode_lossy(&b).permits),
                                )
                            })
                            .collect()
                    });
                Ok(vec![Event::PermitsRead(read)])
            }
            Action::ReadHead { sequence, node } => {
                let read = self
                    .io
                    .zk
                    .get_data(&format!("{}/{node}", self.path))
                    .await
                    .map(|(data, stat)| {
                        MemberData::from_stat(NodeRecord::decode_lossy(&data), &stat)
                    });
                Ok(vec![Event::HeadRead {
                    sequence,
                    node,
                    read,
                }])
            }
            Action::Reply(result) => {
                if let Some((node, signals, reply)) = self.pending.take() {
                    if result.is_ok() {
                        self.signals.insert(node, signals);
                    }
                    self.send_answer();
                    self.answer = Some((reply, result));
                }
                Ok(vec![])
            }
            Action::Signal(node, signal) => {
                let gone = matches!(signal, MemberSignal::Gone | MemberSignal::Unserved);
                if let Some(tx) = self.signals.get(&node) {
                    let _ = tx.send(Box::new(signal));
                }
                if gone {
                    self.signals.remove(&node);
                }
                Ok(vec![])
            }
            Action::Publish(view) => {
                // A stranded session's observers are shown that only ([`Actor::show_stranding`]).
                if !*self.stranded.borrow() {
                    self.view_tx.send_replace(view);
                }
                Ok(vec![])
            }
            // One attempt each, all at once: a suspect without an answer stays in the view
            // (it can only block) and is asked about again at the next listing, which a
            // transport failure brings about anyway.
            Action::DeleteStray(node) => {
                self.delete_stray(node);
                Ok(vec![])
            }
            Action::ConfirmDivergence(node) => {
                let path = format!("{}/{node}", self.path);
                let still = match self.io.zk.sync(&path).await {
                    Ok(()) => state::presence(self.io.zk.get_data(&path).await),
                    Err(e) => Err(e),
                };
                Ok(vec![Event::StillListed(node, still)])
            }
            Action::Diverged(node) => {
                self.io.divergence.prove(&self.path, node);
                Ok(vec![])
            }
            Action::Lacks(node) => {
                self.io.divergence.prove_lacked(&self.path, node);
                Ok(vec![])
            }
            Action::Withdraw(node) => {
                self.io.divergence.withdraw_lacked(&self.path, &node);
                Ok(vec![])
            }
            Action::VerifyAtLeader(nodes) => {
                let answers = futures::future::join_all(nodes.into_iter().map(|node| {
                    let path = format!("{}/{node}", self.path);
                    let zk = &self.io.zk;
                    async move { (node, zk.exists_at_leader(&path).await) }
                }))
                .await;
                Ok(vec![Event::Verified(answers)])
            }
        }
    }

    /// Deletes a stray (`state::Strays`) in a task of its own, once its owner is proven to be
    /// this session: its protected id says so, and no znode of another session is ever
    /// deleted on a name's word. Retried through the link like a member's release; a session
    /// that ends first takes the znode with it.
    fn delete_stray(&self, node: String) {
        let (zk, mut link) = (self.io.zk.clone(), self.io.link.clone());
        let (session, path) = (self.io.session_id, format!("{}/{node}", self.path));
        tokio::spawn(async move {
            match super::link::through_link(&mut link, || zk.get_data(&path)).await {
                Ok(Ok((_, stat))) if stat.ephemeral_owner == session => {}
                _ => return,
            }
            match super::link::through_link(&mut link, || zk.delete(&path, Urgency::HandOver)).await
            {
                Ok(Ok(())) => crate::metrics::stray_deleted(),
                Ok(Err(zkc::Error::NoNode)) | Err(_) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "deleting a stray znode failed; the session's end removes it");
                }
            }
        });
    }

    /// Places the queue's watch again if a reconnect may have dropped it, then lists the
    /// queue: the listing and the events that follow it leave no gap.
    async fn list(&mut self) -> Event {
        let reconnected = self.rewatch;
        if self.rewatch {
            match self.io.zk.watch_queue(&self.path).await {
                // The old watcher is dropped after the new one exists, so no RemoveWatches
                // reaches the server.
                Ok(w) => {
                    self.watcher = w;
                    self.rewatch = false;
                }
                Err(e) => return Event::ListFailed(e),
            }
        }
        match absent_as_none(self.io.zk.list_children(&self.path).await) {
            Ok(listing) => {
                self.io.divergence.listed(&self.path, listing.as_deref());
                if reconnected {
                    // A data change while the watch was gone (an end asked by lease from
                    // another gateway during the disconnect) sent no event: read each local
                    // member's record once, so its holder is told now rather than losing its
                    // znode to the requester's fallback delete (G3c).
                    for node in self.signals.keys() {
                        self.check_end_requested_of(node, &format!("{}/{node}", self.path));
                    }
                }
                Event::Listed(listing)
            }
            Err(e) => Event::ListFailed(e),
        }
    }

    /// What proves each of `due` ours: the creation zxid from its create reply, kept while the
    /// view has stayed whole since it registered (see `state`, "A hand-over costs no read"),
    /// else a read of its znode on this session — all reads in flight at once.
    async fn ownership(&self, due: Vec<Due>) -> Vec<(Due, Ownership)> {
        let session = self.io.session_id;
        let checks = due.into_iter().map(|d| {
            let path = format!("{}/{}", self.path, d.node);
            let zk = &self.io.zk;
            async move {
                let found = match d.czxid {
                    Some(czxid) => Ownership::Ours(czxid),
                    None => match zk.stat(&path).await {
                        Ok(Some(stat)) if stat.ephemeral_owner == session => {
                            Ownership::Ours(stat.czxid)
                        }
                        Ok(Some(stat)) => Ownership::Foreign(stat.ephemeral_owner),
                        Ok(None) => Ownership::Gone,
                        Err(e) => Ownership::Failed(e),
                    },
                };
                (d, found)
            }
        });
        futures::future::join_all(checks).await
    }
}
