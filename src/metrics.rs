//! Every metric zkgate exports, named once (contract "Observability"), described once, and recorded through the
//! `metrics` facade. The Prometheus exporter renders them at `/metrics` on the HTTP port.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const LEADER_CHANGES: &str = "zkgate_leader_changes_total";
pub const LEADER_TENURE: &str = "zkgate_leader_tenure_seconds";
pub const FAILOVER: &str = "zkgate_failover_seconds";
pub const CAMPAIGNS_ACTIVE: &str = "zkgate_campaigns_active";
pub const ELECTION_CANDIDATES: &str = "zkgate_election_candidates";
pub const ELECTION_LEADERS: &str = "zkgate_election_leaders";
/// Per name (elections and locks alike, label `kind` and the capped `name`): members of this
/// gateway waiting now, the wait until granted, and the hold time.
pub const NAME_WAITERS: &str = "zkgate_name_waiters";
pub const NAME_WAIT: &str = "zkgate_name_wait_seconds";
pub const NAME_HOLD: &str = "zkgate_name_hold_seconds";

/// Every metric the contract names (contract "Observability"), as this module spells it.
pub const CONTRACT_METRICS: &[&str] = &[
    LEADER_CHANGES,
    LEADER_TENURE,
    FAILOVER,
    CAMPAIGNS_ACTIVE,
    OBSERVERS_ACTIVE,
    LOCKS_HELD,
    LOCK_WAIT,
    ZK_CONNECTED,
    ZK_SESSION_EXPIRATIONS,
    ZK_REQUESTS,
    ZK_REQUEST_DURATION,
    GRPC_REQUESTS,
    GRPC_STREAMS_ACTIVE,
];

/// The per-election gauges, beyond the contract: they make the per-election alert possible.
pub const ELECTION_GAUGES: &[&str] = &[ELECTION_CANDIDATES, ELECTION_LEADERS];

/// The per-name metrics (contract "Observability": waiters, wait time, hold time per name).
pub const NAME_METRICS: &[&str] = &[NAME_WAITERS, NAME_WAIT, NAME_HOLD];

/// The gauges and counters of ZooKeeper's own faults that the alert rules use
/// (deploy/prometheus/zkgate-rules.yml, docs/observability.md), beyond the contract.
pub const ZK_FAULT_METRICS: &[&str] = &[
    ZK_DIVERGED_SESSIONS,
    ZK_DIVERGENCE_PROOFS,
    ZK_STRANDED_SESSIONS,
    ZK_STRAYS_DELETED,
];

/// The histograms among them.
pub const HISTOGRAMS: &[&str] = &[
    LEADER_TENURE,
    FAILOVER,
    LOCK_WAIT,
    ZK_REQUEST_DURATION,
    NAME_WAIT,
    NAME_HOLD,
];
pub const OBSERVERS_ACTIVE: &str = "zkgate_observers_active";
pub const LOCKS_HELD: &str = "zkgate_locks_held";
pub const LOCK_WAIT: &str = "zkgate_lock_wait_seconds";
pub const ZK_CONNECTED: &str = "zkgate_zk_connected";
pub const ZK_SESSION_EXPIRATIONS: &str = "zkgate_zk_session_expirations_total";
pub const ZK_STRAYS_DELETED: &str = "zkgate_zk_stray_znodes_deleted_total";
pub const ZK_DIVERGED_SESSIONS: &str = "zkgate_zk_diverged_sessions";
pub const ZK_DIVERGENCE_PROOFS: &str = "zkgate_zk_divergence_proofs_total";
pub const ZK_STRANDED_SESSIONS: &str = "zkgate_zk_stranded_sessions";
pub const ZK_REQUESTS: &str = "zkgate_zk_requests_total";
pub const ZK_REQUEST_DURATION: &str = "zkgate_zk_request_duration_seconds";
pub const GRPC_REQUESTS: &str = "zkgate_grpc_requests_total";
pub const GRPC_STREAMS_ACTIVE: &str = "zkgate_grpc_streams_active";
pub const LIMIT_REJECTIONS: &str = "zkgate_limit_rejections_total";
pub const AUTH_POLICY_RELOADS: &str = "zkgate_auth_policy_reloads_total";
pub const IDENTITY_LIMIT_REJECTIONS: &str = "zkgate_identity_limit_rejections_total";
pub const HOLDER_PINGS: &str = "zkgate_holder_pings_total";

/// Label value used for names beyond the cardinality cap.
pub const OTHER: &str = "other";

/// Default number of distinct election/lock names that get their own label value.
pub const DEFAULT_NAME_LABEL_CAP: usize = 100;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
static NAMES: OnceLock<Mutex<NameLabels>> = OnceLock::new();

