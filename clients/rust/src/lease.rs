//! A holder's lease on its own clock (contract G3b, the proto's `Ping`): the pure rule the
//! hold's task follows with a gateway that answers pings.
//!
//! The watchdog of a holder that only *hears* counts from the moment a message arrives, and how
//! late that is nobody bounds: a slow link let a holder run past a frozen gateway's session
//! (found by a probe: 274–493 ms beside the successor with a 1.9 s link and a 2 s session).
//! Here the holder numbers its pings and remembers when it sent each; the gateway answers one
//! only while its ZooKeeper session vouches for the hold at least `silence_limit` past the
//! moment it read it, and a grant carries the newest ping it had read. So the deadline is the
//! *send* time of the newest answered ping + `silence_limit` — always before anyone else can be
//! granted, however late the answer arrives, and a late or replayed answer cannot move it past
//! what the real one allowed.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// Pings remembered while unanswered. Waiters' pings are never answered (only the grant names
/// one), so the oldest are forgotten: one that old could only anchor a lease already over.
const REMEMBERED: usize = 64;

/// The pings sent on one stream, and the lease the answered ones give.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    /// (seq, when sent), oldest first.
    sent: VecDeque<(u64, Instant)>,
    last_seq: u64,
    /// The silence limit of the grant.
    limit: Option<Duration>,
    /// The deadline, once granted.
    until: Option<Instant>,
}

impl Lease {
    /// A stream whose first message (the join or acquire) was ping 1, sent at `first_sent`.
    pub(crate) fn new(first_sent: Instant) -> Self {
        Self {
            sent: VecDeque::from([(1, first_sent)]),
            last_seq: 1,
            limit: None,
            until: None,
        }
    }

    /// The number of the next ping, sent at `now`.
    pub(crate) fn ping(&mut self, now: Instant) -> u64 {
        self.last_seq += 1;
        if self.sent.len() == REMEMBERED {
            self.sent.pop_front();
        }
        self.sent.push_back((self.last_seq, now));
        self.last_seq
    }

    /// When ping `seq` was sent, forgetting it and every older one (answers come in order).
    fn take(&mut self, seq: u64) -> Option<Instant> {
        let at = self.sent.iter().find(|(s, _)| *s == seq).map(|(_, at)| *at);
        while self.sent.front().is_some_and(|(s, _)| *s <= seq) {
            self.sent.pop_front();
        }
        at
    }

    /// The grant: `ping_seq` was the newest ping the gateway had read, `limit` its silence
    /// limit. The deadline it gives; `None` when the grant names no ping this stream sent (or
    /// one forgotten): nothing anchors the hold, which is then lost at once.
    pub(crate) fn granted(&mut self, limit: Option<Duration>, ping_seq: u64) -> Option<Instant> {
        self.limit = limit;
        self.until = self.take(ping_seq).zip(limit).map(|(at, l)| at + l);
        self.until
    }

    /// `heartbeat{seq}`: the deadline, moved on if the answer is to a ping sent later than
    /// the one that set it. Unsolicited (0), unknown or older answers move nothing.
    pub(crate) fn answered(&mut self, seq: u64) -> Option<Instant> {
        if seq > 0 {
            if let (Some(at), Some(limit)) = (self.take(seq), self.limit) {
                self.until = self.until.max(Some(at + limit));
            }
        }
        self.until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_deadline_runs_from_the_send_of_the_newest_answered_ping() {
        let t0 = Instant::now();
        let limit = Some(ms(1000));
        // (pings sent at these offsets, grant's ping_seq, answers in order, deadline offset)
        type Row = (
            &'static [u64],
            u64,
            &'static [u64],
            Option<u64>,
            &'static str,
        );
        let table: [Row; 7] = [
            (&[], 1, &[], Some(1000), "granted at once on the join"),
            (&[300, 600], 3, &[], Some(1600), "a waiter's newest ping"),
            (
                &[300, 600],
                2,
                &[3],
                Some(1600),
                "granted on 2, then 3 answered",
            ),
            (
                &[300],
                2,
                &[2, 2],
                Some(1300),
                "a replayed answer moves nothing",
            ),
            (
                &[300, 600],
                3,
                &[2],
                Some(1600),
                "an older answer moves nothing back",
            ),
            (
                &[300],
                2,
                &[0, 9],
                Some(1300),
                "unsolicited or unknown: nothing",
            ),
            (
                &[300],
                0,
                &[],
                None,
                "a grant naming no ping anchors nothing",
            ),
        ];
        for (pings, grant, answers, want, what) in table {
            let mut l = Lease::new(t0);
            for (i, at) in pings.iter().enumerate() {
                assert_eq!(l.ping(t0 + ms(*at)), i as u64 + 2, "{what}");
            }
            let mut until = l.granted(limit, grant);
            for a in answers {
                until = l.answered(*a);
            }
            assert_eq!(until, want.map(|w| t0 + ms(w)), "{what}");
        }
    }

    #[test]
    fn only_the_newest_pings_are_remembered() {
        let t0 = Instant::now();
        let mut l = Lease::new(t0);
        for i in 0..(REMEMBERED as u64 + 10) {
            l.ping(t0 + ms(i));
        }
        assert_eq!(l.sent.len(), REMEMBERED);
        assert_eq!(
            l.granted(Some(ms(1000)), 1),
            None,
            "the join's ping is forgotten"
        );
        let newest = l.last_seq;
        assert!(l.answered(newest).is_some());
        assert!(l.sent.is_empty(), "answered and older ones dropped");
    }
}
