//! The command line: its grammar and the rooms the verbs live in.
//! - [`args`]: the `zkgate` command and every verb's arguments (`serve`'s settings are
//!   [`crate::config::ServeArgs`], declared and merged there);
//! - [`verbs`]: `dev` and the client verbs in the style of `etcdctl elect` / `consul lock`,
//!   built on the Rust client crate (`zkgate-client`);
//! - [`held_command`]: the CMD that `elect -- CMD` / `lock -- CMD` run while they hold, and the
//!   rule for how long it may take to stop;
//! - [`keeper`]: the process between the verb and CMD that ties CMD's life to the verb's.

pub mod args;
pub mod held_command;
pub mod keeper;
pub mod verbs;

pub use args::{Cli, Command};
pub use verbs::shutdown_signal;
