//! The safety checker: from what clients saw (each stream's events with the instant they
//! arrived), derive who held what when, and check exclusion, fencing and recovery.
//!
//! A *hold* is a stretch of time during which a client may act as the holder (leader, or
//! holder of a lock permit): from `elected`/`acquired` (or `resumed`) to the first of
//!
//! * `suspended` (the spec says: stop now),
//! * the stream's end (any status) or the client being killed,
//! * `silence_limit` after the last message the stream delivered, when nothing followed in
//!   time (G3b: a leader that hears nothing for that long must assume it lost).
//!
//! Once a stream has been silent past its limit, its client has given up: nothing it hears
//! later (`resumed`, heartbeats) makes it a holder again. Such late messages are reported as
//! notes, since a client helper that trusted them would be wrong.
//!
//! The same model serves elections (capacity 1) and locks (capacity = permits): the checker
//! only sees resources, streams and holds.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use tonic::Code;

/// What one stream delivered, or what happened to it.
#[derive(Debug, Clone, PartialEq)]
pub enum Ev {
    Queued {
        position: u32,
    },
    /// `elected` (Campaign) or `acquired` (Acquire).
    Granted {
        token: u64,
        silence_limit: Duration,
    },
    Suspended {
        stop_within: Duration,
    },
    Resumed,
    Proclaimed {
        token: u64,
    },
    Heartbeat,
    /// The stream ended: `None` is OK, else the status code.
    Ended {
        code: Option<Code>,
        message: String,
    },
    /// The test killed the client (dropped its stream and connection): it holds nothing from
    /// this instant, whatever the gateway thinks.
    Killed,
    /// The client sent `resign{}`: a client stops leader-only work before it resigns, so its
    /// hold ends here, not when the stream's OK end arrives (the successor may be told first).
    Resigning,
}

impl Ev {
    /// Whether this arrived on the stream (as opposed to happening to the client).
    pub fn is_message(&self) -> bool {
        !matches!(self, Ev::Killed | Ev::Resigning)
    }

    pub fn is_end(&self) -> bool {
        matches!(self, Ev::Ended { .. } | Ev::Killed)
    }
}

/// Everything one stream saw, in arrival order.
#[derive(Debug, Clone)]
pub struct StreamLog {
    pub id: u64,
    pub client: String,
    /// Election or lock name.
    pub resource: String,
    /// Which gateway (and link) the stream went through, for reports.
    pub via: String,
    pub events: Vec<(Instant, Ev)>,
}

impl StreamLog {
    pub fn first(&self, pred: impl Fn(&Ev) -> bool) -> Option<(Instant, &Ev)> {
        self.events
            .iter()
            .find(|(_, e)| pred(e))
            .map(|(t, e)| (*t, e))
    }

    pub fn granted(&self) -> Option<(Instant, u64)> {
        self.events.iter().find_map(|(t, e)| match e {
            Ev::Granted { token, .. } => Some((*t, *token)),
            _ => None,
        })
    }

    pub fn ended(&self) -> Option<(Instant, Option<Code>)> {
        self.events.iter().find_map(|(t, e)| match e {
            Ev::Ended { code, .. } => Some((*t, *code)),
            Ev::Killed => Some((*t, Some(Code::Cancelled))),
            _ => None,
        })
    }

    pub fn count(&self, pred: impl Fn(&Ev) -> bool) -> usize {
        self.events.iter().filter(|(_, e)| pred(e)).count()
    }
}

/// Why a hold ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldEnd {
    Suspended,
    Ended(Option<Code>),
    Killed,
    Resigned,
    /// `silence_limit` after the last message.
    Silence,
    /// Still held when checked.
    Open,
}

/// One stretch of holding.
#[derive(Debug, Clone)]
pub struct Hold {
    pub stream: u64,
    pub client: String,
    pub resource: String,
    pub via: String,
    pub token: u64,
    pub start: Instant,
    /// `None` while open.
    pub end: Option<Instant>,
    pub why: HoldEnd,
    /// Started by `resumed` (the same grant going on after a suspension), not by the grant.
    pub resumed: bool,
}

impl Hold {
    fn end_or(&self, now: Instant) -> Instant {
        self.end.unwrap_or(now).max(self.start)
    }
}

/// A broken guarantee.
#[derive(Debug, Clone)]
pub struct Violation {
    pub kind: &'static str,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.detail)
    }
}

/// The checker's verdict on a set of streams.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub streams: usize,
    pub holds: Vec<Hold>,
    pub violations: Vec<Violation>,
    /// Oddities that break nothing by themselves (see the module docs).
    pub notes: Vec<String>,
}

impl Report {
    /// Panics with every violation and the timeline when anything broke.
    pub fn assert_ok(&self, logs: &[StreamLog], epoch: Instant) {
        if self.violations.is_empty() {
            return;
        }
        let mut msg = String::new();
        for v in &self.violations {
            msg.push_str(&format!("  {v}\n"));
        }
        panic!(
            "{} violation(s):\n{msg}timeline:\n{}",
            self.violations.len(),
            timeline(logs, epoch)
        );
    }

    pub fn holds_of<'a>(&'a self, resource: &'a str) -> impl Iterator<Item = &'a Hold> + 'a {
        self.holds.iter().filter(move |h| h.resource == resource)
    }
}

