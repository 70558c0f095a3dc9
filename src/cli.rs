//! The command-line verbs besides `serve`: `dev` and the client verbs in the style of
//! `etcdctl elect` / `consul lock`, using the generated gRPC client. `elect -- CMD` and
//! `lock -- CMD` run CMD exactly while the hold lasts ([`crate::held_command`]).

use std::pin::Pin;
use std::process::ExitCode;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_stream::{Stream, StreamExt};

use crate::config::{DevArgs, ElectArgs, LockArgs, NameArgs};
use crate::coord::{CoordConfig, Coordinator};
use crate::held_command::{exit_code, spawn_error_code, HeldCommand};
use crate::localzk::{LocalZk, LocalZkOptions};
use crate::proto as pb;
use crate::proto::campaign_response::Event;
use crate::proto::election_client::ElectionClient;
use crate::server::{self, ServeConfig};

/// Resolves on Ctrl-C or SIGTERM.
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
/// a second Ctrl-C exits at once (the JVM still dies with us: see [`crate::localzk`]).
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
        return ExitCode::from(2);
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

async fn election_client(
    endpoint: &str,
) -> Result<ElectionClient<tonic::transport::Channel>, String> {
    ElectionClient::connect(endpoint.to_owned())
        .await
        .map_err(|e| format!("cannot reach the gateway at {endpoint}: {e}"))
}

fn show(l: &pb::Leader) -> String {
    format!(
        "{} (fencing token {}) {}",
        l.candidate,
        l.fencing_token,
        String::from_utf8_lossy(&l.value)
    )
}

/// `zkgate leader NAME`.
pub async fn leader(args: NameArgs) -> Result<(), String> {
    let mut c = election_client(&args.endpoint.endpoint).await?;
    let r = c
        .leader(pb::LeaderRequest {
            election: args.name,
        })
        .await
        .map_err(|s| s.message().to_owned())?;
    if let Some(l) = r.into_inner().leader {
        println!("{}", show(&l));
    }
    Ok(())
}

/// `zkgate observe NAME`: one line per change.
pub async fn observe(args: NameArgs) -> Result<(), String> {
    let mut c = election_client(&args.endpoint.endpoint).await?;
    let mut s = c
        .observe(pb::ObserveRequest {
            election: args.name,
        })
        .await
        .map_err(|s| s.message().to_owned())?
        .into_inner();
    while let Some(msg) = s.next().await {
        match msg.map_err(|s| s.message().to_owned())?.leader {
            Some(l) => println!("leader {}", show(&l)),
            None => println!("vacant"),
        }
    }
    Ok(())
}

/// How long a verb waits for the gateway to confirm a resign/release before it just cancels the
/// stream (which releases the znode too, only without a confirmation).
const GIVE_UP_CONFIRMATION: Duration = Duration::from_secs(1);
/// Retry delays for campaigning again after a failed or lost round (reset by `queued`).
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// `hostname-pid`, the default candidate or owner name.
fn default_participant() -> String {
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_else(|_| "host".into());
    format!("{}-{}", host.trim(), std::process::id())
}

/// What a Campaign or Acquire stream tells the verbs, with the proto differences gone.
#[derive(Debug)]
enum HoldEvent {
    Queued {
        position: u32,
    },
    /// `elected` / `acquired`.
    Granted {
        fencing_token: u64,
        silence_limit: Option<Duration>,
        line: String,
    },
    Suspended {
        stop_within: Option<Duration>,
    },
    Resumed,
    /// Worth a line, changes nothing (a proclaimed value).
    Note(String),
    Heartbeat,
}

type HoldEvents = Pin<Box<dyn Stream<Item = Result<HoldEvent, tonic::Status>> + Send>>;

/// One open Campaign or Acquire stream.
struct Hold {
    events: HoldEvents,
    /// Sends `resign{}` / `release{}` on the stream (it also keeps the request side open).
    send_give_up: Box<dyn FnOnce() + Send>,
}

impl Hold {
    /// Gives the hold up in-stream and waits (briefly) for the gateway to end the stream.
    /// Dropping the stream afterwards cancels it, which releases the znode in any case.
    async fn give_up(self) {
        let Hold {
            mut events,
            send_give_up,
        } = self;
        send_give_up();
        let _ = tokio::time::timeout(GIVE_UP_CONFIRMATION, async {
            while let Some(Ok(_)) = events.next().await {}
        })
        .await;
    }
}

