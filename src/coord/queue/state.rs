//! The queue's pure core: what one session's actor knows of a queue and what it decides,
//! without any I/O. [`QueueState::apply`] takes one [`Event`] — a watch event, a listing, a
//! registration, the answer to a read it asked for, the link's state — and returns the
//! [`Action`]s it calls for: reads to make (their answers come back as events), members to
//! signal, views to publish. The actor around it (`super::Actor`) only performs them, so every
//! rule here is tested without a network.
//!
//! # Who holds
//! [`HolderScan`] states the one rule that decides which members hold (lead, own a permit,
//! share a read lock); the state confirms each local member the moment the rule admits it and
//! signals only that member, so a change wakes exactly the members that now hold (G4).
//! Elections additionally keep the observers' view of the head ([`QueueView`]).
//!
//! # Confirmation costs no write
//! "Elected" and "acquired" mean confirmed: the gateway has seen its own znode present and
//! owned by its current session while the rule admits it. ZooKeeper answers one session's
//! requests and sends its watch events in one order, so the view is exactly the queue as of
//! the newest reply or event. A member that holds the moment it registers is confirmed by its
//! own create reply (the view then includes every member made before it). Neither this nor
//! any other confirmation writes, so an acquisition costs ZooKeeper the create and the delete
//! — the raw recipe's two log writes — and no other gateway hears of the confirmation.
//! Nothing is confirmed while the link is suspended: a follower cut off from its quorum still
//! answers reads (G2).
//!
//! # A hand-over costs no read
//! A member admitted *later* — its predecessor's deletion event arrives — is confirmed by its
//! create reply too, as long as the view has stayed synced with the link up since it
//! registered; otherwise by a read of its znode on the same session (present, and ours:
//! `ephemeralOwner` is this session, CURATOR-696). Why the create reply is proof enough then:
//! * *Ours*: the create was answered on this session, so the znode's `ephemeralOwner` is this
//!   session, for as long as it exists; its creation zxid, the fencing token, never changes.
//! * *Present*: the queue's persistent watch has been in place on this session since before
//!   the member registered, and ZooKeeper sends one session's events in zxid order. Any
//!   deletion of the znode ordered before the predecessor's deletion would have arrived first
//!   and taken the member out of the view; one ordered after it is the same race a read has
//!   (the znode may go the moment after the read too), ended the same way (its event, `Gone`).
//!   A znode with the same name made by someone else needs ours deleted first: seen likewise.
//! * *Not stale*: the read would be answered by the same server the events come from, so it
//!   knows nothing the event stream does not (ZOOKEEPER-5010 ghosts are handled by
//!   [`QueueState::prove_blockers`] for both).
//!
//! Any change of the link ([`Event::Unsynced`], a reconcile with the link down) forgets the
//! kept create replies of every local member not yet confirmed, and a registration decided
//! after a listing keeps its reply only if it holds at once: after a gap in the event stream,
//! a read proves it again. So the successor of a release on the same gateway is granted from
//! the predecessor's deletion event (which ZooKeeper sends before the delete's reply), and one
//! on another gateway from the one event its gateway receives: a hand-over costs the delete
//! and one event, where the raw recipe pays the delete, one event and a `getChildren`.
//!
//! # Never trusted stale
//! Persistent watches miss events while the session is disconnected, so after any change of
//! the link (a suspension, a reconnect) the view is *unsynced* ([`Event::Unsynced`]): until a
//! listing made with the link up succeeds ([`Action::List`]), nothing is confirmed, no
//! registration is answered and nothing is published. A confirmation is applied only if the
//! link is still up when its answer arrives (the actor reports a link that moved meanwhile as
//! [`Event::Unsynced`] before the answer), never on the strength of the link when the read
//! was sent: an ownership read answered after a suspension must not grant after `suspended`.
//!
//! # Members by name
//! The view is keyed by the full node name, in sequence order: a child that reuses a member's
//! sequence number (someone else's znode with the same ten-digit suffix) can never replace
//! that member. Children that are not members of our naming scheme
//! ([`MemberName::parse`]) are never in the view, and a child whose stat shows it is not
//! ephemeral (so no member's) — an election's head when it is read, a lock member ahead of a
//! newcomer when its permits are read — is ignored for as long as it exists.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use prost::bytes::Bytes;

use tokio::time::Instant;
use zookeeper_client as zkc;

use crate::coord::record::{ms_to_time, NodeRecord};
use crate::coord::types::{FencingToken, Holder, MemberMode, MemberName, QueueKind, QueueName};

/// Where a member sits in the view: its sequence number, then its full node name (two children
/// with the same sequence number are two entries, never one replacing the other).
type Key = (i64, String);

fn key(m: &MemberName) -> Key {
    (m.sequence, m.node_name())
}

/// What observers see of a queue.
///
/// Made whole by [`QueueView::new`] and never changed in place: each state carries its own
/// [`encoded`](QueueView::encoded) form, which only a new state may replace, so a state can
/// never be sent with the bytes of another.
#[derive(Debug, Clone, Default)]
pub struct QueueView {
    /// False until the actor has listed the queue once.
    synced: bool,
    /// The confirmed leader; `None` while vacant (or while a new head awaits confirmation).
    leader: Option<Holder>,
    /// This state as sent to observers, encoded by the first that sends it and shared with the
    /// rest (issue 21: 10,000 observers of one election each encoded the same message).
    encoded: Arc<OnceLock<Bytes>>,
    /// The queue's session is stranded on a diverged server (`coord::divergence`): observers
    /// end `UNAVAILABLE` and observe again elsewhere. Shown by the actor, not by the state.
    stranded: bool,
}

impl QueueView {
    pub fn new(synced: bool, leader: Option<Holder>) -> Self {
        QueueView {
            synced,
            leader,
            encoded: Arc::default(),
            stranded: false,
        }
    }

    /// What observers of a stranded session are shown: nothing but that it is stranded.
    pub fn stranded() -> Self {
        QueueView {
            stranded: true,
            ..Self::new(true, None)
        }
    }

    /// Whether the queue's session is stranded on a diverged server ([`QueueView::stranded`]).
    pub fn is_stranded(&self) -> bool {
        self.stranded
    }

    /// False until the actor has listed the queue once.
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// The confirmed leader; `None` while vacant (or while a new head awaits confirmation).
    pub fn leader(&self) -> &Option<Holder> {
        &self.leader
    }

    /// This state encoded by `encode`, which runs once per state, for its first observer; every
    /// other observer (of this gateway) shares its bytes. Every caller passes the same encoding
    /// (`api::election`'s `Observe`).
    pub fn encoded(&self, encode: impl FnOnce(&Option<Holder>) -> Bytes) -> Bytes {
        self.encoded.get_or_init(|| encode(&self.leader)).clone()
    }
}

/// Equal states, whatever their encoded forms (which are the same bytes whenever made).
impl PartialEq for QueueView {
    fn eq(&self, other: &Self) -> bool {
        self.synced == other.synced
            && self.leader == other.leader
            && self.stranded == other.stranded
    }
}

impl Eq for QueueView {}

/// What the actor tells one local member.
#[derive(Debug, Clone, PartialEq)]
pub enum MemberSignal {
    /// Confirmed holder (ownership checked): the head of an election, or a lock holder.
    /// `failover` is, for elections, the time from the predecessor's disappearance, when this
    /// gateway saw it.
    Holds {
        holder: Holder,
        failover: Option<Duration>,
    },
    /// The leader's value changed.
    Proclaimed(Holder),
    /// The znode was deleted by someone else (a `Resign` by lease on any gateway).
    Gone,
    /// A `Resign`/`Release` by lease (on any gateway) asked for this member to end: its
    /// record carries `end_requested_ms`. Sent by the actor, not by this state (the state
    /// never reads a local member's data); the member's stream ends the hold by G3c.
    EndRequested,
    /// The session is stranded on a diverged server ([`QueueState::set_session_stranded`])
    /// and this member does not hold: its stream ends `UNAVAILABLE` and deletes its znode, so
    /// that the queue moves on without it. The member is forgotten, as after `Gone`.
    Unserved,
}

/// A member's place in the queue when it registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enlisted {
    /// Members ahead of it.
    pub ahead: u32,
    /// Whether it already holds by the actor's current view (it is confirmed and signalled
    /// right after). A try-lock succeeds exactly when this is true.
    pub holds: bool,
}

/// Why a member could not be registered. Its znode is left for the caller to delete.
#[derive(Debug)]
pub enum Refusal {
    /// The znode is already gone.
    Gone,
    /// A lock member ahead agreed to `recorded` permits, not to this member's count.
    PermitMismatch { recorded: u32 },
    /// Reading the members ahead (to compare permits) failed.
    Zk(zkc::Error),
    /// The session is stranded on a diverged server ([`QueueState::set_session_stranded`]).
    Stranded,
}

/// A member znode this session has just created (or found again after a lost create reply),
/// ready to register with its queue.
#[derive(Debug, Clone)]
pub struct Created {
    pub member: MemberName,
    pub record: NodeRecord,
    /// The znode's creation zxid — its fencing token — when the reply carried it.
    pub czxid: Option<i64>,
    /// An attempt of this create failed on the link before it succeeded or was found again:
    /// ZooKeeper may apply that attempt too, even after the search found nothing, so another
    /// znode with this protected id may show up and is deleted ([`Strays`]).
    pub retried: bool,
}

/// What an ownership check found.
#[derive(Debug)]
pub enum Ownership {
    /// Present and ours, created at this zxid.
    Ours(i64),
    /// Present but another session's.
    Foreign(i64),
    Gone,
    Failed(zkc::Error),
}

/// A local member the rule admits, to be proven ours: by its create reply's zxid while the
/// view has stayed whole since it registered, else by a read of its znode on this session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub sequence: i64,
    pub node: String,
    pub czxid: Option<i64>,
}

/// What a read of a member's data returned (the parts of its stat the queue uses).
#[derive(Debug, Clone, PartialEq)]
pub struct MemberData {
    pub record: NodeRecord,
    pub czxid: i64,
    pub mzxid: i64,
    /// Creation time, ms since the epoch.
    pub ctime: i64,
    /// Whether the znode is ephemeral (every member is); a persistent child with a member's
    /// name is not a member and is ignored.
    pub ephemeral: bool,
}

impl MemberData {
    pub fn from_stat(record: NodeRecord, stat: &zkc::Stat) -> Self {
        Self {
            record,
            czxid: stat.czxid,
            mzxid: stat.mzxid,
            ctime: stat.ctime,
            ephemeral: stat.ephemeral_owner != 0,
        }
    }

    /// `since` for a holder this gateway did not see take office (see `record::since`).
    fn since(&self) -> SystemTime {
        self.record
            .elected_at()
            .unwrap_or_else(|| ms_to_time(self.ctime))
    }
}

/// Everything that can happen to a queue, as the actor reports it.
#[derive(Debug)]
pub enum Event {
    /// A listing of the queue's children; `None` when its znode does not exist.
    Listed(Option<Vec<String>>),
    QueueCreated,
    QueueDeleted,
    MemberCreated(MemberName),
    MemberDeleted(MemberName),
    /// A member's data changed, at this zxid.
    DataChanged(MemberName, i64),
    /// A local member to register (the actor keeps its signal channel).
    Register(Created),
    /// Answer to [`Action::CheckPresent`], as [`presence`] reads it: `Err` when the read got
    /// no answer (a transport error says nothing about the znode).
    Present(Result<bool, zkc::Error>),
    /// Every event received before the [`Action::Settle`] has been applied.
    Settled,
    /// Answer to [`Action::ReadPermits`]: each member's permits by node name, in its order
    /// (`None`: gone meanwhile, or not a member at all — not ephemeral).
    PermitsRead(Result<Vec<(String, Option<u32>)>, zkc::Error>),
    Unregister(String),
    /// Bring the holders up to date; `link_up` says whether the session's link is connected
    /// (nothing is confirmed while it is not).
    Reconcile {
        link_up: bool,
    },
    /// Answer to [`Action::CheckOwnership`], in its order.
    Owned(Vec<(Due, Ownership)>),
    /// Answer to [`Action::ReadHead`].
    HeadRead {
        sequence: i64,
        node: String,
        read: Result<MemberData, zkc::Error>,
    },
    /// The link changed (suspended, back, reconnected), or moved while a read was out: the
    /// view may have missed events. Nothing is confirmed, answered or published until a
    /// listing succeeds with the link up (see the module docs).
    Unsynced,
    /// Answer to [`Action::List`] when it failed; asked again on the next reconcile.
    ListFailed(zkc::Error),
    /// Answer to [`Action::VerifyAtLeader`]: whether the leader has each suspect (`Err`: no
    /// answer).
    Verified(Vec<(String, Result<bool, zkc::Error>)>),
    /// A create of protected id `id` met a transport failure and its join ended: every znode
    /// with that id other than `adopted` (the member's own, deleted by its release; `None`
    /// when the join failed or was abandoned before it had one) is a stray ([`Strays`]).
    Strays {
        id: String,
        adopted: Option<String>,
    },
    /// Answer to [`Action::ConfirmDivergence`]: whether the session's server, brought up to
    /// date with the leader by a `sync`, still has the member the leader does not (`Err`: no
    /// answer, taken as yes).
    StillListed(String, Result<bool, zkc::Error>),
}

/// Whether a read of a znode found it: `NoNode` is absence; any other failure (the link above
/// all) is no answer, never taken for absence.
///
/// # Errors
/// The read's error, unless it is `NoNode`.
pub fn presence<T>(read: Result<T, zkc::Error>) -> Result<bool, zkc::Error> {
    match read {
        Ok(_) => Ok(true),
        Err(zkc::Error::NoNode) => Ok(false),
        Err(e) => Err(e),
    }
}

