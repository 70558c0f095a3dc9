//! `ObserveMany`: one stream for every election under a prefix plus a list of names.
//!
//! Nothing here talks to ZooKeeper per stream. Which elections exist comes from the session's
//! [`Directory`](super::directory) (one folder watch per session, shared by every stream), and
//! each election's leader from its queue actor (one watch per election per gateway, shared with
//! `Observe` and the candidates). A stream only follows those in-memory views, so the gateway's
//! ZooKeeper cost of a prefix does not grow with the number of streams (G4).
//!
//! What a stream sends is decided by two pure rules, table-tested below: [`wanted`] (which
//! elections the stream follows, given the folder, the request and the caller's filter) and
//! [`next_state`] (whether a queue's view is news for this stream, by the rule `Observe` uses
//! too, [`Told`]: first state once the view is synced, then only changes, and never a leader
//! with a smaller token than one already sent).
//!
//! Under a policy the caller's filter is judged again at every reload ([`ManySpec::rejudge`]),
//! not only when the folder changes: a listed name withdrawn is reported
//! ([`ManyEvent::Withdrawn`]: the API ends the stream `PERMISSION_DENIED`), a prefix's name
//! withdrawn leaves the stream as an election leaving the folder does (a vacancy if a leader was
//! sent), a name newly allowed is followed.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;
use tokio_stream::StreamMap;

use super::directory::{Directory, DirectoryView};
use super::error::{CoordError, Limit, Retry};
use super::fanout::Told;
use super::link::Link;
use super::pool::SessionPool;
use super::queue::{QueueHandle, QueueView};
use super::types::{Holder, QueueKind, QueueName};
use crate::metrics as m;

/// Elections one `ObserveMany` stream may follow at once, by default.
pub const DEFAULT_MAX_OBSERVE_MANY_ELECTIONS: usize = 1_000;

/// Which names a caller may see: the API layer passes the caller's `observe` filter under a
/// policy (`api::observe_many::visible_to`), judged at every change of the folder and whenever
/// [`ManySpec::rejudge`] moves (a policy reload).
pub type Visible = Arc<dyn Fn(&QueueName) -> bool + Send + Sync>;

/// What an `ObserveMany` stream asks for.
#[derive(Clone)]
pub struct ManySpec {
    /// Every election whose name starts with this (see [`wanted`] for the empty prefix).
    pub prefix: String,
    /// Elections followed by name, whether or not they exist.
    pub names: BTreeSet<QueueName>,
    /// At most this many elections at once, or the stream ends `RESOURCE_EXHAUSTED`.
    pub max_elections: usize,
    /// The caller's filter (policy hook).
    pub visible: Visible,
    /// Moves when `visible` may answer differently (a policy reload): the names followed are
    /// judged again at once, not only at the folder's next change. A listed name no longer
    /// visible is reported as [`ManyEvent::Withdrawn`]; a prefix's name no longer visible is
    /// dropped like an election that left the folder (a vacancy if a leader was sent); a name
    /// newly visible is followed (its first state, then its changes).
    pub rejudge: Option<watch::Receiver<u64>>,
}

impl std::fmt::Debug for ManySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManySpec")
            .field("prefix", &self.prefix)
            .field("names", &self.names)
            .field("max_elections", &self.max_elections)
            .finish_non_exhaustive()
    }
}

/// One message of an `ObserveMany` stream.
#[derive(Debug, Clone, PartialEq)]
pub enum ManyEvent {
    /// An election's leader, `None` while vacant.
    State(QueueName, Option<Holder>),
    /// Every election followed when the stream opened has had its first state.
    SnapshotComplete,
    /// A name of [`ManySpec::names`] that the caller's filter no longer allows (a reload
    /// withdrew it): it is no longer followed and nothing more is said of it. The API layer
    /// ends the stream `PERMISSION_DENIED` naming it, the answer opening the stream with that
    /// name would now get.
    Withdrawn(QueueName),
}

/// The elections a stream follows: the listed names, plus the folder's children that start
/// with the prefix — all of them when neither a prefix nor names are given, none when only
/// names are (an empty prefix "matches" everything, and a caller naming elections means just
/// those). Children that are not valid names (foreign znodes) are left out; so is every name
/// the caller may not see.
pub fn wanted(
    prefix: &str,
    names: &BTreeSet<QueueName>,
    folder: &BTreeSet<String>,
    visible: &dyn Fn(&QueueName) -> bool,
) -> BTreeSet<QueueName> {
    let by_prefix = !prefix.is_empty() || names.is_empty();
    let mut out: BTreeSet<QueueName> = names.iter().filter(|n| visible(n)).cloned().collect();
    if by_prefix {
        out.extend(
            folder
                .range::<str, _>((
                    std::ops::Bound::Included(prefix),
                    std::ops::Bound::Unbounded,
                ))
                .take_while(|c| c.starts_with(prefix))
                .filter_map(|c| QueueName::new(c.clone()).ok())
                .filter(|n| visible(n)),
        );
    }
    out
}

