//! What goes into the next write batch, and what happens to a batch that failed: the pure
//! decisions of the session's natural batching (the I/O is `zk::Zk`'s batch driver).
//!
//! # Natural batching
//! A member create or delete asked while nothing of this session's writes is in flight is sent
//! at once, alone, as a plain request (no timer on the idle path: the same request and round
//! trip as without batching). One asked while a write is in flight waits for it; when it is
//! answered, everything that gathered meanwhile leaves in one ZooKeeper `multi` — one
//! proposal, one log append, one fsync for all of them — bounded by [`BatchLimits`].
//!
//! # A failed batch
//! A `multi` is all or nothing. When ZooKeeper refuses one of its operations (a member create
//! under a container reaped meanwhile: `NoNode`; a delete of a znode already gone: `NoNode`)
//! nothing of the batch was applied, and the reply names the first operation that failed:
//! that one alone gets its error, exactly as it would have got it as a request of its own
//! after the ones before it, and the rest are sent again, unchanged, in the next batch
//! ([`after_failure`]). So one bad operation never fails the others, and each failure costs
//! one round trip more. An error that names no operation and is not the link's (a request
//! the server could not take) sends every operation of the batch again alone. A batch whose
//! reply was lost with the connection may or may not have been applied, as a lost single
//! request: every operation in it gets the link's error, so each member create goes through
//! its own protected-name search (G5) and each delete is retried until the znode is gone.

/// A write the batcher sends: a member create or a delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOp {
    /// An EPHEMERAL_SEQUENTIAL member under `prefix` (the protected name up to its sequence).
    Create { prefix: String, data: Vec<u8> },
    /// A delete of `path`, any version.
    Delete { path: String },
}

/// Bytes a `multi` request spends on an operation besides its path and data: the multi header
/// (type, done, error: 9), the two length prefixes (8), the flags (4) and a single ACL entry
/// (permissions, scheme and id with their lengths: at most 48 for `world:anyone` or
/// ZooKeeper's `auth` creator entry). Rounded up generously: the bound only has to keep the
/// packet under `--zk-max-packet`, which already leaves 64 KiB below `jute.maxbuffer`.
const OP_OVERHEAD: usize = 96;

/// Bytes of a `multi` request besides its operations (the request header, the final "done"
/// header, the length frame).
pub const MULTI_OVERHEAD: usize = 64;

impl WriteOp {
    /// An upper bound on what this operation adds to a `multi` request (its reply is smaller:
    /// a path and a stat, or a header).
    pub fn bytes(&self) -> usize {
        OP_OVERHEAD
            + match self {
                Self::Create { prefix, data } => prefix.len() + data.len(),
                Self::Delete { path } => path.len(),
            }
    }

    /// The label it is counted under when it goes alone (`zkgate_zk_requests_total{op}`).
    pub fn label(&self) -> &'static str {
        match self {
            Self::Create { .. } => "create",
            Self::Delete { .. } => "delete",
        }
    }
}

/// How large one batch may grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    /// Operations in one `multi` at most.
    pub max_ops: usize,
    /// The `multi` request's size at most (`--zk-max-packet`).
    pub max_bytes: usize,
}

/// Operations in one `multi` at most by default: a batch's reply then stays far below the
/// packet budget too (a path and a stat per create). The session's request slots bound it
/// further (a batch of n takes n of its `REQUESTS_IN_FLIGHT`, see `zk::Zk`'s driver).
pub const DEFAULT_MAX_BATCH_OPS: usize = 128;

impl BatchLimits {
    pub fn new(max_bytes: usize) -> Self {
        Self {
            max_ops: DEFAULT_MAX_BATCH_OPS,
            max_bytes,
        }
    }
}

/// One queued operation as [`next_batch`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queued<'a> {
    pub bytes: usize,
    /// It was in a batch that failed with an error naming no operation: it goes alone.
    pub alone: bool,
    /// The queue (parent znode) it creates a member in or deletes a member from.
    pub queue: &'a str,
    pub create: bool,
}

impl WriteOp {
    /// The queue (parent znode path) of the member it creates or deletes.
    pub fn queue(&self) -> &str {
        let path = match self {
            Self::Create { prefix, .. } => prefix,
            Self::Delete { path } => path,
        };
        path.rsplit_once('/').map_or("", |(parent, _)| parent)
    }
}

