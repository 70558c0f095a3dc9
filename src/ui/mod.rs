//! `/ui` on the HTTP port: a live page of elections and locks — leader or holders (candidate or
//! owner, fencing token, since), waiters and the longest wait, the recent changes — filtered
//! by name prefix. The page (`index.html`, compiled in with `include_str!`: no outside assets,
//! works offline) reads `/ui/events?prefix=P`, server-sent events carrying the whole state as
//! JSON after every change.
//!
//! Where the state comes from:
//! - elections' leaders, fleet-wide: an `ObserveMany` over the prefix (the same shared folder
//!   watch and queue actors as the gRPC streams: a page costs ZooKeeper nothing per viewer);
//! - waiters, the longest wait, lock holders and their changes: this gateway's board
//!   ([`crate::coord::board`]) — what this gateway's own streams are doing. In a fleet, each
//!   gateway's page shows its own waiters and lock holders.
//!
//! Nothing shown is a lease: neither source ever has one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::auth::{Auth, Verb};
use crate::coord::board::BoardView;
use crate::coord::observe_many::{
    ManyEvent, ManySpec, Visible, DEFAULT_MAX_OBSERVE_MANY_ELECTIONS,
};
use crate::coord::types::{Holder, QueueName};
use crate::coord::Coordinator;

/// The page: HTML, CSS and script in one file.
pub const PAGE: &str = include_str!("index.html");

/// Changes kept in the page's "recent changes" (leader changes seen plus the board's).
const RECENT: usize = 50;

/// How often an idle event stream sends a comment, so proxies keep it open.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// The names the page's caller may observe (SPEC §7). Under a policy the HTTP request's
/// `authorization: Bearer` header names the identity (a browser's `EventSource` cannot send
/// one, so a page opened directly is `anonymous`; an authenticating proxy in front can add
/// it); a token the policy does not know sees nothing. Without a policy every name is visible.
pub fn visible_to(headers: &hyper::HeaderMap, auth: &Arc<Auth>) -> Visible {
    if !auth.enforced() {
        return Arc::new(|_| true);
    }
    let mut metadata = tonic::metadata::MetadataMap::new();
    if let Some(v) = headers.get(hyper::header::AUTHORIZATION) {
        if let Ok(v) = tonic::metadata::MetadataValue::try_from(v.as_bytes()) {
            metadata.insert("authorization", v);
        }
    }
    match auth.identify(&metadata, None) {
        Ok(identity) => {
            let auth = Arc::clone(auth);
            Arc::new(move |name: &QueueName| auth.allows(&identity, Verb::Observe, name.as_str()))
        }
        Err(_) => Arc::new(|_| false),
    }
}

/// This gateway's board with only the names `visible` allows (locks included: `observe`
/// covers `Holders`).
pub fn only_visible(mut view: BoardView, visible: &Visible) -> BoardView {
    let shown = |name: &str| QueueName::new(name).is_ok_and(|n| visible(&n));
    view.names.retain(|n| shown(&n.name));
    view.recent.retain(|c| shown(&c.name));
    view
}

