//! One client of each system, with the same three moves: queue up on a name (`enqueue`), wait
//! until holding (`Pending::acquired`), and give the hold back (`Hold::release`), each returning
//! only once the system has done it.
//!
//! - **zkgate**: the gateway's gRPC API (`Campaign` / `Acquire` streams, opened and spoken
//!   through the client crate's raw layer, `zkgate_client::raw`, which adds nothing on the wire). `queued` means the
//!   candidate's znode exists; release is the in-stream `resign{}` / `release{}`, done when the
//!   stream ends (after the gateway deleted the znode).
//! - **etcd**: v3election `Campaign`/`Resign` and v3lock `Lock`/`Unlock`, each client on its own
//!   lease (what `concurrency.NewSession` makes), kept alive by a `LeaseKeepAlive` stream. A
//!   waiter is queued once its key (`NAME/<lease in hex>`) exists.
//! - **raw ZK**: the classic recipe over one ZooKeeper session per client: an
//!   `EPHEMERAL_SEQUENTIAL` child of `/raw/<kind>/<name>` (the parent created as a container
//!   node on `NoNode`, so a fresh name pays for it, as the gateway pays for its own), the
//!   children listed, a data watch on the predecessor, and after it fires the children listed
//!   again. Release deletes the child.

use std::time::Duration;

use tokio::task::JoinHandle;
use tonic::transport::Channel;
use zookeeper_client as zkc;

use zkgate::proto as zpb;
use zkgate_client::raw::{AcquireStream, CampaignStream};

use crate::etcd::Session;
use crate::pb::etcdserverpb::kv_client::KvClient;
use crate::pb::etcdserverpb::RangeRequest;
use crate::pb::v3electionpb::election_client::ElectionClient as EtcdElection;
use crate::pb::v3electionpb::{CampaignRequest, LeaderKey, ResignRequest};
use crate::pb::v3lockpb::lock_client::LockClient as EtcdLock;
use crate::pb::v3lockpb::{LockRequest, UnlockRequest};

/// Session timeout of the raw recipe's clients: the gateway's default, so the two are alike.
const RAW_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Election,
    Lock,
}

/// A system under test, by address.
#[derive(Debug, Clone)]
pub enum Target {
    /// The gateway's gRPC URL.
    Zkgate(String),
    /// etcd's client URL.
    Etcd(String),
    /// ZooKeeper's connect string.
    Raw(String),
}

/// A connection several clients may share (gRPC multiplexes streams); `None` for raw ZooKeeper,
/// whose recipe is one session per client.
pub async fn channel(target: &Target) -> Option<Channel> {
    let url = match target {
        Target::Zkgate(u) | Target::Etcd(u) => u.clone(),
        Target::Raw(_) => return None,
    };
    Some(
        Channel::from_shared(url)
            .expect("URL")
            .connect()
            .await
            .expect("connect"),
    )
}

/// One client: a gRPC channel (own or shared) plus, for etcd, its own lease; for raw ZK its
/// own session.
// At most a few thousand clients live at once (W5), so boxing the etcd variant saves nothing.
#[allow(clippy::large_enum_variant)]
pub enum Client {
    /// The zkgate client crate's raw streams over a channel.
    Zkgate(Channel),
    Etcd {
        session: Session,
        el: EtcdElection<Channel>,
        lock: EtcdLock<Channel>,
        kv: KvClient<Channel>,
    },
    Raw {
        zk: zkc::Client,
    },
}

impl Client {
    /// A client on its own connection.
    pub async fn connect(target: &Target) -> Client {
        let ch = channel(target).await;
        Client::on(target, ch.as_ref()).await
    }

    /// A client on `ch` (from [`channel`]), which it may share with others.
    pub async fn on(target: &Target, ch: Option<&Channel>) -> Client {
        match target {
            Target::Zkgate(_) => Client::Zkgate(ch.expect("a channel").clone()),
            Target::Etcd(_) => {
                let ch = ch.expect("a channel").clone();
                Client::Etcd {
                    session: Session::grant(ch.clone()).await,
                    el: EtcdElection::new(ch.clone()),
                    lock: EtcdLock::new(ch.clone()),
                    kv: KvClient::new(ch),
                }
            }
            Target::Raw(connect) => {
                let zk = zkc::Client::connector()
                    .with_session_timeout(RAW_SESSION_TIMEOUT)
                    .connect(connect)
                    .await
                    .expect("connect to ZooKeeper");
                Client::Raw { zk }
            }
        }
    }

