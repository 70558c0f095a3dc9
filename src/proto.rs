//! The `zkgate.v1` API: the `zkgate-proto` crate (`crates/zkgate-proto`), with its servers.
//! One set of message types across the workspace: the Rust client's `zkgate_client::pb` is the
//! same crate.

pub use zkgate_proto::*;
