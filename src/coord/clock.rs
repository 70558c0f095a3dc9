//! The G2 clock of one ZooKeeper session, as a pure core: what the session supervisor saw
//! (liveness probes sent and answered, the client library's link events) and the time in, a
//! verdict out — connected, suspended until a deadline, or lost — plus the one rule that says
//! whether a heartbeat may vouch for the session's leaders now.
//!
//! Why one rule: a heartbeat keeps a leader's silence watchdog from firing, `suspended` tells it
//! to stop leader-only work. If heartbeats stopped earlier than `suspended` started (as they
//! once did: heartbeats at 0.1 T of probe lateness, `suspended` at 0.25 T), a slow ZooKeeper
//! made leaders lose by silence without any warning. Here both hang on the same threshold,
//! [`Timing::probe_stale_after`]: while the newest answered probe is younger, the session is
//! connected and heartbeats flow; from that moment on it is suspended (and heartbeats flow only
//! to leaders that have been told so, until the deadline). The supervisor wakes at
//! [`SessionClock::next_change`] so the verdict is published the moment it changes.
//!
//! No I/O and no clock reads: every method takes `now`, so the table tests below (and the
//! schedule simulation) drive it with made-up instants.

use tokio::time::Instant;

use super::link::LossReason;
use super::timing::Timing;

/// The session's state by the evidence so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Connected with a quorum-confirmed probe sent within [`Timing::probe_stale_after`].
    Connected,
    /// Disconnected or unconfirmed: streams must stop leader-only work now and end by
    /// `deadline` unless the session is confirmed again.
    Suspended { deadline: Instant },
    /// Past the deadline, or ended by ZooKeeper: terminal.
    Lost(LossReason),
}

/// The evidence about one session, and the deadline latched from it (see module docs).
#[derive(Debug, Clone)]
pub struct SessionClock {
    timing: Timing,
    /// Send time of the newest probe the quorum answered (the session's establishment at
    /// first): the quorum heard from the session no earlier than this.
    last_answered: Instant,
    /// When the client library reported the link down, while it is down.
    disconnected_at: Option<Instant>,
    /// The deadline once suspended; only ever moves earlier until the session is confirmed.
    deadline: Option<Instant>,
    lost: Option<LossReason>,
}

impl SessionClock {
    /// A session established at `now` (the server has just heard it).
    pub fn new(timing: Timing, now: Instant) -> Self {
        Self {
            timing,
            last_answered: now,
            disconnected_at: None,
            deadline: None,
            lost: None,
        }
    }

    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    /// Send time of the newest quorum-confirmed probe.
    pub fn last_answered(&self) -> Instant {
        self.last_answered
    }

    /// The client library declared the link dead at `now` (the first report counts).
    pub fn disconnected(&mut self, now: Instant) {
        self.disconnected_at.get_or_insert(now);
    }

    /// The library reconnected the same session. Not proof of life by itself (a follower cut
    /// off from its quorum accepts connections): the suspension lasts until a probe sent from
    /// now on is answered.
    pub fn reconnected(&mut self) {
        self.disconnected_at = None;
    }

    /// The quorum answered a probe sent at `sent` (a refusal counts: the server heard us).
    pub fn answered(&mut self, sent: Instant) {
        self.last_answered = self.last_answered.max(sent);
    }

    /// ZooKeeper ended the session (expired, closed, auth failed) or the gateway drains.
    pub fn end(&mut self, reason: LossReason) {
        self.lost.get_or_insert(reason);
    }