    /// Ends the client's session (etcd: revokes its lease; raw ZK: closes the session).
    pub async fn close(self) {
        match self {
            Client::Zkgate(_) => {}
            Client::Etcd { session, .. } => session.close().await,
            Client::Raw { zk } => drop(zk),
        }
    }

    /// Queue up and wait until holding.
    pub async fn hold(&mut self, kind: Kind, name: &str) -> Hold {
        match self {
            // etcd's Campaign/Lock return once held; no need to see the key first.
            Client::Etcd {
                session, el, lock, ..
            } => match kind {
                Kind::Election => Hold::EtcdElection(
                    etcd_campaign(el, name, session.id)
                        .await
                        .expect("etcd Campaign"),
                ),
                Kind::Lock => {
                    Hold::EtcdLock(etcd_lock(lock, name, session.id).await.expect("etcd Lock"))
                }
            },
            _ => self.enqueue(kind, name, true).await.acquired().await,
        }
    }

    /// Queue up on `name`: returns once this client is in the queue (and may already hold).
    /// For etcd, `confirm: false` returns as soon as the request is sent, without reading the
    /// key back (W5 counts the keys of all its waiters at once instead).
    pub async fn enqueue(&mut self, kind: Kind, name: &str, confirm: bool) -> Pending {
        match self {
            Client::Zkgate(ch) => match kind {
                Kind::Election => {
                    let join = zpb::Join {
                        ping_seq: 0,
                        election: name.into(),
                        candidate: "bench".into(),
                        value: Vec::new(),
                    };
                    let mut s = CampaignStream::join(ch.clone(), join)
                        .await
                        .expect("Campaign");
                    match s.event().await.expect("Campaign stream") {
                        Some(zpb::campaign_response::Event::Queued(_)) => {}
                        other => panic!("zkgate Campaign: first message {other:?}"),
                    }
                    Pending::ZkElection(s)
                }
                Kind::Lock => {
                    let acquire = zpb::AcquireLock {
                        name: name.into(),
                        owner: "bench".into(),
                        ..Default::default()
                    };
                    let mut s = AcquireStream::acquire(ch.clone(), acquire)
                        .await
                        .expect("Acquire");
                    match s.event().await.expect("Acquire stream") {
                        Some(zpb::acquire_response::Event::Queued(_)) => {}
                        other => panic!("zkgate Acquire: first message {other:?}"),
                    }
                    Pending::ZkLock(s)
                }
            },
            Client::Etcd {
                session,
                el,
                lock,
                kv,
            } => {
                let id = session.id;
                let task = match kind {
                    Kind::Election => {
                        let mut el = el.clone();
                        let name = name.to_owned();
                        tokio::spawn(async move {
                            etcd_campaign(&mut el, &name, id)
                                .await
                                .map(Hold::EtcdElection)
                        })
                    }
                    Kind::Lock => {
                        let mut lock = lock.clone();
                        let name = name.to_owned();
                        tokio::spawn(async move {
                            etcd_lock(&mut lock, &name, id).await.map(Hold::EtcdLock)
                        })
                    }
                };
                // concurrency.Election and Mutex put "NAME/<lease in hex>" first, then wait.
                let key = format!("{name}/{id:x}").into_bytes();
                while confirm && etcd_count(kv, &key, None).await == 0 {
                    tokio::time::sleep(Duration::from_micros(500)).await;
                }
                Pending::Etcd(task)
            }
            Client::Raw { zk } => raw_enqueue(zk, kind, name).await,
        }
    }
}