/// What the state asks the actor to do.
#[derive(Debug)]
pub enum Action {
    /// Read whether the registering member's znode exists (the watch has not shown it yet);
    /// answer with [`Event::Present`].
    CheckPresent(String),
    /// Apply every watch event already received, then answer [`Event::Settled`]: members
    /// created before the registering one must be in the view before it decides anything.
    Settle,
    /// Read the permit counts of these members (sequence, node); answer
    /// [`Event::PermitsRead`] by node name.
    ReadPermits(Vec<(i64, String)>),
    /// Prove these local members ours, all at once; answer [`Event::Owned`].
    CheckOwnership(Vec<Due>),
    /// Read the election's head; answer [`Event::HeadRead`].
    ReadHead { sequence: i64, node: String },
    /// List the queue again (after placing its watch again, if a reconnect dropped it);
    /// answer [`Event::Listed`] or [`Event::ListFailed`]. A listing that ends the unsynced
    /// state decides nothing by itself: the owner reconciles again right after it (as after
    /// every event), and that reconcile confirms what the fresh view admits.
    List,
    /// Answer the pending registration.
    Reply(Result<Enlisted, Refusal>),
    /// Tell a local member (`Gone` also forgets its channel).
    Signal(String, MemberSignal),
    /// Publish this view to observers.
    Publish(QueueView),
    /// Ask the ensemble's leader whether these members exist (see `QueueState::high_water`);
    /// answer [`Event::Verified`].
    VerifyAtLeader(Vec<String>),
    /// Delete this znode if our session owns it: another copy of a retried create
    /// ([`Strays`]). Nothing is answered; its deletion event removes it from the view.
    DeleteStray(String),
    /// The leader does not have this member: `sync` the session's server and read whether it
    /// still has it; answer [`Event::StillListed`]. (A member deleted after the listing
    /// that showed it is also refused by the leader, and gone from a synced server.)
    ConfirmDivergence(String),
    /// The session's server has diverged from its quorum (it keeps this member, which the
    /// leader does not have): tell every queue of the session, none of which may grant
    /// from this server's views any more ([`QueueState::diverged`]).
    Diverged(String),
    /// The session's server has diverged from its quorum the other way: it lacks this local
    /// member, which the leader has (`QueueState::lacked`). Told like [`Action::Diverged`].
    Lacks(String),
    /// A member named by [`Action::Lacks`] is gone: what it proved ends with it.
    Withdraw(String),
}

/// Protected ids of this session's creates that met a transport failure, each with the znode
/// adopted for it, if any. A znode with such an id that is not the adopted one is a *stray*:
/// ours, but no stream's, and deleted as soon as the view shows it.
///
/// Why: after a lost create reply the gateway looks for its znode (a `sync`, then a listing)
/// and, finding nothing, creates again. That is right only if the lost attempt can no longer be
/// applied, and ZooKeeper does not promise it: a soak (session 25, seed 16462025610224106636)
/// showed two znodes of one protected id, 24 and 25, both of the gateway's session, after its
/// connection was dropped while a frozen server woke up. The stream adopted 24; 25 would have
/// stayed until the session ended, and whoever queued behind it would have waited that long
/// (session 24's soak: an election without a leader for 104 s). Curator's protected mode has
/// the same window; deleting what shows up closes it.
#[derive(Debug, Default)]
struct Strays {
    adopted: HashMap<String, Option<String>>,
    /// Ids in the order they were watched, so the oldest go first past [`STRAY_IDS_KEPT`].
    order: std::collections::VecDeque<String>,
    /// Strays whose delete was asked for, until the view no longer shows them.
    deleting: HashSet<String>,
}

/// Retried creates remembered per queue. A lost attempt is applied within moments if at all
/// (it is a request already on its way), so the newest few thousand are plenty, and the map
/// stays bounded however long the session lives.
const STRAY_IDS_KEPT: usize = 4096;

impl Strays {
    /// Watches for copies of `id` other than `adopted`.
    fn watch(&mut self, id: String, adopted: Option<String>) {
        if self.adopted.insert(id.clone(), adopted).is_none() {
            self.order.push_back(id);
            if self.order.len() > STRAY_IDS_KEPT {
                if let Some(old) = self.order.pop_front() {
                    self.adopted.remove(&old);
                }
            }
        }
    }

    /// Whether `m` is a copy of a retried create that no stream owns, and not yet being deleted.
    fn is_new_stray(&self, m: &MemberName) -> bool {
        // The id first: on every member's creation event, and almost always absent, so the
        // node's name is formatted only for the ids of retried creates.
        let Some(adopted) = self.adopted.get(&m.id) else {
            return false;
        };
        let node = m.node_name();
        adopted.as_deref() != Some(node.as_str()) && !self.deleting.contains(&node)
    }
}

/// The one rule that decides who holds, applied to a queue in sequence order.
///
/// A writer (`w`, and an election candidate `c`) holds when fewer than `permits` members are
/// ahead of it and none of them is a reader; a reader (`r`) holds when no writer is ahead of
/// it. So an election (one permit, no readers) is led by its head, a mutex or an N-permit
/// semaphore is held by its first N members, and a read-write lock (one permit) admits a run
/// of readers at the head or a single writer — in FIFO order, so a writer queued behind
/// readers goes before every later reader.
///
/// Each condition can only turn true while a member waits (members ahead leave, newcomers
/// queue behind), never back: a member that holds keeps holding until it leaves. That is why
/// a gateway whose view lags can only be late, never wrong.
#[derive(Debug, Default, Clone)]
pub struct HolderScan {
    ahead: usize,
    writers: usize,
    readers: usize,
}

impl HolderScan {
    /// Whether a member of `mode` would hold with the members pushed so far ahead of it.
    /// `permits` of 0 counts as 1.
    pub fn admits(&self, mode: MemberMode, permits: u32) -> bool {
        if mode.is_shared() {
            self.writers == 0
        } else {
            self.readers == 0 && self.ahead < permits.max(1) as usize
        }
    }

    /// Counts a member as ahead of the ones still to come.
    pub fn push(&mut self, mode: MemberMode) {
        self.ahead += 1;
        if mode.is_shared() {
            self.readers += 1;
        } else {
            self.writers += 1;
        }
    }

    /// True when no later member can hold with at most `max_permits` permits.
    pub fn exhausted(&self, max_permits: u32) -> bool {
        self.writers > 0 && (self.readers > 0 || self.ahead >= max_permits.max(1) as usize)
    }
}

/// A registered member of this gateway.
#[derive(Debug)]
struct Local {
    sequence: i64,
    mode: MemberMode,
    record: NodeRecord,
    confirmed: bool,
    /// From the create reply, while the view has stayed synced with the link up since the
    /// member registered: it is then confirmed by that reply alone, whenever the rule admits
    /// it (see the module docs, "Confirmation costs no write"); `None` once the view may have
    /// missed an event, and a read confirms it.
    czxid: Option<i64>,
}

/// An election's head, as far as read.
#[derive(Debug)]
struct Head {
    node: String,
    /// Known data (None until fetched).
    leader: Option<Holder>,
    fetched: bool,
    /// mzxid of the last write we know the content of, to skip refetching it.
    known_mzxid: i64,
    /// When this gateway saw it become the head; `None` for a head it found in office when it
    /// first listed the queue (then its join time is the best lower bound).
    seen_at: Option<SystemTime>,
}

/// What only one recipe keeps.
#[derive(Debug)]
enum Recipe {
    /// The head, its observers' view and the failover clock.
    Election {
        head: Option<Head>,
        head_gone_at: Option<Instant>,
        /// The queue has been listed and its head read once (heads found before have no
        /// `seen_at`).
        listed: bool,
    },
    /// Node name → the permit count that member agreed to, as far as read. A member's permits
    /// never change, so entries stay valid until it leaves.
    Lock { permits: HashMap<String, u32> },
}

/// One queue as one session sees it (see the module docs).
#[derive(Debug)]
pub struct QueueState {
    name: QueueName,
    recipe: Recipe,
    /// Whether the queue's znode exists, by the latest listing or event.
    present: bool,
    /// (sequence, node name) → member
    members: BTreeMap<Key, MemberName>,
    /// node name → local member
    local: HashMap<String, Local>,
    /// The registration being decided (one at a time).
    pending: Option<Created>,
    link_up: bool,
    /// What observers were last shown.
    published: QueueView,
    /// Protected ids of the members this gateway is creating ([`QueueState::set_creating`]).
    creating: HashSet<String>,
    /// The view may have missed events since the link last changed ([`Event::Unsynced`]).
    unsynced: bool,
    /// A registration that arrived while unsynced, answered after the next listing.
    waiting_sync: Option<Created>,
    /// The registration being decided waited for a listing: the view may have missed events
    /// between its create reply and that listing, so its create reply confirms it only if it
    /// holds at once (as any member's did before create replies were kept).
    after_gap: bool,
    /// Children named like members whose stat showed they are not (not ephemeral), and
    /// members the leader said do not exist ([`Event::Verified`]).
    ignored: HashSet<String>,
    /// The highest sequence number the view has seen in the queue's current znode, by a
    /// listing or an event. ZooKeeper numbers a container's children in commit order, and a
    /// session's reads never go back in zxid, so a member that first shows up *below* it in a
    /// later listing cannot be in the committed history: it was deleted before that earlier
    /// listing and cannot come back — unless the server the session is on kept a znode its
    /// quorum no longer has (ZOOKEEPER-5010: a follower that kept a long-expired session's
    /// ephemerals after a restart and a leader change, and headed every queue with them).
    high_water: Option<i64>,
    /// Members shown by a listing below `high_water`, not yet judged by the leader
    /// ([`Action::VerifyAtLeader`]); they stay in the view (blocking, never granting) until
    /// the leader says they do not exist.
    suspects: HashSet<String>,
    /// Members of the actor's first listing, other than its own, that the leader has not
    /// vouched for. A server that diverged can show long-dead members in the very first
    /// listing, where no earlier view betrays them (`high_water` has nothing to compare
    /// with); those among the first `permits` of the queue, where they stand in the way of a
    /// local member, are asked about before holders are decided ([`QueueState::prove_blockers`]).
    unproven: HashSet<String>,
    /// Whether a listing has been applied yet (the first one fills `unproven`).
    listed_once: bool,
    /// Copies of retried creates to delete when seen.
    strays: Strays,
    /// Members the leader does not have, awaiting [`Event::StillListed`].
    refuting: HashSet<String>,
    /// Members the leader does not have that the session's server still lists after a
    /// `sync`: proof that the server diverged from its quorum ([`QueueState::diverged`]),
    /// for as long as its listings show any of them.
    refuted: HashSet<String>,
    /// Local members a listing did not show although no event said they went, awaiting the
    /// leader's word ([`Action::VerifyAtLeader`]): gone if the leader does not have them
    /// either (a deletion the view missed while unsynced), else `lacked`. They stay local
    /// meanwhile, and the queue grants nothing ([`QueueState::diverged`]).
    missing: HashSet<String>,
    /// Local members the leader has that the session's server does not list: the server
    /// lacks a committed member (ZOOKEEPER-5010), proof that it diverged, for as long as its
    /// listings lack them and they live ([`Action::Lacks`]). Before this rule a gateway took
    /// such a member for deleted: it told its client the hold had ended and left the znode,
    /// committed and nobody's, at the head of its queue until the session ended (the soak's
    /// `DivergeServer`, session 28: stalls of up to 70 s).
    lacked: HashSet<String>,
    /// Another queue of the session proved its server diverged ([`QueueState::set_session_diverged`]).
    session_diverged: bool,
    /// The session is stranded on its diverged server ([`QueueState::set_session_stranded`]).
    session_stranded: bool,
}

impl QueueState {
    pub fn new(kind: QueueKind, name: QueueName) -> Self {
        let recipe = match kind {
            QueueKind::Election => Recipe::Election {
                head: None,
                head_gone_at: None,
                listed: false,
            },
            QueueKind::Lock => Recipe::Lock {
                permits: HashMap::new(),
            },
        };
        Self {
            name,
            recipe,
            present: false,
            members: BTreeMap::new(),
            local: HashMap::new(),
            pending: None,
            link_up: true,
            published: QueueView::default(),
            creating: HashSet::new(),
            unsynced: false,
            waiting_sync: None,
            after_gap: false,
            ignored: HashSet::new(),
            high_water: None,
            suspects: HashSet::new(),
            unproven: HashSet::new(),
            listed_once: false,
            strays: Strays::default(),
            refuting: HashSet::new(),
            refuted: HashSet::new(),
            missing: HashSet::new(),
            lacked: HashSet::new(),
            session_diverged: false,
            session_stranded: false,
        }
    }

    /// Whether the view waits for a listing ([`Event::Unsynced`]); the actor retries a failed
    /// one while this is true.
    pub fn unsynced(&self) -> bool {
        self.unsynced
    }

    /// The protected ids of the members this gateway is creating right now. An election's
    /// head among them is not read: its registration follows (or its deletion, if the join
    /// is abandoned), and its own create reply confirms it — the read would only delay the
    /// new leader by a round trip. Observers see the head once it is confirmed, as always.
    pub fn set_creating(&mut self, ids: HashSet<String>) {
        self.creating = ids;
    }

    /// Whether some queue of the session has proven the session's server diverged
    /// ([`Action::Diverged`]; the session keeps the proof until a listing of that queue no
    /// longer shows what proved it).
    pub fn set_session_diverged(&mut self, diverged: bool) {
        self.session_diverged = diverged;
    }

    /// Whether the session's proof of divergence has stood long enough to strand it
    /// (`coord::divergence`, "Stranded"). Then no local member that does not hold is kept:
    /// each is told [`MemberSignal::Unserved`] and forgotten (its stream deletes its znode),
    /// and registrations are refused ([`Refusal::Stranded`]).
    ///
    /// Why: such a member keeps its znode, and in the quorum's order — which this view cannot
    /// show — it may head its queue. It cannot be granted from here, so nobody behind it on
    /// any gateway would be either, until the server is healed; elsewhere it can be.
    /// Holders are kept: their znodes are committed, and ending them would only add a loss.
    pub fn set_session_stranded(&mut self, stranded: bool) {
        self.session_stranded = stranded;
    }

    /// Whether this view comes from a server that diverged from its quorum, so that it
    /// grants nothing: no member is confirmed, none is told it holds at join, and no new
    /// leader is shown to observers.
    ///
    /// Why nothing at all: a server that lists a member its leader does not have
    /// (ZOOKEEPER-5010: a long-expired session's ephemerals kept after a restart) has lost
    /// its place in the committed history, and the soak of session 25 saw such a server
    /// also *lack* a committed member. Leaving the members it shows wrongly out of the view
    /// is not enough: nobody can ask the leader about a member the view never showed, and
    /// that member may hold elsewhere — there, a second leader was granted beside it for
    /// 2 s. So the view decides nothing until it no longer shows any refuted member (the
    /// server was restarted and synced again, or the session moved to another server).
    /// Members confirmed before stay holders: their znodes are in the committed history,
    /// and they lose them only through events or the session, as anywhere.
    pub fn diverged(&self) -> bool {
        self.session_diverged
            || !self.refuted.is_empty()
            || !self.refuting.is_empty()
            || !self.missing.is_empty()
            || !self.lacked.is_empty()
    }

