//! The command keeper: a tiny process between `zkgate elect/lock … -- CMD` and CMD that makes
//! CMD's life depend on the verb's, whatever happens to the verb.
//!
//! # Why a keeper process
//! CMD runs on behalf of a hold. When the verb dies (SIGKILL, a crash, SIGHUP from a closed
//! terminal) its stream ends, the gateway gives the hold to a successor, and nothing would stop
//! CMD: the verb was the only one who would. `PR_SET_PDEATHSIG` does not do it: it reaches
//! only CMD's main process (it is cleared on fork, so not CMD's children), and it fires when
//! the *thread* that forked exits, which for an async runtime is any worker thread. And a
//! frozen verb (SIGSTOP, Ctrl-Z) does not die at all while its hold lapses.
//!
//! So the verb runs `zkgate __keeper` (this binary again, see [`ARG`]), which:
//! - is a child subreaper (`PR_SET_CHILD_SUBREAPER`): every orphaned descendant of CMD —
//!   `worker &` after CMD exits, a `setsid` daemon — becomes its child, so it can find, kill and
//!   reap them all, and knows they are all gone when `waitpid` says it has no child left;
//! - starts CMD in a process group of its own;
//! - holds one end of a Unix socket whose other end only the verb holds (the verb listens on
//!   a random abstract name, passed in [`SOCKET_ENV`], accepts once and checks that the peer
//!   is its keeper). The verb renews a
//!   deadline on it ([`ToKeeper::Until`]: how long the hold is valid by the verb's own
//!   watchdog). **End of file** (the verb died: the kernel closes its end whatever killed it)
//!   or a **missed deadline** (the verb is frozen or stopped) make the keeper SIGKILL CMD's
//!   group and every descendant at once; [`ToKeeper::Stop`] stops them gracefully (SIGTERM and
//!   SIGCONT, SIGKILL after the grace, reap all);
//! - reports CMD's exit ([`FromKeeper::Exited`]) and "every process is gone"
//!   ([`FromKeeper::Gone`]), which the verb waits for before it gives the hold up;
//! - sits in a process group of its own, so the terminal's signals (SIGINT, SIGHUP, SIGTSTP
//!   go to the foreground group) and a kill of the verb's group reach the verb, which decides;
//!   the keeper only follows its socket. Should the keeper itself be killed, the verb sees
//!   its socket end and SIGKILLs CMD's group itself (descendants that left the group are then
//!   out of reach: the one case the keeper cannot cover is its own SIGKILL).
//!
//! The crate has no `unsafe`: no `pre_exec`, so no parent-death signal for CMD, and the
//! socket is found by name rather than inherited as a descriptor.
//!
//! The keeper is the mechanism; every decision (when to stop, which grace) is the verb's.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;

use rustix::process::{Pid, Signal};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The hidden first argument that makes the `zkgate` binary a keeper:
/// `zkgate __keeper UNTIL_NS -- CMD…`.
pub const ARG: &str = "__keeper";

/// The environment variable carrying the abstract socket name the keeper connects to
/// (removed from CMD's environment).
pub const SOCKET_ENV: &str = "ZKGATE_KEEPER_SOCKET";

/// A line from the verb to the keeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToKeeper {
    /// CMD may run until this CLOCK_MONOTONIC time (nanoseconds); later lines may move it
    /// either way. Past it, the keeper kills everything at once.
    Until(u64),
    /// Stop everything: SIGTERM (and SIGCONT) now, SIGKILL once this grace has passed. A
    /// second `Stop` can only bring the SIGKILL closer. Zero: SIGKILL at once, no SIGTERM.
    Stop(Duration),
}

impl ToKeeper {
    /// The line on the wire, with its newline.
    pub fn line(&self) -> String {
        match self {
            ToKeeper::Until(ns) => format!("until {ns}\n"),
            ToKeeper::Stop(grace) => format!("stop {}\n", grace.as_millis()),
        }
    }

    /// Parses a line (without its newline); `None` for anything else.
    pub fn parse(line: &str) -> Option<Self> {
        let (word, n) = line.trim().split_once(' ')?;
        let n: u64 = n.parse().ok()?;
        match word {
            "until" => Some(ToKeeper::Until(n)),
            "stop" => Some(ToKeeper::Stop(Duration::from_millis(n))),
            _ => None,
        }
    }
}

