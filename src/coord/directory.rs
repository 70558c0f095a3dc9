//! The elections folder as one session sees it: which elections exist, for `ObserveMany`.
//!
//! One actor per session, started by the first `ObserveMany` stream and stopped with the last
//! ([`DirectoryRegistry`]). It holds one *non-recursive* persistent watch on
//! `/<root>/elections` — ZooKeeper then tells it when an election znode appears or goes, and
//! nothing about the members inside (the per-election queue actors watch those) — and lists
//! the folder once per such change. So the gateway's ZooKeeper cost of a prefix is one
//! `getChildren` per election created or removed, shared by every `ObserveMany` stream of the
//! session, and nothing per leader change beyond what the elections' own queue actors (shared
//! with `Observe` and the candidates) already pay (G4).
//!
//! After any change of the session's link the published view is marked unsynced and the folder
//! is listed again once the link is up — persistent watches miss events while disconnected
//! (ZOOKEEPER-4698), and the library does not restore them on reconnect, so after a reconnect
//! event the watch is placed again before that listing (as the queue actor does).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::watch;
use zookeeper_client as zkc;
use zookeeper_client::{EventType, SessionState};

use super::error::CoordError;
use super::folder_watch::{self, FolderActor, Waits};
use super::link::Link;
use super::zk::Zk;

/// The elections that exist, as of the newest listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirectoryView {
    /// False until the first listing, and from a link change until the next listing.
    pub synced: bool,
    /// The children of the elections folder (not validated: foreign znodes may be there).
    pub names: Arc<BTreeSet<String>>,
}

/// A running directory actor; it stops when the last handle is dropped.
#[derive(Debug)]
pub struct Directory {
    view: watch::Receiver<DirectoryView>,
}

impl Directory {
    pub fn view(&self) -> watch::Receiver<DirectoryView> {
        self.view.clone()
    }
}

/// At most one [`Directory`] per session, started on first use.
#[derive(Debug, Default)]
pub struct DirectoryRegistry(Mutex<Weak<Directory>>);

impl DirectoryRegistry {
    /// The session's directory, started (folder made, watch placed, folder listed) on first use.
    ///
    /// # Errors
    /// ZooKeeper errors making the folder, placing the watch or listing the folder.
    pub async fn get_or_start(
        &self,
        zk: &Zk,
        root: &str,
        link: watch::Receiver<Link>,
    ) -> Result<Arc<Directory>, CoordError> {
        if let Some(d) = self.running() {
            return Ok(d);
        }
        let d = start(zk.clone(), root, link).await?;
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        // Another stream may have started one meanwhile: keep the first, drop ours.
        if let Some(existing) = slot.upgrade() {
            return Ok(existing);
        }
        *slot = Arc::downgrade(&d);
        Ok(d)
    }

    fn running(&self) -> Option<Arc<Directory>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).upgrade()
    }
}

async fn start(
    zk: Zk,
    root: &str,
    mut link: watch::Receiver<Link>,
) -> Result<Arc<Directory>, CoordError> {
    let folder = super::types::QueueKind::Election.folder();
    // The folder is persistent and made once: a watch on it then always has a node to follow.
    zk.ensure_folders(root, folder).await?;
    let path = format!("{root}/{folder}");
    link.borrow_and_update();
    let watcher = zk.watch_folder(&path).await?;
    let names = zk.list_children(&path).await?;
    let (tx, rx) = watch::channel(DirectoryView {
        synced: true,
        names: Arc::new(names.into_iter().collect()),
    });
    let actor = DirectoryActor {
        zk,
        path,
        link,
        link_open: true,
        watcher,
        rewatch: false,
        dirty: false,
        tx,
    };
    tokio::spawn(folder_watch::run(actor));
    Ok(Arc::new(Directory { view: rx }))
}

struct DirectoryActor {
    zk: Zk,
    path: String,
    link: watch::Receiver<Link>,
    link_open: bool,
    watcher: zkc::PersistentWatcher,
    /// A reconnect may have dropped the watch: it is placed again before the next listing.
    rewatch: bool,
    /// The folder changed (or the link did) since the last listing.
    dirty: bool,
    tx: watch::Sender<DirectoryView>,
}

impl FolderActor for DirectoryActor {
    type View = DirectoryView;

    fn waits(&mut self) -> Waits<'_, DirectoryView> {
        Waits {
            tx: &self.tx,
            watcher: &mut self.watcher,
            link: &mut self.link,
            link_open: &mut self.link_open,
        }
    }

    fn retry_pending(&self) -> bool {
        self.dirty
    }

    fn on_event(&mut self, ev: zkc::WatchedEvent) -> bool {
        DirectoryActor::on_event(self, ev)
    }

    fn on_link_change(&mut self) -> bool {
        self.unsynced();
        true
    }

    async fn work(&mut self) {
        if self.dirty && matches!(*self.link.borrow_and_update(), Link::Connected) {
            self.relist().await;
        }
    }
}

impl DirectoryActor {
    /// Applies a watch event; false when the session is over.
    fn on_event(&mut self, ev: zkc::WatchedEvent) -> bool {
        match ev.event_type {
            EventType::Session => match ev.session_state {
                SessionState::SyncConnected | SessionState::ConnectedReadOnly => {
                    self.rewatch = true;
                    self.unsynced();
                }
                SessionState::Disconnected => {}
                _ => return false,
            },
            EventType::NodeChildrenChanged | EventType::NodeCreated | EventType::NodeDeleted => {
                self.dirty = true;
            }
            EventType::NodeDataChanged => {}
        }
        true
    }

    fn unsynced(&mut self) {
        self.dirty = true;
        self.tx
            .send_if_modified(|v| std::mem::replace(&mut v.synced, false));
    }

    async fn relist(&mut self) {
        if self.rewatch {
            match self.zk.watch_folder(&self.path).await {
                // The old watcher goes after the new one exists (no RemoveWatches is sent).
                Ok(w) => {
                    self.watcher = w;
                    self.rewatch = false;
                }
                Err(e) => {
                    tracing::debug!(folder = %self.path, error = %e, "placing the folder watch again failed; retrying");
                    return;
                }
            }
        }
        match self.zk.list_children(&self.path).await {
            Ok(names) => {
                self.dirty = false;
                let names: BTreeSet<String> = names.into_iter().collect();
                self.tx.send_if_modified(|v| {
                    let changed = !v.synced || *v.names != names;
                    if changed {
                        *v = DirectoryView {
                            synced: true,
                            names: Arc::new(names),
                        };
                    }
                    changed
                });
            }
            Err(e) => {
                tracing::debug!(folder = %self.path, error = %e, "listing the elections folder failed; retrying");
            }
        }
    }
}
