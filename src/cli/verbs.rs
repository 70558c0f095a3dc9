//! The command-line verbs besides `serve`: `dev` and the client verbs in the style of
//! `etcdctl elect` / `consul lock`, built on the Rust client (`zkgate-client`, so the CLI
//! follows the fleet rules of `clients/CONFORMANCE.md`: endpoint failover, loss reasons, the
//! silence watchdog). `elect -- CMD` and `lock -- CMD` run CMD exactly while the hold lasts
//! ([`super::held_command`]); without CMD, `--output json` makes them the conformance agent.

use std::process::ExitCode;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio_stream::StreamExt;
use zkgate_client::pb::{Candidate, Holder, Leader, LockMode};
use zkgate_client::{
    Backoff, Client, Endpoint, Endpoints, Error, HoldEvent, HoldOptions, Leadership, LockHold,
    LockOptions, LossReason, ManyEvent, SuspendCause, TlsOptions,
};

use super::args::{
    ClientArgs, DevArgs, ElectArgs, LeaseArgs, LockArgs, NameArgs, ObserveArgs, Output,
    ValidateArgs,
};
use super::held_command::{
    exit_code, spawn_error_code, stop_grace, HeldCommand, HoldLeft, StopCause, FENCING_TOKEN_ENV,
    LEASE_ENV,
};
use crate::coord::{CoordConfig, Coordinator};
use crate::server::{self, ServeConfig};
use zkgate_localzk::{LocalZk, LocalZkOptions};

/// The client verbs' exit codes (README "Command line"). With CMD, `elect` and `lock` exit
/// with CMD's own code once CMD has run.
pub mod exit {
    /// Done: the answer was printed; a hold was given up after SIGINT, SIGTERM, SIGHUP or
    /// SIGTSTP.
    pub const OK: u8 = 0;
    /// Failed: no gateway reachable, a refusal (bad name, permits mismatch, TLS), anything
    /// unexpected.
    pub const FAILURE: u8 = 1;
    /// Bad command line (clap's own code), or `zkgate dev` without ZooKeeper.
    pub const USAGE: u8 = 2;
    /// The hold was lost and the verb does not campaign again (`--no-requeue`/`--once`, `lock`
    /// without `--requeue`).
    pub const LOST: u8 = 3;
    /// Not found: `leader` with nobody leading; `resign`/`release` with a lease the gateway
    /// cannot honour.
    pub const NOT_FOUND: u8 = 4;
    /// `validate`: the token is not current.
    pub const NOT_CURRENT: u8 = 5;
    /// `lock --timeout`: not acquired in time.
    pub const NOT_ACQUIRED: u8 = 6;
}

