//! Log setup for the binary: a `tracing` filter from `ZKGATE_LOG`, text or JSON lines on
//! stderr, and a cap on the ZooKeeper client library's own logs.
//!
//! Leases never appear in logs, at any level. A lease encodes its znode's protected id, and the
//! `zookeeper-client` crate prints request and reply paths — which contain that id — in its
//! `debug!`/`trace!` lines (and its connect request, with the session password, at `debug`).
//! So its target is capped at [`ZK_CLIENT_MAX_LEVEL`] by a global filter that no `ZKGATE_LOG`
//! directive can lift (an `EnvFilter` directive could: a more specific one such as
//! `zookeeper_client::session=trace` would win over ours). zkgate's own log lines name
//! elections, candidates and owners, never a lease or a member znode's path.

use tracing::{Level, Metadata};
use tracing_subscriber::filter::{filter_fn, EnvFilter, FilterFn};
use tracing_subscriber::prelude::*;

/// The environment variable holding the log filter (`info`, `zkgate=debug`, `trace`, …).
pub const LOG_ENV: &str = "ZKGATE_LOG";
/// The filter when [`LOG_ENV`] is unset or invalid.
pub const DEFAULT_FILTER: &str = "info";
/// The most verbose level at which the `zookeeper_client` crate may log: its `info` and above
/// (session established or lost, connection failures) carry no paths.
pub const ZK_CLIENT_MAX_LEVEL: Level = Level::INFO;

/// Installs the global subscriber: [`LOG_ENV`] (default [`DEFAULT_FILTER`]), text or JSON on
/// stderr, with [`zk_client_cap`].
pub fn init(json: bool) {
    let filter =
        EnvFilter::try_from_env(LOG_ENV).unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let registry = tracing_subscriber::registry()
        .with(zk_client_cap())
        .with(filter);
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    if json {
        registry.with(fmt.json()).init();
    } else {
        registry.with(fmt).init();
    }
}

/// [`init`] for `zkgate serve`: with `--audit-log FILE` the audit trail (target
/// [`crate::auth::audit::TARGET`]) goes as JSON lines to that file, appended, whatever
/// `ZKGATE_LOG` says, and not to stderr; without it, audit events are ordinary `info` lines.
///
/// # Errors
/// The audit file cannot be opened for appending.
pub fn init_serve(json: bool, audit: Option<&std::path::Path>) -> std::io::Result<()> {
    let Some(path) = audit else {
        init(json);
        return Ok(());
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let filter =
        EnvFilter::try_from_env(LOG_ENV).unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let is_audit = |meta: &Metadata<'_>| meta.target() == crate::auth::audit::TARGET;
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let stderr: Box<dyn tracing_subscriber::Layer<_> + Send + Sync> = if json {
        Box::new(fmt.json())
    } else {
        Box::new(fmt)
    };
    let audit_layer = tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(false)
        .with_span_list(false)
        .with_writer(std::sync::Mutex::new(file))
        .with_filter(filter_fn(is_audit));
    tracing_subscriber::registry()
        .with(zk_client_cap())
        .with(
            stderr
                .with_filter(filter)
                .with_filter(filter_fn(move |m| !is_audit(m))),
        )
        .with(audit_layer)
        .init();
    Ok(())
}

/// A global filter that drops the `zookeeper_client` crate's spans and events more verbose than
/// [`ZK_CLIENT_MAX_LEVEL`], whatever other filters allow.
pub fn zk_client_cap() -> FilterFn<impl Fn(&Metadata<'_>) -> bool + Clone> {
    filter_fn(|meta: &Metadata<'_>| {
        !(is_zk_client(meta.target()) && *meta.level() > ZK_CLIENT_MAX_LEVEL)
    })
}

fn is_zk_client(target: &str) -> bool {
    target == "zookeeper_client" || target.starts_with("zookeeper_client::")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_zookeeper_client_target_is_capped() {
        assert!(is_zk_client("zookeeper_client"));
        assert!(is_zk_client("zookeeper_client::session::depot"));
        assert!(!is_zk_client("zookeeper_client_other"));
        assert!(!is_zk_client("zkgate::coord"));
        // tracing orders levels by verbosity: only DEBUG and TRACE are above the cap.
        assert!(Level::DEBUG > ZK_CLIENT_MAX_LEVEL && Level::TRACE > ZK_CLIENT_MAX_LEVEL);
        assert!(Level::WARN < ZK_CLIENT_MAX_LEVEL);
    }
}
