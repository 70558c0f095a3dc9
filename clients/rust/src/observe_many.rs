//! `ObserveMany` as a stream that survives its gateway: on a failure it reconnects (next
//! endpoint, backoff) and reads the new stream's snapshot against what it already delivered —
//! per election, a token lower than one delivered is never delivered, an unchanged state is not
//! repeated, and an election that led before the reconnect but is missing from the new
//! snapshot (it went away meanwhile) is delivered as vacant. `snapshot_complete` is delivered
//! once, after the first snapshot.

use std::collections::{BTreeMap, BTreeSet};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio_stream::Stream;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::mailbox::{self, Supersede};
use crate::observe::{follow, Follower, TokenFilter};
use crate::pb::election_client::ElectionClient;
use crate::pb::observe_many_response::Event;
use crate::pb::{Leader, ObserveManyRequest, ObserveManyResponse};
use crate::{Client, Error};

/// One item of an [`ManyObserver`].
#[derive(Debug, Clone, PartialEq)]
pub enum ManyEvent {
    /// An election's leader (`None`: vacant): first one per election, then one per change.
    State {
        election: String,
        leader: Option<Leader>,
    },
    /// Every election that existed when observing began has had its first state.
    SnapshotComplete,
}

/// Every election whose name starts with a prefix (later ones included) plus named ones, now
/// and after every change. Items are `Err` only for a refusal that reconnecting cannot fix (a
/// bad name, the gateway's election limit); the stream then ends. Dropping it stops observing.
pub struct ManyObserver {
    rx: mailbox::Receiver<ManyEvent>,
    _stop: DropGuard,
}

impl std::fmt::Debug for ManyObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManyObserver").finish_non_exhaustive()
    }
}

impl Stream for ManyObserver {
    type Item = Result<ManyEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.rx).poll_next(cx)
    }
}

/// What was delivered, per election, across reconnects.
#[derive(Debug, Default)]
pub(crate) struct ManyFilter {
    elections: BTreeMap<String, (TokenFilter, bool)>,
    /// Elections in the current stream's snapshot, while it is being read after a reconnect.
    resnapshot: Option<BTreeSet<String>>,
    completed: bool,
}

impl ManyFilter {
    /// A new stream opened: its snapshot follows.
    pub(crate) fn reconnected(&mut self) {
        self.resnapshot = Some(BTreeSet::new());
    }

    /// What to deliver for one message of the stream.
    pub(crate) fn admit(&mut self, event: Event) -> Vec<ManyEvent> {
        match event {
            Event::State(s) => {
                let first = match self.resnapshot.as_mut() {
                    Some(seen) => seen.insert(s.election.clone()),
                    None => false,
                };
                let (filter, leads) = self.elections.entry(s.election.clone()).or_default();
                if filter.admit(s.leader.as_ref(), first) {
                    *leads = s.leader.is_some();
                    vec![ManyEvent::State {
                        election: s.election,
                        leader: s.leader,
                    }]
                } else {
                    vec![]
                }
            }
            Event::SnapshotComplete(_) => {
                let mut out = Vec::new();
                if let Some(seen) = self.resnapshot.take() {
                    for (e, (filter, leads)) in self.elections.iter_mut() {
                        if *leads && !seen.contains(e) && filter.admit(None, false) {
                            *leads = false;
                            out.push(ManyEvent::State {
                                election: e.clone(),
                                leader: None,
                            });
                        }
                    }
                }
                if !self.completed {
                    self.completed = true;
                    out.push(ManyEvent::SnapshotComplete);
                }
                out
            }
        }
    }
}

/// A newer state of an election replaces its older one nobody has taken yet, in its place;
/// `SnapshotComplete` stays where it is, after the snapshot's states.
impl Supersede for ManyEvent {
    fn supersedes(&self, older: &Self) -> bool {
        matches!((self, older), (ManyEvent::State { election: a, .. }, ManyEvent::State { election: b, .. }) if a == b)
    }
}

pub(crate) fn start(client: Client, prefix: String, elections: Vec<String>) -> ManyObserver {
    let (tx, rx) = mailbox::mailbox();
    let stop = CancellationToken::new();
    tokio::spawn(run(client, prefix, elections, tx, stop.clone()));
    ManyObserver {
        rx,
        _stop: stop.drop_guard(),
    }
}

async fn run(
    client: Client,
    prefix: String,
    elections: Vec<String>,
    tx: mailbox::Sender<ManyEvent>,
    stop: CancellationToken,
) {
    let opener = client.clone();
    let open = move |ch| {
        let req = opener.authorized(ObserveManyRequest {
            prefix: prefix.clone(),
            elections: elections.clone(),
        });
        async move { ElectionClient::new(ch).observe_many(req).await }
    };
    follow(
        client,
        "observe_many",
        ManyFilter::default(),
        tx,
        stop,
        open,
    )
    .await;
}

impl Follower for ManyFilter {
    type Msg = ObserveManyResponse;
    type Item = ManyEvent;

    fn reconnected(&mut self) {
        ManyFilter::reconnected(self);
    }

    fn admit(&mut self, msg: ObserveManyResponse) -> Vec<ManyEvent> {
        match msg.event {
            Some(event) => ManyFilter::admit(self, event),
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::{ElectionState, SnapshotComplete};

    fn state(e: &str, token: Option<u64>) -> Event {
        Event::State(ElectionState {
            election: e.into(),
            leader: token.map(|t| Leader {
                fencing_token: t,
                candidate: "c".into(),
                ..Default::default()
            }),
        })
    }

    fn complete() -> Event {
        Event::SnapshotComplete(SnapshotComplete {})
    }

    fn tokens(out: Vec<ManyEvent>) -> Vec<String> {
        out.into_iter()
            .map(|e| match e {
                ManyEvent::State { election, leader } => format!(
                    "{election}:{}",
                    leader.map_or("vacant".into(), |l| l.fencing_token.to_string())
                ),
                ManyEvent::SnapshotComplete => "complete".into(),
            })
            .collect()
    }

    #[test]
    fn a_reconnect_repeats_nothing_goes_back_nowhere_and_reports_vanished_leaders() {
        let mut f = ManyFilter::default();
        f.reconnected();
        assert_eq!(tokens(f.admit(state("a", Some(5)))), ["a:5"]);
        assert_eq!(tokens(f.admit(state("b", Some(7)))), ["b:7"]);
        assert_eq!(tokens(f.admit(complete())), ["complete"]);
        assert_eq!(tokens(f.admit(state("a", Some(6)))), ["a:6"]);
        // A new stream on a lagging gateway: a's older leader is not delivered, b's same
        // state is not repeated; c is new.
        f.reconnected();
        assert!(f.admit(state("b", Some(7))).is_empty());
        assert_eq!(tokens(f.admit(state("c", None))), ["c:vacant"]);
        // a led before and is not in the new snapshot: vacant; complete is not repeated.
        assert_eq!(tokens(f.admit(complete())), ["a:vacant"]);
        assert!(f.admit(state("a", Some(5))).is_empty(), "never lower");
        assert_eq!(tokens(f.admit(state("a", Some(9)))), ["a:9"]);
    }
}
