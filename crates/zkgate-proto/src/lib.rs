//! The `zkgate.v1` API, generated once from the repository's `proto/zkgate/v1/` for the whole
//! workspace: the gateway (`zkgate`, as `zkgate::proto`) and the Rust client (`zkgate-client`,
//! as `zkgate_client::pb`) hand each other the same message types, so tests, the CLI verbs and
//! the benchmark need no conversion between two copies.
//!
//! - the messages and client stubs (`election_client`, `lock_client`), tonic's default codec;
//! - with the `server` feature (the gateway's): the servers (`election_server`,
//!   `lock_server`) over the same messages, using [`codec`]'s small per-call buffers;
//! - [`FILE_DESCRIPTOR_SET`], for server reflection.

#![allow(clippy::all, missing_docs)]

tonic::include_proto!("zkgate.v1");

#[cfg(feature = "server")]
pub mod codec;
#[cfg(feature = "server")]
pub mod encoded;

/// What the server's `Observe` sends: an [`ObserveResponse`] encoded once for all its observers
/// ([`encoded`]).
#[cfg(feature = "server")]
pub type EncodedObserveResponse = encoded::Encoded<ObserveResponse>;

#[cfg(feature = "server")]
include!(concat!(env!("OUT_DIR"), "/server/zkgate.v1.rs"));

/// One `Campaign` request: `Request::Resign(..).into()`.
impl From<campaign_request::Request> for CampaignRequest {
    fn from(request: campaign_request::Request) -> Self {
        CampaignRequest {
            request: Some(request),
        }
    }
}

/// One `Acquire` request: `Request::Release(..).into()`.
impl From<acquire_request::Request> for AcquireRequest {
    fn from(request: acquire_request::Request) -> Self {
        AcquireRequest {
            request: Some(request),
        }
    }
}

/// Encoded `FileDescriptorSet` of `proto/zkgate/v1/*.proto`, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("zkgate_descriptor");
