//! What this gateway's own streams are doing, per election and lock name: who holds (and
//! since when, with which token), who waits (and since when), and the recent changes. It feeds
//! the per-name metrics (waiters now, wait time until granted, hold time — names capped like
//! every name label, [`crate::metrics::name_label`]), which are per gateway by nature: each
//! gateway counts its own streams. The `/ui` page shows the fleet's instead, as ZooKeeper has
//! them ([`super::fleet`]).
//!
//! Every Campaign and Acquire stream holds a [`Presence`] guard from the moment its znode is
//! queued: granting moves it from waiting to holding, and dropping it (the stream ended, for
//! whatever reason) takes it off the board and records the hold time — cleanup by ownership,
//! so no path can leave a waiter counted. Nothing here ever sees a lease.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use tokio::sync::watch;

use super::types::{Holder, QueueKind, QueueName};
use crate::metrics as m;

/// Changes kept for the page.
pub const RECENT_CHANGES: usize = 50;

/// The board of one gateway; [`Board::changed`] ticks on every change.
#[derive(Debug)]
pub struct Board {
    state: Mutex<State>,
    version: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    /// By name, then kind ("election" or "lock").
    names: BTreeMap<(String, &'static str), Entry>,
    recent: VecDeque<Change>,
}

#[derive(Debug, Default)]
struct Entry {
    waiting: BTreeMap<u64, SystemTime>,
    holding: BTreeMap<u64, HolderInfo>,
}

/// A holder as the page shows it (never a lease).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HolderInfo {
    pub participant: String,
    pub fencing_token: u64,
    /// Seconds since the Unix epoch when it was granted (as the holder's gateway saw it).
    pub since: f64,
}

/// One line of the page's "recent changes".
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Change {
    /// Seconds since the Unix epoch.
    pub at: f64,
    pub kind: &'static str,
    pub name: String,
    pub what: String,
}

/// One name as the page shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NameView {
    pub kind: &'static str,
    pub name: String,
    pub holders: Vec<HolderInfo>,
    /// Waiting on this gateway now.
    pub waiting: usize,
    /// Since when the longest waiter on this gateway waits (epoch seconds), if any waits.
    pub waiting_since: Option<f64>,
}

/// The whole board at one moment.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct BoardView {
    pub names: Vec<NameView>,
    pub recent: Vec<Change>,
}

fn epoch(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn kind_word(kind: QueueKind) -> &'static str {
    match kind {
        QueueKind::Election => "election",
        QueueKind::Lock => "lock",
    }
}

impl Default for Board {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            version: watch::channel(0).0,
        }
    }
}

impl Board {
    /// A receiver that sees every change (its value is a change counter).
    pub fn changed(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Everything on the board whose name starts with `prefix`, names in order.
    pub fn view(&self, prefix: &str) -> BoardView {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        BoardView {
            names: s
                .names
                .iter()
                .filter(|((n, _), _)| n.starts_with(prefix))
                .map(|((name, kind), e)| NameView {
                    kind,
                    name: name.clone(),
                    holders: e.holding.values().cloned().collect(),
                    waiting: e.waiting.len(),
                    waiting_since: e.waiting.values().min().copied().map(epoch),
                })
                .collect(),
            recent: s
                .recent
                .iter()
                .filter(|c| c.name.starts_with(prefix))
                .cloned()
                .collect(),
        }
    }

    fn update<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let r = f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()));
        self.version.send_modify(|v| *v += 1);
        r
    }

    /// A member of `kind`/`name` queued by `participant`: waiting until [`Presence::granted`].
    pub fn queued(
        self: &Arc<Self>,
        kind: QueueKind,
        name: &QueueName,
        participant: &str,
    ) -> Presence {
        let label = m::name_label(name.as_str());
        m::name_waiters(kind_word(kind), &label, 1.0);
        let key = (name.as_str().to_owned(), kind_word(kind));
        let id = self.update(|s| {
            s.next_id += 1;
            let id = s.next_id;
            s.names
                .entry(key.clone())
                .or_default()
                .waiting
                .insert(id, SystemTime::now());
            id
        });
        Presence {
            board: self.clone(),
            kind,
            key,
            id,
            label,
            participant: participant.to_owned(),
            phase: Phase::Waiting(Instant::now()),
        }
    }

    fn record(s: &mut State, kind: &'static str, name: &str, what: String) {
        if s.recent.len() == RECENT_CHANGES {
            s.recent.pop_back();
        }
        s.recent.push_front(Change {
            at: epoch(SystemTime::now()),
            kind,
            name: name.to_owned(),
            what,
        });
    }
}