/// Milliseconds since `epoch`, signed, for reports.
pub fn ms(t: Instant, epoch: Instant) -> String {
    if t >= epoch {
        format!("+{}ms", (t - epoch).as_millis())
    } else {
        format!("-{}ms", (epoch - t).as_millis())
    }
}

/// Derives the holds of one stream (see the module docs) and notes oddities.
pub fn holds_of(log: &StreamLog, now: Instant, notes: &mut Vec<String>) -> Vec<Hold> {
    let mut out = Vec::new();
    let mut current: Option<Instant> = None;
    let mut token: Option<u64> = None;
    let mut silence: Option<Duration> = None;
    let mut last_msg: Option<Instant> = None;
    let mut silenced = false;
    let mut suspended = false;
    let mut ended = false;
    let mut late_messages = 0usize;
    // The client resigned: what still arrives before the end crossed its resign, not late.
    let mut resigning = false;
    // Whether the current hold began with `resumed`; read when it is closed.
    let resumed = std::cell::Cell::new(false);
    let close = |start: Instant, end: Option<Instant>, why: HoldEnd, token: u64| Hold {
        stream: log.id,
        client: log.client.clone(),
        resource: log.resource.clone(),
        via: log.via.clone(),
        token,
        start,
        end,
        why,
        resumed: resumed.get(),
    };
    for (t, ev) in &log.events {
        let t = *t;
        if ended {
            notes.push(format!(
                "{}#{}: {ev:?} after the stream ended",
                log.client, log.id
            ));
            continue;
        }
        // The client's watchdog: silence past the limit after it was granted ends everything.
        if let (Some(tok), Some(last), Some(limit)) = (token, last_msg, silence) {
            if !silenced && t > last + limit {
                silenced = true;
                if let Some(start) = current.take() {
                    out.push(close(start, Some(last + limit), HoldEnd::Silence, tok));
                }
            }
        }
        if ev.is_message() {
            if silenced && !resigning && !matches!(ev, Ev::Ended { .. }) {
                late_messages += 1;
            }
            last_msg = Some(t);
        }
        match ev {
            Ev::Queued { .. } => {}
            Ev::Granted {
                token: tk,
                silence_limit,
            } => {
                if token.is_some() {
                    notes.push(format!("{}#{}: granted twice", log.client, log.id));
                }
                if suspended {
                    notes.push(format!(
                        "{}#{}: granted while suspended (counted as holding)",
                        log.client, log.id
                    ));
                }
                token = Some(*tk);
                silence = Some(*silence_limit);
                // A grant that crosses the stream's own resign (sent while it waited) is no
                // hold: the client has stopped before it could act on it.
                if !resigning {
                    current = Some(t);
                }
                resumed.set(false);
            }
            Ev::Suspended { .. } => {
                suspended = true;
                if let (Some(start), Some(tok)) = (current.take(), token) {
                    out.push(close(start, Some(t), HoldEnd::Suspended, tok));
                }
            }
            Ev::Resumed => {
                if !suspended {
                    notes.push(format!(
                        "{}#{}: resumed without suspended",
                        log.client, log.id
                    ));
                }
                suspended = false;
                if token.is_some() && !silenced && current.is_none() {
                    current = Some(t);
                    resumed.set(true);
                }
            }
            Ev::Proclaimed { .. } | Ev::Heartbeat => {}
            Ev::Ended { code, .. } => {
                ended = true;
                if let (Some(start), Some(tok)) = (current.take(), token) {
                    out.push(close(start, Some(t), HoldEnd::Ended(*code), tok));
                }
            }
            Ev::Killed => {
                ended = true;
                if let (Some(start), Some(tok)) = (current.take(), token) {
                    out.push(close(start, Some(t), HoldEnd::Killed, tok));
                }
            }
            Ev::Resigning => {
                // No longer leading, whatever arrives before the stream's end.
                silenced = true;
                resigning = true;
                if let (Some(start), Some(tok)) = (current.take(), token) {
                    out.push(close(start, Some(t), HoldEnd::Resigned, tok));
                }
            }
        }
    }
    if let (Some(start), Some(tok)) = (current, token) {
        let last = last_msg.unwrap_or(start);
        match silence {
            Some(limit) if now > last + limit => {
                out.push(close(start, Some(last + limit), HoldEnd::Silence, tok))
            }
            _ => out.push(close(start, None, HoldEnd::Open, tok)),
        }
    }
    if late_messages > 0 {
        notes.push(format!(
            "{}#{} ({}): {late_messages} message(s) after its silence limit had passed",
            log.client, log.id, log.via
        ));
    }
    out
}

