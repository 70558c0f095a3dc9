//! The sending side of a server stream (holder streams and ObserveMany), built so that a client
//! that stops reading can never hold up the task that feeds it (contract G3c, G7).
//!
//! Two things make that hold:
//! - [`Outbox::end`] never waits: the final status goes into a slot of its own, which the
//!   response stream yields after whatever is still buffered. So the client that reads again
//!   sees its messages in order, then the true status (never a bare end of stream, which would
//!   read as `OK`, a resign).
//! - Every other message is sent with [`Outbox::try_send`] and, when the outbox is full, kept
//!   by the caller and sent through [`Outbox::reserve`] inside its `select!`, beside the drain,
//!   the stream's cancellation and its deadlines.
//!
//! The response stream also stamps the moment it last handed a message to the transport
//! ([`Outbox::last_sent`]): hyper asks a response body for more only while the HTTP/2 stream has room in
//! its flow-control window, so that instant is the last message the gateway actually sent, and
//! a holder's silence watchdog runs from no earlier than it. A message still queued here was
//! never sent and cannot keep any watchdog from firing.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use futures::Stream;
use tokio::time::Instant;
use tonic::Status;

/// Messages a stream buffers before its task must wait: small, so a stalled client costs little
/// and a full outbox is noticed soon.
const DEPTH: usize = 16;

/// A message or the final status, boxed so an idle outbox's queue costs a pointer per slot.
type Item<T> = Box<Result<T, Status>>;

/// What the task's side and the response stream share: one small allocation per stream.
/// (It replaced a tokio channel plus two `Arc`s: ≈ 1.1 KiB per stream, most of it the
/// channel's cache-padded state and its first block of 32 slots, which the gateway paid for
/// every one of its tens of thousands of waiting streams; issue 21.)
#[derive(Debug)]
struct Shared<T> {
    queue: VecDeque<Item<T>>,
    /// The final status, yielded after everything queued ([`Outbox::end`]).
    end: Option<Box<Status>>,
    /// When the response stream last handed a message to the transport.
    last_sent: Instant,
    /// The task's side is gone (no more messages).
    sender_gone: bool,
    /// The response stream is gone (the client went away).
    reader_gone: bool,
    /// The response stream, waiting for a message.
    reader: Option<Waker>,
    /// The task, waiting for room ([`Outbox::reserve`]).
    room: Option<Waker>,
    /// The task, waiting for the reader to go ([`Outbox::closed`]).
    closed: Option<Waker>,
}

fn lock<T>(m: &Mutex<Shared<T>>) -> MutexGuard<'_, Shared<T>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn register(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

fn wake(slot: &mut Option<Waker>) {
    if let Some(w) = slot.take() {
        w.wake();
    }
}

/// The task's side of one server stream. One task sends on it (it is not `Clone`).
#[derive(Debug)]
pub(super) struct Outbox<T> {
    shared: Arc<Mutex<Shared<T>>>,
}

/// Outcome of [`Outbox::try_send`].
pub(super) enum TrySend<T> {
    Sent,
    /// The outbox is full: the message comes back, to be sent through [`Outbox::reserve`].
    Full(T),
    /// The client is gone.
    Closed,
}

/// Room for one message (see [`Outbox::reserve`]): the outbox has one sender, so room it saw
/// stays until that sender uses it.
pub(super) struct Permit<'a, T>(&'a Outbox<T>);