fn epoch(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn leader_json(l: &Holder) -> Value {
    json!({
        "candidate": l.participant,
        // A string: JSON numbers lose u64 precision.
        "fencing_token": l.fencing_token.0.to_string(),
        "since": epoch(l.since),
    })
}

/// The page's state: elections (leaders from the observation, waiters from the board), locks
/// (from the board), recent changes (leader changes seen, lock changes of the board).
pub fn state(
    leaders: &BTreeMap<String, Option<Holder>>,
    board: &BoardView,
    observed: &[Value],
    note: Option<&str>,
) -> Value {
    let mut elections: BTreeMap<&str, Value> = BTreeMap::new();
    for (name, leader) in leaders {
        elections.insert(
            name,
            json!({
                "name": name,
                "leader": leader.as_ref().map(leader_json),
                "waiting": 0,
                "waiting_since": null,
            }),
        );
    }
    let mut locks = Vec::new();
    for n in &board.names {
        let holders: Vec<Value> = n
            .holders
            .iter()
            .map(|h| {
                json!({
                    "owner": h.participant,
                    "fencing_token": h.fencing_token.to_string(),
                    "since": h.since,
                })
            })
            .collect();
        if n.kind == "lock" {
            locks.push(json!({
                "name": n.name,
                "holders": holders,
                "waiting": n.waiting,
                "waiting_since": n.waiting_since,
            }));
            continue;
        }
        let e = elections.entry(&n.name).or_insert_with(|| {
            json!({
                "name": n.name,
                // Not (yet) in the observation: this gateway's own leader, if it has one.
                "leader": n.holders.first().map(|h| json!({
                    "candidate": h.participant,
                    "fencing_token": h.fencing_token.to_string(),
                    "since": h.since,
                })),
            })
        });
        e["waiting"] = json!(n.waiting);
        e["waiting_since"] = json!(n.waiting_since);
    }
    let mut recent: Vec<Value> = observed.to_vec();
    recent.extend(
        board
            .recent
            .iter()
            .filter(|c| c.kind == "lock")
            .map(|c| json!({"at": c.at, "kind": c.kind, "name": c.name, "what": c.what})),
    );
    recent.sort_by(|a, b| {
        b["at"]
            .as_f64()
            .partial_cmp(&a["at"].as_f64())
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    recent.truncate(RECENT);
    json!({
        "elections": elections.into_values().collect::<Vec<_>>(),
        "locks": locks,
        "recent": recent,
        "note": note,
        "now": epoch(SystemTime::now()),
    })
}

/// Feeds one `/ui/events` stream: the state as an SSE `data:` line now and after every
/// change, until the client goes away (`out` closed) or the gateway drains.
pub async fn events(
    coord: Arc<Coordinator>,
    prefix: String,
    visible: Visible,
    mut policy: Option<tokio::sync::watch::Receiver<u64>>,
    out: mpsc::Sender<String>,
) {
    let draining = coord.draining();
    let mut board_changed = coord.board.changed();
    let mut leaders: BTreeMap<String, Option<Holder>> = BTreeMap::new();
    let mut observed: Vec<Value> = Vec::new();
    let mut observation = None;
    let mut note: Option<String> = None;
    let mut retry_at = tokio::time::Instant::now();
    let mut dirty = true;
    // Whether the observation's snapshot is complete: until then its states are not sent one
    // by one (a prefix of many elections would send the page as many states).
    let mut ready = false;
    loop {
        if observation.is_none() && tokio::time::Instant::now() >= retry_at {
            let spec = ManySpec {
                prefix: prefix.clone(),
                names: Default::default(),
                max_elections: DEFAULT_MAX_OBSERVE_MANY_ELECTIONS,
                visible: visible.clone(),
                rejudge: policy.clone(),
            };
            match coord.observe_many(spec).await {
                Ok(o) => {
                    observation = Some(o);
                    leaders.clear();
                    note = None;
                    ready = false;
                }
                Err(e) => {
                    note = Some(format!("elections' leaders unavailable: {e}"));
                    retry_at = tokio::time::Instant::now() + Duration::from_secs(1);
                }
            }
            dirty = true;
        }
        if dirty && (ready || observation.is_none()) {
            let view = only_visible(coord.board.view(&prefix), &visible);
            let s = state(&leaders, &view, &observed, note.as_deref());
            if out.send(format!("data: {s}\n\n")).await.is_err() {
                return;
            }
            dirty = false;
        }
        let observing = observation.is_some();
        let next = async {
            match observation.as_mut() {
                Some(o) => o.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = draining.cancelled() => return,
            () = out.closed() => return,
            r = board_changed.changed() => {
                if r.is_err() {
                    return;
                }
                dirty = true;
            }
            e = next => {
                match e {
                    Ok(ManyEvent::State(name, leader)) => {
                        let what = match &leader {
                            Some(l) => format!("{} elected (fencing token {})", l.participant, l.fencing_token.0),
                            None => "vacant".to_owned(),
                        };
                        let had = leaders.insert(name.as_str().to_owned(), leader);
                        // After the snapshot, a new election's first leader is a change too.
                        if had.is_some() || ready {
                            observed.insert(0, json!({
                                "at": epoch(SystemTime::now()),
                                "kind": "election",
                                "name": name.as_str(),
                                "what": what,
                            }));
                            observed.truncate(RECENT);
                        }
                    }
                    Ok(ManyEvent::SnapshotComplete) => ready = true,
                    // The page lists no names, only a prefix.
                    Ok(ManyEvent::Withdrawn(_)) => {}
                    Err(e) => {
                        observation = None;
                        note = Some(format!("elections' leaders unavailable: {e}"));
                        retry_at = tokio::time::Instant::now() + Duration::from_secs(1);
                    }
                }
                dirty = true;
            }
            // A reload: the observation judges its names again itself; the rest is filtered
            // at the next state.
            r = crate::coord::observe_many::moved(&mut policy) => {
                if r.is_err() {
                    policy = None;
                }
                dirty = true;
            }
            () = tokio::time::sleep_until(retry_at), if !observing => {}
            () = tokio::time::sleep(KEEPALIVE) => {
                if out.send(": keepalive\n\n".to_owned()).await.is_err() {
                    return;
                }
            }
        }
    }
}
