//! Randomized soak for safety under faults (issue 4, issue 10 item 8). Not part of CI.
//!
//! ```text
//! cargo build --release --bin zkgate       # the CLI verbs run target/release/zkgate
//! cargo run --release --example soak -- --minutes 10
//! cargo run --release --example soak -- --minutes 35 --gap 1 --client-gap 1.5 --seed N
//! cargo run --release --example soak -- --minutes 5 --zk-sessions 2   # a pool per gateway
//! cargo run --release --example soak -- --minutes 5 --granted-below 3s # granted 3 s of 4 s
//! cargo run --release --example soak -- --minutes 3 --faults KillZkLeader --verbs 0
//! ```
//!
//! Starts a 3-node ZooKeeper ensemble whose quorum and election links pass through link
//! cutters (`zkgate_testkit::ensemble`), a few gateways as child processes (this binary in
//! `gateway` mode: the same `serve` code as `zkgate serve`, but examples do not get the
//! binary's path), each reaching ZooKeeper through link cutters (the first `--single-link`
//! of them through one server only), and client slots that keep campaigning in a few
//! elections (and asking for permits of a few semaphores: `--locks`, `--permits`) through
//! link cutters of their own, leaving by resign/release or by being killed now and then.
//!
//! Faults, at random, one at a time from the list of `tests/faults.rs`: a client killed or
//! reset, a client's link blackholed, a gateway SIGKILLed (then restarted) or SIGSTOPped past
//! the session timeout (then SIGCONTed), the ZooKeeper leader killed (then restarted), a
//! ZooKeeper server restarted, a gateway's ZooKeeper link blackholed shorter or longer than the
//! session timeout, or one way only (requests lost, notifications delivered) past it; a
//! follower cut off from its quorum (every peer link blackholed, its clients still reach it)
//! for T/2 or T + 2 s, mostly one that some gateway's session uses; a gateway's ZooKeeper
//! frozen (its follower SIGSTOPped, or its links blackholed) for T/2 or T + 1.5 s while its
//! clients send `proclaim{}`, `resign{}` and `release{}` on their streams; and, not at random,
//! the operator's wipe of a diverged ZooKeeper server (below). With `--client-gap` the client
//! faults come from a second injector, concurrently with the others. Throughout, the
//! gateways' test seams (`ZKGATE_FAILPOINT_*`, `src/coord/zk.rs`) lose the reply of every
//! `--lose-create-every`th member create, fail every `--fail-delete-every`th delete unsent and
//! keep a client handle of every `--keep-given-up-every`th session a gateway gives up; their
//! firings are counted from the gateways' logs.
//!
//! At the edges (issue 19 item 6): CLI verb slots (`--verbs`) run `zkgate elect soak-cmd-elect
//! -- CMD` and `zkgate lock soak-cmd-lock --requeue -- CMD` through stable link cutters in front
//! of the gateways, CMD appending wall-clock timestamps every 20 ms to a file per process named
//! by its hold's fencing token (a start script leaving two workers behind, one in a session of
//! its own, one time in four; a CMD slow to stop on SIGTERM one in four); the verbs meet
//! SIGHUP, SIGKILL and SIGSTOP (for T + 1 s) while holding, and drains of their gateway. Lock
//! `soak-ttl-0` is held by `--ttl-clients` with a ttl and keep-alives, some of which stop
//! (`TtlLapse`) or are blackholed. `Drain` SIGTERMs a gateway on which something holds, and
//! `DrainUnreachable` does so after blackholing every client link to it; both restart it, and
//! a drain still running silence limit + 5 s after SIGTERM fails the run. `--granted-below D`
//! sets the ensemble's `maxSessionTimeout` to D, below what the gateways ask.
//!
//! `DivergeServer` causes ZOOKEEPER-5010's outcome on purpose, since the restarts above cause
//! the real one only now and then: a follower is killed, its database rewritten
//! (`LocalZk::diverge`) to list a ghost at the head of every queue with members (just below
//! the head's sequence, owned by a session the ensemble never had) and, in half of the queues,
//! to lack the member second in line, and started again; after
//! T + 6 s it is killed, wiped and started again (mostly server 0, g0's only one). Meanwhile its gateways must grant nothing
//! from it: those that name other servers move away, and g0, when the server is its only one,
//! is stranded (its waiting members end `UNAVAILABLE`). The summary counts the faults, how
//! many of them the server showed (a snapshot sync undoes the edits), and the stranded
//! sessions per gateway.
//!
//! The operator (`--operator`, on by default) plays the runbook of docs/observability.md: a
//! session on a ZooKeeper server diverged from its quorum (ZOOKEEPER-5010, which the soak's
//! restarts cause now and then) grants nothing, and a gateway that reaches only that server
//! waits for it to be healed. Every second the operator reads each gateway's
//! `zkgate_zk_diverged_sessions` on `/metrics`; when one stays above 0 for `--operator-after`
//! (3 s: the gauge also rises briefly on gateways whose session then moves away by itself),
//! it reads each server alone, and a server that lists a member znode most servers do not
//! (twice, a second apart) gets `OperatorWipeDivergedServer`: killed, its database wiped
//! (keeping `myid`) and started again, to come back with the leader's full state (a restart
//! alone can reload the diverged database). Never drawn at random, it takes the ensemble from
//! the injector (one server down at a time, and only while the others are in the quorum) and
//! is a fault like the others in the timeline and the recoveries. No server found diverged:
//! said, and nothing done. The time before it acts is not excused: the summary gives the
//! divergence proofs per gateway (the gauge seen going above 0, and the ERROR lines logged),
//! the wipes, and the longest time from a gateway's first report to a wipe.
//!
//! Observers (`--observers`, per election): `Observe` streams on gateways picked at random,
//! observing again on any gateway whenever a stream ends. Every state is logged with the instant
//! it arrived and checked by `checker::check_observers`: tokens never go down in a stream, and
//! no observer shows a state other than its election's (by the candidates' holds) for longer
//! than the stall bound, not counting time without a quorum.
//!
//! At the end the checker of `zkgate_testkit::checker` runs over every stream: exclusion and
//! fencing violations, the time each election took to have a holder again after each fault
//! (skipped where another fault on the same election overlapped), and the znodes left once
//! every client has gone; and each in-stream request sent during a frozen ZooKeeper is checked:
//! a leader's stream never silent past its silence limit, `suspended` followed by `resumed` or
//! the end within `stop_within`, a resign/release ended within T + 3 s; and liveness as
//! strictly as safety: a candidate waiting through a vacancy longer than 2 T + 6 s (longer than
//! any fault and its recovery, not counting time without a ZooKeeper quorum) is a stall. The verbs' commands are checked at the process
//! level: two commands of one name alive in the same window, a command process left once its
//! verb is gone, or no command of a name running for longer than that stall bound, each fails
//! the run. A ZooKeeper leader kill's recovery is measured from the moment a leader serves
//! again (polled with `srvr`), not from the kill: the ensemble's own election is not the
//! gateway's to bound; an operator's wipe's from the moment the wiped server serves again.
//! Exit status 1 on any safety or in-stream violation, stall, leftover znode or command, or
//! held drain.

use zkgate_testkit as support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{CommandFactory, FromArgMatches, Parser};
use rand::prelude::*;
use support::checker::{self, Ev, ObserverLog, StreamLog};
use support::linkcut::{LinkCutter, LinkMode};
use support::procgw::{GatewayProc, GatewaySpec, ProcState};
use support::recorder::StreamClient;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use zkgate_testkit::localzk::LocalZk;

#[derive(Debug, Parser)]
#[command(about = "randomized fault soak for zkgate")]
struct Args {
    /// How long to inject faults.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Random seed (default: random; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Gateways (child processes).
    #[arg(long, default_value_t = 3)]
    gateways: usize,
    /// ZooKeeper sessions per gateway (`zkgate serve --zk-sessions`): with several, a fault on
    /// one session's server or link hits only the queues on that session.
    #[arg(long, default_value_t = 1)]
    zk_sessions: usize,
    /// The gateways batch member creates and deletes into one ZooKeeper `multi`
    /// (`zkgate serve --zk-batch`, docs/batching.md; on by default, as in the gateway). The
    /// gateways do not inherit `ZKGATE_*` variables from the soak, so `--zk-batch false` is the
    /// way to soak without it.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    zk_batch: bool,
    /// Elections.
    #[arg(long, default_value_t = 3)]
    elections: usize,
    /// Client slots per election (and per lock).
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Locks (semaphores of `--permits` permits), served like the elections.
    #[arg(long, default_value_t = 1)]
    locks: usize,
    /// Permits of each lock (1 = a mutex).
    #[arg(long, default_value_t = 2)]
    permits: u32,
    /// Gateways' session timeout (ZooKeeper's tickTime is 250 ms: at most 5 s).
    #[arg(long, default_value = "4s", value_parser = humantime::parse_duration)]
    session_timeout: Duration,
    /// Seconds between faults (a random pause in [gap, 2 × gap] after each heals).
    #[arg(long, default_value_t = 3.0)]
    gap: f64,
    /// Seconds between client faults (kill, reset, blackhole) injected by a second injector,
    /// concurrently with the gateway and ZooKeeper faults (a random pause in [client-gap,
    /// 2 × client-gap]). 0: client faults take turns with the others, one fault at a time.
    #[arg(long, default_value_t = 0.0)]
    client_gap: f64,
    /// The ensemble's `syncLimit` in ticks of 250 ms: how long a follower cut off from its
    /// quorum goes on serving its clients by itself (20 = 5 s, past the session timeout).
    #[arg(long, default_value_t = 20)]
    sync_limit: u32,
    /// How many gateways (the first ones) reach only one ZooKeeper server (gateway i: server
    /// i mod 3), so cutting that server off from its quorum or freezing it costs them their
    /// session instead of a reconnection elsewhere.
    #[arg(long, default_value_t = 1)]
    single_link: usize,
    /// Gateways' test seam (`src/coord/zk.rs`): every Nth member create is applied but its
    /// reply reported lost (ConnectionLoss). 0: off.
    #[arg(long, default_value_t = 6)]
    lose_create_every: u64,
    /// Gateways' test seam: every Nth delete fails unsent (ConnectionLoss). 0: off.
    #[arg(long, default_value_t = 5)]
    fail_delete_every: u64,
    /// Gateways' test seam: of every Nth session a gateway gives up, a client handle is kept
    /// for the rest of its life, as a straggling task would keep one (`Zk::give_up` must make
    /// that harmless, docs/faults.md "A given-up session kept open"). 0: off.
    #[arg(long, default_value_t = 1)]
    keep_given_up_every: u64,
    /// CLI verb slots per verb name: this many `zkgate elect soak-cmd-elect -- CMD` and as many
    /// `zkgate lock soak-cmd-lock --requeue -- CMD`, each CMD appending timestamps to files
    /// (exclusion checked at the process level). 0: none.
    #[arg(long, default_value_t = 2)]
    verbs: usize,
    /// The `zkgate` binary the verbs run (default: `zkgate` beside this example's directory,
    /// i.e. `target/release/zkgate`; build it with `cargo build --release --bin zkgate`).
    #[arg(long)]
    zkgate: Option<std::path::PathBuf>,
    /// Client slots holding lock `soak-ttl-0` with a ttl and keep-alives every ttl/3. 0: none.
    #[arg(long, default_value_t = 3)]
    ttl_clients: usize,
    /// The ttl of those holders.
    #[arg(long, default_value = "1500ms", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// The ensemble's `maxSessionTimeout`: set below `--session-timeout`, the gateways are
    /// granted less than they ask (they must reconnect asking for the grant and derive every
    /// bound from it); the soak's bounds then use the grant.
    #[arg(long, value_parser = humantime::parse_duration)]
    granted_below: Option<Duration>,
    /// `Observe` streams per election, each on a gateway picked at random, observing again
    /// (on any gateway) whenever its stream ends. Checked: tokens never go down in a stream,
    /// and no observer shows a state other than its election's past the stall bound.
    #[arg(long, default_value_t = 2)]
    observers: usize,
    /// Only these fault kinds (comma-separated, as printed, e.g. `KillZkLeader,Drain`).
    /// Default: all.
    #[arg(long, value_delimiter = ',')]
    faults: Vec<String>,
    /// The operator of docs/observability.md: polls each gateway's `zkgate_zk_diverged_sessions`
    /// every second and, when one stays above 0 for `--operator-after`, wipes the ZooKeeper
    /// server that lists a member most servers do not (`OperatorWipeDivergedServer`).
    /// `false`: nobody heals a diverged server.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    operator: bool,
    /// How long a gateway's `zkgate_zk_diverged_sessions` stays above 0 before the operator
    /// acts (the gauge also rises briefly on gateways whose session then moves away by itself).
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    operator_after: Duration,
}

/// `soak gateway …`: the gateway, as `zkgate serve` runs it.
#[derive(Debug, Parser)]
struct GatewayCmd {
    #[arg(long)]
    log_json: bool,
    #[command(flatten)]
    #[allow(
        dead_code,
        reason = "declares the flags; zkgate::config::load reads them from the matches, with the file"
    )]
    serve: zkgate::config::ServeArgs,
}

fn main() -> std::process::ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    if argv.get(1).map(String::as_str) == Some("gateway") {
        let matches = GatewayCmd::command().get_matches_from(argv[1..].iter());
        let cmd = GatewayCmd::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        return rt.block_on(gateway(cmd, matches));
    }
    let args = Args::parse();
    rt.block_on(soak(args))
}

