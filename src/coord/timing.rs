//! The gateway's clock rules: every duration derived from the session timeout T, and the one
//! check that they keep the guarantees (README "Timing", docs/faults.md "Timing").
//!
//! | what | default | why |
//! |---|---|---|
//! | connection timeout | T/5 (≤ 2T/5, the library's own cap) | a dead link is noticed early, so `stop_within` stays long |
//! | probe interval | connection timeout / 4 | several quorum probes per connection timeout |
//! | margin | T/10, ≥ 200 ms | leaders stop this long before the quorum could expire the session |
//! | quorum lag | tickTime/2 + probe interval | how stale the quorum's view of a follower's session can be (G2) |
//! | silence limit | 35% of min(requested, granted) | a leader hearing nothing this long must assume it lost (G3b) |
//! | keepalive interval / timeout | T/5, 2T/5 | dead clients are found before a silent leader could overlap |

use std::time::Duration;

use tokio::time::Instant;

use super::CoordConfig;

/// Every duration derived from the session timeout T (G2, G3b): computed by [`Timing::derive`]
/// and checked by [`Timing::check`], and nowhere else — the session supervisor, the server's
/// HTTP/2 keepalive and start-up check, the tests and README "Timing" all read it from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// The session timeout the gateway asked for (`--session-timeout`).
    pub requested: Duration,
    /// The session timeout ZooKeeper granted (the requested one before a session exists).
    pub negotiated: Duration,
    /// How long the client library waits for a reply before it declares the link dead.
    pub connection_timeout: Duration,
    /// Subtracted from the server's expiry time to stop leaders safely before it.
    pub margin: Duration,
    /// A leader hearing nothing for this long must assume it lost.
    pub silence_limit: Duration,
    /// How much earlier than the send time of the newest quorum-confirmed probe the ensemble's
    /// leader may have last heard of the session (see [`Timing::quorum_lag`]).
    pub quorum_lag: Duration,
    /// An explicit silence limit the negotiated timeout could not honour, if any: the limit in
    /// force is then the default for the negotiated timeout.
    pub clamped_silence_limit: Option<Duration>,
    /// HTTP/2 keepalive ping interval toward clients (default T/5 of the requested timeout).
    pub keepalive_interval: Duration,
    /// An unanswered keepalive ping ends the connection, its streams and their znodes
    /// (default 2T/5 of the requested timeout): dead-client detection.
    pub keepalive_timeout: Duration,
}

impl Timing {
    /// Mirrors `zookeeper-client`'s own rule for its connection timeout (session/mod.rs
    /// `calc_tick_timeout`): the configured value unless it exceeds 3/5 of the session timeout,
    /// then 2/5 of it; the client checks it every 1/8 of that.
    ///
    /// An explicit silence limit that the *negotiated* timeout cannot honour (the server may
    /// grant less than was asked, and the start-up check only saw the request) is clamped to
    /// the default for the negotiated timeout, and `clamped_silence_limit` says so: refusing
    /// the session would leave the gateway unusable, keeping the limit would break G3b.
    pub fn derive(cfg: &CoordConfig, negotiated: Duration) -> Self {
        let requested = cfg.session_timeout;
        let configured = cfg.connection_timeout();
        let connection_timeout = if configured > negotiated * 3 / 5 {
            negotiated * 2 / 5
        } else {
            configured
        };
        let margin = cfg
            .stop_margin
            .unwrap_or_else(|| default_margin(negotiated));
        let probe_interval = probe_interval(connection_timeout);
        let mut timing = Self {
            requested,
            negotiated,
            connection_timeout,
            margin,
            silence_limit: default_silence_limit(negotiated, cfg.session_timeout),
            quorum_lag: cfg.assumed_tick(negotiated) / 2 + probe_interval,
            clamped_silence_limit: None,
            keepalive_interval: cfg.keepalive_interval.unwrap_or(requested / 5),
            keepalive_timeout: cfg.keepalive_timeout.unwrap_or(requested * 2 / 5),
        };
        if let Some(explicit) = cfg.silence_limit {
            if explicit < timing.silence_bound() {
                timing.silence_limit = explicit;
            } else {
                timing.clamped_silence_limit = Some(explicit);
            }
        }
        timing
    }

    /// How often the session supervisor sends its liveness probe: a quarter of the connection
    /// timeout, so several probes fit in the time the library itself gives a silent link.
    pub fn probe_interval(&self) -> Duration {
        probe_interval(self.connection_timeout)
    }