struct NameLabels {
    cap: usize,
    seen: HashSet<String>,
}

/// Installs the Prometheus recorder (once per process: tests start many servers in one
/// process and share it) and returns the handle that renders `/metrics`.
pub fn install(name_label_cap: usize) -> PrometheusHandle {
    NAMES.get_or_init(|| {
        Mutex::new(NameLabels {
            cap: name_label_cap,
            seen: HashSet::new(),
        })
    });
    HANDLE
        .get_or_init(|| {
            let buckets = [
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0,
            ];
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)
                .expect("static buckets are valid")
                .install_recorder()
                .unwrap_or_else(|e| panic!("installing the Prometheus recorder failed: {e}"));
            describe();
            register_unlabelled();
            handle
        })
        .clone()
}

fn describe() {
    describe_counter!(
        LEADER_CHANGES,
        "Leaders elected through this gateway, by election."
    );
    describe_histogram!(
        LEADER_TENURE,
        Unit::Seconds,
        "How long leaders served by this gateway led."
    );
    describe_histogram!(
        FAILOVER,
        Unit::Seconds,
        "Leader znode gone -> successor elected, as seen by the successor's gateway."
    );
    describe_gauge!(
        CAMPAIGNS_ACTIVE,
        "Open Campaign streams (candidates and leaders)."
    );
    describe_gauge!(
        ELECTION_CANDIDATES,
        "Open Campaign candidacies (leader included) on this gateway, by election."
    );
    describe_gauge!(
        ELECTION_LEADERS,
        "1 while a Campaign stream on this gateway leads the election, else 0."
    );
    describe_gauge!(OBSERVERS_ACTIVE, "Open Observe and ObserveMany streams.");
    describe_gauge!(
        NAME_WAITERS,
        "Campaign and Acquire streams on this gateway waiting (queued, not yet granted), by kind and name."
    );
    describe_histogram!(
        NAME_WAIT,
        Unit::Seconds,
        "Time from queued to granted (elected, acquired), by kind and name."
    );
    describe_histogram!(
        NAME_HOLD,
        Unit::Seconds,
        "How long leaderships and lock holds on this gateway lasted, by kind and name."
    );
    describe_gauge!(
        LOCKS_HELD,
        "Locks and permits held by this gateway's Acquire streams."
    );
    describe_histogram!(
        LOCK_WAIT,
        Unit::Seconds,
        "Time from queued to acquired for locks."
    );
    describe_gauge!(
        ZK_CONNECTED,
        "ZooKeeper sessions of this gateway that are connected (0 or 1 with the default pool of one).",
    );
    describe_counter!(
        ZK_SESSION_EXPIRATIONS,
        "ZooKeeper sessions lost (expired, or presumed expired by the gateway's own clock)."
    );
    describe_counter!(ZK_REQUESTS, "ZooKeeper requests by operation and result.");
    describe_counter!(
        ZK_STRAYS_DELETED,
        "Member znodes deleted as strays: a second znode of one create, its lost attempt applied after the search for it found nothing (G5)."
    );
    describe_gauge!(
        ZK_DIVERGED_SESSIONS,
        "Sessions of this gateway whose ZooKeeper server is proven diverged from its quorum (it lists a member the leader does not have, ZOOKEEPER-5010): their queues grant nothing until a listing no longer shows that member (the session moved to another server, or the server was healed)."
    );
    describe_counter!(
        ZK_DIVERGENCE_PROOFS,
        "Times a session of this gateway was proven on a ZooKeeper server diverged from its quorum (each time from no proof to one): unlike zkgate_zk_diverged_sessions it keeps a proof that a move to another server ended within a second, between two scrapes. That server stays wrong: heal it."
    );
    describe_gauge!(
        ZK_STRANDED_SESSIONS,
        "Sessions of this gateway stranded on a diverged ZooKeeper server (a proof standing for 5 s): their waiting members and observers were ended UNAVAILABLE and they take no new ones; with every session stranded the gateway is not ready."
    );
    describe_counter!(
        HOLDER_PINGS,
        "Pings read on Campaign and Acquire streams, by result: answered (the lease renewed), waiting (recorded for the grant), unvouched (the session could not vouch: the holder's lease runs out)."
    );
    describe_histogram!(
        ZK_REQUEST_DURATION,
        Unit::Seconds,
        "ZooKeeper request latency by operation."
    );
    describe_counter!(GRPC_REQUESTS, "gRPC calls by method and final status code.");
    describe_gauge!(GRPC_STREAMS_ACTIVE, "Open gRPC calls by method.");
    describe_counter!(
        LIMIT_REJECTIONS,
        "Requests and streams refused by a configured limit (RESOURCE_EXHAUSTED, or the status named in README for value size and the first-message timeout), by limit."
    );
    describe_counter!(
        IDENTITY_LIMIT_REJECTIONS,
        "Streams refused by a per-identity limit (under --auth-policy), by limit and identity (capped like names)."
    );
    describe_counter!(
        AUTH_POLICY_RELOADS,
        "SIGHUP reloads of --auth-policy by result: ok, or error (the file did not parse; the old policy stays, the log says why)."
    );
}

