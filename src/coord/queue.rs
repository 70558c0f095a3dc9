//! The per-queue actor: one per election (or lock) per ZooKeeper session of this gateway.
//!
//! It holds the gateway's only watch on the queue — a persistent recursive watch on the queue's
//! znode — and keeps the ordered member list in memory. Every local candidate and observer is
//! served from here, so a leader change costs one event plus O(1) requests per gateway, however
//! many candidates or observers it has (G4), and only the successor's stream is woken.
//!
//! After a reconnect the actor re-lists the queue before trusting its view again, because
//! persistent watches miss events while disconnected (ZOOKEEPER-4698).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use zookeeper_client as zkc;
use zookeeper_client::{EventType, SessionState, WatchedEvent};

use super::record::{now_ms, NodeRecord};
use super::session::ZkSession;
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
    /// Confirmed head of the queue (ownership checked). `failover` is the time from the
    /// predecessor's disappearance, when this gateway saw it.
    Elected {
        leader: LeaderInfo,
        failover: Option<Duration>,
    },
    /// The leader's value changed.
    Proclaimed(LeaderInfo),
    /// The znode was deleted by someone else (a `Resign` by lease on any gateway).
    Gone,
}

enum Command {
    Register {
        member: MemberName,
        record: NodeRecord,
        signals: mpsc::UnboundedSender<MemberSignal>,
        reply: oneshot::Sender<Option<u32>>,
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
}

impl QueueHandle {
    /// Places the queue's watch and lists it, then runs the actor in the background.
    ///
    /// # Errors
    /// ZooKeeper errors from placing the watch or listing the queue.
    pub async fn start(
        session: Arc<ZkSession>,
        kind: QueueKind,
        name: QueueName,
    ) -> Result<Arc<Self>, zkc::Error> {
        let path = session.queue_path(kind, &name);
        let watcher = session.zk.watch_queue(&path).await?;
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (view_tx, view_rx) = watch::channel(QueueView::default());
        let mut actor = Actor {
            session,
            path: path.clone(),
            name: name.clone(),
            watcher,
            watching: true,
            members: BTreeMap::new(),
            local: HashMap::new(),
            head: None,
            head_gone_at: None,
            view_tx,
            cmd_rx,
        };
        actor.resync().await?;
        tokio::spawn(actor.run());
        Ok(Arc::new(Self {
            kind,
            name,
            path,
            cmd: cmd_tx,
            view: view_rx,
        }))
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
        member: MemberName,
        record: NodeRecord,
        signals: mpsc::UnboundedSender<MemberSignal>,
    ) -> Option<u32> {
        let (reply, rx) = oneshot::channel();
        self.cmd
            .send(Command::Register {
                member,
                record,
                signals,
                reply,
            })
            .ok()?;
        rx.await.ok().flatten()
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
}

struct Head {
    sequence: i64,
    /// Known data (None until fetched).
    leader: Option<LeaderInfo>,
    fetched: bool,
    /// mzxid of the last write we know the content of (our own confirm), to skip refetching it.
    known_mzxid: i64,
}

struct Actor {
    session: Arc<ZkSession>,
    path: String,
    name: QueueName,
    watcher: zkc::PersistentWatcher,
    watching: bool,
    /// sequence → node name
    members: BTreeMap<i64, String>,
    local: HashMap<String, Local>,
    head: Option<Head>,
    head_gone_at: Option<Instant>,
    view_tx: watch::Sender<QueueView>,
    cmd_rx: mpsc::UnboundedReceiver<Command>,
}

enum Step {
    Continue,
    Stop,
}

impl Actor {
    async fn run(mut self) {
        loop {
            let step = tokio::select! {
                ev = self.watcher.changed(), if self.watching => self.on_event(ev).await,
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
                        }
                        Err(_) => {
                            let _ = reply.send(None);
                            return Step::Continue;
                        }
                    }
                }
                let ahead = self.members.range(..member.sequence).count() as u32;
                self.local.insert(
                    node,
                    Local {
                        sequence: member.sequence,
                        record,
                        signals,
                        confirmed: false,
                    },
                );
                let _ = reply.send(Some(ahead));
            }
            Command::Unregister { node } => {
                self.local.remove(&node);
            }
        }
        Step::Continue
    }

    /// Re-lists the queue and rebuilds the view from ZooKeeper.
    async fn resync(&mut self) -> Result<(), zkc::Error> {
        let children = match self.session.zk.list_children(&self.path).await {
            Ok(c) => c,
            Err(zkc::Error::NoNode) => Vec::new(),
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
        if let Some(h) = self.head.as_mut() {
            h.fetched = false;
        }
        self.view_tx
            .send_if_modified(|v| !std::mem::replace(&mut v.synced, true));
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

    /// Brings the head up to date: confirm it if it is ours, else read who it is.
    async fn reconcile(&mut self) {
        // Each pass either settles or removes a vanished head, so this ends.
        for _ in 0..16 {
            let Some((&sequence, node)) = self.members.iter().next() else {
                self.head = None;
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
                });
                // The previous leader is gone; until the new head is confirmed, nobody leads.
                self.publish(None);
            }
            let path = format!("{}/{}", self.path, node);
            let local_unconfirmed = self.local.get(&node).is_some_and(|l| !l.confirmed);
            if local_unconfirmed {
                if self.confirm(sequence, &node, &path).await {
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
                    let leader = record.elected_at().map(|since| LeaderInfo {
                        election: self.name.clone(),
                        candidate: record.participant.clone(),
                        value: record.value.clone(),
                        fencing_token: FencingToken(stat.czxid as u64),
                        since,
                    });
                    if let Some(head) = self.head.as_mut() {
                        head.fetched = true;
                        head.known_mzxid = stat.mzxid;
                        let changed = head.leader != leader;
                        head.leader = leader.clone();
                        if changed {
                            if let (Some(l), Some(local)) = (&leader, self.local.get(&node)) {
                                if local.confirmed {
                                    let _ = local.signals.send(MemberSignal::Proclaimed(l.clone()));
                                }
                            }
                        }
                    }
                    self.publish(leader);
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

    /// Ownership check and `since` in one write: before `elected` the gateway must see its own
    /// znode still present and owned by its current session (CURATOR-696).
    /// Returns true to re-run reconcile (the head changed), false when settled.
    async fn confirm(&mut self, sequence: i64, node: &str, path: &str) -> bool {
        let Some(local) = self.local.get(node) else {
            return true;
        };
        let mut record = local.record.clone();
        record.elected_at_ms = now_ms();
        match self
            .session
            .zk
            .set_data(path, &record.encode_to_vec(), None)
            .await
        {
            Ok(stat) if stat.ephemeral_owner == self.session.session_id() => {
                let leader = LeaderInfo {
                    election: self.name.clone(),
                    candidate: record.participant.clone(),
                    value: record.value.clone(),
                    fencing_token: FencingToken(stat.czxid as u64),
                    since: record
                        .elected_at()
                        .unwrap_or_else(std::time::SystemTime::now),
                };
                let failover = self.head_gone_at.take().map(|t| t.elapsed());
                if let Some(local) = self.local.get_mut(node) {
                    local.confirmed = true;
                    local.record = record;
                    let _ = local.signals.send(MemberSignal::Elected {
                        leader: leader.clone(),
                        failover,
                    });
                }
                if let Some(head) = self.head.as_mut() {
                    head.leader = Some(leader.clone());
                    head.fetched = true;
                    head.known_mzxid = stat.mzxid;
                }
                self.publish(Some(leader));
                false
            }
            Ok(stat) => {
                tracing::error!(queue = %self.name, owner = stat.ephemeral_owner, "queue head is not owned by our session; not electing it");
                self.forget(sequence, node);
                true
            }
            Err(zkc::Error::NoNode) => {
                self.forget(sequence, node);
                true
            }
            Err(e) => {
                tracing::debug!(queue = %self.name, error = %e, "confirming the head failed; will retry after reconnect");
                false
            }
        }
    }
}
