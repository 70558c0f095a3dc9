//! A link cutter: a TCP proxy on loopback, put between a gateway and ZooKeeper or between a
//! client and its gateway, that fails the link on command.
//!
//! * [`LinkMode::Pass`] forwards bytes both ways.
//! * [`LinkMode::Drop`] resets every current connection (RST, as when a process dies or a
//!   firewall rejects) and resets each new one right after accepting it.
//! * [`LinkMode::Blackhole`] keeps every connection open but forwards nothing in either
//!   direction, and sends no FIN: a cable pulled, a host frozen, a partition. New connections
//!   are accepted (and connected upstream) but get nothing either. Going back to `Pass` heals
//!   the partition: bytes held back are delivered, as TCP retransmission would.
//! * [`LinkMode::BlackholeToTarget`] and [`LinkMode::BlackholeFromTarget`] blackhole one
//!   direction only (an asymmetric partition): bytes toward the target, or back from it, are
//!   held while the other direction flows.
//!
//! Every socket the cutter owns has a zero linger time, so dropping it sends RST, never FIN.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the cutter does with its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkMode {
    Pass,
    Drop,
    Blackhole,
    BlackholeToTarget,
    BlackholeFromTarget,
}

/// Which way bytes travel through the cutter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    ToTarget,
    FromTarget,
}

impl LinkMode {
    fn carries(self, way: Way) -> bool {
        match self {
            LinkMode::Pass => true,
            LinkMode::Drop | LinkMode::Blackhole => false,
            LinkMode::BlackholeToTarget => way == Way::FromTarget,
            LinkMode::BlackholeFromTarget => way == Way::ToTarget,
        }
    }
}

/// A running cutter. Dropping it stops accepting and resets every connection.
#[derive(Debug)]
pub struct LinkCutter {
    addr: SocketAddr,
    target: Arc<Mutex<SocketAddr>>,
    mode: watch::Sender<LinkMode>,
    live: Arc<AtomicUsize>,
    accepted: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl LinkCutter {
    /// Listens on `127.0.0.1:0` and forwards to `target` (in `Pass` mode).
    ///
    /// # Errors
    /// Binding the listener.
    pub async fn start(target: SocketAddr) -> io::Result<LinkCutter> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, _) = watch::channel(LinkMode::Pass);
        let target = Arc::new(Mutex::new(target));
        let live = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(accept_loop(
            listener,
            target.clone(),
            mode.clone(),
            live.clone(),
            accepted.clone(),
        ));
        Ok(LinkCutter {
            addr,
            target,
            mode,
            live,
            accepted,
            task,
        })
    }

    /// Where clients connect instead of the target.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, for gRPC clients.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn mode(&self) -> LinkMode {
        *self.mode.borrow()
    }

    /// Switches mode; takes effect on every connection at once.
    pub fn set(&self, mode: LinkMode) {
        self.mode.send_replace(mode);
    }

    pub fn pass(&self) {
        self.set(LinkMode::Pass);
    }

    pub fn drop_all(&self) {
        self.set(LinkMode::Drop);
    }

    pub fn blackhole(&self) {
        self.set(LinkMode::Blackhole);
    }

    /// Points new connections elsewhere (e.g. a restarted server on a new port).
    pub fn retarget(&self, target: SocketAddr) {
        *self.target.lock().unwrap() = target;
    }

    /// Connections currently open through the cutter.
    pub fn live_connections(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for LinkCutter {
    fn drop(&mut self) {
        // Every connection task watches the mode; a closed channel also ends them.
        self.mode.send_replace(LinkMode::Drop);
        self.task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: Arc<Mutex<SocketAddr>>,
    mode: watch::Sender<LinkMode>,
    live: Arc<AtomicUsize>,
    accepted: Arc<AtomicU64>,
) {
    loop {
        let Ok((downstream, _)) = listener.accept().await else {
            continue;
        };
        accepted.fetch_add(1, Ordering::Relaxed);
        let _ = downstream.set_zero_linger();
        let _ = downstream.set_nodelay(true);
        if *mode.borrow() == LinkMode::Drop {
            drop(downstream); // RST
            continue;
        }
        let to = *target.lock().unwrap();
        let rx = mode.subscribe();
        let live = live.clone();
        tokio::spawn(async move {
            let Ok(upstream) = TcpStream::connect(to).await else {
                return; // refused upstream: reset the client too (zero linger)
            };
            let _ = upstream.set_zero_linger();
            let _ = upstream.set_nodelay(true);
            live.fetch_add(1, Ordering::Relaxed);
            relay(downstream, upstream, rx).await;
            live.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// Forwards both directions until both have ended, or resets both when the mode becomes
/// `Drop` or either side fails.
async fn relay(a: TcpStream, b: TcpStream, mode: watch::Receiver<LinkMode>) {
    let (ar, aw) = a.into_split();
    let (br, bw) = b.into_split();
    let fail = tokio_util::sync::CancellationToken::new();
    let one = pump(ar, bw, Way::ToTarget, mode.clone(), fail.clone());
    let two = pump(br, aw, Way::FromTarget, mode, fail.clone());
    let _ = tokio::join!(one, two);
    // Both halves of both sockets are dropped here: zero linger turns that into RST.
}

/// Waits while `way` is blackholed; false when the link is to be reset.
async fn wait_pass(mode: &mut watch::Receiver<LinkMode>, way: Way) -> bool {
    loop {
        match *mode.borrow_and_update() {
            LinkMode::Drop => return false,
            m if m.carries(way) => return true,
            _ => {}
        }
        if mode.changed().await.is_err() {
            return false;
        }
    }
}

/// Waits until the mode is `Drop` (or the cutter is gone).
async fn wait_drop(mode: &mut watch::Receiver<LinkMode>) {
    loop {
        if *mode.borrow_and_update() == LinkMode::Drop {
            return;
        }
        if mode.changed().await.is_err() {
            return;
        }
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    way: Way,
    mut mode: watch::Receiver<LinkMode>,
    fail: tokio_util::sync::CancellationToken,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let mut watch_drop = mode.clone();
        let n = tokio::select! {
            _ = fail.cancelled() => return,
            _ = wait_drop(&mut watch_drop) => { fail.cancel(); return; }
            r = from.read(&mut buf) => match r {
                Ok(0) => {
                    // FIN from this side: pass it on once the link would carry it.
                    if wait_pass(&mut mode, way).await {
                        let _ = to.shutdown().await;
                    } else {
                        fail.cancel();
                    }
                    return;
                }
                Ok(n) => n,
                Err(_) => {
                    // A reset from this side also waits for the link to carry it.
                    let _ = wait_pass(&mut mode, way).await;
                    fail.cancel();
                    return;
                }
            },
        };
        // Hold the bytes while blackholed; a reset drops them.
        let pass = tokio::select! {
            _ = fail.cancelled() => return,
            p = wait_pass(&mut mode, way) => p,
        };
        if !pass {
            fail.cancel();
            return;
        }
        let mut watch_drop = mode.clone();
        tokio::select! {
            _ = fail.cancelled() => return,
            _ = wait_drop(&mut watch_drop) => { fail.cancel(); return; }
            r = to.write_all(&buf[..n]) => if r.is_err() { fail.cancel(); return; },
        }
    }
}