#[derive(Debug)]
enum Phase {
    Waiting(Instant),
    Holding(Instant),
    /// Taken off the board (the hold ended before the guard).
    Done,
}

/// One stream's place on the board (see the module docs).
#[derive(Debug)]
pub struct Presence {
    board: Arc<Board>,
    kind: QueueKind,
    key: (String, &'static str),
    id: u64,
    label: String,
    participant: String,
    phase: Phase,
}

impl Presence {
    /// Granted (elected, acquired): records the wait and shows the holder.
    pub fn granted(&mut self, holder: &Holder) {
        let Phase::Waiting(queued) = self.phase else {
            return;
        };
        let kind = self.key.1;
        m::name_waiters(kind, &self.label, -1.0);
        m::name_wait(kind, &self.label, queued.elapsed());
        self.phase = Phase::Holding(Instant::now());
        let info = HolderInfo {
            participant: holder.participant.clone(),
            fencing_token: holder.fencing_token.0,
            since: epoch(holder.since),
        };
        let (id, key) = (self.id, &self.key);
        let what = match self.kind {
            QueueKind::Election => "elected",
            QueueKind::Lock => "acquired",
        };
        self.board.update(|s| {
            if let Some(e) = s.names.get_mut(key) {
                e.waiting.remove(&id);
                e.holding.insert(id, info.clone());
            }
            Board::record(
                s,
                key.1,
                &key.0,
                format!(
                    "{} {what} (fencing token {})",
                    info.participant, info.fencing_token
                ),
            );
        });
    }

    /// Whether it holds now.
    pub fn holds(&self) -> bool {
        matches!(self.phase, Phase::Holding(_))
    }

    /// The hold or the wait ended (the guard may live on a little while the stream winds up).
    pub fn ended(&mut self) {
        let kind = self.key.1;
        let was = std::mem::replace(&mut self.phase, Phase::Done);
        let what = match was {
            Phase::Done => return,
            Phase::Waiting(_) => {
                m::name_waiters(kind, &self.label, -1.0);
                "left the queue"
            }
            Phase::Holding(since) => {
                m::name_hold(kind, &self.label, since.elapsed());
                match self.kind {
                    QueueKind::Election => "stepped down",
                    QueueKind::Lock => "released",
                }
            }
        };
        let (id, key, who) = (self.id, &self.key, &self.participant);
        self.board.update(|s| {
            if let Some(e) = s.names.get_mut(key) {
                e.waiting.remove(&id);
                e.holding.remove(&id);
                if e.waiting.is_empty() && e.holding.is_empty() {
                    s.names.remove(key);
                }
            }
            Board::record(s, key.1, &key.0, format!("{who} {what}"));
        });
    }
}

impl Drop for Presence {
    fn drop(&mut self) {
        self.ended();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coord::types::FencingToken;

    #[test]
    fn a_presence_moves_from_waiting_to_holding_and_off_the_board() {
        let board = Arc::new(Board::default());
        let name = QueueName::new("db").unwrap();
        let mut a = board.queued(QueueKind::Election, &name, "a");
        let b = board.queued(QueueKind::Election, &name, "b");
        let v = board.view("");
        assert_eq!((v.names.len(), v.names[0].waiting), (1, 2));
        assert!(v.names[0].waiting_since.is_some());
        a.granted(&Holder {
            queue: name.clone(),
            participant: "a".into(),
            value: vec![],
            fencing_token: FencingToken(7),
            since: SystemTime::now(),
        });
        let v = board.view("d");
        assert_eq!(v.names[0].waiting, 1);
        assert_eq!(v.names[0].holders[0].fencing_token, 7);
        assert_eq!(v.recent[0].what, "a elected (fencing token 7)");
        assert!(board.view("x").names.is_empty(), "filtered by prefix");
        drop(a);
        assert_eq!(board.view("").recent[0].what, "a stepped down");
        drop(b);
        let v = board.view("");
        assert!(v.names.is_empty(), "{v:?}");
        assert_eq!(
            v.recent.len(),
            3,
            "joins are not changes; grants and ends are"
        );
    }
}