    /// What observers were last shown by this state.
    pub fn published(&self) -> &QueueView {
        &self.published
    }

    /// Members in the view.
    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// Whether the queue's znode exists by the view.
    pub fn present(&self) -> bool {
        self.present
    }

    /// Applies one event and returns what it calls for, in order.
    pub fn apply(&mut self, event: Event) -> Vec<Action> {
        let mut out = Vec::new();
        let reconciling = matches!(
            event,
            Event::Reconcile { .. } | Event::Owned(_) | Event::HeadRead { .. }
        );
        match event {
            Event::Listed(children) => self.listed(children, &mut out),
            Event::QueueCreated => self.present = true,
            Event::QueueDeleted => {
                // A container made again numbers its children from zero.
                self.present = false;
                self.high_water = None;
                self.refuted.clear();
            }
            Event::MemberCreated(m) => {
                if !self.ignored.contains(&m.node_name()) {
                    self.high_water = self.high_water.max(Some(m.sequence));
                    if self.strays.is_new_stray(&m) {
                        self.delete_stray(&m, &mut out);
                    }
                    self.members.insert(key(&m), m);
                }
            }
            Event::Strays { id, adopted } => {
                self.strays.watch(id, adopted);
                self.delete_strays(&mut out);
            }
            Event::Verified(answers) => self.verified(answers, &mut out),
            Event::StillListed(node, still) => self.still_listed(node, still, &mut out),
            Event::MemberDeleted(m) => {
                let node = m.node_name();
                self.ignored.remove(&node);
                self.refuted.remove(&node);
                self.forget(m.sequence, &node, &mut out)
            }
            Event::DataChanged(m, zxid) => {
                if let Recipe::Election {
                    head: Some(head), ..
                } = &mut self.recipe
                {
                    if head.node == m.node_name() && zxid != head.known_mzxid {
                        head.fetched = false;
                    }
                }
            }
            Event::Register(created) => {
                self.after_gap = false;
                if created.retried {
                    self.strays
                        .watch(created.member.id.clone(), Some(created.member.node_name()));
                    self.delete_strays(&mut out);
                }
                self.register(created, &mut out);
            }
            Event::Present(Err(e)) => {
                self.pending = None;
                out.push(Action::Reply(Err(Refusal::Zk(e))));
            }
            Event::Present(Ok(false)) => {
                self.pending = None;
                out.push(Action::Reply(Err(Refusal::Gone)));
            }
            Event::Present(Ok(true)) => {
                if let Some(c) = &self.pending {
                    self.members.insert(key(&c.member), c.member.clone());
                    out.push(Action::Settle);
                }
            }
            Event::Settled => self.check_permits(&mut out),
            Event::PermitsRead(Err(e)) => {
                self.pending = None;
                out.push(Action::Reply(Err(Refusal::Zk(e))));
            }
            Event::PermitsRead(Ok(read)) => {
                let mut missing = Vec::new();
                if let Recipe::Lock { permits } = &mut self.recipe {
                    for (node, p) in read {
                        match p {
                            Some(p) => {
                                permits.insert(node, p.max(1));
                            }
                            None => missing.push(node),
                        }
                    }
                }
                // Missing: deleted meanwhile (its deletion event follows and finds nothing), or
                // a child named like a member that is not ephemeral, so no member's: out of the
                // view either way, and ignored while a child of that name exists.
                for node in missing {
                    let key = self.members.keys().find(|(_, n)| *n == node).cloned();
                    if let Some((sequence, node)) = key {
                        self.ignored.insert(node.clone());
                        self.forget(sequence, &node, &mut out);
                    }
                }
                self.finish_registration(&mut out);
            }
            Event::Unregister(node) => {
                self.local.remove(&node);
                self.missing.remove(&node);
                // Its release goes through the leader; the server that lacks it sees nothing.
                if self.lacked.remove(&node) {
                    out.push(Action::Withdraw(node));
                }
            }
            Event::Reconcile { link_up } => {
                self.link_up = link_up;
                if !link_up {
                    self.forget_create_replies();
                }
                self.reconcile(&mut out);
            }
            Event::Owned(checks) => self.owned(checks, &mut out),
            Event::HeadRead {
                sequence,
                node,
                read,
            } => self.head_read(sequence, &node, read, &mut out),
            Event::Unsynced => {
                self.unsynced = true;
                self.forget_create_replies();
            }
            Event::ListFailed(e) => {
                tracing::warn!(queue = %self.name, error = %e, "re-listing the queue failed; its view stays unsynced and is listed again");
            }
        }
        if let Recipe::Election { listed, .. } = &mut self.recipe {
            // The first reconcile is done once it asks for nothing more: heads seen from then
            // on are seen taking office.
            if reconciling && !out.iter().any(Action::is_read) {
                *listed = true;
            }
        }
        out
    }

    /// Rebuilds the view from a listing: a reconnect's resync, or the first listing. Local
    /// members missing from it are gone.
    fn listed(&mut self, children: Option<Vec<String>>, out: &mut Vec<Action>) {
        self.present = children.is_some();
        if !self.present {
            self.high_water = None;
        }
        let children = children.unwrap_or_default();
        self.ignored.retain(|n| children.contains(n));
        self.refuted.retain(|n| children.contains(n));
        let before = std::mem::take(&mut self.members);
        self.members = children
            .iter()
            .filter(|c| !self.ignored.contains(*c))
            .filter_map(|c| MemberName::parse(c))
            .map(|m| (key(&m), m))
            .collect();
        let suspects: Vec<String> = self
            .members
            .keys()
            .filter(|(seq, node)| {
                !self.local.contains_key(node)
                    && (self.suspects.contains(node)
                        || (!before.contains_key(&(*seq, node.clone()))
                            && self.high_water.is_some_and(|h| *seq < h)))
            })
            .map(|(_, node)| node.clone())
            .collect();
        self.high_water = self
            .high_water
            .max(self.members.keys().next_back().map(|(seq, _)| *seq));
        self.suspects = suspects.iter().cloned().collect();
        if self.listed_once {
            let listed: HashSet<&String> = children.iter().collect();
            self.unproven.retain(|n| listed.contains(n));
        } else {
            self.listed_once = true;
            self.unproven = self
                .members
                .keys()
                .filter(|(_, n)| !self.local.contains_key(n))
                .map(|(_, n)| n.clone())
                .collect();
        }
        let shown: HashSet<String> = self.members.keys().map(|(_, n)| n.clone()).collect();
        self.strays.deleting.retain(|n| shown.contains(n));
        self.delete_strays(out);
        if !suspects.is_empty() {
            tracing::warn!(queue = %self.name, members = ?suspects, "members listed below the queue's highest sequence number that earlier listings did not have: asking the leader whether they exist");
            out.push(Action::VerifyAtLeader(suspects));
        }
        // A local member the listing does not show went without an event (a deletion the
        // view missed while unsynced) — or the server lacks it. Only the leader can tell.
        let unlisted = |n: &String| {
            self.local
                .get(n)
                .is_some_and(|l| !self.members.contains_key(&(l.sequence, n.clone())))
        };
        let shown_again: Vec<String> = self
            .lacked
            .iter()
            .filter(|n| !unlisted(n))
            .cloned()
            .collect();
        for node in shown_again {
            self.lacked.remove(&node);
        }
        let mut missing: Vec<String> = self
            .local
            .keys()
            .filter(|n| unlisted(n) && !self.lacked.contains(*n))
            .cloned()
            .collect();
        missing.sort();
        self.missing = missing.iter().cloned().collect();
        if !missing.is_empty() {
            tracing::warn!(queue = %self.name, members = ?missing, "local members the listing does not show, with no event of their deletion: asking the leader whether they exist");
            out.push(Action::VerifyAtLeader(missing));
        }
        let names: HashSet<&String> = self.members.keys().map(|(_, n)| n).collect();
        match &mut self.recipe {
            Recipe::Lock { permits } => permits.retain(|n, _| names.contains(n)),
            Recipe::Election { head, .. } => {
                if let Some(h) = head.as_mut() {
                    h.fetched = false;
                }
            }
        }
        // `synced` is set by the next publish, once the head has been read: an observer's
        // first message must be the real state, never a vacancy we have not checked.
        self.unsynced = false;
        // A registration that waited for this listing is decided now.
        if let Some(c) = self.waiting_sync.take() {
            self.after_gap = true;
            self.register(c, out);
        }
    }

    /// The leader's answer on suspects: a member it does not have leaves the view for as long
    /// as listings show it; one it has, or one it could not answer for, stays (a suspect
    /// without an answer is asked about again at the next listing).
    ///
    /// A member left out changes the view, so the queue is decided again at once: the next
    /// member of the first listing in a local member's way is asked about, or the local
    /// member holds. Nothing else would wake the actor — a queue blocked by ghosts on a
    /// diverged server sees no events — and the 36-minute soak of 2026-11-26 waited 10 s
    /// behind the fourth of four ghosts until the link happened to change.
    fn verified(
        &mut self,
        answers: Vec<(String, Result<bool, zkc::Error>)>,
        out: &mut Vec<Action>,
    ) {
        let mut left_out = false;
        for (node, answer) in answers {
            if self.missing.contains(&node) {
                self.judge_missing(node, answer, out);
                continue;
            }
            if !self.suspects.contains(&node) {
                continue;
            }
            match answer {
                Ok(true) => {
                    self.suspects.remove(&node);
                }
                Ok(false) => {
                    self.suspects.remove(&node);
                    let seq = self
                        .members
                        .keys()
                        .find(|(_, n)| *n == node)
                        .map(|(s, _)| *s);
                    if let Some(seq) = seq {
                        tracing::warn!(queue = %self.name, member = %node, "the session's server lists a member the ensemble's leader does not have: left out of the queue, and nothing is granted until the server, synced, shows whether it diverged");
                        self.ignored.insert(node.clone());
                        self.forget(seq, &node, out);
                        self.refuting.insert(node.clone());
                        out.push(Action::ConfirmDivergence(node));
                        left_out = true;
                    }
                }
                Err(e) => {
                    tracing::warn!(queue = %self.name, member = %node, error = %e, "the leader could not be asked about a suspect member; it stays in the view until the next listing");
                }
            }
        }
        if left_out {
            self.reconcile(out);
        }
    }

    /// The leader's word on a local member a listing did not show ([`QueueState::missing`]):
    /// gone there too, it is forgotten (its stream learns why); there, the session's server
    /// lacks it and diverged ([`Action::Lacks`]); no answer, it stays missing until the next
    /// listing asks again, and the queue grants nothing meanwhile.
    fn judge_missing(
        &mut self,
        node: String,
        answer: Result<bool, zkc::Error>,
        out: &mut Vec<Action>,
    ) {
        match answer {
            Ok(false) => {
                self.missing.remove(&node);
                if let Some(seq) = self.local.get(&node).map(|l| l.sequence) {
                    self.forget(seq, &node, out);
                }
            }
            Ok(true) => {
                self.missing.remove(&node);
                tracing::error!(queue = %self.name, member = %node, "the session's ZooKeeper server lacks a member of this gateway that the ensemble's leader has (ZOOKEEPER-5010): the member keeps its place, and this session grants nothing until a listing shows it again or it leaves");
                self.lacked.insert(node.clone());
                out.push(Action::Lacks(node));
            }
            Err(e) => {
                tracing::warn!(queue = %self.name, member = %node, error = %e, "the leader could not be asked about a local member the listing did not show; it stays, and nothing is granted, until the next listing");
            }
        }
    }

    /// The session's server, synced, still has (or could not say whether it has) a member the
    /// leader does not: it diverged, and the view grants nothing while it shows that member
    /// ([`QueueState::diverged`]); the session is told, so its other queues grant nothing
    /// either. One it no longer has was deleted after the listing that showed it (a first
    /// listing's head that left before the leader was asked): nothing diverged.
    fn still_listed(
        &mut self,
        node: String,
        still: Result<bool, zkc::Error>,
        out: &mut Vec<Action>,
    ) {
        if !self.refuting.remove(&node) {
            return;
        }
        match still {
            Ok(false) => {}
            Ok(true) => {
                tracing::error!(queue = %self.name, member = %node, "the session's ZooKeeper server diverged from its quorum (ZOOKEEPER-5010): it keeps a member the leader does not have, and may lack members the leader has; this session grants nothing until a listing no longer shows it (restart that server, or let the session move to another)");
                self.refuted.insert(node.clone());
                out.push(Action::Diverged(node));
            }
            Err(e) => {
                tracing::warn!(queue = %self.name, member = %node, error = %e, "could not read whether the session's server still has a member the leader does not; granting nothing until a listing no longer shows it");
                self.refuted.insert(node);
            }
        }
        self.reconcile(out);
    }

    /// Asks the leader about the members of the first listing not vouched for yet that stand
    /// among the first `permits` of the queue (an election's head), while a local member
    /// waits behind them. They keep blocking until the answer, like any suspect; one the
    /// leader does not have leaves the view. Deeper ones are asked about when the queue
    /// moves them up, so the cost is at most one check per member that ever blocks.
    fn prove_blockers(&mut self, out: &mut Vec<Action>) {
        if self.unproven.is_empty() || self.local.is_empty() {
            return;
        }
        let first = match self.recipe {
            Recipe::Election { .. } => 1,
            Recipe::Lock { .. } => self
                .local
                .values()
                .map(|l| l.record.permits.max(1) as usize)
                .max()
                .unwrap_or(1),
        };
        let blockers: Vec<String> = self
            .members
            .keys()
            .take(first)
            .filter(|(_, n)| self.unproven.contains(n) && !self.local.contains_key(n))
            .map(|(_, n)| n.clone())
            .collect();
        if blockers.is_empty() {
            return;
        }
        for b in &blockers {
            self.unproven.remove(b);
            self.suspects.insert(b.clone());
        }
        out.push(Action::VerifyAtLeader(blockers));
    }

    /// A member's znode is gone: drop it from the view and tell its local stream, if any.
    /// Asks for the delete of every stray in the view ([`Strays`]).
    fn delete_strays(&mut self, out: &mut Vec<Action>) {
        let found: Vec<MemberName> = self
            .members
            .values()
            .filter(|m| self.strays.is_new_stray(m))
            .cloned()
            .collect();
        for m in found {
            self.delete_stray(&m, out);
        }
    }

