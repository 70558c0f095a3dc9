//! The queues under a name prefix as ZooKeeper shows them — fleet-wide, whichever gateway
//! serves their streams — for the `/ui` page: per election and lock, who holds, how many wait
//! and since when.
//!
//! One actor per prefix per gateway ([`FleetRegistry`]), started by the first page that shows
//! the prefix and stopped with the last, so a page viewer costs ZooKeeper nothing. It holds one
//! persistent *recursive* watch on the gateway's root — not on a folder: the elections folder
//! carries the `ObserveMany` directory's non-recursive watch ([`super::directory`]), and
//! ZooKeeper keeps one watch mode per session and path, so a second watch there would replace
//! it. It lists the queues under the prefix and reads their members' records once (paged
//! multi-reads, G10), then follows the events: members created or changed are read (one
//! paged multi-read for every event already received), a member deleted costs nothing, and
//! events of names outside the prefix are dropped without a read. So with a page open, a
//! change costs this gateway one `getData` per member created or written, however many people
//! look at the page; without one, nothing.
//!
//! Who holds is judged by [`summarize`], a pure rule: an election's head; a lock's members
//! admitted by the queue's *agreed* permit count ([`AgreedScan`], the rule `Holders` uses), so a
//! refused newcomer is neither holding nor waiting. Everyone else waits, since
//! [`since`](super::record::since): the time its gateway stamped in its record, else the
//! znode's creation time.
//!
//! A change of the session's link makes the view unsynced; once the link is up the watch is
//! placed again (after a reconnect) and everything is listed and read again, as persistent
//! watches miss events while disconnected (ZOOKEEPER-4698). Member znode names are never kept
//! in the view nor logged: their protected id is a lease's secret.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::SystemTime;

use futures::StreamExt;
use tokio::sync::watch;
use zookeeper_client as zkc;
use zookeeper_client::{EventType, SessionState};

use super::error::CoordError;
use super::folder_watch::{self, FolderActor, Waits};
use super::link::Link;
use super::lock::{AgreedScan, Judged};
use super::pool::SessionPool;
use super::record::{since, NodeRecord};
use super::session::ZkSession;
use super::types::{MemberMode, MemberName, QueueKind, QueueName};

/// One member as read from ZooKeeper (never its znode name).
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub sequence: i64,
    pub mode: MemberMode,
    pub participant: String,
    /// The permit count it agreed to (locks; 0 reads as 1).
    pub permits: u32,
    /// Its creation zxid: the fencing token it holds with.
    pub fencing_token: u64,
    /// Its record's time, else its znode's creation time ([`since`]).
    pub since: SystemTime,
}

/// A holder as the page shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Holding {
    pub participant: String,
    pub fencing_token: u64,
    pub since: SystemTime,
}

/// One queue as the page shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueSummary {
    /// In queue order.
    pub holders: Vec<Holding>,
    pub waiting: usize,
    /// The longest waiter's [`Seen::since`], if any waits.
    pub waiting_since: Option<SystemTime>,
}

/// Who holds and who waits in a queue of `kind` whose members are `members`, in queue order.
pub fn summarize(kind: QueueKind, members: &[Seen]) -> QueueSummary {
    let mut out = QueueSummary::default();
    let mut scan = AgreedScan::default();
    let mut admitting = true;
    for (i, m) in members.iter().enumerate() {
        let holds = admitting
            && match kind {
                QueueKind::Election => i == 0,
                QueueKind::Lock => match scan.judge(m.mode, m.permits) {
                    Judged::Holds => true,
                    // Being refused: its znode goes before its stream hears anything.
                    Judged::Refused => continue,
                    Judged::Stop => {
                        admitting = false;
                        false
                    }
                },
            };
        if holds {
            out.holders.push(Holding {
                participant: m.participant.clone(),
                fencing_token: m.fencing_token,
                since: m.since,
            });
        } else {
            out.waiting += 1;
            out.waiting_since = Some(out.waiting_since.map_or(m.since, |s| s.min(m.since)));
        }
    }
    out
}

/// `"election"` or `"lock"`, as the page names kinds.
pub fn kind_word(kind: QueueKind) -> &'static str {
    match kind {
        QueueKind::Election => "election",
        QueueKind::Lock => "lock",
    }
}

/// The queues under the prefix, as of the newest reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetView {
    /// False from a change of the link until everything is listed and read again.
    pub synced: bool,
    /// By kind word ([`kind_word`]) and name; queues without members are left out.
    pub queues: Arc<BTreeMap<(&'static str, String), QueueSummary>>,
}

