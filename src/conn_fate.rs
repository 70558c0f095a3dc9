//! How a client's connection ended — by the client's side, or by the gateway giving it up as
//! dead — so that a holder's stream can tell a holder that let go from one that may still be
//! holding on (G3, G3b).
//!
//! Why: a granted holder counts its silence limit from the last message it *heard*, while the
//! gateway's dead-client detection counts from the last byte it *read*. When the link fails in
//! one direction only (the holder still hears heartbeats but its pings do not come back), or
//! is slow, or the holder is briefly paused, the gateway gives the connection up as dead while
//! messages it sent are still reaching the holder, and each restarts the holder's watchdog. A
//! probe on real processes (2026-11-27) saw the old holder report "held" for 20–1,032 ms
//! after its successor was granted in 19 of 25 runs — with a 100 ms link at the default T — when
//! the znode went the moment the connection was dropped. So a connection the gateway gives up
//! as dead is marked before it is closed, and a granted holder's stream that ends with it
//! keeps its znode until the holder's silence limit has surely passed (the G3c rule,
//! `holder_stream::revocation::due`). A connection the *client's* side closed (a FIN or RST:
//! the process ended or let go) or a stream the client cancelled still releases at once.
//!
//! The gateway's own read watch decides "dead" here, not hyper's HTTP/2 keepalive: hyper's
//! timeout ends the connection without saying so to anyone but its own task, and its streams
//! may see the end before anything could be marked. hyper still sends the pings (a live
//! client answers them, so its connection is read from at least every keepalive interval)
//! and keeps a later timeout of its own as a backstop (`server::run`).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// How one connection ended, as far as the gateway knows; shared by the connection and the
/// streams on it.
#[derive(Debug, Default)]
pub struct ConnFate {
    /// The client's side closed it: EOF, or a reset, read or written.
    peer_closed: AtomicBool,
    /// The gateway gave it up: nothing was read from it within the dead-client bound.
    given_up: AtomicBool,
}

impl ConnFate {
    /// Whether the gateway, not the client, ended the connection because nothing came from
    /// the client in time: the holder may be alive and still hearing what was sent to it.
    pub fn given_up_as_dead(&self) -> bool {
        self.given_up.load(Ordering::SeqCst) && !self.peer_closed.load(Ordering::SeqCst)
    }

    fn mark_peer_closed(&self) {
        self.peer_closed.store(true, Ordering::SeqCst);
    }

    /// The fate of the live connection between `local` (the gateway's address) and `peer`.
    pub fn of(local: SocketAddr, peer: SocketAddr) -> Option<Arc<ConnFate>> {
        book().get(&(local, peer)).and_then(Weak::upgrade)
    }

    /// The fate of the connection a request came on (plain TCP or TLS).
    pub fn of_request<T>(request: &tonic::Request<T>) -> Option<Arc<ConnFate>> {
        use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
        let ext = request.extensions();
        let info = ext.get::<TcpConnectInfo>().or_else(|| {
            ext.get::<TlsConnectInfo<TcpConnectInfo>>()
                .map(|t| t.get_ref())
        })?;
        Self::of(info.local_addr()?, info.remote_addr()?)
    }
}

type Book = HashMap<(SocketAddr, SocketAddr), Weak<ConnFate>>;

/// The process's accepted connections, by (gateway address, client address): unique among live
/// connections, also with several gateways in one process (the tests).
fn book() -> std::sync::MutexGuard<'static, Book> {
    static BOOK: LazyLock<Mutex<Book>> = LazyLock::new(Mutex::default);
    BOOK.lock().unwrap_or_else(|p| p.into_inner())
}

/// A connection's entry in the book, and its read watch: owned by the connection's IO, dropped
/// with it.
#[derive(Debug)]
pub struct Tracked {
    fate: Arc<ConnFate>,
    key: Option<(SocketAddr, SocketAddr)>,
    watch: Option<ReadWatch>,
}

impl Tracked {
    /// Tracks the connection between `local` and `peer`; `dead_after`: give it up when
    /// nothing is read from it for that long (`None`: never).
    pub fn new(
        local: Option<SocketAddr>,
        peer: Option<SocketAddr>,
        dead_after: Option<Duration>,
    ) -> Self {
        let fate = Arc::new(ConnFate::default());
        let key = local.zip(peer);
        if let Some(key) = key {
            book().insert(key, Arc::downgrade(&fate));
        }
        Self {
            fate,
            key,
            watch: dead_after.map(ReadWatch::new),
        }
    }

    /// Notes a read's outcome (`read`: bytes it delivered) before the caller sees it.
    pub fn after_read(&mut self, r: &Poll<std::io::Result<()>>, read: usize, room: bool) {
        match r {
            Poll::Ready(Ok(())) if read > 0 => {
                if let Some(w) = &mut self.watch {
                    w.last_read = Instant::now();
                }
            }
            // EOF: the client's side closed its half.
            Poll::Ready(Ok(())) if room => self.fate.mark_peer_closed(),
            Poll::Ready(Err(e)) => self.after_error(e),
            _ => {}
        }
    }

