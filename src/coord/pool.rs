//! The session pool as the recipes see it: which session serves a queue, the stream tracker a
//! drain waits on, and the board every member joins. [`Coordinator`](super::Coordinator) owns
//! it (and the sessions' supervisors); the recipes in `election`, `lock`, `member` and
//! `observe_many` take it, so none of them needs the facade that calls them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tokio_util::task::TaskTracker;

use super::board::Board;
use super::config::CoordConfig;
use super::error::{CoordError, Retry};
use super::session::{Slot, ZkSession};
use super::types::{QueueKind, QueueName};

/// The pool's sessions (one slot each, refilled by its supervisor), and what every stream
/// served over them shares.
#[derive(Debug)]
pub struct SessionPool {
    pub(super) cfg: Arc<CoordConfig>,
    slots: Vec<Slot>,
    next: AtomicUsize,
    /// Cancelled first on shutdown: streams end `UNAVAILABLE`.
    pub(super) draining: CancellationToken,
    /// Every long stream holds a token, so a drain can wait for them to finish.
    pub(super) streams: TaskTracker,
    /// This gateway's holders and waiters per name (per-name metrics, `/ui`).
    pub(super) board: Arc<Board>,
}

impl SessionPool {
    pub(super) fn new(cfg: Arc<CoordConfig>, slots: Vec<Slot>, board: Arc<Board>) -> Self {
        Self {
            cfg,
            slots,
            next: AtomicUsize::new(0),
            draining: CancellationToken::new(),
            streams: TaskTracker::new(),
            board,
        }
    }

    /// True while at least one pool session is connected.
    pub fn is_connected(&self) -> bool {
        self.slots
            .iter()
            .any(|s| s.borrow().as_ref().is_some_and(|s| s.is_connected()))
    }

    /// True while at least one pool session serves: connected, and not stranded on a diverged
    /// server ([`super::divergence`]). Health and `/readyz` follow this.
    pub fn is_serving(&self) -> bool {
        self.slots
            .iter()
            .any(|s| s.borrow().as_ref().is_some_and(|s| s.is_serving()))
    }

    /// Resolves whenever any slot changes (a session appears, goes, its link changes, or it is
    /// stranded or no longer).
    pub async fn connection_changed(&self) {
        let mut futs = Vec::new();
        for s in &self.slots {
            // Clones inherit the stored receiver's last-seen version, which nobody updates:
            // mark them seen, or `changed()` would return at once and callers would spin.
            let mut slot = s.clone();
            let link = slot.borrow_and_update().as_ref().map(|s| {
                let mut link = s.link();
                link.borrow_and_update();
                let mut stranded = s.stranded_changes();
                stranded.borrow_and_update();
                (link, stranded)
            });
            futs.push(Box::pin(async move {
                match link {
                    Some((mut link, mut stranded)) => {
                        tokio::select! {
                            _ = slot.changed() => {},
                            _ = link.changed() => {},
                            _ = stranded.changed() => {},
                        }
                    }
                    None => {
                        let _ = slot.changed().await;
                    }
                }
            }));
        }
        futures::future::select_all(futs).await;
    }

    /// A connected session for a request that concerns no queue, round-robin over the pool.
    ///
    /// # Errors
    /// `Draining` during shutdown, `Unavailable` when no session is connected.
    pub fn session(&self) -> Result<Arc<ZkSession>, CoordError> {
        self.session_from(self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// The session of queue `kind`/`name`: every stream and read of one queue goes to the same
    /// session of the pool while it is connected (the next connected one otherwise), so the
    /// gateway keeps one watch and one queue actor per queue — not one per session — and a
    /// queue's members see one order of events. Queues, not streams, are spread over the pool.
    ///
    /// # Errors
    /// As [`SessionPool::session`].
    pub fn session_for(
        &self,
        kind: QueueKind,
        name: &QueueName,
    ) -> Result<Arc<ZkSession>, CoordError> {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        (kind, name.as_str()).hash(&mut h);
        self.session_from(h.finish() as usize)
    }

    /// The first serving session from slot `start` on: connected, and not stranded on a
    /// diverged server, whose view can neither grant nor be trusted by a read.
    ///
    /// # Errors
    /// As [`SessionPool::session`]; `Unavailable` (`Retry::Stranded`) when every connected
    /// session is stranded.
    pub(super) fn session_from(&self, start: usize) -> Result<Arc<ZkSession>, CoordError> {
        if self.draining.is_cancelled() {
            return Err(CoordError::Draining);
        }
        let n = self.slots.len();
        let mut stranded = false;
        for i in 0..n {
            if let Some(s) = self.slots[(start + i) % n].borrow().as_ref() {
                if s.is_serving() {
                    return Ok(s.clone());
                }
                stranded |= s.is_connected();
            }
        }
        if stranded {
            return Err(Retry::Stranded.into());
        }
        Err(Retry::NotConnected(self.cfg.zk.clone()).into())
    }

    /// A token every long stream holds, so a drain can wait for them to finish.
    pub(super) fn stream_token(&self) -> TaskTrackerToken {
        self.streams.token()
    }
}
