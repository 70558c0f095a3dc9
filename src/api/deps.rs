//! What every `zkgate.v1` service holds: [`ApiDeps`], shared by [`super::ElectionApi`] and
//! [`super::LockApi`] (each is this and the service's own methods).

use std::sync::Arc;

use tonic::Request;

use super::limits::{Admission, UnaryPermit};
use crate::auth::{self, Auth, Identity, LeaseKeys};
use crate::coord::session::UnaryWork;
use crate::coord::{CoordError, Coordinator};

/// The coordinator, the stream admission (G10), the tenancy policy and the lease keys: one
/// value the gateway builds once and every service clones.
#[derive(Debug, Clone)]
pub struct ApiDeps {
    pub coord: Arc<Coordinator>,
    pub admission: Arc<Admission>,
    pub auth: Arc<Auth>,
    pub keys: LeaseKeys,
}

impl ApiDeps {
    pub fn new(
        coord: Arc<Coordinator>,
        admission: Arc<Admission>,
        auth: Arc<Auth>,
        keys: LeaseKeys,
    ) -> Self {
        Self {
            coord,
            admission,
            auth,
            keys,
        }
    }

    /// The caller's identity under a policy (the per-identity limits count it), else none.
    pub fn limited(&self, identity: &Identity) -> Option<Identity> {
        self.auth.enforced().then(|| identity.clone())
    }

    /// Admits a unary call of `kind` against the caller's per-identity limits (without a
    /// policy: its client address's) and the gateway's calls of that kind in flight (G10),
    /// before any work.
    pub fn unary<T>(
        &self,
        request: &Request<T>,
        kind: UnaryWork,
    ) -> Result<UnaryPermit, CoordError> {
        let identity = auth::caller(request);
        self.admission.unary(
            self.limited(&identity).as_ref(),
            request.remote_addr(),
            kind,
        )
    }
}
