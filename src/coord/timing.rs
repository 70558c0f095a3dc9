//! The gateway's clock rules: every duration derived from the session timeout T that
//! ZooKeeper *granted*, and the one check that they keep the guarantees (README "Timing",
//! docs/faults.md "Timing"). The decisions taken with them at run time (suspend, heartbeat,
//! abort) live in the pure [`super::clock`].
//!
//! | what | default | why |
//! |---|---|---|
//! | connection timeout | T/5 (the session is re-requested at the granted T so the library's own value is T/5 of it) | a dead link is noticed early, so `stop_within` stays long |
//! | probe interval | T/20 | several quorum probes per staleness window |
//! | probe staleness | T/5 | past it, streams are suspended, and no heartbeat is sent before that (one rule) |
//! | margin | T/10, ≥ 200 ms | leaders stop this long before the quorum could expire the session |
//! | assumed tick | the stated `tickTime`, never above T/2; unstated: T/2 | the largest tick a server granting T can run with |
//! | quorum lag | tick/2 + probe interval | how stale the quorum's view of a follower's session can be (G2) |
//! | silence limit | 35% of min(requested, granted) | a leader hearing nothing this long must assume it lost (G3b) |
//! | keepalive interval / timeout | T/5, 2T/5 of the requested T | dead clients are found (nothing read for interval + timeout: `conn_fate`) after a silent leader has stopped |
//! | a holder's znode after its connection was given up as dead | silence limit + keepalive timeout after the last message sent | it may still be hearing heartbeats (a link failed one way): G3b |
//! | revoked holder's znode kept | silence limit + keepalive timeout after the last message sent | the holder counts its limit from when it *hears* that message: up to one client delay later (G3c) |
//! | the same two for a holder that pings (the helpers) | silence limit after the last message sent | its lease runs from the send of a ping read before the gateway last vouched: no client delay to allow for (G3b, `holder_stream::revocation::delay_allowance`) |
//! | a ping answered | only while the link is connected and the probe fresh (the heartbeat rule) | ≥ `silence_bound` + margin before the session can expire, more than the silence limit the answer grants from the ping's send |

use std::time::Duration;

use tokio::time::Instant;

use super::config::CoordConfig;

/// Every duration derived from the session timeout T (G2, G3b): computed by [`Timing::derive`]
/// and checked by [`Timing::check`], and nowhere else — the session supervisor and its
/// [`super::clock::SessionClock`], the server's HTTP/2 keepalive and start-up check, the tests
/// and README "Timing" all read it from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// The session timeout the gateway was configured to ask for (`--session-timeout`).
    pub requested: Duration,
    /// The session timeout ZooKeeper granted (the requested one before a session exists).
    pub negotiated: Duration,
    /// How long the client library waits for a reply before it declares the link dead: its
    /// own rule applied to what this connection asked for (see [`library_connection_timeout`]).
    pub connection_timeout: Duration,
    /// Subtracted from the server's expiry time to stop leaders safely before it.
    pub margin: Duration,
    /// A leader hearing nothing for this long must assume it lost.
    pub silence_limit: Duration,
    /// The ensemble tick this timing assumes: the stated one (never above T/2), else T/2.
    pub tick: Duration,
    /// How much earlier than the send time of the newest quorum-confirmed probe the ensemble's
    /// leader may have last heard of the session (see [`Timing::quorum_lag`]).
    pub quorum_lag: Duration,
    /// An explicit silence limit the negotiated timeout could not honour, if any: the limit in
    /// force is then the default for the negotiated timeout.
    pub clamped_silence_limit: Option<Duration>,
    /// An explicit stop margin the negotiated timeout could not honour (it left leaders no
    /// usable `stop_within`), if any: the default margin is in force instead.
    pub clamped_margin: Option<Duration>,
    /// A stated `tickTime` above T/2 (no server granting T runs with it), if any: T/2 is
    /// assumed instead.
    pub clamped_tick: Option<Duration>,
    /// HTTP/2 keepalive ping interval toward clients (default T/5 of the requested timeout).
    pub keepalive_interval: Duration,
    /// An unanswered keepalive ping ends the connection, its streams and their znodes
    /// (default 2T/5 of the requested timeout): dead-client detection.
    pub keepalive_timeout: Duration,
}

