//! Generated gRPC code for `zkgate.v1` (server and client), plus the descriptor set that
//! server reflection serves.

#![allow(clippy::all, missing_docs)]

tonic::include_proto!("zkgate.v1");

/// Encoded `FileDescriptorSet` of `proto/zkgate/v1/*.proto`, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("zkgate_descriptor");
