//! `/ui` on the HTTP port: a live page of elections and locks — leader or holders (candidate or
//! owner, fencing token, since), waiters and the longest wait, the recent changes — filtered
//! by name prefix. The page (`index.html`, compiled in with `include_str!`: no outside assets,
//! works offline) reads `/ui/events?prefix=P`, server-sent events carrying the whole state as
//! JSON after every change; `/ui/state?prefix=P` answers the first such state.
//!
//! Everything shown is fleet-wide, whichever gateway serves the streams, and costs ZooKeeper
//! nothing per viewer:
//! - elections' leaders: an `ObserveMany` over the prefix (the same shared folder watch and
//!   queue actors as the gRPC streams);
//! - waiters, the longest wait and lock holders: the gateway's one view of the prefix's queues
//!   in ZooKeeper ([`crate::coord::fleet`]: one watch per prefix per gateway, shared by every
//!   viewer), lock holders judged as `Holders` judges them;
//! - recent changes: the leader changes the observation saw and the lock holders that came and
//!   went between two views.
//!
//! The per-name metrics stay per gateway (this gateway's streams, [`crate::coord::board`]):
//! sum them over the fleet. Nothing shown is a lease: no source ever has one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};

use crate::auth::{Auth, Verb};
use crate::coord::fleet::{Fleet, FleetView, Holding};
use crate::coord::observe_many::{
    moved, ManyEvent, ManySpec, Visible, DEFAULT_MAX_OBSERVE_MANY_ELECTIONS,
};
use crate::coord::types::{Holder, QueueName};
use crate::coord::Coordinator;

/// The page: HTML, CSS and script in one file.
pub const PAGE: &str = include_str!("index.html");

/// Changes kept in the page's "recent changes".
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

