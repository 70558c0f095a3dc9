//! zkgate: a gRPC coordination gateway. A stateless fleet of zkgate processes holds ZooKeeper
//! sessions on behalf of remote clients in any language, which campaign for leadership,
//! observe leaders and hold locks over gRPC.
//!
//! # Layout
//! - [`proto`]: the `zkgate.v1` API, the `zkgate-proto` crate (`crates/zkgate-proto`): the
//!   messages and client stubs (one set of types in the workspace, the Rust client's too), the
//!   servers with small per-call buffers, and the reflection descriptor set.
//! - [`api`]: tonic handlers; proto ↔ domain conversion; errors → gRPC status;
//!   [`api::limits`]: stream limits per gateway and per client connection (G10).
//! - [`coord`]: no tonic types. [`coord::session`]: the ZooKeeper session pool, the G2 clock
//!   and the quorum (`sync`) liveness probe; [`coord::link`]: the link state every stream
//!   follows; [`coord::timing`]: every duration derived from T, checked once;
//!   [`coord::queue`]: one actor per queue per session around the pure
//!   [`coord::queue::state`] core (who holds, confirmation, observers' view — unit-tested
//!   without a network); [`coord::member`]: one member znode per stream, its guard and release;
//!   [`coord::election`] and [`coord::lock`]: what only each recipe adds; [`coord::error`]:
//!   errors named by meaning; [`coord::paging`] keeps every ZooKeeper packet under
//!   `--zk-max-packet`; [`coord::zk`]: the instrumented ZooKeeper client.
//! - [`auth`]: tenancy: identities, the `--auth-policy` decision core, signed leases (the
//!   fleet key) and the audit trail.
//! - [`server`]: `run(config, listener, http, shutdown)`: the gateway, in-process for tests.
//! - [`batched_writes`]: client connections whose writes wait one pass of the scheduler, so
//!   the frames of every stream woken by one event leave in one write.
//! - [`http`]: `/metrics`, `/healthz`, `/readyz`.
//! - [`metrics`]: every metric name, described once; [`grpc_metrics`]: the tower layer that
//!   counts gRPC calls.
//! - [`config`]: `serve`'s settings, declared once and merged from flags, `ZKGATE_*` and the
//!   TOML file in one place.
//! - [`logging`]: the binary's log setup (`ZKGATE_LOG`; the ZooKeeper client capped at `info`).
//! - `zkgate dev`'s standalone ZooKeeper is the `zkgate-localzk` crate (`crates/localzk`:
//!   real local ZooKeeper servers tied to our process, and process state and signals by pid);
//!   the test kit (`crates/testkit`) builds ensembles and fault injection on the same crate.
//! - [`cli`]: the command line's grammar and its verbs: [`cli::verbs`] (`dev` and the client
//!   verbs `elect`, `lock`, `observe`, `leader`, `candidates`, `holders`, `resign`, `release`,
//!   `validate`, built on the Rust client crate `zkgate-client`, `clients/rust`);
//!   [`cli::held_command`]: the CMD that `elect -- CMD` / `lock -- CMD` run while they hold,
//!   in its own process group, under [`cli::keeper`].

pub mod api;
pub mod auth;
pub mod batched_writes;
pub mod cli;
pub mod config;
pub mod conn_fate;
pub mod coord;
pub mod grpc_metrics;
pub mod http;
pub mod kerberos;
pub mod logging;
pub mod metrics;
pub mod proto;
pub mod server;
pub mod ui;