    /// Where the evidence stands at `now`; latches the deadline (it never moves later while
    /// suspended) and the loss.
    pub fn judge(&mut self, now: Instant) -> Verdict {
        if let Some(reason) = self.lost {
            return Verdict::Lost(reason);
        }
        match (self.deadline, self.target(now)) {
            // Resuming needs an answer fresh enough to last: one sent in the younger half of
            // the staleness window. An answer to a probe sent before a pause (ZooKeeper
            // frozen, then thawed) would otherwise resume the streams only to suspend them
            // again a few hundred milliseconds later, before the next probe could be
            // answered — and every flap costs a holder its hold.
            (Some(_), None)
                if now.saturating_duration_since(self.last_answered)
                    >= self.timing.probe_stale_after() / 2 => {}
            (_, None) => self.deadline = None,
            (None, Some(d)) => self.deadline = Some(d),
            (Some(old), Some(d)) => self.deadline = Some(old.min(d)),
        }
        match self.deadline {
            None => Verdict::Connected,
            Some(d) if now >= d => {
                self.lost = Some(LossReason::PresumedExpired);
                Verdict::Lost(LossReason::PresumedExpired)
            }
            Some(deadline) => Verdict::Suspended { deadline },
        }
    }

    /// The verdict at `now` without latching anything (for readers other than the
    /// supervisor, which is the only one to call [`SessionClock::judge`]).
    pub fn peek(&self, now: Instant) -> Verdict {
        self.clone().judge(now)
    }

    /// Whether a heartbeat may vouch for the session's leaders at `now`, given whether the
    /// streams have been told `suspended` (`told_suspended`: the published link). Connected
    /// and confirmed: yes. Suspended: only to leaders already told so (they have stopped
    /// leader-only work; heartbeats keep a short blip from ending them), and only before the
    /// deadline. Lost, or suspended by the evidence but not yet told: no.
    pub fn may_heartbeat(&self, now: Instant, told_suspended: bool) -> bool {
        match self.peek(now) {
            Verdict::Connected => !told_suspended || self.deadline.is_none(),
            Verdict::Suspended { deadline } => told_suspended && now < deadline,
            Verdict::Lost(_) => false,
        }
    }

    /// When the verdict next changes if nothing else happens: the probe going stale while
    /// connected, the deadline while suspended. `None` once lost.
    pub fn next_change(&self, now: Instant) -> Option<Instant> {
        match self.peek(now) {
            Verdict::Connected if self.disconnected_at.is_none() => {
                Some(self.last_answered + self.timing.probe_stale_after())
            }
            Verdict::Connected => Some(now),
            Verdict::Suspended { deadline } => Some(deadline),
            Verdict::Lost(_) => None,
        }
    }