impl Timing {
    /// The timing of a session granted `negotiated` on a connection that asked for `asked`.
    ///
    /// Everything is derived from the *granted* timeout, never the requested one: the server
    /// may grant less (`maxSessionTimeout`), and bounds derived from the request would then
    /// leave a leader no `suspended` before its stream must end. The one value the gateway
    /// cannot re-derive after the fact is the client library's connection timeout, fixed when
    /// the connection asked; [`Timing::needs_reconnect`] says when the session supervisor
    /// must ask again for the granted timeout so that it is T/5 of it too.
    ///
    /// Explicit settings the granted timeout cannot honour are clamped, each recorded in a
    /// `clamped_*` field so the supervisor says so loudly: refusing the session would leave the
    /// gateway unusable, keeping the value would break G2 or G3b.
    pub fn derive(cfg: &CoordConfig, asked: Duration, negotiated: Duration) -> Self {
        let requested = cfg.session_timeout;
        let connection_timeout = library_connection_timeout(asked / 5, negotiated);
        let stated_tick = cfg.zk_tick_time;
        let tick = stated_tick.unwrap_or(negotiated / 2).min(negotiated / 2);
        let probe_interval = probe_interval(negotiated);
        let mut timing = Self {
            requested,
            negotiated,
            connection_timeout,
            margin: default_margin(negotiated),
            silence_limit: default_silence_limit(negotiated, requested),
            tick,
            quorum_lag: tick / 2 + probe_interval,
            clamped_silence_limit: None,
            clamped_margin: None,
            clamped_tick: stated_tick.filter(|&t| t > negotiated / 2),
            keepalive_interval: cfg.keepalive_interval.unwrap_or(requested / 5),
            keepalive_timeout: cfg.keepalive_timeout.unwrap_or(requested * 2 / 5),
        };
        if let Some(explicit) = cfg.stop_margin {
            let default = timing.margin;
            timing.margin = explicit;
            if timing.min_stop_within() < negotiated / 10 {
                timing.margin = default;
                timing.clamped_margin = Some(explicit);
            }
        }
        // The default stays under the bound even where the margin's 200 ms floor or a stated
        // long tick eats into a short T.
        timing.silence_limit = timing.silence_limit.min(timing.silence_bound() * 9 / 10);
        if let Some(explicit) = cfg.silence_limit {
            if explicit < timing.silence_bound() {
                timing.silence_limit = explicit;
            } else {
                timing.clamped_silence_limit = Some(explicit);
            }
        }
        timing
    }

    /// The timing of the *requested* session timeout, as known before any session: what the
    /// start-up check and the server's keepalive use.
    pub fn requested(cfg: &CoordConfig) -> Self {
        Self::derive(cfg, cfg.session_timeout, cfg.session_timeout)
    }

    /// Whether the connection that produced this timing must be replaced by one asking for the
    /// granted timeout: the library fixed its connection timeout from what was asked, and it is
    /// longer than T/5 of what was granted, so it would notice a dead link too late to give
    /// leaders a usable `stop_within` (the 4 s granted of 10 s asked case: no `suspended` at
    /// all, only `ABORTED`).
    pub fn needs_reconnect(&self) -> bool {
        self.connection_timeout > self.negotiated / 5
    }

    /// How often the session supervisor sends its liveness probe: T/20, four per staleness
    /// window.
    pub fn probe_interval(&self) -> Duration {
        probe_interval(self.negotiated)
    }

    /// A connected session whose newest quorum-confirmed probe was sent this long ago (T/5)
    /// is suspended, and no heartbeat is sent on its evidence: one threshold for both, so a
    /// slow ZooKeeper turns into `suspended` before it can turn into a leader's silence.
    pub fn probe_stale_after(&self) -> Duration {
        self.negotiated / 5
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
    /// than [`Timing::quorum_deadline`] of the same evidence; the clock takes the earlier of
    /// the two.
    pub fn abort_deadline(&self, at: Instant) -> Instant {
        let last_contact = at
            .checked_sub(self.connection_timeout * 9 / 8)
            .unwrap_or(at);
        self.quorum_deadline(last_contact)
    }

    /// The shortest `stop_within` a leader can be handed at the moment of suspension: the
    /// library's disconnect (checked against the last contact it dates 9/8 connection timeout
    /// back) or a probe going stale, whichever leaves less. G2 promises a usable one.
    pub fn min_stop_within(&self) -> Duration {
        let after_stale = self
            .negotiated
            .saturating_sub(self.quorum_lag)
            .saturating_sub(self.margin)
            .saturating_sub(self.probe_stale_after());
        let after_disconnect = self
            .negotiated
            .saturating_sub(self.quorum_lag)
            .saturating_sub(self.margin)
            .saturating_sub(self.connection_timeout * 9 / 8);
        after_stale.min(after_disconnect)
    }

    /// An explicit silence limit must stay below this (G3b): a frozen gateway's last heartbeat
    /// goes out less than [`Timing::probe_stale_after`] after its newest confirmed probe was
    /// sent, and its leaders must have stopped before the quorum could expire the session.
    pub fn silence_bound(&self) -> Duration {
        self.negotiated
            .saturating_sub(self.probe_stale_after())
            .saturating_sub(self.quorum_lag)
            .saturating_sub(self.margin)
    }

    /// Every setting the granted timeout made this timing override, as sentences for the log.
    pub fn clamps(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(explicit) = self.clamped_silence_limit {
            out.push(format!(
                "--silence-limit {explicit:?} does not fit the granted session timeout {:?} (it must stay below {:?}): using {:?}",
                self.negotiated,
                self.silence_bound(),
                self.silence_limit
            ));
        }
        if let Some(explicit) = self.clamped_margin {
            out.push(format!(
                "--stop-margin {explicit:?} leaves leaders no usable stop_within under the granted session timeout {:?}: using {:?}",
                self.negotiated, self.margin
            ));
        }
        if let Some(stated) = self.clamped_tick {
            out.push(format!(
                "--zk-tick-time {stated:?} is above half the granted session timeout {:?} (no server granting it runs with such a tick): assuming {:?}",
                self.negotiated, self.tick
            ));
        }
        out
    }
}

/// Timing that cannot keep the guarantees, found at start-up (before any session).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    #[error("silence limit must be positive")]
    ZeroSilenceLimit,
    #[error("silence limit {silence:?} must be shorter than session timeout {t:?} minus the probe staleness {fresh:?}, the quorum lag {lag:?} (tickTime {tick:?} / 2 + probe interval) and the margin {margin:?} (= {bound:?})")]
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
    #[error("stop margin {margin:?} leaves leaders only {stop_within:?} between `suspended` and the end of their stream under session timeout {t:?}; lower it")]
    MarginLeavesNoStopWithin {
        margin: Duration,
        stop_within: Duration,
        t: Duration,
    },
}

