//! The loop of an actor that follows a folder through one persistent watch and lists it again
//! after changes: the elections folder for `ObserveMany` ([`super::directory`]) and the root
//! for `/ui` ([`super::fleet`]). Both wait on the same four things — the last viewer gone, a
//! watch event, a change of the session's link, the retry timer while a listing failed — then
//! take every event already queued into one round of work; only what an event means and what
//! a round does differ, and each actor says that through [`FolderActor`].

use std::future::Future;

use futures::FutureExt;
use tokio::sync::watch;
use zookeeper_client as zkc;

use super::link::{Link, RELIST_RETRY};

/// The fields the loop waits on, borrowed apart so that one `select!` can wait on all of them.
pub(super) struct Waits<'a, V> {
    /// The view's sender: the actor stops once every receiver is gone.
    pub tx: &'a watch::Sender<V>,
    pub watcher: &'a mut zkc::PersistentWatcher,
    pub link: &'a mut watch::Receiver<Link>,
    /// False once the link's sender is gone (the session is over).
    pub link_open: &'a mut bool,
}

/// An actor that [`run`] drives.
pub(super) trait FolderActor: Send + 'static {
    type View: Send + Sync + 'static;

    fn waits(&mut self) -> Waits<'_, Self::View>;

    /// Whether work failed and is to be tried again after [`RELIST_RETRY`] (while the link is
    /// up).
    fn retry_pending(&self) -> bool;

    /// Applies a watch event; false when the session is over.
    fn on_event(&mut self, ev: zkc::WatchedEvent) -> bool;

    /// The link changed (its sender is still there); false to stop.
    fn on_link_change(&mut self) -> bool;

    /// One round of work after a wake-up, every queued event applied.
    fn work(&mut self) -> impl Future<Output = ()> + Send;
}

/// What woke the loop.
enum Wake {
    Stop,
    Event(zkc::WatchedEvent),
    Link,
    Retry,
}

/// Runs `actor` until its last viewer is gone or its session is over.
pub(super) async fn run<A: FolderActor>(mut actor: A) {
    loop {
        let retry = actor.retry_pending();
        let wake = {
            let waits = actor.waits();
            tokio::select! {
                biased;
                () = waits.tx.closed() => Wake::Stop,
                ev = waits.watcher.changed() => Wake::Event(ev),
                r = waits.link.changed(), if *waits.link_open => {
                    *waits.link_open = r.is_ok();
                    if *waits.link_open { Wake::Link } else { Wake::Stop }
                }
                // Failed work is tried again while the link is up.
                () = tokio::time::sleep(RELIST_RETRY), if retry => Wake::Retry,
            }
        };
        let go_on = match wake {
            Wake::Stop => false,
            Wake::Event(ev) => actor.on_event(ev),
            Wake::Link => actor.on_link_change(),
            Wake::Retry => true,
        };
        if !go_on {
            return;
        }
        // Every event already here is one round's worth.
        while let Some(ev) = actor.waits().watcher.changed().now_or_never() {
            if !actor.on_event(ev) {
                return;
            }
        }
        actor.work().await;
    }
}