/// What one stream last sent about one election.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sent {
    /// The state sent last; `None` before the first.
    pub last: Option<Option<Holder>>,
    pub told: Told,
}

/// Whether `view` is news after `sent` (the rule of [`Told`]): `Some(leader)` to send.
pub fn next_state(sent: &Sent, view: &QueueView) -> Option<Option<Holder>> {
    let same = sent.last.as_ref() == Some(view.leader());
    let token = view.leader().as_ref().map(|l| l.fencing_token);
    sent.told
        .news(view.synced(), same, token)
        .then(|| view.leader().clone())
}

/// Resolves when `rejudge` moves (`Err` once its sender is gone); never without one.
pub async fn moved(
    rejudge: &mut Option<watch::Receiver<u64>>,
) -> Result<(), watch::error::RecvError> {
    match rejudge {
        Some(r) => r.changed().await,
        None => std::future::pending().await,
    }
}

type Views = Pin<Box<dyn Stream<Item = Option<QueueView>> + Send>>;

struct Followed {
    _queue: Arc<QueueHandle>,
    sent: Sent,
}

/// An open `ObserveMany` stream (see the module docs).
pub struct ManyObservation {
    spec: ManySpec,
    pool: Arc<SessionPool>,
    _directory: Arc<Directory>,
    folder: watch::Receiver<DirectoryView>,
    link: watch::Receiver<Link>,
    /// Whether the folder's session is stranded on a diverged server (`coord::divergence`):
    /// the stream then ends `UNAVAILABLE`, as a single Observe does.
    stranded: watch::Receiver<bool>,
    followed: HashMap<QueueName, Followed>,
    views: StreamMap<QueueName, Views>,
    /// Elections still owed their first state before `snapshot_complete`; `None` once sent.
    snapshot: Option<HashSet<QueueName>>,
    out: VecDeque<ManyEvent>,
    rejudge: Option<watch::Receiver<u64>>,
    _gauge: m::GaugeGuard,
    _stream: tokio_util::task::task_tracker::TaskTrackerToken,
}

/// Resolves when the folder's session is stranded on a diverged server (`coord::divergence`):
/// its listings of the folder cannot be trusted either.
async fn stranded(stranded: &mut watch::Receiver<bool>) {
    if stranded.wait_for(|s| *s).await.is_err() {
        // The session is gone: its link says so.
        std::future::pending::<()>().await;
    }
}

/// [`Coordinator::observe_many`](super::Coordinator::observe_many), served over the pool.
pub(super) async fn observe_many(
    pool: &Arc<SessionPool>,
    spec: ManySpec,
) -> Result<ManyObservation, CoordError> {
    let stream = pool.stream_token();
    // The folder's watch lives on one session of the pool (the first connected one from
    // slot 0), so a pool has one such watch, not one per session.
    let session = pool.session_from(0)?;
    let directory = session.directory().await?;
    let mut spec = spec;
    let mut rejudge = spec.rejudge.take();
    // Changes before the opening's own judgement below are already in it.
    if let Some(r) = rejudge.as_mut() {
        r.borrow_and_update();
    }
    let mut obs = ManyObservation {
        spec,
        rejudge,
        pool: pool.clone(),
        folder: directory.view(),
        _directory: directory,
        link: session.link(),
        stranded: session.stranded_changes(),
        followed: HashMap::new(),
        views: StreamMap::new(),
        snapshot: Some(HashSet::new()),
        out: VecDeque::new(),
        _gauge: m::GaugeGuard::raise(m::observers_active),
        _stream: stream,
    };
    obs.link.borrow_and_update();
    obs.folder.borrow_and_update();
    // Opening the stream waits for a synced folder (a fresh directory is synced).
    while !obs.folder.borrow().synced {
        obs.wait_folder().await?;
    }
    obs.follow_folder().await?;
    obs.check_snapshot();
    Ok(obs)
}

