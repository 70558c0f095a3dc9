//! Locks: mutexes, N-permit semaphores and read-write locks, served by the same per-queue actor,
//! watch and znode layout as elections (`/<root>/locks/<name>/<mode>-<id>-<seq>`).
//!
//! # One recipe
//! Every Acquire stream is one EPHEMERAL_SEQUENTIAL member znode: `w-…` for WRITE (exclusive,
//! or one permit of a semaphore), `r-…` for READ. Who holds follows from the order alone
//! ([`HolderScan`](super::queue::HolderScan)): the first `permits` writers hold while no
//! reader is ahead of them; readers hold while no writer is ahead of them. A member that holds
//! keeps holding until its znode goes, so the only event that moves a lock is a deletion, and
//! it wakes only the members it admits (herd-free, G4).
//!
//! # Permits
//! The permit count is recorded in every member's data (`NodeRecord::permits`, at least 1).
//! A newcomer is compared with every member ahead of it and refused (`FAILED_PRECONDITION`,
//! znode deleted first) if any of them disagrees, so all members alive at the same moment
//! agree; once a name is idle, the next contender may choose a new count. READ needs a
//! single-permit name: a read-write lock has one writer at a time.
//!
//! `Holders` and `Validate` judge every member by the queue's *agreed* count — its head's,
//! which every accepted member behind it matched ([`AgreedScan`]) — never by a member's own: a
//! refused newcomer whose znode is not deleted yet would otherwise be listed as a holder (and
//! validate) with a larger count than the queue's.
//!
//! # Waiting and leases
//! `wait_timeout` and `ttl` are enforced by the gateway that hosts the stream, on its monotonic
//! clock; see [`AcquireSpec`] for how precisely.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::bounds::MAX_PERMITS;
use super::error::CoordError;
use super::link::LossReason;
use super::member::{self, list_members, read_data, Member, MemberEvent};
use super::pool::SessionPool;
use super::record::{since, NodeRecord};
use super::session::{UnaryWork, ZkSession};
use super::types::{
    FencingToken, Holder, InvalidInput, Lease, MemberInfo, MemberMode, PageSpec, Participant,
    QueueKind, QueueName,
};
use crate::metrics as m;

/// Exclusive (WRITE) or shared (READ) on the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    Write,
    Read,
}

impl LockMode {
    /// The mode of the member's znode.
    pub fn member_mode(self) -> MemberMode {
        match self {
            LockMode::Write => MemberMode::Write,
            LockMode::Read => MemberMode::Read,
        }
    }

    /// The lock mode of a member (anything but a reader excludes).
    pub fn of_member(mode: MemberMode) -> Self {
        if mode.is_shared() {
            LockMode::Read
        } else {
            LockMode::Write
        }
    }
}

/// A validated `acquire`.
///
/// # How precisely the timers hold
/// Both run on the hosting gateway's monotonic clock, from the moment it processed the event;
/// network delay to and from the client is not included.
/// - `wait_timeout` counts from `queued`. When it passes before `acquired`, the znode is
///   deleted (the delete is awaited) and only then does the stream end `DEADLINE_EXCEEDED`.
///   A request that holds the moment it is queued is never timed out (so zero is a try-lock
///   that succeeds exactly when the lock is free in the gateway's view).
/// - `ttl` counts from `acquired` and restarts with every `keep_alive{}` the gateway receives
///   (keep-alives before `acquired` are accepted, change nothing, and are never acknowledged:
///   a holder counts its ttl from its own sends). When `ttl` passes without one, the hold is
///   *revoked*, never simply deleted (G3c): the holder hears `suspended{stop_within}` at once
///   (`stop_within` = its silence limit), heartbeats stop, and the znode is deleted when the
///   holder ends its stream (cancel, half-close, `release{}`) or `silence_limit` after the last
///   message the gateway sent it, whichever comes first — so a holder cut off from the gateway
///   has stopped by its own watchdog before anyone else can acquire. The stream then ends
///   `ABORTED` (keep-alives arriving during the revocation change nothing). A client should
///   send keep-alives well within `ttl` (say every `ttl / 3`).
#[derive(Debug, Clone)]
pub struct AcquireSpec {
    pub name: QueueName,
    pub owner: Participant,
    /// At least 1.
    pub permits: u32,
    pub mode: LockMode,
    /// `None`: wait forever; zero: try-lock.
    pub wait_timeout: Option<Duration>,
    /// `None`: the lease lives as long as the stream.
    pub ttl: Option<Duration>,
}

