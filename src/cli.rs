//! The command-line verbs besides `serve`: `dev` and the client verbs in the style of
//! `etcdctl elect` / `consul lock`, using the generated gRPC client.

use std::process::ExitCode;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_stream::StreamExt;

use crate::config::{DevArgs, ElectArgs, LockArgs, NameArgs};
use crate::coord::{CoordConfig, Coordinator};
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

/// `zkgate elect NAME [-- CMD…]`: campaign; print when elected; run CMD while leader and kill
/// it if leadership is suspended or lost (or after silence_limit without any message).
pub async fn elect(args: ElectArgs) -> Result<(), String> {
    let mut c = election_client(&args.endpoint.endpoint).await?;
    let candidate = args.candidate.unwrap_or_else(|| {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_else(|_| "host".into());
        format!("{}-{}", host.trim(), std::process::id())
    });
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(pb::CampaignRequest {
        request: Some(pb::campaign_request::Request::Join(pb::Join {
            election: args.name.clone(),
            candidate,
            value: args.value.into_bytes(),
        })),
    })
    .await
    .map_err(|e| e.to_string())?;
    let mut s = c
        .campaign(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .map_err(|s| s.message().to_owned())?
        .into_inner();
    let mut child: Option<tokio::process::Child> = None;
    let mut silence = Duration::from_secs(3600);
    let result = loop {
        let next = tokio::select! {
            m = tokio::time::timeout(silence, s.next()) => m,
            status = async { child.as_mut().expect("guarded").wait().await }, if child.is_some() => {
                // The command ended: resign (dropping the stream deletes the candidacy).
                break status.map(|_| ()).map_err(|e| e.to_string());
            }
            _ = shutdown_signal() => break Ok(()),
        };
        let Ok(next) = next else {
            eprintln!(
                "no message from the gateway within the silence limit: assuming leadership lost"
            );
            break Err("silence limit passed".into());
        };
        match next {
            None => break Ok(()),
            Some(Err(status)) => break Err(format!("{:?}: {}", status.code(), status.message())),
            Some(Ok(pb::CampaignResponse { event: Some(ev) })) => match ev {
                Event::Queued(q) => println!("queued at position {}", q.position),
                Event::Elected(e) => {
                    if let Some(d) = e.silence_limit.and_then(|d| Duration::try_from(d).ok()) {
                        silence = d;
                    }
                    if let Some(l) = &e.leader {
                        println!("elected: {}", show(l));
                    }
                    if !args.command.is_empty() {
                        child = Some(
                            tokio::process::Command::new(&args.command[0])
                                .args(&args.command[1..])
                                .kill_on_drop(true)
                                .spawn()
                                .map_err(|e| format!("cannot run {:?}: {e}", args.command))?,
                        );
                    }
                }
                Event::Suspended(_) => {
                    eprintln!(
                        "suspended: ZooKeeper link lost at the gateway; stopping leader work"
                    );
                    if let Some(mut c) = child.take() {
                        let _ = c.kill().await;
                    }
                }
                Event::Resumed(_) => println!("resumed"),
                Event::Proclaimed(p) => {
                    if let Some(l) = p.leader {
                        println!("proclaimed: {}", show(&l));
                    }
                }
                Event::Heartbeat(_) => {}
            },
            Some(Ok(_)) => {}
        }
    };
    if let Some(mut c) = child.take() {
        let _ = c.kill().await;
    }
    result
}

/// `zkgate lock NAME -- CMD…` (in the style of `consul lock`): wait for the lock, run CMD while
/// holding it (with `ZKGATE_FENCING_TOKEN` in its environment), release it when CMD exits and
/// exit like CMD did. If the hold becomes uncertain — `suspended`, the stream ends, or nothing
/// at all is heard for `silence_limit` — CMD is killed at once and the verb fails.
pub async fn lock(args: LockArgs) -> Result<(), String> {
    use crate::proto::acquire_request::Request as Req;
    use crate::proto::acquire_response::Event as LockEvent;
    let endpoint = &args.endpoint.endpoint;
    let mut c = crate::proto::lock_client::LockClient::connect(endpoint.clone())
        .await
        .map_err(|e| format!("cannot reach the gateway at {endpoint}: {e}"))?;
    let owner = {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_else(|_| "host".into());
        format!("{}-{}", host.trim(), std::process::id())
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(pb::AcquireRequest {
        request: Some(Req::Acquire(pb::AcquireLock {
            name: args.name.clone(),
            owner,
            ..Default::default()
        })),
    })
    .await
    .map_err(|e| e.to_string())?;
    let mut s = c
        .acquire(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .map_err(|s| s.message().to_owned())?
        .into_inner();
    let mut child: Option<tokio::process::Child> = None;
    // No heartbeats while waiting: the silence watchdog starts with `acquired`.
    let mut silence = Duration::MAX;
    let outcome = loop {
        let next = tokio::select! {
            m = tokio::time::timeout(silence, s.next()) => m,
            status = async { child.as_mut().expect("guarded").wait().await }, if child.is_some() => {
                child = None;
                break status.map_err(|e| e.to_string());
            }
            _ = shutdown_signal() => break Err("interrupted".into()),
        };
        let Ok(next) = next else {
            break Err("no message from the gateway within the silence limit: the lock may be lost; command stopped".into());
        };
        match next {
            None => break Err("the gateway ended the lock stream; command stopped".into()),
            Some(Err(status)) => break Err(format!("{:?}: {}", status.code(), status.message())),
            Some(Ok(pb::AcquireResponse { event: Some(ev) })) => match ev {
                LockEvent::Queued(q) => {
                    eprintln!("queued for lock {:?} at position {}", args.name, q.position)
                }
                LockEvent::Acquired(a) => {
                    if let Some(d) = a.silence_limit.and_then(|d| Duration::try_from(d).ok()) {
                        silence = d;
                    }
                    eprintln!(
                        "acquired lock {:?} (fencing token {})",
                        args.name, a.fencing_token
                    );
                    child = Some(
                        tokio::process::Command::new(&args.command[0])
                            .args(&args.command[1..])
                            .env("ZKGATE_FENCING_TOKEN", a.fencing_token.to_string())
                            .kill_on_drop(true)
                            .spawn()
                            .map_err(|e| format!("cannot run {:?}: {e}", args.command))?,
                    );
                }
                LockEvent::Suspended(_) => {
                    break Err("suspended: the gateway lost ZooKeeper, the lock is uncertain; command stopped".into());
                }
                LockEvent::Resumed(_) | LockEvent::Heartbeat(_) => {}
            },
            Some(Ok(_)) => {}
        }
    };
    if let Some(mut c) = child.take() {
        let _ = c.kill().await;
    }
    // Release in-stream and wait (briefly) for the gateway to confirm; dropping the stream
    // would release too, only without the confirmation.
    if tx
        .send(pb::AcquireRequest {
            request: Some(Req::Release(pb::ReleaseLock {})),
        })
        .await
        .is_ok()
    {
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(Ok(_)) = s.next().await {}
        })
        .await;
    }
    match outcome? {
        status if status.success() => Ok(()),
        status => Err(format!("{:?} exited with {status}", args.command)),
    }
}