    /// A connected session whose newest quorum-confirmed probe was sent this long ago is
    /// treated as disconnected: the library's own rule (nothing received for the connection
    /// timeout), applied to answers instead of bytes, plus one probe interval.
    pub fn probe_stale_after(&self) -> Duration {
        self.connection_timeout + self.probe_interval()
    }

    /// The G2 deadline of a session whose newest quorum-confirmed probe was sent at `sent`.
    ///
    /// A probe is a `sync`, which a follower answers only after the ensemble's leader has
    /// answered it. The leader itself learns that a session held by a follower is alive from
    /// the follower's replies to its pings, sent every `tickTime / 2`; so when the probe's
    /// answer is the last thing that got through, the leader's newest touch of the session may
    /// be from the ping round before it, which reported our touches up to one probe interval
    /// older. Hence the bound: the leader heard the session no earlier than
    /// `sent - quorum_lag` (`quorum_lag = tickTime / 2 + probe interval`), and cannot expire it
    /// before that plus the negotiated timeout. Streams stop `margin` before that.
    pub fn quorum_deadline(&self, sent: Instant) -> Instant {
        let heard = sent.checked_sub(self.quorum_lag).unwrap_or(sent);
        heard + self.negotiated.saturating_sub(self.margin)
    }

    /// The latest safe moment for streams of a session that disconnected at `at`, by the
    /// library's view alone (the last byte from the server it was connected to). Never later
    /// than [`Timing::quorum_deadline`] of the same evidence; the supervisor takes the
    /// earlier of the two.
    pub fn abort_deadline(&self, at: Instant) -> Instant {
        let last_contact = at
            .checked_sub(self.connection_timeout * 9 / 8)
            .unwrap_or(at);
        self.quorum_deadline(last_contact)
    }

    /// A connected session vouches for its leaders with a heartbeat only while its newest
    /// quorum-confirmed probe was sent less than this long ago (two probe intervals): tighter
    /// than [`Timing::probe_stale_after`], so the silence limit keeps room under the
    /// session timeout even when `tickTime` is half of it. A probe answered late only delays
    /// a heartbeat; past `probe_stale_after` the streams are suspended, and suspended leaders
    /// get heartbeats again (they have already stopped leader-only work).
    pub fn heartbeat_fresh_within(&self) -> Duration {
        self.connection_timeout / 2
    }

    /// An explicit silence limit must stay below this (G3b): a frozen gateway's last heartbeat
    /// goes out less than `heartbeat_fresh_within` after its newest confirmed probe was sent,
    /// and its leaders must have stopped before the quorum could expire the session.
    pub fn silence_bound(&self) -> Duration {
        self.negotiated
            .saturating_sub(self.heartbeat_fresh_within())
            .saturating_sub(self.quorum_lag)
            .saturating_sub(self.margin)
    }
}

/// Timing that cannot keep the guarantees, found at start-up (before any session).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    #[error("silence limit must be positive")]
    ZeroSilenceLimit,
    #[error("silence limit {silence:?} must be shorter than session timeout {t:?} minus the heartbeat freshness {fresh:?}, the quorum lag {lag:?} (tickTime {tick:?} / 2 + probe interval) and the margin {margin:?} (= {bound:?})")]
    SilenceOverSessionBound {
        silence: Duration,
        t: Duration,
        fresh: Duration,
        lag: Duration,
        tick: Duration,
        margin: Duration,
        bound: Duration,
    },
    #[error("silence limit {silence:?} must be shorter than the keepalive timeout {keepalive:?} (dead-client detection)")]
    SilenceOverKeepalive {
        silence: Duration,
        keepalive: Duration,
    },
}

impl Timing {
    /// The timing of the *requested* session timeout, as known before any session: what the
    /// start-up check and the server's keepalive use.
    pub fn requested(cfg: &CoordConfig) -> Self {
        Self::derive(cfg, cfg.session_timeout)
    }