impl AcquireSpec {
    /// Checks the combination: permits 0 or 1 is a mutex, at most [`MAX_PERMITS`], READ only on
    /// a single-permit name, `ttl` positive when set.
    ///
    /// # Errors
    /// [`InvalidInput`] naming the rule broken.
    pub fn new(
        name: QueueName,
        owner: Participant,
        permits: u32,
        mode: LockMode,
        wait_timeout: Option<Duration>,
        ttl: Option<Duration>,
    ) -> Result<Self, InvalidInput> {
        if permits > MAX_PERMITS {
            return Err(InvalidInput::TooManyPermits(permits));
        }
        let permits = permits.max(1);
        if mode == LockMode::Read && permits > 1 {
            return Err(InvalidInput::ReadWithPermits(permits));
        }
        if ttl.is_some_and(|t| t.is_zero()) {
            return Err(InvalidInput::ZeroTtl);
        }
        Ok(Self {
            name,
            owner,
            permits,
            mode,
            wait_timeout,
            ttl,
        })
    }
}

/// A confirmed holder, as its own stream hears it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquisition {
    pub name: QueueName,
    pub owner: String,
    pub fencing_token: FencingToken,
    pub since: SystemTime,
    pub mode: LockMode,
}

/// What an Acquire stream tells its client, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum LockEvent {
    Acquired(Acquisition),
    Suspended {
        stop_within: Duration,
    },
    Resumed,
    /// `wait_timeout` passed before `acquired`: [`LockHold::begin_release`], then `DEADLINE_EXCEEDED`.
    WaitExpired(Duration),
    /// No keep-alive within `ttl` while held: the stream revokes the hold (G3c: `suspended`
    /// first, the znode deleted once the holder ended its stream or its silence limit passed
    /// since the last message sent to it), then `ABORTED`. Reported once.
    LeaseExpired(Duration),
    /// A `Release` by lease (any gateway) asked for this hold to end: the stream ends it by
    /// G3c (told first, deleted once its stream ends or its silence limit passed), then `OK`.
    EndRequested,
    Ended(LockEnd),
}

/// Why a hold ended by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockEnd {
    /// The znode was deleted by a `Release` with the lease (any gateway). Ends `OK`.
    Released,
    /// The session is over (or presumed over). Ends `ABORTED`, or `UNAVAILABLE` when draining.
    Lost(LossReason),
    /// Waiting on a session stranded on a diverged server (`coord::divergence`): its znode is
    /// deleted so that the lock's queue moves on without it. Ends `UNAVAILABLE`.
    Unserved,
}

/// While held: the token for the log line and the gauge that counts held locks.
#[derive(Debug)]
struct Held {
    fencing_token: FencingToken,
    _gauge: m::GaugeGuard,
}

/// One open Acquire stream's place in a lock's queue: its [`Member`] plus what only locks have
/// — the wait and the ttl. Dropping it (the stream ended for any reason) deletes its znode:
/// stream loss is release (G3).
#[derive(Debug)]
pub struct LockHold {
    member: Member,
    mode: LockMode,
    owner: String,
    queued_at: Instant,
    wait_timeout: Option<Duration>,
    /// Until `acquired`; `None` waits forever.
    wait_deadline: Option<Instant>,
    ttl: Option<Duration>,
    /// While held with a ttl: the latest moment for the next keep-alive.
    ttl_deadline: Option<Instant>,
    held: Option<Held>,
    /// Its place on the gateway's board (per-name metrics, `/ui`).
    presence: super::board::Presence,
}

/// [`Coordinator::acquire`](super::Coordinator::acquire), served over the pool.
pub(super) async fn acquire(pool: &SessionPool, spec: AcquireSpec) -> Result<LockHold, CoordError> {
    let record = NodeRecord {
        participant: spec.owner.as_str().to_owned(),
        permits: spec.permits,
        ..Default::default()
    };
    let member = member::join_member(
        pool,
        QueueKind::Lock,
        &spec.name,
        spec.mode.member_mode(),
        record,
    )
    .await?;
    let queued_at = Instant::now();
    let presence = pool
        .board
        .queued(QueueKind::Lock, &spec.name, spec.owner.as_str());
    // A request that holds the moment it is queued is never timed out: a try-lock on a free
    // lock succeeds although confirming it takes a round trip.
    let wait_deadline = match spec.wait_timeout {
        Some(t) if !member.held_at_join() => {
            Some(queued_at.checked_add(t).unwrap_or_else(far_future))
        }
        _ => None,
    };
    Ok(LockHold {
        member,
        mode: spec.mode,
        owner: spec.owner.as_str().to_owned(),
        queued_at,
        wait_timeout: spec.wait_timeout,
        wait_deadline,
        ttl: spec.ttl,
        ttl_deadline: None,
        held: None,
        presence,
    })
}

