//! Randomized soak for safety under faults (issue 4, issue 10 item 8). Not part of CI.
//!
//! ```text
//! cargo run --release --example soak -- --minutes 10
//! cargo run --release --example soak -- --minutes 35 --gap 1 --client-gap 1.5 --seed N
//! cargo run --release --example soak -- --minutes 5 --zk-sessions 2   # a pool per gateway
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
//! clients send `proclaim{}`, `resign{}` and `release{}` on their streams. With
//! `--client-gap` the client faults come from a second injector, concurrently with the
//! others. Throughout, the gateways' test seams (`ZKGATE_FAILPOINT_*`, `src/coord/zk.rs`)
//! lose the reply of every `--lose-create-every`th member create and fail every
//! `--fail-delete-every`th delete unsent; their firings are counted from the gateways' logs.
//!
//! At the end the checker of `zkgate_testkit::checker` runs over every stream: exclusion and
//! fencing violations, the time each election took to have a holder again after each fault
//! (skipped where another fault on the same election overlapped), and the znodes left once
//! every client has gone; and each in-stream request sent during a frozen ZooKeeper is checked:
//! a leader's stream never silent past its silence limit, `suspended` followed by `resumed` or
//! the end within `stop_within`, a resign/release ended within T + 3 s; and liveness as
//! strictly as safety: a candidate waiting through a vacancy longer than 2 T + 6 s (longer than
//! any fault and its recovery) is a stall. Exit status 1 on any safety or in-stream violation,
//! stall or leftover znode.

use zkgate_testkit as support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{CommandFactory, FromArgMatches, Parser};
use rand::prelude::*;
use support::checker::{self, Ev, StreamLog};
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
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
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
}

const CLIENT_FAULTS: [Fault; 3] = [
    Fault::KillClient,
    Fault::ResetClient,
    Fault::BlackholeClient,
];

const FAULTS: [Fault; 14] = [
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
];

/// One injected fault: recovery is measured from `from` against `bound`.
#[derive(Debug, Clone)]
struct Injected {
    kind: Fault,
    what: String,
    from: Instant,
    bound: Duration,
    /// The one election or lock a client fault touches (`None`: possibly all of them).
    resource: Option<String>,
}

impl Injected {
    /// Whether `other` may have delayed this fault's recovery on `resource`: it touches that
    /// resource and its window `[from, from + bound]` meets this one's.
    fn overlaps(&self, other: &Injected, resource: &str) -> bool {
        other.resource.as_deref().is_none_or(|r| r == resource)
            && other.from <= self.from + self.bound
            && self.from <= other.from + other.bound
    }
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
}

struct ClientSlot {
    /// The election or lock name.
    election: String,
    /// `Some(permits)` for a lock slot (Acquire), `None` for an election slot (Campaign).
    permits: Option<u32>,
    name: String,
    index: usize,
    current: Mutex<Option<Active>>,
    /// The slot neither leaves nor is picked for a client fault before this (an in-stream
    /// request is being watched).
    hold_until: Mutex<Option<Instant>>,
}

struct World {
    t: Duration,
    epoch: Instant,
    gateways: Vec<GatewaySlot>,
    slots: Vec<ClientSlot>,
    logs: Mutex<Vec<watch::Receiver<StreamLog>>>,
    stop: CancellationToken,
    rng: Mutex<StdRng>,
    /// Streams whose client sent `resign{}` (their OK end is expected).
    resigned: Mutex<std::collections::HashSet<u64>>,
    /// Streams hit by a client fault (not checked for in-stream requests).
    client_faulted: Mutex<std::collections::HashSet<u64>>,
    injected: Mutex<Vec<Injected>>,
    instream: Mutex<Vec<InStream>>,
    /// Failpoint firings counted in the logs of gateways gone so far: lost create replies,
    /// deletes failed unsent.
    fired: Mutex<(u64, u64)>,
}

impl World {
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