/// Which of the queued operations leave in the next request, in queue order: the first one
/// always (an operation too large for a batch goes alone, as it would without batching), then
/// each next one while the batch stays within `limits`, except:
///
/// * **One member create per queue per batch.** Every znode a `multi` creates has the same
///   creation zxid, and a member's creation zxid is its fencing token (G1: the tokens of
///   successive holders strictly increase). Two members of one queue created by one `multi`
///   would share a token; so a second create in a queue waits for the next batch, and with it
///   every later operation of that queue (each queue's operations keep their order).
/// * An operation that must go alone ends the batch before it, and is a batch of its own.
///
/// Empty only for an empty queue.
pub fn next_batch(queued: &[Queued<'_>], limits: BatchLimits) -> Vec<usize> {
    let Some(first) = queued.first() else {
        return Vec::new();
    };
    let mut taken = vec![0];
    if first.alone {
        return taken;
    }
    let mut bytes = MULTI_OVERHEAD + first.bytes;
    let mut created_in: Vec<&str> = Vec::new();
    if first.create {
        created_in.push(first.queue);
    }
    let mut waiting: Vec<&str> = Vec::new();
    for (i, q) in queued.iter().enumerate().skip(1) {
        if q.alone || taken.len() >= limits.max_ops || bytes + q.bytes > limits.max_bytes {
            break;
        }
        if waiting.contains(&q.queue) || (q.create && created_in.contains(&q.queue)) {
            waiting.push(q.queue);
            continue;
        }
        if q.create {
            created_in.push(q.queue);
        }
        bytes += q.bytes;
        taken.push(i);
    }
    taken
}

/// Whether a write may wait for the next batch. A delete that can let someone in — a member
/// leaving a queue that has other members: a holder's release hands over, and only a delete
/// does — is on a hand-over's critical path, where each acquisition of a busy lock waits for
/// the one before it. Gathered behind the write in flight (often the previous holder's create
/// as it queues again), it waited a whole round trip more: in the bench's W3 (16 clients on
/// one lock) about half the hand-overs did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Urgency {
    /// Waits for the batch in flight and leaves with the next one.
    Gather,
    /// Goes pipelined behind at most one batch in flight ([`starts_driver`]).
    HandOver,
}

/// Drivers (each with a batch in flight or about to be) that a hand-over's delete may join:
/// the batch in flight and its own. More would only split batches: anything asked while two
/// are in flight leaves with the next one, as every write does while one is.
pub const HAND_OVER_DRIVERS: usize = 2;

/// Whether a write asked while `drivers` batch drivers run starts one of its own, and so
/// leaves now instead of gathering for the next batch: always on an idle session (no timer
/// on the idle path), and for a hand-over while fewer than [`HAND_OVER_DRIVERS`] run. It still
/// leaves after everything asked before it (a driver takes the waiting operations from the
/// front, [`next_batch`]) and, on the session's one connection, after the batch in flight:
/// each queue's operations keep their order.
pub fn starts_driver(drivers: usize, urgency: Urgency) -> bool {
    match urgency {
        Urgency::Gather => drivers == 0,
        Urgency::HandOver => drivers < HAND_OVER_DRIVERS,
    }
}

/// How a batch of several operations failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// ZooKeeper refused operation `index` (and so applied none of the batch).
    Refused { index: usize },
    /// The link failed: the batch may or may not have been applied.
    Link,
    /// Anything else: the request was not taken as a whole (applied: none).
    Other,
}

/// What to do with each operation of a failed batch, in the batch's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Answer it with the batch's error.
    Fail,
    /// Queue it again, at the front, in the batch's order; `alone`: as a request of its own.
    Again { alone: bool },
}