/// About 30 years from now: a deadline too far to matter (an `Instant` cannot hold more).
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86400 * 365 * 30)
}

async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

impl LockHold {
    /// Its member: lease, position, timing.
    pub fn member(&self) -> &Member {
        &self.member
    }

    /// Held as far as the gateway knows: acquired, and the znode not reported gone (heartbeats
    /// stop as soon as it is, even while the cause is being decided).
    pub fn is_held(&self) -> bool {
        self.held.is_some() && !self.member.is_settling()
    }

    pub fn name(&self) -> &QueueName {
        &self.member.lease().queue
    }

    /// A keep-alive from the client: while held, the ttl starts over.
    pub fn keep_alive(&mut self) {
        if self.held.is_some() {
            self.ttl_deadline = self
                .ttl
                .map(|t| Instant::now().checked_add(t).unwrap_or_else(far_future));
        }
    }

    /// The next thing to tell the client. After `Ended` the hold is over; after `WaitExpired`
    /// or `LeaseExpired` the caller releases it.
    ///
    /// # Cancellation safety
    /// Cancellation safe: it only reads channels and sleeps until deadlines kept in `self`.
    pub async fn next_event(&mut self) -> LockEvent {
        loop {
            // Leaving, or deciding why the znode went: no deadline applies any more.
            let deadline = match (&self.held, self.member.is_settling()) {
                (_, true) => None,
                (Some(_), false) => self.ttl_deadline,
                (None, false) => self.wait_deadline,
            };
            let event = tokio::select! {
                biased;
                event = self.member.next_event() => event,
                _ = sleep_until_some(deadline) => {
                    return match (&self.held, self.ttl, self.wait_timeout) {
                        (Some(held), Some(ttl), _) => {
                            tracing::info!(
                                lock = %self.name(), owner = %self.owner, fencing_token = held.fencing_token.0,
                                ?ttl, "lock lease expired: no keep_alive within ttl; revoking"
                            );
                            // Said once: the stream revokes the hold from here (G3c).
                            self.ttl_deadline = None;
                            LockEvent::LeaseExpired(ttl)
                        }
                        (_, _, wait) => LockEvent::WaitExpired(wait.unwrap_or_default()),
                    };
                }
            };
            return match event {
                MemberEvent::Holds { holder, .. } => self.acquired(holder),
                // Values are never proclaimed on a lock.
                MemberEvent::Proclaimed(_) => continue,
                MemberEvent::Suspended { stop_within } => LockEvent::Suspended { stop_within },
                MemberEvent::Resumed => LockEvent::Resumed,
                MemberEvent::EndRequested => LockEvent::EndRequested,
                MemberEvent::Left => self.end(LockEnd::Released),
                MemberEvent::Lost(reason) => self.end(LockEnd::Lost(reason)),
                MemberEvent::Unserved => self.end(LockEnd::Unserved),
            };
        }
    }

    fn acquired(&mut self, holder: Holder) -> LockEvent {
        let waited = self.queued_at.elapsed();
        m::lock_wait(waited);
        // One line per hand-over; never the lease.
        tracing::info!(
            lock = %holder.queue, owner = %holder.participant, fencing_token = holder.fencing_token.0,
            mode = ?self.mode, waited_ms = waited.as_millis() as u64, "lock acquired"
        );
        self.presence.granted(&holder);
        self.held = Some(Held {
            fencing_token: holder.fencing_token,
            _gauge: m::GaugeGuard::raise(m::locks_held),
        });
        self.wait_deadline = None;
        self.keep_alive();
        LockEvent::Acquired(Acquisition {
            name: holder.queue,
            owner: holder.participant,
            fencing_token: holder.fencing_token,
            since: holder.since,
            mode: self.mode,
        })
    }

    fn end(&mut self, why: LockEnd) -> LockEvent {
        self.log_release(&format!("{why:?}"));
        LockEvent::Ended(why)
    }

    fn log_release(&mut self, why: &str) {
        if let Some(held) = self.held.take() {
            tracing::debug!(lock = %self.member.lease().queue, owner = %self.owner, fencing_token = held.fencing_token.0, why, "lock released");
        }
    }

    /// Starts giving the lock (or the place in its queue) up (see [`Member::begin_leave`]).
    pub fn begin_release(
        &mut self,
    ) -> impl std::future::Future<Output = Result<(), CoordError>> + Send + 'static {
        self.log_release("released");
        self.member.begin_leave()
    }
}

