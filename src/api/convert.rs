//! Proto ↔ domain conversions. Validation happens here, at the edge.

use std::time::Duration;

use crate::auth::LeaseKeys;
use crate::coord::election::JoinSpec;
use crate::coord::types::{
    Holder, InvalidInput, Lease, MemberInfo, PageSpec, Participant, QueueKind, QueueName, Value,
};
use crate::coord::CoordError;
use crate::proto as pb;

/// Conversions at the edge fail with the domain's own errors; `?` in a handler turns them
/// into a status through the one mapping in [`super::error`].
pub type Converted<T> = Result<T, CoordError>;

pub fn queue_name(s: String, field: &'static str) -> Converted<QueueName> {
    Ok(QueueName::new(s).map_err(|e| e.in_field(field))?)
}

pub fn value(bytes: Vec<u8>, limit: usize) -> Converted<Value> {
    Ok(Value::new(bytes, limit)?)
}

/// Malformed, unsigned or wrongly signed leases are simply unknown ones: `NOT_FOUND`
/// (contract "API").
pub fn lease(s: &str, kind: QueueKind, keys: &LeaseKeys) -> Converted<Lease> {
    Lease::decode(s.trim(), kind, keys).ok_or(CoordError::LeaseNotFound)
}

/// A `join{…}` with its value checked against the gateway's limit.
pub fn join(j: pb::Join, limit: usize) -> Converted<JoinSpec> {
    Ok(JoinSpec {
        election: queue_name(j.election, "election")?,
        candidate: Participant::new("candidate", j.candidate)?,
        value: value(j.value, limit)?,
    })
}

/// A duration field: unset stays unset; negative is `INVALID_ARGUMENT`.
pub fn duration_field(
    field: &'static str,
    d: Option<prost_types::Duration>,
) -> Converted<Option<Duration>> {
    d.map(|d| {
        Duration::try_from(d).map_err(|_| {
            CoordError::from(InvalidInput::NegativeDuration {
                field,
                got: d.to_string(),
            })
        })
    })
    .transpose()
}

pub fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration::try_from(d).unwrap_or_default()
}

/// `suspended{stop_within, reason}`.
pub(super) fn suspended(
    stop_within: Duration,
    why: super::holder_stream::Suspension,
) -> pb::Suspended {
    use super::holder_stream::Suspension;
    let reason = match why {
        Suspension::Connection => pb::SuspendReason::Connection,
        Suspension::Drain => pb::SuspendReason::Drain,
        Suspension::LeaseExpired => pb::SuspendReason::LeaseExpired,
        Suspension::EndRequested => pb::SuspendReason::EndRequested,
        Suspension::PolicyWithdrawn => pb::SuspendReason::RightWithdrawn,
    };
    pb::Suspended {
        stop_within: Some(duration(stop_within)),
        reason: reason.into(),
    }
}

pub fn leader(l: Holder) -> pb::Leader {
    pb::Leader {
        election: l.queue.to_string(),
        candidate: l.participant,
        value: l.value,
        fencing_token: l.fencing_token.0,
        since: Some(l.since.into()),
    }
}

pub fn candidate(m: MemberInfo) -> pb::Candidate {
    pb::Candidate {
        candidate: m.participant,
        value: m.value,
        position: m.position,
        fencing_token: m.fencing_token.0,
        joined: Some(m.joined.into()),
        leader: m.leader_since.is_some(),
    }
}

const PAGE_TOKEN_PREFIX: &str = "zkp1.";

/// A page request from `page_size` and `page_token` (Candidates, Holders).
///
/// # Errors
/// `INVALID_ARGUMENT` for a token this gateway never issued.
pub fn page(page_size: u32, page_token: &str) -> Converted<PageSpec> {
    let after = match page_token.trim() {
        "" => None,
        t => Some(
            t.strip_prefix(PAGE_TOKEN_PREFIX)
                .and_then(|s| i64::from_str_radix(s, 16).ok())
                .filter(|&s| s >= 0)
                .ok_or(InvalidInput::PageToken)?,
        ),
    };
    Ok(PageSpec {
        after,
        max_entries: page_size as usize,
        ..PageSpec::default()
    })
}

/// The opaque token for the page after sequence `after` (empty on the last page).
pub fn page_token(after: Option<i64>) -> String {
    after.map_or_else(String::new, |a| format!("{PAGE_TOKEN_PREFIX}{a:x}"))
}