/// Checks exclusion (at most `capacity(resource)` holds at any instant) and fencing (a hold
/// that starts after another stream's hold ended has a larger token).
pub fn check(logs: &[StreamLog], capacity: impl Fn(&str) -> usize, epoch: Instant) -> Report {
    let now = Instant::now();
    let mut notes = Vec::new();
    let mut holds: Vec<Hold> = Vec::new();
    for log in logs {
        if !matches!(log.events.first(), Some((_, Ev::Queued { .. })) | None) {
            notes.push(format!(
                "{}#{}: first event is not queued",
                log.client, log.id
            ));
        }
        holds.extend(holds_of(log, now, &mut notes));
    }
    let mut by_resource: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for h in &holds {
        by_resource.entry(h.resource.as_str()).or_default().push(h);
    }
    let mut violations = Vec::new();
    for (resource, hs) in &by_resource {
        let cap = capacity(resource).max(1);
        // Sweep: ends sort before starts at the same instant (half-open intervals).
        let mut points: Vec<(Instant, i8, usize)> = Vec::new();
        for (i, h) in hs.iter().enumerate() {
            points.push((h.start, 1, i));
            points.push((h.end_or(now), -1, i));
        }
        points.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut active: Vec<usize> = Vec::new();
        for (t, delta, i) in points {
            if delta < 0 {
                active.retain(|&j| j != i);
                continue;
            }
            if hs[i].start == hs[i].end_or(now) {
                continue;
            }
            active.push(i);
            if active.len() > cap {
                let overlap = active
                    .iter()
                    .map(|&j| hs[j].end_or(now))
                    .min()
                    .unwrap_or(t)
                    .saturating_duration_since(t);
                let who: Vec<String> = active.iter().map(|&j| describe(hs[j], epoch)).collect();
                violations.push(Violation {
                    kind: "exclusion",
                    detail: format!(
                        "{resource}: {} holders at {} (capacity {cap}) for {overlap:?}: {}",
                        active.len(),
                        ms(t, epoch),
                        who.join("; ")
                    ),
                });
            }
        }
        // Fencing: every hold that ended before another stream's hold started has a smaller
        // token. Reported once per pair of streams. With several permits a holder suspended
        // and resumed keeps its (older) token while others come and go on the other permits,
        // so there only grants are ordered: a hold started by `resumed` is not compared.
        let mut seen = std::collections::HashSet::new();
        for h in hs {
            if cap > 1 && h.resumed {
                continue;
            }
            for g in hs {
                if g.stream != h.stream
                    && g.end.is_some_and(|e| e <= h.start)
                    && g.token >= h.token
                    && seen.insert((g.stream, h.stream))
                {
                    violations.push(Violation {
                        kind: "fencing",
                        detail: format!(
                            "{resource}: {} started after {} ended but its token is not larger",
                            describe(h, epoch),
                            describe(g, epoch)
                        ),
                    });
                }
            }
        }
    }
    Report {
        streams: logs.len(),
        holds,
        violations,
        notes,
    }
}

fn describe(h: &Hold, epoch: Instant) -> String {
    format!(
        "{}#{} via {} token {} [{} .. {} {:?}]",
        h.client,
        h.stream,
        h.via,
        h.token,
        ms(h.start, epoch),
        h.end.map_or_else(|| "open".to_owned(), |e| ms(e, epoch)),
        h.why
    )
}

/// How long after `from` (a fault, or its healing) `resource` had a holder again: the end of
/// the first vacancy (nobody holding) that contains `from` or begins within `bound` after it,
/// measured from `from`; zero when holding went on without a gap.
///
/// # Errors
/// A violation when that vacancy lasted past `from + bound` (or has not ended).
pub fn recovery(
    report: &Report,
    resource: &str,
    from: Instant,
    bound: Duration,
    what: &str,
    epoch: Instant,
) -> Result<Duration, Violation> {
    let vacancy = vacancies(report, resource)
        .into_iter()
        .find(|(start, end)| end.is_none_or(|e| e > from) && *start <= from + bound);
    let took = match vacancy {
        None => return Ok(Duration::ZERO),
        Some((_, Some(end))) => end.saturating_duration_since(from),
        Some((start, None)) => {
            return Err(Violation {
                kind: "recovery",
                detail: format!(
                    "{resource}: after {what} at {}, nobody held it again (vacant since {})",
                    ms(from, epoch),
                    ms(start, epoch)
                ),
            })
        }
    };
    if took <= bound {
        Ok(took)
    } else {
        Err(Violation {
            kind: "recovery",
            detail: format!(
                "{resource}: after {what} at {}, a holder only {took:?} later (bound {bound:?})",
                ms(from, epoch)
            ),
        })
    }
}

/// Stretches with nobody holding `resource`, after its first hold: `(start, end)`, the last
/// one open (`None`) when nobody holds it now.
pub fn vacancies(report: &Report, resource: &str) -> Vec<(Instant, Option<Instant>)> {
    let mut hs: Vec<&Hold> = report.holds_of(resource).collect();
    hs.sort_by_key(|h| h.start);
    let mut out = Vec::new();
    // The end of the covered stretch so far; `None` inside = an open hold covers the rest.
    let mut covered: Option<Option<Instant>> = None;
    for h in hs {
        if let Some(Some(c)) = covered {
            if h.start > c {
                out.push((c, Some(h.start)));
            }
        }
        covered = Some(match (covered, h.end) {
            (Some(None), _) | (_, None) => None,
            (Some(Some(c)), Some(e)) => Some(c.max(e)),
            (None, Some(e)) => Some(e),
        });
    }
    if let Some(Some(c)) = covered {
        out.push((c, None));
    }
    out
}