impl<T: Send + 'static> Outbox<T> {
    /// A new outbox and the response stream that reads it.
    pub(super) fn new() -> (Self, Responses<T>) {
        let shared = Arc::new(Mutex::new(Shared {
            queue: VecDeque::new(),
            end: None,
            last_sent: Instant::now(),
            sender_gone: false,
            reader_gone: false,
            reader: None,
            room: None,
            closed: None,
        }));
        (
            Self {
                shared: shared.clone(),
            },
            Responses {
                shared,
                done: false,
            },
        )
    }

    fn push(&self, item: Item<T>) {
        let mut s = lock(&self.shared);
        s.queue.push_back(item);
        wake(&mut s.reader);
    }

    /// Sends `msg` if the outbox has room.
    pub(super) fn try_send(&self, msg: T) -> TrySend<T> {
        let mut s = lock(&self.shared);
        if s.reader_gone {
            return TrySend::Closed;
        }
        if s.queue.len() >= DEPTH {
            return TrySend::Full(msg);
        }
        s.queue.push_back(Box::new(Ok(msg)));
        wake(&mut s.reader);
        TrySend::Sent
    }

    /// Room for one message. Cancellation safe: use it in a `select!`.
    ///
    /// # Errors
    /// The client is gone.
    pub(super) async fn reserve(&self) -> Result<Permit<'_, T>, ()> {
        std::future::poll_fn(|cx| {
            let mut s = lock(&self.shared);
            if s.reader_gone {
                Poll::Ready(Err(()))
            } else if s.queue.len() < DEPTH {
                Poll::Ready(Ok(Permit(self)))
            } else {
                register(&mut s.room, cx);
                Poll::Pending
            }
        })
        .await
    }

    /// Resolves once the client has gone (the response stream was dropped).
    pub(super) async fn closed(&self) {
        std::future::poll_fn(|cx| {
            let mut s = lock(&self.shared);
            if s.reader_gone {
                Poll::Ready(())
            } else {
                register(&mut s.closed, cx);
                Poll::Pending
            }
        })
        .await;
    }

    /// When a message was last handed to the transport (the stream's start before any).
    pub(super) fn last_sent(&self) -> Instant {
        lock(&self.shared).last_sent
    }

    /// Ends the stream with `status`, without waiting: after everything already buffered. The
    /// caller sends nothing more and returns.
    pub(super) fn end(&self, status: Status) {
        let mut s = lock(&self.shared);
        s.end = Some(Box::new(status));
        wake(&mut s.reader);
    }
}

impl<T> Drop for Outbox<T> {
    fn drop(&mut self) {
        let mut s = lock(&self.shared);
        s.sender_gone = true;
        wake(&mut s.reader);
    }
}

/// Sends through a permit from [`Outbox::reserve`].
pub(super) fn send<T: Send + 'static>(permit: Permit<'_, T>, msg: T) {
    permit.0.push(Box::new(Ok(msg)));
}

/// The response stream of one server stream: the buffered messages, then the final status if
/// [`Outbox::end`] gave one — never a bare end that would read as `OK` unless the task ended
/// without one.
#[derive(Debug)]
pub(super) struct Responses<T> {
    shared: Arc<Mutex<Shared<T>>>,
    done: bool,
}

impl<T> Stream for Responses<T> {
    type Item = Result<T, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let mut s = lock(&self.shared);
        if let Some(m) = s.queue.pop_front() {
            s.last_sent = Instant::now();
            wake(&mut s.room);
            return Poll::Ready(Some(*m));
        }
        if let Some(status) = s.end.take() {
            s.last_sent = Instant::now();
            drop(s);
            self.done = true;
            return Poll::Ready(Some(Err(*status)));
        }
        if s.sender_gone {
            drop(s);
            self.done = true;
            return Poll::Ready(None);
        }
        register(&mut s.reader, cx);
        Poll::Pending
    }
}

impl<T> Drop for Responses<T> {
    fn drop(&mut self) {
        let mut s = lock(&self.shared);
        s.reader_gone = true;
        // Nothing will read them: free the messages now rather than with the task's side.
        s.queue.clear();
        wake(&mut s.room);
        wake(&mut s.closed);
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
        let shared = out.shared.clone();
        out.end(Status::aborted("lapsed"));
        drop(out);
        assert_eq!(responses.next().await.unwrap().unwrap(), 7);
        assert!(lock(&shared).last_sent > before);
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
