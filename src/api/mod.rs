//! tonic handlers only: proto ↔ domain conversion at the edge, and one mapping from
//! coordination errors to gRPC statuses. No ZooKeeper calls here.

pub mod convert;
pub mod deps;
pub mod election;
pub mod error;
mod holder_stream;
pub mod limits;
pub mod lock;
pub mod observe_many;
mod outbox;

pub use deps::ApiDeps;
pub use election::ElectionApi;
pub use lock::LockApi;