impl ManyObservation {
    /// The next message: the snapshot (one state per election, then `SnapshotComplete`), then
    /// changes.
    ///
    /// # Errors
    /// `SessionLost` when the gateway's session ends, `WatchEnded` when an election's watch
    /// ends, `Unavailable` (`Retry::Stranded`) when the folder's session is stranded on a
    /// diverged server, or an election's is (the client observes again, on any gateway);
    /// `LimitReached` when more elections than `max_elections` (or the gateway's `max_queues`)
    /// would be followed.
    ///
    /// # Cancellation safety
    /// Cancellation safe between elections: a change seen while following a new election is
    /// kept for the next call.
    pub async fn next(&mut self) -> Result<ManyEvent, CoordError> {
        loop {
            if let Some(e) = self.out.pop_front() {
                return Ok(e);
            }
            tokio::select! {
                r = self.folder.changed() => {
                    if r.is_err() {
                        return Err(Retry::WatchEnded.into());
                    }
                    if self.folder.borrow().synced {
                        self.follow_folder().await?;
                    }
                }
                r = self.link.changed() => {
                    if r.is_err() {
                        return Err(Retry::ObserveClosed.into());
                    }
                    if let Link::Lost(reason) = &*self.link.borrow_and_update() {
                        return Err(CoordError::SessionLost(*reason));
                    }
                }
                () = stranded(&mut self.stranded) => {
                    return Err(Retry::Stranded.into());
                }
                Some((name, view)) = self.views.next() => match view {
                    // An election of a stranded session (`QueueView::stranded`).
                    Some(view) if view.is_stranded() => return Err(Retry::Stranded.into()),
                    Some(view) => self.on_view(name, &view),
                    None => return Err(Retry::WatchEnded.into()),
                },
                r = moved(&mut self.rejudge) => {
                    if r.is_err() {
                        // Nothing can change the filter any more: judged by the folder alone.
                        self.rejudge = None;
                    } else if self.folder.borrow().synced {
                        // (An unsynced folder is judged again by its next listing.)
                        self.follow_folder().await?;
                    }
                }
            }
        }
    }

    async fn wait_folder(&mut self) -> Result<(), CoordError> {
        tokio::select! {
            r = self.folder.changed() => r.map_err(|_| Retry::WatchEnded.into()),
            r = self.link.changed() => {
                if r.is_err() {
                    return Err(Retry::ObserveClosed.into());
                }
                match &*self.link.borrow_and_update() {
                    Link::Lost(reason) => Err(CoordError::SessionLost(*reason)),
                    _ => Ok(()),
                }
            }
        }
    }

    /// Follows what the folder now says: new elections are followed, those gone from the
    /// folder (and not named) dropped, with a vacancy sent if the stream last saw a leader.
    async fn follow_folder(&mut self) -> Result<(), CoordError> {
        let names = self.folder.borrow_and_update().names.clone();
        // Listed names the filter no longer allows are reported once and forgotten.
        let visible = self.spec.visible.clone();
        let (kept, withdrawn): (BTreeSet<QueueName>, BTreeSet<QueueName>) =
            std::mem::take(&mut self.spec.names)
                .into_iter()
                .partition(|n| visible(n));
        self.spec.names = kept;
        self.out
            .extend(withdrawn.into_iter().map(ManyEvent::Withdrawn));
        let want = wanted(
            &self.spec.prefix,
            &self.spec.names,
            &names,
            &*self.spec.visible,
        );
        let gone: Vec<QueueName> = self
            .followed
            .keys()
            .filter(|n| !want.contains(*n))
            .cloned()
            .collect();
        for name in gone {
            self.views.remove(&name);
            if let Some(f) = self.followed.remove(&name) {
                if f.sent.last.is_some() {
                    self.out.push_back(ManyEvent::State(name.clone(), None));
                }
            }
            if let Some(s) = self.snapshot.as_mut() {
                s.remove(&name);
            }
        }
        let new: Vec<QueueName> = want
            .into_iter()
            .filter(|n| !self.followed.contains_key(n))
            .collect();
        if self.followed.len() + new.len() > self.spec.max_elections {
            return Err(Limit::ElectionsPerObserveMany(self.spec.max_elections).reject());
        }
        for name in new {
            let session = self.pool.session_for(QueueKind::Election, &name)?;
            let queue = session.queue(QueueKind::Election, &name).await?;
            let views: Views = Box::pin(
                WatchStream::new(queue.observe_view())
                    .map(Some)
                    .chain(futures::stream::once(async { None })),
            );
            self.views.insert(name.clone(), views);
            self.followed.insert(
                name.clone(),
                Followed {
                    _queue: queue,
                    sent: Sent::default(),
                },
            );
            if let Some(s) = self.snapshot.as_mut() {
                s.insert(name);
            }
        }
        self.check_snapshot();
        Ok(())
    }

