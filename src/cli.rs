//! The command-line verbs besides `serve`: `dev` and the client verbs in the style of
//! `etcdctl elect` / `consul lock`, using the generated gRPC client.

use std::process::ExitCode;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_stream::StreamExt;

use crate::config::{DevArgs, ElectArgs, LockArgs, NameArgs};
use crate::coord::CoordConfig;
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
/// process. Ctrl-C stops both and leaves nothing running.
pub async fn dev(args: DevArgs) -> ExitCode {
    if !LocalZk::is_installed() {
        eprintln!(
            "zkgate dev needs Apache ZooKeeper and Java. {}",
            LocalZk::install_hint()
        );
        return ExitCode::from(2);
    }
    let opts = LocalZkOptions {
        tick_time: Duration::from_millis(500),
        ..Default::default()
    };
    let zk = match LocalZk::start_standalone(opts).await {
        Ok(zk) => zk,
        Err(e) => {
            eprintln!("could not start ZooKeeper: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (listener, http) = match (
        TcpListener::bind(args.listen).await,
        TcpListener::bind(args.http).await,
    ) {
        (Ok(l), Ok(h)) => (l, h),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("cannot listen on {} / {}: {e}", args.listen, args.http);
            zk.shutdown().await;
            return ExitCode::FAILURE;
        }
    };
    let mut coord = CoordConfig::new(zk.connect_string());
    coord.session_timeout = args.session_timeout;
    let cfg = ServeConfig::new(coord);
    println!("ZooKeeper  {}", zk.connect_string());
    println!(
        "gRPC       {}   (grpcurl -plaintext {} list)",
        args.listen, args.listen
    );
    println!("HTTP       http://{}/metrics  /healthz  /readyz", args.http);
    println!("Ctrl-C stops both.");
    let result = server::run(cfg, listener, Some(http), shutdown_signal()).await;
    zk.shutdown().await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
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

/// `zkgate lock NAME -- CMD…`.
pub async fn lock(args: LockArgs) -> Result<(), String> {
    let _ = args;
    Err("zkgate lock needs the Lock service, which this version does not implement yet".into())
}
