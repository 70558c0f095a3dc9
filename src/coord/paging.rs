//! Keeping every packet the gateway exchanges with ZooKeeper under `jute.maxbuffer` (G10).
//!
//! ZooKeeper refuses a request larger than its `jute.maxbuffer` (1 MiB by default) by closing
//! the connection, which suspends every stream served over that session. It does *not* check the
//! size of its replies, and the vendored client accepts any length, but Java clients (zkCli,
//! Curator) refuse a reply above their own `jute.maxbuffer`, and a huge reply holds up every
//! other request on the session's connection. So the gateway keeps both sides under one byte
//! budget, `--zk-max-packet` ([`DEFAULT_ZK_MAX_PACKET`]):
//!
//! - **Multi-reads are paged** ([`ReadPlan`]): a page holds as many `getData` operations as fit
//!   the budget by the request's size (the sum of the paths plus the per-operation framing) *and*
//!   by the reply's worst case (every member at the largest data the gateway ever writes,
//!   [`member_data_bound`], plus its stat and framing). Pages are sent pipelined, a few in flight
//!   ([`PAGES_IN_FLIGHT`]).
//! - **`getChildren` cannot be paged** (ZooKeeper 3.8 has no paged listing), so a queue is
//!   bounded instead: [`max_queue_members`] is how many protected member names fit one
//!   `getChildren` reply within the budget (20,061 with the default). A join past it is refused
//!   `RESOURCE_EXHAUSTED`. Gateways decide from their own view, so concurrent joins on several
//!   gateways can overshoot by the joins in flight; the headroom between the default budget and
//!   `jute.maxbuffer` (64 KiB, ~1,300 names) absorbs that.
//!
//! The sizes below are jute's wire format: a length prefix on every packet, `int` and `long`
//! fields of 4 and 8 bytes, strings and buffers as a 4-byte length plus the bytes.

use super::bounds::MAX_NAME_LEN;
use super::types::QueueKind;

/// ZooKeeper's default `jute.maxbuffer`: 0xfffff bytes.
pub const JUTE_MAXBUFFER: usize = 0xfffff;

/// Default `--zk-max-packet`: 1 MiB minus 64 KiB of headroom below `jute.maxbuffer`.
pub const DEFAULT_ZK_MAX_PACKET: usize = 1024 * 1024 - 64 * 1024;

/// Multi-read pages sent before the first answer is awaited: enough to hide the round trip,
/// few enough that a request queued behind them on the same session (the liveness probe) is
/// not held up for long.
pub const PAGES_IN_FLIGHT: usize = 4;

/// Operations per multi-read page, whatever the budget allows: a request queued behind the
/// pages in flight on the same session (a liveness probe, a leader's confirmation) waits for
/// at most [`PAGES_IN_FLIGHT`] × this many reads, a few milliseconds.
pub const MAX_OPS_PER_PAGE: usize = 256;

/// Packet length prefix.
const FRAME: usize = 4;
/// Request header: xid, op type.
const REQUEST_HEADER: usize = 8;
/// Reply header: xid, zxid, err.
const REPLY_HEADER: usize = 16;
/// A multi's per-operation header: type, done, err.
const MULTI_HEADER: usize = 9;
/// A `Stat`: six longs (czxid, mzxid, ctime, mtime, ephemeralOwner, pzxid) and five ints
/// (version, cversion, aversion, dataLength, numChildren).
const STAT: usize = 6 * 8 + 5 * 4;
/// A protected member name: `<mode>-<32 hex>-<10 digits>` (sequences past 2^31 have 19 digits;
/// ZooKeeper's sequence counter is a 32-bit int, so they never occur).
pub const MEMBER_NAME_LEN: usize = 1 + 1 + 32 + 1 + 10;

/// The largest member data (a `NodeRecord`) the gateway writes in a queue of `kind`: the
/// participant (at most 200 characters, up to 4 bytes each in UTF-8), the value (elections
/// only; locks never carry one), the confirmation time and the permits, each with its protobuf
/// tag and length. Other gateways on the same root must use the same `--max-value-bytes`.
pub fn member_data_bound(kind: QueueKind, max_value_bytes: usize) -> usize {
    let participant = 1 + 3 + 4 * MAX_NAME_LEN;
    let value = match kind {
        QueueKind::Election => 1 + 5 + max_value_bytes,
        QueueKind::Lock => 0,
    };
    let elected_at = 1 + 10;
    let permits = 1 + 5;
    participant + value + elected_at + permits
}

/// The most members a queue may have: as many protected names as fit one `getChildren` reply
/// (reply header, a vector count, then each name with its length) within `budget`.
pub fn max_queue_members(budget: usize) -> usize {
    budget.saturating_sub(FRAME + REPLY_HEADER + 4) / (4 + MEMBER_NAME_LEN)
}

/// How a multi-read of many znodes is split into pages that each stay within the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadPlan {
    /// Largest request or reply packet allowed, in bytes.
    pub budget: usize,
    /// Largest data of any znode read, in bytes.
    pub data_bound: usize,
}

impl ReadPlan {
    /// Request bytes one `getData` operation of `path` adds to a multi.
    fn request_cost(path: &str) -> usize {
        MULTI_HEADER + 4 + path.len() + 1
    }

