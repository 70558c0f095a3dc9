//! What an observer's task has read and the application has not yet taken: the newest state,
//! not a log, and never a reason to stop reading the stream.
//!
//! Why: the observer's task used to hand each state over through a bounded channel and, when
//! the application did not read, stopped reading its gRPC stream. The unread messages then
//! piled up in the connection's HTTP/2 buffers, and h2 (≥ 0.4.16) ends its own connection with
//! `ENHANCE_YOUR_CALM` ("too_many_data_frames") once it holds more small messages unread than
//! its budget (half the connection window: ≈ 13,000 leader states). That connection is the
//! client's one per endpoint, so an observer nobody read cost the application its leaderships
//! and locks (`tests/rust_client.rs::unread_observers_do_not_cost_the_leadership_on_their_connection`:
//! 200 unread observers and 80 proclaims). Here the task always reads on, and a newer state
//! replaces the older one waiting for the same thing ([`Supersede`]), so what waits is bounded
//! by what is observed (one election, or one state per election), not by how long nobody read.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use futures_core::Stream;

use crate::Error;

/// Whether a newer item makes an older one still waiting pointless (a newer state of the same
/// thing): the newer one then takes the older one's place, so the order of different things is
/// kept and each is delivered at its newest.
pub(crate) trait Supersede {
    fn supersedes(&self, older: &Self) -> bool;
}

#[derive(Debug)]
struct Inner<T> {
    items: VecDeque<Result<T, Error>>,
    /// The task has ended: after the items, the stream ends.
    closed: bool,
    waker: Option<Waker>,
}

/// The task's end: puts items in without waiting.
#[derive(Debug)]
pub(crate) struct Sender<T> {
    inner: Arc<Mutex<Inner<T>>>,
}

/// The application's end, a `Stream`.
#[derive(Debug)]
pub(crate) struct Receiver<T> {
    inner: Arc<Mutex<Inner<T>>>,
}

pub(crate) fn mailbox<T>() -> (Sender<T>, Receiver<T>) {
    let inner = Arc::new(Mutex::new(Inner {
        items: VecDeque::new(),
        closed: false,
        waker: None,
    }));
    (
        Sender {
            inner: inner.clone(),
        },
        Receiver { inner },
    )
}

fn lock<T>(m: &Mutex<Inner<T>>) -> std::sync::MutexGuard<'_, Inner<T>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T: Supersede> Sender<T> {
    /// Puts `item` in, in the place of a waiting item it supersedes, else at the end. Returns
    /// false once nobody receives any more.
    pub(crate) fn put(&self, item: Result<T, Error>) -> bool {
        let waker = {
            let mut inner = lock(&self.inner);
            if Arc::strong_count(&self.inner) < 2 {
                return false;
            }
            place(&mut inner.items, item);
            inner.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        true
    }
}

/// The rule, on its own for the table test: an `Ok` item replaces the first waiting `Ok` item
/// it supersedes; anything else (an error, the last item) goes at the end.
fn place<T: Supersede>(items: &mut VecDeque<Result<T, Error>>, item: Result<T, Error>) {
    if let Ok(new) = &item {
        if let Some(slot) = items
            .iter_mut()
            .find(|old| matches!(old, Ok(old) if new.supersedes(old)))
        {
            *slot = item;
            return;
        }
    }
    items.push_back(item);
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut inner = lock(&self.inner);
            inner.closed = true;
            inner.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Stream for Receiver<T> {
    type Item = Result<T, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut inner = lock(&self.inner);
        if let Some(item) = inner.items.pop_front() {
            return Poll::Ready(Some(item));
        }
        if inner.closed {
            return Poll::Ready(None);
        }
        inner.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state of one named thing: `(name, version)`.
    #[derive(Debug, Clone, PartialEq)]
    struct S(&'static str, u32);

    impl Supersede for S {
        fn supersedes(&self, older: &Self) -> bool {
            self.0 == older.0
        }
    }

    fn oks(items: &VecDeque<Result<S, Error>>) -> Vec<(&'static str, u32)> {
        items
            .iter()
            .map(|i| match i {
                Ok(s) => (s.0, s.1),
                Err(_) => ("error", 0),
            })
            .collect()
    }

    #[test]
    fn a_newer_state_takes_the_older_ones_place_and_nothing_else_moves() {
        type Named = (&'static str, u32);
        let table: &[(&[Named], Named, &[Named])] = &[
            (&[], ("a", 1), &[("a", 1)]),
            (&[("a", 1)], ("a", 2), &[("a", 2)]),
            (&[("a", 1), ("b", 1)], ("a", 2), &[("a", 2), ("b", 1)]),
            (
                &[("a", 1), ("b", 1)],
                ("c", 1),
                &[("a", 1), ("b", 1), ("c", 1)],
            ),
            (&[("a", 1), ("b", 1)], ("b", 5), &[("a", 1), ("b", 5)]),
        ];
        for (waiting, new, want) in table {
            let mut items: VecDeque<Result<S, Error>> =
                waiting.iter().map(|(n, v)| Ok(S(n, *v))).collect();
            place(&mut items, Ok(S(new.0, new.1)));
            assert_eq!(
                oks(&items),
                want.to_vec(),
                "waiting {waiting:?}, new {new:?}"
            );
        }
    }

    #[test]
    fn an_error_is_never_replaced_and_goes_last() {
        let mut items: VecDeque<Result<S, Error>> = VecDeque::new();
        place(&mut items, Ok(S("a", 1)));
        place(&mut items, Err(Error::NotAcquired));
        place(&mut items, Ok(S("a", 2)));
        assert_eq!(oks(&items), [("a", 2), ("error", 0)]);
    }

    #[tokio::test]
    async fn the_receiver_gets_the_newest_then_the_end() {
        use tokio_stream::StreamExt;
        let (tx, mut rx) = mailbox();
        for v in 1..=1_000 {
            assert!(tx.put(Ok(S("a", v))));
        }
        assert!(tx.put(Ok(S("b", 1))));
        drop(tx);
        assert_eq!(rx.next().await.unwrap().unwrap(), S("a", 1_000));
        assert_eq!(rx.next().await.unwrap().unwrap(), S("b", 1));
        assert!(rx.next().await.is_none());
    }

    #[tokio::test]
    async fn a_waiting_receiver_is_woken_and_a_dropped_one_stops_the_sender() {
        use tokio_stream::StreamExt;
        let (tx, mut rx) = mailbox::<S>();
        let reader = tokio::spawn(async move {
            let first = rx.next().await;
            (first, rx)
        });
        tokio::task::yield_now().await;
        assert!(tx.put(Ok(S("a", 1))));
        let (first, rx) = reader.await.unwrap();
        assert_eq!(first.unwrap().unwrap(), S("a", 1));
        drop(rx);
        assert!(!tx.put(Ok(S("a", 2))), "nobody receives any more");
    }
}
