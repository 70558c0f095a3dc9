//! The one place where every coordination error gets its gRPC code (contract "Errors").

use tonic::Status;

use crate::coord::session::LossReason;
use crate::coord::types::InvalidInput;
use crate::coord::CoordError;

impl From<CoordError> for Status {
    fn from(e: CoordError) -> Self {
        let msg = e.to_string();
        match e {
            CoordError::Invalid(_) => Status::invalid_argument(msg),
            CoordError::NotFound(_) => Status::not_found(msg),
            CoordError::FailedPrecondition(_) => Status::failed_precondition(msg),
            CoordError::Unavailable(_) | CoordError::Draining => Status::unavailable(msg),
            CoordError::SessionLost(LossReason::Draining) => Status::unavailable(msg),
            CoordError::SessionLost(
                LossReason::Expired | LossReason::PresumedExpired | LossReason::Closed,
            ) => Status::aborted(msg),
            CoordError::DeadlineExceeded(_) => Status::deadline_exceeded(msg),
            CoordError::ResourceExhausted(_) => Status::resource_exhausted(msg),
            CoordError::NoAuth(_) => Status::permission_denied(msg),
            CoordError::Zk(_) => Status::internal(msg),
        }
    }
}

/// Bad input at the edge is `INVALID_ARGUMENT` with the rule it broke.
pub fn invalid(e: InvalidInput) -> Status {
    Status::invalid_argument(e.to_string())
}