impl Drop for LockHold {
    fn drop(&mut self) {
        self.log_release("stream ended");
        // The member's own drop deletes the znode unless it is known gone.
    }
}

/// Who holds a lock now, and how many wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolders {
    /// One page of the holders, in queue order; `leader_since` is when each was confirmed as
    /// holder.
    pub holders: Vec<MemberInfo>,
    pub waiting: u32,
    /// Holders in all pages.
    pub total: u32,
    /// Where the next page of holders starts; `None` on the last page.
    pub next_after: Option<i64>,
}

/// Who holds a lock queue as read by `Holders`/`Validate`, member by member in queue order:
/// the rule of [`HolderScan`](super::queue::HolderScan), with the permit count the queue agreed
/// on (its first member's) for everyone. A member recording another count was refused (or is
/// being refused: its znode is deleted before its stream is answered) and never holds; it is
/// still counted ahead of the members behind it, as every gateway's own view does, so this
/// never lists a member its gateway would not confirm.
///
/// The head itself is taken as agreed. It can be a refused member only in the moment between
/// its predecessor's deletion and its own; then the accepted members behind it (those that
/// matched it) are judged by the count they agreed to, and the others are not listed.
#[derive(Debug, Default)]
pub struct AgreedScan {
    scan: super::queue::HolderScan,
    agreed: Option<u32>,
}

/// What [`AgreedScan::judge`] says of one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judged {
    Holds,
    /// Its count is not the queue's: not a holder (and not waiting), yet ahead of later ones.
    Refused,
    /// Not admitted: neither it nor anyone after it holds.
    Stop,
}

impl AgreedScan {
    /// Judges the next member present, of `mode`, that recorded `permits`.
    pub fn judge(&mut self, mode: MemberMode, permits: u32) -> Judged {
        let own = permits.max(1);
        let agreed = *self.agreed.get_or_insert(own);
        if !self.scan.admits(mode, agreed) {
            return Judged::Stop;
        }
        self.scan.push(mode);
        if own == agreed {
            Judged::Holds
        } else {
            Judged::Refused
        }
    }
}

/// The most members whose data one step of a Holders scan reads.
const HOLDERS_READ_CHUNK: usize = 1024;

/// Every confirmed holder of a lock, in queue order, and the number of waiters, read from
/// ZooKeeper in paged multi-reads (G10). Holders are a prefix of the queue (by the rule of
/// [`HolderScan`](super::queue::HolderScan), once it admits nobody, nobody later can
/// hold), so only that prefix is read, in growing chunks: a mutex with thousands of waiters
/// costs a read of its head.
async fn all_holders(
    pool: &SessionPool,
    name: &QueueName,
) -> Result<(Vec<MemberInfo>, u32), CoordError> {
    let session = pool.session_for(QueueKind::Lock, name)?;
    let _room = session.unary_room(UnaryWork::Read).await;
    all_holders_on(&session, name).await
}

/// [`all_holders`] read through `session` (after its `sync`, for Validate).
async fn all_holders_on(
    session: &ZkSession,
    name: &QueueName,
) -> Result<(Vec<MemberInfo>, u32), CoordError> {
    let kind = QueueKind::Lock;
    let path = session.queue_path(kind, name);
    let members = list_members(session, &path).await?;
    let mut present = members.len();
    let mut holders = Vec::new();
    let mut scan = AgreedScan::default();
    let mut at = 0;
    let mut chunk_len = 16;
    'scan: while at < members.len() {
        let chunk = &members[at..(at + chunk_len).min(members.len())];
        let data = read_data(session, kind, &path, chunk).await?;
        for (i, (member, found)) in chunk.iter().zip(data).enumerate() {
            // Gone since the listing: neither holding nor waiting.
            let Some((record, stat)) = found else {
                present -= 1;
                continue;
            };
            match scan.judge(member.mode, record.permits) {
                Judged::Stop => break 'scan,
                Judged::Refused => {
                    present -= 1;
                    continue;
                }
                Judged::Holds => {}
            }
            // Admitted by the rule means holding: its gateway confirms it without a write.
            holders.push(MemberInfo {
                sequence: member.sequence,
                leader_since: Some(since(&record, &stat)),
                participant: record.participant,
                value: record.value,
                position: (at + i) as u32,
                fencing_token: FencingToken(stat.czxid as u64),
                joined: super::record::ms_to_time(stat.ctime),
                mode: member.mode,
            });
        }
        at += chunk.len();
        chunk_len = (chunk_len * 4).min(HOLDERS_READ_CHUNK);
    }
    let waiting = present.saturating_sub(holders.len()) as u32;
    Ok((holders, waiting))
}