/// A running fleet actor; it stops when the last handle and view are dropped.
#[derive(Debug)]
pub struct Fleet {
    view: watch::Receiver<FleetView>,
}

impl Fleet {
    pub fn view(&self) -> watch::Receiver<FleetView> {
        self.view.clone()
    }

    /// Whether the actor has stopped (its session ended).
    fn is_closed(&self) -> bool {
        self.view.has_changed().is_err()
    }
}

/// At most one [`Fleet`] per prefix per gateway, started on first use.
#[derive(Debug, Default)]
pub struct FleetRegistry(Mutex<HashMap<String, Weak<Fleet>>>);

impl FleetRegistry {
    fn running(&self, prefix: &str) -> Option<Arc<Fleet>> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(prefix)
            .and_then(Weak::upgrade)
            .filter(|f| !f.is_closed())
    }
}

/// [`Coordinator::fleet`](super::Coordinator::fleet), served over the pool.
pub(super) async fn fleet(
    pool: &SessionPool,
    registry: &FleetRegistry,
    prefix: &str,
) -> Result<Arc<Fleet>, CoordError> {
    if let Some(f) = registry.running(prefix) {
        return Ok(f);
    }
    // On the session `ObserveMany`'s folder watch uses: one watch of each per gateway.
    let session = pool.session_from(0)?;
    let f = start(&session, prefix).await?;
    let mut slots = registry.0.lock().unwrap_or_else(|p| p.into_inner());
    // Another page may have started one meanwhile: keep the first, drop ours.
    if let Some(existing) = slots.get(prefix).and_then(Weak::upgrade) {
        if !existing.is_closed() {
            return Ok(existing);
        }
    }
    slots.retain(|_, w| w.strong_count() > 0);
    slots.insert(prefix.to_owned(), Arc::downgrade(&f));
    Ok(f)
}

/// The members of one queue, by znode name (kept here only, never shown).
type Members = BTreeMap<String, Seen>;

