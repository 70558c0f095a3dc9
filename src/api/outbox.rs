//! The sending side of a server stream (holder streams and Observe), built so that a client
//! that stops reading can never hold up the task that feeds it (contract G3c, G7).
//!
//! Two things make that hold:
//! - [`Outbox::end`] never waits: the final status goes into the channel if there is room,
//!   else into a slot the response stream yields after whatever is still buffered. Either way
//!   the client that reads again sees its messages in order, then the true status (never a
//!   bare end of stream, which would read as `OK`, a resign).
//! - Every other message is sent with [`Outbox::try_send`] and, when the channel is full, kept
//!   by the caller and sent through [`Outbox::reserve`] inside its `select!`, beside the drain,
//!   the stream's cancellation and its deadlines.
//!
//! The response stream also stamps the moment it last handed a message to the transport
//! ([`LastSent`]): hyper asks a response body for more only while the HTTP/2 stream has room in
//! its flow-control window, so that instant is the last message the gateway actually sent, and
//! a holder's silence watchdog runs from no earlier than it. A message still queued here was
//! never sent and cannot keep any watchdog from firing.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::Status;

/// Messages a stream buffers before its task must wait: small, so a stalled client costs little
/// and a full channel is noticed soon.
const DEPTH: usize = 16;

/// When the response stream last handed a message to the transport.
#[derive(Debug)]
pub(super) struct LastSent(Mutex<Instant>);

impl LastSent {
    fn new() -> Self {
        Self(Mutex::new(Instant::now()))
    }

    fn stamp(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// The instant of the last message handed to the transport (the stream's start before any).
    pub(super) fn get(&self) -> Instant {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

type Item<T> = Box<Result<T, Status>>;

/// The task's side of one server stream.
#[derive(Debug)]
pub(super) struct Outbox<T> {
    tx: mpsc::Sender<Item<T>>,
    last_sent: Arc<LastSent>,
    end: Arc<Mutex<Option<Status>>>,
}

/// Outcome of [`Outbox::try_send`].
pub(super) enum TrySend<T> {
    Sent,
    /// The channel is full: the message comes back, to be sent through [`Outbox::reserve`].
    Full(T),
    /// The client is gone.
    Closed,
}

/// A permit to send one message (see [`Outbox::reserve`]).
pub(super) type Permit<'a, T> = mpsc::Permit<'a, Item<T>>;

impl<T: Send + 'static> Outbox<T> {
    /// A new outbox and the response stream that reads it.
    pub(super) fn new() -> (Self, Responses<T>) {
        let (tx, rx) = mpsc::channel(DEPTH);
        let last_sent = Arc::new(LastSent::new());
        let end = Arc::new(Mutex::new(None));
        (
            Self {
                tx,
                last_sent: last_sent.clone(),
                end: end.clone(),
            },
            Responses {
                rx,
                last_sent,
                end,
                done: false,
            },
        )
    }

    /// Sends `msg` if the channel has room.
    pub(super) fn try_send(&self, msg: T) -> TrySend<T> {
        match self.tx.try_send(Box::new(Ok(msg))) {
            Ok(()) => TrySend::Sent,
            Err(mpsc::error::TrySendError::Full(m)) => match *m {
                Ok(m) => TrySend::Full(m),
                Err(_) => unreachable!("only Ok is sent here"),
            },
            Err(mpsc::error::TrySendError::Closed(_)) => TrySend::Closed,
        }
    }

    /// Room for one message. Cancellation safe: use it in a `select!`.
    ///
    /// # Errors
    /// The client is gone.
    pub(super) async fn reserve(&self) -> Result<Permit<'_, T>, ()> {
        self.tx.reserve().await.map_err(|_| ())
    }

    /// Resolves once the client has gone (the response stream was dropped).
    pub(super) async fn closed(&self) {
        self.tx.closed().await;
    }

    /// When a message was last handed to the transport.
    pub(super) fn last_sent(&self) -> Instant {
        self.last_sent.get()
    }

    /// Ends the stream with `status`, without waiting: after everything already buffered. The
    /// caller sends nothing more and returns (dropping the outbox closes the channel).
    pub(super) fn end(&self, status: Status) {
        if let Err(e) = self.tx.try_send(Box::new(Err(status))) {
            let status = match *e.into_inner() {
                Err(s) => s,
                Ok(_) => unreachable!("an error was sent"),
            };
            *self.end.lock().unwrap_or_else(|p| p.into_inner()) = Some(status);
        }
    }
}

/// Sends through a permit from [`Outbox::reserve`].
pub(super) fn send<T>(permit: Permit<'_, T>, msg: T) {
    permit.send(Box::new(Ok(msg)));
}

/// The response stream of one server stream: the buffered messages, then the final status if
/// [`Outbox::end`] had to leave it aside.
#[derive(Debug)]
pub(super) struct Responses<T> {
    rx: mpsc::Receiver<Item<T>>,
    last_sent: Arc<LastSent>,
    end: Arc<Mutex<Option<Status>>>,
    done: bool,
}

impl<T> Stream for Responses<T> {
    type Item = Result<T, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(m)) => {
                self.last_sent.stamp();
                Poll::Ready(Some(*m))
            }
            Poll::Ready(None) => {
                self.done = true;
                let end = self.end.lock().unwrap_or_else(|p| p.into_inner()).take();
                if end.is_some() {
                    self.last_sent.stamp();
                }
                Poll::Ready(end.map(Err))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    /// A full channel never blocks the end, and the reader still gets every message in order,
    /// then the status — never a bare end that would read as OK.
    #[tokio::test]
    async fn end_on_a_full_channel_comes_after_the_buffered_messages() {
        let (out, mut responses) = Outbox::<u32>::new();
        let mut sent = 0;
        loop {
            match out.try_send(sent) {
                TrySend::Sent => sent += 1,
                TrySend::Full(m) => {
                    assert_eq!(m, sent);
                    break;
                }
                TrySend::Closed => unreachable!(),
            }
        }
        assert_eq!(sent as usize, DEPTH);
        out.end(Status::unavailable("draining"));
        // The task returns after `end`, dropping its outbox.
        drop(out);
        for i in 0..sent {
            assert_eq!(responses.next().await.unwrap().unwrap(), i);
        }
        let end = responses.next().await.unwrap().unwrap_err();
        assert_eq!(end.code(), tonic::Code::Unavailable);
        assert!(responses.next().await.is_none());
    }

    #[tokio::test]
    async fn end_with_room_is_the_next_message_and_last_sent_follows_the_reader() {
        let (out, mut responses) = Outbox::<u32>::new();
        let before = out.last_sent();
        assert!(matches!(out.try_send(7), TrySend::Sent));
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        // Queued, not yet read: not sent.
        assert_eq!(out.last_sent(), before);
        let last = out.last_sent.clone();
        out.end(Status::aborted("lapsed"));
        drop(out);
        assert_eq!(responses.next().await.unwrap().unwrap(), 7);
        assert!(last.get() > before);
        assert_eq!(
            responses.next().await.unwrap().unwrap_err().code(),
            tonic::Code::Aborted
        );
        assert!(responses.next().await.is_none());
    }

    #[tokio::test]
    async fn a_dropped_reader_closes_the_outbox() {
        let (out, responses) = Outbox::<u32>::new();
        drop(responses);
        assert!(matches!(out.try_send(1), TrySend::Closed));
        out.closed().await;
        assert!(out.reserve().await.is_err());
    }
}
