//! zkgate: a gRPC coordination gateway. A stateless fleet of zkgate processes holds ZooKeeper
//! sessions on behalf of remote clients in any language, which campaign for leadership,
//! observe leaders and hold locks over gRPC.
//!
//! # Layout
//! - [`proto`]: generated `zkgate.v1` code (from `proto/zkgate/v1/`), using [`codec`]'s
//!   small per-call buffers.
//! - [`api`]: tonic handlers; proto ↔ domain conversion; errors → gRPC status;
//!   [`api::limits`]: stream limits per gateway and per client connection (G10).
//! - [`coord`]: no tonic types: ZooKeeper sessions, per-queue actors, elections, leases;
//!   [`coord::paging`] keeps every ZooKeeper packet under `--zk-max-packet`;
//!   [`coord::session`] holds the G2 clock and the quorum (`sync`) liveness probe.
//! - [`server`]: `run(config, listener, http, shutdown)`: the gateway, in-process for tests.
//! - [`http`]: `/metrics`, `/healthz`, `/readyz`.
//! - [`metrics`]: every metric name, described once; [`grpc_metrics`]: the tower layer that
//!   counts gRPC calls.
//! - [`config`]: the command line (`serve`, `dev`, client verbs).
//! - [`logging`]: the binary's log setup (`ZKGATE_LOG`; the ZooKeeper client capped at `info`).
//! - [`localzk`]: start and stop real local ZooKeeper servers (`zkgate dev`, tests).
//! - [`cli`]: the client verbs (`elect`, `lock`, `observe`, `leader`, `candidates`, `holders`,
//!   `resign`, `release`, `validate`), built on the Rust client crate `zkgate-client`
//!   (`clients/rust`); [`held_command`]: the
//!   CMD that `elect -- CMD` / `lock -- CMD` run while they hold, in its own process group.

pub mod api;
pub mod cli;
pub mod codec;
pub mod config;
pub mod coord;
pub mod grpc_metrics;
pub mod held_command;
pub mod http;
pub mod localzk;
pub mod logging;
pub mod metrics;
pub mod proto;
pub mod server;
