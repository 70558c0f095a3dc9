//! The one place where every error gets its gRPC code (contract "Errors"). The message is always
//! the error's own text; handlers never build a `Status` themselves.

use tonic::{Code, Status};

use crate::coord::link::LossReason;
use crate::coord::CoordError;

/// The gRPC code of each error.
pub fn code(e: &CoordError) -> Code {
    match e {
        CoordError::Invalid(_) => Code::InvalidArgument,
        CoordError::NoLeader(_) | CoordError::LeaseNotFound => Code::NotFound,
        CoordError::NotLeader | CoordError::PermitMismatch { .. } => Code::FailedPrecondition,
        CoordError::WaitExpired { .. } | CoordError::FirstMessageTimeout { .. } => {
            Code::DeadlineExceeded
        }
        CoordError::LeaseExpired { .. } | CoordError::GrantUnconfirmed => Code::Aborted,
        CoordError::SessionLost(LossReason::Draining) => Code::Unavailable,
        CoordError::SessionLost(
            LossReason::Expired | LossReason::PresumedExpired | LossReason::Closed,
        ) => Code::Aborted,
        CoordError::Draining | CoordError::Unavailable(_) => Code::Unavailable,
        CoordError::LimitReached(_) => Code::ResourceExhausted,
        CoordError::NotAuthorised(_) | CoordError::PermissionDenied { .. } => {
            Code::PermissionDenied
        }
        CoordError::Unauthenticated(_) => Code::Unauthenticated,
        CoordError::Zk(_) => Code::Internal,
    }
}

impl From<CoordError> for Status {
    fn from(e: CoordError) -> Self {
        Status::new(code(&e), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coord::types::QueueName;

    #[test]
    fn codes_by_meaning() {
        let name = QueueName::new("x").unwrap();
        for (e, want) in [
            (CoordError::NoLeader(name.clone()), Code::NotFound),
            (CoordError::LeaseNotFound, Code::NotFound),
            (CoordError::NotLeader, Code::FailedPrecondition),
            (
                CoordError::LeaseExpired {
                    lock: name,
                    ttl: std::time::Duration::ZERO,
                },
                Code::Aborted,
            ),
            (
                CoordError::SessionLost(LossReason::Draining),
                Code::Unavailable,
            ),
            (CoordError::SessionLost(LossReason::Expired), Code::Aborted),
            (CoordError::GrantUnconfirmed, Code::Aborted),
            (CoordError::Draining, Code::Unavailable),
            (CoordError::Unauthenticated("no"), Code::Unauthenticated),
            (
                CoordError::PermissionDenied {
                    identity: "billing".into(),
                    verb: crate::auth::Verb::Lock,
                    name: "cron".into(),
                },
                Code::PermissionDenied,
            ),
        ] {
            let text = e.to_string();
            let status = Status::from(e);
            assert_eq!((status.code(), status.message()), (want, text.as_str()));
        }
    }
}