/// Liveness, checked as strictly as safety: stretches in which nobody held `resource` while
/// one candidate waited (queued, neither granted nor ended) the whole time, for longer than
/// `bound`. A queue must never stall while its head's stream is gone; every fault the soak
/// injects is over, and its successor granted, well within `bound`. Returns (from, to,
/// waiting stream) per stall; an open vacancy counts until `until`.
///
/// Time inside `excused` (stretches in which the ensemble had no quorum: from a ZooKeeper
/// leader kill until a new leader serves) does not count against `bound`: nothing can be
/// granted then, and how long ZooKeeper takes to elect is not the gateway's to bound. The
/// bound applies to the rest of the wait, so two elections in a row are not a stall while a
/// queue left waiting for as long again after them still is.
pub fn stalls(
    logs: &[StreamLog],
    report: &Report,
    resource: &str,
    bound: Duration,
    until: Instant,
    excused: &[(Instant, Instant)],
) -> Vec<(Instant, Instant, String)> {
    let waits: Vec<(Instant, Instant, String)> = logs
        .iter()
        .filter(|l| l.resource == resource)
        .filter_map(|l| {
            let (queued, _) = l.first(|e| matches!(e, Ev::Queued { .. }))?;
            let done = l
                .first(|e| matches!(e, Ev::Granted { .. }) || e.is_end())
                .map_or(until, |(t, _)| t);
            Some((queued, done, format!("{}#{} via {}", l.client, l.id, l.via)))
        })
        .collect();
    let mut out = Vec::new();
    for (from, to) in vacancies(report, resource) {
        let to = to.unwrap_or(until);
        // The longest single wait inside this vacancy.
        let longest = waits
            .iter()
            .filter_map(|(q, d, who)| {
                let (a, b) = (from.max(*q), to.min(*d));
                (b > a).then_some((a, b, who))
            })
            .max_by_key(|(a, b, _)| *b - *a);
        if let Some((a, b, who)) = longest {
            if (b - a).saturating_sub(overlap(a, b, excused)) > bound {
                out.push((a, b, who.clone()));
            }
        }
    }
    out
}

/// How much of `from..to` lies inside the union of `stretches` (which may overlap).
pub fn overlap(from: Instant, to: Instant, stretches: &[(Instant, Instant)]) -> Duration {
    let clipped = clip(from, to, stretches);
    let mut total = Duration::ZERO;
    let mut reach: Option<Instant> = None;
    for (a, b) in clipped {
        let a = reach.map_or(a, |r| a.max(r));
        if b > a {
            total += b - a;
        }
        reach = Some(reach.map_or(b, |r| r.max(b)));
    }
    total
}

/// What one `Observe` stream showed, in arrival order.
#[derive(Debug, Clone)]
pub struct ObserverLog {
    pub id: u64,
    pub election: String,
    /// Which gateway the stream went to, for reports.
    pub via: String,
    /// Each state: the leader's fencing token, `None` for a vacancy.
    pub states: Vec<(Instant, Option<u64>)>,
    /// When the stream ended, if it has.
    pub ended: Option<Instant>,
}

/// What [`check_observers`] found.
#[derive(Debug, Clone, Default)]
pub struct ObserverReport {
    pub violations: Vec<Violation>,
    /// The longest stretch any observer showed a state other than the holds', not counting
    /// `excused` time, and whose: how far behind the observers ran, violations or not.
    pub longest: Option<(Duration, String)>,
}

/// Observers checked against what the candidates held (`report`), as strictly as the
/// candidates themselves:
///
/// * tokens never go down in one stream (the contract's `Observe`);
/// * an observer never shows a state other than the election's for longer than `bound`: a
///   leader after its hold ended, another leader than the one holding, or a vacancy while
///   someone holds. The truth is the clients' holds, so it lags ZooKeeper by what a client
///   takes to learn its end (`suspended`, a stream's end, its silence limit), and `bound` is
///   the candidates' stall bound, which every fault and its recovery stay within. Time in
///   `excused` (no quorum) does not count, as for [`stalls`]; an open stream counts until
///   `until`.
pub fn check_observers(
    observers: &[ObserverLog],
    report: &Report,
    bound: Duration,
    until: Instant,
    excused: &[(Instant, Instant)],
    epoch: Instant,
) -> ObserverReport {
    let mut out = Vec::new();
    let mut longest: Option<(Duration, String)> = None;
    for o in observers {
        let who = format!("observer #{} of {} via {}", o.id, o.election, o.via);
        let mut top: Option<u64> = None;
        for (t, token) in &o.states {
            if let (Some(top), Some(token)) = (top, token) {
                if *token < top {
                    out.push(Violation {
                        kind: "observer token went down",
                        detail: format!("{who}: {token} after {top} at {}", ms(*t, epoch)),
                    });
                }
            }
            top = top.max(*token);
        }
        let holds: Vec<(Instant, Instant, u64)> = report
            .holds_of(&o.election)
            .map(|h| (h.start, h.end_or(until).min(until), h.token))
            .collect();
        let end = o.ended.unwrap_or(until).min(until);
        for (i, (from, shown)) in o.states.iter().enumerate() {
            let to = o.states.get(i + 1).map_or(end, |(t, _)| *t).min(end);
            for (a, b) in disagreements(*from, to, *shown, &holds) {
                let counted = (b - a).saturating_sub(overlap(a, b, excused));
                let shown = shown.map_or("vacant".to_owned(), |t| format!("token {t}"));
                if longest.as_ref().is_none_or(|(d, _)| counted > *d) {
                    longest = Some((counted, format!("{who} showed {shown} at {}", ms(a, epoch))));
                }
                if counted > bound {
                    out.push(Violation {
                        kind: "observer stale",
                        detail: format!(
                            "{who}: showed {shown} for {:?} ({}..{}) while the election's \
                             holds said otherwise",
                            b - a,
                            ms(a, epoch),
                            ms(b, epoch)
                        ),
                    });
                }
            }
        }
    }
    ObserverReport {
        violations: out,
        longest,
    }
}