    fn on_view(&mut self, name: QueueName, view: &QueueView) {
        let Some(f) = self.followed.get_mut(&name) else {
            return;
        };
        if let Some(leader) = next_state(&f.sent, view) {
            f.sent.told.sent(leader.as_ref().map(|l| l.fencing_token));
            f.sent.last = Some(leader.clone());
            self.out.push_back(ManyEvent::State(name.clone(), leader));
            if let Some(s) = self.snapshot.as_mut() {
                s.remove(&name);
            }
            self.check_snapshot();
        }
    }

    fn check_snapshot(&mut self) {
        if self.snapshot.as_ref().is_some_and(HashSet::is_empty) {
            self.snapshot = None;
            self.out.push_back(ManyEvent::SnapshotComplete);
        }
    }

    /// Elections followed now.
    pub fn followed(&self) -> usize {
        self.followed.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coord::types::FencingToken;

    fn n(s: &str) -> QueueName {
        QueueName::new(s).unwrap()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn names(names: &[&str]) -> BTreeSet<QueueName> {
        names.iter().map(|s| n(s)).collect()
    }

    #[test]
    fn wanted_elections() {
        let folder = set(&[
            "a",
            "billing.db",
            "billing.web",
            "billingx",
            "cron",
            "bad name",
        ]);
        let all = |_: &QueueName| true;
        let no_web = |q: &QueueName| q.as_str() != "billing.web";
        #[allow(clippy::type_complexity)]
        let cases: &[(&str, &[&str], &dyn Fn(&QueueName) -> bool, &[&str])] = &[
            // prefix, names, filter → followed
            ("billing.", &[], &all, &["billing.db", "billing.web"]),
            (
                "billing",
                &[],
                &all,
                &["billing.db", "billing.web", "billingx"],
            ),
            (
                "billing.",
                &["cron", "later"],
                &all,
                &["billing.db", "billing.web", "cron", "later"],
            ),
            // No prefix, no names: every election; foreign children left out.
            (
                "",
                &[],
                &all,
                &["a", "billing.db", "billing.web", "billingx", "cron"],
            ),
            // No prefix, names: just those, existing or not.
            ("", &["cron", "later"], &all, &["cron", "later"]),
            ("zzz", &[], &all, &[]),
            // The caller's filter applies to prefixed and named elections alike.
            ("billing.", &["billing.web"], &no_web, &["billing.db"]),
        ];
        for (prefix, named, filter, expected) in cases {
            assert_eq!(
                wanted(prefix, &names(named), &folder, filter),
                names(expected),
                "prefix {prefix:?}, names {named:?}"
            );
        }
    }

    fn holder(token: u64) -> Holder {
        Holder {
            queue: n("e"),
            participant: format!("p{token}"),
            value: vec![],
            fencing_token: FencingToken(token),
            since: std::time::UNIX_EPOCH,
        }
    }

    fn view(synced: bool, token: Option<u64>) -> QueueView {
        QueueView::new(synced, token.map(holder))
    }

    /// A stream that sent these states, in order (`None`: a vacancy).
    fn sent(states: &[Option<u64>]) -> Sent {
        let mut sent = Sent::default();
        for token in states {
            sent.told.sent(token.map(FencingToken));
            sent.last = Some(token.map(holder));
        }
        sent
    }

    /// The rule itself is [`Told`]'s (table-tested there); this is how a stream tells the same
    /// state: by its holder, so a proclaimed value under the same token is news.
    #[test]
    fn what_is_news() {
        let proclaimed = QueueView::new(
            true,
            Some(Holder {
                value: b"new".to_vec(),
                ..holder(3)
            }),
        );
        let cases = [
            // (sent, view) → to send: Some(token or vacant)
            (sent(&[]), view(false, Some(3)), None),
            (sent(&[]), view(true, None), Some(None)),
            (sent(&[None]), view(true, None), None),
            (sent(&[None]), view(true, Some(3)), Some(Some(3))),
            (sent(&[Some(3)]), view(true, Some(3)), None),
            (sent(&[Some(3)]), proclaimed, Some(Some(3))),
            (sent(&[Some(3)]), view(true, None), Some(None)),
            (sent(&[Some(5), None]), view(true, Some(3)), None),
        ];
        for (s, v, expected) in cases {
            let got = next_state(&s, &v).map(|l| l.map(|h| h.fencing_token.0));
            assert_eq!(got, expected, "sent {:?}, view {:?}", s.last, v);
        }
    }
}