    fn delete_stray(&mut self, m: &MemberName, out: &mut Vec<Action>) {
        let node = m.node_name();
        tracing::warn!(queue = %self.name, sequence = m.sequence, "a second znode of one retried create (the lost attempt was applied after all): deleting it");
        self.strays.deleting.insert(node.clone());
        out.push(Action::DeleteStray(node));
    }

    fn forget(&mut self, sequence: i64, node: &str, out: &mut Vec<Action>) {
        self.missing.remove(node);
        if self.lacked.remove(node) {
            out.push(Action::Withdraw(node.to_owned()));
        }
        self.strays.deleting.remove(node);
        self.members.remove(&(sequence, node.to_owned()));
        match &mut self.recipe {
            Recipe::Lock { permits } => {
                permits.remove(node);
            }
            Recipe::Election {
                head, head_gone_at, ..
            } => {
                if head.as_ref().is_some_and(|h| h.node == node) {
                    *head_gone_at = Some(Instant::now());
                }
            }
        }
        if self.local.remove(node).is_some() {
            out.push(Action::Signal(node.to_owned(), MemberSignal::Gone));
        }
    }

    fn register(&mut self, created: Created, out: &mut Vec<Action>) {
        if self.unsynced {
            // Decided after the next listing: a view that may have missed events must not
            // place it (nor let its create reply confirm it).
            self.waiting_sync = Some(created);
            return;
        }
        let seen = self.members.contains_key(&key(&created.member));
        let node = created.member.node_name();
        self.pending = Some(created);
        if seen {
            self.check_permits(out);
        } else {
            // Not seen by the watch: confirm with ZooKeeper rather than guess.
            out.push(Action::CheckPresent(node));
        }
    }

    /// Lock queues: reads the permits of members ahead not known yet (local and known members
    /// cost nothing), then [`QueueState::finish_registration`] compares.
    fn check_permits(&mut self, out: &mut Vec<Action>) {
        let (Some(c), Recipe::Lock { permits }) = (&self.pending, &self.recipe) else {
            return self.finish_registration(out);
        };
        let unknown: Vec<(i64, String)> = self
            .members
            .range(..key(&c.member))
            .filter(|((_, n), _)| !permits.contains_key(n))
            .map(|((s, n), _)| (*s, n.clone()))
            .collect();
        if unknown.is_empty() {
            self.finish_registration(out);
        } else {
            out.push(Action::ReadPermits(unknown));
        }
    }

    /// Registers the pending member. In a lock queue it is refused when a member ahead agreed
    /// to a different permit count: checking every member ahead (not only the head) makes any
    /// two members alive at the same time agree, since the younger one saw the older one.
    fn finish_registration(&mut self, out: &mut Vec<Action>) {
        let Some(created) = self.pending.take() else {
            return;
        };
        if self.unsynced {
            // The link moved while its reads were out: decide it on the next listing.
            self.waiting_sync = Some(created);
            return;
        }
        if self.session_stranded {
            out.push(Action::Reply(Err(Refusal::Stranded)));
            return;
        }
        let Created {
            member,
            record,
            czxid,
            ..
        } = created;
        let ours = record.permits.max(1);
        let at = key(&member);
        if let Recipe::Lock { permits } = &mut self.recipe {
            let mismatch = self
                .members
                .range(..at.clone())
                .find_map(|((_, n), _)| permits.get(n).copied().filter(|&p| p != ours));
            if let Some(recorded) = mismatch {
                out.push(Action::Reply(Err(Refusal::PermitMismatch { recorded })));
                return;
            }
            permits.insert(at.1.clone(), ours);
        }
        let ahead = self.members.range(..at.clone()).count() as u32;
        let holds = self.would_hold(&at, member.mode, ours) && !self.diverged();
        let after_gap = std::mem::take(&mut self.after_gap);
        self.local.insert(
            member.node_name(),
            Local {
                sequence: member.sequence,
                mode: member.mode,
                record,
                confirmed: false,
                // Its create reply confirms it now or, while the view stays synced, when the
                // rule admits it (see the module docs).
                czxid: czxid.filter(|_| holds || !after_gap),
            },
        );
        out.push(Action::Reply(Ok(Enlisted { ahead, holds })));
    }

    /// The view may have missed an event (or the link is down): no local member waiting to
    /// hold is confirmed by its create reply any more, only by a read of its znode.
    fn forget_create_replies(&mut self) {
        for local in self.local.values_mut().filter(|l| !l.confirmed) {
            local.czxid = None;
        }
    }

    /// Whether the member `sequence` holds by the current view ([`HolderScan`]).
    fn would_hold(&self, at: &Key, mode: MemberMode, permits: u32) -> bool {
        let mut scan = HolderScan::default();
        for m in self.members.range(..at.clone()).map(|(_, m)| m) {
            scan.push(m.mode);
            if scan.exhausted(permits) {
                return false;
            }
        }
        scan.admits(mode, permits)
    }

    fn reconcile(&mut self, out: &mut Vec<Action>) {
        if self.session_stranded {
            self.end_unserved(out);
        }
        if self.unsynced {
            // Nothing is decided from a view that may have missed events; list it first.
            if self.link_up {
                out.push(Action::List);
            }
            return;
        }
        self.prove_blockers(out);
        match self.recipe {
            Recipe::Election { .. } => self.reconcile_head(out),
            Recipe::Lock { .. } => self.reconcile_holders(out),
        }
    }

    /// Tells every local member that does not hold that it is not served, and forgets it
    /// ([`QueueState::set_session_stranded`]).
    fn end_unserved(&mut self, out: &mut Vec<Action>) {
        let unserved: Vec<String> = self
            .local
            .iter()
            .filter(|(_, l)| !l.confirmed)
            .map(|(node, _)| node.clone())
            .collect();
        for node in unserved {
            self.local.remove(&node);
            out.push(Action::Signal(node, MemberSignal::Unserved));
        }
    }

    /// Lock queues: asks to confirm every local member that the rule now admits, all checks
    /// at once (a writer leaving may admit a whole run of readers). Nothing is written, so a
    /// hand-over costs the delete, one event and, only after a gap in the view, one read per
    /// new holder on its own gateway (G4).
    fn reconcile_holders(&mut self, out: &mut Vec<Action>) {
        if !self.link_up || self.diverged() {
            return;
        }
        let due = self.due_holders();
        if !due.is_empty() {
            out.push(Action::CheckOwnership(due));
        }
    }

    /// Local members that hold by the rule but are not confirmed yet.
    fn due_holders(&self) -> Vec<Due> {
        let mut waiting = self.local.values().filter(|l| !l.confirmed).count();
        if waiting == 0 {
            return Vec::new();
        }
        let max_permits = self
            .local
            .values()
            .map(|l| l.record.permits.max(1))
            .max()
            .unwrap_or(1);
        let mut scan = HolderScan::default();
        let mut due = Vec::new();
        for ((sequence, node), m) in &self.members {
            if waiting == 0 || scan.exhausted(max_permits) {
                break;
            }
            let (sequence, node) = (*sequence, node.clone());
            if let Some(local) = self.local.get(&node).filter(|l| !l.confirmed) {
                waiting -= 1;
                if scan.admits(local.mode, local.record.permits) {
                    due.push(Due {
                        sequence,
                        node,
                        czxid: local.czxid,
                    });
                }
            }
            scan.push(m.mode);
        }
        due
    }

    /// Elections: brings the head up to date: confirm it if it is ours, else read who it is.
    fn reconcile_head(&mut self, out: &mut Vec<Action>) {
        let first = self
            .members
            .iter()
            .next()
            .map(|((s, n), m)| (*s, n.clone(), self.creating.contains(&m.id)));
        let Recipe::Election {
            head,
            head_gone_at,
            listed,
        } = &mut self.recipe
        else {
            return;
        };
        let Some((sequence, node, being_created)) = first else {
            *head = None;
            // A vacancy nobody waited through is not a failover.
            *head_gone_at = None;
            self.publish(None, out);
            return;
        };
        let mut vacated = false;
        if head.as_ref().is_none_or(|h| h.node != node) {
            *head = Some(Head {
                node: node.clone(),
                leader: None,
                fetched: false,
                known_mzxid: 0,
                seen_at: listed.then(SystemTime::now),
            });
            // The previous leader is gone; until the new head is confirmed, nobody leads.
            // (Only a change if a leader was published: the first state is read first.)
            vacated = self.published.leader.is_some();
        }
        let fetched = head.as_ref().is_some_and(|h| h.fetched);
        if vacated {
            self.publish(None, out);
        }
        if let Some(local) = self.local.get(&node).filter(|l| !l.confirmed) {
            // Ours: confirmed by its own create reply or a read, never while suspended, nor
            // from a diverged server's view.
            if self.link_up && !self.diverged() {
                out.push(Action::CheckOwnership(vec![Due {
                    sequence,
                    node,
                    czxid: local.czxid,
                }]));
            }
            return;
        }
        if !fetched && !being_created {
            out.push(Action::ReadHead { sequence, node });
        }
    }

    /// Settles ownership checks: only a znode present *and* owned by our current session
    /// confirms its member (CURATOR-696); a vanished or foreign znode is forgotten, and
    /// whatever follows it may now hold.
    fn owned(&mut self, checks: Vec<(Due, Ownership)>, out: &mut Vec<Action>) {
        let mut rerun = false;
        // Judged by the link now, when the answer arrives: a read answered after the link
        // went stale (the actor reports that as `Unsynced` first) proves nothing, and its
        // member stays due for the next reconcile (G2).
        let may_confirm = self.link_up && !self.unsynced && !self.diverged();
        for (due, check) in checks {
            let Due { sequence, node, .. } = due;
            match check {
                Ownership::Ours(_) if !may_confirm => {
                    tracing::debug!(queue = %self.name, "the link moved while confirming a holder; confirming it again once the view is synced");
                }
                Ownership::Ours(czxid) => match self.local.get_mut(&node) {
                    // Confirmed by an earlier check already: two decisions in one burst of
                    // answers (a leader's verdict on a ghost and a head read, say) may both
                    // have asked before either answer was applied. A member is told it
                    // holds once.
                    Some(local) if local.confirmed => {}
                    Some(local) => {
                        local.confirmed = true;
                        local.czxid = None;
                        let holder = Holder {
                            queue: self.name.clone(),
                            participant: local.record.participant.clone(),
                            value: local.record.value.clone(),
                            fencing_token: FencingToken(czxid as u64),
                            since: SystemTime::now(),
                        };
                        self.confirmed(node, holder, out);
                    }
                    // Unregistered meanwhile.
                    None => rerun = true,
                },
                Ownership::Foreign(owner) => {
                    tracing::error!(queue = %self.name, owner, "member znode is not owned by our session; not confirming it");
                    self.forget(sequence, &node, out);
                    rerun = true;
                }
                Ownership::Gone => {
                    self.forget(sequence, &node, out);
                    rerun = true;
                }
                Ownership::Failed(e) => {
                    tracing::debug!(queue = %self.name, error = %e, "confirming a holder failed; will retry after the next event");
                }
            }
        }
        // Each rerun follows a member removed from the view (or one no longer due), so it ends.
        if rerun {
            self.reconcile(out);
        }
    }

    /// A local member is confirmed: tell it, and, for an election's head, the observers.
    fn confirmed(&mut self, node: String, mut holder: Holder, out: &mut Vec<Action>) {
        let mut failover = None;
        if let Recipe::Election {
            head: Some(head),
            head_gone_at,
            ..
        } = &mut self.recipe
        {
            // It has led since this gateway saw it become the head (observers may have been
            // told already, if its creation event came before its registration).
            if let Some(seen) = head.seen_at {
                holder.since = seen;
            }
            failover = head_gone_at.take().map(|t| t.elapsed());
            head.leader = Some(holder.clone());
            head.fetched = true;
            head.seen_at = Some(holder.since);
        }
        let election = matches!(self.recipe, Recipe::Election { .. });
        out.push(Action::Signal(
            node,
            MemberSignal::Holds {
                holder: holder.clone(),
                failover,
            },
        ));
        if election {
            self.publish(Some(holder), out);
        }
    }

    fn head_read(
        &mut self,
        sequence: i64,
        node: &str,
        read: Result<MemberData, zkc::Error>,
        out: &mut Vec<Action>,
    ) {
        let data = match read {
            Ok(d) if !d.ephemeral => {
                // Named like a member but not one (a persistent znode with a member's name):
                // never a leader, ignored while it exists.
                tracing::warn!(queue = %self.name, node, "a child named like a member is not ephemeral; ignoring it");
                self.ignored.insert(node.to_owned());
                self.forget(sequence, node, out);
                return self.reconcile_head(out);
            }
            Ok(d) => d,
            Err(zkc::Error::NoNode) => {
                self.forget(sequence, node, out);
                return self.reconcile_head(out);
            }
            Err(e) => {
                tracing::debug!(queue = %self.name, error = %e, "reading the queue head failed; will retry on the next event");
                return;
            }
        };
        let diverged = self.diverged();
        let Recipe::Election {
            head: Some(head), ..
        } = &mut self.recipe
        else {
            return;
        };
        if diverged && head.leader.is_none() {
            // A diverged server's head may not be the leader (the one before it may be
            // missing here): observers are shown nobody rather than it. Read again at the
            // next reconcile.
            return;
        }
        let leader = Holder {
            queue: self.name.clone(),
            participant: data.record.participant.clone(),
            value: data.record.value.clone(),
            fencing_token: FencingToken(data.czxid as u64),
            since: head.seen_at.unwrap_or_else(|| data.since()),
        };
        head.fetched = true;
        head.known_mzxid = data.mzxid;
        let changed = head.leader.as_ref() != Some(&leader);
        head.leader = Some(leader.clone());
        if changed && self.local.get(node).is_some_and(|l| l.confirmed) {
            out.push(Action::Signal(
                node.to_owned(),
                MemberSignal::Proclaimed(leader.clone()),
            ));
        }
        self.publish(Some(leader), out);
    }

    /// Shows observers `leader`, unless they see it already; tokens never go down in what
    /// observers see.
    fn publish(&mut self, leader: Option<Holder>, out: &mut Vec<Action>) {
        let v = &mut self.published;
        if v.leader == leader && v.synced {
            return;
        }
        if let (Some(old), Some(new)) = (&v.leader, &leader) {
            if new.fencing_token < old.fencing_token {
                return;
            }
        }
        *v = QueueView::new(true, leader);
        out.push(Action::Publish(v.clone()));
    }
}