/// The stretches of `from..to` in which `shown` (a leader's token, or a vacancy) was not what
/// `holds` (start, end, token) say.
fn disagreements(
    from: Instant,
    to: Instant,
    shown: Option<u64>,
    holds: &[(Instant, Instant, u64)],
) -> Vec<(Instant, Instant)> {
    if to <= from {
        return Vec::new();
    }
    // Where the holds agree with `shown`: its leader's holds, or nobody's for a vacancy.
    let agree: Vec<(Instant, Instant)> = match shown {
        Some(token) => holds
            .iter()
            .filter(|h| h.2 == token)
            .map(|h| (h.0, h.1))
            .collect(),
        None => {
            let held: Vec<(Instant, Instant)> = holds.iter().map(|h| (h.0, h.1)).collect();
            complement(from, to, &held)
        }
    };
    complement(from, to, &agree)
}

/// `from..to` without the union of `stretches`, as sorted stretches.
fn complement(
    from: Instant,
    to: Instant,
    stretches: &[(Instant, Instant)],
) -> Vec<(Instant, Instant)> {
    let mut out = Vec::new();
    let mut at = from;
    for (a, b) in clip(from, to, stretches) {
        if a > at {
            out.push((at, a));
        }
        at = at.max(b);
    }
    if to > at {
        out.push((at, to));
    }
    out
}

/// The parts of `stretches` inside `from..to`, sorted by start.
fn clip(from: Instant, to: Instant, stretches: &[(Instant, Instant)]) -> Vec<(Instant, Instant)> {
    let mut clipped: Vec<(Instant, Instant)> = stretches
        .iter()
        .map(|&(a, b)| (a.max(from), b.min(to)))
        .filter(|(a, b)| b > a)
        .collect();
    clipped.sort();
    clipped
}

/// One hold of a command run by a CLI verb (`zkgate elect NAME -- CMD`, `zkgate lock NAME --
/// CMD`), seen at the process level: every process CMD started appends a wall-clock timestamp
/// (ns) to a file of its own every few milliseconds, named by the hold's fencing token, so
/// `first..=last` is when any process of that hold was alive and running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmdHold {
    pub resource: String,
    /// `ZKGATE_FENCING_TOKEN` as CMD saw it.
    pub token: String,
    /// Which verb (slot) ran it, for reports.
    pub who: String,
    /// Earliest and latest timestamp written by any of the hold's processes (ns since the
    /// Unix epoch).
    pub first: u64,
    pub last: u64,
    /// How many timestamps its processes wrote.
    pub stamps: usize,
}

/// Exclusion at the process level: two holds of one resource whose commands were alive in
/// the same window (more than `capacity(resource)` holds' `first..=last` containing one
/// instant) is a violation, whatever the streams said. Timestamps are written every few ms,
/// so an overlap shorter than that can be missed, never invented.
pub fn cmd_overlaps(holds: &[CmdHold], capacity: impl Fn(&str) -> usize) -> Vec<Violation> {
    let mut by_resource: BTreeMap<&str, Vec<&CmdHold>> = BTreeMap::new();
    for h in holds {
        by_resource.entry(h.resource.as_str()).or_default().push(h);
    }
    let mut out = Vec::new();
    for (resource, hs) in by_resource {
        let cap = capacity(resource).max(1);
        // Sweep over closed intervals: at one instant, starts before ends.
        let mut points: Vec<(u64, i8, usize)> = Vec::new();
        for (i, h) in hs.iter().enumerate() {
            points.push((h.first, -1, i));
            points.push((h.last, 1, i));
        }
        points.sort();
        let mut active: Vec<usize> = Vec::new();
        for (at, kind, i) in points {
            if kind > 0 {
                active.retain(|&j| j != i);
                continue;
            }
            active.push(i);
            if active.len() > cap {
                let until = active.iter().map(|&j| hs[j].last).min().unwrap_or(at);
                let who: Vec<String> = active
                    .iter()
                    .map(|&j| {
                        let h = hs[j];
                        format!(
                            "{} token {} ({} stamps, {}..{})",
                            h.who, h.token, h.stamps, h.first, h.last
                        )
                    })
                    .collect();
                out.push(Violation {
                    kind: "command overlap",
                    detail: format!(
                        "{resource}: {} commands alive at once (capacity {cap}) for {:.1} ms: {}",
                        active.len(),
                        (until - at) as f64 / 1e6,
                        who.join("; ")
                    ),
                });
            }
        }
    }
    out
}

/// Liveness at the process level: stretches of `from..until` (ns) longer than `bound` in
/// which no command of `resource` ran, as `(start, end)` of each gap.
pub fn cmd_gaps(
    holds: &[CmdHold],
    resource: &str,
    from: u64,
    until: u64,
    bound: Duration,
) -> Vec<(u64, u64)> {
    let mut hs: Vec<(u64, u64)> = holds
        .iter()
        .filter(|h| h.resource == resource)
        .map(|h| (h.first, h.last))
        .collect();
    hs.sort();
    let bound = bound.as_nanos() as u64;
    let mut out = Vec::new();
    let mut covered = from;
    for (a, b) in hs.into_iter().chain(std::iter::once((until, until))) {
        let a = a.min(until);
        if a > covered && a - covered > bound {
            out.push((covered, a));
        }
        covered = covered.max(b);
    }
    out
}

