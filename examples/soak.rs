//! Randomized soak for safety under faults (issue 4). Not part of CI.
//!
//! ```text
//! cargo run --release --example soak -- --minutes 10
//! ```
//!
//! Starts a 3-node ZooKeeper ensemble, a few gateways as child processes (this binary in
//! `gateway` mode: the same `serve` code as `zkgate serve`, but examples do not get the
//! binary's path), each reaching ZooKeeper through link cutters, and client slots that keep
//! campaigning in a few elections (and asking for permits of a few semaphores: `--locks`,
//! `--permits`) through link cutters of their own, leaving by resign/release or by
//! being killed now and then. One fault at a time is injected, at random, from the list of
//! `tests/faults.rs`: a client killed or reset, a client's link blackholed, a gateway SIGKILLed
//! (then restarted) or SIGSTOPped past the session timeout (then SIGCONTed), the ZooKeeper
//! leader killed (then restarted), a ZooKeeper server restarted, a gateway's ZooKeeper link
//! blackholed shorter or longer than the session timeout, or one way only (requests lost,
//! notifications delivered) past it.
//!
//! At the end the checker of `tests/support/checker.rs` runs over every stream: exclusion and
//! fencing violations, the time each election took to have a holder again after each fault,
//! and the znodes left once every client has gone. Exit status 1 on any safety violation or
//! leftover znode.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use rand::prelude::*;
use support::checker::{self, Ev, StreamLog};
use support::linkcut::{LinkCutter, LinkMode};
use support::procgw::{GatewayProc, GatewaySpec, ProcState};
use support::recorder::StreamClient;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use zkgate::localzk::{LocalZk, LocalZkOptions};

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
}

/// `soak gateway …`: the gateway, as `zkgate serve` runs it.
#[derive(Debug, Parser)]
struct GatewayCmd {
    #[arg(long)]
    log_json: bool,
    #[command(flatten)]
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
        let cmd = GatewayCmd::parse_from(argv[1..].iter());
        return rt.block_on(gateway(cmd));
    }
    let args = Args::parse();
    rt.block_on(soak(args))
}

async fn gateway(cmd: GatewayCmd) -> std::process::ExitCode {
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
    let r = match cmd.serve.resolve() {
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
}

const FAULTS: [Fault; 10] = [
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
];

/// One injected fault: recovery is measured from `from` against `bound`.
#[derive(Debug, Clone)]
struct Injected {
    kind: Fault,
    what: String,
    from: Instant,
    bound: Duration,
}

/// A gateway slot: the process (replaced after a kill) and its ZooKeeper link cutters.
struct GatewaySlot {
    name: String,
    proc: Mutex<Option<GatewayProc>>,
    /// `Some(addr)` while it can be used by new clients.
    addr: watch::Sender<Option<std::net::SocketAddr>>,
    zk_cuts: Vec<LinkCutter>,
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
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(a) = s.current.lock().unwrap().as_ref() {
                let log = a.client.log();
                if log.ended().is_some() {
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
    let mut zk = match LocalZk::start_ensemble(3, LocalZkOptions::default()).await {
        Ok(zk) => zk,
        Err(e) => {
            eprintln!("soak: cannot start ZooKeeper: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let connect = zk.connect_string();
    let root = support::unique_root("soak");
    println!("ZooKeeper ensemble {connect}, root {root}");
    let exe = std::env::current_exe().expect("own path");
    let mut gateways = Vec::new();
    for g in 0..args.gateways {
        let mut cuts = Vec::new();
        for i in 0..zk.len() {
            cuts.push(LinkCutter::start(zk.server_address(i)).await.unwrap());
        }
        let zk_via: Vec<String> = cuts.iter().map(|c| c.addr().to_string()).collect();
        let spec = GatewaySpec {
            command: vec![exe.clone().into(), "gateway".into()],
            zk: zk_via.join(","),
            root: root.clone(),
            session_timeout: t,
            extra: Vec::new(),
        };
        let name = format!("g{g}");
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
    });
    let mut tasks = Vec::new();
    for i in 0..world.slots.len() {
        tasks.push(tokio::spawn(run_slot(world.clone(), i)));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;

    let until = Instant::now() + Duration::from_secs_f64(args.minutes * 60.0);
    let mut injected: Vec<Injected> = Vec::new();
    let mut next_report = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        let kind = FAULTS[world.random(FAULTS.len())];
        if let Some(f) = inject(&world, &mut zk, kind).await {
            injected.push(f);
        }
        let pause = Duration::from_secs_f64(args.gap) + world.millis(0, (args.gap * 1000.0) as u64);
        tokio::time::sleep(pause).await;
        if Instant::now() >= next_report {
            next_report += Duration::from_secs(60);
            let logs = world.logs();
            let r = checker::check(&logs, capacity, epoch);
            world.say(&format!(
                "progress: {} faults, {} streams, {} holds, {} violations so far",
                injected.len(),
                r.streams,
                r.holds.len(),
                r.violations.len()
            ));
        }
    }
    world.say("faults over: letting everything settle");
    tokio::time::sleep(t * 2).await;
    // Check before the clients leave (their departure is no fault).
    let logs = world.logs();
    let report = checker::check(&logs, capacity, epoch);
    world.stop.cancel();
    for task in tasks {
        let _ = task.await;
    }
    let znodes = support::wait_no_members(&connect, &root, t + Duration::from_secs(5)).await;

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
    for f in &injected {
        let entry = by_kind.entry(f.kind).or_default();
        entry.0 += 1;
        for e in &elections {
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
    if report.violations.is_empty() && znodes.is_ok() {
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
                if !world.stop.is_cancelled() && Instant::now() < leave_at {
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
async fn inject(world: &Arc<World>, zk: &mut LocalZk, kind: Fault) -> Option<Injected> {
    let t = world.t;
    let keepalive = t / 5 + t * 2 / 5;
    match kind {
        Fault::KillClient | Fault::ResetClient | Fault::BlackholeClient => {
            let i = world.pick_client()?;
            let slot = &world.slots[i];
            let from = Instant::now();
            let what = format!("{kind:?} {}", slot.name);
            {
                let mut cur = slot.current.lock().unwrap();
                let a = cur.as_mut()?;
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
            tokio::time::sleep(bound).await;
            Some(Injected {
                kind,
                what,
                from,
                bound,
            })
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
            })
        }
    }
}