impl Action {
    /// Whether the action is a read whose answer comes back as an event.
    fn is_read(&self) -> bool {
        matches!(
            self,
            Action::CheckPresent(_)
                | Action::Settle
                | Action::ReadPermits(_)
                | Action::CheckOwnership(_)
                | Action::ReadHead { .. }
                | Action::List
                | Action::ConfirmDivergence(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(c: char) -> MemberMode {
        MemberMode::from_letter(c).unwrap()
    }

    /// Member `sequence` of mode letter `m` (its protected id derived from the sequence).
    fn member(m: char, sequence: i64) -> MemberName {
        MemberName {
            mode: mode(m),
            id: format!("{sequence:032x}"),
            sequence,
        }
    }

    fn node(m: char, sequence: i64) -> String {
        member(m, sequence).node_name()
    }

    fn created(m: char, sequence: i64, permits: u32, czxid: Option<i64>) -> Created {
        Created {
            member: member(m, sequence),
            record: NodeRecord {
                participant: format!("p{sequence}"),
                permits,
                ..Default::default()
            },
            czxid,
            retried: false,
        }
    }

    /// A view from a first listing of these members, all vouched for by the leader (see
    /// [`first_listing`] for one that is not).
    fn state(kind: QueueKind, members: &[(char, i64)]) -> QueueState {
        let mut s = first_listing(kind, members);
        s.unproven.clear();
        s
    }

    fn first_listing(kind: QueueKind, members: &[(char, i64)]) -> QueueState {
        let mut s = QueueState::new(kind, QueueName::new("q").unwrap());
        let listing = members.iter().map(|&(m, q)| node(m, q)).collect();
        assert!(s.apply(Event::Listed(Some(listing))).is_empty());
        s
    }

    /// Registers a member already in the view (members ahead that are not local agree on its
    /// permits); returns the reply.
    fn enlist(s: &mut QueueState, c: Created) -> Enlisted {
        let permits = c.record.permits;
        let mut out = s.apply(Event::Register(c));
        if let [Action::ReadPermits(ahead)] = out.as_slice() {
            let read = ahead
                .iter()
                .map(|(_, n)| (n.clone(), Some(permits)))
                .collect();
            out = s.apply(Event::PermitsRead(Ok(read)));
        }
        match out.as_slice() {
            [Action::Reply(Ok(e))] => *e,
            other => panic!("{other:?}"),
        }
    }

    /// Member `sequence` whose protected id is `id`'s (two sequences, one id: two znodes of
    /// one create).
    fn copy(id: i64, sequence: i64) -> MemberName {
        MemberName {
            sequence,
            ..member('c', id)
        }
    }

    /// The znodes `actions` ask to delete as strays.
    fn strays_deleted(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::DeleteStray(n) => Some(n.clone()),
                _ => None,
            })
            .collect()
    }

    /// Copies of a retried create are deleted — shown before the member registers or after it,
    /// by a listing or by an event — each once; the adopted znode, other members and the
    /// members of a create that was never retried are not. A join that ended without a member
    /// makes every znode of its id a stray.
    #[test]
    fn copies_of_a_retried_create_are_deleted_and_nothing_else() {
        type Case = (&'static str, bool, &'static [i64], &'static [i64]);
        // (case, retried, later events' sequences of id 3, strays deleted by sequence)
        let cases: [Case; 4] = [
            ("a copy listed before the registration", true, &[], &[4]),
            ("and one created after it", true, &[6], &[4, 6]),
            ("never retried: nothing is a stray", false, &[6], &[]),
            ("the adopted znode's own event", true, &[5], &[4]),
        ];
        for (case, retried, later, want) in cases {
            // Listed: another member (1), a copy of id 3 (4), and id 3's adopted znode (5).
            let mut s = QueueState::new(QueueKind::Election, QueueName::new("q").unwrap());
            let listing = vec![node('c', 1), copy(3, 4).node_name(), copy(3, 5).node_name()];
            let mut deleted = strays_deleted(&s.apply(Event::Listed(Some(listing.clone()))));
            let c = Created {
                member: copy(3, 5),
                retried,
                ..created('c', 5, 1, Some(50))
            };
            deleted.extend(strays_deleted(&s.apply(Event::Register(c))));
            // Listed again while the delete is out: not asked twice.
            deleted.extend(strays_deleted(&s.apply(Event::Listed(Some(listing)))));
            for &seq in later {
                deleted.extend(strays_deleted(&s.apply(Event::MemberCreated(copy(3, seq)))));
            }
            let want: Vec<String> = want.iter().map(|&q| copy(3, q).node_name()).collect();
            assert_eq!(deleted, want, "{case}");
        }

        // A join that ended without a member: every znode of its id, now or later.
        let mut s = state(QueueKind::Election, &[('c', 1)]);
        s.apply(Event::MemberCreated(copy(7, 8)));
        assert_eq!(
            strays_deleted(&s.apply(Event::Strays {
                id: member('c', 7).id,
                adopted: None
            })),
            [copy(7, 8).node_name()]
        );
        assert_eq!(
            strays_deleted(&s.apply(Event::MemberCreated(copy(7, 9)))),
            [copy(7, 9).node_name()]
        );
        assert!(strays_deleted(&s.apply(Event::MemberCreated(member('c', 10)))).is_empty());
        // Once the deleted copy is gone, the same name listed again would be asked again.
        s.apply(Event::MemberDeleted(copy(7, 8)));
        assert!(!s.strays.deleting.contains(&copy(7, 8).node_name()));

        // A member that ends (its release deletes its own znode) names it as adopted: only a
        // copy is a stray, never the member's own znode. (Naming none made every retried
        // member's own znode a "stray" at its end: 90 warnings in a 10-minute soak.)
        let mut s = state(QueueKind::Election, &[('c', 1), ('c', 2)]);
        s.apply(Event::MemberCreated(copy(2, 3)));
        assert_eq!(
            strays_deleted(&s.apply(Event::Strays {
                id: member('c', 2).id,
                adopted: Some(node('c', 2))
            })),
            [copy(2, 3).node_name()]
        );
    }

    /// The ids watched for strays stay bounded: the oldest go first.
    #[test]
    fn stray_ids_are_bounded() {
        let mut strays = Strays::default();
        for i in 0..=STRAY_IDS_KEPT {
            strays.watch(format!("{i:032x}"), None);
        }
        assert_eq!(strays.adopted.len(), STRAY_IDS_KEPT);
        assert!(!strays.adopted.contains_key(&format!("{:032x}", 0)));
        assert!(strays.is_new_stray(&copy(STRAY_IDS_KEPT as i64, 1)));
        assert!(!strays.is_new_stray(&copy(0, 1)));
    }

    fn data(participant: &str, czxid: i64, mzxid: i64) -> MemberData {
        MemberData {
            record: NodeRecord {
                participant: participant.into(),
                ..Default::default()
            },
            czxid,
            mzxid,
            ctime: 1,
            ephemeral: true,
        }
    }

    /// Answers the read of head `sequence` with its data.
    fn head_is(s: &mut QueueState, sequence: i64, read: MemberData) -> Vec<Action> {
        s.apply(Event::HeadRead {
            sequence,
            node: node('c', sequence),
            read: Ok(read),
        })
    }

    fn ownership_asked(actions: &[Action]) -> Vec<Due> {
        actions
            .iter()
            .find_map(|a| match a {
                Action::CheckOwnership(d) => Some(d.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    fn leader_asked(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::VerifyAtLeader(n) => Some(n.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    fn signalled(actions: &[Action]) -> Vec<(String, &MemberSignal)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Signal(n, s) => Some((n.clone(), s)),
                _ => None,
            })
            .collect()
    }

    fn published(actions: &[Action]) -> Vec<Option<u64>> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Publish(v) => Some(v.leader.as_ref().map(|l| l.fencing_token.0)),
                _ => None,
            })
            .collect()
    }

    /// Which members of a queue (mode letters in sequence order) hold with `permits`.
    fn holders(modes: &str, permits: u32) -> String {
        let mut scan = HolderScan::default();
        modes
            .chars()
            .map(|m| {
                let holds = scan.admits(mode(m), permits);
                scan.push(mode(m));
                if holds {
                    m.to_ascii_uppercase()
                } else {
                    m
                }
            })
            .collect()
    }

    #[test]
    fn elections_mutexes_and_semaphores() {
        assert_eq!(holders("ccc", 0), "Ccc", "an election is led by its head");
        assert_eq!(holders("www", 1), "Www");
        assert_eq!(holders("www", 0), "Www", "0 permits is a mutex");
        assert_eq!(holders("wwwww", 3), "WWWww");
        assert_eq!(holders("w", 3), "W");
    }

    #[test]
    fn read_write_in_fifo_order() {
        assert_eq!(holders("rrr", 1), "RRR", "readers share");
        assert_eq!(
            holders("rrwr", 1),
            "RRwr",
            "a writer behind readers blocks later readers"
        );
        assert_eq!(holders("wrr", 1), "Wrr", "a writer excludes readers");
        assert_eq!(holders("rwwr", 1), "Rwwr");
        assert_eq!(
            holders("wwr", 2),
            "WWr",
            "permits bound writers; readers wait for all"
        );
        assert_eq!(holders("rww", 2), "Rww");
    }

    #[test]
    fn exhausted_only_when_nobody_later_can_hold() {
        for (modes, permits) in [
            ("ccc", 1),
            ("rrwr", 1),
            ("wwwww", 3),
            ("rrr", 1),
            ("rww", 2),
        ] {
            let mut scan = HolderScan::default();
            let chars: Vec<char> = modes.chars().collect();
            for (i, &m) in chars.iter().enumerate() {
                scan.push(mode(m));
                if scan.exhausted(permits) {
                    let mut rest = scan.clone();
                    for &later in &chars[i + 1..] {
                        assert!(!rest.admits(mode(later), permits), "{modes} {permits}");
                        rest.push(mode(later));
                    }
                }
            }
        }
    }

    #[test]
    fn a_member_holding_at_once_is_confirmed_by_its_create_reply() {
        let mut s = state(QueueKind::Lock, &[('w', 1)]);
        let e = enlist(&mut s, created('w', 1, 1, Some(77)));
        assert_eq!(
            e,
            Enlisted {
                ahead: 0,
                holds: true
            }
        );
        let asked = s.apply(Event::Reconcile { link_up: true });
        let due = ownership_asked(&asked);
        assert_eq!(due.len(), 1);
        assert_eq!(
            due[0].czxid,
            Some(77),
            "no read needed: the reply proves it"
        );
        let out = s.apply(Event::Owned(vec![(due[0].clone(), Ownership::Ours(77))]));
        match signalled(&out).as_slice() {
            [(
                n,
                MemberSignal::Holds {
                    holder,
                    failover: None,
                },
            )] => {
                assert_eq!(n, &node('w', 1));
                assert_eq!(holder.fencing_token, FencingToken(77));
            }
            other => panic!("{other:?}"),
        }
        assert!(
            s.apply(Event::Reconcile { link_up: true }).is_empty(),
            "confirmed once"
        );
    }

    #[test]
    fn a_member_admitted_later_is_confirmed_by_a_read_and_never_while_suspended() {
        let mut s = state(QueueKind::Lock, &[('w', 1), ('w', 2)]);
        let e = enlist(&mut s, created('w', 2, 1, Some(20)));
        assert_eq!(
            e,
            Enlisted {
                ahead: 1,
                holds: false
            }
        );
        assert!(ownership_asked(&s.apply(Event::Reconcile { link_up: true })).is_empty());
        // The holder ahead leaves while the link is suspended: nothing is confirmed.
        assert!(s.apply(Event::MemberDeleted(member('w', 1))).is_empty());
        assert!(s.apply(Event::Reconcile { link_up: false }).is_empty());
        // Back: a read proves it ours (its create reply predates the admission).
        let due = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
        assert_eq!((due.len(), due[0].czxid), (1, None));
        // A foreign znode is never confirmed: forgotten, and its stream told.
        let out = s.apply(Event::Owned(vec![(due[0].clone(), Ownership::Foreign(9))]));
        assert!(matches!(
            signalled(&out).as_slice(),
            [(_, MemberSignal::Gone)]
        ));
        assert_eq!(s.members(), 0);
    }

    /// Two checks of one member asked before either answer is applied (two decisions in one
    /// burst of answers; the simulation found it, seed 238): the member is told it holds
    /// once, never twice (a second grant would repeat its fencing token).
    #[test]
    fn a_member_confirmed_twice_is_told_it_holds_once() {
        let mut s = state(QueueKind::Lock, &[('w', 1), ('w', 2)]);
        enlist(&mut s, created('w', 2, 1, Some(20)));
        s.apply(Event::MemberDeleted(member('w', 1)));
        let first = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
        let second = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
        assert_eq!((first.len(), second.len()), (1, 1), "both reconciles ask");
        let out = s.apply(Event::Owned(vec![(first[0].clone(), Ownership::Ours(20))]));
        assert_eq!(signalled(&out).len(), 1);
        let out = s.apply(Event::Owned(vec![(second[0].clone(), Ownership::Ours(20))]));
        assert!(signalled(&out).is_empty(), "{out:?}");
    }

    /// A hand-over costs no read: while the view stays synced with the link up, a member
    /// admitted by its predecessor's deletion event is confirmed by its own create reply,
    /// in a lock and in an election; any gap in the view (a reconcile with the link down, an
    /// unsynced view, a registration decided after a listing) makes it take a read again.
    #[test]
    fn a_member_admitted_later_is_confirmed_by_its_create_reply_only_while_the_view_is_whole() {
        /// What happens between the registration and the predecessor's deletion.
        enum Gap {
            None,
            LinkDownThenUp,
            UnsyncedThenListed,
        }
        struct Case {
            what: &'static str,
            kind: QueueKind,
            gap: Gap,
            expect: Option<i64>,
        }
        let cases = [
            Case {
                what: "lock, no gap",
                kind: QueueKind::Lock,
                gap: Gap::None,
                expect: Some(20),
            },
            Case {
                what: "election, no gap",
                kind: QueueKind::Election,
                gap: Gap::None,
                expect: Some(20),
            },
            Case {
                what: "lock, link down then up",
                kind: QueueKind::Lock,
                gap: Gap::LinkDownThenUp,
                expect: None,
            },
            Case {
                what: "lock, unsynced then listed",
                kind: QueueKind::Lock,
                gap: Gap::UnsyncedThenListed,
                expect: None,
            },
            Case {
                what: "election, unsynced then listed",
                kind: QueueKind::Election,
                gap: Gap::UnsyncedThenListed,
                expect: None,
            },
        ];
        for case in cases {
            let m = if case.kind == QueueKind::Lock {
                'w'
            } else {
                'c'
            };
            let mut s = state(case.kind, &[(m, 1), (m, 2)]);
            s.apply(Event::Reconcile { link_up: true });
            if case.kind == QueueKind::Election {
                head_is(&mut s, 1, data("a", 10, 10));
            }
            let e = enlist(&mut s, created(m, 2, 1, Some(20)));
            assert!(!e.holds, "{}", case.what);
            match case.gap {
                Gap::None => {}
                Gap::LinkDownThenUp => {
                    s.apply(Event::Reconcile { link_up: false });
                    s.apply(Event::Reconcile { link_up: true });
                }
                Gap::UnsyncedThenListed => {
                    s.apply(Event::Unsynced);
                    s.apply(Event::Listed(Some(vec![node(m, 1), node(m, 2)])));
                }
            }
            s.apply(Event::MemberDeleted(member(m, 1)));
            let due = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
            assert_eq!(
                (due.len(), due[0].sequence, due[0].czxid),
                (1, 2, case.expect),
                "{}",
                case.what
            );
            let out = s.apply(Event::Owned(vec![(due[0].clone(), Ownership::Ours(20))]));
            assert!(
                matches!(
                    signalled(&out).as_slice(),
                    [(_, MemberSignal::Holds { holder, .. })] if holder.fencing_token == FencingToken(20)
                ),
                "{}: {out:?}",
                case.what
            );
        }
        // A registration decided after a listing (it arrived while unsynced) keeps its create
        // reply only if it holds at once: admitted later, it takes a read.
        let mut s = state(QueueKind::Lock, &[('w', 1)]);
        s.apply(Event::Unsynced);
        assert!(s
            .apply(Event::Register(created('w', 2, 1, Some(20))))
            .is_empty());
        s.apply(Event::Reconcile { link_up: true });
        let out = s.apply(Event::Listed(Some(vec![node('w', 1), node('w', 2)])));
        let out = match out.as_slice() {
            [Action::ReadPermits(_)] => {
                s.apply(Event::PermitsRead(Ok(vec![(node('w', 1), Some(1))])))
            }
            _ => out,
        };
        assert!(
            matches!(
                out.as_slice(),
                [Action::Reply(Ok(Enlisted { holds: false, .. }))]
            ),
            "{out:?}"
        );
        s.apply(Event::MemberDeleted(member('w', 1)));
        let due = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
        assert_eq!((due[0].sequence, due[0].czxid), (2, None));
        // The next registration, made with the view whole, keeps its reply again.
        s.apply(Event::MemberCreated(member('w', 3)));
        enlist(&mut s, created('w', 3, 1, Some(30)));
        s.apply(Event::Owned(vec![(due[0].clone(), Ownership::Ours(20))]));
        s.apply(Event::MemberDeleted(member('w', 2)));
        let due = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
        assert_eq!((due[0].sequence, due[0].czxid), (3, Some(30)));
    }

    #[test]
    fn a_failed_read_is_retried_after_the_next_event() {
        let mut s = state(QueueKind::Lock, &[('w', 1), ('r', 2)]);
        enlist(&mut s, created('r', 2, 1, None));
        s.apply(Event::MemberDeleted(member('w', 1)));
        let due = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
        let out = s.apply(Event::Owned(vec![(
            due[0].clone(),
            Ownership::Failed(zkc::Error::ConnectionLoss),
        )]));
        assert!(out.is_empty());
        assert_eq!(
            ownership_asked(&s.apply(Event::Reconcile { link_up: true })).len(),
            1
        );
    }

    #[test]
    fn a_writer_leaving_admits_a_run_of_readers_at_once() {
        let mut s = state(QueueKind::Lock, &[('w', 1), ('r', 2), ('r', 3), ('w', 4)]);
        for (m, q) in [('r', 2), ('r', 3), ('w', 4)] {
            assert!(!enlist(&mut s, created(m, q, 1, None)).holds);
        }
        s.apply(Event::MemberDeleted(member('w', 1)));
        let due = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
        let seqs: Vec<i64> = due.iter().map(|d| d.sequence).collect();
        assert_eq!(seqs, vec![2, 3], "both readers, not the writer behind them");
    }

    #[test]
    fn a_vanished_holder_admits_the_next_in_the_same_step() {
        let mut s = state(QueueKind::Lock, &[('w', 1), ('w', 2)]);
        enlist(&mut s, created('w', 1, 1, None));
        enlist(&mut s, created('w', 2, 1, None));
        let due = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
        assert_eq!(due[0].sequence, 1);
        let out = s.apply(Event::Owned(vec![(due[0].clone(), Ownership::Gone)]));
        assert!(matches!(
            signalled(&out).as_slice(),
            [(_, MemberSignal::Gone)]
        ));
        assert_eq!(ownership_asked(&out)[0].sequence, 2);
    }

    #[test]
    fn permits_must_agree_with_every_member_ahead() {
        let mut s = state(QueueKind::Lock, &[('w', 1), ('w', 2), ('w', 3)]);
        enlist(&mut s, created('w', 1, 3, None));
        // Member 2 is another gateway's: its permits are read; member 1's are known.
        let out = s.apply(Event::Register(created('w', 3, 2, None)));
        match out.as_slice() {
            [Action::ReadPermits(m)] => assert_eq!(m, &vec![(2, node('w', 2))]),
            other => panic!("{other:?}"),
        }
        let out = s.apply(Event::PermitsRead(Ok(vec![(node('w', 2), Some(3))])));
        assert!(matches!(
            out.as_slice(),
            [Action::Reply(Err(Refusal::PermitMismatch { recorded: 3 }))]
        ));
        // Known now: the next newcomer costs no read.
        assert!(matches!(
            s.apply(Event::Register(created('w', 3, 3, None)))
                .as_slice(),
            [Action::Reply(Ok(Enlisted {
                ahead: 2,
                holds: true
            }))]
        ));
        // A failed read refuses the member.
        let mut s = state(QueueKind::Lock, &[('w', 1), ('w', 2)]);
        s.apply(Event::Register(created('w', 2, 1, None)));
        assert!(matches!(
            s.apply(Event::PermitsRead(Err(zkc::Error::ConnectionLoss)))
                .as_slice(),
            [Action::Reply(Err(Refusal::Zk(_)))]
        ));
    }

    #[test]
    fn a_member_the_watch_has_not_shown_is_read_then_ordered_after_earlier_events() {
        let mut s = state(QueueKind::Lock, &[]);
        let out = s.apply(Event::Register(created('w', 5, 1, Some(50))));
        assert!(matches!(out.as_slice(), [Action::CheckPresent(n)] if n == &node('w', 5)));
        // Present: events received meanwhile are applied before it is placed.
        assert!(matches!(
            s.apply(Event::Present(Ok(true))).as_slice(),
            [Action::Settle]
        ));
        s.apply(Event::MemberCreated(member('w', 4)));
        match s.apply(Event::Settled).as_slice() {
            [Action::ReadPermits(m)] => assert_eq!(m.len(), 1),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            s.apply(Event::PermitsRead(Ok(vec![(node('w', 4), Some(1))])))
                .as_slice(),
            [Action::Reply(Ok(Enlisted {
                ahead: 1,
                holds: false
            }))]
        ));
        // Gone already: refused.
        assert!(matches!(
            {
                s.apply(Event::Register(created('w', 9, 1, None)));
                s.apply(Event::Present(Ok(false)))
            }
            .as_slice(),
            [Action::Reply(Err(Refusal::Gone))]
        ));
    }

    #[test]
    fn a_presence_read_lost_to_the_link_is_no_answer_not_absence() {
        assert!(matches!(presence(Ok(())), Ok(true)));
        assert!(matches!(presence::<()>(Err(zkc::Error::NoNode)), Ok(false)));
        for e in [zkc::Error::ConnectionLoss, zkc::Error::Timeout] {
            assert!(matches!(presence::<()>(Err(e.clone())), Err(got) if got == e));
        }
        // The registration is refused with the read's error (retryable as the link's), not as a
        // member that vanished after its create.
        let mut s = state(QueueKind::Lock, &[]);
        s.apply(Event::Register(created('w', 9, 1, None)));
        assert!(matches!(
            s.apply(Event::Present(Err(zkc::Error::ConnectionLoss)))
                .as_slice(),
            [Action::Reply(Err(Refusal::Zk(zkc::Error::ConnectionLoss)))]
        ));
    }

    #[test]
    fn a_resync_drops_members_gone_while_disconnected() {
        let mut s = state(QueueKind::Lock, &[('w', 1), ('w', 2)]);
        enlist(&mut s, created('w', 1, 1, Some(1)));
        enlist(&mut s, created('w', 2, 1, None));
        let out = s.apply(Event::Listed(Some(vec![node('w', 2)])));
        // Not shown, with no event of its deletion: the leader is asked first (the server
        // may lack it), and nothing is granted meanwhile.
        assert!(signalled(&out).is_empty(), "{out:?}");
        assert_eq!(leader_asked(&out), vec![node('w', 1)]);
        assert!(s.diverged());
        // Gone there too: a deletion the view missed.
        let out = s.apply(Event::Verified(vec![(node('w', 1), Ok(false))]));
        assert!(matches!(
            signalled(&out).as_slice(),
            [(n, MemberSignal::Gone)] if n == &node('w', 1)
        ));
        assert!(!s.diverged());
        assert_eq!(s.members(), 1);
        let due = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
        assert_eq!((due[0].sequence, due[0].czxid), (2, None));
        // The queue itself gone: empty and absent.
        s.apply(Event::Listed(None));
        assert_eq!((s.members(), s.present()), (0, false));
    }

    /// A server that lacks a member of ours the leader has (ZOOKEEPER-5010): the member keeps
    /// its place (it is not told it went, and its znode is not left behind as nobody's), the
    /// session is told its server diverged, and nothing is granted — not even to the member
    /// behind it, whom the server's view shows first — until it leaves or is shown again.
    #[test]
    fn a_local_member_the_server_lacks_keeps_its_place_and_nothing_is_granted() {
        for leaves in [true, false] {
            let mut s = state(QueueKind::Lock, &[('w', 1), ('w', 2), ('w', 3)]);
            enlist(&mut s, created('w', 1, 1, Some(1)));
            enlist(&mut s, created('w', 2, 1, None));
            enlist(&mut s, created('w', 3, 1, None));
            let out = s.apply(Event::Listed(Some(vec![node('w', 1), node('w', 3)])));
            assert_eq!(leader_asked(&out), vec![node('w', 2)]);
            let out = s.apply(Event::Verified(vec![(node('w', 2), Ok(true))]));
            assert!(signalled(&out).is_empty(), "{out:?}");
            assert!(
                matches!(out.as_slice(), [Action::Lacks(n)] if n == &node('w', 2)),
                "{out:?}"
            );
            assert!(s.diverged());
            // The holder leaves: by the server's view w3 is next, but w2 is, and neither is
            // granted while the view lacks w2.
            let out = s.apply(Event::MemberDeleted(member('w', 1)));
            assert!(ownership_asked(&out).is_empty(), "{out:?}");
            assert!(ownership_asked(&s.apply(Event::Reconcile { link_up: true })).is_empty());
            // A later listing that still lacks w2 asks nothing again.
            let out = s.apply(Event::Listed(Some(vec![node('w', 3)])));
            assert!(leader_asked(&out).is_empty(), "{out:?}");
            let out = if leaves {
                // w2 leaves (its delete goes through the leader): the proof goes with it, and
                // w3 is granted.
                let out = s.apply(Event::Unregister(node('w', 2)));
                assert!(
                    matches!(out.as_slice(), [Action::Withdraw(n)] if n == &node('w', 2)),
                    "{out:?}"
                );
                s.apply(Event::Reconcile { link_up: true })
            } else {
                // The server shows w2 again (healed): w2, first in line, is granted.
                let out = s.apply(Event::Listed(Some(vec![node('w', 2), node('w', 3)])));
                assert!(leader_asked(&out).is_empty(), "{out:?}");
                s.apply(Event::Reconcile { link_up: true })
            };
            assert!(!s.diverged(), "leaves: {leaves}");
            let due = ownership_asked(&out);
            let granted = if leaves { 3 } else { 2 };
            assert_eq!(
                due.iter().map(|d| d.sequence).collect::<Vec<_>>(),
                vec![granted],
                "leaves: {leaves}: {out:?}"
            );
        }
    }

    #[test]
    fn an_election_publishes_its_head_and_vacancies() {
        let mut s = state(QueueKind::Election, &[('c', 1), ('c', 2)]);
        // The first state is read before anything is published.
        match s.apply(Event::Reconcile { link_up: true }).as_slice() {
            [Action::ReadHead { sequence: 1, node }] => {
                assert_eq!(node, &super::tests::node('c', 1))
            }
            other => panic!("{other:?}"),
        }
        let out = head_is(&mut s, 1, data("a", 10, 10));
        assert_eq!(published(&out), vec![Some(10)]);
        // A write to the head whose content is known costs no read.
        s.apply(Event::DataChanged(member('c', 1), 10));
        assert!(s.apply(Event::Reconcile { link_up: true }).is_empty());
        // The head leaves: vacant until the next is read.
        s.apply(Event::MemberDeleted(member('c', 1)));
        let out = s.apply(Event::Reconcile { link_up: true });
        assert_eq!(published(&out), vec![None]);
        assert!(matches!(
            out.last(),
            Some(Action::ReadHead { sequence: 2, .. })
        ));
        // It vanished meanwhile: the queue is empty, and that is published once.
        let out = s.apply(Event::HeadRead {
            sequence: 2,
            node: node('c', 2),
            read: Err(zkc::Error::NoNode),
        });
        assert!(published(&out).is_empty(), "vacant already");
        assert_eq!(s.members(), 0);
    }

    #[test]
    fn a_head_this_gateway_is_creating_is_confirmed_by_its_create_reply_not_read() {
        // A reused name: the last leader has resigned, the queue is empty and published so.
        let mut s = state(QueueKind::Election, &[]);
        s.apply(Event::Reconcile { link_up: true });
        // Our new member's creation event comes before its create reply (and registration).
        s.set_creating([member('c', 3).id].into());
        s.apply(Event::MemberCreated(member('c', 3)));
        assert!(
            s.apply(Event::Reconcile { link_up: true }).is_empty(),
            "no read of a head whose registration is on its way"
        );
        assert!(enlist(&mut s, created('c', 3, 0, Some(30))).holds);
        s.set_creating(HashSet::new());
        let out = s.apply(Event::Reconcile { link_up: true });
        let due = ownership_asked(&out);
        assert_eq!(
            (due[0].sequence, due[0].czxid),
            (3, Some(30)),
            "its create reply"
        );
        let out = s.apply(Event::Owned(vec![(due[0].clone(), Ownership::Ours(30))]));
        assert_eq!(published(&out), vec![Some(30)]);
        // Another gateway's head, or a join abandoned before it registered: read as always.
        s.apply(Event::MemberCreated(member('c', 4)));
        s.apply(Event::MemberDeleted(member('c', 3)));
        s.set_creating([member('c', 4).id].into());
        let out = s.apply(Event::Reconcile { link_up: true });
        assert_eq!(published(&out), vec![None]);
        assert!(!out.iter().any(|a| matches!(a, Action::ReadHead { .. })));
        s.set_creating(HashSet::new());
        let out = s.apply(Event::Reconcile { link_up: true });
        assert!(matches!(
            out.as_slice(),
            [Action::ReadHead { sequence: 4, .. }]
        ));
    }

    #[test]
    fn our_head_is_confirmed_then_observers_see_it_with_its_failover() {
        let mut s = state(QueueKind::Election, &[('c', 1), ('c', 2)]);
        s.apply(Event::Reconcile { link_up: true });
        head_is(&mut s, 1, data("a", 10, 10));
        assert_eq!(enlist(&mut s, created('c', 2, 0, Some(20))).ahead, 1);
        s.apply(Event::MemberDeleted(member('c', 1)));
        // Suspended: neither confirmed nor read.
        let out = s.apply(Event::Reconcile { link_up: false });
        assert_eq!(published(&out), vec![None]);
        assert!(ownership_asked(&out).is_empty());
        let due = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
        assert_eq!(
            (due[0].sequence, due[0].czxid),
            (2, None),
            "admitted later: a read"
        );
        let out = s.apply(Event::Owned(vec![(due[0].clone(), Ownership::Ours(20))]));
        match signalled(&out).as_slice() {
            [(_, MemberSignal::Holds { holder, failover })] => {
                assert_eq!(holder.participant, "p2");
                assert!(failover.is_some(), "it waited through the vacancy");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(published(&out), vec![Some(20)]);
        // A proclaim reaches our own leader as `Proclaimed`.
        s.apply(Event::DataChanged(member('c', 2), 21));
        let out = s.apply(Event::Reconcile { link_up: true });
        assert!(matches!(
            out.as_slice(),
            [Action::ReadHead { sequence: 2, .. }]
        ));
        let mut d = data("p2", 20, 21);
        d.record.value = b"v".to_vec();
        let out = head_is(&mut s, 2, d);
        assert!(matches!(
            signalled(&out).as_slice(),
            [(_, MemberSignal::Proclaimed(h))] if h.value == b"v"
        ));
    }

    #[test]
    fn tokens_never_go_down_for_observers() {
        let mut s = state(QueueKind::Election, &[('c', 5)]);
        s.apply(Event::Reconcile { link_up: true });
        let out = head_is(&mut s, 5, data("new", 50, 50));
        assert_eq!(published(&out), vec![Some(50)]);
        // A stale read naming an older leader is not shown.
        s.apply(Event::DataChanged(member('c', 5), 51));
        s.apply(Event::Reconcile { link_up: true });
        let out = head_is(&mut s, 5, data("old", 40, 51));
        assert!(published(&out).is_empty());
    }

    #[test]
    fn an_empty_election_is_published_vacant_once() {
        let mut s = state(QueueKind::Election, &[]);
        let out = s.apply(Event::Reconcile { link_up: true });
        assert!(matches!(
            out.as_slice(),
            [Action::Publish(v)] if *v == QueueView::new(true, None)
        ));
        assert!(s.apply(Event::Reconcile { link_up: true }).is_empty());
    }
    /// Whether `actions` ask for a listing (and nothing else).
    fn lists(actions: &[Action]) -> bool {
        matches!(actions, [Action::List])
    }

    #[test]
    fn an_unsynced_view_confirms_nothing_until_a_listing_succeeds() {
        // (what happens while unsynced, link up?, what the reconcile asks for)
        let mut s = state(QueueKind::Lock, &[('w', 1), ('w', 2)]);
        assert!(!enlist(&mut s, created('w', 2, 1, None)).holds);
        // A reconnect: the view may have missed events (the deletion of member 1 among them).
        s.apply(Event::Unsynced);
        assert!(s.unsynced());
        s.apply(Event::MemberDeleted(member('w', 1)));
        for (link_up, asks_list) in [(false, false), (true, true)] {
            let out = s.apply(Event::Reconcile { link_up });
            assert_eq!(lists(&out), asks_list, "link up: {link_up}");
            assert!(
                ownership_asked(&out).is_empty(),
                "nothing confirmed unsynced"
            );
        }
        // A failed listing leaves it unsynced; the next reconcile lists again.
        assert!(s
            .apply(Event::ListFailed(zkc::Error::ConnectionLoss))
            .is_empty());
        assert!(s.unsynced());
        assert!(lists(&s.apply(Event::Reconcile { link_up: true })));
        // Listed: synced, and the member now at the head is confirmed by a read.
        assert!(s.apply(Event::Listed(Some(vec![node('w', 2)]))).is_empty());
        assert!(!s.unsynced());
        let due = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
        assert_eq!((due.len(), due[0].czxid), (1, None));
    }

    #[test]
    fn a_registration_while_unsynced_is_answered_after_the_listing() {
        let mut s = state(QueueKind::Lock, &[('w', 1)]);
        s.apply(Event::Unsynced);
        // Member 1 is gone and 2 is ours, created while the view was stale.
        assert!(
            s.apply(Event::Register(created('w', 2, 1, Some(20))))
                .is_empty(),
            "not placed in a view that may have missed events"
        );
        assert!(lists(&s.apply(Event::Reconcile { link_up: true })));
        let out = s.apply(Event::Listed(Some(vec![node('w', 2)])));
        assert!(matches!(
            out.as_slice(),
            [Action::Reply(Ok(Enlisted {
                ahead: 0,
                holds: true
            }))]
        ));
        let due = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
        assert_eq!(
            due[0].czxid,
            Some(20),
            "its create reply, after the listing"
        );
        // The link moving while its permits were read defers it the same way.
        let mut s = state(QueueKind::Lock, &[('w', 1), ('w', 2)]);
        assert!(matches!(
            s.apply(Event::Register(created('w', 2, 1, None)))
                .as_slice(),
            [Action::ReadPermits(_)]
        ));
        s.apply(Event::Unsynced);
        assert!(s
            .apply(Event::PermitsRead(Ok(vec![(node('w', 1), Some(1))])))
            .is_empty());
        let out = s.apply(Event::Listed(Some(vec![node('w', 1), node('w', 2)])));
        assert!(matches!(
            out.as_slice(),
            [Action::Reply(Ok(Enlisted {
                ahead: 1,
                holds: false
            }))]
        ));
    }

    #[test]
    fn a_confirmation_answered_after_the_link_moved_is_not_applied() {
        // Lock and election alike: the answer is judged by the link when it arrives.
        for kind in [QueueKind::Lock, QueueKind::Election] {
            let m = if kind == QueueKind::Lock { 'w' } else { 'c' };
            let mut s = state(kind, &[(m, 1)]);
            assert!(enlist(&mut s, created(m, 1, 1, None)).holds);
            let due = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
            assert_eq!(due.len(), 1, "{kind:?}");
            // The read was sent with the link up; it answers after a suspension began.
            s.apply(Event::Unsynced);
            let out = s.apply(Event::Owned(vec![(due[0].clone(), Ownership::Ours(10))]));
            assert!(
                signalled(&out).is_empty(),
                "{kind:?}: no grant after the link moved"
            );
            assert!(published(&out).iter().all(Option::is_none), "{kind:?}");
            // Once listed again with the link up it is asked and confirmed afresh.
            assert!(lists(&s.apply(Event::Reconcile { link_up: true })));
            s.apply(Event::Listed(Some(vec![node(m, 1)])));
            let due = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
            let out = s.apply(Event::Owned(vec![(due[0].clone(), Ownership::Ours(10))]));
            assert!(
                matches!(
                    signalled(&out).as_slice(),
                    [(_, MemberSignal::Holds { .. })]
                ),
                "{kind:?}"
            );
        }
        // A suspension reported by a reconcile while the read was out does the same.
        let mut s = state(QueueKind::Lock, &[('w', 1)]);
        enlist(&mut s, created('w', 1, 1, None));
        let due = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
        s.apply(Event::Reconcile { link_up: false });
        let out = s.apply(Event::Owned(vec![(due[0].clone(), Ownership::Ours(10))]));
        assert!(signalled(&out).is_empty());
    }

    #[test]
    fn a_child_reusing_a_sequence_number_never_replaces_a_member() {
        // A stranger's znode with our naming scheme and member 1's ten-digit suffix.
        let crafted = MemberName {
            mode: mode('w'),
            id: "f".repeat(32),
            sequence: 1,
        };
        let mut s = state(QueueKind::Lock, &[('w', 1)]);
        enlist(&mut s, created('w', 1, 1, Some(10)));
        s.apply(Event::MemberCreated(crafted.clone()));
        assert_eq!(s.members(), 2, "both kept, neither replaced");
        // Its deletion leaves the real member (and its grant) alone.
        assert!(s.apply(Event::MemberDeleted(crafted.clone())).is_empty());
        assert_eq!(s.members(), 1);
        let due = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
        assert_eq!(
            (due[0].node.clone(), due[0].czxid),
            (node('w', 1), Some(10))
        );
        // The same from a listing.
        s.apply(Event::Listed(Some(vec![
            node('w', 1),
            crafted.node_name(),
            "w-not-ours-0000000001".into(),
        ])));
        assert_eq!(s.members(), 2, "only members of our naming scheme");
    }

    #[test]
    fn a_lock_member_that_is_not_ephemeral_is_ignored() {
        // A persistent znode named like a writer heads a lock: its permits read says "no
        // member", so it neither blocks nor counts ahead.
        let mut s = state(QueueKind::Lock, &[('w', 1), ('w', 2)]);
        assert!(matches!(
            s.apply(Event::Register(created('w', 2, 1, Some(20))))
                .as_slice(),
            [Action::ReadPermits(_)]
        ));
        let out = s.apply(Event::PermitsRead(Ok(vec![(node('w', 1), None)])));
        assert!(matches!(
            out.as_slice(),
            [Action::Reply(Ok(Enlisted {
                ahead: 0,
                holds: true
            }))]
        ));
        s.apply(Event::Listed(Some(vec![node('w', 1), node('w', 2)])));
        assert_eq!(s.members(), 1, "still ignored after a listing");
    }

    #[test]
    fn a_head_that_is_not_ephemeral_is_ignored() {
        // A persistent znode named like a member heads the election: it is no leader.
        let mut s = state(QueueKind::Election, &[('c', 1), ('c', 2)]);
        assert!(matches!(
            s.apply(Event::Reconcile { link_up: true }).as_slice(),
            [Action::ReadHead { sequence: 1, .. }]
        ));
        let mut fake = data("intruder", 1, 1);
        fake.ephemeral = false;
        let out = head_is(&mut s, 1, fake);
        assert!(matches!(
            out.as_slice(),
            [Action::ReadHead { sequence: 2, .. }]
        ));
        let out = head_is(&mut s, 2, data("real", 2, 2));
        assert_eq!(published(&out), vec![Some(2)]);
        // Ignored for as long as it exists, listings included.
        s.apply(Event::Listed(Some(vec![node('c', 1), node('c', 2)])));
        assert_eq!(s.members(), 1);
        s.apply(Event::MemberDeleted(member('c', 1)));
        s.apply(Event::Listed(Some(vec![node('c', 1), node('c', 2)])));
        assert_eq!(
            s.members(),
            2,
            "a new znode of that name is looked at again"
        );
    }

    /// The member whose presence `actions` ask the synced server about.
    fn confirm_asked(actions: &[Action]) -> Option<String> {
        actions.iter().find_map(|a| match a {
            Action::ConfirmDivergence(n) => Some(n.clone()),
            _ => None,
        })
    }

    /// Whether `actions` tell the session its server diverged.
    fn divergence_told(actions: &[Action]) -> bool {
        actions.iter().any(|a| matches!(a, Action::Diverged(_)))
    }

    /// A member the leader refused that the session's server, synced, still lists proves the
    /// server diverged: the view grants nothing — no confirmation, no `holds` at join, no new
    /// leader for observers — until a listing no longer shows it. The soak of session 25:
    /// server 0 listed `[92, 93, 94, 98, 99]` where the quorum had `[94, 95, 98, 99]`, the
    /// ghosts 92 and 93 were left out, and 98 was granted beside 95.
    #[test]
    fn a_stranded_session_ends_its_waiting_members_and_keeps_its_holders() {
        for kind in [QueueKind::Election, QueueKind::Lock] {
            let m = if kind == QueueKind::Election {
                'c'
            } else {
                'w'
            };
            let mut s = state(kind, &[(m, 1), (m, 2), (m, 3)]);
            assert!(enlist(&mut s, created(m, 1, 1, Some(10))).holds);
            let due = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
            let out = s.apply(Event::Owned(
                due.into_iter().map(|d| (d, Ownership::Ours(10))).collect(),
            ));
            assert!(
                matches!(signalled(&out).as_slice(), [(n, MemberSignal::Holds { .. })] if n == &node(m, 1)),
                "{kind:?}: {out:?}"
            );
            assert!(!enlist(&mut s, created(m, 2, 1, Some(20))).holds);
            assert!(!enlist(&mut s, created(m, 3, 1, Some(30))).holds);
            // (diverged, stranded, the waiting members ended)
            for (diverged, stranded, ended) in [
                (false, false, false),
                (true, false, false),
                (true, true, true),
            ] {
                s.set_session_diverged(diverged);
                s.set_session_stranded(stranded);
                let out = s.apply(Event::Reconcile { link_up: true });
                let mut told: Vec<_> = signalled(&out)
                    .into_iter()
                    .map(|(n, sig)| (n, sig.clone()))
                    .collect();
                told.sort_by(|a, b| a.0.cmp(&b.0));
                let want = if ended {
                    vec![
                        (node(m, 2), MemberSignal::Unserved),
                        (node(m, 3), MemberSignal::Unserved),
                    ]
                } else {
                    vec![]
                };
                assert_eq!(
                    told, want,
                    "{kind:?} diverged {diverged} stranded {stranded}"
                );
            }
            // Told once: they are forgotten, and their znodes' deletions tell nobody.
            assert!(signalled(&s.apply(Event::Reconcile { link_up: true })).is_empty());
            assert!(signalled(&s.apply(Event::MemberDeleted(member(m, 2)))).is_empty());
            // A newcomer is refused (its caller deletes its znode); the holder stays.
            s.apply(Event::MemberCreated(member(m, 4)));
            let out = s.apply(Event::Register(created(m, 4, 1, Some(40))));
            assert!(
                matches!(out.as_slice(), [Action::Reply(Err(Refusal::Stranded))]),
                "{kind:?}: {out:?}"
            );
            assert!(signalled(&s.apply(Event::MemberDeleted(member(m, 3)))).is_empty());
            // The proof ends: a newcomer is served again, behind the holder.
            s.set_session_diverged(false);
            s.set_session_stranded(false);
            s.apply(Event::MemberCreated(member(m, 5)));
            assert!(!enlist(&mut s, created(m, 5, 1, Some(50))).holds);
            let out = s.apply(Event::MemberDeleted(member(m, 1)));
            assert!(
                matches!(signalled(&out).as_slice(), [(n, MemberSignal::Gone)] if n == &node(m, 1)),
                "{kind:?}: the holder was kept until its znode went: {out:?}"
            );
        }
    }

    #[test]
    fn a_server_that_keeps_a_member_the_leader_refused_grants_nothing() {
        // (the synced server's answer, whether it diverged)
        let table: [(Result<bool, zkc::Error>, bool); 3] = [
            (Ok(true), true),
            // No answer: taken as still listed, but told to nobody else.
            (Err(zkc::Error::ConnectionLoss), true),
            // Gone once synced: deleted after the listing that showed it.
            (Ok(false), false),
        ];
        for kind in [QueueKind::Election, QueueKind::Lock] {
            for (still, diverged) in &table {
                let case = format!("{kind:?} {still:?}");
                let m = if kind == QueueKind::Election {
                    'c'
                } else {
                    'w'
                };
                // Ours (98) waits behind 94; 95 is missing from this server's view.
                let mut s = state(kind, &[(m, 94), (m, 98)]);
                s.apply(Event::MemberCreated(member(m, 99)));
                assert!(
                    !enlist(&mut s, created(m, 98, 1, Some(980))).holds,
                    "{case}"
                );
                // Reconnected to the restarted server: it lists the ghosts 92 and 93.
                s.apply(Event::Unsynced);
                let listing = vec![
                    node(m, 92),
                    node(m, 93),
                    node(m, 94),
                    node(m, 98),
                    node(m, 99),
                ];
                let out = s.apply(Event::Listed(Some(listing.clone())));
                assert_eq!(verify_asked(&out), vec![node(m, 92), node(m, 93)], "{case}");
                let out = s.apply(Event::Verified(vec![
                    (node(m, 92), Ok(false)),
                    (node(m, 93), Ok(false)),
                ]));
                assert_eq!(confirm_asked(&out), Some(node(m, 92)), "{case}");
                assert!(
                    s.diverged(),
                    "{case}: nothing is granted while the server is asked"
                );
                s.apply(Event::StillListed(node(m, 93), Ok(false)));
                let out = s.apply(Event::StillListed(node(m, 92), still.clone()));
                assert_eq!(divergence_told(&out), *diverged && still.is_ok(), "{case}");
                assert_eq!(s.diverged(), *diverged, "{case}");
                // 94 leaves: by this view 98 is next, but the view is not the quorum's.
                s.apply(Event::MemberDeleted(member(m, 94)));
                let out = s.apply(Event::Reconcile { link_up: true });
                assert_eq!(
                    ownership_asked(&out).len(),
                    usize::from(!diverged),
                    "{case}"
                );
                let out = s.apply(Event::Owned(vec![(
                    Due {
                        sequence: 98,
                        node: node(m, 98),
                        czxid: None,
                    },
                    Ownership::Ours(980),
                )]));
                assert_eq!(
                    out.iter()
                        .any(|a| matches!(a, Action::Signal(_, MemberSignal::Holds { .. }))),
                    !diverged,
                    "{case}: an answer already out confirms nothing either"
                );
                if !diverged {
                    continue;
                }
                s.apply(Event::Listed(Some(vec![
                    node(m, 92),
                    node(m, 98),
                    node(m, 99),
                ])));
                assert!(s.diverged(), "{case}: the server still shows 92");
                let out = s.apply(Event::Reconcile { link_up: true });
                assert!(ownership_asked(&out).is_empty(), "{case}");
                // Restarted and synced again: 92 is gone, 95 is back and heads the queue.
                s.apply(Event::Unsynced);
                s.apply(Event::Listed(Some(vec![
                    node(m, 95),
                    node(m, 98),
                    node(m, 99),
                ])));
                assert!(!s.diverged(), "{case}");
                let out = s.apply(Event::Reconcile { link_up: true });
                assert!(ownership_asked(&out).is_empty(), "{case}: 95 holds, not 98");
                s.apply(Event::MemberDeleted(member(m, 95)));
                let out = s.apply(Event::Reconcile { link_up: true });
                assert_eq!(ownership_asked(&out).len(), 1, "{case}: 98 after 95");
            }
        }
        // Another queue of the session proved it: this one grants nothing either — not at
        // join (a try-lock is not told it holds), not after.
        for diverged in [false, true] {
            let mut s = state(QueueKind::Lock, &[('w', 1)]);
            s.set_session_diverged(diverged);
            assert_eq!(
                enlist(&mut s, created('w', 1, 1, Some(10))).holds,
                !diverged
            );
        }
        let mut s = state(QueueKind::Lock, &[('w', 1), ('w', 2)]);
        assert!(!enlist(&mut s, created('w', 2, 1, Some(20))).holds);
        s.set_session_diverged(true);
        s.apply(Event::MemberDeleted(member('w', 1)));
        assert!(ownership_asked(&s.apply(Event::Reconcile { link_up: true })).is_empty());
        s.set_session_diverged(false);
        assert_eq!(
            ownership_asked(&s.apply(Event::Reconcile { link_up: true })).len(),
            1
        );
        // Observers are shown no head a diverged view reads (the one before it may be missing
        // there): vacant until the proof ends.
        let mut s = state(QueueKind::Election, &[('c', 5), ('c', 6), ('c', 7)]);
        s.apply(Event::Reconcile { link_up: true });
        assert_eq!(
            published(&head_is(&mut s, 5, data("five", 5, 5))),
            vec![Some(5)]
        );
        s.set_session_diverged(true);
        s.apply(Event::MemberDeleted(member('c', 5)));
        let out = s.apply(Event::Reconcile { link_up: true });
        assert_eq!(published(&out), vec![None]);
        assert!(published(&head_is(&mut s, 6, data("six", 6, 6))).is_empty());
        s.set_session_diverged(false);
        let out = s.apply(Event::Reconcile { link_up: true });
        assert!(
            matches!(out.as_slice(), [Action::ReadHead { sequence: 6, .. }]),
            "{out:?}"
        );
        assert_eq!(
            published(&head_is(&mut s, 6, data("six", 6, 6))),
            vec![Some(6)]
        );
    }

    fn verify_asked(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .find_map(|a| match a {
                Action::VerifyAtLeader(n) => Some(n.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    #[test]
    fn a_member_listed_below_the_high_water_is_judged_by_the_leader() {
        // (the leader's answer, kept in the view, asked again at the next listing)
        let table: [(Result<bool, zkc::Error>, bool, bool); 3] = [
            (Ok(false), false, false),
            (Ok(true), true, false),
            (Err(zkc::Error::ConnectionLoss), true, true),
        ];
        for (answer, kept, asked_again) in table {
            let case = format!("{answer:?}");
            // Our w5 waits behind w4; sequence numbers up to 5 have been seen.
            let mut s = state(QueueKind::Lock, &[('w', 4), ('w', 5)]);
            let e = enlist(&mut s, created('w', 5, 1, Some(50)));
            assert!(!e.holds, "{case}");
            // After a reconnect the session's server lists w1, which no earlier listing had.
            let relisted = vec![node('w', 1), node('w', 4), node('w', 5)];
            let out = s.apply(Event::Listed(Some(relisted.clone())));
            assert_eq!(verify_asked(&out), vec![node('w', 1)], "{case}");
            // w4 leaves; until the leader answers, w1 blocks w5 (a suspect never grants).
            s.apply(Event::MemberDeleted(member('w', 4)));
            assert!(
                ownership_asked(&s.apply(Event::Reconcile { link_up: true })).is_empty(),
                "{case}"
            );
            let out = s.apply(Event::Verified(vec![(node('w', 1), answer)]));
            assert_eq!(s.members(), if kept { 2 } else { 1 }, "{case}");
            assert_eq!(
                confirm_asked(&out),
                (!kept).then(|| node('w', 1)),
                "{case}: the synced server is asked whether it still has it"
            );
            if !kept {
                // It does not (deleted meanwhile): nothing diverged. (One it still has:
                // `a_server_that_keeps_a_member_the_leader_refused_grants_nothing`.)
                s.apply(Event::StillListed(node('w', 1), Ok(false)));
            }
            let due = ownership_asked(&s.apply(Event::Reconcile { link_up: true }));
            assert_eq!(
                due.len(),
                usize::from(!kept),
                "{case}: w5 holds once w1 is out"
            );
            // The server keeps showing w1: a ghost stays out, an unanswered suspect is asked
            // about again, a confirmed member is not.
            let out = s.apply(Event::Listed(Some(vec![node('w', 1), node('w', 5)])));
            assert_eq!(s.members(), if kept { 2 } else { 1 }, "{case}");
            assert_eq!(!verify_asked(&out).is_empty(), asked_again, "{case}");
        }
    }

    #[test]
    fn only_strangers_first_seen_below_the_high_water_are_suspects() {
        // Members seen before and members above the high water are never asked about.
        let mut s = state(QueueKind::Election, &[('c', 3), ('c', 4)]);
        let out = s.apply(Event::Listed(Some(vec![
            node('c', 3),
            node('c', 4),
            node('c', 7),
        ])));
        assert!(verify_asked(&out).is_empty());
        // Created events raise the high water too.
        s.apply(Event::MemberCreated(member('c', 9)));
        let out = s.apply(Event::Listed(Some(vec![
            node('c', 3),
            node('c', 8),
            node('c', 9),
        ])));
        assert_eq!(verify_asked(&out), vec![node('c', 8)]);
        // A queue znode gone and made again numbers from zero: nothing is suspect then.
        let mut s = state(QueueKind::Lock, &[('w', 6)]);
        s.apply(Event::Listed(None));
        let out = s.apply(Event::Listed(Some(vec![node('w', 1)])));
        assert!(verify_asked(&out).is_empty());
        s.apply(Event::QueueDeleted);
        let out = s.apply(Event::Listed(Some(vec![node('w', 0), node('w', 1)])));
        assert!(verify_asked(&out).is_empty());
    }

    #[test]
    fn the_first_listings_members_in_a_local_members_way_are_judged_by_the_leader() {
        // (queue kind, first listing, our member, its permits, what is asked about)
        type Case = (
            QueueKind,
            &'static [(char, i64)],
            (char, i64),
            u32,
            Vec<String>,
        );
        let table: [Case; 4] = [
            // An election's head only.
            (
                QueueKind::Election,
                &[('c', 3), ('c', 8), ('c', 9)],
                ('c', 9),
                1,
                vec![node('c', 3)],
            ),
            // A 2-permit semaphore: the first two.
            (
                QueueKind::Lock,
                &[('w', 3), ('w', 8), ('w', 9)],
                ('w', 9),
                2,
                vec![node('w', 3), node('w', 8)],
            ),
            // Our member among the first: only the other one.
            (
                QueueKind::Lock,
                &[('w', 3), ('w', 9)],
                ('w', 9),
                2,
                vec![node('w', 3)],
            ),
            // Nobody ahead: nothing.
            (QueueKind::Lock, &[('w', 9)], ('w', 9), 1, vec![]),
        ];
        for (kind, listing, (m, seq), permits, asked) in table {
            let case = format!("{listing:?} with {m}{seq}");
            let mut s = first_listing(kind, listing);
            s.local.insert(
                node(m, seq),
                Local {
                    sequence: seq,
                    mode: mode(m),
                    record: NodeRecord {
                        permits,
                        ..Default::default()
                    },
                    confirmed: false,
                    czxid: None,
                },
            );
            let out = s.apply(Event::Reconcile { link_up: true });
            assert_eq!(verify_asked(&out), asked, "{case}");
            // Asked once: the next reconcile asks nothing new.
            let out = s.apply(Event::Reconcile { link_up: true });
            assert!(verify_asked(&out).is_empty(), "{case}");
        }
        // A ghost at the head of a first listing leaves once the leader says so, and the
        // member behind it is asked about in turn.
        let mut s = first_listing(QueueKind::Lock, &[('w', 3), ('w', 5), ('w', 9)]);
        let e = enlist(&mut s, created('w', 9, 1, Some(90)));
        assert!(!e.holds);
        let out = s.apply(Event::Reconcile { link_up: true });
        assert_eq!(verify_asked(&out), vec![node('w', 3)]);
        // The answer alone moves the queue on: no other event need come (a queue blocked
        // by ghosts sees none).
        let out = s.apply(Event::Verified(vec![(node('w', 3), Ok(false))]));
        assert_eq!(verify_asked(&out), vec![node('w', 5)]);
        // Deleted meanwhile, by the synced server: nothing diverged.
        let out = s.apply(Event::StillListed(node('w', 3), Ok(false)));
        assert!(ownership_asked(&out).is_empty(), "w5 still blocks");
        s.apply(Event::Verified(vec![(node('w', 5), Ok(false))]));
        let out = s.apply(Event::StillListed(node('w', 5), Ok(false)));
        let due = ownership_asked(&out);
        assert_eq!(due.len(), 1, "w9 holds once both are out");
    }
}