/// A readable timeline of every stream, for failure messages.
pub fn timeline(logs: &[StreamLog], epoch: Instant) -> String {
    let mut out = String::new();
    for log in logs {
        out.push_str(&format!(
            "  {}#{} {} via {}:",
            log.client, log.id, log.resource, log.via
        ));
        let mut beats = 0;
        for (t, e) in &log.events {
            if matches!(e, Ev::Heartbeat) {
                beats += 1;
                continue;
            }
            if beats > 0 {
                out.push_str(&format!(" ({beats} hb)"));
                beats = 0;
            }
            let what = match e {
                Ev::Queued { position } => format!("queued@{position}"),
                Ev::Granted { token, .. } => format!("GRANTED t{token}"),
                Ev::Suspended { stop_within } => format!("suspended({stop_within:?})"),
                Ev::Resumed => "resumed".into(),
                Ev::Proclaimed { .. } => "proclaimed".into(),
                Ev::Heartbeat => unreachable!(),
                Ev::Ended { code, .. } => format!("END {code:?}"),
                Ev::Killed => "KILLED".into(),
                Ev::Resigning => "RESIGN sent".into(),
            };
            out.push_str(&format!(" {} {what};", ms(*t, epoch)));
        }
        if beats > 0 {
            let last = log
                .events
                .last()
                .map(|(t, _)| ms(*t, epoch))
                .unwrap_or_default();
            out.push_str(&format!(" ({beats} hb, last {last})"));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(id: u64, events: Vec<(u64, Ev)>, epoch: Instant) -> StreamLog {
        StreamLog {
            id,
            client: format!("c{id}"),
            resource: "e".into(),
            via: "g".into(),
            events: events
                .into_iter()
                .map(|(ms, e)| (epoch + Duration::from_millis(ms), e))
                .collect(),
        }
    }

    fn granted(token: u64) -> Ev {
        Ev::Granted {
            token,
            silence_limit: Duration::from_millis(100),
        }
    }

    fn end() -> Ev {
        Ev::Ended {
            code: None,
            message: String::new(),
        }
    }

    #[test]
    fn silence_ends_a_hold_and_overlap_is_caught() {
        let epoch = Instant::now();
        let q = Ev::Queued { position: 0 };
        // c1 hears nothing after +10ms: its hold ends at +110. c2 starts at +100: overlap.
        let a = log(
            1,
            vec![(0, q.clone()), (10, granted(5)), (500, end())],
            epoch,
        );
        let b = log(
            2,
            vec![(0, q.clone()), (100, granted(6)), (150, end())],
            epoch,
        );
        let r = check(&[a.clone(), b], |_| 1, epoch);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert_eq!(r.violations[0].kind, "exclusion");
        // Starting at +120 is fine.
        let c = log(3, vec![(0, q), (120, granted(6)), (150, end())], epoch);
        let r = check(&[a, c], |_| 1, epoch);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
    }

    #[test]
    fn a_grant_that_crosses_the_streams_own_resign_is_no_hold() {
        let epoch = Instant::now();
        let q = Ev::Queued { position: 1 };
        // c1 resigned while waiting; the grant crossed it, and its stream ended OK later. c2,
        // granted once c1's znode went, overlaps that grant's window but not a hold.
        let a = log(
            1,
            vec![
                (0, q.clone()),
                (50, Ev::Resigning),
                (53, granted(5)),
                (90, end()),
            ],
            epoch,
        );
        assert!(holds_of(&a, Instant::now(), &mut Vec::new()).is_empty());
        let b = log(2, vec![(0, q), (60, granted(6)), (150, end())], epoch);
        let r = check(&[a, b], |_| 1, epoch);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
    }

    #[test]
    fn suspended_ends_resumed_restarts_and_fencing_checks_order() {
        let epoch = Instant::now();
        let q = Ev::Queued { position: 0 };
        let hb = Ev::Heartbeat;
        let a = log(
            1,
            vec![
                (0, q.clone()),
                (10, granted(7)),
                (
                    50,
                    Ev::Suspended {
                        stop_within: Duration::from_secs(1),
                    },
                ),
                (90, Ev::Resumed),
                (150, hb.clone()),
                (200, Ev::Killed),
            ],
            epoch,
        );
        let holds = holds_of(&a, Instant::now(), &mut Vec::new());
        assert_eq!(holds.len(), 2);
        assert_eq!(holds[0].why, HoldEnd::Suspended);
        assert_eq!(holds[1].why, HoldEnd::Killed);
        // A later holder with a smaller token breaks fencing.
        let b = log(2, vec![(0, q), (300, granted(6)), (400, end())], epoch);
        let r = check(&[a, b], |_| 1, epoch);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert_eq!(r.violations[0].kind, "fencing");
    }

    #[test]
    fn a_waiter_left_waiting_through_a_vacancy_is_a_stall() {
        let epoch = Instant::now();
        let q = Ev::Queued { position: 0 };
        // a holds 10..100; b waits from 20 and is granted only at 5100: a stall of 5 s.
        let a = log(
            1,
            vec![(0, q.clone()), (10, granted(1)), (100, end())],
            epoch,
        );
        let b = log(2, vec![(20, q.clone()), (5100, granted(2))], epoch);
        // c waits from 6000 with nobody holding after b is killed at 6100, until 6500.
        let mut b2 = b.clone();
        b2.events
            .push((epoch + Duration::from_millis(6100), Ev::Killed));
        let c = log(3, vec![(6000, q)], epoch);
        let logs = [a, b2, c];
        let r = check(&logs, |_| 1, epoch);
        let until = epoch + Duration::from_millis(6500);
        let found = stalls(&logs, &r, "e", Duration::from_secs(1), until, &[]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, epoch + Duration::from_millis(100));
        assert_eq!(found[0].1, epoch + Duration::from_millis(5100));
        // With a bound longer than the wait, nothing.
        assert!(stalls(&logs, &r, "e", Duration::from_secs(6), until, &[]).is_empty());
        // Without a quorum for 4.5 s of it (two stretches, overlapping), 0.5 s is left: no
        // stall; with only 3.5 s of it excused, 1.5 s is left: still a stall.
        let at = |ms: u64| epoch + Duration::from_millis(ms);
        let two_elections = [
            (at(0), at(2000)),
            (at(1500), at(3000)),
            (at(3100), at(4700)),
        ];
        assert!(stalls(
            &logs,
            &r,
            "e",
            Duration::from_secs(1),
            until,
            &two_elections
        )
        .is_empty());
        let one = [(at(1000), at(4500))];
        assert_eq!(
            stalls(&logs, &r, "e", Duration::from_secs(1), until, &one).len(),
            1
        );
    }

    fn observer(
        states: Vec<(u64, Option<u64>)>,
        ended: Option<u64>,
        epoch: Instant,
    ) -> ObserverLog {
        let at = |ms: u64| epoch + Duration::from_millis(ms);
        ObserverLog {
            id: 9,
            election: "e".into(),
            via: "g".into(),
            states: states.into_iter().map(|(ms, t)| (at(ms), t)).collect(),
            ended: ended.map(at),
        }
    }

    #[test]
    fn observers_are_checked_against_the_holds() {
        let epoch = Instant::now();
        // a holds 1000..3000 (token 1), b 3000..8000 (token 2), then nobody until 10000.
        let held = |id: u64, token: u64, from: u64, to: u64| {
            let q = Ev::Queued { position: 0 };
            let mut l = log(id, vec![(0, q), (from, granted(token))], epoch);
            for ms in (from + 50..to).step_by(50) {
                l.events
                    .push((epoch + Duration::from_millis(ms), Ev::Heartbeat));
            }
            l.events.push((epoch + Duration::from_millis(to), end()));
            l
        };
        let r = check(
            &[held(1, 1, 1000, 3000), held(2, 2, 3000, 8000)],
            |_| 1,
            epoch,
        );
        let until = epoch + Duration::from_millis(10_000);
        let bound = Duration::from_millis(500);
        let kinds = |o: ObserverLog, excused: &[(Instant, Instant)]| -> Vec<&'static str> {
            check_observers(&[o], &r, bound, until, excused, epoch)
                .violations
                .iter()
                .map(|v| v.kind)
                .collect()
        };
        let stale = "observer stale";
        let down = "observer token went down";
        // (what the observer showed, when it ended, the violations)
        type Row = (Vec<(u64, Option<u64>)>, Option<u64>, Vec<&'static str>);
        let table: Vec<Row> = vec![
            // Every change within 100 ms: fine.
            (
                vec![(0, None), (1100, Some(1)), (3100, Some(2)), (8100, None)],
                None,
                vec![],
            ),
            // Token 1 shown until 3400: 400 ms late, within the bound.
            (
                vec![(0, None), (1100, Some(1)), (3400, Some(2)), (8100, None)],
                None,
                vec![],
            ),
            // Token 1 shown until 4000: a second after b took over.
            (
                vec![(0, None), (1100, Some(1)), (4000, Some(2))],
                Some(8000),
                vec![stale],
            ),
            // The vacancy at the end never shown...
            (vec![(3100, Some(2))], None, vec![stale]),
            // ...unless the stream ended in time.
            (vec![(3100, Some(2))], Some(8200), vec![]),
            // Vacant while a held.
            (vec![(0, None)], Some(2000), vec![stale]),
            // A token that went down, then also shown for long.
            (
                vec![(3100, Some(2)), (3200, Some(1))],
                Some(3300),
                vec![down],
            ),
            (
                vec![(3100, Some(2)), (3200, Some(1))],
                Some(5000),
                vec![down, stale],
            ),
            // A token nobody held, shown for long.
            (vec![(3100, Some(7))], Some(5000), vec![stale]),
        ];
        for (i, (states, ended, want)) in table.into_iter().enumerate() {
            assert_eq!(kinds(observer(states, ended, epoch), &[]), want, "row {i}");
        }
        // Without a quorum for most of the stale stretch: excused.
        let o = observer(
            vec![(0, None), (1100, Some(1)), (4000, Some(2))],
            Some(8000),
            epoch,
        );
        let excused = [(
            epoch + Duration::from_millis(3100),
            epoch + Duration::from_millis(3900),
        )];
        assert!(kinds(o, &excused).is_empty());
    }

    #[test]
    fn overlap_counts_the_union_once() {
        let epoch = Instant::now();
        let at = |ms: u64| epoch + Duration::from_millis(ms);
        let ms = |d: Duration| d.as_millis();
        assert_eq!(ms(overlap(at(0), at(100), &[])), 0);
        assert_eq!(ms(overlap(at(10), at(100), &[(at(0), at(20))])), 10);
        assert_eq!(
            ms(overlap(
                at(0),
                at(100),
                &[(at(10), at(50)), (at(40), at(60))]
            )),
            50
        );
        assert_eq!(
            ms(overlap(
                at(0),
                at(100),
                &[(at(50), at(200)), (at(10), at(20))]
            )),
            60
        );
        assert_eq!(ms(overlap(at(0), at(100), &[(at(100), at(200))])), 0);
    }

    #[test]
    fn capacity_allows_permits() {
        let epoch = Instant::now();
        let q = Ev::Queued { position: 0 };
        let logs: Vec<StreamLog> = (1..=3)
            .map(|i| {
                log(
                    i,
                    vec![(0, q.clone()), (10 * i, granted(i)), (60, end())],
                    epoch,
                )
            })
            .collect();
        assert!(check(&logs, |_| 3, epoch).violations.is_empty());
        assert_eq!(check(&logs, |_| 2, epoch).violations.len(), 1);
    }

    fn cmd(resource: &str, token: &str, first: u64, last: u64) -> CmdHold {
        CmdHold {
            resource: resource.into(),
            token: token.into(),
            who: format!("v{token}"),
            first,
            last,
            stamps: 1,
        }
    }

    /// Table: commands of one resource must never be alive in the same window; touching
    /// ends count (a timestamp of each at the same ns), other resources and permits do not.
    #[test]
    fn command_overlaps_are_found_at_the_process_level() {
        let cases: Vec<(&str, Vec<CmdHold>, usize, usize)> = vec![
            (
                "apart",
                vec![cmd("e", "1", 0, 10), cmd("e", "2", 11, 20)],
                1,
                0,
            ),
            (
                "overlap",
                vec![cmd("e", "1", 0, 10), cmd("e", "2", 5, 20)],
                1,
                1,
            ),
            (
                "touching",
                vec![cmd("e", "1", 0, 10), cmd("e", "2", 10, 20)],
                1,
                1,
            ),
            (
                "inside",
                vec![cmd("e", "1", 0, 30), cmd("e", "2", 5, 20)],
                1,
                1,
            ),
            (
                "other resource",
                vec![cmd("e", "1", 0, 10), cmd("f", "2", 5, 20)],
                1,
                0,
            ),
            (
                "two permits",
                vec![cmd("e", "1", 0, 10), cmd("e", "2", 5, 20)],
                2,
                0,
            ),
            (
                "three on two permits",
                vec![
                    cmd("e", "1", 0, 10),
                    cmd("e", "2", 5, 20),
                    cmd("e", "3", 8, 9),
                ],
                2,
                1,
            ),
        ];
        for (name, holds, cap, want) in cases {
            let got = cmd_overlaps(&holds, |_| cap);
            assert_eq!(got.len(), want, "{name}: {got:?}");
        }
    }

    #[test]
    fn command_gaps_longer_than_the_bound() {
        let ms = |n: u64| n * 1_000_000;
        let holds = vec![
            cmd("e", "1", ms(100), ms(200)),
            cmd("e", "2", ms(250), ms(400)),
            cmd("e", "3", ms(2_000), ms(2_100)),
        ];
        let bound = Duration::from_millis(500);
        // 400 → 2000 is a gap; so is 2100 → 3000 (until); 0 → 100 and 200 → 250 are not.
        assert_eq!(
            cmd_gaps(&holds, "e", 0, ms(3_000), bound),
            vec![(ms(400), ms(2_000)), (ms(2_100), ms(3_000))]
        );
        assert_eq!(
            cmd_gaps(&holds, "e", 0, ms(2_100), bound),
            vec![(ms(400), ms(2_000))]
        );
        // Nothing at all: one gap over the whole stretch.
        assert_eq!(cmd_gaps(&holds, "f", 0, ms(600), bound), vec![(0, ms(600))]);
    }

    /// With two permits, a holder suspended and resumed keeps its older token while another
    /// stream comes and goes on the other permit: not a fencing violation. With one permit
    /// (an election, a mutex) the same history is one.
    #[test]
    fn resumed_holds_are_not_fenced_against_other_permits() {
        let epoch = Instant::now();
        let q = Ev::Queued { position: 0 };
        let suspended = Ev::Suspended {
            stop_within: Duration::from_secs(1),
        };
        let a = log(
            1,
            vec![
                (0, q.clone()),
                (10, granted(5)),
                (40, suspended),
                (45, Ev::Heartbeat),
                (80, Ev::Resumed),
                (120, end()),
            ],
            epoch,
        );
        let b = log(2, vec![(0, q), (50, granted(9)), (70, end())], epoch);
        let logs = [a, b];
        assert!(check(&logs, |_| 2, epoch).violations.is_empty());
        let r = check(&logs, |_| 1, epoch);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert_eq!(r.violations[0].kind, "fencing");
    }
}
