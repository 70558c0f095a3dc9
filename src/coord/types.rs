//! Validated domain types. The API layer turns proto messages into these at the edge, so the
//! coordination layer never sees an unchecked name, value or lease.

use std::fmt;
use std::time::{Duration, SystemTime};

use rand::RngCore;

use super::bounds::{MAX_NAME_LEN, MAX_PERMITS};
use crate::auth::lease_key::{hex_decode, hex_encode, LeaseKeys};

/// Why an input was refused. Every variant reads as a sentence a person can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidInput {
    #[error("{field} must not be empty")]
    Empty { field: &'static str },
    #[error("{field} is {len} characters long; at most {MAX_NAME_LEN} are allowed")]
    TooLong { field: &'static str, len: usize },
    #[error(
        "{field} {value:?} contains {bad:?}; only letters, digits, '.', '_' and '-' are allowed"
    )]
    BadCharacter {
        field: &'static str,
        value: String,
        bad: char,
    },
    #[error("{field} must not be \".\" or \"..\"")]
    DotName { field: &'static str },
    #[error("value is {len} bytes; the limit is {limit} bytes")]
    ValueTooLarge { len: usize, limit: usize },
    #[error(
        "{field} {value:?} contains the control character {bad:?}; control characters and line separators are not allowed"
    )]
    ControlCharacter {
        field: &'static str,
        value: String,
        bad: char,
    },
    #[error("permits is {0}; at most {MAX_PERMITS} are allowed (0 or 1 is a mutex)")]
    TooManyPermits(u32),
    #[error(
        "mode READ needs permits 0 or 1 (a read-write lock has one writer at a time), not {0}"
    )]
    ReadWithPermits(u32),
    #[error("ttl must be positive; leave it unset to tie the lease to the stream")]
    ZeroTtl,
    /// A rule broken by the named request field.
    #[error("{field}: {error}")]
    InField {
        field: &'static str,
        error: Box<InvalidInput>,
    },
    #[error("{field} must not be negative (got {got})")]
    NegativeDuration { field: &'static str, got: String },
    #[error("mode {0} is not a LockMode: use LOCK_MODE_WRITE (0) or LOCK_MODE_READ (1)")]
    LockMode(i32),
    #[error("page_token is not a next_page_token from an earlier reply")]
    PageToken,
    /// A stream's opening message (join, acquire) sent again later.
    #[error("{what} may only be the first message of {stream} stream")]
    FirstOnly {
        what: &'static str,
        stream: &'static str,
    },
    /// A stream whose first message is not its opening one.
    #[error("the first {stream} message must be {expected}")]
    FirstMessage {
        stream: &'static str,
        expected: &'static str,
    },
    #[error("empty {message}: set {set}")]
    EmptyRequest {
        message: &'static str,
        set: &'static str,
    },
    #[error("stream closed before its first message ({what})")]
    ClosedBeforeFirst { what: &'static str },
}

impl InvalidInput {
    /// The same refusal, prefixed with the request field it concerns.
    pub fn in_field(self, field: &'static str) -> Self {
        InvalidInput::InField {
            field,
            error: Box::new(self),
        }
    }
}

/// What names and participants share: not `empty`, at most [`MAX_NAME_LEN`] characters, and
/// no character that `refused` picks (reported by `refusal`, with the value's first 60).
fn check_text(
    field: &'static str,
    s: &str,
    empty: bool,
    refused: impl Fn(char) -> bool,
    refusal: fn(&'static str, String, char) -> InvalidInput,
) -> Result<(), InvalidInput> {
    if empty {
        return Err(InvalidInput::Empty { field });
    }
    let len = s.chars().count();
    if len > MAX_NAME_LEN {
        return Err(InvalidInput::TooLong { field, len });
    }
    match s.chars().find(|&c| refused(c)) {
        Some(bad) => Err(refusal(field, s.chars().take(60).collect(), bad)),
        None => Ok(()),
    }
}

fn validate_name(field: &'static str, s: &str) -> Result<(), InvalidInput> {
    check_text(
        field,
        s,
        s.is_empty(),
        |c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')),
        |field, value, bad| InvalidInput::BadCharacter { field, value, bad },
    )?;
    if s == "." || s == ".." {
        return Err(InvalidInput::DotName { field });
    }
    Ok(())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $field:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Validates `s` as a name (contract "Errors").
            ///
            /// # Errors
            /// [`InvalidInput`] naming the rule that `s` breaks.
            pub fn new(s: impl Into<String>) -> Result<Self, InvalidInput> {
                let s = s.into();
                validate_name($field, &s)?;
                Ok(Self(s))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

name_type!(
    /// The name of an election or of a lock: one ZooKeeper path segment.
    QueueName,
    "name"
);

/// Who is campaigning or holding a lock, as shown to operators. Any non-empty UTF-8 up to
/// 200 characters: it lives in znode data, not in a path, so it needs no character rules.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Participant(String);

impl Participant {
    /// # Errors
    /// [`InvalidInput`] when empty, longer than 200 characters, or containing a control
    /// character or a Unicode line/paragraph separator.
    pub fn new(field: &'static str, s: impl Into<String>) -> Result<Self, InvalidInput> {
        let s = s.into();
        // Shown in logs and on operators' terminals: a newline, carriage return or escape
        // sequence could forge a log line or repaint a terminal.
        check_text(
            field,
            &s,
            s.trim().is_empty(),
            |c| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}'),
            |field, value, bad| InvalidInput::ControlCharacter { field, value, bad },
        )?;
        Ok(Self(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Participant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A value stored with a candidacy (bounded so that it stays far below ZooKeeper's jute limit).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Value(Vec<u8>);

impl Value {
    /// # Errors
    /// [`InvalidInput::ValueTooLarge`] over `limit` bytes.
    pub fn new(bytes: Vec<u8>, limit: usize) -> Result<Self, InvalidInput> {
        if bytes.len() > limit {
            return Err(InvalidInput::ValueTooLarge {
                len: bytes.len(),
                limit,
            });
        }
        Ok(Self(bytes))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

/// What kind of queue a znode lives in; part of the lease so any gateway can find the znode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueKind {
    Election,
    Lock,
}

impl QueueKind {
    /// The folder under the root (contract "ZooKeeper layout").
    pub fn folder(self) -> &'static str {
        match self {
            QueueKind::Election => "elections",
            QueueKind::Lock => "locks",
        }
    }

    fn tag(self) -> char {
        match self {
            QueueKind::Election => 'e',
            QueueKind::Lock => 'l',
        }
    }

    fn from_tag(c: char) -> Option<Self> {
        match c {
            'e' => Some(QueueKind::Election),
            'l' => Some(QueueKind::Lock),
            _ => None,
        }
    }
}

/// The random part of a protected znode name: 128 bits, hex. It lets the gateway find its own
/// znode again after a create whose reply was lost (G5), and it is the secret half of a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProtectedId(u128);

impl ProtectedId {
    pub fn random() -> Self {
        let mut b = [0u8; 16];
        rand::rng().fill_bytes(&mut b);
        Self(u128::from_le_bytes(b))
    }

    pub fn hex(&self) -> String {
        format!("{:032x}", self.0)
    }
}

/// What a queue member asks for: to lead an election, or a lock exclusively (one permit of a
/// semaphore) or shared. Its letter starts the member's znode name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemberMode {
    /// An election candidate (`c`): holds like a writer of a one-permit lock.
    Candidate,
    /// A WRITE lock request (`w`): exclusive, or one permit of a semaphore.
    Write,
    /// A READ lock request (`r`): shared with other readers.
    Read,
}

impl MemberMode {
    pub fn letter(self) -> char {
        match self {
            MemberMode::Candidate => 'c',
            MemberMode::Write => 'w',
            MemberMode::Read => 'r',
        }
    }

    pub fn from_letter(c: char) -> Option<Self> {
        match c {
            'c' => Some(MemberMode::Candidate),
            'w' => Some(MemberMode::Write),
            'r' => Some(MemberMode::Read),
            _ => None,
        }
    }

    /// Whether members of this mode share the hold with each other (readers).
    pub fn is_shared(self) -> bool {
        self == MemberMode::Read
    }
}

/// The name of one queue member's znode: `<mode>-<32 hex protected id>-<10+ digit sequence>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MemberName {
    pub mode: MemberMode,
    pub id: String,
    pub sequence: i64,
}

impl MemberName {
    /// The prefix passed to a sequential create; ZooKeeper appends the sequence.
    pub fn prefix(mode: MemberMode, id: &ProtectedId) -> String {
        format!("{}-{}-", mode.letter(), id.hex())
    }

    /// Parses a child name; `None` for anything that is not one of ours: a mode letter, a
    /// 32-digit hex protected id and the sequence exactly as ZooKeeper writes it (ten digits,
    /// so the name is the one [`MemberName::node_name`] gives back). A child with a longer or
    /// padded suffix cannot pose as the member whose sequence number it spells.
    pub fn parse(name: &str) -> Option<Self> {
        let mut parts = name.splitn(3, '-');
        let mode = parts.next()?;
        let id = parts.next()?;
        let seq = parts.next()?;
        let mut letters = mode.chars();
        let mode = match (letters.next(), letters.next()) {
            (Some(c), None) => MemberMode::from_letter(c)?,
            _ => return None,
        };
        if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        if seq.len() < 10 || !seq.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let member = Self {
            mode,
            id: id.to_owned(),
            sequence: seq.parse().ok()?,
        };
        (member.node_name() == name).then_some(member)
    }

    pub fn node_name(&self) -> String {
        if self.sequence <= i64::from(i32::MAX) {
            format!("{}-{}-{:010}", self.mode.letter(), self.id, self.sequence)
        } else {
            format!("{}-{}-{:019}", self.mode.letter(), self.id, self.sequence)
        }
    }
}

/// A capability naming exactly one znode: given only on the holder's own stream, honoured by
/// any gateway of the fleet. What it names — kind, queue, member znode — anyone who can list
/// ZooKeeper can see; what makes it a capability is its HMAC-SHA256 tag under the fleet's lease
/// key ([`LeaseKeys`]), which ZooKeeper never sees (G9). A late `Resign`/`Release` can never
/// touch a newer candidacy (a new znode has a new name, so a new tag).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    pub kind: QueueKind,
    pub queue: QueueName,
    pub member: MemberName,
}

/// Leases are secrets: never print one (logs, errors, Debug).
impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Lease({:?} {} seq {})",
            self.kind, self.queue, self.member.sequence
        )
    }
}

/// The lease format's version. `zkg1.` leases (the hex of the znode path, unsigned, so
/// forgeable from any listing) are no longer honoured: they are `NOT_FOUND`.
const LEASE_PREFIX: &str = "zkg2";

impl Lease {
    /// The text the tag covers: the format's version, kind, queue and member znode name.
    fn signed_text(&self) -> String {
        format!(
            "{LEASE_PREFIX}/{}/{}/{}",
            self.kind.tag(),
            self.queue,
            self.member.node_name()
        )
    }

    /// The opaque text form handed to clients: `zkg2.<hex of kind/queue/node>.<hex of the
    /// HMAC-SHA256 tag under the signing key>`, so clients are not tempted to parse it.
    pub fn encode(&self, keys: &LeaseKeys) -> String {
        let signed = self.signed_text();
        let raw = &signed[LEASE_PREFIX.len() + 1..];
        format!(
            "{LEASE_PREFIX}.{}.{}",
            hex_encode(raw.as_bytes()),
            hex_encode(keys.sign(signed.as_bytes()).as_ref())
        )
    }

    /// Parses a lease of the given kind whose tag verifies under one of `keys`. Anything
    /// malformed, unsigned (`zkg1.`), signed under a key this gateway does not hold — or a lock
    /// lease given to the election service — is `None`, which the API reports as `NOT_FOUND`
    /// (contract "API": a lease the gateway cannot honour is not found, whatever the reason).
    pub fn decode(text: &str, kind: QueueKind, keys: &LeaseKeys) -> Option<Self> {
        let rest = text.strip_prefix(LEASE_PREFIX)?.strip_prefix('.')?;
        let (hex, tag) = rest.split_once('.')?;
        if hex.len() > 2 * 512 || tag.len() != 64 {
            return None;
        }
        let raw = String::from_utf8(hex_decode(hex)?).ok()?;
        let tag = hex_decode(tag)?;
        if !keys.verify(format!("{LEASE_PREFIX}/{raw}").as_bytes(), &tag) {
            return None;
        }
        let mut parts = raw.splitn(3, '/');
        let tag = parts.next()?.chars().next()?;
        if QueueKind::from_tag(tag)? != kind {
            return None;
        }
        let queue = QueueName::new(parts.next()?).ok()?;
        let member = MemberName::parse(parts.next()?)?;
        Some(Self {
            kind,
            queue,
            member,
        })
    }
}

/// A fencing token: the znode's creation zxid. Later leaders of an election always have larger
/// ones, because ZooKeeper's zxids grow and a successor's znode was created later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(pub u64);

/// A member that holds — an election's leader or a lock holder — as everybody may see it: no
/// lease here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The election or lock.
    pub queue: QueueName,
    /// The candidate or owner.
    pub participant: String,
    /// The leader's proclaimed value (empty for locks).
    pub value: Vec<u8>,
    pub fencing_token: FencingToken,
    /// When it took office: when the answering gateway saw it, else its join time.
    pub since: SystemTime,
}

/// A queue member as shown to operators (Candidates, Holders).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    /// The znode's sequence number: the member's place for paging, never shown.
    pub sequence: i64,
    pub participant: String,
    pub value: Vec<u8>,
    pub position: u32,
    pub fencing_token: FencingToken,
    pub joined: SystemTime,
    pub leader_since: Option<SystemTime>,
    pub mode: MemberMode,
}

