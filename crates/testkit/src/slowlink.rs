//! A slow link: a TCP proxy on loopback that delivers every chunk it reads a fixed delay later,
//! in both directions and in order — a client far from its gateway, or a congested path. A
//! holder counts its silence limit and `stop_within` from when it *hears* a message, so
//! whatever the gateway times from when it *sent* one must allow for this delay (G3c).
//!
//! It can also lose everything the client sends from some moment on while the gateway's side
//! still gets through ([`SlowLink::mute_upstream`]): a link failed in one direction, where the
//! holder keeps hearing heartbeats that its gateway no longer hears the answers to.
//!
//! Each direction's delay can change while the link runs ([`SlowLink::set_delays`]: chunks
//! read from then on), and it counts what the gateway sent ([`SlowLink::downstream_reads`]), so
//! a test can act right after a message left under a new delay.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A running slow link. Dropping it stops accepting; open connections run on until either
/// side closes.
#[derive(Debug)]
pub struct SlowLink {
    addr: SocketAddr,
    task: JoinHandle<()>,
    /// Client → gateway chunks are dropped (the connections stay open).
    upstream_muted: Arc<AtomicBool>,
    up: Arc<Direction>,
    down: Arc<Direction>,
}

/// One direction's delay (nanoseconds) and the chunks it has read.
#[derive(Debug, Default)]
struct Direction {
    delay_ns: AtomicU64,
    reads: AtomicU64,
}

impl Direction {
    fn new(delay: Duration) -> Arc<Self> {
        let d = Arc::new(Direction::default());
        d.set(delay);
        d
    }

    fn set(&self, delay: Duration) {
        let ns = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        self.delay_ns.store(ns, Ordering::SeqCst);
    }

    fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_ns.load(Ordering::SeqCst))
    }
}

impl SlowLink {
    /// Listens on `127.0.0.1:0` and forwards to `target`, each chunk `delay` after it was read.
    ///
    /// # Errors
    /// Binding the listener.
    pub async fn start(target: SocketAddr, delay: Duration) -> io::Result<SlowLink> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let upstream_muted = Arc::new(AtomicBool::new(false));
        let muted = upstream_muted.clone();
        let (up, down) = (Direction::new(delay), Direction::new(delay));
        let (up2, down2) = (up.clone(), down.clone());
        let task = tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let Ok(up) = TcpStream::connect(target).await else {
                    continue;
                };
                let _ = down.set_nodelay(true);
                let _ = up.set_nodelay(true);
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                tokio::spawn(pump(dr, uw, up2.clone(), Some(muted.clone())));
                tokio::spawn(pump(ur, dw, down2.clone(), None));
            }
        });
        Ok(SlowLink {
            addr,
            task,
            upstream_muted,
            up,
            down,
        })
    }

    /// From now on, chunks the client sends (`up`) and the gateway sends (`down`) are
    /// delivered this long after they are read; chunks read before keep their time.
    pub fn set_delays(&self, up: Duration, down: Duration) {
        self.up.set(up);
        self.down.set(down);
    }

    /// How many chunks the link has read from the gateway so far (every connection).
    pub fn downstream_reads(&self) -> u64 {
        self.down.reads.load(Ordering::SeqCst)
    }

    /// From now on, nothing the client sends reaches the gateway (no FIN, no RST: the bytes
    /// are read and dropped), while everything the gateway sends still reaches the client.
    pub fn mute_upstream(&self) {
        self.upstream_muted.store(true, Ordering::SeqCst);
    }

    /// `http://` plus the listening address, for a gRPC client.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads `from` and writes each chunk to `to` the direction's delay after it was read (a
/// writer task keeps the order); a close on one side is passed on after the same delay. While
/// `muted` is set, chunks are dropped and a close is not passed on.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    dir: Arc<Direction>,
    muted: Option<Arc<AtomicBool>>,
) {
    let is_muted = move || muted.as_ref().is_some_and(|m| m.load(Ordering::SeqCst));
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    tokio::spawn(async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) if is_muted() => std::future::pending::<usize>().await,
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if is_muted() {
            continue;
        }
        dir.reads.fetch_add(1, Ordering::SeqCst);
        if tx
            .send((Instant::now() + dir.delay(), buf[..n].to_vec()))
            .is_err()
        {
            return;
        }
    }
}