    /// Counts the failpoint firings in a gateway's log (before the log goes with it).
    fn count_fired(&self, p: &GatewayProc) {
        let text = std::fs::read_to_string(p.log_path()).unwrap_or_default();
        let creates = text
            .matches("failpoint: member create applied, reply lost")
            .count() as u64;
        let deletes = text.matches("failpoint: delete failed unsent").count() as u64;
        let mut f = self.fired.lock().unwrap();
        f.0 += creates;
        f.1 += deletes;
    }

    fn running_gateways(&self) -> Vec<usize> {
        (0..self.gateways.len())
            .filter(|&i| self.gateways[i].addr.borrow().is_some())
            .collect()
    }
}

async fn soak(args: Args) -> std::process::ExitCode {
    let seed = args.seed.unwrap_or_else(rand::random);
    let t = args.session_timeout;
    let epoch = Instant::now();
    println!(
        "soak: {} min, seed {seed}, {} gateways, {} elections and {} locks ({} permits) x {} clients, session timeout {t:?}",
        args.minutes, args.gateways, args.elections, args.locks, args.permits, args.clients
    );
    // Peer links through link cutters, for follower partitions.
    let (mut zk, peers) = support::ensemble::ensemble_with_peer_cutters(args.sync_limit).await;
    let connect = zk.connect_string();
    let root = support::named_root("soak");
    println!("ZooKeeper ensemble {connect}, root {root}");
    let exe = std::env::current_exe().expect("own path");
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
        let spec = GatewaySpec {
            command: vec![exe.clone().into(), "gateway".into()],
            zk: zk_via.join(","),
            root: root.clone(),
            session_timeout: t,
            zk_tick_time: Some(support::procgw::HARNESS_TICK),
            extra: vec!["--zk-sessions".into(), args.zk_sessions.to_string()],
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
        gateways.push(GatewaySlot {
            name,
            proc: Mutex::new(Some(proc)),
            addr,
            zk_cuts: cuts,
        });
    }
    let mut slots = Vec::new();
    for e in 0..args.elections {
        for c in 0..args.clients {
            slots.push(ClientSlot {
                election: format!("soak-{e}"),
                permits: None,
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
                name: format!("l{l}c{c}"),
                index: c,
                current: Mutex::new(None),
                hold_until: Mutex::new(None),
            });
        }
    }
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
        epoch,
        gateways,
        slots,
        logs: Mutex::new(Vec::new()),
        stop: CancellationToken::new(),
        rng: Mutex::new(StdRng::seed_from_u64(seed)),
        resigned: Mutex::new(std::collections::HashSet::new()),
        client_faulted: Mutex::new(std::collections::HashSet::new()),
        injected: Mutex::new(Vec::new()),
        instream: Mutex::new(Vec::new()),
        fired: Mutex::new((0, 0)),
    });
    let mut tasks = Vec::new();
    for i in 0..world.slots.len() {
        tasks.push(tokio::spawn(run_slot(world.clone(), i)));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;

    let until = Instant::now() + Duration::from_secs_f64(args.minutes * 60.0);
    let mut next_report = Instant::now() + Duration::from_secs(60);
    let concurrent_clients = args.client_gap > 0.0;
    let client_injector = concurrent_clients.then(|| {
        let world = world.clone();
        let gap = args.client_gap;
        tokio::spawn(async move {
            while Instant::now() < until {
                let kind = CLIENT_FAULTS[world.random(CLIENT_FAULTS.len())];
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
        .collect();
    while Instant::now() < until {
        let kind = kinds[world.random(kinds.len())];
        if let Some(f) = inject(&world, &mut zk, &peers, kind).await {
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
    world.say("faults over: letting everything settle");
    tokio::time::sleep(t * 2).await;
    let injected: Vec<Injected> = world.injected.lock().unwrap().clone();
    // Check before the clients leave (their departure is no fault).
    let faults_over = Instant::now();
    let logs = world.logs();
    let report = checker::check(&logs, capacity, epoch);
    world.stop.cancel();
    for task in tasks {
        let _ = task.await;
    }
    let znodes = support::members_gone_at(&connect, &root, t + Duration::from_secs(5)).await;

    // Recovery: for each fault and election, the time until it had a holder again.
    // Elections and locks: for a lock, "held again" means at least one permit held.
    let elections: Vec<String> = (0..args.elections)
        .map(|e| format!("soak-{e}"))
        .chain((0..args.locks).map(|l| format!("soak-lock-{l}")))
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
            let r = checker::recovery(&report, e, f.from, f.bound, &f.what, epoch);
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
        "gateway failpoints fired: {} member creates applied with the reply lost, {} deletes failed unsent",
        fired.0, fired.1
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
    let stalled: Vec<String> = elections
        .iter()
        .flat_map(|e| {
            checker::stalls(&logs, &report, e, stall_bound, faults_over)
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
        "stalls (a candidate waiting through a vacancy over {stall_bound:?}): {}",
        stalled.len()
    );
    for v in &stalled {
        println!("  STALL {v}");
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
        Ok(d) => println!("znodes left: 0 (gone {d:?} after the last client)"),
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
    for g in &world.gateways {
        let p = g.proc.lock().unwrap().take();
        if let Some(mut p) = p {
            p.terminate(Duration::from_secs(5)).await;
        }
    }
    zk.shutdown().await;
    if report.violations.is_empty()
        && instream.violations.is_empty()
        && znodes.is_ok()
        && stalled.is_empty()
    {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
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
            match slot.permits {
                None => StreamClient::join(&cut.url(), &slot.election, &slot.name, &via).await,
                Some(p) => {
                    StreamClient::acquire(&cut.url(), &slot.election, &slot.name, p, &via).await
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
        *slot.current.lock().unwrap() = Some(Active {
            client,
            cut,
            gateway: g,
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
        cfg.session_timeout = world.t;
        zkgate::coord::timing::Timing::requested(&cfg).dead_client_bound()
    };
    let i = world.pick_client()?;
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
            _ => a.cut.blackhole(),
        }
    }
    world.say(&format!("FAULT {what}"));
    let bound = match kind {
        Fault::BlackholeClient => keepalive + Duration::from_secs(1),
        _ => Duration::from_secs(1),
    };
    Some(Injected {
        kind,
        what,
        from,
        bound,
        resource: Some(slot.election.clone()),
    })
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
    kind: Fault,
) -> Option<Injected> {
    let t = world.t;
    match kind {
        Fault::KillClient | Fault::ResetClient | Fault::BlackholeClient => {
            let f = inject_client(world, kind)?;
            tokio::time::sleep(f.bound).await;
            Some(f)
        }
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
            Some(Injected {
                kind,
                what,
                from,
                bound: t + Duration::from_secs(1),
                resource: None,
            })
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
            tokio::time::sleep(world.millis(1_000, 3_000)).await;
            if let Err(e) = zk.start(target).await {
                world.say(&format!("restarting ZooKeeper server {target} failed: {e}"));
            }
            world.say(&format!("healed {what}"));
            Some(Injected {
                kind,
                what,
                from,
                bound: t,
                resource: None,
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
            Some(Injected {
                kind,
                what,
                from,
                bound,
                resource: None,
            })
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
            Some(Injected {
                kind,
                what,
                from,
                bound: t + Duration::from_secs(1),
                resource: None,
            })
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
            Some(Injected {
                kind,
                what,
                from,
                bound: t + Duration::from_secs(1),
                resource: None,
            })
        }
    }
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
/// Streams hit by a client fault are left out.
fn check_instream(world: &World, logs: &[StreamLog]) -> InStreamReport {
    let t = world.t;
    let slack = Duration::from_millis(300);
    let records = world.instream.lock().unwrap().clone();
    let faulted = world.client_faulted.lock().unwrap().clone();
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
        if faulted.contains(&r.stream) {
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
        let Some(si) = log.events[base..]
            .iter()
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
         {skipped} skipped (client fault), {} violations",
        violations.len()
    );
    InStreamReport {
        summary,
        violations,
    }
}
