//! A queue's view handed to its observers a bounded group at a time, so a leader change seen
//! by thousands of `Observe` streams never holds up the other streams of the gateway.
//!
//! Why: one `watch` channel with 10,000 observers wakes all their tasks at once. Every task
//! woken after that — the new leader's own `elected` (three hand-offs: its stream, HTTP/2,
//! the connection), a lock grant on another name — waits behind all of them in tokio's run
//! queue. Measured with `zkgate-bench --only observe`: the new leader heard `elected` 75–130 ms
//! after the resignation with 10,000 observers on its gateway, against ≈ 2 ms without (W2).
//!
//! Here observers subscribe to one of several channels ("shards") of at most
//! [`OBSERVERS_PER_WAKE`] receivers each, and a relay task copies each new view into the
//! shards one after the other, yielding after each: whatever was woken meanwhile runs between
//! two shards. No timer; the relay is one more hand-off before the first observer.
//!
//! Observers see states, not a log (as before): a shard may be told a newer state while an
//! earlier shard still holds the one before, and each observation sends only changes; every
//! shard ends on the source's newest state. When the source closes (the queue's actor ended),
//! every shard closes with it, and so it does when the fan-out's `end` resolves (for `Observe`:
//! the drain starts or the session is lost). An observer then polls one channel, not one
//! channel and two end futures: those polls were 8–9 % of the gateway's CPU in the
//! 10,000-observer fan-out (a `CancellationToken` takes a mutex every observer shares), and
//! the observer asks why its channel closed only once it has.

use std::sync::{Arc, Mutex, Weak};

use futures::future::BoxFuture;
use tokio::sync::watch;

use super::types::FencingToken;

/// Receivers woken together: one shard's worth of tasks ahead of anything woken meanwhile.
pub const OBSERVERS_PER_WAKE: usize = 256;

/// Shards of one source's observers; see the module doc.
#[derive(Debug)]
pub struct Fanout<T> {
    source: watch::Receiver<T>,
    shards: Arc<Mutex<Shards<T>>>,
}

/// Makes the future that ends a fan-out's relay, and closes every shard, when it resolves
/// ([`Fanout::subscribe_until`]).
pub type EndFn = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

#[derive(Debug)]
struct Shards<T> {
    list: Vec<watch::Sender<T>>,
    relay_started: bool,
    /// The source has closed and so has every shard: a new subscriber gets a closed channel.
    closed: bool,
}

impl<T: Clone + PartialEq + Send + Sync + 'static> Fanout<T> {
    pub fn new(source: watch::Receiver<T>) -> Self {
        Self {
            source,
            shards: Arc::new(Mutex::new(Shards {
                list: Vec::new(),
                relay_started: false,
                closed: false,
            })),
        }
    }

    /// A receiver of the source's states, through a shard with room (or a new one). The relay
    /// starts with the first subscriber: a queue nobody observes keeps no task for it.
    pub fn subscribe(&self) -> watch::Receiver<T> {
        self.subscribe_until(Box::new(|| Box::pin(std::future::pending())))
    }

    /// [`Fanout::subscribe`], and if this subscriber starts the relay, every shard also closes
    /// (later subscribers' too) once the future `end` makes resolves. Only the first
    /// subscriber's `end` is made: every subscriber of one fan-out must pass the same end.
    pub fn subscribe_until(&self, end: EndFn) -> watch::Receiver<T> {
        let mut shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        if !shards.relay_started {
            shards.relay_started = true;
            tokio::spawn(relay(
                self.source.clone(),
                Arc::downgrade(&self.shards),
                end(),
            ));
        }
        // The newest state the relay has passed on is at least as new as any shard's, and a
        // fresh shard starts from the source's current one, so nobody starts behind.
        let current = self.source.borrow().clone();
        if shards.closed {
            return watch::channel(current).1;
        }
        if let Some(shard) = shards
            .list
            .iter()
            .find(|s| s.receiver_count() < OBSERVERS_PER_WAKE)
        {
            return shard.subscribe();
        }
        let (tx, rx) = watch::channel(current);
        shards.list.push(tx);
        rx
    }
}