/// Creates every series without labels at its zero, so `/metrics` shows each one (with its
/// HELP line) from the first scrape, not only after its first event. It matters for alerting:
/// `increase()` needs two samples, so a counter that first appears at 1 (the first session
/// expiration) would never fire an alert, and a gateway that never reached ZooKeeper would have
/// no `zkgate_zk_connected` series at all. Gauges are moved by 0 rather than set, so
/// registering can never overwrite a value already recorded.
fn register_unlabelled() {
    counter!(ZK_SESSION_EXPIRATIONS).increment(0);
    counter!(ZK_STRAYS_DELETED).increment(0);
    counter!(ZK_DIVERGENCE_PROOFS).increment(0);
    for g in [
        CAMPAIGNS_ACTIVE,
        OBSERVERS_ACTIVE,
        LOCKS_HELD,
        ZK_CONNECTED,
        ZK_DIVERGED_SESSIONS,
        ZK_STRANDED_SESSIONS,
    ] {
        gauge!(g).increment(0.0);
    }
    for h in [LEADER_TENURE, FAILOVER, LOCK_WAIT] {
        // Registering is enough: an empty histogram renders with zero buckets, sum and count.
        let _ = histogram!(h);
    }
}

/// The label for an election or lock name: itself for the first `cap` names seen, then `other`.
pub fn name_label(name: &str) -> String {
    let Some(names) = NAMES.get() else {
        return name.to_owned();
    };
    let mut names = names.lock().unwrap_or_else(|p| p.into_inner());
    if names.seen.contains(name) {
        return name.to_owned();
    }
    if names.seen.len() < names.cap {
        names.seen.insert(name.to_owned());
        return name.to_owned();
    }
    OTHER.to_owned()
}

pub fn zk_request(op: &'static str, result: &'static str, elapsed: Duration) {
    counter!(ZK_REQUESTS, "op" => op, "result" => result).increment(1);
    histogram!(ZK_REQUEST_DURATION, "op" => op).record(elapsed.as_secs_f64());
}

pub fn leader_elected(election: &str, failover: Option<Duration>) {
    counter!(LEADER_CHANGES, "election" => name_label(election)).increment(1);
    if let Some(f) = failover {
        histogram!(FAILOVER).record(f.as_secs_f64());
    }
}

pub fn leader_tenure(tenure: Duration) {
    histogram!(LEADER_TENURE).record(tenure.as_secs_f64());
}

pub fn campaigns_active(delta: f64) {
    gauge!(CAMPAIGNS_ACTIVE).increment(delta);
}

pub fn observers_active(delta: f64) {
    gauge!(OBSERVERS_ACTIVE).increment(delta);
}

pub fn name_waiters(kind: &'static str, name: &str, delta: f64) {
    gauge!(NAME_WAITERS, "kind" => kind, "name" => name.to_owned()).increment(delta);
}

pub fn name_wait(kind: &'static str, name: &str, wait: Duration) {
    histogram!(NAME_WAIT, "kind" => kind, "name" => name.to_owned()).record(wait.as_secs_f64());
}

pub fn name_hold(kind: &'static str, name: &str, hold: Duration) {
    histogram!(NAME_HOLD, "kind" => kind, "name" => name.to_owned()).record(hold.as_secs_f64());
}

pub fn locks_held(delta: f64) {
    gauge!(LOCKS_HELD).increment(delta);
}

pub fn lock_wait(wait: Duration) {
    histogram!(LOCK_WAIT).record(wait.as_secs_f64());
}

/// One session's share of a gauge that counts sessions in some state
/// (`zkgate_zk_connected`: connected sessions, 0 or 1 with the default pool of one;
/// `zkgate_zk_diverged_sessions`: sessions proven on a diverged server, `coord::divergence`),
/// so sessions never overwrite each other, and taken back when the session goes.
#[derive(Debug)]
pub struct SessionShare {
    gauge: &'static str,
    counted: bool,
}

impl SessionShare {
    /// A share of `zkgate_zk_connected`.
    pub fn connected() -> Self {
        Self::of(ZK_CONNECTED)
    }

    /// A share of `zkgate_zk_diverged_sessions`.
    pub fn diverged() -> Self {
        Self::of(ZK_DIVERGED_SESSIONS)
    }

