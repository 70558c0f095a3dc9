//! The `zkgate.v1` API: the messages and client stubs of the `zkgate-client` crate (one set of
//! types across the workspace), the servers generated here, and the descriptor set that server
//! reflection serves.

#![allow(clippy::all, missing_docs)]

pub use zkgate_client::pb::*;

tonic::include_proto!("zkgate.v1");

/// Encoded `FileDescriptorSet` of `proto/zkgate/v1/*.proto`, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("zkgate_descriptor");
