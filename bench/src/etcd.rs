//! A throwaway single-member etcd on loopback ports (Debian's `etcd-server`, default durability:
//! it fsyncs its write-ahead log before acknowledging a write), and the client side of etcd's
//! sessions.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::pb::etcdserverpb::lease_client::LeaseClient;
use crate::pb::etcdserverpb::{LeaseGrantRequest, LeaseKeepAliveRequest, LeaseRevokeRequest};

/// One etcd member with a fresh data directory, started through a `sh` wrapper that kills it
/// when its stdin (our end of a pipe) closes, so it dies with this process even on a panic.
pub struct Etcd {
    wrapper: Child,
    lifeline: Option<ChildStdin>,
    url: String,
    version: String,
    /// Holds the data directory (deleted on drop).
    _dir: tempfile::TempDir,
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

impl Etcd {
    /// Starts `bin` (etcd 3.4's server) and waits until it grants a lease, which needs an
    /// elected raft leader and a working, fsynced write-ahead log. Tries fresh ports up to three
    /// times (a port picked free can be taken before etcd binds it).
    pub async fn start(bin: &Path) -> Result<Etcd, String> {
        let version = std::process::Command::new(bin)
            .arg("--version")
            .output()
            .map_err(|e| {
                format!(
                    "cannot run {}: {e} (install it: apt-get install -y etcd-server)",
                    bin.display()
                )
            })?;
        let version = String::from_utf8_lossy(&version.stdout)
            .lines()
            .next()
            .unwrap_or("etcd ?")
            .trim()
            .to_owned();
        let mut last = String::new();
        for _ in 0..3 {
            match Self::try_start(bin, &version).await {
                Ok(e) => return Ok(e),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    async fn try_start(bin: &Path, version: &str) -> Result<Etcd, String> {
        let dir = tempfile::Builder::new()
            .prefix("zkgate-bench-etcd-")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        let (client, peer) = (
            free_port().map_err(|e| e.to_string())?,
            free_port().map_err(|e| e.to_string())?,
        );
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log_path = dir.path().join("etcd.log");
        let log = std::fs::File::create(&log_path).map_err(|e| format!("etcd.log: {e}"))?;
        let data: PathBuf = dir.path().join("data");
        let mut wrapper = Command::new("sh")
            .arg("-c")
            // The lifeline: `read` returns when our end of stdin closes (shutdown, or this
            // process dying), and then the member is stopped.
            .arg(r#""$@" </dev/null & p=$!; read _; kill $p 2>/dev/null; wait $p"#)
            .arg("sh")
            .arg(bin)
            .args(["--name", "bench"])
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &url])
            .args(["--advertise-client-urls", &url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("bench={peer_url}")])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "zkgate-bench"])
            .stdin(Stdio::piped())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", bin.display()))?;
        let lifeline = wrapper.stdin.take();
        let mut etcd = Etcd {
            wrapper,
            lifeline,
            url,
            version: version.to_owned(),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = etcd.wrapper.try_wait() {
                return Err(format!(
                    "etcd exited ({status}) before serving; end of its log:\n{}",
                    log_tail(&log_path)
                ));
            }
            if etcd.ready().await {
                return Ok(etcd);
            }
            if Instant::now() > deadline {
                let tail = log_tail(&log_path);
                etcd.shutdown().await;
                return Err(format!(
                    "etcd did not grant a lease within 30 s; end of its log:\n{tail}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn ready(&self) -> bool {
        let Ok(ch) = Channel::from_shared(self.url.clone())
            .unwrap()
            .connect()
            .await
        else {
            return false;
        };
        let mut lease = LeaseClient::new(ch);
        let Ok(r) = lease.lease_grant(LeaseGrantRequest { ttl: 5, id: 0 }).await else {
            return false;
        };
        let id = r.into_inner().id;
        lease.lease_revoke(LeaseRevokeRequest { id }).await.is_ok()
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    /// Stops the member (SIGTERM through the wrapper) and waits up to 10 s for it.
    pub async fn shutdown(mut self) {
        drop(self.lifeline.take());
        if tokio::time::timeout(Duration::from_secs(10), self.wrapper.wait())
            .await
            .is_err()
        {
            let _ = self.wrapper.kill().await;
        }
    }
}

/// What etcd's `concurrency.NewSession` sets up: a lease (TTL 60 s, its default) kept alive by
/// a `LeaseKeepAlive` stream that renews it every TTL/3.
pub struct Session {
    pub id: i64,
    lease: LeaseClient<Channel>,
    keepalive: JoinHandle<()>,
}

pub const SESSION_TTL_SECS: i64 = 60;

impl Session {
    pub async fn grant(ch: Channel) -> Session {
        let mut lease = LeaseClient::new(ch);
        let id = lease
            .lease_grant(LeaseGrantRequest {
                ttl: SESSION_TTL_SECS,
                id: 0,
            })
            .await
            .expect("LeaseGrant")
            .into_inner()
            .id;
        let mut ka = lease.clone();
        let keepalive = tokio::spawn(async move {
            let (tx, rx) = mpsc::channel(1);
            // The first request goes out before the call: a gRPC server sends response headers
            // only with its first answer.
            if tx.send(LeaseKeepAliveRequest { id }).await.is_err() {
                return;
            }
            let Ok(resp) = ka.lease_keep_alive(ReceiverStream::new(rx)).await else {
                return;
            };
            let mut answers = resp.into_inner();
            while let Ok(Some(_)) = answers.message().await {
                tokio::time::sleep(Duration::from_secs((SESSION_TTL_SECS / 3) as u64)).await;
                if tx.send(LeaseKeepAliveRequest { id }).await.is_err() {
                    return;
                }
            }
        });
        Session {
            id,
            lease,
            keepalive,
        }
    }

    /// Stops the keepalives and revokes the lease (deleting every key attached to it).
    pub async fn close(mut self) {
        self.keepalive.abort();
        let _ = self
            .lease
            .lease_revoke(LeaseRevokeRequest { id: self.id })
            .await;
    }
}
