//! Proto ↔ domain conversions. Validation happens here, at the edge.

use std::time::Duration;

use tonic::Status;

use super::error::invalid;
use crate::coord::election::JoinSpec;
use crate::coord::types::{
    LeaderInfo, Lease, MemberInfo, PageSpec, Participant, QueueKind, QueueName, Value,
};
use crate::proto as pb;

pub fn queue_name(s: String, field: &'static str) -> Result<QueueName, Status> {
    QueueName::new(s).map_err(|e| Status::invalid_argument(format!("{field}: {e}")))
}

pub fn value(bytes: Vec<u8>, limit: usize) -> Result<Value, Status> {
    Value::new(bytes, limit).map_err(invalid)
}

/// Malformed leases are simply unknown ones: `NOT_FOUND` (contract "API").
pub fn lease(s: &str, kind: QueueKind) -> Result<Lease, Status> {
    Lease::decode(s.trim(), kind)
        .ok_or_else(|| Status::from(crate::coord::election::lease_not_found()))
}

pub fn join(j: pb::Join, limit: usize) -> Result<JoinSpec, Status> {
    Ok(JoinSpec {
        election: queue_name(j.election, "election")?,
        candidate: Participant::new("candidate", j.candidate).map_err(invalid)?,
        value: value(j.value, limit)?,
    })
}

pub fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration::try_from(d).unwrap_or_default()
}

pub fn leader(l: LeaderInfo) -> pb::Leader {
    pb::Leader {
        election: l.election.to_string(),
        candidate: l.candidate,
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
pub fn page(page_size: u32, page_token: &str) -> Result<PageSpec, Status> {
    let after = match page_token.trim() {
        "" => None,
        t => Some(
            t.strip_prefix(PAGE_TOKEN_PREFIX)
                .and_then(|s| i64::from_str_radix(s, 16).ok())
                .filter(|&s| s >= 0)
                .ok_or_else(|| {
                    Status::invalid_argument(
                        "page_token is not a next_page_token from an earlier reply",
                    )
                })?,
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