fn shown(visible: &Visible, name: &str) -> bool {
    QueueName::new(name).is_ok_and(|n| visible(&n))
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

fn holding_json(h: &Holding, who: &str) -> Value {
    json!({
        who: h.participant,
        "fencing_token": h.fencing_token.to_string(),
        "since": epoch(h.since),
    })
}

/// The page's state: elections (leaders from the observation, waiters from the fleet's
/// queues), locks (from the fleet's queues), recent changes — only what `visible` allows.
pub fn state(
    leaders: &BTreeMap<String, Option<Holder>>,
    fleet: &FleetView,
    visible: &Visible,
    recent: &[Value],
    note: Option<&str>,
) -> Value {
    let mut elections: BTreeMap<&str, Value> = BTreeMap::new();
    for (name, leader) in leaders.iter().filter(|(n, _)| shown(visible, n)) {
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
    for ((kind, name), q) in fleet.queues.iter().filter(|((_, n), _)| shown(visible, n)) {
        let waiting_since = q.waiting_since.map(epoch);
        if *kind == "lock" {
            locks.push(json!({
                "name": name,
                "holders": q.holders.iter().map(|h| holding_json(h, "owner")).collect::<Vec<_>>(),
                "waiting": q.waiting,
                "waiting_since": waiting_since,
            }));
            continue;
        }
        let e = elections.entry(name).or_insert_with(|| {
            json!({
                "name": name,
                // Not (yet) in the observation: the queue's head.
                "leader": q.holders.first().map(|h| holding_json(h, "candidate")),
            })
        });
        e["waiting"] = json!(q.waiting);
        e["waiting_since"] = json!(waiting_since);
    }
    let mut recent: Vec<Value> = recent
        .iter()
        .filter(|c| c["name"].as_str().is_some_and(|n| shown(visible, n)))
        .cloned()
        .collect();
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

/// The locks' holders that came and went from `before` to `after`: (name, what), in name
/// order, arrivals after departures. A holder is known by its fencing token.
pub fn lock_changes(before: &FleetView, after: &FleetView) -> Vec<(String, String)> {
    let holders = |v: &FleetView, name: &(&'static str, String)| -> Vec<Holding> {
        v.queues
            .get(name)
            .map(|q| q.holders.clone())
            .unwrap_or_default()
    };
    let names: std::collections::BTreeSet<&(&'static str, String)> = before
        .queues
        .keys()
        .chain(after.queues.keys())
        .filter(|(kind, _)| *kind == "lock")
        .collect();
    let mut out = Vec::new();
    for key in names {
        let (was, is) = (holders(before, key), holders(after, key));
        let has = |hs: &[Holding], t: u64| hs.iter().any(|h| h.fencing_token == t);
        for h in was.iter().filter(|h| !has(&is, h.fencing_token)) {
            out.push((key.1.clone(), format!("{} released", h.participant)));
        }
        for h in is.iter().filter(|h| !has(&was, h.fencing_token)) {
            out.push((
                key.1.clone(),
                format!(
                    "{} acquired (fencing token {})",
                    h.participant, h.fencing_token
                ),
            ));
        }
    }
    out
}

/// Resolves when the fleet's view changes (`Err` once its actor stopped); never without one.
async fn fleet_moved(
    fleet: &mut Option<(Arc<Fleet>, watch::Receiver<FleetView>)>,
) -> Result<(), watch::error::RecvError> {
    match fleet {
        Some((_, view)) => view.changed().await,
        None => std::future::pending().await,
    }
}

/// Feeds one `/ui/events` stream: the state as an SSE `data:` line now and after every
/// change, until the client goes away (`out` closed) or the gateway drains. `policy` moves at
/// every policy reload: what `visible` allows is judged again.
pub async fn events(
    coord: Arc<Coordinator>,
    prefix: String,
    visible: Visible,
    mut policy: Option<watch::Receiver<u64>>,
    out: mpsc::Sender<String>,
) {
    let draining = coord.draining();
    let mut leaders: BTreeMap<String, Option<Holder>> = BTreeMap::new();
    // Leader changes seen and lock holders come and gone, newest first.
    let mut recent: Vec<Value> = Vec::new();
    let mut observation = None;
    // The handle keeps the prefix's one actor registered while this page needs it.
    let mut fleet: Option<(Arc<Fleet>, watch::Receiver<FleetView>)> = None;
    let mut queues = FleetView::default();
    let mut leaders_note: Option<String> = None;
    let mut queues_note: Option<String> = None;
    let mut retry_at = tokio::time::Instant::now();
    let mut dirty = true;
    // Whether the observation's snapshot is complete: until then its states are not sent one
    // by one (a prefix of many elections would send the page as many states).
    let mut ready = false;
    let note = |what: &str, e: &dyn std::fmt::Display| Some(format!("{what} unavailable: {e}"));
    loop {
        let missing = observation.is_none() || fleet.is_none();
        if missing && tokio::time::Instant::now() >= retry_at {
            if observation.is_none() {
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
                        leaders_note = None;
                        ready = false;
                    }
                    Err(e) => leaders_note = note("elections' leaders", &e),
                }
            }
            if fleet.is_none() {
                match coord.fleet(&prefix).await {
                    Ok(f) => {
                        let mut view = f.view();
                        queues = view.borrow_and_update().clone();
                        fleet = Some((f, view));
                        queues_note = None;
                    }
                    Err(e) => queues_note = note("waiters and lock holders", &e),
                }
            }
            if observation.is_none() || fleet.is_none() {
                retry_at = tokio::time::Instant::now() + Duration::from_secs(1);
            }
            dirty = true;
        }
        if dirty && (ready || observation.is_none()) {
            let resyncing = (fleet.is_some() && !queues.synced)
                .then_some("waiters and lock holders: reading ZooKeeper again after a reconnect");
            let notes: Vec<&str> = [leaders_note.as_deref(), queues_note.as_deref(), resyncing]
                .into_iter()
                .flatten()
                .collect();
            let note = (!notes.is_empty()).then(|| notes.join("; "));
            let s = state(&leaders, &queues, &visible, &recent, note.as_deref());
            if out.send(format!("data: {s}\n\n")).await.is_err() {
                return;
            }
            dirty = false;
        }
        let missing = observation.is_none() || fleet.is_none();
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
            r = fleet_moved(&mut fleet) => {
                match r {
                    Ok(()) => {
                        let view = fleet.as_mut().expect("moved").1.borrow_and_update().clone();
                        let at = epoch(SystemTime::now());
                        for (name, what) in lock_changes(&queues, &view).into_iter().rev() {
                            recent.insert(0, json!({"at": at, "kind": "lock", "name": name, "what": what}));
                        }
                        recent.truncate(RECENT * 2);
                        queues = view;
                    }
                    Err(_) => {
                        fleet = None;
                        queues_note = Some("waiters and lock holders unavailable: the ZooKeeper session ended".to_owned());
                        retry_at = tokio::time::Instant::now() + Duration::from_secs(1);
                    }
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
                            recent.insert(0, json!({
                                "at": epoch(SystemTime::now()),
                                "kind": "election",
                                "name": name.as_str(),
                                "what": what,
                            }));
                            recent.truncate(RECENT * 2);
                        }
                    }
                    Ok(ManyEvent::SnapshotComplete) => ready = true,
                    // The page lists no names, only a prefix.
                    Ok(ManyEvent::Withdrawn(_)) => {}
                    Err(e) => {
                        observation = None;
                        leaders_note = note("elections' leaders", &e);
                        retry_at = tokio::time::Instant::now() + Duration::from_secs(1);
                    }
                }
                dirty = true;
            }
            // A reload: the observation judges its names again itself; the rest is filtered
            // at the next state.
            r = moved(&mut policy) => {
                if r.is_err() {
                    policy = None;
                }
                dirty = true;
            }
            () = tokio::time::sleep_until(retry_at), if missing => {}
            () = tokio::time::sleep(KEEPALIVE) => {
                if out.send(": keepalive\n\n".to_owned()).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// One state, as the first event `/ui/events` sends: for scripts (`/ui/state`). `None` when
/// the gateway is draining.
pub async fn one_state(
    coord: Arc<Coordinator>,
    prefix: String,
    visible: Visible,
) -> Option<String> {
    let (tx, mut rx) = mpsc::channel::<String>(1);
    let task = tokio::spawn(events(coord, prefix, visible, None, tx));
    let first = rx.recv().await;
    // Dropping the receiver ends the task at its next step; it holds nothing meanwhile.
    drop(rx);
    drop(task);
    first.and_then(|s| s.strip_prefix("data: ").map(|s| s.trim_end().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coord::fleet::QueueSummary;

    fn view(locks: &[(&str, &[(&str, u64)])]) -> FleetView {
        FleetView {
            synced: true,
            queues: Arc::new(
                locks
                    .iter()
                    .map(|(name, holders)| {
                        (
                            ("lock", name.to_string()),
                            QueueSummary {
                                holders: holders
                                    .iter()
                                    .map(|&(who, token)| Holding {
                                        participant: who.into(),
                                        fencing_token: token,
                                        since: SystemTime::UNIX_EPOCH,
                                    })
                                    .collect(),
                                waiting: 0,
                                waiting_since: None,
                            },
                        )
                    })
                    .collect(),
            ),
        }
    }

    #[test]
    fn lock_holders_that_came_and_went() {
        #[allow(clippy::type_complexity)]
        let cases: &[(
            &[(&str, &[(&str, u64)])],
            &[(&str, &[(&str, u64)])],
            &[&str],
        )] = &[
            (&[], &[], &[]),
            (
                &[],
                &[("a", &[("x", 1)])],
                &["a: x acquired (fencing token 1)"],
            ),
            (&[("a", &[("x", 1)])], &[], &["a: x released"]),
            (&[("a", &[("x", 1)])], &[("a", &[("x", 1)])], &[]),
            // A hand-over: the leaver first.
            (
                &[("a", &[("x", 1)])],
                &[("a", &[("y", 2)])],
                &["a: x released", "a: y acquired (fencing token 2)"],
            ),
            // The same owner again is a new hold (a new token).
            (
                &[("a", &[("x", 1)])],
                &[("a", &[("x", 3)])],
                &["a: x released", "a: x acquired (fencing token 3)"],
            ),
            // A semaphore gaining a holder; another lock untouched.
            (
                &[("a", &[("x", 1)]), ("b", &[("z", 9)])],
                &[("a", &[("x", 1), ("y", 2)]), ("b", &[("z", 9)])],
                &["a: y acquired (fencing token 2)"],
            ),
        ];
        for (before, after, expected) in cases {
            let got: Vec<String> = lock_changes(&view(before), &view(after))
                .into_iter()
                .map(|(n, w)| format!("{n}: {w}"))
                .collect();
            assert_eq!(got, *expected, "{before:?} -> {after:?}");
        }
    }
}
