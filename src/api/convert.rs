//! Proto ↔ domain conversions. Validation happens here, at the edge.

use std::time::Duration;

use tonic::Status;

use super::error::invalid;
use crate::coord::election::JoinSpec;
use crate::coord::types::{
    LeaderInfo, Lease, MemberInfo, Participant, QueueKind, QueueName, Value,
};
use crate::proto as pb;

pub fn queue_name(s: String, field: &'static str) -> Result<QueueName, Status> {
    QueueName::new(s).map_err(|e| Status::invalid_argument(format!("{field}: {e}")))
}

pub fn value(bytes: Vec<u8>, limit: usize) -> Result<Value, Status> {
    Value::new(bytes, limit).map_err(invalid)
}

/// Malformed leases are simply unknown ones: `NOT_FOUND` (SPEC §1).
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