/// Copies each new state of `source` into every shard, yielding after each shard; ends (and
/// closes every shard) when the source closes, `end` resolves or the fan-out is dropped.
async fn relay<T: Clone + PartialEq + Send + Sync + 'static>(
    mut source: watch::Receiver<T>,
    shards: Weak<Mutex<Shards<T>>>,
    end: BoxFuture<'static, ()>,
) {
    let mut end = end;
    loop {
        let open = tokio::select! {
            biased;
            () = &mut end => false,
            r = source.changed() => r.is_ok(),
        };
        let Some(shards) = shards.upgrade() else {
            return;
        };
        if !open {
            let mut s = shards.lock().unwrap_or_else(|p| p.into_inner());
            s.closed = true;
            s.list.clear();
            return;
        }
        let list: Vec<watch::Sender<T>> = {
            let mut s = shards.lock().unwrap_or_else(|p| p.into_inner());
            s.list.retain(|tx| tx.receiver_count() > 0);
            s.list.clone()
        };
        drop(shards);
        // Marked seen once, at the start of the pass: a state that arrives mid-pass is still
        // unseen when the pass ends, so the next pass brings it to the shards this one had
        // already passed. (Marking it seen as each shard took it left those shards on the
        // older state until the next change: 256 of 10,000 observers missed a leader change in
        // `zkgate-bench --only observe --observe-rounds 30`.)
        source.borrow_and_update();
        for shard in list {
            // The newest state for each shard, and no wake-up for a shard that has it already.
            let state = source.borrow().clone();
            shard.send_if_modified(|held| {
                let changed = *held != state;
                *held = state;
                changed
            });
            tokio::task::yield_now().await;
        }
    }
}

/// What one observing stream has told its client about one election, and the one rule by which
/// `Observe` and `ObserveMany` decide whether a view is news: nothing until the queue is
/// listed; then its state once; then changes only; and never a leader whose token is below one
/// already sent, even with a vacancy sent in between — tokens never go down in a stream, so a
/// client may fence with the newest it saw. How two states are compared is the caller's (the
/// fan-out compares encoded bytes, mostly by pointer; `ObserveMany` the holders).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Told {
    /// A state has been sent.
    any: bool,
    /// The largest token sent so far.
    top: Option<FencingToken>,
}

impl Told {
    /// Whether a view is to be sent: `synced`, its queue has been listed; `same`, its state
    /// equals the one sent last; `token`, its leader's (`None`: vacant).
    pub fn news(&self, synced: bool, same: bool, token: Option<FencingToken>) -> bool {
        synced
            && !(self.any && same)
            && !matches!((self.top, token), (Some(top), Some(t)) if t < top)
    }

    /// Records that a state with `token` was sent.
    pub fn sent(&mut self, token: Option<FencingToken>) {
        self.any = true;
        self.top = self.top.max(token);
    }
}

#[cfg(test)]
mod told_tests {
    use super::*;

    fn told(tokens: &[Option<u64>]) -> Told {
        let mut t = Told::default();
        for token in tokens {
            t.sent(token.map(FencingToken));
        }
        t
    }