    /// A share of `zkgate_zk_stranded_sessions`.
    pub fn stranded() -> Self {
        Self::of(ZK_STRANDED_SESSIONS)
    }

    fn of(gauge: &'static str) -> Self {
        Self {
            gauge,
            counted: false,
        }
    }

    pub fn set(&mut self, counted: bool) {
        if self.counted != counted {
            self.counted = counted;
            gauge!(self.gauge).increment(if counted { 1.0 } else { -1.0 });
        }
    }
}

impl Drop for SessionShare {
    fn drop(&mut self) {
        self.set(false);
    }
}

/// A request or stream refused by the limit named `limit` (a fixed set of names: README).
pub fn limit_rejected(limit: &'static str) {
    counter!(LIMIT_REJECTIONS, "limit" => limit).increment(1);
}

/// A per-identity limit refused a stream (beside `zkgate_limit_rejections_total{limit}`). The
/// identity label is capped like names: past the cap it is `other`.
pub fn identity_limit_rejected(limit: &'static str, identity: &str) {
    counter!(IDENTITY_LIMIT_REJECTIONS, "limit" => limit, "identity" => identity_label(identity))
        .increment(1);
}

static IDENTITIES: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();

/// The label for an identity: itself for the first [`DEFAULT_NAME_LABEL_CAP`] identities
/// seen, then `other`.
pub fn identity_label(identity: &str) -> String {
    let mut seen = IDENTITIES
        .get_or_init(|| Mutex::new(HashSet::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if seen.contains(identity)
        || seen.len() < DEFAULT_NAME_LABEL_CAP && seen.insert(identity.to_owned())
    {
        return identity.to_owned();
    }
    OTHER.to_owned()
}

/// A SIGHUP reload of `--auth-policy`: `ok`, or `error` (the old policy stays).
pub fn auth_policy_reload(result: &'static str) {
    counter!(AUTH_POLICY_RELOADS, "result" => result).increment(1);
}

/// A ping read on a holder stream: `answered`, `waiting` or `unvouched`.
pub fn holder_ping(result: &'static str) {
    counter!(HOLDER_PINGS, "result" => result).increment(1);
}

/// A stray member znode deleted (`coord::queue::state::Strays`).
pub fn stray_deleted() {
    counter!(ZK_STRAYS_DELETED).increment(1);
}

/// A session of this gateway was proven on a diverged ZooKeeper server (`coord::divergence`).
pub fn divergence_proven() {
    counter!(ZK_DIVERGENCE_PROOFS).increment(1);
}

pub fn zk_session_lost() {
    counter!(ZK_SESSION_EXPIRATIONS).increment(1);
}

pub fn grpc_request(method: &'static str, code: &'static str) {
    counter!(GRPC_REQUESTS, "method" => method, "code" => code).increment(1);
}

pub fn grpc_streams_active(method: &'static str, delta: f64) {
    gauge!(GRPC_STREAMS_ACTIVE, "method" => method).increment(delta);
}

/// Keeps a gauge raised while alive: moved into a stream, it lowers the gauge however the
/// stream ends.
#[derive(Debug)]
pub struct GaugeGuard(fn(f64));

impl GaugeGuard {
    pub fn raise(f: fn(f64)) -> Self {
        f(1.0);
        Self(f)
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        (self.0)(-1.0)
    }
}

/// Keeps one labelled series of a gauge raised by one while alive, like [`GaugeGuard`]: the
/// series is lowered again when the guard is dropped, however its owner ends. It holds the label
/// value it was raised with (already capped by [`name_label`]), so it lowers the same series.
#[derive(Debug)]
pub struct LabelledGaugeGuard {
    name: &'static str,
    key: &'static str,
    value: String,
}

impl LabelledGaugeGuard {
    pub fn raise(name: &'static str, key: &'static str, value: String) -> Self {
        gauge!(name, key => value.clone()).increment(1.0);
        Self { name, key, value }
    }

    /// The label value this guard raised.
    pub fn label(&self) -> &str {
        &self.value
    }
}

impl Drop for LabelledGaugeGuard {
    fn drop(&mut self) {
        gauge!(self.name, self.key => self.value.clone()).decrement(1.0);
    }
}

/// One open candidacy in `zkgate_election_candidates{election}`; `label` comes from
/// [`name_label`].
pub fn election_candidate(label: String) -> LabelledGaugeGuard {
    LabelledGaugeGuard::raise(ELECTION_CANDIDATES, "election", label)
}

/// One leadership in office in `zkgate_election_leaders{election}`: held from `elected` until
/// the leadership ends; `label` comes from [`name_label`].
pub fn election_leader(label: String) -> LabelledGaugeGuard {
    LabelledGaugeGuard::raise(ELECTION_LEADERS, "election", label)
}