    /// The deadline the evidence alone sets at `now`, if the session is not confirmed.
    fn target(&self, now: Instant) -> Option<Instant> {
        let probe_deadline = self.timing.quorum_deadline(self.last_answered);
        match self.disconnected_at {
            Some(at) => Some(self.timing.abort_deadline(at).min(probe_deadline)),
            None if now.saturating_duration_since(self.last_answered)
                >= self.timing.probe_stale_after() =>
            {
                Some(probe_deadline)
            }
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::coord::config::CoordConfig;

    const T: Duration = Duration::from_secs(10);

    fn timing(asked: Duration, granted: Duration, tick: Option<Duration>) -> Timing {
        let mut cfg = CoordConfig::new("unused");
        cfg.session_timeout = T;
        cfg.zk_tick_time = tick;
        Timing::derive(&cfg, asked, granted)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// What happens to a session, at milliseconds after its establishment.
    #[derive(Debug, Clone, Copy)]
    enum Step {
        /// A probe sent at this many ms is answered.
        Answered(u64),
        Disconnected,
        Reconnected,
        Ended(LossReason),
    }

    /// The verdict a reader sees at each instant, for one timeline.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Seen {
        Connected,
        /// Suspended, with this many ms left until the deadline.
        Suspended(u64),
        Lost,
    }

    fn run(timing: Timing, steps: &[(u64, Step)], look_at: &[u64]) -> Vec<(u64, Seen, bool)> {
        let t0 = Instant::now();
        let mut clock = SessionClock::new(timing, t0);
        let mut out = Vec::new();
        let mut steps = steps.iter().peekable();
        let mut told = false;
        for &at in look_at {
            while let Some(&&(when, step)) = steps.peek() {
                if when > at {
                    break;
                }
                let now = t0 + ms(when);
                match step {
                    Step::Answered(sent) => clock.answered(t0 + ms(sent)),
                    Step::Disconnected => clock.disconnected(now),
                    Step::Reconnected => clock.reconnected(),
                    Step::Ended(r) => clock.end(r),
                }
                // The supervisor judges after every event.
                clock.judge(now);
                steps.next();
            }
            let now = t0 + ms(at);
            let seen = match clock.judge(now) {
                Verdict::Connected => {
                    told = false;
                    Seen::Connected
                }
                Verdict::Suspended { deadline } => {
                    told = true;
                    Seen::Suspended((deadline - now).as_millis() as u64)
                }
                Verdict::Lost(_) => Seen::Lost,
            };
            out.push((at, seen, clock.may_heartbeat(now, told)));
        }
        out
    }

    /// Defaults, T = 10 s granted as asked, tick unstated (assumed 5 s): staleness 2 s,
    /// quorum lag 2.5 s + 0.5 s, margin 1 s, so a probe deadline is last answered + 6 s and a
    /// disconnect deadline is the disconnect + 6 s − 2.25 s (library's last contact).
    #[test]
    fn the_timelines_of_a_session() {
        let t = timing(T, T, None);
        assert_eq!(t.probe_stale_after(), ms(2000));
        assert_eq!(t.quorum_lag, ms(3000));
        use Seen::*;
        use Step::*;
        type Case = (
            &'static str,
            Vec<(u64, Step)>,
            Vec<u64>,
            Vec<(u64, Seen, bool)>,
        );
        let cases: Vec<Case> = vec![
            (
                "probes answered in time: connected, heartbeats all along",
                vec![(400, Answered(0)), (900, Answered(500)), (1900, Answered(1500))],
                vec![0, 1000, 1999, 2000, 3000, 3499],
                vec![
                    (0, Connected, true),
                    (1000, Connected, true),
                    (1999, Connected, true),
                    (2000, Connected, true),
                    (3000, Connected, true),
                    (3499, Connected, true),
                ],
            ),
            (
                // The defect this replaces: heartbeats stopped at 0.1 T of lateness while
                // `suspended` came at 0.25 T. Now the same instant decides both.
                "a slow ZooKeeper: suspended exactly when heartbeats stop",
                vec![],
                vec![1999, 2000, 5999, 6000],
                vec![
                    (1999, Connected, true),
                    (2000, Suspended(4000), true),
                    (5999, Suspended(1), true),
                    (6000, Lost, false),
                ],
            ),
            (
                "a late answer resumes; the deadline is re-derived from it",
                vec![(3000, Answered(2500))],
                vec![2500, 3000, 4499, 4500],
                vec![
                    (2500, Suspended(3500), true),
                    (3000, Connected, true),
                    (4499, Connected, true),
                    (4500, Suspended(4000), true),
                ],
            ),
            (
                "a disconnect dates the last contact 9/8 connection timeout back",
                vec![(500, Answered(400)), (1000, Disconnected)],
                vec![999, 1000, 4749, 4750],
                vec![
                    (999, Connected, true),
                    (1000, Suspended(3750), true),
                    (4749, Suspended(1), true),
                    (4750, Lost, false),
                ],
            ),
            (
                "a reconnect while the last answer is fresh resumes at once",
                vec![(500, Answered(400)), (1000, Disconnected), (1200, Reconnected)],
                vec![1000, 1200],
                vec![(1000, Suspended(3750), true), (1200, Connected, true)],
            ),
            (
                "a reconnect after the last answer went stale is not proof of life: suspended until a new probe is answered",
                vec![
                    (500, Answered(400)),
                    (1000, Disconnected),
                    (2600, Reconnected),
                    (2800, Answered(2700)),
                ],
                vec![2600, 2799, 2800],
                vec![
                    (2600, Suspended(2150), true),
                    (2799, Suspended(1951), true),
                    (2800, Connected, true),
                ],
            ),
            (
                "the deadline never moves later while suspended",
                vec![(1000, Disconnected), (3000, Reconnected)],
                vec![1000, 3000, 4749, 4750],
                vec![
                    (1000, Suspended(3750), true),
                    (3000, Suspended(1750), true),
                    (4749, Suspended(1), true),
                    (4750, Lost, false),
                ],
            ),
            (
                "an answer to a probe sent before a pause does not resume: a fresher one does",
                vec![(2100, Answered(900)), (2200, Answered(2150))],
                vec![2000, 2100, 2199, 2200],
                vec![
                    (2000, Suspended(4000), true),
                    (2100, Suspended(3900), true),
                    (2199, Suspended(3801), true),
                    (2200, Connected, true),
                ],
            ),
            (
                "ended by ZooKeeper: lost at once, no heartbeat",
                vec![(100, Ended(LossReason::Expired)), (200, Answered(150))],
                vec![100, 200],
                vec![(100, Lost, false), (200, Lost, false)],
            ),
        ];
        for (name, steps, look, want) in cases {
            assert_eq!(run(t, &steps, &look), want, "{name}");
        }
    }

    #[test]
    fn heartbeats_wait_until_the_streams_are_told() {
        let t = timing(T, T, None);
        let t0 = Instant::now();
        let clock = SessionClock::new(t, t0);
        let stale = t0 + ms(2500);
        // Suspended by the evidence but not yet published: no heartbeat may go out.
        assert!(!clock.may_heartbeat(stale, false));
        assert!(clock.may_heartbeat(stale, true));
        assert_eq!(clock.next_change(t0), Some(t0 + ms(2000)));
    }

    /// The case seen on a real ensemble: 10 s asked, 4 s granted (`maxSessionTimeout`), tick
    /// 2 s. With the library's connection timeout fixed at 2 s by the request, a probe going
    /// stale and a disconnect both came after the deadline: `ABORTED` with no `suspended`.
    /// The timing says so (reconnect asking for 4 s); after it every case leaves a usable
    /// `stop_within`.
    #[test]
    fn a_shorter_grant_is_rederived_and_leaves_a_usable_stop_within() {
        let s4 = Duration::from_secs(4);
        let first = timing(T, s4, None);
        assert!(first.needs_reconnect(), "{first:?}");
        let again = timing(s4, s4, None);
        assert!(!again.needs_reconnect());
        assert_eq!(again.connection_timeout, ms(800));
        assert_eq!(again.tick, ms(2000));
        assert_eq!(again.silence_limit, ms(1400));
        assert!(again.min_stop_within() >= s4 / 10, "{again:?}");
        // Stated 2 s tick (the real one): the same; a 5 s tick is clamped to T/2, loudly.
        let stated = timing(s4, s4, Some(ms(2000)));
        assert_eq!(stated.quorum_lag, again.quorum_lag);
        let too_long = timing(s4, s4, Some(ms(5000)));
        assert_eq!(too_long.tick, ms(2000));
        assert_eq!(too_long.clamps().len(), 1, "{:?}", too_long.clamps());
        // Suspended 0.8 s after the last answer, with 1.6 s left.
        let t0 = Instant::now();
        let mut clock = SessionClock::new(again, t0);
        assert_eq!(
            clock.judge(t0 + ms(800)),
            Verdict::Suspended {
                deadline: t0 + ms(2400)
            }
        );
    }

    /// tickTime 5 s with T 10 s (the smallest session such a server grants): the assumed tick
    /// is T/2 = 5 s without being told, and `stop_within` stays usable.
    #[test]
    fn an_unstated_tick_is_the_largest_the_grant_allows() {
        let t = timing(T, T, None);
        assert_eq!(t.tick, ms(5000));
        assert!(t.min_stop_within() >= T / 10, "{t:?}");
        assert!(t.silence_limit < t.silence_bound());
        // A short session: the 200 ms margin floor must not push the default silence limit
        // over its bound.
        let short = timing(ms(1000), ms(1000), None);
        assert!(short.silence_limit < short.silence_bound(), "{short:?}");
    }
}