/// Keys under `prefix` (just `prefix` itself with no `range_end`), serializable read.
pub async fn etcd_count(kv: &mut KvClient<Channel>, key: &[u8], range_end: Option<Vec<u8>>) -> i64 {
    kv.range(RangeRequest {
        key: key.to_vec(),
        range_end: range_end.unwrap_or_default(),
        count_only: true,
        serializable: true,
        ..Default::default()
    })
    .await
    .expect("etcd Range")
    .into_inner()
    .count
}

/// The key range of everything under `NAME/` (etcd's election and lock keys of `name`).
pub fn etcd_prefix(name: &str) -> (Vec<u8>, Vec<u8>) {
    (
        format!("{name}/").into_bytes(),
        format!("{name}0").into_bytes(),
    )
}

async fn etcd_campaign(
    el: &mut EtcdElection<Channel>,
    name: &str,
    lease: i64,
) -> Result<LeaderKey, tonic::Status> {
    Ok(el
        .campaign(CampaignRequest {
            name: name.as_bytes().to_vec(),
            lease,
            value: b"bench".to_vec(),
        })
        .await?
        .into_inner()
        .leader
        .expect("a leader key"))
}

async fn etcd_lock(
    lock: &mut EtcdLock<Channel>,
    name: &str,
    lease: i64,
) -> Result<Vec<u8>, tonic::Status> {
    Ok(lock
        .lock(LockRequest {
            name: name.as_bytes().to_vec(),
            lease,
        })
        .await?
        .into_inner()
        .key)
}

fn anyone(mode: zkc::CreateMode) -> zkc::CreateOptions<'static> {
    mode.with_acls(zkc::Acls::anyone_all())
}

/// Creates `/raw`, `/raw/election` and `/raw/lock` (once per run, before any measurement).
pub async fn raw_prepare(connect: &str) {
    let zk = zkc::Client::connect(connect)
        .await
        .expect("connect to ZooKeeper");
    for p in ["/raw", "/raw/election", "/raw/lock"] {
        match zk
            .create(p, b"", &anyone(zkc::CreateMode::Persistent))
            .await
        {
            Ok(_) | Err(zkc::Error::NodeExists) => {}
            Err(e) => panic!("create {p}: {e}"),
        }
    }
}

fn raw_parent(kind: Kind, name: &str) -> String {
    match kind {
        Kind::Election => format!("/raw/election/{name}"),
        Kind::Lock => format!("/raw/lock/{name}"),
    }
}

async fn raw_enqueue(zk: &zkc::Client, kind: Kind, name: &str) -> Pending {
    let parent = raw_parent(kind, name);
    let prefix = format!("{parent}/n-");
    let member = anyone(zkc::CreateMode::EphemeralSequential);
    let seq = match zk.create(&prefix, b"", &member).await {
        Ok((_, seq)) => seq,
        Err(zkc::Error::NoNode) => {
            // A fresh name: make the parent (a container, reaped by the server once empty, as
            // the gateway's election folders are), then the member.
            match zk
                .create(&parent, b"", &anyone(zkc::CreateMode::Container))
                .await
            {
                Ok(_) | Err(zkc::Error::NodeExists) => {}
                Err(e) => panic!("create {parent}: {e}"),
            }
            zk.create(&prefix, b"", &member)
                .await
                .unwrap_or_else(|e| panic!("create {prefix}: {e}"))
                .1
        }
        Err(e) => panic!("create {prefix}: {e}"),
    };
    let mut pending = RawPending {
        zk: zk.clone(),
        parent,
        me: format!("n-{seq}"),
        watch: None,
    };
    pending.check().await;
    Pending::Raw(pending)
}

/// A member of the raw recipe's queue.
pub struct RawPending {
    zk: zkc::Client,
    parent: String,
    me: String,
    /// The watch on the predecessor; `None` once this member is first.
    watch: Option<zkc::OneshotWatcher>,
}