    /// G3b, checked once at start-up: a leader must stop (silence limit) before the gateway
    /// could delete its znode for a dead connection (keepalive timeout), and before the quorum
    /// could expire a frozen gateway's session ([`Timing::silence_bound`]; a shorter negotiated
    /// timeout is handled when the session is established, see `clamped_silence_limit`).
    ///
    /// # Errors
    /// The rule broken, with the settings that break it.
    pub fn check(&self, cfg: &CoordConfig) -> Result<(), TimingError> {
        let silence = cfg.silence_limit.unwrap_or(self.silence_limit);
        if silence.is_zero() {
            return Err(TimingError::ZeroSilenceLimit);
        }
        let bound = self.silence_bound();
        if silence >= bound {
            return Err(TimingError::SilenceOverSessionBound {
                silence,
                t: self.requested,
                fresh: self.heartbeat_fresh_within(),
                lag: self.quorum_lag,
                tick: cfg.assumed_tick(self.requested),
                margin: self.margin,
                bound,
            });
        }
        if silence >= self.keepalive_timeout {
            return Err(TimingError::SilenceOverKeepalive {
                silence,
                keepalive: self.keepalive_timeout,
            });
        }
        Ok(())
    }

    /// The latest a blackholed client's znode lingers: the gateway pings it after the
    /// keepalive interval and gives up after the keepalive timeout.
    pub fn dead_client_bound(&self) -> Duration {
        self.keepalive_interval + self.keepalive_timeout
    }
}

fn probe_interval(connection_timeout: Duration) -> Duration {
    (connection_timeout / 4).max(Duration::from_millis(10))
}

/// Safety margin before the server's expiry: a tenth of the session timeout, at least 200 ms.
pub fn default_margin(session_timeout: Duration) -> Duration {
    (session_timeout / 10).max(Duration::from_millis(200))
}

/// 35% of the smaller of the requested and negotiated timeouts: below the G2 abort point
/// (≥ 0.65 T after the last contact with our connection timeout of T/5 and margin T/10) and
/// below the default dead-client keepalive timeout (0.4 T of the requested timeout).
pub fn default_silence_limit(negotiated: Duration, requested: Duration) -> Duration {
    negotiated.min(requested) * 35 / 100
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(t: Duration) -> Timing {
        let mut cfg = CoordConfig::new("unused");
        cfg.session_timeout = t;
        Timing::requested(&cfg)
    }

    fn secs(d: Duration) -> String {
        let s = format!("{:.2}", d.as_secs_f64());
        let s = s.trim_end_matches('0').trim_end_matches('.');
        format!("{s} s")
    }

    /// README "Timing" shows the defaults for T = 10 s: they are this type's, not a copy.
    #[test]
    fn readme_timing_table_is_this_types() {
        let t = timing(Duration::from_secs(10));
        let rows = [
            format!(
                "| ZooKeeper connection timeout (client side) | T / 5 | {} |",
                secs(t.connection_timeout)
            ),
            format!(
                "| stop margin | 10% of T, at least 200 ms | {} |",
                secs(t.margin)
            ),
            format!(
                "| `silence_limit` | 35% of the smaller of the requested and negotiated T | {} |",
                secs(t.silence_limit)
            ),
            format!(
                "| leader heartbeat | at most every `silence_limit / 3` | {} |",
                secs(t.silence_limit / 3)
            ),
            format!(
                "| HTTP/2 keepalive interval / timeout | 20% / 40% of T | {} / {} |",
                secs(t.keepalive_interval),
                secs(t.keepalive_timeout)
            ),
        ];
        let readme = include_str!("../../README.md");
        for row in rows {
            assert!(readme.contains(&row), "README \"Timing\" lacks:\n{row}");
        }
        // `stop_within` right after a disconnect: last contact (9/8 connection timeout earlier),
        // less the quorum lag, plus T less the margin.
        let now = Instant::now();
        let stop_within = t.abort_deadline(now) - now;
        assert!(
            readme.contains(&format!("= {}. The", secs(stop_within))),
            "README \"Timing\" lacks stop_within = {}",
            secs(stop_within)
        );
    }

    #[test]
    fn the_check_names_what_breaks_the_order() {
        let mut cfg = CoordConfig::new("unused");
        cfg.session_timeout = Duration::from_secs(10);
        assert_eq!(Timing::requested(&cfg).check(&cfg), Ok(()));
        cfg.silence_limit = Some(Duration::from_secs(7));
        assert!(matches!(
            Timing::requested(&cfg).check(&cfg),
            Err(TimingError::SilenceOverSessionBound { .. })
        ));
        cfg.silence_limit = Some(Duration::from_secs(3));
        cfg.keepalive_timeout = Some(Duration::from_secs(2));
        assert!(matches!(
            Timing::requested(&cfg).check(&cfg),
            Err(TimingError::SilenceOverKeepalive { .. })
        ));
        cfg.silence_limit = Some(Duration::ZERO);
        assert_eq!(
            Timing::requested(&cfg).check(&cfg),
            Err(TimingError::ZeroSilenceLimit)
        );
    }
}
