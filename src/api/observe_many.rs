//! `Election.ObserveMany`: stream plumbing around `coord::observe_many`.
//!
//! Like Observe, every send happens inside the task's `select!`, so a client that stops reading
//! never holds up the drain, the queues or the session (G3c). What it has not read is kept as
//! states, not a log: at most one unsent state per election (a newer one replaces it in place),
//! plus `snapshot_complete`, so a stalled stream costs at most its election limit in memory.

use std::collections::VecDeque;
use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::convert;
use super::holder_stream::BoxStream;
use super::limits::Admission;
use super::outbox::{self, Outbox, TrySend};
use crate::auth::{self, Auth, Identity, Verb};
use crate::coord::link::LossReason;
use crate::coord::observe_many::{ManyEvent, ManySpec, Visible};
use crate::coord::types::QueueName;
use crate::coord::{CoordError, Coordinator};
use crate::proto as pb;
use crate::proto::observe_many_response::Event;

/// The names `identity` may observe (SPEC §7: "ObserveMany shows only allowed names"): the
/// policy's `observe` verb, judged against the policy in force whenever the elections folder
/// changes and at every policy reload ([`ManySpec::rejudge`]). Without a policy every name is
/// visible.
fn visible_to(auth: &Arc<Auth>, identity: Identity) -> Visible {
    let auth = Arc::clone(auth);
    Arc::new(move |name: &QueueName| auth.allows(&identity, Verb::Observe, name.as_str()))
}

/// Validates the request into what the coordination layer follows.
///
/// # Errors
/// `INVALID_ARGUMENT` for a bad name in `elections` or a prefix with characters no name has.
fn spec(
    r: pb::ObserveManyRequest,
    max: usize,
    visible: Visible,
    rejudge: Option<tokio::sync::watch::Receiver<u64>>,
) -> Result<ManySpec, CoordError> {
    if !r.prefix.is_empty() {
        // A prefix is the start of a name: the same characters (any length up to a name's).
        convert::queue_name(r.prefix.clone(), "prefix")?;
    }
    let names = r
        .elections
        .into_iter()
        .map(|e| convert::queue_name(e, "elections"))
        .collect::<Result<_, _>>()?;
    Ok(ManySpec {
        prefix: r.prefix,
        names,
        max_elections: max,
        visible,
        rejudge,
    })
}

/// The message for `e`; `None` for [`ManyEvent::Withdrawn`], which ends the stream instead.
fn message(e: ManyEvent) -> Option<pb::ObserveManyResponse> {
    let event = match e {
        ManyEvent::State(election, leader) => Event::State(pb::ElectionState {
            election: election.as_str().to_owned(),
            leader: leader.map(convert::leader),
        }),
        ManyEvent::SnapshotComplete => Event::SnapshotComplete(pb::SnapshotComplete {}),
        ManyEvent::Withdrawn(_) => return None,
    };
    Some(pb::ObserveManyResponse { event: Some(event) })
}

/// Why a stream ends when a reload withdrew the caller's right to a name it listed: the
/// `PERMISSION_DENIED` that opening the stream with that name would now get (audited as a
/// denial). Names matched only by the prefix are not errors: they leave the stream quietly
/// (a vacancy if a leader was sent), as they are left out of a new stream.
fn withdrawn(auth: &Auth, identity: &Identity, name: &QueueName) -> CoordError {
    auth.check(identity, Verb::Observe, name.as_str())
        .err()
        // Allowed again by a newer reload meanwhile: the name was still dropped.
        .unwrap_or_else(|| CoordError::PermissionDenied {
            identity: identity.to_string(),
            verb: Verb::Observe,
            name: name.as_str().to_owned(),
        })
}

/// Keeps `msg` for a client that is not reading: it replaces an unsent state of the same
/// election (states, not a log), else waits at the back.
fn keep(unsent: &mut VecDeque<pb::ObserveManyResponse>, msg: pb::ObserveManyResponse) {
    if let Some(Event::State(new)) = &msg.event {
        for m in unsent.iter_mut() {
            if let Some(Event::State(old)) = &m.event {
                if old.election == new.election {
                    *m = msg;
                    return;
                }
            }
        }
    }
    unsent.push_back(msg);
}