/// [`Coordinator::holders`](super::Coordinator::holders), served over the pool.
pub(super) async fn holders(
    pool: &SessionPool,
    name: &QueueName,
    page: PageSpec,
) -> Result<LockHolders, CoordError> {
    let (holders, waiting) = all_holders(pool, name).await?;
    let total = holders.len() as u32;
    let (holders, next_after) = page.take(holders);
    Ok(LockHolders {
        holders,
        waiting,
        total,
        next_after,
    })
}

/// [`Coordinator::validate_holder`](super::Coordinator::validate_holder), served over the pool.
pub(super) async fn validate_holder(
    pool: &SessionPool,
    name: &QueueName,
    token: FencingToken,
) -> Result<bool, CoordError> {
    // As for elections: a `sync` first, on the session that then reads, so a lagging
    // follower never vouches for a holder the quorum has already let go.
    let session = pool.session_for(QueueKind::Lock, name)?;
    let _room = session.unary_room(UnaryWork::Read).await;
    session
        .zk
        .sync(&session.queue_path(QueueKind::Lock, name))
        .await?;
    Ok(all_holders_on(&session, name)
        .await?
        .0
        .iter()
        .any(|h| h.fencing_token == token))
}

/// [`Coordinator::release`](super::Coordinator::release), served over the pool.
pub(super) async fn release(pool: &SessionPool, lease: &Lease) -> Result<(), CoordError> {
    debug_assert_eq!(lease.kind, QueueKind::Lock);
    member::end_by_lease(&*pool.session_for(lease.kind, &lease.queue)?, lease).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(
        permits: u32,
        mode: LockMode,
        ttl: Option<Duration>,
    ) -> Result<AcquireSpec, InvalidInput> {
        AcquireSpec::new(
            QueueName::new("l").unwrap(),
            Participant::new("owner", "o").unwrap(),
            permits,
            mode,
            None,
            ttl,
        )
    }

    /// Members in queue order (mode letter, own permit count), and what each is judged.
    type Case = (&'static [(char, u32)], &'static [Judged]);

    #[test]
    fn holders_are_judged_by_the_agreed_count() {
        use Judged::*;
        let cases: &[Case] = &[
            // A mutex holder and a refused newcomer asking 5: not a holder.
            (&[('w', 1), ('w', 5)], &[Holds, Stop]),
            // A semaphore of 3 and a refused newcomer asking 1: ahead of the rest, not holding.
            (
                &[('w', 3), ('w', 1), ('w', 3), ('w', 3)],
                &[Holds, Refused, Holds, Stop],
            ),
            (&[('w', 2), ('w', 2), ('w', 9)], &[Holds, Holds, Stop]),
            // 0 is a mutex, as everywhere.
            (&[('w', 0), ('w', 1), ('w', 1)], &[Holds, Stop, Stop]),
            // Readers share a one-permit name; a reader asking more is refused.
            (&[('r', 1), ('r', 2), ('r', 1)], &[Holds, Refused, Holds]),
        ];
        for (members, expected) in cases {
            let mut scan = AgreedScan::default();
            let mut judged = Vec::new();
            for &(m, permits) in *members {
                let mode = MemberMode::from_letter(m).unwrap();
                let j = scan.judge(mode, permits);
                judged.push(j);
                if j == Stop {
                    // Monotone: nobody later holds.
                    break;
                }
            }
            let want: Vec<Judged> = expected.iter().copied().take(judged.len()).collect();
            assert_eq!(judged, want, "{members:?}");
        }
    }

    #[test]
    fn permits_modes_and_ttl() {
        assert_eq!(spec(0, LockMode::Write, None).unwrap().permits, 1);
        assert_eq!(spec(1, LockMode::Read, None).unwrap().permits, 1);
        assert_eq!(
            spec(MAX_PERMITS, LockMode::Write, None).unwrap().permits,
            MAX_PERMITS
        );
        assert!(spec(MAX_PERMITS + 1, LockMode::Write, None).is_err());
        assert!(spec(u32::MAX, LockMode::Write, None).is_err());
        assert!(spec(3, LockMode::Read, None).is_err());
        assert!(spec(1, LockMode::Write, Some(Duration::ZERO)).is_err());
        assert!(spec(1, LockMode::Write, Some(Duration::from_millis(1))).is_ok());
        assert_eq!(
            LockMode::of_member(LockMode::Read.member_mode()),
            LockMode::Read
        );
        assert_eq!(
            LockMode::of_member(LockMode::Write.member_mode()),
            LockMode::Write
        );
    }
}