impl Timing {
    /// G2 and G3b, checked once at start-up against the *requested* timeout: a leader must
    /// stop (silence limit) before the gateway could delete its znode for a dead connection
    /// (keepalive timeout), and before the quorum could expire a frozen gateway's session
    /// ([`Timing::silence_bound`]); a suspended leader must get a usable `stop_within`. A
    /// shorter granted timeout is handled when the session is established (see
    /// [`Timing::derive`]: re-derived, explicit values clamped loudly).
    ///
    /// # Errors
    /// The rule broken, with the settings that break it.
    pub fn check(&self, cfg: &CoordConfig) -> Result<(), TimingError> {
        let silence = cfg.silence_limit.unwrap_or(self.silence_limit);
        if silence.is_zero() {
            return Err(TimingError::ZeroSilenceLimit);
        }
        if let Some(margin) = self.clamped_margin {
            let mut unclamped = *self;
            unclamped.margin = margin;
            return Err(TimingError::MarginLeavesNoStopWithin {
                margin,
                stop_within: unclamped.min_stop_within(),
                t: self.requested,
            });
        }
        let bound = self.silence_bound();
        if silence >= bound {
            return Err(TimingError::SilenceOverSessionBound {
                silence,
                t: self.requested,
                fresh: self.probe_stale_after(),
                lag: self.quorum_lag,
                tick: self.tick,
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

    /// How late a message may reach a client the gateway still counts as connected: the
    /// keepalive timeout, since a connection whose ping goes unanswered that long is ended as
    /// dead. A holder counts its silence limit and its `stop_within` from when it *hears* a
    /// message, so a revoked holder's znode stays this much longer than `silence_limit` after
    /// the last message sent to it (G3c): on a slow link (a probe delayed every packet by
    /// 150 ms) a command that ignored SIGTERM otherwise ran 40–99 ms beside its successor.
    pub fn client_delay_allowance(&self) -> Duration {
        self.keepalive_timeout
    }
}

/// `zookeeper-client`'s own rule for its connection timeout (session/mod.rs
/// `calc_tick_timeout`): the configured value unless it exceeds 3/5 of the session timeout,
/// then 2/5 of it; the client checks it every 1/8 of that.
pub fn library_connection_timeout(configured: Duration, negotiated: Duration) -> Duration {
    if configured > negotiated * 3 / 5 {
        negotiated * 2 / 5
    } else {
        configured
    }
}

fn probe_interval(negotiated: Duration) -> Duration {
    (negotiated / 20).max(Duration::from_millis(10))
}

/// Safety margin before the server's expiry: a tenth of the session timeout, at least 200 ms.
pub fn default_margin(session_timeout: Duration) -> Duration {
    (session_timeout / 10).max(Duration::from_millis(200))
}

/// 35% of the smaller of the requested and negotiated timeouts: below the silence bound
/// (0.4 T with the defaults and an unstated tick: T − T/5 staleness − (T/4 + T/20) quorum lag
/// − T/10 margin) and below the default dead-client keepalive timeout (0.4 T of the requested
/// timeout).
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
                "| leader heartbeat (to a stream that does not ping) | at most every `silence_limit / 3` | {} |",
                secs(t.silence_limit / 3)
            ),
            format!(
                "| a helper's pings (answered only while held and vouched for) | every `silence_limit / 3` while waiting, `/ 4` while holding | {} / {} |",
                secs(t.silence_limit / 3),
                secs(t.silence_limit / 4)
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