    /// Notes a failed read or write: a reset or a broken pipe is the client's side.
    pub fn after_error(&self, e: &std::io::Error) {
        use std::io::ErrorKind::*;
        if matches!(
            e.kind(),
            ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
        ) {
            self.fate.mark_peer_closed();
        }
    }

    /// While a read is pending: `Ready` with the error to end the connection with once nothing
    /// was read for the dead-client bound — marked given up *before* anyone can see the end.
    pub fn poll_dead(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Error> {
        let Some(w) = &mut self.watch else {
            return Poll::Pending;
        };
        if !w.poll_silent(cx) {
            return Poll::Pending;
        }
        self.fate.given_up.store(true, Ordering::SeqCst);
        tracing::info!(
            peer = ?self.key.map(|k| k.1),
            bound = ?w.bound,
            "nothing read from the client within the dead-client bound: closing its connection"
        );
        Poll::Ready(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "nothing read from the client within the dead-client bound",
        ))
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            let mut book = book();
            // A new connection may have taken the same address pair: remove only our entry.
            if book
                .get(&key)
                .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&self.fate)))
            {
                book.remove(&key);
            }
        }
    }
}

/// "Nothing read for `bound`", with one timer that is moved only when it fires (a read costs
/// an `Instant`, not a timer update).
#[derive(Debug)]
struct ReadWatch {
    bound: Duration,
    last_read: Instant,
    timer: Pin<Box<Sleep>>,
}

impl ReadWatch {
    fn new(bound: Duration) -> Self {
        let now = Instant::now();
        Self {
            bound,
            last_read: now,
            timer: Box::pin(tokio::time::sleep_until(now + bound)),
        }
    }

    /// True once `bound` has passed since the last read; else the timer is armed for when it
    /// would have.
    fn poll_silent(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            let due = self.last_read + self.bound;
            if self.timer.deadline() < due {
                self.timer.as_mut().reset(due);
            }
            match self.timer.as_mut().poll(cx) {
                Poll::Ready(()) if Instant::now() >= self.last_read + self.bound => return true,
                Poll::Ready(()) => continue,
                Poll::Pending => return false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_given_up_only_after_the_bound_without_a_read() {
        let mut t = Tracked::new(Some(addr(1)), Some(addr(2)), Some(Duration::from_secs(2)));
        let fate = ConnFate::of(addr(1), addr(2)).expect("in the book");
        let poll = |t: &mut Tracked| {
            futures::future::poll_fn(|cx| Poll::Ready(t.poll_dead(cx).is_ready())).await_now()
        };
        assert!(!poll(&mut t));
        tokio::time::advance(Duration::from_millis(1_500)).await;
        // A read moves the bound.
        t.after_read(&Poll::Ready(Ok(())), 10, true);
        tokio::time::advance(Duration::from_millis(1_500)).await;
        assert!(!poll(&mut t), "read 1.5 s ago");
        assert!(!fate.given_up_as_dead());
        tokio::time::advance(Duration::from_millis(600)).await;
        assert!(poll(&mut t), "nothing read for 2.1 s");
        assert!(fate.given_up_as_dead());
        drop(t);
        assert!(ConnFate::of(addr(1), addr(2)).is_none(), "out of the book");
    }

    #[test]
    fn what_the_client_side_did_wins_over_a_give_up() {
        use std::io::{Error, ErrorKind};
        // (what, the read's outcome, bytes it delivered, room in the buffer, the client's side)
        type Case = (&'static str, Poll<std::io::Result<()>>, usize, bool, bool);
        let cases: &[Case] = &[
            ("bytes read", Poll::Ready(Ok(())), 10, true, false),
            ("EOF", Poll::Ready(Ok(())), 0, true, true),
            ("no room is not EOF", Poll::Ready(Ok(())), 0, false, false),
            ("pending", Poll::Pending, 0, true, false),
            (
                "reset",
                Poll::Ready(Err(Error::from(ErrorKind::ConnectionReset))),
                0,
                true,
                true,
            ),
            (
                "another error is not the client's word",
                Poll::Ready(Err(Error::from(ErrorKind::Other))),
                0,
                true,
                false,
            ),
        ];
        for (what, r, read, room, peer) in cases {
            let mut t = Tracked::new(None, None, None);
            t.fate.given_up.store(true, Ordering::SeqCst);
            t.after_read(r, *read, *room);
            assert_eq!(t.fate.given_up_as_dead(), !peer, "{what}");
        }
    }

    trait AwaitNow: std::future::Future + Sized {
        fn await_now(self) -> Self::Output {
            use futures::FutureExt;
            self.now_or_never().expect("ready at once")
        }
    }
    impl<F: std::future::Future> AwaitNow for F {}
}