/// Why opening a stream failed.
enum OpenError {
    Unreachable(String),
    Refused(tonic::Status),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Unreachable(e) => f.write_str(e),
            OpenError::Refused(s) => write!(f, "{:?}: {}", s.code(), s.message()),
        }
    }
}

/// Refusals that campaigning again cannot fix (bad name or candidate, permits mismatch, …).
fn is_permanent(code: tonic::Code) -> bool {
    use tonic::Code::*;
    matches!(
        code,
        InvalidArgument | FailedPrecondition | PermissionDenied | Unauthenticated | Unimplemented
    )
}

async fn open_campaign(endpoint: String, join: pb::Join) -> Result<Hold, OpenError> {
    use pb::campaign_request::Request;
    let mut c = election_client(&endpoint)
        .await
        .map_err(OpenError::Unreachable)?;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let join = pb::CampaignRequest {
        request: Some(Request::Join(join)),
    };
    tx.try_send(join).expect("an empty channel");
    let stream = c
        .campaign(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .map_err(OpenError::Refused)?
        .into_inner();
    let events = stream.filter_map(|m| match m {
        Err(status) => Some(Err(status)),
        Ok(pb::CampaignResponse { event: None }) => None,
        Ok(pb::CampaignResponse { event: Some(ev) }) => Some(Ok(match ev {
            Event::Queued(q) => HoldEvent::Queued {
                position: q.position,
            },
            Event::Elected(e) => {
                let leader = e.leader.unwrap_or_default();
                HoldEvent::Granted {
                    fencing_token: leader.fencing_token,
                    silence_limit: e.silence_limit.and_then(|d| Duration::try_from(d).ok()),
                    line: format!("elected: {}", show(&leader)),
                }
            }
            Event::Suspended(s) => HoldEvent::Suspended {
                stop_within: s.stop_within.and_then(|d| Duration::try_from(d).ok()),
            },
            Event::Resumed(_) => HoldEvent::Resumed,
            Event::Proclaimed(p) => HoldEvent::Note(format!(
                "proclaimed: {}",
                p.leader.as_ref().map(show).unwrap_or_default()
            )),
            Event::Heartbeat(_) => HoldEvent::Heartbeat,
        })),
    });
    let send_give_up = Box::new(move || {
        let _ = tx.try_send(pb::CampaignRequest {
            request: Some(Request::Resign(pb::ResignCandidacy {})),
        });
    });
    Ok(Hold {
        events: Box::pin(events),
        send_give_up,
    })
}

async fn open_lock(endpoint: String, acquire: pb::AcquireLock) -> Result<Hold, OpenError> {
    use crate::proto::acquire_request::Request;
    use crate::proto::acquire_response::Event as LockEvent;
    let mut c = crate::proto::lock_client::LockClient::connect(endpoint.clone())
        .await
        .map_err(|e| {
            OpenError::Unreachable(format!("cannot reach the gateway at {endpoint}: {e}"))
        })?;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let name = acquire.name.clone();
    tx.try_send(pb::AcquireRequest {
        request: Some(Request::Acquire(acquire)),
    })
    .expect("an empty channel");
    let stream = c
        .acquire(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .map_err(OpenError::Refused)?
        .into_inner();
    let events = stream.filter_map(move |m| match m {
        Err(status) => Some(Err(status)),
        Ok(pb::AcquireResponse { event: None }) => None,
        Ok(pb::AcquireResponse { event: Some(ev) }) => Some(Ok(match ev {
            LockEvent::Queued(q) => HoldEvent::Queued {
                position: q.position,
            },
            LockEvent::Acquired(a) => HoldEvent::Granted {
                fencing_token: a.fencing_token,
                silence_limit: a.silence_limit.and_then(|d| Duration::try_from(d).ok()),
                line: format!("acquired lock {name:?} (fencing token {})", a.fencing_token),
            },
            LockEvent::Suspended(s) => HoldEvent::Suspended {
                stop_within: s.stop_within.and_then(|d| Duration::try_from(d).ok()),
            },
            LockEvent::Resumed(_) => HoldEvent::Resumed,
            LockEvent::Heartbeat(_) => HoldEvent::Heartbeat,
        })),
    });
    let send_give_up = Box::new(move || {
        let _ = tx.try_send(pb::AcquireRequest {
            request: Some(Request::Release(pb::ReleaseLock {})),
        });
    });
    Ok(Hold {
        events: Box::pin(events),
        send_give_up,
    })
}

/// SIGINT and SIGTERM to the verb, registered once so that none is missed between two waits.
struct Interrupts {
    int: tokio::sync::mpsc::UnboundedReceiver<i32>,
}

impl Interrupts {
    fn new() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        let (tx, int) = tokio::sync::mpsc::unbounded_channel();
        for (kind, signo) in [
            (SignalKind::interrupt(), libc::SIGINT),
            (SignalKind::terminate(), libc::SIGTERM),
        ] {
            let mut s = signal(kind).expect("signal handler");
            let tx = tx.clone();
            tokio::spawn(async move {
                while s.recv().await.is_some() {
                    if tx.send(signo).is_err() {
                        break;
                    }
                }
            });
        }
        Self { int }
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

/// How a verb runs CMD against its holds.
struct Supervision {
    /// "leadership" or "the lock", for messages.
    what: &'static str,
    /// Empty: `elect` without CMD (print the events only).
    command: Vec<String>,
    kill_grace: Duration,
    requeue: bool,
    /// `elect` prints its event lines on stdout (scripts read them), `lock` on stderr.
    lines_on_stdout: bool,
}

impl Supervision {
    fn say(&self, line: &str) {
        if self.lines_on_stdout {
            println!("{line}");
        } else {
            eprintln!("{line}");
        }
    }
}

/// How one round (one stream) ended.
enum Round {
    /// The verb is done: exit with this code.
    Exit(u8),
    /// The hold was lost or became uncertain (CMD is stopped, the hold given up): campaign again
    /// if asked to, else exit with `code`. `queued`: the gateway took the candidacy at all.
    Lost { code: u8, queued: bool },
}

/// Runs rounds of `open` until one ends the verb; returns the verb's exit code.
async fn supervise<F, Fut>(sup: Supervision, mut open: F) -> u8
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Hold, OpenError>>,
{
    let mut interrupts = Interrupts::new();
    let mut retry = RETRY_MIN;
    loop {
        let opened = tokio::select! {
            biased;
            signo = interrupts.recv() => return interrupted_code(&sup, signo),
            opened = open() => opened,
        };
        match opened {
            Ok(hold) => match hold_round(hold, &sup, &mut interrupts).await {
                Round::Exit(code) => return code,
                Round::Lost { code, queued } => {
                    if !sup.requeue {
                        return code;
                    }
                    if queued {
                        retry = RETRY_MIN;
                    }
                }
            },
            Err(OpenError::Refused(status)) if is_permanent(status.code()) => {
                eprintln!("zkgate: {:?}: {}", status.code(), status.message());
                return 1;
            }
            Err(e) => {
                eprintln!("zkgate: {e}");
                if !sup.requeue {
                    return 1;
                }
            }
        }
        eprintln!("zkgate: campaigning again in {retry:?}");
        tokio::select! {
            biased;
            signo = interrupts.recv() => return interrupted_code(&sup, signo),
            () = tokio::time::sleep(retry) => {}
        }
        retry = (retry * 2).min(RETRY_MAX);
    }
}

/// The exit code when a signal stops the verb while CMD is not running.
fn interrupted_code(sup: &Supervision, signo: i32) -> u8 {
    if sup.command.is_empty() {
        0
    } else {
        u8::try_from(128 + signo).unwrap_or(1)
    }
}

/// Stops CMD and reports how it ended.
async fn stop_command(cmd: HeldCommand, grace: Duration) -> u8 {
    match cmd.stop(grace).await {
        Ok(status) => {
            let code = exit_code(&status);
            eprintln!("zkgate: command stopped (exit code {code})");
            code
        }
        Err(e) => {
            eprintln!("zkgate: stopping the command: {e}");
            1
        }
    }
}

/// Sleeps until `at`, or forever when there is no deadline.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One stream: run CMD while the hold is granted; see [`ElectArgs`] for the rules.
async fn hold_round(mut hold: Hold, sup: &Supervision, interrupts: &mut Interrupts) -> Round {
    use tokio::time::Instant;
    let mut cmd: Option<HeldCommand> = None;
    let mut queued = false;
    // The silence watchdog runs only while the hold is granted: queued candidates and waiters
    // get no heartbeats, so they wait for as long as it takes.
    let mut watchdog: Option<(Duration, Instant)> = None;
    let mut grace = sup.kill_grace;
    let (why, code) = loop {
        let silence_deadline = watchdog.map(|(_, at)| at);
        tokio::select! {
            biased;
            signo = interrupts.recv() => {
                let code = match cmd.take() {
                    Some(c) => stop_command(c, grace).await,
                    None => interrupted_code(sup, signo),
                };
                hold.give_up().await;
                return Round::Exit(code);
            }
            status = async { cmd.as_mut().expect("guarded").wait().await }, if cmd.is_some() => {
                let code = status.map_or(1, |s| exit_code(&s));
                eprintln!("zkgate: command exited with code {code}; giving up {}", sup.what);
                hold.give_up().await;
                return Round::Exit(code);
            }
            () = sleep_until_some(silence_deadline), if silence_deadline.is_some() => {
                break ("no message from the gateway within silence_limit".to_owned(), 1);
            }
            next = hold.events.next() => match next {
                None => break ("the gateway ended the stream".to_owned(), 0),
                Some(Err(status)) if !queued && is_permanent(status.code()) => {
                    eprintln!("zkgate: {:?}: {}", status.code(), status.message());
                    return Round::Exit(1);
                }
                Some(Err(status)) => {
                    break (format!("the stream failed: {:?}: {}", status.code(), status.message()), 1);
                }
                Some(Ok(event)) => {
                    if let Some((limit, at)) = watchdog.as_mut() {
                        *at = Instant::now() + *limit;
                    }
                    match event {
                        HoldEvent::Queued { position } => {
                            queued = true;
                            sup.say(&format!("queued at position {position}"));
                        }
                        HoldEvent::Granted { fencing_token, silence_limit, line } => {
                            sup.say(&line);
                            watchdog = silence_limit.map(|l| (l, Instant::now() + l));
                            if !sup.command.is_empty() {
                                match HeldCommand::spawn(&sup.command, fencing_token) {
                                    Ok(c) => cmd = Some(c),
                                    Err(e) => {
                                        eprintln!("zkgate: cannot run {:?}: {e}", sup.command);
                                        hold.give_up().await;
                                        return Round::Exit(spawn_error_code(&e));
                                    }
                                }
                            }
                        }
                        HoldEvent::Suspended { stop_within } => {
                            sup.say("suspended: the gateway lost ZooKeeper");
                            if cmd.is_some() {
                                if let Some(d) = stop_within {
                                    grace = grace.min(d);
                                }
                                break (format!("{} is uncertain", sup.what), 1);
                            }
                        }
                        HoldEvent::Resumed => sup.say("resumed"),
                        HoldEvent::Note(line) => sup.say(&line),
                        HoldEvent::Heartbeat => {}
                    }
                }
            }
        }
    };
    eprintln!("zkgate: {why}: giving up {}", sup.what);
    // CMD first: nobody else may take over while it still runs on our behalf.
    let code = match cmd.take() {
        Some(c) => {
            stop_command(c, grace).await;
            1
        }
        None => code,
    };
    hold.give_up().await;
    Round::Lost { code, queued }
}

/// `zkgate elect NAME [-- CMD…]`: campaign and print the events. With CMD, run it exactly while
/// leader (see [`ElectArgs`]); returns the exit code.
pub async fn elect(args: ElectArgs) -> u8 {
    let join = pb::Join {
        election: args.name,
        candidate: args.candidate.unwrap_or_else(default_participant),
        value: args.value.into_bytes(),
    };
    let sup = Supervision {
        what: "leadership",
        requeue: args.command_args.requeue_or(!args.command.is_empty()),
        kill_grace: args.command_args.kill_grace,
        command: args.command,
        lines_on_stdout: true,
    };
    let endpoint = args.endpoint.endpoint;
    supervise(sup, move || open_campaign(endpoint.clone(), join.clone())).await
}

/// `zkgate lock NAME -- CMD…` (in the style of `consul lock`): run CMD exactly while holding the
/// lock (see [`LockArgs`]); returns the exit code.
pub async fn lock(args: LockArgs) -> u8 {
    let acquire = pb::AcquireLock {
        name: args.name,
        owner: args.owner.unwrap_or_else(default_participant),
        ..Default::default()
    };
    let sup = Supervision {
        what: "the lock",
        requeue: args.command_args.requeue_or(false),
        kill_grace: args.command_args.kill_grace,
        command: args.command,
        lines_on_stdout: false,
    };
    let endpoint = args.endpoint.endpoint;
    supervise(sup, move || open_lock(endpoint.clone(), acquire.clone())).await
}
