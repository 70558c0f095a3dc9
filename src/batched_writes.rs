//! A client connection whose writes wait for one pass of the scheduler, so the frames of every
//! stream woken by the same event leave the gateway in one write.
//!
//! Why: an event that many streams follow (a leader change seen by 10,000 `Observe` streams,
//! issue 21) wakes every stream's task at once. Each one hands HTTP/2 its message and wakes the
//! connection's task, which tokio runs next (its "LIFO slot"), so the connection wrote after
//! almost every stream: about 1,000 `writev` calls of ~1 KiB per change on 10 connections,
//! a quarter of the gateway's CPU in the kernel's loopback send path (`perf` on
//! `zkgate-bench --only observe`). Yielding once before each write puts the connection's task
//! behind the streams already woken, whose frames are then in HTTP/2's buffer when it writes.
//!
//! It is the batcher's rule applied to the socket (`coord::batch`): no timer, nothing waits
//! for company. When nothing else is ready the yield costs one more poll of the connection's
//! task, and then the write goes out.
//!
//! The same wrapper also notes how the connection ends ([`crate::conn_fate`]): by the client's
//! side, or given up by the gateway as dead.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::conn_fate::Tracked;

/// A TCP connection to a client; see the module doc.
#[derive(Debug)]
pub struct BatchedWrites {
    inner: TcpStream,
    /// The connection's task has yielded once since the last completed write.
    yielded: bool,
    /// How it ends, and the dead-client read watch.
    fate: Tracked,
    /// Its place among the gateway's connections (`--max-connections`), given back with it.
    _place: Option<crate::api::limits::ConnectionPermit>,
}

impl BatchedWrites {
    /// `dead_after`: give the connection up when nothing is read from it for that long.
    pub fn new(inner: TcpStream, dead_after: Option<std::time::Duration>) -> Self {
        let fate = Tracked::new(inner.local_addr().ok(), inner.peer_addr().ok(), dead_after);
        Self {
            inner,
            yielded: false,
            fate,
            _place: None,
        }
    }

    /// Holds `place` for as long as the connection is open.
    pub fn holding(mut self, place: crate::api::limits::ConnectionPermit) -> Self {
        self._place = Some(place);
        self
    }

    /// `Pending` once before each write: waking itself sends the task to the back of the run
    /// queue (tokio's yield), behind every task already ready to run.
    fn yield_once(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// A write that completed (or failed) starts the next one with a yield; one that found the
    /// socket full does not yield again when the socket has room.
    fn after_write<T>(&mut self, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.yielded = false;
        }
        if let Poll::Ready(Err(e)) = &r {
            self.fate.after_error(e);
        }
        r
    }
}

impl Connected for BatchedWrites {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl AsyncRead for BatchedWrites {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let room = buf.remaining() > 0;
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        this.fate.after_read(&r, buf.filled().len() - before, room);
        if r.is_pending() {
            if let Poll::Ready(e) = this.fate.poll_dead(cx) {
                return Poll::Ready(Err(e));
            }
        }
        r
    }
}

impl AsyncWrite for BatchedWrites {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        std::task::ready!(this.yield_once(cx));
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.after_write(r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        std::task::ready!(this.yield_once(cx));
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.after_write(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    use tokio::io::AsyncReadExt;

    use super::*;

    /// Counts its wake-ups.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    async fn pair() -> (BatchedWrites, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (client, server) = tokio::join!(
            TcpStream::connect(listener.local_addr().unwrap()),
            listener.accept()
        );
        (BatchedWrites::new(server.unwrap().0, None), client.unwrap())
    }

    /// The rule, poll by poll: each write is first refused once with a wake-up of the task
    /// itself (a yield), then goes out whole on the next poll; reads and the peer's address
    /// are the socket's own.
    #[tokio::test]
    async fn each_write_goes_out_on_the_poll_after_one_yield() {
        let (mut conn, mut peer) = pair().await;
        assert_eq!(
            conn.connect_info().remote_addr(),
            peer.local_addr().ok(),
            "remote_addr, which the per-connection limits use, is the socket's"
        );
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        for (i, msg) in [&b"first"[..], b"second", b"third"].into_iter().enumerate() {
            let woken = count.0.load(Ordering::SeqCst);
            assert!(Pin::new(&mut conn).poll_write(&mut cx, msg).is_pending());
            assert_eq!(
                count.0.load(Ordering::SeqCst),
                woken + 1,
                "write {i}: the yield wakes the task"
            );
            match Pin::new(&mut conn).poll_write(&mut cx, msg) {
                Poll::Ready(Ok(n)) => assert_eq!(n, msg.len(), "write {i}"),
                other => panic!("write {i} after its yield: {other:?}"),
            }
            let mut got = vec![0; msg.len()];
            peer.read_exact(&mut got).await.unwrap();
            assert_eq!(got, msg);
        }
        // Vectored writes follow the same rule.
        let bufs = [io::IoSlice::new(b"ab"), io::IoSlice::new(b"cd")];
        assert!(Pin::new(&mut conn)
            .poll_write_vectored(&mut cx, &bufs)
            .is_pending());
        assert!(matches!(
            Pin::new(&mut conn).poll_write_vectored(&mut cx, &bufs),
            Poll::Ready(Ok(4))
        ));
        let mut got = [0; 4];
        peer.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"abcd");
    }
}
