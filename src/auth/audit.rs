//! The audit trail (README "Security"): one structured event per grant, loss (with its reason),
//! resign, release, lapse and denial, on the tracing target [`TARGET`] — identity, verb, name
//! and fencing token, never a lease. `--audit-log FILE` writes them as JSON lines to a file of
//! their own (for a SIEM shipper to tail); without it they go to the log with everything else,
//! where `ZKGATE_LOG` can select them (`zkgate::audit=info`).

use super::identity::Identity;
use super::policy::Verb;

/// The tracing target of every audit event.
pub const TARGET: &str = "zkgate::audit";

/// A hold was granted (elected, or lock acquired).
pub fn granted(identity: &Identity, verb: Verb, name: &str, fencing_token: u64) {
    tracing::info!(target: TARGET, event = "grant", identity = identity.as_str(), verb = verb.as_str(), name, fencing_token);
}

/// A hold (or a place in the queue) ended without the holder's word: session lost, drain,
/// policy change, limit. `held`: whether it held at the time.
pub fn lost(identity: &Identity, verb: Verb, name: &str, held: Option<u64>, reason: &str) {
    tracing::info!(target: TARGET, event = "loss", identity = identity.as_str(), verb = verb.as_str(), name, fencing_token = held, reason);
}

/// A lock's ttl lapsed (no keep-alive): the lock was released.
pub fn lapsed(identity: &Identity, name: &str, fencing_token: Option<u64>) {
    tracing::info!(target: TARGET, event = "lapse", identity = identity.as_str(), verb = "lock", name, fencing_token);
}

/// The holder gave up: `how` is "in-stream" (resign/release on its stream), "stream ended"
/// (it cancelled or closed the stream: stream loss is release, G3) or "by lease" (a
/// Resign/Release call, possibly by another caller; the fencing token is then not known).
pub fn gave_up(identity: &Identity, verb: Verb, name: &str, fencing_token: Option<u64>, how: &str) {
    let event = match verb {
        Verb::Lock => "release",
        _ => "resign",
    };
    tracing::info!(target: TARGET, event, identity = identity.as_str(), verb = verb.as_str(), name, fencing_token, how);
}

/// A call the policy refused (`PERMISSION_DENIED`).
pub fn denied(identity: &Identity, verb: Verb, name: &str) {
    tracing::info!(target: TARGET, event = "denial", identity = identity.as_str(), verb = verb.as_str(), name);
}