/// Serves one ObserveMany call.
///
/// # Errors
/// `RESOURCE_EXHAUSTED` past the Observe stream limit per connection, the elections per
/// stream or the gateway's queues; `INVALID_ARGUMENT`; `UNAVAILABLE` without a session.
pub async fn serve(
    coord: &Arc<Coordinator>,
    admission: &Arc<Admission>,
    auth: &Arc<Auth>,
    request: Request<pb::ObserveManyRequest>,
) -> Result<Response<BoxStream<pb::ObserveManyResponse>>, Status> {
    let identity = auth::caller(&request);
    // Every name listed by the caller must be one it may observe; a prefix shows only the
    // allowed names under it.
    for name in &request.get_ref().elections {
        auth.check(&identity, Verb::Observe, name)?;
    }
    let permit = admission.observer(request.remote_addr(), auth.enforced().then_some(&identity))?;
    let visible = visible_to(auth, identity.clone());
    let spec = spec(
        request.into_inner(),
        admission.limits().observe_many_elections,
        visible,
        Some(auth.changes()),
    )?;
    let auth = Arc::clone(auth);
    let mut observation = coord.observe_many(spec).await?;
    let draining = coord.draining();
    let (out, responses) = Outbox::new();
    tokio::spawn(async move {
        let _permit = permit;
        let mut unsent: VecDeque<pb::ObserveManyResponse> = VecDeque::new();
        loop {
            let msg = tokio::select! {
                biased;
                _ = draining.cancelled() => {
                    out.end(Status::from(CoordError::SessionLost(LossReason::Draining)));
                    return;
                }
                _ = out.closed() => return,
                permit = out.reserve(), if !unsent.is_empty() => {
                    match permit {
                        Ok(p) => outbox::send(p, unsent.pop_front().expect("guarded")),
                        Err(()) => return,
                    }
                    continue;
                }
                next = observation.next() => match next {
                    Ok(ManyEvent::Withdrawn(name)) => {
                        out.end(Status::from(withdrawn(&auth, &identity, &name)));
                        return;
                    }
                    Ok(e) => match message(e) {
                        Some(m) => m,
                        None => continue,
                    },
                    Err(e) => {
                        out.end(Status::from(e));
                        return;
                    }
                },
            };
            if !unsent.is_empty() {
                keep(&mut unsent, msg);
                continue;
            }
            match out.try_send(msg) {
                TrySend::Sent => {}
                TrySend::Full(m) => keep(&mut unsent, m),
                TrySend::Closed => return,
            }
        }
    });
    Ok(Response::new(Box::pin(responses)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(e: ManyEvent) -> pb::ObserveManyResponse {
        message(e).expect("a message")
    }

    fn state(e: &str, token: u64) -> pb::ObserveManyResponse {
        msg(ManyEvent::State(
            crate::coord::types::QueueName::new(e).unwrap(),
            Some(crate::coord::types::Holder {
                queue: crate::coord::types::QueueName::new(e).unwrap(),
                participant: "p".into(),
                value: vec![],
                fencing_token: crate::coord::types::FencingToken(token),
                since: std::time::UNIX_EPOCH,
            }),
        ))
    }

    #[test]
    fn unsent_states_are_replaced_per_election_in_place() {
        let mut unsent = VecDeque::new();
        keep(&mut unsent, state("a", 1));
        keep(&mut unsent, state("b", 2));
        keep(&mut unsent, msg(ManyEvent::SnapshotComplete));
        keep(&mut unsent, state("a", 3));
        let order: Vec<_> = unsent
            .iter()
            .map(|m| match &m.event {
                Some(Event::State(s)) => {
                    format!(
                        "{}:{}",
                        s.election,
                        s.leader.as_ref().unwrap().fencing_token
                    )
                }
                _ => "complete".into(),
            })
            .collect();
        assert_eq!(order, ["a:3", "b:2", "complete"]);
    }
}