impl MemberInfo {
    /// An upper estimate of the member's size in a reply (its strings plus the fixed fields and
    /// their framing), for byte-bounded pages.
    pub fn wire_size_hint(&self) -> usize {
        self.participant.len() + self.value.len() + 64
    }
}

/// Default byte budget of one Candidates or Holders reply: a quarter of the 4 MiB that gRPC
/// clients accept by default, so a page never meets a client's receive limit.
pub const DEFAULT_PAGE_BYTES: usize = 1024 * 1024;

/// Which part of a long listing (Candidates, Holders) to return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageSpec {
    /// Only members queued after the member with this sequence number (from a page token);
    /// `None` from the front of the queue.
    pub after: Option<i64>,
    /// At most this many entries; 0 for no count limit (the byte budget still applies).
    pub max_entries: usize,
    /// The page ends before its entries' estimated size passes this (it always has at least
    /// one entry, if any is left).
    pub max_bytes: usize,
}

impl Default for PageSpec {
    fn default() -> Self {
        Self {
            after: None,
            max_entries: 0,
            max_bytes: DEFAULT_PAGE_BYTES,
        }
    }
}

impl PageSpec {
    /// Whether a page that has `entries` entries of `bytes` estimated bytes is full before an
    /// entry of `next` bytes.
    pub fn full(&self, entries: usize, bytes: usize, next: usize) -> bool {
        entries > 0
            && ((self.max_entries > 0 && entries >= self.max_entries)
                || bytes.saturating_add(next) > self.max_bytes)
    }