impl RawPending {
    /// Lists the children; first → holding (`watch` None); otherwise watches the predecessor
    /// (and lists again if it is already gone).
    async fn check(&mut self) {
        loop {
            let parent = &self.parent;
            let mut children = self
                .zk
                .list_children(parent)
                .await
                .unwrap_or_else(|e| panic!("list {parent}: {e}"));
            // All members share the prefix "n-" and a fixed-width sequence, so names sort.
            children.sort();
            let i = children
                .iter()
                .position(|c| *c == self.me)
                .unwrap_or_else(|| panic!("{parent}/{} is gone", self.me));
            if i == 0 {
                self.watch = None;
                return;
            }
            let pred = format!("{parent}/{}", children[i - 1]);
            match self.zk.get_and_watch_data(&pred).await {
                Ok((_, _, w)) => {
                    self.watch = Some(w);
                    return;
                }
                Err(zkc::Error::NoNode) => continue,
                Err(e) => panic!("watch {pred}: {e}"),
            }
        }
    }

    fn path(&self) -> String {
        format!("{}/{}", self.parent, self.me)
    }
}

/// Queued, not necessarily holding yet.
pub enum Pending {
    ZkElection(CampaignStream),
    ZkLock(AcquireStream),
    Etcd(JoinHandle<Result<Hold, tonic::Status>>),
    Raw(RawPending),
}

impl Pending {
    /// Waits until holding.
    pub async fn acquired(self) -> Hold {
        match self {
            Pending::ZkElection(mut s) => {
                use zpb::campaign_response::Event;
                loop {
                    match s.event().await.expect("Campaign stream") {
                        Some(Event::Elected(e)) => {
                            let token = e.leader.map_or(0, |l| l.fencing_token);
                            return Hold::ZkElection(s, token);
                        }
                        Some(Event::Queued(_) | Event::Heartbeat(_) | Event::Proclaimed(_)) => {}
                        other => panic!("zkgate Campaign: {other:?} while waiting"),
                    }
                }
            }
            Pending::ZkLock(mut s) => {
                use zpb::acquire_response::Event;
                loop {
                    match s.event().await.expect("Acquire stream") {
                        Some(Event::Acquired(_)) => return Hold::ZkLock(s),
                        Some(Event::Queued(_) | Event::Heartbeat(_)) => {}
                        other => panic!("zkgate Acquire: {other:?} while waiting"),
                    }
                }
            }
            Pending::Etcd(task) => task
                .await
                .expect("etcd waiter")
                .expect("etcd Campaign/Lock"),
            Pending::Raw(mut p) => {
                while let Some(w) = p.watch.take() {
                    w.changed().await;
                    p.check().await;
                }
                let path = p.path();
                Hold::Raw { zk: p.zk, path }
            }
        }
    }
}

/// Holding: leader or lock owner.
pub enum Hold {
    /// The stream and the fencing token.
    ZkElection(CampaignStream, u64),
    ZkLock(AcquireStream),
    EtcdElection(LeaderKey),
    EtcdLock(Vec<u8>),
    Raw {
        zk: zkc::Client,
        path: String,
    },
}

impl Hold {
    /// The zkgate leader's fencing token (0 for the others).
    pub fn token(&self) -> u64 {
        match self {
            Hold::ZkElection(_, token) => *token,
            _ => 0,
        }
    }

    /// Gives the hold back; returns once the system has removed it. `client` is the client
    /// that holds it (etcd's Resign/Unlock go through its channel).
    pub async fn release(self, client: &mut Client) {
        match self {
            Hold::ZkElection(mut s, _) => {
                assert!(s.resign(), "send resign");
                while let Ok(Some(_)) = s.message().await {}
            }
            Hold::ZkLock(mut s) => {
                assert!(s.release(), "send release");
                while let Ok(Some(_)) = s.message().await {}
            }
            Hold::EtcdElection(leader) => {
                let Client::Etcd { el, .. } = client else {
                    panic!("an etcd hold released through another client")
                };
                el.resign(ResignRequest {
                    leader: Some(leader),
                })
                .await
                .expect("etcd Resign");
            }
            Hold::EtcdLock(key) => {
                let Client::Etcd { lock, .. } = client else {
                    panic!("an etcd hold released through another client")
                };
                lock.unlock(UnlockRequest { key })
                    .await
                    .expect("etcd Unlock");
            }
            Hold::Raw { zk, path } => zk
                .delete(&path, None)
                .await
                .unwrap_or_else(|e| panic!("delete {path}: {e}")),
        }
    }
}