async fn gateway(cmd: GatewayCmd, matches: clap::ArgMatches) -> std::process::ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ZKGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
        // The line naming the `/metrics` address, which the soak's operator reads.
        .add_directive("soak=info".parse().expect("a filter directive"));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if cmd.log_json {
        fmt.json().init();
    } else {
        fmt.init();
    }
    let r = match zkgate::config::load(&matches).and_then(zkgate::config::ServeArgs::resolve) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("soak gateway: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let (Ok(listener), Ok(http)) = (
        tokio::net::TcpListener::bind(r.listen).await,
        tokio::net::TcpListener::bind(r.http).await,
    ) else {
        eprintln!("soak gateway: cannot bind");
        return std::process::ExitCode::FAILURE;
    };
    // `GatewayProc` binds `--http 127.0.0.1:0`: the soak's operator learns the port here.
    if let Ok(addr) = http.local_addr() {
        tracing::info!(target: "soak", http = %addr, "{METRICS_LINE}");
    }
    match zkgate::server::run(
        r.serve,
        listener,
        Some(http),
        zkgate::cli::shutdown_signal(),
    )
    .await
    {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("soak gateway: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillClient,
    ResetClient,
    BlackholeClient,
    KillGateway,
    FreezeGateway,
    KillZkLeader,
    RestartZkServer,
    PartitionShort,
    PartitionLong,
    /// The gateway's requests are lost, ZooKeeper's notifications still arrive (caught only by
    /// the gateway's liveness probe).
    PartitionOneWay,
    /// Every peer link of one follower blackholed (its clients still reach it) for T/2.
    FollowerPartitionShort,
    /// The same for T + 2 s.
    FollowerPartitionLong,
    /// A gateway's ZooKeeper frozen (its server SIGSTOPped, or its links blackholed) for T/2,
    /// while its clients send `proclaim{}`, `resign{}` and `release{}` on their streams.
    ZkFrozenInStreamShort,
    /// The same for T + 1.5 s.
    ZkFrozenInStreamLong,
    /// A ttl holder stops sending keep-alives (its stream stays open).
    TtlLapse,
    /// SIGHUP to a holding CLI verb (a closed terminal).
    VerbHangup,
    /// SIGKILL to a holding CLI verb.
    VerbKill,
    /// SIGSTOP to a holding CLI verb for T + 1 s, then SIGCONT.
    VerbFreeze,
    /// SIGTERM to a gateway on which something holds (a CLI verb if any), then a restart.
    Drain,
    /// The same after every client link to that gateway is blackholed: its holders cannot
    /// hear that they are revoked (G3c).
    DrainUnreachable,
    /// A follower's database rewritten while it is down (`LocalZk::diverge`) so that, started
    /// again, it lists a ghost at the head of every queue: a member below the head's sequence,
    /// owned by a session that never existed (ZOOKEEPER-5010's outcome, made on purpose: the
    /// soaks met the real one only now and then). Its gateways prove it and grant nothing
    /// there, move to another server (g1, g2) or are stranded (g0 when it is server 0), for
    /// T + 6 s; then the server is wiped and started again (the operator's remedy).
    DivergeServer,
    /// Not drawn at random (not in [`FAULTS`]): the operator's remedy ([`run_operator`]) when a
    /// gateway's `zkgate_zk_diverged_sessions` stays above 0 — the server that lists a member
    /// most servers do not is killed, its database wiped (keeping `myid`) and started again,
    /// to come back with the leader's full state (ZOOKEEPER-5010).
    OperatorWipeDivergedServer,
}

const CLIENT_FAULTS: [Fault; 7] = [
    Fault::KillClient,
    Fault::ResetClient,
    Fault::BlackholeClient,
    Fault::TtlLapse,
    Fault::VerbHangup,
    Fault::VerbKill,
    Fault::VerbFreeze,
];

const FAULTS: [Fault; 21] = [
    Fault::KillClient,
    Fault::ResetClient,
    Fault::BlackholeClient,
    Fault::KillGateway,
    Fault::FreezeGateway,
    Fault::KillZkLeader,
    Fault::RestartZkServer,
    Fault::PartitionShort,
    Fault::PartitionLong,
    Fault::PartitionOneWay,
    Fault::FollowerPartitionShort,
    Fault::FollowerPartitionLong,
    Fault::ZkFrozenInStreamShort,
    Fault::ZkFrozenInStreamLong,
    Fault::TtlLapse,
    Fault::VerbHangup,
    Fault::VerbKill,
    Fault::VerbFreeze,
    Fault::Drain,
    Fault::DrainUnreachable,
    Fault::DivergeServer,
];

/// One injected fault: recovery is measured from `recover_from` against `bound`.
#[derive(Debug, Clone)]
struct Injected {
    kind: Fault,
    what: String,
    /// When the fault began.
    from: Instant,
    /// Where its recovery bound starts: `from`, except after a ZooKeeper leader kill, where it
    /// is the moment the ensemble had a quorum (a leader serving) again — nothing can be
    /// granted before that, and how long ZooKeeper takes to elect is not ours to bound.
    recover_from: Instant,
    bound: Duration,
    /// The one election or lock a client fault touches (`None`: possibly all of them).
    resource: Option<String>,
}

impl Injected {
    fn new(kind: Fault, what: String, from: Instant, bound: Duration) -> Self {
        Injected {
            kind,
            what,
            from,
            recover_from: from,
            bound,
            resource: None,
        }
    }

    /// Whether `other` may have delayed this fault's recovery on `resource`: it touches that
    /// resource and its window `[from, recover_from + bound]` meets this one's.
    fn overlaps(&self, other: &Injected, resource: &str) -> bool {
        other.resource.as_deref().is_none_or(|r| r == resource)
            && other.from <= self.recover_from + self.bound
            && self.from <= other.recover_from + other.bound
    }
}

/// A ZooKeeper leader kill and when the ensemble served again, for the summary.
#[derive(Debug, Clone)]
struct LeaderKill {
    server: usize,
    at: Instant,
    /// The first instant a server answered `srvr` with `Mode: leader` (polled every 50 ms).
    quorum: Option<Instant>,
    /// The new leader.
    leader: Option<usize>,
}

/// A request sent on a stream while its gateway's ZooKeeper was frozen.
#[derive(Debug, Clone)]
struct InStream {
    stream: u64,
    /// `proclaim{}` (else `resign{}`/`release{}`).
    proclaim: bool,
    /// The client was leading (holding) when it sent it.
    leading: bool,
    sent: Instant,
    what: String,
}

/// A gateway slot: the process (replaced after a kill) and its ZooKeeper link cutters.
struct GatewaySlot {
    name: String,
    proc: Mutex<Option<GatewayProc>>,
    /// `Some(addr)` while it can be used by new clients.
    addr: watch::Sender<Option<std::net::SocketAddr>>,
    /// One per ZooKeeper server (index = server), whether or not the connect string uses it.
    zk_cuts: Vec<LinkCutter>,
    /// A stable address in front of the gateway for the CLI verbs (whose `--endpoint` list
    /// is fixed when they start), retargeted to each new process.
    front: LinkCutter,
}

impl GatewaySlot {
    /// The server its session's connection goes to now, if any.
    fn server(&self) -> Option<usize> {
        self.zk_cuts.iter().position(|c| c.live_connections() > 0)
    }
}

/// A client slot's current stream and link.
struct Active {
    client: StreamClient,
    cut: LinkCutter,
    gateway: usize,
    /// A ttl holder's keep-alive task (aborted for a lapse, and with the slot).
    keepalive: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Active {
    fn drop(&mut self) {
        // The task holds its own sender: left running it would keep the request side open.
        if let Some(k) = self.keepalive.take() {
            k.abort();
        }
    }
}

struct ClientSlot {
    /// The election or lock name.
    election: String,
    /// `Some(permits)` for a lock slot (Acquire), `None` for an election slot (Campaign).
    permits: Option<u32>,
    /// A ttl lock holder (keep-alives every ttl/3).
    ttl: Option<Duration>,
    name: String,
    index: usize,
    current: Mutex<Option<Active>>,
    /// The slot neither leaves nor is picked for a client fault before this (an in-stream
    /// request is being watched).
    hold_until: Mutex<Option<Instant>>,
}

/// A CLI verb slot: `zkgate elect|lock RESOURCE -- CMD` run again and again.
struct VerbSlot {
    resource: String,
    /// `elect` or `lock`.
    verb: &'static str,
    who: String,
    index: usize,
    current: Mutex<Option<VerbRun>>,
}

/// One verb process.
struct VerbRun {
    child: zkgate_localzk::TiedChild,
    /// Its stdout and stderr (`--output json` lines and diagnostics).
    out: std::path::PathBuf,
    /// SIGSTOPped by a fault (SIGCONT comes from the fault's own task).
    frozen: bool,
}

impl VerbRun {
    /// Whether the verb holds (its last event line is `elected`/`acquired`), and the endpoint.
    fn holding(&self) -> Option<String> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let mut held = None;
        for line in text.lines().filter(|l| l.starts_with('{')) {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            match v["event"].as_str() {
                Some("elected" | "acquired") => {
                    held = Some(v["endpoint"].as_str().unwrap_or_default().to_owned());
                }
                Some(_) => held = None,
                None => {}
            }
        }
        held
    }
}

/// CMD for the verbs. `writer.sh BASE MODE`: appends `date +%s%N` every 20 ms to
/// `BASE.TOKEN.PID` (TOKEN = the hold's fencing token); `slow` ignores SIGTERM for 1.5 s
/// (keeps writing), then exits 0. `starter.sh BASE fast SECS`: starts two writers, one in a
/// session of its own, and exits 0 after SECS (a start script that leaves workers behind).
const WRITER: &str = r#"
f="$1.${ZKGATE_FENCING_TOKEN:-none}.$$"
deadline=""
if [ "$2" = slow ]; then
  trap 'deadline=$(( $(date +%s%N) + 1500000000 ))' TERM
fi
while :; do
  now=$(date +%s%N)
  [ -n "$now" ] && echo "$now" >> "$f"
  if [ -n "$deadline" ] && [ -n "$now" ] && [ "$now" -gt "$deadline" ]; then exit 0; fi
  sleep 0.02
done
"#;

const STARTER: &str = r#"
sh "$0.writer" "$1" fast &
setsid sh "$0.writer" "$1" fast &
sleep "$3"
exit 0
"#;

struct World {
    /// The session timeout the gateways were granted (the soak's bounds use it).
    t: Duration,
    /// What they asked for (their HTTP/2 keepalive comes from it).
    t_asked: Duration,
    epoch: Instant,
    /// The wall clock at `epoch` (ns since the Unix epoch): the commands write wall-clock
    /// timestamps.
    wall0: u64,
    gateways: Vec<GatewaySlot>,
    slots: Vec<ClientSlot>,
    verb_slots: Vec<VerbSlot>,
    /// The verbs' `zkgate`, and where their commands write.
    zkgate: std::path::PathBuf,
    cmd_dir: std::path::PathBuf,
    /// Verb processes started.
    verb_runs: std::sync::atomic::AtomicUsize,
    /// Each drain: what, how long SIGTERM took to end the gateway, whether it did in time.
    drains: Mutex<Vec<(String, Duration, bool)>>,
    leader_kills: Mutex<Vec<LeaderKill>>,
    logs: Mutex<Vec<watch::Receiver<StreamLog>>>,
    /// Every `Observe` stream so far, as it goes.
    observer_logs: Mutex<Vec<Arc<Mutex<ObserverLog>>>>,
    stop: CancellationToken,
    rng: Mutex<StdRng>,
    /// Streams whose client sent `resign{}` (their OK end is expected).
    resigned: Mutex<std::collections::HashSet<u64>>,
    /// Streams hit by a client fault (not checked for in-stream requests).
    client_faulted: Mutex<std::collections::HashSet<u64>>,
    injected: Mutex<Vec<Injected>>,
    instream: Mutex<Vec<InStream>>,
    /// Failpoint firings counted in the logs of gateways gone so far: lost create replies,
    /// deletes failed unsent, handles of given-up sessions kept.
    fired: Mutex<(u64, u64, u64)>,
    /// Which member znode each stream was given (from its lease), a line per stream, for
    /// reading beside the queue trace.
    members: Mutex<Vec<String>>,
    /// What the operator saw and did ([`run_operator`]).
    operator: Mutex<OperatorLog>,
}

/// The first line of a soak gateway's log naming its `/metrics` address (field `http`).
const METRICS_LINE: &str = "soak gateway: /metrics";

/// What the operator ([`run_operator`]) saw and did, for the summary.
#[derive(Debug, Default)]
struct OperatorLog {
    /// Per gateway: how many times its `zkgate_zk_diverged_sessions` was seen going above 0
    /// (polled every second: a proof that ends within the second may go unseen).
    proofs: BTreeMap<String, usize>,
    /// Per gateway: the ERROR lines "diverged from its quorum" in its logs (one per queue
    /// that proved it, however short the proof), counted like the failpoints.
    logged: BTreeMap<String, u64>,
    wipes: Vec<Wipe>,
    /// Sustained reports for which no server listed a member most servers do not.
    not_found: usize,
    /// [`Fault::DivergeServer`]s injected, and those whose server showed its ghosts once
    /// started again.
    diverge_faults: usize,
    diverge_shown: usize,
    /// Per gateway: the ERROR lines of a session stranded on its diverged server.
    stranded: BTreeMap<String, u64>,
}

/// One wipe of a diverged ZooKeeper server by the operator.
#[derive(Debug, Clone)]
struct Wipe {
    server: usize,
    /// The kill.
    at: Instant,
    /// From the first poll showing a gateway's gauge above 0 (the earliest of those still
    /// above 0) to the kill: the time the operator let pass.
    waited: Duration,
    /// The gateways that reported it, as `g0=1`.
    by: String,
    /// When the server served again.
    back: Option<Instant>,
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// `at` on the commands' wall clock.
fn wall_ns(world: &World, at: Instant) -> u64 {
    world.wall0 + at.saturating_duration_since(world.epoch).as_nanos() as u64
}

/// A wall-clock timestamp as the soak's `+Nms`.
fn wall_ms(world: &World, ns: u64) -> String {
    if ns >= world.wall0 {
        format!("+{}ms", (ns - world.wall0) / 1_000_000)
    } else {
        format!("-{}ms", (world.wall0 - ns) / 1_000_000)
    }
}

/// Every command hold the verbs' CMDs wrote: files `RESOURCE.WHO.TOKEN.PID` in `dir`, one
/// timestamp (ns) a line, grouped by (resource, token).
fn read_cmd_holds(dir: &std::path::Path) -> Vec<checker::CmdHold> {
    let mut holds: BTreeMap<(String, String), checker::CmdHold> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let parts: Vec<&str> = name.split('.').collect();
        let [resource, who, token, pid] = parts[..] else {
            continue;
        };
        if pid.parse::<u32>().is_err() {
            continue;
        }
        let stamps: Vec<u64> = std::fs::read_to_string(e.path())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        let (Some(&first), Some(&last)) = (stamps.iter().min(), stamps.iter().max()) else {
            continue;
        };
        let h = holds
            .entry((resource.to_owned(), token.to_owned()))
            .or_insert_with(|| checker::CmdHold {
                resource: resource.to_owned(),
                token: token.to_owned(),
                who: who.to_owned(),
                first,
                last,
                stamps: 0,
            });
        h.first = h.first.min(first);
        h.last = h.last.max(last);
        h.stamps += stamps.len();
        if !h.who.split('+').any(|w| w == who) {
            h.who = format!("{}+{who}", h.who);
        }
    }
    holds.into_values().collect()
}

/// The commands' processes (pids from the file names) still alive, killed after reporting.
/// Waits a little first: a verb's last SIGKILL and the reaping take a moment.
async fn cmd_survivors(dir: &std::path::Path) -> Vec<String> {
    let pids: Vec<u32> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let parts: Vec<&str> = name.split('.').collect();
                    (parts.len() == 4).then(|| parts[3].parse().ok()).flatten()
                })
                .collect()
        })
        .unwrap_or_default();
    let ours = |pid: u32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains("zkgate-soak-cmds-"))
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    while pids.iter().any(|&p| ours(p)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left: Vec<String> = pids
        .iter()
        .filter(|&&p| ours(p))
        .map(|p| format!("pid {p} still running"))
        .collect();
    for &p in pids.iter().filter(|&&p| ours(p)) {
        let _ = zkgate_localzk::process::send_signal(p, "KILL");
    }
    left
}