/// The fate of each of a failed batch's `len` operations (see the module docs): a refused
/// operation fails and the others go again; a link failure fails them all (each one's caller
/// then looks for what may have been applied, as after a lost single request); any other
/// failure sends them all again, each alone.
pub fn after_failure(len: usize, failure: Failure) -> Vec<Fate> {
    (0..len)
        .map(|i| match failure {
            Failure::Refused { index } if i == index => Fate::Fail,
            // An index outside the batch names no operation of it: nothing was applied, so
            // each goes again alone and gets its own answer.
            Failure::Refused { index } if index >= len => Fate::Again { alone: true },
            Failure::Refused { .. } => Fate::Again { alone: false },
            Failure::Link => Fate::Fail,
            Failure::Other => Fate::Again { alone: true },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(bytes: usize) -> Queued<'static> {
        Queued {
            bytes,
            alone: false,
            queue: "/d",
            create: false,
        }
    }

    fn alone(bytes: usize) -> Queued<'static> {
        Queued {
            alone: true,
            ..q(bytes)
        }
    }

    fn create(queue: &'static str) -> Queued<'static> {
        Queued {
            queue,
            create: true,
            ..q(10)
        }
    }

    fn delete(queue: &'static str) -> Queued<'static> {
        Queued { queue, ..q(10) }
    }

    #[test]
    fn the_next_batch_takes_what_fits_from_the_front() {
        let limits = BatchLimits {
            max_ops: 3,
            max_bytes: 1_000,
        };
        let cases: &[(&str, Vec<Queued>, Vec<usize>)] = &[
            ("empty queue: nothing to send", vec![], vec![]),
            ("one op goes alone at once", vec![q(100)], vec![0]),
            ("all that fit", vec![q(100), q(100)], vec![0, 1]),
            ("bounded by count", vec![q(10); 5], vec![0, 1, 2]),
            (
                "bounded by bytes (64 + 400 + 400 fits, one more does not)",
                vec![q(400), q(400), q(400)],
                vec![0, 1],
            ),
            (
                "an op larger than the budget still goes, alone",
                vec![q(5_000), q(10)],
                vec![0],
            ),
            ("the bound is inclusive", vec![q(468), q(468)], vec![0, 1]),
            (
                "an op that must go alone ends the batch",
                vec![q(10), alone(10), q(10)],
                vec![0],
            ),
            ("and goes alone itself", vec![alone(10), q(10)], vec![0]),
            (
                "creates in different queues share a batch",
                vec![create("/a"), create("/b"), create("/c")],
                vec![0, 1, 2],
            ),
            (
                "never two creates of one queue (their fencing tokens would be equal)",
                vec![create("/a"), create("/a"), create("/b")],
                vec![0, 2],
            ),
            (
                "a queue's later ops wait behind its deferred create",
                vec![create("/a"), create("/a"), delete("/a"), delete("/b")],
                vec![0, 3],
            ),
            (
                "deletes and a create of one queue share a batch",
                vec![delete("/a"), create("/a"), delete("/a")],
                vec![0, 1, 2],
            ),
        ];
        for (what, queued, want) in cases {
            assert_eq!(&next_batch(queued, limits), want, "{what}");
        }
    }

    #[test]
    fn no_batch_ever_holds_two_creates_of_one_queue() {
        // Every mix of creates and deletes over two queues, batched until the queue is empty:
        // no batch creates twice in one queue, and each queue's ops leave in order.
        let queues = ["/a", "/b"];
        for mask in 0u32..(1 << 12) {
            let ops: Vec<Queued> = (0..6)
                .map(|i| {
                    let queue = queues[((mask >> (2 * i)) & 1) as usize];
                    if (mask >> (2 * i + 1)) & 1 == 1 {
                        create(queue)
                    } else {
                        delete(queue)
                    }
                })
                .collect();
            let mut left: Vec<usize> = (0..ops.len()).collect();
            let mut sent_order = Vec::new();
            while !left.is_empty() {
                let view: Vec<Queued> = left.iter().map(|&i| ops[i]).collect();
                let picked = next_batch(&view, BatchLimits::new(1 << 20));
                assert!(!picked.is_empty());
                for queue in queues {
                    let creates = picked
                        .iter()
                        .filter(|&&i| view[i].create && view[i].queue == queue)
                        .count();
                    assert!(
                        creates <= 1,
                        "two creates of {queue} in one batch: {mask:b}"
                    );
                }
                sent_order.extend(picked.iter().map(|&i| left[i]));
                for &i in picked.iter().rev() {
                    left.remove(i);
                }
            }
            for queue in queues {
                let order: Vec<usize> = sent_order
                    .iter()
                    .copied()
                    .filter(|&i| ops[i].queue == queue)
                    .collect();
                assert!(
                    order.windows(2).all(|w| w[0] < w[1]),
                    "{queue} reordered: {mask:b}"
                );
            }
        }
    }

    #[test]
    fn only_a_hand_over_leaves_behind_a_batch_in_flight() {
        use Urgency::*;
        for (drivers, urgency, starts) in [
            (0, Gather, true),
            (0, HandOver, true),
            (1, Gather, false),
            (1, HandOver, true),
            (2, Gather, false),
            (2, HandOver, false),
            (5, HandOver, false),
        ] {
            assert_eq!(
                starts_driver(drivers, urgency),
                starts,
                "{drivers} drivers, {urgency:?}"
            );
        }
    }

    #[test]
    fn a_failed_batch_fails_only_what_failed() {
        use Fate::*;
        let again = Again { alone: false };
        let cases: &[(&str, usize, Failure, Vec<Fate>)] = &[
            (
                "the refused op fails, the others go again in order",
                3,
                Failure::Refused { index: 1 },
                vec![again, Fail, again],
            ),
            (
                "first refused",
                2,
                Failure::Refused { index: 0 },
                vec![Fail, again],
            ),
            (
                "a lost reply fails every op (each looks for its own)",
                3,
                Failure::Link,
                vec![Fail, Fail, Fail],
            ),
            (
                "an error naming no op: each goes again alone",
                2,
                Failure::Other,
                vec![Again { alone: true }, Again { alone: true }],
            ),
            (
                "an index outside the batch names no op: each goes again alone",
                2,
                Failure::Refused { index: 5 },
                vec![Again { alone: true }, Again { alone: true }],
            ),
        ];
        for (what, len, failure, want) in cases {
            assert_eq!(&after_failure(*len, *failure), want, "{what}");
        }
    }

    #[test]
    fn every_failure_makes_progress() {
        // A refusal answers exactly one op: a batch of n that keeps failing ends within n
        // round trips.
        for len in 1..6 {
            for index in 0..len {
                let fates = after_failure(len, Failure::Refused { index });
                assert_eq!(fates.iter().filter(|f| **f == Fate::Fail).count(), 1);
            }
        }
    }

    #[test]
    fn sizes_count_path_and_data() {
        let c = WriteOp::Create {
            prefix: "/a/b".into(),
            data: vec![0; 10],
        };
        let d = WriteOp::Delete {
            path: "/a/b".into(),
        };
        assert_eq!(c.bytes(), OP_OVERHEAD + 14);
        assert_eq!(d.bytes(), OP_OVERHEAD + 4);
        assert_eq!((c.label(), d.label()), ("create", "delete"));
        assert_eq!((c.queue(), d.queue()), ("/a", "/a"));
    }
}