    /// (tokens sent before, synced, same as the last, the view's token, to send)
    type Case = (&'static [Option<u64>], bool, bool, Option<u64>, bool);

    #[test]
    fn what_is_news() {
        let cases: [Case; 13] = [
            (&[], false, false, None, false),
            (&[], false, false, Some(3), false),
            (&[], true, false, None, true),
            // The first state is sent whatever "same" says (nothing was sent to be the same as).
            (&[], true, true, None, true),
            (&[], true, false, Some(3), true),
            (&[None], true, true, None, false),
            (&[None], true, false, Some(3), true),
            (&[Some(3)], true, true, Some(3), false),
            // A proclaimed value: same token, another state.
            (&[Some(3)], true, false, Some(3), true),
            (&[Some(3)], true, false, None, true),
            (&[Some(3)], true, false, Some(5), true),
            // Stale: tokens never go down...
            (&[Some(5)], true, false, Some(3), false),
            // ... even after a vacancy in between.
            (&[Some(5), None], true, false, Some(3), false),
        ];
        for (i, (before, synced, same, token, want)) in cases.into_iter().enumerate() {
            let got = told(before).news(synced, same, token.map(FencingToken));
            assert_eq!(
                got, want,
                "row {i}: sent {before:?}, view {synced} {same} {token:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn subscribers(f: &Fanout<u64>, n: usize) -> Vec<watch::Receiver<u64>> {
        (0..n).map(|_| f.subscribe()).collect()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn every_subscriber_sees_the_newest_state_in_bounded_shards() {
        let (tx, rx) = watch::channel(1u64);
        let f = Fanout::new(rx);
        let mut rxs = subscribers(&f, 2 * OBSERVERS_PER_WAKE + 1);
        {
            let s = f.shards.lock().unwrap();
            let sizes: Vec<usize> = s.list.iter().map(|t| t.receiver_count()).collect();
            assert_eq!(sizes, [OBSERVERS_PER_WAKE, OBSERVERS_PER_WAKE, 1]);
        }
        assert!(rxs.iter().all(|r| *r.borrow() == 1));
        tx.send(2).unwrap();
        tx.send(3).unwrap();
        for r in &mut rxs {
            r.wait_for(|v| *v == 3).await.unwrap();
        }
        // A late subscriber starts from the current state.
        assert_eq!(*f.subscribe().borrow(), 3);
    }

    /// A state sent while a pass is under way reaches every shard, the ones the pass had
    /// already passed included. Deterministic: one thread, and the relay yields after each
    /// shard, so the test's task runs between two shards.
    #[tokio::test(flavor = "current_thread")]
    async fn a_state_sent_mid_pass_reaches_the_shards_already_passed() {
        let (tx, rx) = watch::channel(0u64);
        let f = Fanout::new(rx);
        let rxs = subscribers(&f, 4 * OBSERVERS_PER_WAKE);
        let (first, last) = (&rxs[0], &rxs[rxs.len() - 1]);
        tx.send(1).unwrap();
        while *first.borrow() != 1 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            *last.borrow(),
            0,
            "the pass has not reached the last shard yet"
        );
        tx.send(2).unwrap();
        // Four shards take four yields a pass; a hundred times that is passes to spare, and
        // a relay that lost the state never delivers it however long it runs.
        for _ in 0..1_600 {
            if rxs.iter().all(|r| *r.borrow() == 2) {
                return;
            }
            tokio::task::yield_now().await;
        }
        let behind = rxs.iter().filter(|r| *r.borrow() != 2).count();
        panic!(
            "{behind} of {} observers never saw the newest state",
            rxs.len()
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn shards_of_departed_observers_are_reused_and_dropped() {
        let (tx, rx) = watch::channel(0u64);
        let f = Fanout::new(rx);
        let rxs = subscribers(&f, 2 * OBSERVERS_PER_WAKE);
        drop(rxs);
        // Room in the first shard again: no third shard.
        let mut kept = f.subscribe();
        assert_eq!(f.shards.lock().unwrap().list.len(), 2);
        tx.send(1).unwrap();
        kept.wait_for(|v| *v == 1).await.unwrap();
        // The pass pruned the shard nobody listens to.
        assert_eq!(f.shards.lock().unwrap().list.len(), 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_end_closes_every_shard_and_later_subscribers_and_is_made_once() {
        let (tx, rx) = watch::channel(0u64);
        let (end_tx, end_rx) = tokio::sync::oneshot::channel::<()>();
        let made = Arc::new(AtomicUsize::new(0));
        let f = Fanout::new(rx);
        let mut end_rx = Some(end_rx);
        let mut rxs: Vec<_> = (0..=OBSERVERS_PER_WAKE)
            .map(|_| {
                let m = made.clone();
                let end_rx = end_rx.take();
                f.subscribe_until(Box::new(move || {
                    m.fetch_add(1, Ordering::SeqCst);
                    Box::pin(async move {
                        if let Some(rx) = end_rx {
                            let _ = rx.await;
                        }
                    })
                }))
            })
            .collect();
        assert_eq!(
            made.load(Ordering::SeqCst),
            1,
            "the first subscriber's end, made once"
        );
        tx.send(5).unwrap();
        for r in &mut rxs {
            r.wait_for(|v| *v == 5).await.unwrap();
        }
        end_tx.send(()).unwrap();
        for r in &mut rxs {
            assert!(r.changed().await.is_err(), "closed by the end");
        }
        // The source is still open, but a later subscriber is closed too, at the last state.
        let mut late = f.subscribe();
        assert_eq!(*late.borrow(), 5);
        assert!(late.changed().await.is_err());
        drop(tx);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_source_closing_closes_every_shard_and_later_subscribers() {
        let (tx, rx) = watch::channel(0u64);
        let f = Fanout::new(rx);
        let mut rxs = subscribers(&f, OBSERVERS_PER_WAKE + 1);
        tx.send(7).unwrap();
        drop(tx);
        for r in &mut rxs {
            // The last state first, then the end.
            assert!(r.changed().await.is_ok());
            assert_eq!(*r.borrow_and_update(), 7);
            assert!(r.changed().await.is_err());
        }
        let mut late = f.subscribe();
        assert_eq!(*late.borrow(), 7);
        assert!(late.changed().await.is_err());
    }

    /// The point of the shards: a task woken at the change (here a chain of three hand-offs,
    /// like a new leader's `elected` on its way to the socket) runs before most observers,
    /// not after all of them. Deterministic: one thread, tokio's FIFO run queue.
    #[tokio::test(flavor = "current_thread")]
    async fn a_chain_woken_with_the_change_runs_before_most_observers() {
        let observers = 8 * OBSERVERS_PER_WAKE;
        let (tx, rx) = watch::channel(0u64);
        let f = Fanout::new(rx);
        let order = Arc::new(AtomicUsize::new(0));
        let ready = Arc::new(AtomicUsize::new(0));
        for mut r in subscribers(&f, observers) {
            let (order, ready) = (order.clone(), ready.clone());
            tokio::spawn(async move {
                ready.fetch_add(1, Ordering::SeqCst);
                let _ = r.changed().await;
                order.fetch_add(1, Ordering::SeqCst);
            });
        }
        let (start_tx, start_rx) = tokio::sync::oneshot::channel::<()>();
        let chain = {
            let order = order.clone();
            tokio::spawn(async move {
                start_rx.await.unwrap();
                let (a_tx, a_rx) = tokio::sync::oneshot::channel::<()>();
                let (b_tx, b_rx) = tokio::sync::oneshot::channel::<()>();
                tokio::spawn(async move {
                    a_rx.await.unwrap();
                    b_tx.send(()).unwrap();
                });
                let last = tokio::spawn(async move {
                    b_rx.await.unwrap();
                    order.load(Ordering::SeqCst)
                });
                a_tx.send(()).unwrap();
                last.await.unwrap()
            })
        };
        while ready.load(Ordering::SeqCst) < observers {
            tokio::task::yield_now().await;
        }
        // The change and the chain's first hand-off, at the same moment.
        tx.send(1).unwrap();
        start_tx.send(()).unwrap();
        let observers_before = chain.await.unwrap();
        assert!(
            observers_before <= 3 * OBSERVERS_PER_WAKE,
            "{observers_before} of {observers} observers ran before the chain's last hand-off"
        );
    }
}