/// A line from the keeper to the verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FromKeeper {
    /// CMD runs, leader of its own process group (this pid).
    Started(i32),
    /// CMD could not be started (this errno).
    Failed(i32),
    /// CMD's main process ended with this raw wait status (others of its group may still run).
    Exited(i32),
    /// The deadline passed without renewal: everything is being killed.
    Expired,
    /// CMD's group and every descendant are gone (killed and reaped); the keeper exits.
    Gone,
}

impl FromKeeper {
    /// The line on the wire, with its newline.
    pub fn line(&self) -> String {
        match self {
            FromKeeper::Started(pid) => format!("started {pid}\n"),
            FromKeeper::Failed(errno) => format!("failed {errno}\n"),
            FromKeeper::Exited(status) => format!("exited {status}\n"),
            FromKeeper::Expired => "expired\n".to_owned(),
            FromKeeper::Gone => "gone\n".to_owned(),
        }
    }

    /// Parses a line (without its newline); `None` for anything else.
    pub fn parse(line: &str) -> Option<Self> {
        let line = line.trim();
        match line {
            "expired" => return Some(FromKeeper::Expired),
            "gone" => return Some(FromKeeper::Gone),
            _ => {}
        }
        let (word, n) = line.split_once(' ')?;
        let n: i32 = n.parse().ok()?;
        match word {
            "started" => Some(FromKeeper::Started(n)),
            "failed" => Some(FromKeeper::Failed(n)),
            "exited" => Some(FromKeeper::Exited(n)),
            _ => None,
        }
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds: the clock the verb and the keeper share (the same
/// machine), so a deadline written by one means the same moment to the other.
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Every descendant of `root` in a `(pid, parent pid)` table (a snapshot of `/proc`),
/// `root` itself excluded, parents before their children.
pub fn descendants_of(root: i32, table: &[(i32, i32)]) -> Vec<i32> {
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid) in table {
            if ppid == parent && pid != root && !out.contains(&pid) {
                out.push(pid);
                frontier.push(pid);
            }
        }
    }
    out
}

/// Sends `signal` to CMD's process group and to every descendant of this keeper (those that
/// left the group included). Errors (ESRCH: already gone) are fine.
fn signal_all(group: Pid, signal: Signal) {
    let _ = rustix::process::kill_process_group(group, signal);
    let me = rustix::process::getpid().as_raw_nonzero().get();
    for pid in descendants_of(me, &zkgate_localzk::process::process_table()) {
        if let Some(pid) = Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

/// Reaps every child that has ended; `on_exit(pid, raw status)` for each. Returns whether no
/// child is left at all (`ECHILD`): then no descendant is left either, since a subreaper
/// inherits every orphan below it.
fn reap(mut on_exit: impl FnMut(i32, i32)) -> bool {
    loop {
        match rustix::process::wait(rustix::process::WaitOptions::NOHANG) {
            Ok(Some((pid, status))) => on_exit(pid.as_raw_nonzero().get(), status.as_raw()),
            Ok(None) => return false,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return e == rustix::io::Errno::CHILD,
        }
    }
}

enum Msg {
    Line(ToKeeper),
    Eof,
}

/// The keeper's `main`: `args` are what follows [`ARG`] (`UNTIL_NS -- CMD…`). Returns the
/// process's exit code (0 once everything is gone; 2 for a bad invocation).
pub fn main(args: &[OsString]) -> i32 {
    let (until, argv) = match args {
        [until, dashes, program, rest @ ..] if dashes == "--" => (
            until.to_str().and_then(|s| s.parse::<u64>().ok()),
            Some((program, rest)),
        ),
        _ => (None, None),
    };
    let (Some(mut deadline), Some((program, cmd_args)), Ok(name)) =
        (until, argv, std::env::var(SOCKET_ENV))
    else {
        eprintln!("zkgate {ARG} is run by `zkgate elect/lock -- CMD` only");
        return 2;
    };
    let sock = match std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .and_then(|addr| UnixStream::connect_addr(&addr))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("zkgate {ARG}: cannot reach the verb: {e}");
            return 2;
        }
    };
    let mut out = &sock;
    let mut report = |m: FromKeeper| {
        // The verb may be gone: then nobody listens, and we stop everything anyway.
        let _ = out.write_all(m.line().as_bytes());
    };
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    let child = std::process::Command::new(program)
        .args(cmd_args)
        .env_remove(SOCKET_ENV)
        .process_group(0)
        .spawn();
    let (cmd_pid, group) = match child {
        Ok(child) => {
            let pid = i32::try_from(child.id()).unwrap_or(0);
            // A child's pid is never 0 or 1 (`kill(-1)` would mean every process).
            match Pid::from_raw(pid).filter(|_| pid > 1) {
                Some(group) => (pid, group),
                None => return 1,
            }
        }
        Err(e) => {
            report(FromKeeper::Failed(e.raw_os_error().unwrap_or(2)));
            return 0;
        }
    };
    report(FromKeeper::Started(cmd_pid));

    let (tx, rx) = mpsc::channel();
    let Ok(reader) = sock.try_clone() else {
        signal_all(group, Signal::KILL);
        return 1;
    };
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            if let Some(m) = ToKeeper::parse(&line) {
                if tx.send(Msg::Line(m)).is_err() {
                    return;
                }
            }
        }
        let _ = tx.send(Msg::Eof);
    });

    let mut stopping = false;
    let mut kill_at: Option<Instant> = None;
    let mut expired = false;
    let mut eof = false;
    loop {
        let none_left = reap(|pid, status| {
            if pid == cmd_pid {
                report(FromKeeper::Exited(status));
            }
        });
        if stopping && none_left {
            report(FromKeeper::Gone);
            return 0;
        }
        let now = Instant::now();
        if !expired && monotonic_ns() >= deadline {
            expired = true;
            stopping = true;
            kill_at = Some(now);
            report(FromKeeper::Expired);
        }
        let killing = kill_at.is_some_and(|at| now >= at);
        if killing {
            signal_all(group, Signal::KILL);
        }
        // Short waits while killing (reap soon), a steady 10 ms tick otherwise (deadlines).
        let tick = Duration::from_millis(if killing { 2 } else { 10 });
        if eof {
            std::thread::sleep(tick);
            continue;
        }
        match rx.recv_timeout(tick) {
            Ok(Msg::Line(ToKeeper::Until(ns))) => {
                if !expired {
                    deadline = ns;
                }
            }
            Ok(Msg::Line(ToKeeper::Stop(grace))) => {
                // From now, not from before the wait: the grace is never cut short.
                let at = Instant::now() + grace;
                if !stopping && !grace.is_zero() {
                    signal_all(group, Signal::TERM);
                    // A stopped process acts on SIGTERM only once continued.
                    signal_all(group, Signal::CONT);
                }
                stopping = true;
                kill_at = Some(kill_at.map_or(at, |k| k.min(at)));
            }
            Ok(Msg::Eof) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                // The verb is gone (or closed its end): nobody vouches for the hold any more.
                eof = true;
                stopping = true;
                kill_at = Some(Instant::now());
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_junk_is_refused() {
        for m in [
            ToKeeper::Until(0),
            ToKeeper::Until(u64::MAX),
            ToKeeper::Stop(Duration::ZERO),
            ToKeeper::Stop(Duration::from_millis(1500)),
        ] {
            let line = m.line();
            assert!(line.ends_with('\n'));
            assert_eq!(ToKeeper::parse(&line), Some(m), "{line:?}");
        }
        for m in [
            FromKeeper::Started(4242),
            FromKeeper::Failed(2),
            FromKeeper::Exited(7 << 8),
            FromKeeper::Exited(9),
            FromKeeper::Expired,
            FromKeeper::Gone,
        ] {
            assert_eq!(FromKeeper::parse(&m.line()), Some(m));
        }
        for junk in ["", "until", "until x", "stop -1", "halt 5", "until 1 2"] {
            assert_eq!(ToKeeper::parse(junk), None, "{junk:?}");
        }
        for junk in ["", "started", "started x", "gone now", "exit 0"] {
            assert_eq!(FromKeeper::parse(junk), None, "{junk:?}");
        }
    }

    #[test]
    fn descendants_are_found_through_every_generation() {
        // 10 is the keeper; 11 its CMD; 12 CMD's child; 13 a grandchild; 20 an orphan the
        // keeper inherited; 30 and 31 are strangers; 1 is init.
        let table = [
            (1, 0),
            (10, 1),
            (11, 10),
            (12, 11),
            (13, 12),
            (20, 10),
            (30, 1),
            (31, 30),
        ];
        let mut found = descendants_of(10, &table);
        found.sort_unstable();
        assert_eq!(found, [11, 12, 13, 20]);
        assert!(descendants_of(13, &table).is_empty());
        assert_eq!(descendants_of(30, &table), [31]);
        // A (corrupt) cycle does not loop forever.
        assert_eq!(descendants_of(5, &[(6, 5), (5, 6)]), [6]);
    }
}