/// For each ZooKeeper leader kill: when the ensemble served again, the first `suspended` and
/// the first `ABORTED` end any stream saw after the kill, and when each election/lock had a
/// holder again — where the time after a leader kill goes.
fn print_leader_kills(
    world: &World,
    logs: &[StreamLog],
    report: &checker::Report,
    resources: &[String],
    zk_logs: &[std::path::PathBuf],
) {
    // ZooKeeper's own account: "LEADING/FOLLOWING - LEADER ELECTION TOOK - N MS" and the
    // leader's "Have quorum of supporters" (log4j ISO8601 timestamps, local time = UTC here).
    let zk_lines: Vec<(u64, usize, String)> = zk_logs
        .iter()
        .enumerate()
        .flat_map(|(i, path)| {
            std::fs::read_to_string(path)
                .unwrap_or_default()
                .lines()
                .filter(|l| {
                    l.contains("LEADER ELECTION TOOK") || l.contains("Have quorum of supporters")
                })
                .filter_map(|l| {
                    let stamp = l.get(..23)?.replace(',', ".");
                    let at = humantime::parse_rfc3339_weak(&stamp).ok()?;
                    let ns = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos() as u64;
                    let what = l.rsplit(" - ").next().unwrap_or(l);
                    let what = if what.contains("Have quorum") {
                        "quorum of supporters".to_owned()
                    } else {
                        what.to_owned()
                    };
                    Some((ns, i, what))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let kills = world.leader_kills.lock().unwrap().clone();
    if kills.is_empty() {
        return;
    }
    let secs = |d: Option<Duration>| {
        d.map_or_else(|| "-".to_owned(), |d| format!("{:.2}", d.as_secs_f64()))
    };
    println!(
        "ZooKeeper leader kills ({}): seconds after the kill — quorum again (a leader serving), first suspended, first ABORTED, each resource held again [vacancy end]",
        kills.len()
    );
    for k in &kills {
        let after = |pred: &dyn Fn(&Ev) -> bool| {
            logs.iter()
                .flat_map(|l| l.events.iter())
                .filter(|(at, e)| *at >= k.at && pred(e))
                .map(|(at, _)| *at - k.at)
                .min()
        };
        let suspended = after(&|e| matches!(e, Ev::Suspended { .. }));
        let aborted = after(&|e| {
            matches!(
                e,
                Ev::Ended {
                    code: Some(tonic::Code::Aborted),
                    ..
                }
            )
        });
        let held: Vec<String> = resources
            .iter()
            .map(|r| {
                let v = checker::vacancies(report, r)
                    .into_iter()
                    .find(|(s, e)| e.is_none_or(|e| e > k.at) && *s <= k.at + world.t * 4);
                match v {
                    None => format!("{r} -"),
                    Some((_, end)) => format!(
                        "{r} {}",
                        secs(end.map(|e| e.saturating_duration_since(k.at)))
                    ),
                }
            })
            .collect();
        let (a, b) = (
            wall_ns(world, k.at),
            wall_ns(world, k.at + Duration::from_secs(30)),
        );
        let mut zk_said: Vec<&(u64, usize, String)> = zk_lines
            .iter()
            .filter(|(ns, _, _)| (a..b).contains(ns))
            .collect();
        zk_said.sort();
        let zk_said: Vec<String> = zk_said
            .iter()
            .map(|(ns, i, what)| format!("{:.2} s server {i} {what}", (ns - a) as f64 / 1e9))
            .collect();
        println!(
            "  {} server {} killed: quorum {} (server {:?} leading), suspended {}, aborted {}; held again: {}\n    ZooKeeper logs: {}",
            checker::ms(k.at, world.epoch),
            k.server,
            secs(k.quorum.map(|q| q - k.at)),
            k.leader,
            secs(suspended),
            secs(aborted),
            held.join(", "),
            zk_said.join("; ")
        );
    }
}

impl World {
    /// Notes the member znode `client`'s lease names ([`World::members`]).
    fn note_member(&self, client: &StreamClient) {
        let log = client.log();
        self.members.lock().unwrap().push(format!(
            "+{}ms {} {}#{} via {}: {}",
            self.epoch.elapsed().as_millis(),
            client.election,
            log.client,
            client.id,
            log.via,
            lease_member(&client.lease)
        ));
    }

    /// The leaders' silence limit: 0.35 × the granted session timeout.
    fn silence(&self) -> Duration {
        self.t * 35 / 100
    }

    /// How long a revoked holder that keeps its stream open (or cannot hear) keeps its znode
    /// after the last message sent to it: its silence limit plus the allowance for a message
    /// reaching it late (the gateway's own `Timing::client_delay_allowance`, G3c).
    fn revoked_within(&self) -> Duration {
        let mut cfg = zkgate::coord::CoordConfig::new("unused");
        cfg.session_timeout = self.t;
        let timing = zkgate::coord::timing::Timing::requested(&cfg);
        self.silence() + timing.client_delay_allowance()
    }

    /// A ttl slot that holds now, with its keep-alives running.
    fn pick_ttl_holder(&self) -> Option<usize> {
        let faulted = self.client_faulted.lock().unwrap().clone();
        let pool: Vec<usize> = (0..self.slots.len())
            .filter(|&i| {
                let s = &self.slots[i];
                s.ttl.is_some()
                    && s.current.lock().unwrap().as_ref().is_some_and(|a| {
                        let log = a.client.log();
                        log.granted().is_some()
                            && log.ended().is_none()
                            && !faulted.contains(&a.client.id)
                            && a.keepalive.as_ref().is_some_and(|k| !k.is_finished())
                    })
            })
            .collect();
        (!pool.is_empty()).then(|| pool[self.random(pool.len())])
    }

    /// A verb slot whose verb holds now (not frozen).
    fn pick_verb(&self) -> Option<usize> {
        let pool: Vec<usize> = (0..self.verb_slots.len())
            .filter(|&i| {
                self.verb_slots[i]
                    .current
                    .lock()
                    .unwrap()
                    .as_ref()
                    .is_some_and(|r| !r.frozen && r.holding().is_some())
            })
            .collect();
        (!pool.is_empty()).then(|| pool[self.random(pool.len())])
    }

    fn say(&self, msg: &str) {
        println!("[{}] {msg}", checker::ms(Instant::now(), self.epoch));
    }

    fn random(&self, n: usize) -> usize {
        self.rng.lock().unwrap().random_range(0..n.max(1))
    }

    fn millis(&self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.rng.lock().unwrap().random_range(lo..hi.max(lo + 1)))
    }

    fn logs(&self) -> Vec<StreamLog> {
        self.logs
            .lock()
            .unwrap()
            .iter()
            .map(|l| l.borrow().clone())
            .collect()
    }

    /// Slots whose client leads now (or, if none, any with a live stream).
    fn pick_client(&self) -> Option<usize> {
        let mut leaders = Vec::new();
        let mut live = Vec::new();
        let faulted = self.client_faulted.lock().unwrap().clone();
        for (i, s) in self.slots.iter().enumerate() {
            if s.hold_until
                .lock()
                .unwrap()
                .is_some_and(|h| h > Instant::now())
            {
                continue;
            }
            if let Some(a) = s.current.lock().unwrap().as_ref() {
                let log = a.client.log();
                if log.ended().is_some() || faulted.contains(&a.client.id) {
                    continue;
                }
                live.push(i);
                let leading = log.granted().is_some()
                    && !matches!(
                        log.events
                            .iter()
                            .rev()
                            .find(|(_, e)| !matches!(e, Ev::Heartbeat)),
                        Some((_, Ev::Suspended { .. }))
                    );
                if leading {
                    leaders.push(i);
                }
            }
        }
        let pool = if leaders.is_empty() { live } else { leaders };
        (!pool.is_empty()).then(|| pool[self.random(pool.len())])
    }

    /// Counts the failpoint firings and the proofs of divergence in a gateway's log (before
    /// the log goes with it).
    fn count_fired(&self, p: &GatewayProc) {
        let text = std::fs::read_to_string(p.log_path()).unwrap_or_default();
        let creates = text
            .matches("failpoint: member create applied, reply lost")
            .count() as u64;
        let deletes = text.matches("failpoint: delete failed unsent").count() as u64;
        let kept = text
            .matches("failpoint: a handle of a session given up is kept")
            .count() as u64;
        let mut f = self.fired.lock().unwrap();
        f.0 += creates;
        f.1 += deletes;
        f.2 += kept;
        let proofs = text
            .matches("the session's ZooKeeper server diverged from its quorum")
            .count() as u64;
        let stranded = text
            .matches("the session's ZooKeeper server still diverges from its quorum")
            .count() as u64;
        let mut op = self.operator.lock().unwrap();
        *op.logged.entry(p.name.clone()).or_default() += proofs;
        *op.stranded.entry(p.name.clone()).or_default() += stranded;
    }

    fn running_gateways(&self) -> Vec<usize> {
        (0..self.gateways.len())
            .filter(|&i| self.gateways[i].addr.borrow().is_some())
            .collect()
    }
}

async fn soak(args: Args) -> std::process::ExitCode {
    let seed = args.seed.unwrap_or_else(rand::random);
    let t_asked = args.session_timeout;
    // Below the request, the ensemble grants its maximum (the gateways reconnect asking for it).
    let t = args.granted_below.map_or(t_asked, |g| g.min(t_asked));
    let epoch = Instant::now();
    let wall0 = now_ns();
    println!(
        "soak: {} min, seed {seed}, {} gateways, {} elections and {} locks ({} permits) x {} clients, \
         {} ttl holders (ttl {:?}), {} CLI verbs per name, session timeout {t_asked:?} asked, {t:?} granted, \
         batching {}",
        args.minutes,
        args.gateways,
        args.elections,
        args.locks,
        args.permits,
        args.clients,
        args.ttl_clients,
        args.ttl,
        args.verbs,
        if args.zk_batch { "on" } else { "off" },
    );
    let only: Vec<Fault> = args
        .faults
        .iter()
        .map(|name| {
            FAULTS
                .iter()
                .copied()
                .find(|k| format!("{k:?}") == *name)
                .unwrap_or_else(|| panic!("--faults: no fault kind {name:?} (see `enum Fault`)"))
        })
        .collect();
    let exe = std::env::current_exe().expect("own path");
    // target/release/examples/soak → target/release/zkgate
    let zkgate_bin = args.zkgate.clone().unwrap_or_else(|| {
        exe.parent()
            .and_then(std::path::Path::parent)
            .map(|d| d.join("zkgate"))
            .expect("the example's directory")
    });
    if args.verbs > 0 && !zkgate_bin.exists() {
        eprintln!(
            "soak: {} not found: build it first (cargo build --release --bin zkgate) or pass --zkgate",
            zkgate_bin.display()
        );
        return std::process::ExitCode::FAILURE;
    }
    let cmd_dir = tempfile::Builder::new()
        .prefix("zkgate-soak-cmds-")
        .tempdir()
        .expect("a directory for the verbs' commands");
    std::fs::write(cmd_dir.path().join("writer.sh"), WRITER).expect("writer.sh");
    std::fs::write(cmd_dir.path().join("starter.sh"), STARTER).expect("starter.sh");
    std::fs::write(cmd_dir.path().join("starter.sh.writer"), WRITER).expect("starter.sh.writer");
    // Peer links through link cutters, for follower partitions.
    let (zk, peers) =
        support::ensemble::ensemble_with_peer_cutters_and(support::localzk::LocalZkOptions {
            sync_limit: args.sync_limit,
            max_session_timeout: args.granted_below,
            ..Default::default()
        })
        .await;
    let connect = zk.connect_string();
    let root = support::named_root("soak");
    println!("ZooKeeper ensemble {connect}, root {root}");
    let mut gateways = Vec::new();
    for g in 0..args.gateways {
        let mut cuts = Vec::new();
        for i in 0..zk.len() {
            cuts.push(LinkCutter::start(zk.server_address(i)).await.unwrap());
        }
        let zk_via: Vec<String> = if g < args.single_link {
            vec![cuts[g % cuts.len()].addr().to_string()]
        } else {
            cuts.iter().map(|c| c.addr().to_string()).collect()
        };
        let mut env = Vec::new();
        if args.lose_create_every > 0 {
            env.push((
                "ZKGATE_FAILPOINT_LOSE_CREATE_REPLY_EVERY".to_owned(),
                args.lose_create_every.to_string(),
            ));
        }
        if args.fail_delete_every > 0 {
            env.push((
                "ZKGATE_FAILPOINT_FAIL_DELETE_EVERY".to_owned(),
                args.fail_delete_every.to_string(),
            ));
        }
        if args.keep_given_up_every > 0 {
            env.push((
                "ZKGATE_FAILPOINT_KEEP_GIVEN_UP_CLIENT_EVERY".to_owned(),
                args.keep_given_up_every.to_string(),
            ));
        }
        let spec = GatewaySpec {
            command: vec![exe.clone().into(), "gateway".into()],
            zk: zk_via.join(","),
            root: root.clone(),
            session_timeout: t_asked,
            zk_tick_time: Some(support::procgw::HARNESS_TICK),
            extra: vec![
                "--zk-sessions".into(),
                args.zk_sessions.to_string(),
                format!("--zk-batch={}", args.zk_batch),
            ],
            env,
        };
        let name = format!("g{g}");
        if g < args.single_link {
            println!("{name} reaches ZooKeeper server {} only", g % cuts.len());
        }
        let proc = GatewayProc::spawn(&name, spec)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let (addr, _) = watch::channel(Some(proc.addr));
        let front = LinkCutter::start(proc.addr).await.expect("a link cutter");
        gateways.push(GatewaySlot {
            name,
            proc: Mutex::new(Some(proc)),
            addr,
            zk_cuts: cuts,
            front,
        });
    }
    let mut slots = Vec::new();
    for e in 0..args.elections {
        for c in 0..args.clients {
            slots.push(ClientSlot {
                election: format!("soak-{e}"),
                permits: None,
                ttl: None,
                name: format!("e{e}c{c}"),
                index: c,
                current: Mutex::new(None),
                hold_until: Mutex::new(None),
            });
        }
    }
    for l in 0..args.locks {
        for c in 0..args.clients {
            slots.push(ClientSlot {
                election: format!("soak-lock-{l}"),
                permits: Some(args.permits),
                ttl: None,
                name: format!("l{l}c{c}"),
                index: c,
                current: Mutex::new(None),
                hold_until: Mutex::new(None),
            });
        }
    }
    for c in 0..args.ttl_clients {
        slots.push(ClientSlot {
            election: "soak-ttl-0".into(),
            permits: Some(1),
            ttl: Some(args.ttl),
            name: format!("t0c{c}"),
            index: c,
            current: Mutex::new(None),
            hold_until: Mutex::new(None),
        });
    }
    let mut verb_slots = Vec::new();
    for (verb, resource) in [("elect", "soak-cmd-elect"), ("lock", "soak-cmd-lock")] {
        for v in 0..args.verbs {
            verb_slots.push(VerbSlot {
                resource: resource.into(),
                verb,
                who: format!("{}{v}", &verb[..1]),
                index: v,
                current: Mutex::new(None),
            });
        }
    }
    let verb_resources: Vec<String> = if args.verbs > 0 {
        vec!["soak-cmd-elect".into(), "soak-cmd-lock".into()]
    } else {
        Vec::new()
    };
    let permits = args.permits.max(1) as usize;
    let capacity = move |r: &str| {
        if r.starts_with("soak-lock-") {
            permits
        } else {
            1
        }
    };
    let world = Arc::new(World {
        t,
        t_asked,
        epoch,
        wall0,
        gateways,
        slots,
        verb_slots,
        zkgate: zkgate_bin,
        cmd_dir: cmd_dir.path().to_owned(),
        verb_runs: std::sync::atomic::AtomicUsize::new(0),
        drains: Mutex::new(Vec::new()),
        leader_kills: Mutex::new(Vec::new()),
        logs: Mutex::new(Vec::new()),
        observer_logs: Mutex::new(Vec::new()),
        stop: CancellationToken::new(),
        rng: Mutex::new(StdRng::seed_from_u64(seed)),
        resigned: Mutex::new(std::collections::HashSet::new()),
        client_faulted: Mutex::new(std::collections::HashSet::new()),
        injected: Mutex::new(Vec::new()),
        instream: Mutex::new(Vec::new()),
        fired: Mutex::new((0, 0, 0)),
        members: Mutex::new(Vec::new()),
        operator: Mutex::new(OperatorLog::default()),
    });
    let mut tasks = Vec::new();
    for i in 0..world.slots.len() {
        tasks.push(tokio::spawn(run_slot(world.clone(), i)));
    }
    for i in 0..world.verb_slots.len() {
        tasks.push(tokio::spawn(run_verb(world.clone(), i)));
    }
    for e in 0..args.elections {
        for _ in 0..args.observers {
            tasks.push(tokio::spawn(run_observer(
                world.clone(),
                format!("soak-{e}"),
            )));
        }
    }
    let queue_trace = std::env::temp_dir().join(format!("zkgate-soak-{seed}-queues.txt"));
    tasks.push(tokio::spawn(trace_queues(
        connect.clone(),
        root.clone(),
        epoch,
        queue_trace.clone(),
        world.stop.clone(),
    )));
    println!(
        "queue members over time (znode, owning session): {}",
        queue_trace.display()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let faults_start = Instant::now();

    let until = Instant::now() + Duration::from_secs_f64(args.minutes * 60.0);
    let mut next_report = Instant::now() + Duration::from_secs(60);
    let concurrent_clients = args.client_gap > 0.0;
    let client_injector = concurrent_clients.then(|| {
        let world = world.clone();
        let gap = args.client_gap;
        let kinds: Vec<Fault> = CLIENT_FAULTS
            .iter()
            .copied()
            .filter(|k| only.is_empty() || only.contains(k))
            .collect();
        tokio::spawn(async move {
            while Instant::now() < until && !kinds.is_empty() {
                let kind = kinds[world.random(kinds.len())];
                if let Some(f) = inject_client(&world, kind) {
                    world.injected.lock().unwrap().push(f);
                }
                let pause = Duration::from_secs_f64(gap) + world.millis(0, (gap * 1000.0) as u64);
                tokio::time::sleep(pause).await;
            }
        })
    });
    let kinds: Vec<Fault> = FAULTS
        .iter()
        .copied()
        .filter(|k| !(concurrent_clients && CLIENT_FAULTS.contains(k)))
        .filter(|k| only.is_empty() || only.contains(k))
        .collect();
    // The ensemble is the injector's and the operator's in turn: whoever holds it restarts a
    // server, so two are never down at once (a fault heals before the lock goes).
    let zk = Arc::new(tokio::sync::Mutex::new(zk));
    let operator = args.operator.then(|| {
        tokio::spawn(run_operator(
            world.clone(),
            zk.clone(),
            root.clone(),
            args.operator_after,
            until,
        ))
    });
    while Instant::now() < until {
        if kinds.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let kind = kinds[world.random(kinds.len())];
        let injected = {
            let mut zk = zk.lock().await;
            inject(&world, &mut zk, &peers, &root, kind).await
        };
        if let Some(f) = injected {
            world.injected.lock().unwrap().push(f);
        }
        let pause = Duration::from_secs_f64(args.gap) + world.millis(0, (args.gap * 1000.0) as u64);
        tokio::time::sleep(pause).await;
        if Instant::now() >= next_report {
            next_report += Duration::from_secs(60);
            let logs = world.logs();
            let r = checker::check(&logs, capacity, epoch);
            world.say(&format!(
                "progress: {} faults, {} streams, {} holds, {} violations so far",
                world.injected.lock().unwrap().len(),
                r.streams,
                r.holds.len(),
                r.violations.len()
            ));
        }
    }
    if let Some(task) = client_injector {
        let _ = task.await;
    }
    if let Some(task) = operator {
        let _ = task.await;
    }
    let zk = Arc::try_unwrap(zk)
        .map_err(|_| "the operator still holds the ensemble")
        .expect("the operator is done")
        .into_inner();
    world.say("faults over: letting everything settle");
    tokio::time::sleep(t * 2).await;
    let injected: Vec<Injected> = world.injected.lock().unwrap().clone();
    // Check before the clients leave (their departure is no fault).
    let faults_over = Instant::now();
    let logs = world.logs();
    let report = checker::check(&logs, capacity, epoch);
    let observer_logs: Vec<ObserverLog> = world
        .observer_logs
        .lock()
        .unwrap()
        .iter()
        .map(|l| l.lock().unwrap().clone())
        .collect();
    world.stop.cancel();
    for task in tasks {
        let _ = task.await;
    }
    // Every verb has exited (SIGTERM, or SIGKILL after 20 s): no process of any CMD may be
    // left (a worker that left the group included).
    let cmd_holds = read_cmd_holds(&world.cmd_dir);
    let survivors = cmd_survivors(&world.cmd_dir).await;
    let znodes = support::members_gone_at(&connect, &root, t + Duration::from_secs(5)).await;
    // The check above reads whichever server its client reached. Left znodes are the
    // gateways' only if most servers have them: one that only a minority has is a server
    // diverged from its quorum (ZOOKEEPER-5010, docs/faults.md "Known issues"), which no
    // gateway can delete (a delete goes through the leader, which has no such node).
    let (znodes, diverged) = match znodes {
        Ok(d) => (Ok(d), Vec::new()),
        Err(e) => match left_by_majority(&connect, &root).await {
            Some((majority, minority)) if majority.is_empty() => (Ok(Duration::ZERO), minority),
            Some((majority, minority)) => {
                (Err(format!("{e}; on most servers: {majority:?}")), minority)
            }
            None => (Err(e), Vec::new()),
        },
    };

    // Recovery: for each fault and election, the time until it had a holder again.
    // Elections and locks: for a lock, "held again" means at least one permit held.
    let elections: Vec<String> = (0..args.elections)
        .map(|e| format!("soak-{e}"))
        .chain((0..args.locks).map(|l| format!("soak-lock-{l}")))
        .chain((args.ttl_clients > 0).then(|| "soak-ttl-0".to_owned()))
        .collect();
    let mut by_kind: BTreeMap<Fault, (usize, Duration, Duration)> = BTreeMap::new();
    let mut slow = Vec::new();
    let mut longest: Option<(Duration, String)> = None;
    let mut details = String::new();
    let (mut checked, mut overlapped) = (0usize, 0usize);
    for (i, f) in injected.iter().enumerate() {
        let entry = by_kind.entry(f.kind).or_default();
        entry.0 += 1;
        for e in &elections {
            if f.resource.as_ref().is_some_and(|r| r != e) {
                continue;
            }
            // Another fault on the same resource meanwhile: its recovery is not this one's.
            if injected
                .iter()
                .enumerate()
                .any(|(j, o)| j != i && f.overlaps(o, e))
            {
                overlapped += 1;
                continue;
            }
            checked += 1;
            let r = checker::recovery(&report, e, f.recover_from, f.bound, &f.what, epoch);
            details.push_str(&format!(
                "{} {:?} {e}: {r:?}\n",
                checker::ms(f.from, epoch),
                f.what
            ));
            match r {
                Ok(d) => {
                    entry.1 = entry.1.max(d);
                    entry.2 += d;
                    if longest.as_ref().is_none_or(|(l, _)| d > *l) {
                        longest = Some((
                            d,
                            format!("{e} after {} at {}", f.what, checker::ms(f.from, epoch)),
                        ));
                    }
                }
                Err(v) => slow.push(v),
            }
        }
    }
    let longest_vacancy = elections
        .iter()
        .flat_map(|e| {
            checker::vacancies(&report, e)
                .into_iter()
                .filter_map(move |(s, end)| end.map(|end| (end - s, e.clone(), s)))
        })
        .max_by_key(|(d, _, _)| *d);

    println!("\n==== soak summary (seed {seed}) ====");
    println!(
        "faults injected: {} over {:.1} min",
        injected.len(),
        args.minutes
    );
    for (kind, (n, max, total)) in &by_kind {
        let mean = if *n > 0 {
            *total / (*n * elections.len()) as u32
        } else {
            Duration::ZERO
        };
        println!("  {kind:?}: {n} (recovery max {max:?}, mean over elections and locks {mean:?})");
    }
    for g in &world.gateways {
        if let Some(p) = g.proc.lock().unwrap().as_ref() {
            world.count_fired(p);
        }
    }
    let fired = *world.fired.lock().unwrap();
    println!(
        "gateway failpoints fired: {} member creates applied with the reply lost, {} deletes failed unsent, \
         {} handles of given-up sessions kept",
        fired.0, fired.1, fired.2
    );
    println!(
        "all faults: {} injected + {} failpoint firings = {}",
        injected.len(),
        fired.0 + fired.1,
        injected.len() as u64 + fired.0 + fired.1
    );
    println!(
        "recovery checked for {checked} (fault, election/lock) pairs; {overlapped} skipped (another fault on the same resource overlapped)"
    );
    let instream = check_instream(&world, &logs);
    println!("{}", instream.summary);
    for v in &instream.violations {
        println!("  IN-STREAM VIOLATION {v}");
    }
    println!(
        "streams: {}, holds checked: {}, violations: {}",
        report.streams,
        report.holds.len(),
        report.violations.len()
    );
    for v in &report.violations {
        println!("  VIOLATION {v}");
    }
    if let Some((d, what)) = &longest {
        println!("longest recovery: {d:?} ({what})");
    }
    if let Some((d, e, s)) = &longest_vacancy {
        println!(
            "longest vacancy: {d:?} ({e} from {})",
            checker::ms(*s, epoch)
        );
    }
    // Liveness as strictly as safety: a queue whose candidates wait through a vacancy longer
    // than any fault and its recovery can explain has stalled.
    let stall_bound = t * 2 + Duration::from_secs(6);
    // Time without a quorum (a ZooKeeper leader kill until a new leader serves) does not count
    // against it: nothing can be granted then (docs/faults.md, "Liveness").
    let no_quorum: Vec<(Instant, Instant)> = world
        .leader_kills
        .lock()
        .unwrap()
        .iter()
        .filter_map(|k| Some((k.at, k.quorum?)))
        .collect();
    let instant_of = |ns: u64| world.epoch + Duration::from_nanos(ns.saturating_sub(world.wall0));
    // The CLI verbs, at the process level: no two commands of one name alive in the same
    // window, none left once its verb is gone, and no stretch without one longer than the
    // stall bound while the verbs kept campaigning.
    let cmd_violations = checker::cmd_overlaps(&cmd_holds, |_| 1);
    let w: &World = &world;
    let cmd_gaps: Vec<String> = verb_resources
        .iter()
        .flat_map(|r| {
            checker::cmd_gaps(
                &cmd_holds,
                r,
                wall_ns(w, faults_start),
                wall_ns(w, faults_over),
                stall_bound,
            )
            .into_iter()
            .filter(|&(a, b)| {
                let excused = checker::overlap(instant_of(a), instant_of(b), &no_quorum);
                Duration::from_nanos(b - a).saturating_sub(excused) > stall_bound
            })
            .map(move |(a, b)| {
                format!(
                    "{r}: no command ran from {} to {} ({:.1} s)",
                    wall_ms(w, a),
                    wall_ms(w, b),
                    (b - a) as f64 / 1e9
                )
            })
        })
        .collect();
    if !verb_resources.is_empty() {
        let faults_on_verbs = injected
            .iter()
            .filter(|f| {
                matches!(
                    f.kind,
                    Fault::VerbHangup | Fault::VerbKill | Fault::VerbFreeze
                )
            })
            .count();
        println!(
            "CLI verbs: {} verb processes, {} commands held ({} elect, {} lock; {} timestamps), {} verb faults; \
             command overlaps: {}, gaps over {stall_bound:?}: {}, commands left after their verb: {}",
            world.verb_runs.load(std::sync::atomic::Ordering::Relaxed),
            cmd_holds.len(),
            cmd_holds.iter().filter(|h| h.resource == "soak-cmd-elect").count(),
            cmd_holds.iter().filter(|h| h.resource == "soak-cmd-lock").count(),
            cmd_holds.iter().map(|h| h.stamps).sum::<usize>(),
            faults_on_verbs,
            cmd_violations.len(),
            cmd_gaps.len(),
            survivors.len()
        );
        for v in &cmd_violations {
            println!("  VIOLATION {v}");
        }
        for v in &cmd_gaps {
            println!("  STALL {v}");
        }
        for v in &survivors {
            println!("  COMMAND LEFT {v}");
        }
    }
    let drains = world.drains.lock().unwrap().clone();
    let drain_limit = world.revoked_within() + Duration::from_secs(5);
    let slow_drains: Vec<&(String, Duration, bool)> = drains.iter().filter(|d| !d.2).collect();
    if !drains.is_empty() {
        println!(
            "drains: {} (longest SIGTERM → exit {:?}); not over within silence limit + delay allowance + 5 s ({drain_limit:?}): {}",
            drains.len(),
            drains.iter().map(|d| d.1).max().unwrap_or_default(),
            slow_drains.len()
        );
        for d in &slow_drains {
            println!("  DRAIN HELD {} ({:?})", d.0, d.1);
        }
    }
    let zk_logs: Vec<std::path::PathBuf> = (0..zk.len()).map(|i| zk.log_path(i)).collect();
    print_leader_kills(&world, &logs, &report, &elections, &zk_logs);
    if args.operator {
        print_operator(&world);
    }
    let stalled: Vec<String> = elections
        .iter()
        .flat_map(|e| {
            checker::stalls(&logs, &report, e, stall_bound, faults_over, &no_quorum)
                .into_iter()
                .map(move |(a, b, who)| {
                    format!(
                        "{e}: nobody held from {} to {} ({:?}) while {who} waited",
                        checker::ms(a, epoch),
                        checker::ms(b, epoch),
                        b - a
                    )
                })
        })
        .collect();
    println!(
        "stalls (a candidate waiting through a vacancy over {stall_bound:?}, not counting {:?} without a quorum in {} stretches): {}",
        no_quorum.iter().map(|(a, b)| *b - *a).sum::<Duration>(),
        no_quorum.len(),
        stalled.len()
    );
    for v in &stalled {
        println!("  STALL {v}");
    }
    let observed = checker::check_observers(
        &observer_logs,
        &report,
        stall_bound,
        faults_over,
        &no_quorum,
        epoch,
    );
    println!(
        "observers: {} Observe streams, {} states shown, violations (a token down, or a state \
         other than the election's for over {stall_bound:?}): {}; longest behind: {:?}",
        observer_logs.len(),
        observer_logs.iter().map(|o| o.states.len()).sum::<usize>(),
        observed.violations.len(),
        observed.longest
    );
    for v in &observed.violations {
        println!("  OBSERVER VIOLATION {v}");
    }
    println!("recoveries over their bound: {}", slow.len());
    for v in &slow {
        println!("  SLOW {v}");
    }
    let mut notes: BTreeMap<String, usize> = BTreeMap::new();
    for n in &report.notes {
        let key = n.split_once(": ").map_or(n.as_str(), |(_, k)| k);
        let key: String = key.chars().filter(|c| !c.is_ascii_digit()).collect();
        *notes.entry(key).or_default() += 1;
    }
    for (n, count) in &notes {
        println!("  note x{count}: {n}");
    }
    let resigned = world.resigned.lock().unwrap().clone();
    let ok_unasked: Vec<String> = logs
        .iter()
        .filter(|l| matches!(l.ended(), Some((_, None))) && !resigned.contains(&l.id))
        .map(|l| format!("{}#{} via {}", l.client, l.id, l.via))
        .collect();
    println!(
        "streams ended OK without a resign (known bug, expiry read as resign): {}{}",
        ok_unasked.len(),
        if ok_unasked.is_empty() {
            String::new()
        } else {
            format!(" {ok_unasked:?}")
        }
    );
    match &znodes {
        Ok(d) if diverged.is_empty() => {
            println!("znodes left: 0 (gone {d:?} after the last client)")
        }
        Ok(_) => println!(
            "znodes left: 0 on most servers; only a minority of servers (diverged from the \
             quorum, ZOOKEEPER-5010) still list {diverged:?}"
        ),
        Err(e) => println!("ZNODES LEFT: {e}"),
    }
    let dump = std::env::temp_dir().join(format!("zkgate-soak-{seed}.txt"));
    let _ = std::fs::write(
        &dump,
        format!(
            "recoveries:\n{details}\nnotes:\n{}\n\ntimeline:\n{}",
            report.notes.join("\n"),
            checker::timeline(&logs, epoch)
        ),
    );
    println!("recoveries, notes and the timeline: {}", dump.display());
    let members = std::env::temp_dir().join(format!("zkgate-soak-{seed}-members.txt"));
    let _ = std::fs::write(&members, world.members.lock().unwrap().join("\n"));
    println!("the member znode of each stream: {}", members.display());
    for g in &world.gateways {
        let p = g.proc.lock().unwrap().take();
        if let Some(mut p) = p {
            p.terminate(Duration::from_secs(5)).await;
        }
    }
    zk.shutdown().await;
    let clean = report.violations.is_empty()
        && instream.violations.is_empty()
        && znodes.is_ok()
        && stalled.is_empty()
        && observed.violations.is_empty()
        && cmd_violations.is_empty()
        && cmd_gaps.is_empty()
        && survivors.is_empty()
        && slow_drains.is_empty();
    if !clean {
        // Keep the commands' timestamps for a look.
        let kept = cmd_dir.keep();
        println!("the commands' timestamps are kept in {}", kept.display());
    }
    if clean {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}

/// What the operator saw and did: the divergence proofs per gateway (the gauge seen going
/// above 0, and the ERROR lines logged), its wipes, and the time it let pass before each —
/// none of it hidden by the recoveries, which count from the wipe.
fn print_operator(world: &World) {
    let op = world.operator.lock().unwrap();
    let per_gateway = |counts: &dyn Fn(&str) -> String| {
        world
            .gateways
            .iter()
            .map(|g| format!("{} {}", g.name, counts(&g.name)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "operator (zkgate_zk_diverged_sessions polled every second; above 0 for the time asked: wipe the diverged ZooKeeper server): \
         {} wipes; longest from a gateway first reporting > 0 to the wipe: {}; reports with no server found diverged: {}",
        op.wipes.len(),
        op.wipes
            .iter()
            .map(|w| w.waited)
            .max()
            .map_or_else(|| "-".to_owned(), |d| format!("{:.1} s", d.as_secs_f64())),
        op.not_found
    );
    println!(
        "  divergence proofs seen by the operator (the gauge going > 0): {}",
        per_gateway(&|g| op.proofs.get(g).copied().unwrap_or_default().to_string())
    );
    println!(
        "  ERROR \"diverged from its quorum\" lines in the gateways' logs (one per queue that proved it): {}",
        per_gateway(&|g| op.logged.get(g).copied().unwrap_or_default().to_string())
    );
    println!(
        "  sessions stranded on a diverged server (ERROR \"still diverges from its quorum\"): {}",
        per_gateway(&|g| op.stranded.get(g).copied().unwrap_or_default().to_string())
    );
    println!(
        "  DivergeServer faults: {} injected, {} of them shown by their server (the rest undone by a snapshot sync)",
        op.diverge_faults, op.diverge_shown
    );
    for w in &op.wipes {
        println!(
            "  {} wiped server {} ({} reported it; {:.1} s after the first report), serving again {}",
            checker::ms(w.at, world.epoch),
            w.server,
            w.by,
            w.waited.as_secs_f64(),
            w.back.map_or_else(
                || "never".to_owned(),
                |b| format!("{:.1} s after the kill", (b - w.at).as_secs_f64())
            )
        );
    }
}

/// One observer of `election`: `Observe` on a running gateway picked at random, every state
/// logged with the instant it arrived, and again (a new stream, any gateway) once the stream
/// ends, until the soak stops. No link cutter: the faults it meets are its gateway's (killed,
/// stopped, drained, cut from ZooKeeper) and ZooKeeper's.
async fn run_observer(world: Arc<World>, election: String) {
    static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    while !world.stop.is_cancelled() {
        let running = world.running_gateways();
        if running.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let g = running[world.random(running.len())];
        let Some(addr) = *world.gateways[g].addr.borrow() else {
            continue;
        };
        let opened = tokio::time::timeout(Duration::from_secs(5), async {
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                .ok()?
                .connect()
                .await
                .ok()?;
            zkgate::proto::election_client::ElectionClient::new(channel)
                .observe(zkgate::proto::ObserveRequest {
                    election: election.clone(),
                })
                .await
                .ok()
                .map(tonic::Response::into_inner)
        })
        .await;
        let Ok(Some(mut stream)) = opened else {
            tokio::time::sleep(world.millis(100, 500)).await;
            continue;
        };
        let log = Arc::new(Mutex::new(ObserverLog {
            id: IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            election: election.clone(),
            via: world.gateways[g].name.clone(),
            states: Vec::new(),
            ended: None,
        }));
        world.observer_logs.lock().unwrap().push(log.clone());
        loop {
            let next = tokio::select! {
                () = world.stop.cancelled() => return,
                next = stream.message() => next,
            };
            match next {
                Ok(Some(m)) => {
                    let token = m.leader.map(|l| l.fencing_token);
                    log.lock().unwrap().states.push((Instant::now(), token));
                }
                Ok(None) | Err(_) => {
                    log.lock().unwrap().ended = Some(Instant::now());
                    break;
                }
            }
        }
        tokio::time::sleep(world.millis(100, 500)).await;
    }
}

/// One client slot: campaign through a fresh link cutter on some gateway, stay until the
/// stream ends or a random lifetime passes (then resign or vanish), and again.
async fn run_slot(world: Arc<World>, i: usize) {
    let slot = &world.slots[i];
    let t = world.t;
    let mut attempt = 0usize;
    while !world.stop.is_cancelled() {
        attempt += 1;
        let running = world.running_gateways();
        if running.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        // Spread an election's candidates over the gateways: the one with the fewest of them.
        let mut load: Vec<(usize, usize)> = running
            .iter()
            .map(|&g| {
                let n = world
                    .slots
                    .iter()
                    .filter(|o| o.election == slot.election)
                    .filter(|o| {
                        o.current
                            .lock()
                            .unwrap()
                            .as_ref()
                            .is_some_and(|a| a.gateway == g)
                    })
                    .count();
                (n, g)
            })
            .collect();
        load.sort();
        let fewest: Vec<usize> = load
            .iter()
            .filter(|(n, _)| *n == load[0].0)
            .map(|(_, g)| *g)
            .collect();
        let g = fewest[(slot.index + attempt) % fewest.len()];
        let Some(addr) = *world.gateways[g].addr.borrow() else {
            continue;
        };
        let Ok(cut) = LinkCutter::start(addr).await else {
            continue;
        };
        let via = format!("{}+cut", world.gateways[g].name);
        let joined = tokio::time::timeout(Duration::from_secs(5), async {
            match (slot.permits, slot.ttl) {
                (None, _) => StreamClient::join(&cut.url(), &slot.election, &slot.name, &via).await,
                (Some(p), None) => {
                    StreamClient::acquire(&cut.url(), &slot.election, &slot.name, p, &via).await
                }
                (Some(p), Some(ttl)) => {
                    let a = zkgate::proto::AcquireLock {
                        name: slot.election.clone(),
                        owner: slot.name.clone(),
                        permits: p,
                        ttl: prost_types::Duration::try_from(ttl).ok(),
                        ..Default::default()
                    };
                    StreamClient::acquire_with(&cut.url(), a, &via).await
                }
            }
        })
        .await;
        let client = match joined {
            Ok(Ok(c)) => c,
            _ => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        };
        world.logs.lock().unwrap().push(client.watch());
        world.note_member(&client);
        let keepalive = slot.ttl.and_then(|ttl| client.keep_alive_every(ttl / 3));
        *slot.current.lock().unwrap() = Some(Active {
            client,
            cut,
            gateway: g,
            keepalive,
        });
        let lifetime = world.millis(5_000, 60_000);
        let leave_at = Instant::now() + lifetime;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let resigned = {
                let mut cur = slot.current.lock().unwrap();
                let Some(active) = cur.as_mut() else { break };
                let log = active.client.log();
                if log.ended().is_some() {
                    break;
                }
                let last = log.events.last().map(|(t, _)| *t).unwrap_or(Instant::now());
                // A leader that heard nothing well past its silence limit gives up (a real
                // client would cancel at the limit; waiting longer lets more of the fault show).
                if log.granted().is_some() && last.elapsed() > t + Duration::from_secs(2) {
                    active.client.kill();
                    break;
                }
                let held = slot
                    .hold_until
                    .lock()
                    .unwrap()
                    .is_some_and(|h| h > Instant::now());
                if !world.stop.is_cancelled() && (Instant::now() < leave_at || held) {
                    continue;
                }
                if world.random(2) == 0 && !world.stop.is_cancelled() {
                    world.resigned.lock().unwrap().insert(active.client.id);
                    active.client.try_resign()
                } else {
                    active.client.kill();
                    break;
                }
            };
            if resigned {
                // Vanish if the OK end does not come soon.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            if let Some(a) = slot.current.lock().unwrap().as_mut() {
                a.client.kill();
            }
            break;
        }
        slot.current.lock().unwrap().take();
        let pause = world.millis(0, 500);
        tokio::time::sleep(pause).await;
    }
    if let Some(mut a) = slot.current.lock().unwrap().take() {
        a.client.kill();
    }
}

/// Injects one fault, waits for it to heal, and says what recovery to expect.
/// Injects a client fault (kill, reset, blackhole) on a client that leads (or else has a live
/// stream), without waiting.
fn inject_client(world: &Arc<World>, kind: Fault) -> Option<Injected> {
    let keepalive = {
        let mut cfg = zkgate::coord::CoordConfig::new("unused");
        // The HTTP/2 keepalive comes from the requested timeout.
        cfg.session_timeout = world.t_asked;
        zkgate::coord::timing::Timing::requested(&cfg).dead_client_bound()
    };
    if matches!(
        kind,
        Fault::VerbHangup | Fault::VerbKill | Fault::VerbFreeze
    ) {
        return inject_verb(world, kind);
    }
    let i = if kind == Fault::TtlLapse {
        world.pick_ttl_holder()?
    } else {
        world.pick_client()?
    };
    let slot = &world.slots[i];
    let from = Instant::now();
    let what = format!("{kind:?} {}", slot.name);
    {
        let mut cur = slot.current.lock().unwrap();
        let a = cur.as_mut()?;
        world.client_faulted.lock().unwrap().insert(a.client.id);
        match kind {
            Fault::KillClient => a.client.kill(),
            Fault::ResetClient => a.cut.drop_all(),
            Fault::TtlLapse => {
                if let Some(k) = a.keepalive.take() {
                    k.abort();
                }
            }
            _ => a.cut.blackhole(),
        }
    }
    world.say(&format!("FAULT {what}"));
    let bound = match kind {
        // The gateway gives the connection up after the keepalive bound, and a holder's znode
        // stays until its silence limit and the delay allowance have passed since the last
        // message sent to it: it may still be hearing heartbeats (G3b).
        Fault::BlackholeClient => keepalive + world.revoked_within() + Duration::from_secs(1),
        // The ttl runs out, the holder is told (`suspended`) and its znode goes once its
        // silence limit and the delay allowance have passed since the last message sent to it
        // (G3c).
        Fault::TtlLapse => {
            slot.ttl.unwrap_or_default() + world.revoked_within() + Duration::from_secs(1)
        }
        _ => Duration::from_secs(1),
    };
    Some(Injected {
        resource: Some(slot.election.clone()),
        ..Injected::new(kind, what, from, bound)
    })
}

/// A fault on a holding CLI verb: SIGHUP, SIGKILL, or SIGSTOP for T + 1 s (then SIGCONT).
fn inject_verb(world: &Arc<World>, kind: Fault) -> Option<Injected> {
    let i = world.pick_verb()?;
    let slot = &world.verb_slots[i];
    let from = Instant::now();
    let what = format!("{kind:?} {} ({})", slot.who, slot.resource);
    {
        let mut cur = slot.current.lock().unwrap();
        let run = cur.as_mut()?;
        let sig = match kind {
            Fault::VerbHangup => "HUP",
            Fault::VerbKill => "KILL",
            _ => "STOP",
        };
        let _ = run.child.signal(sig);
        if kind == Fault::VerbFreeze {
            run.frozen = true;
        }
    }
    if kind == Fault::VerbFreeze {
        let world = world.clone();
        let hold = world.t + Duration::from_secs(1);
        tokio::spawn(async move {
            tokio::time::sleep(hold).await;
            if let Some(run) = world.verb_slots[i].current.lock().unwrap().as_mut() {
                let _ = run.child.signal("CONT");
                run.frozen = false;
            }
        });
    }
    world.say(&format!("FAULT {what}"));
    Some(Injected {
        resource: Some(slot.resource.clone()),
        ..Injected::new(kind, what, from, world.t + Duration::from_secs(1))
    })
}

/// One CLI verb slot: `zkgate elect|lock RESOURCE -- CMD` through the gateways' fronts (its own
/// first, then the others), left after a random lifetime by SIGTERM or SIGINT (SIGKILL if it
/// has not exited 20 s later), and again. CMD is the writer (fast, or slow to stop) or, one
/// time in four, a start script that leaves two writers behind and exits after a few seconds.
async fn run_verb(world: Arc<World>, i: usize) {
    let slot = &world.verb_slots[i];
    let mut attempt = 0usize;
    while !world.stop.is_cancelled() {
        attempt += 1;
        let n = world.gateways.len();
        let first = (slot.index + attempt) % n;
        let endpoints: Vec<String> = (0..n)
            .map(|k| format!("http://{}", world.gateways[(first + k) % n].front.addr()))
            .collect();
        let mode = match world.random(4) {
            0 => "starter",
            1 => "slow",
            _ => "fast",
        };
        let base = world
            .cmd_dir
            .join(format!("{}.{}", slot.resource, slot.who));
        let script = world.cmd_dir.join(if mode == "starter" {
            "starter.sh"
        } else {
            "writer.sh"
        });
        let out = world
            .cmd_dir
            .join(format!("{}-{}-{attempt}.out", slot.resource, slot.who));
        let Ok(out_file) = std::fs::File::create(&out) else {
            return;
        };
        let mut cmd =
            zkgate_localzk::TiedChild::command(&format!("verb-{}", slot.who), &world.zkgate, None);
        cmd.arg(slot.verb)
            .arg(&slot.resource)
            .arg(if slot.verb == "lock" {
                "--owner"
            } else {
                "--candidate"
            })
            .arg(&slot.who)
            .arg("--endpoint")
            .arg(endpoints.join(","))
            .args(["--output", "json", "--kill-grace", "2s"]);
        if slot.verb == "lock" {
            cmd.arg("--requeue");
        }
        cmd.arg("--")
            .arg("sh")
            .arg(&script)
            .arg(&base)
            .arg(if mode == "slow" { "slow" } else { "fast" })
            .arg(format!("{}", 1 + world.random(5)));
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ZKGATE_") {
                cmd.env_remove(k);
            }
        }
        cmd.stderr(out_file);
        let child = match zkgate_localzk::TiedChild::spawn(cmd).await {
            Ok(c) => c,
            Err(e) => {
                world.say(&format!("starting verb {} failed: {e}", slot.who));
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        world
            .verb_runs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *slot.current.lock().unwrap() = Some(VerbRun {
            child,
            out,
            frozen: false,
        });
        let leave_at = Instant::now() + world.millis(5_000, 40_000);
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut cur = slot.current.lock().unwrap();
            let Some(run) = cur.as_mut() else { break };
            if run.child.exited() {
                break;
            }
            if run.frozen || (Instant::now() < leave_at && !world.stop.is_cancelled()) {
                continue;
            }
            let _ = run.child.signal("CONT");
            let _ = run
                .child
                .signal(if world.random(2) == 0 { "TERM" } else { "INT" });
            break;
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            {
                let mut cur = slot.current.lock().unwrap();
                let Some(run) = cur.as_mut() else { break };
                if run.child.exited() {
                    break;
                }
                if Instant::now() > deadline {
                    // What it last said (its signal received or not, what it waited on): this
                    // is a verb that did not act on its signal, whose output is otherwise gone
                    // with a passing run's files.
                    let tail = std::fs::read_to_string(&run.out)
                        .map(|t| {
                            let lines: Vec<&str> = t.lines().collect();
                            lines[lines.len().saturating_sub(8)..].join(" | ")
                        })
                        .unwrap_or_default();
                    world.say(&format!(
                        "verb {} did not exit: SIGKILL; its last lines: {tail}",
                        slot.who
                    ));
                    let _ = run.child.signal("KILL");
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        slot.current.lock().unwrap().take();
        let pause = world.millis(0, 500);
        tokio::time::sleep(pause).await;
    }
}

/// Sends in-stream requests on the live streams of gateway `g` whose ZooKeeper is frozen:
/// leaders `proclaim{}` (elections) or leave, lock holders `release{}` now and then, waiters
/// leave now and then.
fn send_in_stream(world: &Arc<World>, g: usize, what: &str) {
    let t = world.t;
    let faulted = world.client_faulted.lock().unwrap().clone();
    for slot in &world.slots {
        let cur = slot.current.lock().unwrap();
        let Some(a) = cur.as_ref() else { continue };
        let log = a.client.log();
        if a.gateway != g || log.ended().is_some() || faulted.contains(&a.client.id) {
            continue;
        }
        if log.count(|e| matches!(e, Ev::Resigning)) > 0
            || slot
                .hold_until
                .lock()
                .unwrap()
                .is_some_and(|h| h > Instant::now())
        {
            continue;
        }
        let leading = log.granted().is_some()
            && !matches!(
                log.events
                    .iter()
                    .rev()
                    .find(|(_, e)| !matches!(e, Ev::Heartbeat)),
                Some((_, Ev::Suspended { .. }))
            );
        // Election leaders proclaim (suspended ones too: the request must not block their
        // stream either), lock holders and waiters leave now and then.
        let proclaim =
            slot.permits.is_none() && log.granted().is_some() && (!leading || world.random(4) != 0);
        let leave = !proclaim && world.random(if leading { 2 } else { 4 }) == 0;
        let sent = Instant::now();
        let ok = if proclaim {
            a.client
                .try_proclaim(format!("{}@{}", slot.name, sent.elapsed().as_nanos()).as_bytes())
        } else if leave {
            world.resigned.lock().unwrap().insert(a.client.id);
            a.client.try_resign()
        } else {
            continue;
        };
        if !ok {
            continue;
        }
        *slot.hold_until.lock().unwrap() = Some(sent + t + Duration::from_secs(3));
        world.instream.lock().unwrap().push(InStream {
            stream: a.client.id,
            proclaim,
            leading,
            sent,
            what: format!(
                "{} {}#{} during {what}",
                if proclaim {
                    "proclaim"
                } else if slot.permits.is_some() {
                    "release"
                } else {
                    "resign"
                },
                slot.name,
                a.client.id
            ),
        });
    }
}

/// Injects one fault, waits for it to heal, and says what recovery to expect.
async fn inject(
    world: &Arc<World>,
    zk: &mut LocalZk,
    peers: &support::ensemble::PeerCutters,
    root: &str,
    kind: Fault,
) -> Option<Injected> {
    let t = world.t;
    match kind {
        Fault::DivergeServer => diverge_server(world, zk, root).await,
        Fault::KillClient
        | Fault::ResetClient
        | Fault::BlackholeClient
        | Fault::TtlLapse
        | Fault::VerbHangup
        | Fault::VerbKill
        | Fault::VerbFreeze => {
            let f = inject_client(world, kind)?;
            tokio::time::sleep(f.bound).await;
            Some(f)
        }
        Fault::Drain | Fault::DrainUnreachable => drain(world, kind).await,
        // The operator's, never drawn at random (`run_operator`).
        Fault::OperatorWipeDivergedServer => None,
        Fault::KillGateway | Fault::FreezeGateway => {
            let running = world.running_gateways();
            if running.len() < 2 {
                return None;
            }
            let g = running[world.random(running.len())];
            let slot = &world.gateways[g];
            let what = format!("{kind:?} {}", slot.name);
            let from = Instant::now();
            slot.addr.send_replace(None);
            if kind == Fault::KillGateway {
                let p = slot.proc.lock().unwrap().take();
                let spec = match p {
                    Some(mut p) => {
                        p.kill9().await;
                        world.count_fired(&p);
                        p.spec.clone()
                    }
                    None => return None,
                };
                world.say(&format!("FAULT {what}"));
                tokio::time::sleep(t + Duration::from_secs(1)).await;
                match GatewayProc::spawn(&slot.name, spec).await {
                    Ok(p) => {
                        slot.front.retarget(p.addr);
                        slot.addr.send_replace(Some(p.addr));
                        *slot.proc.lock().unwrap() = Some(p);
                    }
                    Err(e) => world.say(&format!("restarting {} failed: {e}", slot.name)),
                }
            } else {
                if let Some(p) = slot.proc.lock().unwrap().as_mut() {
                    p.freeze();
                }
                world.say(&format!("FAULT {what}"));
                tokio::time::sleep(t + Duration::from_secs(1)).await;
                if let Some(p) = slot.proc.lock().unwrap().as_mut() {
                    p.thaw();
                    if p.state == ProcState::Running {
                        slot.addr.send_replace(Some(p.addr));
                    }
                }
                world.say(&format!("healed {what}"));
            }
            Some(Injected::new(kind, what, from, t + Duration::from_secs(1)))
        }
        Fault::KillZkLeader | Fault::RestartZkServer => {
            let target = if kind == Fault::KillZkLeader {
                zk.leader_index().await?
            } else {
                let leader = zk.leader_index().await;
                let followers: Vec<usize> = (0..zk.len()).filter(|i| Some(*i) != leader).collect();
                followers[world.random(followers.len())]
            };
            let what = format!("{kind:?} server {target}");
            let from = Instant::now();
            world.say(&format!("FAULT {what}"));
            let r = if kind == Fault::KillZkLeader {
                zk.kill(target).await
            } else {
                zk.stop(target).await
            };
            if let Err(e) = r {
                world.say(&format!("{what} failed: {e}"));
            }
            // When does a leader serve again? Polled beside the restart.
            let quorum = (kind == Fault::KillZkLeader).then(|| poll_quorum(zk));
            tokio::time::sleep(world.millis(1_000, 3_000)).await;
            if let Err(e) = zk.start(target).await {
                world.say(&format!("restarting ZooKeeper server {target} failed: {e}"));
            }
            world.say(&format!("healed {what}"));
            let Some(quorum) = quorum else {
                return Some(Injected::new(kind, what, from, t));
            };
            let quorum = quorum.await.ok().flatten();
            world.leader_kills.lock().unwrap().push(LeaderKill {
                server: target,
                at: from,
                quorum: quorum.map(|q| q.0),
                leader: quorum.map(|q| q.1),
            });
            if let Some((q, _)) = quorum {
                world.say(&format!(
                    "ZooKeeper serving again {:?} after the leader kill",
                    q - from
                ));
            }
            // The rule (docs/faults.md): a leader kill's recovery counts from the quorum.
            Some(Injected {
                recover_from: quorum.map_or(from, |q| q.0),
                ..Injected::new(kind, what, from, t + Duration::from_secs(1))
            })
        }
        Fault::PartitionShort | Fault::PartitionLong | Fault::PartitionOneWay => {
            let g = world.random(world.gateways.len());
            let slot = &world.gateways[g];
            let what = format!("{kind:?} {}", slot.name);
            let from = Instant::now();
            for c in &slot.zk_cuts {
                if kind == Fault::PartitionOneWay {
                    c.set(LinkMode::BlackholeToTarget);
                } else {
                    c.blackhole();
                }
            }
            world.say(&format!("FAULT {what}"));
            let (hold, bound) = if kind == Fault::PartitionShort {
                (t / 2, t)
            } else {
                (t + Duration::from_secs(2), t + Duration::from_secs(1))
            };
            tokio::time::sleep(hold).await;
            for c in &slot.zk_cuts {
                c.pass();
            }
            world.say(&format!("healed {what}"));
            tokio::time::sleep(Duration::from_secs(1)).await;
            Some(Injected::new(kind, what, from, bound))
        }
        Fault::FollowerPartitionShort | Fault::FollowerPartitionLong => {
            let leader = zk.leader_index().await?;
            let followers: Vec<usize> = (0..zk.len()).filter(|&i| i != leader).collect();
            // Mostly a follower some gateway's session uses (else the cut matters to nobody).
            let used: Vec<usize> = followers
                .iter()
                .copied()
                .filter(|&f| world.gateways.iter().any(|g| g.server() == Some(f)))
                .collect();
            let f = if !used.is_empty() && world.random(4) != 0 {
                used[world.random(used.len())]
            } else {
                followers[world.random(followers.len())]
            };
            let users: Vec<&str> = world
                .gateways
                .iter()
                .filter(|g| g.server() == Some(f))
                .map(|g| g.name.as_str())
                .collect();
            let what = format!("{kind:?} server {f} (used by {users:?})");
            let from = Instant::now();
            support::ensemble::cut_off(peers, f);
            world.say(&format!("FAULT {what}"));
            let hold = if kind == Fault::FollowerPartitionShort {
                t / 2
            } else {
                t + Duration::from_secs(2)
            };
            tokio::time::sleep(hold).await;
            support::ensemble::heal(peers);
            world.say(&format!("healed {what}"));
            // The follower syncs with the leader again before it serves.
            tokio::time::sleep(Duration::from_secs(1)).await;
            Some(Injected::new(kind, what, from, t + Duration::from_secs(1)))
        }
        Fault::ZkFrozenInStreamShort | Fault::ZkFrozenInStreamLong => {
            // A gateway with live streams, and the server its session uses.
            let running = world.running_gateways();
            let busy: Vec<usize> = running
                .iter()
                .copied()
                .filter(|&g| {
                    world.slots.iter().any(|s| {
                        s.current
                            .lock()
                            .unwrap()
                            .as_ref()
                            .is_some_and(|a| a.gateway == g && !a.client.ended())
                    })
                })
                .collect();
            if busy.is_empty() {
                return None;
            }
            let g = busy[world.random(busy.len())];
            let slot = &world.gateways[g];
            let server = slot.server();
            let leader = zk.leader_index().await;
            // SIGSTOP the server when it is a follower (a frozen leader stalls the whole
            // ensemble for syncLimit), else blackhole the gateway's ZooKeeper links.
            let stop = server.filter(|&s| Some(s) != leader && world.random(2) == 0);
            let what = match stop {
                Some(s) => format!("{kind:?} SIGSTOP server {s} ({} uses it)", slot.name),
                None => format!("{kind:?} {} ZooKeeper links blackholed", slot.name),
            };
            let from = Instant::now();
            match stop {
                Some(s) => {
                    if let Err(e) = zk.pause(s).await {
                        world.say(&format!("{what} failed: {e}"));
                        return None;
                    }
                }
                None => {
                    for c in &slot.zk_cuts {
                        c.blackhole();
                    }
                }
            }
            world.say(&format!("FAULT {what}"));
            let hold = if kind == Fault::ZkFrozenInStreamShort {
                t / 2
            } else {
                t + Duration::from_millis(1_500)
            };
            // Requests while the link still reads connected, or about when it is found dead.
            let early = world.millis(50, (t.as_millis() as u64) * 3 / 10);
            tokio::time::sleep(early).await;
            send_in_stream(world, g, &what);
            // A second wave once the gateway has found the link dead.
            let later = world.millis(t.as_millis() as u64 / 4, t.as_millis() as u64 * 4 / 10);
            tokio::time::sleep(later).await;
            send_in_stream(world, g, &what);
            tokio::time::sleep(hold.saturating_sub(early + later)).await;
            match stop {
                Some(s) => {
                    if let Err(e) = zk.resume(s).await {
                        world.say(&format!("SIGCONT server {s} failed: {e}"));
                    }
                }
                None => {
                    for c in &slot.zk_cuts {
                        c.pass();
                    }
                }
            }
            world.say(&format!("healed {what}"));
            tokio::time::sleep(Duration::from_secs(1)).await;
            Some(Injected::new(kind, what, from, t + Duration::from_secs(1)))
        }
    }
}

/// The first instant a server of `zk` answers `srvr` with `Mode: leader` (polled every 50 ms,
/// up to a minute), and which: started right after a leader is killed, when the ensemble
/// serves again.
fn poll_quorum(zk: &LocalZk) -> tokio::task::JoinHandle<Option<(Instant, usize)>> {
    let addrs: Vec<std::net::SocketAddr> = (0..zk.len()).map(|i| zk.server_address(i)).collect();
    tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            for (i, a) in addrs.iter().enumerate() {
                let answer =
                    zkgate_localzk::four_letter_word(*a, "srvr", Duration::from_millis(500)).await;
                if answer
                    .as_deref()
                    .is_ok_and(|s| zkgate_localzk::parse_mode(s) == Some("leader"))
                {
                    return Some((Instant::now(), i));
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    })
}

/// A gateway as the operator watches it: the process (a restarted gateway is another, its
/// gauge starting from 0), its `/metrics` address, and since when its
/// `zkgate_zk_diverged_sessions` has been above 0.
#[derive(Debug, Default)]
struct Watched {
    pid: Option<u32>,
    http: Option<std::net::SocketAddr>,
    since: Option<Instant>,
    value: u64,
}

/// The operator of docs/observability.md's runbook ("alert on `zkgate_zk_diverged_sessions` >
/// 0": heal the ZooKeeper server), with the remedy that heals ZOOKEEPER-5010 (a restart
/// alone can reload the diverged database): every second it reads each gateway's gauge on
/// `/metrics`; once one has been above 0 for `after` (counted from its last action), it takes
/// the ensemble from the injector ([`operator_wipe`]). Runs until `until`, like the injectors.
async fn run_operator(
    world: Arc<World>,
    zk: Arc<tokio::sync::Mutex<LocalZk>>,
    root: String,
    after: Duration,
    until: Instant,
) {
    let mut watched: Vec<Watched> = world.gateways.iter().map(|_| Watched::default()).collect();
    // A report counts from the last action: the gauges take a moment to show a wipe.
    let mut acted = Instant::now();
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(1)).await;
        for (slot, w) in world.gateways.iter().zip(watched.iter_mut()) {
            let proc = slot
                .proc
                .lock()
                .unwrap()
                .as_ref()
                .map(|p| (p.pid, p.log_path().to_owned()));
            let Some((pid, log)) = proc else {
                *w = Watched::default();
                continue;
            };
            if w.pid != Some(pid) {
                *w = Watched {
                    pid: Some(pid),
                    ..Watched::default()
                };
            }
            if w.http.is_none() {
                w.http = metrics_address(&log);
            }
            let Some(http) = w.http else { continue };
            // A frozen or busy gateway does not answer: what it said last stands.
            let Some(value) = diverged_gauge(http).await else {
                continue;
            };
            match (value > 0, w.since) {
                (true, None) => {
                    w.since = Some(Instant::now());
                    *world
                        .operator
                        .lock()
                        .unwrap()
                        .proofs
                        .entry(slot.name.clone())
                        .or_default() += 1;
                    world.say(&format!(
                        "operator: {} reports zkgate_zk_diverged_sessions={value}",
                        slot.name
                    ));
                }
                (false, Some(since)) => {
                    w.since = None;
                    world.say(&format!(
                        "operator: {} reports zkgate_zk_diverged_sessions=0 again (above 0 for {:.1} s)",
                        slot.name,
                        since.elapsed().as_secs_f64()
                    ));
                }
                _ => {}
            }
            w.value = value;
        }
        let now = Instant::now();
        let due = watched.iter().any(|w| {
            w.since
                .is_some_and(|s| now.saturating_duration_since(s.max(acted)) >= after)
        });
        if !due {
            continue;
        }
        let reports: Vec<(String, u64, Instant)> = world
            .gateways
            .iter()
            .zip(&watched)
            .filter_map(|(slot, w)| Some((slot.name.clone(), w.value, w.since?)))
            .collect();
        {
            let mut zk = zk.lock().await;
            operator_wipe(&world, &mut zk, &root, &reports).await;
        }
        acted = Instant::now();
    }
}

/// The `/metrics` address a soak gateway logged ([`METRICS_LINE`], near the start of its log).
fn metrics_address(log: &std::path::Path) -> Option<std::net::SocketAddr> {
    use std::io::Read;
    let mut head = String::new();
    std::fs::File::open(log)
        .ok()?
        .take(64 * 1024)
        .read_to_string(&mut head)
        .ok()?;
    head.lines()
        .find(|l| l.contains(METRICS_LINE))?
        .split("\"http\":\"")
        .nth(1)?
        .split('"')
        .next()?
        .parse()
        .ok()
}

/// `zkgate_zk_diverged_sessions` of the gateway whose `/metrics` is at `http` (one HTTP/1.0
/// `GET`, as a scraper would); `None` if it did not answer within a second.
async fn diverged_gauge(http: std::net::SocketAddr) -> Option<u64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = tokio::time::timeout(Duration::from_secs(1), async {
        let mut s = tokio::net::TcpStream::connect(http).await.ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: soak\r\n\r\n")
            .await
            .ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).await.ok()?;
        Some(body)
    })
    .await
    .ok()??;
    body.lines()
        .next()?
        .contains(" 200")
        .then(|| support::metric_value(&body, zkgate::metrics::ZK_DIVERGED_SESSIONS, &[]))
}

/// What the operator does about sustained reports (gateway, gauge, above 0 since), holding the
/// ensemble: reads each server alone for member znodes most servers do not list
/// ([`diverged_servers`]), and wipes each server that lists one — kill, `LocalZk::wipe`
/// (keeping `myid`), start: it comes back with the leader's full state (a SNAP) — one at a
/// time and only while every other server is in the quorum. A wipe is a fault like the
/// others (`OperatorWipeDivergedServer`, the whole ensemble's; recovery counted from the
/// moment the server serves again, bound T + 1 s); a wiped leader is also a leader kill (time
/// without a quorum). No server found: said, and nothing done.
/// [`Fault::DivergeServer`]: a follower killed, its database given a ghost at the head of
/// every queue with members (read from the other servers just before), started again; T + 6 s
/// later killed, wiped and started again. `None` when nothing could be edited (no follower,
/// no queue with members, or the tool failed: said).
async fn diverge_server(world: &Arc<World>, zk: &mut LocalZk, root: &str) -> Option<Injected> {
    let t = world.t;
    let leader = zk.leader_index().await?;
    let followers: Vec<usize> = (0..zk.len()).filter(|&i| i != leader).collect();
    // Mostly server 0, g0's only one: the kill sends every other gateway's session elsewhere,
    // and g0 comes back to the diverged server (the others land there only on a later
    // reconnect within the window).
    let f = if followers.contains(&0) && world.random(4) != 0 {
        0
    } else {
        followers[world.random(followers.len())]
    };
    let others: Vec<String> = (0..zk.len())
        .filter(|&i| i != f)
        .map(|i| zk.server_address(i).to_string())
        .collect();
    let quorum = tokio::time::timeout(
        Duration::from_secs(5),
        zookeeper_client::Client::connect(&others.join(",")),
    )
    .await
    .ok()?
    .ok()?;
    let (mut ghosts, mut lacks) = (Vec::new(), Vec::new());
    for folder in ["elections", "locks"] {
        let base = format!("{root}/{folder}");
        for queue in quorum.list_children(&base).await.unwrap_or_default() {
            let members = quorum
                .list_children(&format!("{base}/{queue}"))
                .await
                .unwrap_or_default();
            // In sequence order (the name's last part). A ghost just below the head heads the
            // queue on the diverged server; every other time, the server also lacks the member
            // second in line (as in session 25's soak, where it lacked one that waited).
            let mut ordered: Vec<(i64, String, String)> = members
                .iter()
                .filter_map(|m| {
                    let (front, seq) = m.rsplit_once('-')?;
                    let (mode, _) = front.split_once('-')?;
                    Some((seq.parse::<i64>().ok()?, mode.to_owned(), m.clone()))
                })
                .collect();
            ordered.sort();
            if let Some((_, _, second)) = ordered.get(1).filter(|_| world.random(2) == 0) {
                lacks.push(format!("{base}/{queue}/{second}"));
            }
            let head = ordered.first().map(|(seq, mode, _)| (*seq, mode.clone()));
            if let Some((seq, mode)) = head.filter(|(seq, _)| *seq > 0) {
                let id: u128 = world.rng.lock().unwrap().random();
                ghosts.push((
                    format!("{base}/{queue}/{mode}-{id:032x}-{:010}", seq - 1),
                    // A session the ensemble never had: nothing removes the ghost but a wipe.
                    0x7a7a_0000_0000_0000 + ghosts.len() as i64 + 1,
                ));
            }
        }
    }
    drop(quorum);
    if ghosts.is_empty() {
        return None;
    }
    let what = format!(
        "DivergeServer server {f} ({} ghosts, {} members lacking)",
        ghosts.len(),
        lacks.len()
    );
    let from = Instant::now();
    world.say(&format!("FAULT {what}"));
    if let Err(e) = zk.kill(f).await {
        world.say(&format!("{what}: kill failed: {e}"));
    }
    let mut edits = support::localzk::Divergence {
        delete: lacks,
        ghosts,
    };
    if let Err(e) = zk.diverge(f, &edits).await {
        // Most likely a member to lack that left between the read and the kill.
        world.say(&format!("{what}: the rewrite failed ({e}); ghosts only"));
        edits.delete.clear();
        if let Err(e) = zk.diverge(f, &edits).await {
            world.say(&format!(
                "{what}: the rewrite failed ({e}); server {f} comes back as it was"
            ));
        }
    }
    if let Err(e) = zk.start(f).await {
        world.say(&format!("restarting ZooKeeper server {f} failed: {e}"));
    }
    // The leader undoes the edits when it syncs the server with a snapshot instead of a DIFF
    // (`ServerSet::diverge`): then nothing diverged, and the summary says so.
    let on_f = zk.server_address(f).to_string();
    let (ghost, _) = &edits.ghosts[0];
    let shown = async {
        let client = zookeeper_client::Client::connect(&on_f).await.ok()?;
        Some(client.check_stat(ghost).await.ok()?.is_some())
    };
    let shown = tokio::time::timeout(Duration::from_secs(5), shown)
        .await
        .ok()
        .flatten()
        .unwrap_or(false);
    {
        let mut op = world.operator.lock().unwrap();
        op.diverge_faults += 1;
        op.diverge_shown += usize::from(shown);
    }
    if !shown {
        world.say(&format!(
            "{what}: server {f} does not show its ghosts (synced by a snapshot)"
        ));
    }
    // Long enough for a proof and a stranding (5 s after it) on a session that reconnected.
    tokio::time::sleep(t + Duration::from_secs(6)).await;
    if let Err(e) = zk.kill(f).await {
        world.say(&format!("{what}: kill failed: {e}"));
    }
    if let Err(e) = zk.wipe(f).await {
        world.say(&format!("{what}: wipe failed: {e}"));
    }
    let mut started = zk.start(f).await;
    if started.is_err() {
        started = zk.start(f).await;
    }
    let back = started.is_ok().then(Instant::now);
    match back {
        Some(b) => world.say(&format!(
            "healed {what} (wiped; serving again {:?} after the fault began)",
            b - from
        )),
        None => world.say(&format!("{what}: server {f} did not come back")),
    }
    Some(Injected {
        recover_from: back.unwrap_or(from),
        ..Injected::new(Fault::DivergeServer, what, from, t + Duration::from_secs(1))
    })
}

async fn operator_wipe(
    world: &Arc<World>,
    zk: &mut LocalZk,
    root: &str,
    reports: &[(String, u64, Instant)],
) {
    let t = world.t;
    let servers: Vec<String> = (0..zk.len())
        .map(|i| zk.server_address(i).to_string())
        .collect();
    let said = |now: Instant| {
        reports
            .iter()
            .map(|(g, v, since)| {
                format!(
                    "{g} reported zkgate_zk_diverged_sessions={v} for {:.1} s",
                    now.saturating_duration_since(*since).as_secs_f64()
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(diverged) = diverged_servers(&servers, root).await else {
        world.say(&format!(
            "operator: {}, but a ZooKeeper server could not be read: looking again later",
            said(Instant::now())
        ));
        return;
    };
    if diverged.is_empty() {
        world.operator.lock().unwrap().not_found += 1;
        world.say(&format!(
            "operator: {}, but no ZooKeeper server lists a member most servers do not: nothing to wipe",
            said(Instant::now())
        ));
        return;
    }
    for (server, members) in diverged {
        // Never two servers down at once: the others must all be in the quorum first.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut others = true;
            for i in (0..zk.len()).filter(|&i| i != server) {
                others &= zk.mode(i).await.is_some();
            }
            if others || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let mut serving = Vec::new();
        for i in 0..zk.len() {
            serving.push(zk.mode(i).await);
        }
        if (0..zk.len()).any(|i| i != server && serving[i].is_none()) {
            world.say(&format!(
                "operator: ZooKeeper server {server} diverged, but not every other server is in the quorum ({serving:?}): not wiping it now"
            ));
            continue;
        }
        let leader = serving[server].as_deref() == Some("leader");
        world.say(&format!(
            "operator: ZooKeeper server {server}{} lists {} member(s) most servers do not: {:?}",
            if leader { " (the leader)" } else { "" },
            members.len(),
            members
                .iter()
                .map(|m| short_member(m.rsplit('/').next().unwrap_or(m)))
                .collect::<Vec<_>>()
        ));
        let from = Instant::now();
        let what = format!(
            "operator: wipe diverged ZooKeeper server {server} ({})",
            said(from)
        );
        world.say(&format!("FAULT {what}"));
        if let Err(e) = zk.kill(server).await {
            world.say(&format!("{what}: kill failed: {e}"));
        }
        let quorum = leader.then(|| poll_quorum(zk));
        if let Err(e) = zk.wipe(server).await {
            world.say(&format!("{what}: wipe failed: {e}"));
        }
        let mut started = zk.start(server).await;
        if let Err(e) = &started {
            world.say(&format!(
                "restarting ZooKeeper server {server} failed: {e}; once more"
            ));
            started = zk.start(server).await;
        }
        let back = started.is_ok().then(Instant::now);
        match back {
            Some(b) => world.say(&format!(
                "healed {what} (serving again {:?} after the kill)",
                b - from
            )),
            None => world.say(&format!("{what}: server {server} did not come back")),
        }
        if let Some(quorum) = quorum {
            let quorum = quorum.await.ok().flatten();
            world.leader_kills.lock().unwrap().push(LeaderKill {
                server,
                at: from,
                quorum: quorum.map(|q| q.0),
                leader: quorum.map(|q| q.1),
            });
        }
        world.operator.lock().unwrap().wipes.push(Wipe {
            server,
            at: from,
            waited: reports
                .iter()
                .map(|r| from.saturating_duration_since(r.2))
                .max()
                .unwrap_or_default(),
            by: reports
                .iter()
                .map(|(g, v, _)| format!("{g}={v}"))
                .collect::<Vec<_>>()
                .join(" "),
            back,
        });
        world.injected.lock().unwrap().push(Injected {
            recover_from: back.unwrap_or(from),
            ..Injected::new(
                Fault::OperatorWipeDivergedServer,
                what,
                from,
                t + Duration::from_secs(1),
            )
        });
    }
}

/// Drains a gateway (SIGTERM) on which something holds — a CLI verb if any holds, for a plain
/// `Drain` — and restarts it. `DrainUnreachable` first blackholes every client link to it (the
/// streams' link cutters and the verbs' front): its holders cannot hear `suspended`, so the
/// gateway may delete their znodes only `silence_limit` after the last message it sent them
/// (G3c), and the drain must still end within its bound (silence limit + 5 s here).
async fn drain(world: &Arc<World>, kind: Fault) -> Option<Injected> {
    let t = world.t;
    let running = world.running_gateways();
    if running.len() < 2 {
        return None;
    }
    let verb_on = |g: usize| {
        let front = world.gateways[g].front.addr().to_string();
        world.verb_slots.iter().any(|v| {
            v.current
                .lock()
                .unwrap()
                .as_ref()
                .and_then(VerbRun::holding)
                .is_some_and(|e| e.contains(&front))
        })
    };
    let stream_on = |g: usize| {
        world.slots.iter().any(|s| {
            s.current.lock().unwrap().as_ref().is_some_and(|a| {
                let log = a.client.log();
                a.gateway == g && log.granted().is_some() && log.ended().is_none()
            })
        })
    };
    let verbs: Vec<usize> = running.iter().copied().filter(|&g| verb_on(g)).collect();
    let streams: Vec<usize> = running.iter().copied().filter(|&g| stream_on(g)).collect();
    let pool = match kind {
        Fault::Drain if !verbs.is_empty() => verbs,
        _ if !streams.is_empty() => streams,
        _ => running,
    };
    let g = pool[world.random(pool.len())];
    let slot = &world.gateways[g];
    let mut p = slot.proc.lock().unwrap().take()?;
    slot.addr.send_replace(None);
    let mut cut = 0usize;
    if kind == Fault::DrainUnreachable {
        slot.front.blackhole();
        for s in &world.slots {
            if let Some(a) = s.current.lock().unwrap().as_ref() {
                if a.gateway == g && !a.client.ended() {
                    a.cut.blackhole();
                    world.client_faulted.lock().unwrap().insert(a.client.id);
                    cut += 1;
                }
            }
        }
    }
    let what = format!(
        "{kind:?} {}{}{}",
        slot.name,
        if verb_on(g) { " (a verb holds)" } else { "" },
        if kind == Fault::DrainUnreachable {
            format!(" ({cut} client links and the verbs' blackholed)")
        } else {
            String::new()
        }
    );
    let from = Instant::now();
    world.say(&format!("FAULT {what}"));
    let limit = world.revoked_within() + Duration::from_secs(5);
    let done = p.terminate(limit).await;
    let took = from.elapsed();
    if !done {
        world.say(&format!(
            "{what}: still running {took:?} after SIGTERM: SIGKILL"
        ));
        p.kill9().await;
    }
    world.count_fired(&p);
    world
        .drains
        .lock()
        .unwrap()
        .push((what.clone(), took, done));
    let spec = p.spec.clone();
    drop(p);
    match GatewayProc::spawn(&slot.name, spec).await {
        Ok(p) => {
            slot.front.retarget(p.addr);
            slot.front.pass();
            slot.addr.send_replace(Some(p.addr));
            *slot.proc.lock().unwrap() = Some(p);
        }
        Err(e) => world.say(&format!("restarting {} failed: {e}", slot.name)),
    }
    world.say(&format!("healed {what} (the drain took {took:?})"));
    Some(Injected::new(kind, what, from, t))
}

/// What the in-stream requests sent during frozen-ZooKeeper faults led to.
struct InStreamReport {
    summary: String,
    violations: Vec<String>,
}

/// For each in-stream request sent while the gateway's ZooKeeper was frozen: a leader's
/// stream after `proclaim{}` never went silent past its silence limit (the stream loop did not
/// block on the request), and a `suspended{stop_within}` after it was followed by `resumed` or
/// the end within `stop_within`; a `resign{}`/`release{}` ended the stream within T + 3 s.
/// Streams hit by a client fault are left out, and so are streams whose gateway was frozen or
/// killed while the request was being judged (the fifth soak of 2026-11-26 charged a gateway
/// SIGSTOP 3 s after an answered proclaim as 5 s of silence): a frozen or dead gateway sends
/// nothing by design, and its holders stop on their own silence limit (G3b), which the
/// exclusion checker judges.
fn check_instream(world: &World, logs: &[StreamLog]) -> InStreamReport {
    let t = world.t;
    let slack = Duration::from_millis(300);
    let records = world.instream.lock().unwrap().clone();
    let faulted = world.client_faulted.lock().unwrap().clone();
    // (gateway, when) of every fault of these kinds.
    let gateway_faults = |kinds: &[Fault]| -> Vec<(String, Instant)> {
        world
            .injected
            .lock()
            .unwrap()
            .iter()
            .filter(|f| kinds.contains(&f.kind))
            .filter_map(|f| Some((f.what.split_whitespace().nth(1)?.to_owned(), f.from)))
            .collect()
    };
    let gateway_stops = gateway_faults(&[Fault::FreezeGateway, Fault::KillGateway]);
    // A drain ends its holders by G7 (`suspended`, then the end once the silence limit and
    // the keepalive timeout have passed), not by the silence rule checked here; its own bound
    // is checked with the drains. A request sent while its gateway drains (a drain lasts at
    // most `DRAIN_AT_MOST`) or before one begins is judged there. (Seed 11540874333902556594:
    // a proclaim sent 2 ms after g2's drain began was told `suspended` and ended 3 s later,
    // as G7 says, and was counted here as 3 s of silence.)
    const DRAIN_AT_MOST: Duration = Duration::from_secs(10);
    let drains = gateway_faults(&[Fault::Drain, Fault::DrainUnreachable]);
    let mut violations = Vec::new();
    let (mut proclaims, mut answered, mut resumed, mut ended_after_suspend, mut undisturbed) =
        (0usize, 0usize, 0usize, 0usize, 0usize);
    let (mut leaves, mut leave_codes) = (0usize, BTreeMap::<String, usize>::new());
    let mut leaders_leaving = 0usize;
    let mut skipped = 0usize;
    let mut longest_suspension: Option<(Duration, Duration)> = None;
    let mut longest_leave = Duration::ZERO;
    for r in &records {
        let Some(log) = logs.iter().find(|l| l.id == r.stream) else {
            continue;
        };
        let gateway = log.via.split('+').next().unwrap_or_default();
        let gateway_stopped = gateway_stops.iter().any(|(g, at)| {
            g == gateway && *at >= r.sent && *at <= r.sent + t + Duration::from_secs(3)
        });
        let drained = drains.iter().any(|(g, at)| {
            g == gateway
                && *at <= r.sent + t + Duration::from_secs(3)
                && r.sent <= *at + DRAIN_AT_MOST
        });
        if faulted.contains(&r.stream) || gateway_stopped || drained {
            skipped += 1;
            continue;
        }
        let after: Vec<&(Instant, Ev)> =
            log.events.iter().filter(|(at, _)| *at >= r.sent).collect();
        if !r.proclaim {
            leaves += 1;
            leaders_leaving += usize::from(r.leading);
            match after.iter().find(|(_, e)| e.is_end()) {
                Some((te, Ev::Ended { code, .. }))
                    if *te <= r.sent + t + Duration::from_secs(3) =>
                {
                    longest_leave = longest_leave.max(*te - r.sent);
                    *leave_codes.entry(format!("{code:?}")).or_default() += 1;
                }
                other => violations.push(format!(
                    "{}: no end within T + 3 s of the request (then {:?})",
                    r.what,
                    other.map(|(at, e)| (checker::ms(*at, world.epoch), e))
                )),
            }
            continue;
        }
        proclaims += 1;
        let silence = log
            .events
            .iter()
            .find_map(|(_, e)| match e {
                Ev::Granted { silence_limit, .. } => Some(*silence_limit),
                _ => None,
            })
            .unwrap_or(t * 35 / 100);
        if after
            .iter()
            .any(|(_, e)| matches!(e, Ev::Proclaimed { .. }))
        {
            answered += 1;
        }
        // No silence past the limit until the stream is resumed or ends.
        let mut last = log
            .events
            .iter()
            .filter(|(at, e)| *at < r.sent && e.is_message())
            .map(|(at, _)| *at)
            .next_back()
            .unwrap_or(r.sent);
        let mut closed = false;
        for (at, e) in &after {
            if !e.is_message() {
                if e.is_end() {
                    closed = true;
                    break;
                }
                continue;
            }
            if *at > last + silence {
                violations.push(format!(
                    "{}: nothing on the stream for {:?} (silence limit {silence:?}) from {}",
                    r.what,
                    *at - last,
                    checker::ms(last, world.epoch)
                ));
            }
            last = *at;
            if matches!(e, Ev::Resumed | Ev::Ended { .. }) {
                closed = true;
                break;
            }
        }
        if !closed && last + silence < Instant::now().min(r.sent + t + Duration::from_secs(3)) {
            violations.push(format!(
                "{}: nothing on the stream after {}",
                r.what,
                checker::ms(last, world.epoch)
            ));
        }
        // suspended → resumed or the end, within stop_within: the suspension in force when the
        // request was sent, or the first one after it.
        let base = log
            .events
            .iter()
            .rposition(|(at, e)| *at < r.sent && matches!(e, Ev::Granted { .. } | Ev::Resumed))
            .unwrap_or(0);
        // A suspension after the request was answered (`proclaimed`) belongs to whatever
        // fault came later, not to this request (the first soak of 2026-11-26 counted a
        // leader kill 13 s after an answered proclaim against it).
        let answered_at = log
            .events
            .iter()
            .find(|(at, e)| *at >= r.sent && matches!(e, Ev::Proclaimed { .. }))
            .map(|(at, _)| *at);
        let Some(si) = log.events[base..]
            .iter()
            .take_while(|(at, _)| answered_at.is_none_or(|a| *at <= a))
            .position(|(_, e)| matches!(e, Ev::Suspended { .. }))
            .map(|i| base + i)
        else {
            undisturbed += 1;
            continue;
        };
        let (ts, Ev::Suspended { stop_within }) = &log.events[si] else {
            unreachable!()
        };
        let next = log.events[si + 1..]
            .iter()
            .find(|(_, e)| matches!(e, Ev::Resumed | Ev::Ended { .. } | Ev::Killed));
        match next {
            Some((te, e)) if *te <= *ts + *stop_within + slack && !matches!(e, Ev::Killed) => {
                if matches!(e, Ev::Resumed) {
                    resumed += 1;
                } else {
                    ended_after_suspend += 1;
                }
                let took = *te - *ts;
                if longest_suspension.is_none_or(|(d, _)| took > d) {
                    longest_suspension = Some((took, *stop_within));
                }
            }
            other => violations.push(format!(
                "{}: suspended at {} (stop_within {stop_within:?}), then {:?}",
                r.what,
                checker::ms(*ts, world.epoch),
                other.map(|(at, e)| (checker::ms(*at, world.epoch), e))
            )),
        }
    }
    let summary = format!(
        "in-stream requests during frozen ZooKeeper: {proclaims} leaders' proclaim ({answered} answered `proclaimed`; \
         {resumed} suspended then resumed, {ended_after_suspend} suspended then ended, {undisturbed} never suspended; \
         longest suspended → resumed/end {longest_suspension:?} (took, stop_within)), \
         {leaves} resign/release ({leaders_leaving} by holders; ends {leave_codes:?}, slowest {longest_leave:?}), \
         {skipped} skipped (a client fault, or its gateway frozen, killed or drained meanwhile), {} violations",
        violations.len()
    );
    InStreamReport {
        summary,
        violations,
    }
}

/// The member znodes under `root` that each of `servers` lists, each read from that server
/// alone (a client of its own) after a `sync`; `None` if some server could not be read.
async fn member_views(servers: &[String], root: &str) -> Option<Vec<BTreeSet<String>>> {
    let mut views = Vec::new();
    for server in servers {
        let read = async {
            let client = zookeeper_client::Client::connect(server).await.ok()?;
            let _ = client.sync(root).await;
            Some(support::member_znodes(&client, root).await)
        };
        let view = tokio::time::timeout(Duration::from_secs(5), read)
            .await
            .ok()??;
        views.push(view.into_iter().collect());
    }
    Some(views)
}

/// For each view, the members it lists that most views do not.
fn minority_members(views: &[BTreeSet<String>]) -> Vec<BTreeSet<String>> {
    let mut seen: BTreeMap<&String, usize> = BTreeMap::new();
    for z in views.iter().flatten() {
        *seen.entry(z).or_default() += 1;
    }
    views
        .iter()
        .map(|v| {
            v.iter()
                .filter(|z| 2 * seen[z] <= views.len())
                .cloned()
                .collect()
        })
        .collect()
}

/// The member znodes left under `root` on each server of `connect` alone, split into those most
/// servers list (left by a gateway) and those only a minority lists (a diverged server's);
/// `None` if some server could not be read (then nothing can be told apart).
async fn left_by_majority(connect: &str, root: &str) -> Option<(Vec<String>, Vec<String>)> {
    let servers: Vec<String> = connect.split(',').map(str::to_owned).collect();
    let views = member_views(&servers, root).await?;
    let minority: BTreeSet<String> = minority_members(&views).into_iter().flatten().collect();
    let majority: BTreeSet<String> = views
        .into_iter()
        .flatten()
        .filter(|z| !minority.contains(z))
        .collect();
    Some((
        majority.into_iter().collect(),
        minority.into_iter().collect(),
    ))
}

/// The servers diverged from their quorum (by index in `servers`), each with the member
/// znodes it lists that most servers do not, in two readings a second apart: a member
/// created or deleted between two servers' reads shows on a minority once, a diverged
/// server's ghost (ZOOKEEPER-5010) both times. `None` if some server could not be read.
async fn diverged_servers(servers: &[String], root: &str) -> Option<BTreeMap<usize, Vec<String>>> {
    let first = minority_members(&member_views(servers, root).await?);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = minority_members(&member_views(servers, root).await?);
    Some(
        first
            .iter()
            .zip(&second)
            .enumerate()
            .filter_map(|(i, (a, b))| {
                let both: Vec<String> = a.intersection(b).cloned().collect();
                (!both.is_empty()).then_some((i, both))
            })
            .collect(),
    )
}

/// Writes every queue's members (znode name and owning session) to `path` each time they
/// change, polled every 250 ms from a ZooKeeper client of the soak's own: the forensics of a
/// stall (which session held the member at the head while nobody was granted), to be read
/// beside the gateways' logs (`ZKGATE_KEEP_GATEWAY_LOGS=DIR` keeps them).
async fn trace_queues(
    connect: String,
    root: String,
    epoch: Instant,
    path: std::path::PathBuf,
    stop: CancellationToken,
) {
    let Ok(out) = std::fs::File::create(&path) else {
        return;
    };
    let out = Arc::new(Mutex::new(out));
    // One client per server, each reading only that server: a server whose view diverges
    // from the others' (a ghost member, a missed delete) shows in its own lines.
    let servers: Vec<String> = connect.split(',').map(str::to_owned).collect();
    let tasks: Vec<_> = servers
        .into_iter()
        .enumerate()
        .map(|(i, server)| {
            tokio::spawn(trace_server(
                format!("s{i}"),
                server,
                root.clone(),
                epoch,
                out.clone(),
                stop.clone(),
            ))
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
}

/// A member znode's name as the traces print it: mode letter, the first 8 hex digits of its
/// protected id, sequence (`e-1f2e3d4c-0000000012`), so two znodes of one create retried show
/// as two with one id.
fn short_member(node: &str) -> String {
    let mut parts = node.splitn(3, '-');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(mode), Some(id), Some(seq)) => {
            format!("{mode}-{}-{seq}", id.get(..8).unwrap_or(id))
        }
        _ => node.to_owned(),
    }
}

/// The member znode a lease names (`zkg2.<hex of kind/queue/node>.<tag>`), short as in the
/// queue trace; the soak's own forensics read it, clients never parse leases.
fn lease_member(lease: &str) -> String {
    let hex = lease.split('.').nth(1).unwrap_or_default();
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    let text = String::from_utf8_lossy(&bytes);
    short_member(text.rsplit('/').next().unwrap_or_default())
}

async fn trace_server(
    label: String,
    server: String,
    root: String,
    epoch: Instant,
    out: Arc<Mutex<std::fs::File>>,
    stop: CancellationToken,
) {
    use std::io::Write;
    let mut client: Option<zookeeper_client::Client> = None;
    let mut last: BTreeMap<String, String> = BTreeMap::new();
    while !stop.is_cancelled() {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if client.as_ref().is_none_or(|c| c.state().is_terminated()) {
            client = tokio::time::timeout(
                Duration::from_secs(5),
                zookeeper_client::Client::connect(&server),
            )
            .await
            .ok()
            .and_then(Result::ok);
        }
        let Some(c) = &client else { continue };
        for folder in ["elections", "locks"] {
            let Ok(queues) = c.list_children(&format!("{root}/{folder}")).await else {
                continue;
            };
            for q in queues {
                let qpath = format!("{root}/{folder}/{q}");
                let Ok(mut kids) = c.list_children(&qpath).await else {
                    continue;
                };
                kids.sort_by_key(|k| k.rsplit('-').next().unwrap_or("").to_owned());
                let mut line = Vec::new();
                for k in &kids {
                    let owner = match c.check_stat(&format!("{qpath}/{k}")).await {
                        Ok(Some(st)) => format!("{:#x}", st.ephemeral_owner),
                        _ => "gone".to_owned(),
                    };
                    line.push(format!("{}@{owner}", short_member(k)));
                }
                let line = line.join(" ");
                if last.get(&q) != Some(&line) {
                    let _ = writeln!(
                        out.lock().unwrap(),
                        "+{}ms {label} {q}: [{line}]",
                        epoch.elapsed().as_millis()
                    );
                    last.insert(q, line);
                }
            }
        }
    }
}
