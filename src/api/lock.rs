//! The Lock service. Declared in the API so clients and reflection see it; its recipe is the
//! subject of its own issue and answers `UNIMPLEMENTED` until then.

use std::pin::Pin;

use futures::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::proto as pb;
use crate::proto::lock_server::Lock;

#[derive(Debug, Default)]
pub struct LockApi;

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

fn not_yet() -> Status {
    Status::unimplemented("the Lock service is not implemented in this version of zkgate")
}

#[tonic::async_trait]
impl Lock for LockApi {
    type AcquireStream = BoxStream<pb::AcquireResponse>;

    async fn acquire(
        &self,
        _request: Request<Streaming<pb::AcquireRequest>>,
    ) -> Result<Response<Self::AcquireStream>, Status> {
        Err(not_yet())
    }

    async fn release(
        &self,
        _request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        Err(not_yet())
    }

    async fn holders(
        &self,
        _request: Request<pb::HoldersRequest>,
    ) -> Result<Response<pb::HoldersResponse>, Status> {
        Err(not_yet())
    }

    async fn validate(
        &self,
        _request: Request<pb::LockValidateRequest>,
    ) -> Result<Response<pb::LockValidateResponse>, Status> {
        Err(not_yet())
    }
}