    /// Reply bytes one `getData` operation adds at most (data at the bound, or an error).
    fn reply_cost(&self) -> usize {
        MULTI_HEADER + 4 + self.data_bound + STAT
    }

    /// Splits `paths` into consecutive pages (as index ranges) whose request and worst-case
    /// reply both fit the budget. Every page has at least one path, so a budget too small for
    /// even one (refused at startup) still makes progress.
    pub fn pages(&self, paths: &[String]) -> Vec<std::ops::Range<usize>> {
        // The closing multi header follows the last operation, on both sides.
        let request_room = self
            .budget
            .saturating_sub(FRAME + REQUEST_HEADER + MULTI_HEADER);
        let reply_room = self
            .budget
            .saturating_sub(FRAME + REPLY_HEADER + MULTI_HEADER);
        let per_reply = self.reply_cost().max(1);
        let mut pages = Vec::new();
        let mut start = 0;
        while start < paths.len() {
            let mut end = start;
            let mut request = 0;
            while end < paths.len() {
                let cost = Self::request_cost(&paths[end]);
                let ops = end - start + 1;
                if end > start
                    && (request + cost > request_room
                        || ops * per_reply > reply_room
                        || ops > MAX_OPS_PER_PAGE)
                {
                    break;
                }
                request += cost;
                end += 1;
            }
            pages.push(start..end);
            start = end;
        }
        pages
    }

    /// The smallest budget that serves a member at the data bound: its read in a page of one,
    /// and its create or data write (path, data, ACL and headers; 2 KiB covers a long root).
    pub fn min_budget(&self) -> usize {
        (self.reply_cost() + FRAME + REPLY_HEADER + 2 * MULTI_HEADER).max(self.data_bound + 2048)
    }

    /// Whether one member at the data bound fits a page at all.
    pub fn fits_one(&self) -> bool {
        self.min_budget() <= self.budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coord::bounds::DEFAULT_MAX_VALUE_BYTES;

    fn paths(n: usize, len: usize) -> Vec<String> {
        (0..n).map(|_| "p".repeat(len)).collect()
    }

    #[test]
    fn default_queue_limit_fits_one_get_children_reply() {
        let n = max_queue_members(DEFAULT_ZK_MAX_PACKET);
        assert_eq!(n, 20_061);
        let reply = FRAME + REPLY_HEADER + 4 + n * (4 + MEMBER_NAME_LEN);
        assert!(reply <= DEFAULT_ZK_MAX_PACKET);
        // The headroom below jute.maxbuffer absorbs ~1,300 members of racing joins.
        assert!((JUTE_MAXBUFFER - reply) / (4 + MEMBER_NAME_LEN) > 1_300);
    }

    #[test]
    fn pages_respect_request_and_reply_bounds() {
        let budget = DEFAULT_ZK_MAX_PACKET;
        for (kind, value, n, path_len) in [
            (QueueKind::Election, DEFAULT_MAX_VALUE_BYTES, 20_000, 270),
            (QueueKind::Election, 0, 20_000, 270),
            (QueueKind::Lock, DEFAULT_MAX_VALUE_BYTES, 20_000, 270),
            (QueueKind::Election, 900 * 1024, 50, 270),
            (QueueKind::Lock, 0, 20_000, 3_000),
        ] {
            let plan = ReadPlan {
                budget,
                data_bound: member_data_bound(kind, value),
            };
            assert!(plan.fits_one());
            let ps = paths(n, path_len);
            let pages = plan.pages(&ps);
            assert_eq!(pages.first().unwrap().start, 0);
            assert_eq!(pages.last().unwrap().end, n);
            for w in pages.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
            for page in &pages {
                let ops = page.len();
                let request = FRAME
                    + REQUEST_HEADER
                    + MULTI_HEADER
                    + ps[page.clone()]
                        .iter()
                        .map(|p| ReadPlan::request_cost(p))
                        .sum::<usize>();
                let reply = FRAME + REPLY_HEADER + MULTI_HEADER + ops * plan.reply_cost();
                assert!(request <= budget, "{request}");
                assert!(reply <= budget, "{reply}");
            }
            // Pages are as full as the tighter bound allows (all but the last).
            let first = pages[0].len();
            if pages.len() > 1 && first < MAX_OPS_PER_PAGE {
                let request_next = FRAME
                    + REQUEST_HEADER
                    + MULTI_HEADER
                    + (first + 1) * ReadPlan::request_cost(&ps[0]);
                let reply_next =
                    FRAME + REPLY_HEADER + MULTI_HEADER + (first + 1) * plan.reply_cost();
                assert!(request_next > budget || reply_next > budget);
            }
        }
        // 64 KiB values: 14 members per page; locks (no value): the operation cap.
        let election = ReadPlan {
            budget,
            data_bound: member_data_bound(QueueKind::Election, DEFAULT_MAX_VALUE_BYTES),
        };
        assert_eq!(election.pages(&paths(100, 270))[0].len(), 14);
        let lock = ReadPlan {
            budget,
            data_bound: member_data_bound(QueueKind::Lock, DEFAULT_MAX_VALUE_BYTES),
        };
        assert_eq!(lock.pages(&paths(5_000, 270))[0].len(), MAX_OPS_PER_PAGE);
        assert!(lock.pages(&[]).is_empty());
    }
}