    /// Cuts one page out of `items` (in queue order): those after `after`, up to the limits.
    /// Returns the page and, when more follow, the sequence to continue after.
    pub fn take(&self, items: Vec<MemberInfo>) -> (Vec<MemberInfo>, Option<i64>) {
        let mut page = Vec::new();
        let mut bytes = 0;
        for item in items
            .into_iter()
            .filter(|m| self.after.is_none_or(|a| m.sequence > a))
        {
            let size = item.wire_size_hint();
            if self.full(page.len(), bytes, size) {
                let next = page.last().map(|m: &MemberInfo| m.sequence);
                return (page, next);
            }
            bytes += size;
            page.push(item);
        }
        (page, None)
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Where the next page starts (after this sequence); `None` on the last page.
    pub next_after: Option<i64>,
    /// Entries in the whole listing, on every page.
    pub total: usize,
}

/// Durations clamped for the wire.
pub fn saturating_duration(d: Option<Duration>) -> Duration {
    d.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(QueueName::new("a").is_ok());
        assert!(QueueName::new("svc.primary_1-x").is_ok());
        assert!(QueueName::new("x".repeat(200)).is_ok());
        assert!(matches!(
            QueueName::new("x".repeat(201)),
            Err(InvalidInput::TooLong { len: 201, .. })
        ));
        assert!(matches!(
            QueueName::new(""),
            Err(InvalidInput::Empty { .. })
        ));
        assert!(matches!(
            QueueName::new("."),
            Err(InvalidInput::DotName { .. })
        ));
        assert!(matches!(
            QueueName::new(".."),
            Err(InvalidInput::DotName { .. })
        ));
        assert!(QueueName::new("...").is_ok());
        for bad in ["a/b", "a b", "é", "a\0", "x:y", "/"] {
            assert!(
                matches!(QueueName::new(bad), Err(InvalidInput::BadCharacter { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn participants_and_values() {
        assert!(Participant::new("candidate", "").is_err());
        assert!(Participant::new("candidate", "  ").is_err());
        assert!(Participant::new("candidate", "host-1 (pid 7)").is_ok());
        assert!(Value::new(vec![0; 10], 10).is_ok());
        assert_eq!(
            Value::new(vec![0; 11], 10),
            Err(InvalidInput::ValueTooLarge { len: 11, limit: 10 })
        );
    }

    #[test]
    fn member_names_round_trip_and_order() {
        let id = ProtectedId::random();
        let name = format!(
            "{}{:010}",
            MemberName::prefix(MemberMode::Candidate, &id),
            42
        );
        let m = MemberName::parse(&name).unwrap();
        assert_eq!(m.sequence, 42);
        assert_eq!(m.node_name(), name);
        assert!(MemberName::parse("c-zz-0000000001").is_none());
        assert!(MemberName::parse("x-00000000000000000000000000000000-0000000001").is_none());
        assert!(MemberName::parse("lock-0000000001").is_none());
        // Only the suffix ZooKeeper writes: not one that spells a member's number otherwise.
        let prefix = MemberName::prefix(MemberMode::Candidate, &id);
        for crafted in ["00000000042", "000000000000000042", "+000000042"] {
            assert!(
                MemberName::parse(&format!("{prefix}{crafted}")).is_none(),
                "{crafted}"
            );
        }
    }

    #[test]
    fn pages_by_count_and_bytes() {
        let member = |sequence: i64, len: usize| MemberInfo {
            sequence,
            participant: "p".repeat(len),
            value: Vec::new(),
            position: 0,
            fencing_token: FencingToken(sequence as u64),
            joined: SystemTime::UNIX_EPOCH,
            leader_since: None,
            mode: MemberMode::Write,
        };
        let items: Vec<MemberInfo> = (1..=10).map(|s| member(s * 10, 36)).collect();
        let seqs = |v: &[MemberInfo]| v.iter().map(|m| m.sequence).collect::<Vec<_>>();
        // Everything fits the default page: one page, no continuation.
        let (page, next) = PageSpec::default().take(items.clone());
        assert_eq!((page.len(), next), (10, None));
        // By count, continuing after the last sequence returned.
        let spec = PageSpec {
            max_entries: 4,
            ..PageSpec::default()
        };
        let (page, next) = spec.take(items.clone());
        assert_eq!((seqs(&page), next), (vec![10, 20, 30, 40], Some(40)));
        let (page, next) = PageSpec {
            after: next,
            ..spec
        }
        .take(items.clone());
        assert_eq!((seqs(&page), next), (vec![50, 60, 70, 80], Some(80)));
        let (page, next) = PageSpec {
            after: Some(80),
            ..spec
        }
        .take(items.clone());
        assert_eq!((seqs(&page), next), (vec![90, 100], None));
        // By bytes (100 each): three fit in 350; an oversized entry still makes a page.
        let spec = PageSpec {
            max_bytes: 350,
            ..PageSpec::default()
        };
        assert_eq!(spec.take(items.clone()).0.len(), 3);
        let spec = PageSpec {
            max_bytes: 10,
            ..PageSpec::default()
        };
        assert_eq!(spec.take(items).0.len(), 1);
    }

    #[test]
    fn leases_round_trip_and_reject_garbage() {
        let keys = LeaseKeys::from_secrets([vec![7u8; 32]], "test");
        let id = ProtectedId::random();
        let member = MemberName::parse(&format!(
            "{}{:010}",
            MemberName::prefix(MemberMode::Candidate, &id),
            7
        ))
        .unwrap();
        let lease = Lease {
            kind: QueueKind::Election,
            queue: QueueName::new("db").unwrap(),
            member,
        };
        let text = lease.encode(&keys);
        assert_eq!(
            Lease::decode(&text, QueueKind::Election, &keys),
            Some(lease.clone())
        );
        assert_eq!(
            Lease::decode(&text, QueueKind::Lock, &keys),
            None,
            "a lock service must not accept an election lease"
        );
        let other = LeaseKeys::from_secrets([vec![8u8; 32]], "other");
        assert_eq!(
            Lease::decode(&text, QueueKind::Election, &other),
            None,
            "a lease signed under a key the gateway does not hold"
        );
        let rotated = LeaseKeys::from_secrets([vec![8u8; 32], vec![7u8; 32]], "rotated");
        assert_eq!(
            Lease::decode(&text, QueueKind::Election, &rotated),
            Some(lease.clone()),
            "a lease signed under the file's second key"
        );
        // The forgery of issue 20: the old unsigned form, built from a listing.
        let raw = format!("e/db/{}", lease.member.node_name());
        let zkg1 = format!("zkg1.{}", hex_encode(raw.as_bytes()));
        assert_eq!(Lease::decode(&zkg1, QueueKind::Election, &keys), None);
        // The new form with the tag of another lease, or a flipped bit.
        let (body, tag) = text.rsplit_once('.').unwrap();
        let other_queue = Lease {
            queue: QueueName::new("dc").unwrap(),
            ..lease.clone()
        }
        .encode(&keys);
        let (_, other_tag) = other_queue.rsplit_once('.').unwrap();
        let mut flipped = tag.to_owned();
        flipped.replace_range(0..1, if tag.starts_with('0') { "1" } else { "0" });
        for bad in [
            "",
            "zkg2",
            "zkg2.",
            "zkg2.zz",
            "zkg2.6",
            "nonsense",
            "zkg1.652f2e2e2f63",
            &format!("{body}.{other_tag}"),
            &format!("{body}.{flipped}"),
            &format!("{body}."),
            body,
        ] {
            assert_eq!(
                Lease::decode(bad, QueueKind::Election, &keys),
                None,
                "{bad}"
            );
        }
        assert!(
            !format!("{lease:?}").contains(&id.hex()),
            "Debug must not reveal the secret"
        );
        assert_ne!(ProtectedId::random(), ProtectedId::random());
    }
}