/// Resolves on Ctrl-C or SIGTERM: how `serve` and `dev` are asked to stop.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// `zkgate dev`: a local ZooKeeper from the installed distribution plus a gateway in this
/// process. Ctrl-C (or SIGTERM) drains the gateway and stops ZooKeeper, leaving nothing running;
/// a second Ctrl-C exits at once (the JVM still dies with us: see [`zkgate_localzk`]).
///
/// Prints one `NAME  VALUE` line per endpoint once the gateway is connected, e.g.
/// `gRPC       127.0.0.1:50051`, with the addresses actually bound (so `--listen
/// 127.0.0.1:0` works), then `ready`. Exits 2 if ZooKeeper or Java is not installed.
pub async fn dev(args: DevArgs) -> ExitCode {
    if !LocalZk::is_installed() {
        eprintln!(
            "zkgate dev needs Apache ZooKeeper and Java: {}.\n\
             From a checkout, scripts/dev.sh installs them and runs this command.",
            LocalZk::install_hint()
        );
        return ExitCode::from(exit::USAGE);
    }
    // Bind first: a taken port is the likeliest mistake and costs nothing to report.
    let listener = match TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "zkgate dev: cannot listen on {} (gRPC): {e}; try --listen 127.0.0.1:0",
                args.listen
            );
            return ExitCode::FAILURE;
        }
    };
    let http = match TcpListener::bind(args.http).await {
        Ok(h) => h,
        Err(e) => {
            eprintln!(
                "zkgate dev: cannot listen on {} (HTTP): {e}; try --http 127.0.0.1:0",
                args.http
            );
            return ExitCode::FAILURE;
        }
    };
    let (grpc_addr, http_addr) = match (listener.local_addr(), http.local_addr()) {
        (Ok(g), Ok(h)) => (g, h),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("zkgate dev: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!("zkgate dev: starting ZooKeeper…");
    let opts_tick = Duration::from_millis(500);
    let opts = LocalZkOptions {
        // ZooKeeper grants session timeouts of 2–20 ticks: 1 s to 10 s here.
        tick_time: opts_tick,
        ..Default::default()
    };
    let zk = match LocalZk::start_standalone(opts).await {
        Ok(zk) => zk,
        Err(e) => {
            eprintln!("zkgate dev: could not start ZooKeeper: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut coord_cfg = CoordConfig::new(zk.connect_string());
    coord_cfg.session_timeout = args.session_timeout;
    coord_cfg.zk_tick_time = Some(opts_tick);
    let cfg = ServeConfig::new(coord_cfg.clone());
    if let Err(e) = cfg.check_timing() {
        eprintln!("zkgate dev: refusing to start: {e}");
        zk.shutdown().await;
        return ExitCode::FAILURE;
    }
    let coord = Coordinator::start(coord_cfg);
    // The first signal drains; a second one gives up on draining.
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        shutdown_signal().await;
        eprintln!("zkgate dev: stopping the gateway and ZooKeeper (Ctrl-C again to force)…");
        let _ = stop_tx.send(());
        shutdown_signal().await;
        eprintln!("zkgate dev: forced exit");
        std::process::exit(130);
    });
    let server = tokio::spawn(server::run_with(
        coord.clone(),
        cfg,
        listener,
        Some(http),
        async move {
            let _ = stop_rx.await;
        },
    ));
    if coord.wait_connected(Duration::from_secs(30)).await {
        let pid = zk.pid(0).map_or_else(|| "?".to_owned(), |p| p.to_string());
        println!("ZooKeeper  {}  pid {pid}", zk.connect_string());
        println!("gRPC       {grpc_addr}");
        println!("HTTP       {http_addr}");
        println!("Try        grpcurl -plaintext {grpc_addr} list");
        println!("           curl http://{http_addr}/metrics");
        println!("ready (Ctrl-C stops the gateway and ZooKeeper)");
    } else {
        eprintln!("zkgate dev: the gateway did not connect to ZooKeeper within 30 s; still trying (see the log above)");
    }
    let result = match server.await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(e) => Err(format!("the gateway task failed: {e}")),
    };
    zk.shutdown().await;
    match result {
        Ok(()) => {
            eprintln!("zkgate dev: stopped; ZooKeeper is gone");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("zkgate dev: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The client for a verb's `--endpoint`s (or `ZKGATE_ENDPOINT`), TLS flags and bearer token
/// (`--token-file` or `ZKGATE_TOKEN`).
async fn connect(args: &ClientArgs) -> Result<Client, String> {
    let mut endpoints = Endpoints::or_env(&args.endpoints).map_err(|e| e.to_string())?;
    if args.tls_requested() {
        let mut tls = TlsOptions::from_files(
            args.ca.as_deref(),
            args.cert.as_deref(),
            args.key.as_deref(),
        )
        .map_err(|e| e.to_string())?;
        if let Some(name) = &args.server_name {
            tls = tls.server_name(name.clone());
        }
        endpoints = endpoints.tls(tls);
    }
    // The bearer token: --token-file, else ZKGATE_TOKEN (never a flag: argv is visible to
    // every user of the machine).
    if let Some(path) = &args.token_file {
        endpoints = endpoints.token_file(path).map_err(|e| e.to_string())?;
    } else if let Some(t) = std::env::var(zkgate_client::endpoint::TOKEN_ENV)
        .ok()
        .filter(|t| !t.trim().is_empty())
    {
        endpoints = endpoints.token(t.trim());
    }
    Client::connect(endpoints).await.map_err(|e| e.to_string())
}

/// What a `suspended` line says, by its cause (`suspended.reason`).
fn suspended_because(cause: SuspendCause) -> &'static str {
    match cause {
        SuspendCause::Connection => "the gateway lost ZooKeeper",
        SuspendCause::Drain => "the gateway is draining (shutting down)",
        SuspendCause::LeaseExpired => "the lock's ttl lapsed without a keep-alive",
        SuspendCause::EndRequested => {
            "a resign or release by lease asked the gateway to end the hold"
        }
        SuspendCause::RightWithdrawn => "a policy reload withdrew the right to this name",
        // A gateway older than the reason, or a newer reason.
        _ => "the gateway revoked the hold",
    }
}

fn show(l: &Leader) -> String {
    format!(
        "{} (fencing token {}) {}",
        l.candidate,
        l.fencing_token,
        String::from_utf8_lossy(&l.value)
    )
}

/// A leader in `--output json`: tokens are decimal strings (JSON numbers lose u64 precision),
/// the value is UTF-8 text (lossy), times are RFC 3339.
fn leader_json(l: &Leader) -> Value {
    json!({
        "election": l.election,
        "candidate": l.candidate,
        "value": String::from_utf8_lossy(&l.value),
        "fencing_token": l.fencing_token.to_string(),
        "since": l.since.as_ref().map(ToString::to_string),
    })
}

fn candidate_json(c: &Candidate) -> Value {
    json!({
        "position": c.position,
        "candidate": c.candidate,
        "value": String::from_utf8_lossy(&c.value),
        "fencing_token": c.fencing_token.to_string(),
        "joined": c.joined.as_ref().map(ToString::to_string),
        "leader": c.leader,
    })
}

fn mode_name(mode: i32) -> &'static str {
    if mode == LockMode::Read as i32 {
        "read"
    } else {
        "write"
    }
}

fn holder_json(h: &Holder) -> Value {
    json!({
        "owner": h.owner,
        "fencing_token": h.fencing_token.to_string(),
        "since": h.since.as_ref().map(ToString::to_string),
        "mode": mode_name(h.mode),
    })
}

/// Reports a failed call on stderr and picks the exit code.
fn failed(e: &Error) -> u8 {
    eprintln!("zkgate: {e}");
    if e.code() == Some(tonic::Code::NotFound) {
        exit::NOT_FOUND
    } else {
        exit::FAILURE
    }
}

/// Runs a query verb: connect, then `f`.
async fn query<F, Fut>(args: &ClientArgs, f: F) -> u8
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = u8>,
{
    match connect(args).await {
        Ok(c) => f(c).await,
        Err(e) => {
            eprintln!("zkgate: {e}");
            exit::FAILURE
        }
    }
}

/// `zkgate leader NAME`.
pub async fn leader(args: NameArgs) -> u8 {
    let json = args.client.output == Output::Json;
    query(&args.client, |c| async move {
        match c.leader(&args.name).await {
            Ok(Some(l)) if json => println!("{}", json!({ "leader": leader_json(&l) })),
            Ok(Some(l)) => println!("{}", show(&l)),
            Ok(None) => {
                if json {
                    println!("{}", json!({ "leader": null }));
                }
                eprintln!("zkgate: no leader of {:?}", args.name);
                return exit::NOT_FOUND;
            }
            Err(e) => return failed(&e),
        }
        exit::OK
    })
    .await
}

/// `zkgate observe NAME`: one line per change, across gateway failures (tokens never go down).
/// `zkgate observe --prefix P [NAME…]`: the same for many elections at once (ObserveMany), one
/// line per election and change, each line naming its election.
pub async fn observe(args: ObserveArgs) -> u8 {
    let json = args.client.output == Output::Json;
    let name = match (&args.prefix, args.names.as_slice()) {
        (Some(_), _) => None,
        (None, [name]) => Some(name.clone()),
        (None, _) => {
            eprintln!("zkgate: observe takes one NAME, or --prefix P with any number of NAMEs");
            return exit::USAGE;
        }
    };
    let client = args.client.clone();
    query(&client, |c| async move {
        let Some(name) = name else {
            return observe_many(c, args, json).await;
        };
        let mut s = c.observe(&name);
        while let Some(item) = s.next().await {
            match item {
                Ok(Some(l)) if json => println!("{}", json!({ "leader": leader_json(&l) })),
                Ok(Some(l)) => println!("leader {}", show(&l)),
                Ok(None) if json => println!("{}", json!({ "leader": null })),
                Ok(None) => println!("vacant"),
                Err(e) => return failed(&e),
            }
        }
        exit::OK
    })
    .await
}

/// Text: `NAME leader CANDIDATE (fencing token N) VALUE` or `NAME vacant`, and one
/// `-- snapshot complete` line; JSON: `{"election", "leader"}` or `{"snapshot_complete": true}`.
async fn observe_many(c: Client, args: ObserveArgs, json: bool) -> u8 {
    let names: Vec<&str> = args.names.iter().map(String::as_str).collect();
    let mut s = c.observe_many(args.prefix.as_deref().unwrap_or(""), &names);
    while let Some(item) = s.next().await {
        match item {
            Ok(ManyEvent::State { election, leader }) if json => println!(
                "{}",
                json!({ "election": election, "leader": leader.as_ref().map(leader_json) })
            ),
            Ok(ManyEvent::State {
                election,
                leader: Some(l),
            }) => println!("{election} leader {}", show(&l)),
            Ok(ManyEvent::State {
                election,
                leader: None,
            }) => println!("{election} vacant"),
            Ok(ManyEvent::SnapshotComplete) if json => {
                println!("{}", json!({ "snapshot_complete": true }))
            }
            Ok(ManyEvent::SnapshotComplete) => println!("-- snapshot complete"),
            Err(e) => return failed(&e),
        }
    }
    exit::OK
}

/// `zkgate candidates NAME`: the queue in order, all pages.
pub async fn candidates(args: NameArgs) -> u8 {
    let json = args.client.output == Output::Json;
    query(&args.client, |c| async move {
        match c.candidates(&args.name).await {
            Ok(list) if json => {
                let list: Vec<Value> = list.iter().map(candidate_json).collect();
                println!("{}", json!({ "candidates": list }));
            }
            Ok(list) => {
                for c in list {
                    println!(
                        "{:>4}  {}  fencing token {}{}  {}",
                        c.position,
                        c.candidate,
                        c.fencing_token,
                        if c.leader { "  leader" } else { "" },
                        String::from_utf8_lossy(&c.value)
                    );
                }
            }
            Err(e) => return failed(&e),
        }
        exit::OK
    })
    .await
}

/// `zkgate holders NAME`: the lock's holders (all pages) and how many wait.
pub async fn holders(args: NameArgs) -> u8 {
    let json = args.client.output == Output::Json;
    query(&args.client, |c| async move {
        match c.holders(&args.name).await {
            Ok(h) if json => {
                let list: Vec<Value> = h.holders.iter().map(holder_json).collect();
                println!("{}", json!({ "holders": list, "waiting": h.waiting }));
            }
            Ok(h) => {
                for x in &h.holders {
                    println!(
                        "{}  fencing token {}  {}  since {}",
                        x.owner,
                        x.fencing_token,
                        mode_name(x.mode),
                        x.since
                            .as_ref()
                            .map(ToString::to_string)
                            .unwrap_or_default()
                    );
                }
                println!("waiting {}", h.waiting);
            }
            Err(e) => return failed(&e),
        }
        exit::OK
    })
    .await
}

/// The lease argument; `-` reads it from standard input.
fn lease_arg(lease: &str) -> Result<String, String> {
    if lease != "-" {
        return Ok(lease.to_owned());
    }
    let mut s = String::new();
    std::io::stdin()
        .read_line(&mut s)
        .map_err(|e| format!("reading the lease from standard input: {e}"))?;
    Ok(s.trim().to_owned())
}

/// `zkgate resign LEASE` / `zkgate release LEASE`.
pub async fn give_up_by_lease(args: LeaseArgs, lock: bool) -> u8 {
    let json = args.client.output == Output::Json;
    let lease = match lease_arg(&args.lease) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("zkgate: {e}");
            return exit::FAILURE;
        }
    };
    query(&args.client, |c| async move {
        let (r, done) = if lock {
            (c.release(&lease).await, "released")
        } else {
            (c.resign(&lease).await, "resigned")
        };
        match r {
            Ok(()) if json => println!("{}", json!({ done: true })),
            Ok(()) => println!("{done}"),
            Err(e) => return failed(&e),
        }
        exit::OK
    })
    .await
}

/// `zkgate validate [--lock] NAME TOKEN`: exit 0 when current, 5 when not.
pub async fn validate(args: ValidateArgs) -> u8 {
    let json = args.client.output == Output::Json;
    query(&args.client, |c| async move {
        let (current, leader) = if args.lock {
            match c.validate_lock(&args.name, args.token).await {
                Ok(current) => (current, None),
                Err(e) => return failed(&e),
            }
        } else {
            match c.validate(&args.name, args.token).await {
                Ok(v) => (v.current, v.leader),
                Err(e) => return failed(&e),
            }
        };
        if json {
            let mut v = json!({ "current": current });
            if !args.lock {
                v["leader"] = leader.as_ref().map_or(Value::Null, leader_json);
            }
            println!("{v}");
        } else if current {
            println!("current");
        } else {
            match &leader {
                Some(l) => println!("not current (leader {})", show(l)),
                None => println!("not current"),
            }
        }
        if current {
            exit::OK
        } else {
            exit::NOT_CURRENT
        }
    })
    .await
}

/// `hostname-pid`, the default candidate or owner name.
fn default_participant() -> String {
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_else(|_| "host".into());
    format!("{}-{}", host.trim(), std::process::id())
}

/// A Campaign or an Acquire, as the verbs drive them.
enum Hold {
    Leadership(Leadership),
    Lock(LockHold),
}

impl Hold {
    async fn next_event(&mut self) -> Option<HoldEvent> {
        match self {
            Hold::Leadership(l) => l.next_event().await,
            Hold::Lock(l) => l.next_event().await,
        }
    }

    fn endpoint(&self) -> Endpoint {
        match self {
            Hold::Leadership(l) => l.endpoint().clone(),
            Hold::Lock(l) => l.endpoint().clone(),
        }
    }

    fn lease(&self) -> &str {
        match self {
            Hold::Leadership(l) => l.lease(),
            Hold::Lock(l) => l.lease(),
        }
    }

    fn heard_until(&self) -> Option<tokio::time::Instant> {
        match self {
            Hold::Leadership(l) => l.heard_until(),
            Hold::Lock(l) => l.heard_until(),
        }
    }

    fn end_status(&self) -> Option<tonic::Status> {
        match self {
            Hold::Leadership(l) => l.end_status(),
            Hold::Lock(l) => l.end_status(),
        }
    }

    /// Resigns / releases in-stream and waits (briefly) for the gateway to end the stream;
    /// dropping cancels it in any case.
    async fn give_up(self) {
        match self {
            Hold::Leadership(l) => l.resign().await,
            Hold::Lock(l) => l.release().await,
        }
    }
}

/// What a verb campaigns or queues for.
enum Target {
    Election {
        name: String,
        candidate: String,
        value: Vec<u8>,
    },
    Lock(LockOptions),
}

impl Target {
    async fn open(&self, client: &Client, hold: HoldOptions) -> Result<Hold, Error> {
        match self {
            Target::Election {
                name,
                candidate,
                value,
            } => client
                .campaign_with(name, candidate, value, hold)
                .await
                .map(Hold::Leadership),
            Target::Lock(opts) => {
                let mut opts = opts.clone();
                opts.hold = hold;
                client.queue_lock(opts).await.map(Hold::Lock)
            }
        }
    }
}

/// SIGINT, SIGTERM, SIGHUP and SIGTSTP to the verb, registered once so that none is missed
/// between two waits. All four mean "stop CMD, give the hold up, exit": SIGHUP is a closed
/// terminal or SSH session, and a verb stopped by Ctrl-Z could not watch its hold (its keeper
/// would kill CMD when the hold's validity runs out, but the hold would stay with nobody
/// working).
struct Interrupts {
    int: tokio::sync::mpsc::UnboundedReceiver<i32>,
    /// A signal taken while CMD was being stopped for another cause (a loss): it still means
    /// "exit", so the verb exits once CMD is gone instead of campaigning again. (It used to
    /// only kill CMD at once, and the verb queued again and ran CMD again: a soak saw a verb
    /// told to stop take the lock once more.)
    taken: Option<i32>,
}

impl Interrupts {
    fn new() -> Self {
        use rustix::process::Signal;
        use tokio::signal::unix::{signal, SignalKind};
        let (tx, int) = tokio::sync::mpsc::unbounded_channel();
        for signo in [Signal::INT, Signal::TERM, Signal::HUP, Signal::TSTP].map(Signal::as_raw) {
            let kind = SignalKind::from_raw(signo);
            let mut s = signal(kind).expect("signal handler");
            let tx = tx.clone();
            tokio::spawn(async move {
                while s.recv().await.is_some() {
                    // Said where the signal is received, whatever the verb is doing: a soak
                    // saw a queued verb not act on SIGTERM for 20 s, and this line tells a
                    // signal never received from one received and not acted on.
                    eprintln!("zkgate: received signal {signo}");
                    if tx.send(signo).is_err() {
                        break;
                    }
                }
            });
        }
        Self { int, taken: None }
    }

    /// The next signal's number.
    ///
    /// # Cancellation safety
    /// Cancel safe: a signal not yet received stays queued.
    async fn recv(&mut self) -> i32 {
        match self.int.recv().await {
            Some(signo) => signo,
            None => std::future::pending().await,
        }
    }
}

/// How a verb runs CMD against its holds, and how it prints.
struct Supervision {
    /// "leadership" or "the lock", for messages.
    what: &'static str,
    /// Empty: no CMD (print the events and hold until a signal).
    command: Vec<String>,
    kill_grace: Duration,
    requeue: bool,
    /// Text mode: `elect` prints its event lines on stdout (scripts read them), `lock` on
    /// stderr.
    lines_on_stdout: bool,
    json: bool,
    /// `elected` or `acquired`, in JSON.
    granted_event: &'static str,
    /// The election or lock name, for messages.
    name: String,
}

impl Supervision {
    /// A text line (nothing in JSON mode, where only the agent's events are printed).
    fn say(&self, line: &str) {
        if self.json {
            eprintln!("zkgate: {line}");
        } else if self.lines_on_stdout {
            println!("{line}");
        } else {
            eprintln!("{line}");
        }
    }

    /// `suspended`, by its cause: what the holder will see next.
    fn suspended(&self, cause: SuspendCause) {
        self.say(&format!("suspended: {}", suspended_because(cause)));
    }

    fn event(&self, v: Value) {
        println!("{v}");
    }

    fn granted(&self, line: &str, token: u64, endpoint: &Endpoint) {
        if self.json {
            self.event(json!({
                "event": self.granted_event,
                "token": token.to_string(),
                "endpoint": endpoint.as_str(),
            }));
        } else {
            self.say(line);
        }
    }

    /// A round ended. Only a granted hold can be *lost* (the `lost` event of
    /// `clients/CONFORMANCE.md`); a waiter whose stream ends just queues again.
    fn lost(&self, reason: LossReason, granted: bool) {
        if !granted {
            eprintln!(
                "zkgate: the stream ended before {} was granted ({})",
                self.what,
                reason.as_str()
            );
            return;
        }
        if self.json {
            self.event(json!({ "event": "lost", "reason": reason.as_str() }));
        }
        let why = match reason {
            LossReason::Suspended => {
                "the gateway suspended the hold (it lost ZooKeeper, is draining, or revoked it)"
            }
            LossReason::Silence => "no message from the gateway within silence_limit",
            LossReason::Unavailable => "the gateway or the connection failed (unavailable)",
            LossReason::Ended => "the gateway ended the stream",
        };
        eprintln!("zkgate: {why}: giving up {}", self.what);
    }

    fn released(&self) {
        if self.json {
            self.event(json!({ "event": "released" }));
        } else {
            eprintln!("zkgate: released {}", self.what);
        }
    }

    /// An error that ends the verb (exit 1).
    fn error(&self, message: &str) -> u8 {
        if self.json {
            self.event(json!({ "event": "error", "message": message }));
        }
        eprintln!("zkgate: {message}");
        exit::FAILURE
    }

    /// The exit code when a signal stops the verb while CMD is not running.
    fn interrupted_code(&self, signo: i32) -> u8 {
        if self.command.is_empty() {
            exit::OK
        } else {
            u8::try_from(128 + signo).unwrap_or(1)
        }
    }
}

/// How one round (one stream) ended.
enum Round {
    /// The verb is done: exit with this code.
    Exit(u8),
    /// The hold was lost or became uncertain (CMD is stopped, the hold given up): campaign again
    /// if asked to, else exit [`exit::LOST`].
    Lost {
        reason: LossReason,
        endpoint: Endpoint,
    },
}

/// Runs rounds until one ends the verb; returns the verb's exit code.
async fn supervise(sup: Supervision, client: Client, target: Target) -> u8 {
    let mut interrupts = Interrupts::new();
    let mut backoff = Backoff::default();
    // With CMD the stream (and the znode) outlives a loss until CMD is stopped, so nobody else
    // can take over while CMD still runs on our behalf.
    let hold_options = HoldOptions {
        keep_after_loss: !sup.command.is_empty(),
    };
    loop {
        let opened = tokio::select! {
            biased;
            signo = interrupts.recv() => {
                sup.released();
                return sup.interrupted_code(signo);
            }
            opened = target.open(&client, hold_options) => opened,
        };
        match opened {
            Ok(hold) => {
                backoff.reset();
                match hold_round(hold, &sup, &mut interrupts).await {
                    Round::Exit(code) => return code,
                    Round::Lost { reason, endpoint } => {
                        if !sup.requeue {
                            return exit::LOST;
                        }
                        if reason.moves_endpoint() {
                            client.fail_over_from(&endpoint);
                        }
                    }
                }
            }
            Err(e) if e.is_permanent() || !sup.requeue => return sup.error(&e.to_string()),
            // Opening already tried every endpoint once.
            Err(e) => eprintln!("zkgate: {e}"),
        }
        let delay = backoff.next_delay();
        eprintln!(
            "zkgate: campaigning again in {delay:?} on {}",
            client.current_endpoint()
        );
        tokio::select! {
            biased;
            signo = interrupts.recv() => {
                sup.released();
                return sup.interrupted_code(signo);
            }
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// How often the verb renews CMD's deadline with its keeper while the hold is valid.
const RENEW_EVERY: Duration = Duration::from_millis(100);

/// CMD's deadline without a `silence_limit` from the gateway (none to derive one from): the
/// verb's renewals keep CMD going, a frozen verb stops it after this long.
const NO_WATCHDOG_LEASE: Duration = Duration::from_secs(1);

/// Until when CMD may run unless renewed: when the hold's silence watchdog would fire.
fn keeper_deadline(hold: &Hold) -> tokio::time::Instant {
    hold.heard_until()
        .unwrap_or_else(|| tokio::time::Instant::now() + NO_WATCHDOG_LEASE)
}

/// A `suspended` heard on this stream: when, and its `stop_within`.
type SuspendedAt = Option<(tokio::time::Instant, Option<Duration>)>;

/// What is left of the hold's validity now ([`stop_grace`]'s input).
fn hold_left(hold: &Hold, suspended: SuspendedAt) -> HoldLeft {
    let now = tokio::time::Instant::now();
    HoldLeft {
        heard: hold.heard_until().map(|t| t.saturating_duration_since(now)),
        stop_within: suspended
            .and_then(|(at, d)| d.map(|d| (at + d).saturating_duration_since(now))),
    }
}

/// Stops CMD for `cause` and returns CMD's exit code once its group and every descendant are
/// gone. Meanwhile it keeps reading the stream: a loss or the stream's end cuts the grace
/// ([`stop_grace`]), and while the hold is still valid (`lost` false) CMD's deadline is
/// renewed. A second signal kills at once.
async fn stop_command(
    cmd: &mut HeldCommand,
    hold: &mut Hold,
    sup: &Supervision,
    interrupts: &mut Interrupts,
    cause: StopCause,
    mut suspended: SuspendedAt,
) -> u8 {
    let mut lost = matches!(cause, StopCause::Lost(_) | StopCause::StreamEnded);
    let grace = stop_grace(sup.kill_grace, cause, hold_left(hold, suspended));
    cmd.stop(grace).await;
    let mut stream_open = true;
    let mut renew = tokio::time::interval(RENEW_EVERY);
    let status = loop {
        tokio::select! {
            biased;
            status = cmd.gone() => break status,
            signo = interrupts.recv() => {
                interrupts.taken.get_or_insert(signo);
                cmd.stop(Duration::ZERO).await;
            }
            event = hold.next_event(), if stream_open => {
                let cause = match event {
                    None => {
                        stream_open = false;
                        Some(StopCause::StreamEnded)
                    }
                    Some(HoldEvent::Suspended { stop_within, .. }) => {
                        suspended = Some((tokio::time::Instant::now(), stop_within));
                        None
                    }
                    Some(HoldEvent::Lost(reason)) => {
                        if !lost {
                            sup.lost(reason, true);
                        }
                        Some(StopCause::Lost(reason))
                    }
                    Some(_) => None,
                };
                if let Some(cause) = cause {
                    lost = true;
                    // The keeper only ever brings the SIGKILL closer.
                    cmd.stop(stop_grace(sup.kill_grace, cause, hold_left(hold, suspended))).await;
                }
            }
            _ = renew.tick(), if !lost => cmd.renew(keeper_deadline(hold)).await,
        }
    };
    let code = exit_code(&status);
    if cmd.expired() {
        eprintln!("zkgate: the command's deadline passed (was the verb stopped?): killed");
    }
    if cause != StopCause::Exited {
        // (After CMD exited by itself, that line was printed already.)
        eprintln!("zkgate: command stopped (exit code {code}); all its processes are gone");
    }
    code
}

/// One stream: run CMD while the hold is granted; see [`ElectArgs`] for the rules. The client
/// decides loss (suspended while holding, the stream's end, silence past `silence_limit`).
async fn hold_round(mut hold: Hold, sup: &Supervision, interrupts: &mut Interrupts) -> Round {
    let mut cmd: Option<HeldCommand> = None;
    let mut granted = false;
    let mut suspended: SuspendedAt = None;
    let mut renew = tokio::time::interval(RENEW_EVERY);
    let endpoint = hold.endpoint();
    let reason = loop {
        tokio::select! {
            biased;
            signo = interrupts.recv() => {
                let code = match cmd.as_mut() {
                    Some(c) => {
                        stop_command(c, &mut hold, sup, interrupts, StopCause::Interrupted, suspended)
                            .await
                    }
                    None => sup.interrupted_code(signo),
                };
                hold.give_up().await;
                sup.released();
                return Round::Exit(code);
            }
            status = async { cmd.as_mut().expect("guarded").exited().await }, if cmd.is_some() => {
                if cmd.as_ref().is_some_and(HeldCommand::expired) {
                    // The keeper killed CMD at the watchdog's deadline (this verb was too slow
                    // to renew it): the hold is as good as lost by silence.
                    break LossReason::Silence;
                }
                let code = exit_code(&status);
                eprintln!(
                    "zkgate: command exited with code {code}; stopping what it left running, then giving up {}",
                    sup.what
                );
                let c = cmd.as_mut().expect("guarded");
                stop_command(c, &mut hold, sup, interrupts, StopCause::Exited, suspended).await;
                hold.give_up().await;
                return Round::Exit(code);
            }
            _ = renew.tick(), if cmd.is_some() => {
                let until = keeper_deadline(&hold);
                cmd.as_mut().expect("guarded").renew(until).await;
            }
            event = hold.next_event() => match event {
                // The client's task reports `Lost` before it stops; this is only a safety net.
                None => break LossReason::Ended,
                Some(HoldEvent::Lost(reason)) => break reason,
                Some(HoldEvent::Queued { position }) => {
                    sup.say(&format!("queued at position {position}"));
                }
                Some(HoldEvent::Granted(g)) => {
                    granted = true;
                    // A suspension heard while queued says nothing about this hold's time.
                    suspended = None;
                    let line = match &g.leader {
                        Some(l) => format!("elected: {}", show(l)),
                        None => format!(
                            "acquired lock {:?} (fencing token {})",
                            sup.name, g.fencing_token
                        ),
                    };
                    sup.granted(&line, g.fencing_token, &endpoint);
                    if !sup.command.is_empty() {
                        let env = [
                            (FENCING_TOKEN_ENV, g.fencing_token.to_string()),
                            (LEASE_ENV, hold.lease().to_owned()),
                        ];
                        match HeldCommand::spawn(&sup.command, &env, keeper_deadline(&hold)).await {
                            Ok(c) => cmd = Some(c),
                            Err(e) => {
                                eprintln!("zkgate: cannot run {:?}: {e}", sup.command);
                                hold.give_up().await;
                                return Round::Exit(spawn_error_code(&e));
                            }
                        }
                    }
                }
                Some(HoldEvent::Suspended { stop_within, cause }) => {
                    sup.suspended(cause);
                    suspended = Some((tokio::time::Instant::now(), stop_within));
                }
                Some(HoldEvent::Resumed) => sup.say("resumed"),
                Some(HoldEvent::Proclaimed(l)) => sup.say(&format!("proclaimed: {}", show(&l))),
                Some(_) => {}
            }
        }
    };
    // Refusals that arrive after `queued` (a permits mismatch) or a wait timeout are not losses.
    if !granted {
        if let Some(status) = hold.end_status() {
            if status.code() == tonic::Code::DeadlineExceeded {
                if sup.json {
                    sup.event(json!({ "event": "timeout" }));
                }
                eprintln!("zkgate: {} was not granted within --timeout", sup.what);
                return Round::Exit(exit::NOT_ACQUIRED);
            }
            let e = Error::Status(status);
            if e.is_permanent() {
                return Round::Exit(sup.error(&e.to_string()));
            }
        }
    }
    sup.lost(reason, granted);
    // CMD first, all of it: nobody else may take over while any of it still runs on our behalf.
    if let Some(c) = cmd.as_mut() {
        let code = stop_command(
            c,
            &mut hold,
            sup,
            interrupts,
            StopCause::Lost(reason),
            suspended,
        )
        .await;
        if let Some(signo) = interrupts.taken.take() {
            hold.give_up().await;
            eprintln!("zkgate: signal {signo} during the stop: exiting instead of queueing again");
            return Round::Exit(code);
        }
    }
    hold.give_up().await;
    Round::Lost { reason, endpoint }
}

/// `zkgate elect NAME [-- CMD…]`: campaign and print the events; with CMD, run it exactly
/// while leader (see [`ElectArgs`]). Returns the exit code.
pub async fn elect(args: ElectArgs) -> u8 {
    let json = args.client.output == Output::Json;
    let sup = Supervision {
        what: "leadership",
        requeue: args.command_args.requeue_or(true),
        kill_grace: args.command_args.kill_grace,
        command: args.command,
        lines_on_stdout: true,
        json,
        granted_event: "elected",
        name: args.name.clone(),
    };
    let client = match connect(&args.client).await {
        Ok(c) => c,
        Err(e) => return sup.error(&e),
    };
    let target = Target::Election {
        name: args.name,
        candidate: args.candidate.unwrap_or_else(default_participant),
        value: args.value.into_bytes(),
    };
    supervise(sup, client, target).await
}

/// `zkgate lock NAME [-- CMD…]` (in the style of `consul lock`): hold the lock; with CMD,
/// run it exactly while holding (see [`LockArgs`]). Returns the exit code.
pub async fn lock(args: LockArgs) -> u8 {
    let json = args.client.output == Output::Json;
    let sup = Supervision {
        what: "the lock",
        requeue: args.command_args.requeue_or(false),
        kill_grace: args.command_args.kill_grace,
        command: args.command,
        lines_on_stdout: false,
        json,
        granted_event: "acquired",
        name: args.name.clone(),
    };
    let client = match connect(&args.client).await {
        Ok(c) => c,
        Err(e) => return sup.error(&e),
    };
    let mut opts = LockOptions::new(args.name.clone());
    opts.owner = args.owner.unwrap_or_else(default_participant);
    opts.permits = args.permits;
    opts.mode = if args.read {
        LockMode::Read
    } else {
        LockMode::Write
    };
    opts.wait_timeout = args.timeout;
    opts.ttl = args.ttl;
    supervise(sup, client, Target::Lock(opts)).await
}