/// What the actor knows: the members of every queue under the prefix.
#[derive(Debug, Default)]
struct Model {
    queues: BTreeMap<(&'static str, String), Members>,
    summaries: BTreeMap<(&'static str, String), QueueSummary>,
}

impl Model {
    fn summarize(&mut self, key: &(&'static str, String)) {
        let kind = kind_of(key.0);
        match self.queues.get(key).filter(|m| !m.is_empty()) {
            Some(members) => {
                let mut ordered: Vec<&Seen> = members.values().collect();
                ordered.sort_by_key(|m| m.sequence);
                let ordered: Vec<Seen> = ordered.into_iter().cloned().collect();
                self.summaries
                    .insert(key.clone(), summarize(kind, &ordered));
            }
            None => {
                self.queues.remove(key);
                self.summaries.remove(key);
            }
        }
    }
}

fn kind_of(word: &str) -> QueueKind {
    if word == "lock" {
        QueueKind::Lock
    } else {
        QueueKind::Election
    }
}

/// Where an event happened, under the root.
#[derive(Debug, PartialEq)]
enum At {
    Queue(QueueKind, String),
    Member(QueueKind, String, String),
    Elsewhere,
}

/// Parses a watched path (`<root>/<folder>/<queue>[/<member>]`).
fn locate(root: &str, path: &str) -> At {
    let Some(rest) = path.strip_prefix(root).and_then(|r| r.strip_prefix('/')) else {
        return At::Elsewhere;
    };
    let mut parts = rest.split('/');
    let kind = match parts.next() {
        Some("elections") => QueueKind::Election,
        Some("locks") => QueueKind::Lock,
        _ => return At::Elsewhere,
    };
    match (parts.next(), parts.next(), parts.next()) {
        (Some(q), None, None) => At::Queue(kind, q.to_owned()),
        (Some(q), Some(m), None) => At::Member(kind, q.to_owned(), m.to_owned()),
        _ => At::Elsewhere,
    }
}

async fn start(session: &ZkSession, prefix: &str) -> Result<Arc<Fleet>, CoordError> {
    let root = session.cfg.root_path().to_owned();
    let mut link = session.link();
    link.borrow_and_update();
    let watch_path = if root.is_empty() { "/" } else { root.as_str() };
    // A persistent recursive watch, as on a queue, here on the whole root.
    let watcher = session.zk.watch_queue(watch_path).await?;
    let (tx, rx) = watch::channel(FleetView::default());
    let mut actor = FleetActor {
        zk: session.zk.clone(),
        cfg: session.cfg.clone(),
        root,
        prefix: prefix.to_owned(),
        link,
        link_open: true,
        watcher,
        rewatch: false,
        resync: true,
        to_read: BTreeSet::new(),
        changed: BTreeSet::new(),
        model: Model::default(),
        tx,
    };
    actor.relist().await?;
    tokio::spawn(folder_watch::run(actor));
    Ok(Arc::new(Fleet { view: rx }))
}

struct FleetActor {
    zk: super::zk::Zk,
    cfg: Arc<super::config::CoordConfig>,
    root: String,
    prefix: String,
    link: watch::Receiver<Link>,
    link_open: bool,
    watcher: zkc::PersistentWatcher,
    /// A reconnect may have dropped the watch: it is placed again before the next listing.
    rewatch: bool,
    /// Everything is to be listed and read again (the link changed).
    resync: bool,
    /// Members created or written since the last read: (kind word, queue, znode name).
    to_read: BTreeSet<(&'static str, String, String)>,
    /// Queues whose members changed since the last publication.
    changed: BTreeSet<(&'static str, String)>,
    model: Model,
    tx: watch::Sender<FleetView>,
}

impl FolderActor for FleetActor {
    type View = FleetView;

    fn waits(&mut self) -> Waits<'_, FleetView> {
        Waits {
            tx: &self.tx,
            watcher: &mut self.watcher,
            link: &mut self.link,
            link_open: &mut self.link_open,
        }
    }

    /// A failed listing or read.
    fn retry_pending(&self) -> bool {
        self.resync || !self.to_read.is_empty()
    }

    fn on_event(&mut self, ev: zkc::WatchedEvent) -> bool {
        FleetActor::on_event(self, ev)
    }

    fn on_link_change(&mut self) -> bool {
        if let Link::Lost(_) = &*self.link.borrow_and_update() {
            return false;
        }
        self.unsynced();
        true
    }

    async fn work(&mut self) {
        if !matches!(*self.link.borrow(), Link::Connected) {
            return;
        }
        if self.resync {
            if let Err(e) = self.relist().await {
                tracing::debug!(error = %e, "listing the queues for /ui failed; retrying");
            }
        } else if !self.to_read.is_empty() {
            self.read_changed().await;
        } else {
            self.publish();
        }
    }
}

impl FleetActor {
    /// Applies a watch event; false when the session is over.
    fn on_event(&mut self, ev: zkc::WatchedEvent) -> bool {
        let at = match ev.event_type {
            EventType::Session => {
                match ev.session_state {
                    SessionState::SyncConnected | SessionState::ConnectedReadOnly => {
                        self.rewatch = true;
                        self.unsynced();
                    }
                    SessionState::Disconnected => {}
                    _ => return false,
                }
                return true;
            }
            _ => locate(&self.root, &ev.path),
        };
        let (kind, queue, member) = match at {
            At::Queue(kind, queue) => (kind, queue, None),
            At::Member(kind, queue, member) => (kind, queue, Some(member)),
            At::Elsewhere => return true,
        };
        if !queue.starts_with(&self.prefix) || QueueName::new(queue.as_str()).is_err() {
            return true;
        }
        let key = (kind_word(kind), queue);
        match (ev.event_type, member) {
            (EventType::NodeDeleted, None) => {
                self.model.queues.remove(&key);
                self.to_read.retain(|(k, q, _)| (*k, q) != (key.0, &key.1));
                self.changed.insert(key);
            }
            (EventType::NodeDeleted, Some(m)) => {
                self.to_read.remove(&(key.0, key.1.clone(), m.clone()));
                if let Some(members) = self.model.queues.get_mut(&key) {
                    members.remove(&m);
                }
                self.changed.insert(key);
            }
            (EventType::NodeCreated | EventType::NodeDataChanged, Some(m))
                if MemberName::parse(&m).is_some() =>
            {
                self.to_read.insert((key.0, key.1, m));
            }
            _ => {}
        }
        true
    }

    fn unsynced(&mut self) {
        self.resync = true;
        self.tx
            .send_if_modified(|v| std::mem::replace(&mut v.synced, false));
    }

    /// Reads `members` (kind word, queue, znode name) in paged multi-reads: `None` for one
    /// gone, or not a member (a child that is not ephemeral).
    async fn read(
        &self,
        members: &[(&'static str, String, String)],
    ) -> Result<Vec<Option<Seen>>, zkc::Error> {
        let mut out = Vec::with_capacity(members.len());
        // One plan per kind: their records' bounds differ.
        for kind in [QueueKind::Election, QueueKind::Lock] {
            let word = kind_word(kind);
            let of_kind: Vec<&(&'static str, String, String)> =
                members.iter().filter(|(k, _, _)| *k == word).collect();
            if of_kind.is_empty() {
                continue;
            }
            let paths: Vec<String> = of_kind
                .iter()
                .map(|(_, q, m)| format!("{}/{}/{q}/{m}", self.root, kind.folder()))
                .collect();
            let data = self
                .zk
                .get_many(&paths, self.cfg.member_reads(kind))
                .await?;
            out.extend(of_kind.into_iter().zip(data).map(|((_, _, m), d)| {
                let name = MemberName::parse(m)?;
                let (bytes, stat) = d.filter(|(_, stat)| stat.ephemeral_owner != 0)?;
                let record = NodeRecord::decode_lossy(&bytes);
                Some(Seen {
                    sequence: name.sequence,
                    mode: name.mode,
                    since: since(&record, &stat),
                    participant: record.participant,
                    permits: record.permits,
                    fencing_token: stat.czxid as u64,
                })
            }));
        }
        Ok(out)
    }

    /// Reads the members created or written since the last read, then publishes.
    async fn read_changed(&mut self) {
        // Elections first, then locks: the order `read` answers in.
        let mut members: Vec<_> = std::mem::take(&mut self.to_read).into_iter().collect();
        members.sort_by_key(|(k, _, _)| *k != "election");
        match self.read(&members).await {
            Ok(read) => {
                for ((k, q, m), seen) in members.into_iter().zip(read) {
                    let key = (k, q);
                    match seen {
                        Some(s) => {
                            self.model
                                .queues
                                .entry(key.clone())
                                .or_default()
                                .insert(m, s);
                        }
                        None => {
                            if let Some(ms) = self.model.queues.get_mut(&key) {
                                ms.remove(&m);
                            }
                        }
                    }
                    self.changed.insert(key);
                }
                self.publish();
            }
            Err(e) => {
                tracing::debug!(error = %e, "reading members for /ui failed; retrying");
                // Newer events may have asked for some of them again meanwhile: one read.
                self.to_read.extend(members);
            }
        }
    }

    /// Places the watch again if a reconnect may have dropped it, then lists every queue under
    /// the prefix and reads all their members, and publishes a synced view.
    async fn relist(&mut self) -> Result<(), zkc::Error> {
        if self.rewatch {
            let path = if self.root.is_empty() {
                "/"
            } else {
                self.root.as_str()
            };
            // The old watcher goes after the new one exists (no RemoveWatches is sent).
            self.watcher = self.zk.watch_queue(path).await?;
            self.rewatch = false;
        }
        let mut members = Vec::new();
        for kind in [QueueKind::Election, QueueKind::Lock] {
            let folder = format!("{}/{}", self.root, kind.folder());
            let queues: Vec<String> = absent_as_empty(self.zk.list_children(&folder).await)?
                .into_iter()
                .filter(|q| q.starts_with(&self.prefix) && QueueName::new(q.as_str()).is_ok())
                .collect();
            let zk = &self.zk;
            let mut listings = futures::stream::iter(queues)
                .map(|q| {
                    let path = format!("{folder}/{q}");
                    async move { (q, absent_as_empty(zk.list_children(&path).await)) }
                })
                .buffered(16);
            while let Some((q, children)) = listings.next().await {
                for m in children? {
                    if MemberName::parse(&m).is_some() {
                        members.push((kind_word(kind), q.clone(), m));
                    }
                }
            }
        }
        let read = self.read(&members).await?;
        let mut model = Model::default();
        for ((k, q, m), seen) in members.into_iter().zip(read) {
            if let Some(s) = seen {
                model.queues.entry((k, q)).or_default().insert(m, s);
            }
        }
        let keys: Vec<_> = model.queues.keys().cloned().collect();
        for key in &keys {
            model.summarize(key);
        }
        self.model = model;
        self.changed.clear();
        // Reads asked for before the listing are in it.
        self.to_read.clear();
        self.resync = false;
        self.tx.send_if_modified(|v| {
            let fresh = FleetView {
                synced: true,
                queues: Arc::new(self.model.summaries.clone()),
            };
            let changed = *v != fresh;
            *v = fresh;
            changed
        });
        Ok(())
    }

    /// Publishes the queues that changed.
    fn publish(&mut self) {
        if self.changed.is_empty() {
            return;
        }
        for key in std::mem::take(&mut self.changed) {
            self.model.summarize(&key);
        }
        let queues = Arc::new(self.model.summaries.clone());
        self.tx.send_if_modified(|v| {
            let changed = *v.queues != *queues;
            v.queues = queues;
            changed
        });
    }
}

fn absent_as_empty(listing: Result<Vec<String>, zkc::Error>) -> Result<Vec<String>, zkc::Error> {
    match listing {
        Err(zkc::Error::NoNode) => Ok(Vec::new()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn seen(sequence: i64, mode: MemberMode, permits: u32, at: u64) -> Seen {
        Seen {
            sequence,
            mode,
            participant: format!("p{sequence}"),
            permits,
            fencing_token: 100 + sequence as u64,
            since: UNIX_EPOCH + Duration::from_secs(at),
        }
    }

    #[test]
    fn who_holds_and_who_waits() {
        use MemberMode::{Read as R, Write as W};
        let t = |s: u64| Some(UNIX_EPOCH + Duration::from_secs(s));
        #[allow(clippy::type_complexity)]
        let cases: &[(
            QueueKind,
            &[(MemberMode, u32, u64)],
            &[i64],
            usize,
            Option<SystemTime>,
        )] = &[
            // kind, members (mode, permits, since) → holders (sequences), waiting, longest wait
            (QueueKind::Election, &[], &[], 0, None),
            (QueueKind::Election, &[(W, 0, 5)], &[0], 0, None),
            // The longest wait is the earliest time among the waiters, not the head's.
            (
                QueueKind::Election,
                &[(W, 0, 1), (W, 0, 9), (W, 0, 7)],
                &[0],
                2,
                t(7),
            ),
            // A mutex: one holder.
            (
                QueueKind::Lock,
                &[(W, 1, 1), (W, 1, 2), (W, 1, 3)],
                &[0],
                2,
                t(2),
            ),
            // A semaphore of 2.
            (
                QueueKind::Lock,
                &[(W, 2, 1), (W, 2, 2), (W, 2, 3)],
                &[0, 1],
                1,
                t(3),
            ),
            // A refused newcomer (another count) neither holds nor waits, yet is counted
            // ahead of the members behind it (as their gateways count it): they wait.
            (
                QueueKind::Lock,
                &[(W, 2, 1), (W, 5, 2), (W, 2, 3), (W, 2, 4)],
                &[0],
                2,
                t(3),
            ),
            (
                QueueKind::Lock,
                &[(W, 3, 1), (W, 5, 2), (W, 3, 3), (W, 3, 4)],
                &[0, 2],
                1,
                t(4),
            ),
            // Readers share; a writer behind them waits, and so does everyone behind it.
            (
                QueueKind::Lock,
                &[(R, 1, 1), (R, 1, 2), (W, 1, 3), (R, 1, 4)],
                &[0, 1],
                2,
                t(3),
            ),
        ];
        for (kind, members, holders, waiting, waiting_since) in cases {
            let ms: Vec<Seen> = members
                .iter()
                .enumerate()
                .map(|(i, &(mode, permits, at))| seen(i as i64, mode, permits, at))
                .collect();
            let s = summarize(*kind, &ms);
            let got: Vec<i64> = s
                .holders
                .iter()
                .map(|h| h.fencing_token as i64 - 100)
                .collect();
            assert_eq!(
                (got.as_slice(), s.waiting, s.waiting_since),
                (*holders, *waiting, *waiting_since),
                "{kind:?} {members:?}"
            );
        }
    }

    #[test]
    fn watched_paths() {
        let root = "/zkgate";
        let cases = [
            (
                "/zkgate/elections/db",
                At::Queue(QueueKind::Election, "db".into()),
            ),
            (
                "/zkgate/locks/db/w-x-0000000001",
                At::Member(QueueKind::Lock, "db".into(), "w-x-0000000001".into()),
            ),
            ("/zkgate", At::Elsewhere),
            ("/zkgate/elections", At::Elsewhere),
            ("/zkgate/other/x", At::Elsewhere),
            ("/zkgate/locks/a/b/c", At::Elsewhere),
            ("/zkgatex/locks/a", At::Elsewhere),
        ];
        for (path, at) in cases {
            assert_eq!(locate(root, path), at, "{path}");
        }
        // The root "/" has the empty root path.
        assert_eq!(
            locate("", "/elections/db"),
            At::Queue(QueueKind::Election, "db".into())
        );
    }
}
