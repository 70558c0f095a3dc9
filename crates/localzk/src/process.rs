//! Processes by pid, on Linux: whether one is alive, its state and parent (`/proc/PID/stat`,
//! read here only), and signals (rustix, no `unsafe` and no `kill` binary). The workspace's
//! one place for both: [`crate::TiedChild`] and [`crate::ServerSet`], the test kit's fault
//! injection and `zkgate dev` tests, and the gateway's command keeper (`src/cli/keeper.rs`).

use std::fs;
use std::io;
use std::path::Path;

use crate::LocalZkError;

/// The fields of a `/proc/PID/stat` line after the command name, which may hold spaces and
/// parentheses: they start after the *last* `)` (`state ppid pgrp …`).
fn after_command_name(stat: &str) -> Option<&str> {
    Some(&stat[stat.rfind(')')? + 1..])
}

/// The state letter in a `/proc/PID/stat` line (`R`, `S`, `T` stopped, `Z` zombie, …).
pub fn stat_state(stat: &str) -> Option<char> {
    after_command_name(stat)?.trim_start().chars().next()
}

/// The parent pid in a `/proc/PID/stat` line.
pub fn stat_ppid(stat: &str) -> Option<i32> {
    after_command_name(stat)?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// `pid`'s state letter (see [`stat_state`]), or `None` if there is no such process (or no
/// procfs).
pub fn process_state(pid: u32) -> Option<char> {
    stat_state(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// `(pid, parent pid)` of every process in `/proc`.
pub fn process_table() -> Vec<(i32, i32)> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some((pid, stat_ppid(&stat)?))
        })
        .collect()
}

/// Whether `pid` exists and is not a zombie (the test kit asks it too).
pub fn pid_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(stat_state(&stat), Some('Z' | 'X')),
        Err(_) if Path::new("/proc/self/stat").exists() => false,
        // No procfs: ask the kernel.
        Err(_) => send_signal(pid, "0").is_ok(),
    }
}

/// Sends `signal` (a name such as `TERM` or `STOP`, or `0` to ask whether `pid` exists) to
/// `pid`. The workspace's one way to signal a process it did not start as a child: the gateway,
/// `zkgate dev` and the test kit all come here (the command keeper signals its own process
/// groups with the same calls), through rustix, so no crate needs `unsafe` or a `kill` binary.
///
/// # Errors
/// An unknown signal name, a pid out of range, or the kernel's refusal (`ESRCH`, `EPERM`).
pub fn send_signal(pid: u32, signal: &str) -> Result<(), LocalZkError> {
    use rustix::process::{kill_process, test_kill_process, Pid};
    let context = || format!("kill -s {signal} {pid}");
    let Some(target) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return Err(LocalZkError::Io {
            context: context(),
            source: io::Error::other("not a process id"),
        });
    };
    let sent = match signal {
        "0" => test_kill_process(target),
        name => {
            let Some(sig) = signal_named(name) else {
                return Err(LocalZkError::Io {
                    context: context(),
                    source: io::Error::other("unknown signal name"),
                });
            };
            kill_process(target, sig)
        }
    };
    sent.map_err(|errno| LocalZkError::Io {
        context: context(),
        source: errno.into(),
    })
}

/// The signal a name (as `kill -s` takes it, without `SIG`) stands for.
fn signal_named(name: &str) -> Option<rustix::process::Signal> {
    use rustix::process::Signal;
    Some(match name {
        "HUP" => Signal::HUP,
        "INT" => Signal::INT,
        "QUIT" => Signal::QUIT,
        "KILL" => Signal::KILL,
        "USR1" => Signal::USR1,
        "USR2" => Signal::USR2,
        "TERM" => Signal::TERM,
        "CONT" => Signal::CONT,
        "STOP" => Signal::STOP,
        "TSTP" => Signal::TSTP,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_are_read_after_the_command_name() {
        assert_eq!(stat_ppid("42 (sh) S 7 42 42 0 -1"), Some(7));
        assert_eq!(stat_ppid("42 (a) b) (c) R 9 1"), Some(9));
        assert_eq!(stat_ppid("42 (sh"), None);
        assert_eq!(stat_ppid(""), None);
        assert_eq!(stat_state("42 (sh) S 7 42 42 0 -1"), Some('S'));
        assert_eq!(stat_state("42 (a) b) (c) T 9 1"), Some('T'));
        assert_eq!(stat_state("42 (sh"), None);
    }

    #[test]
    fn this_process_is_alive_and_running() {
        let me = std::process::id();
        assert!(pid_alive(me));
        assert!(matches!(process_state(me), Some('R' | 'S')));
        let parent = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
        assert!(process_table().contains(&(i32::try_from(me).unwrap(), parent)));
        assert!(send_signal(me, "0").is_ok());
        assert!(send_signal(me, "NOPE").is_err());
    }
}
