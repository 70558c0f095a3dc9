//! The command that `zkgate elect NAME -- CMD…` and `zkgate lock NAME -- CMD…` run while they
//! hold leadership or the lock, and the rule for how long it may take to stop.
//!
//! CMD never runs as the verb's own child: a keeper process ([`super::keeper`]) starts it in a
//! process group of its own, adopts whatever CMD leaves behind (it is a child subreaper), and
//! kills all of it the moment the verb dies, freezes past the hold's validity, or asks. A
//! terminal's Ctrl-C reaches only the verb, which then decides. CMD's environment carries
//! [`FENCING_TOKEN_ENV`] (and [`LEASE_ENV`]).
//!
//! "Stop CMD" always means CMD's whole process group and every descendant, gone (reaped), before
//! the verb gives the hold up; [`stop_grace`] says how long SIGTERM may take before SIGKILL.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::watch;
use tokio::time::Instant;
use zkgate_client::LossReason;

use super::keeper::{self, FromKeeper, ToKeeper};

/// The environment variable carrying the hold's fencing token to CMD.
pub const FENCING_TOKEN_ENV: &str = "ZKGATE_FENCING_TOKEN";

/// The environment variable carrying the hold's lease to CMD: CMD may give the hold up with
/// it (`zkgate resign "$ZKGATE_LEASE"`). A capability, like every lease: CMD runs on the
/// verb's behalf already.
pub const LEASE_ENV: &str = "ZKGATE_LEASE";

/// Why CMD is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopCause {
    /// CMD's main process exited by itself; the rest of its group (and what left it) must go
    /// before the hold is given up. The hold is still ours.
    Exited,
    /// SIGINT, SIGTERM, SIGHUP or SIGTSTP to the verb. The hold is still ours.
    Interrupted,
    /// The hold was lost, for this reason.
    Lost(LossReason),
    /// The stream ended while CMD was being stopped (after a loss, e.g. a drain that first
    /// said `suspended`): the gateway may hand the hold over at any moment now.
    StreamEnded,
}

/// What the verb knows about its hold's remaining validity when it stops CMD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HoldLeft {
    /// Until the silence watchdog would fire (the last message heard plus `silence_limit`,
    /// minus now); `None` when the gateway gave no `silence_limit`.
    pub heard: Option<Duration>,
    /// What is left of the `stop_within` of the last `suspended` (minus the time since it
    /// arrived); `None` without a `suspended` carrying one.
    pub stop_within: Option<Duration>,
}

/// How long CMD may take to stop after SIGTERM before SIGKILL: `flag` (`--kill-grace`), an
/// upper bound, capped by the time until anyone else can be granted the hold for this cause.
///
/// - CMD exited, or the verb was interrupted: the hold is still ours (nobody else can be
///   granted while the gateway still hears from us and we from it), so `flag`. The verb keeps
///   listening while CMD stops, and a loss meanwhile recomputes the grace by the rules below.
/// - `suspended`: what is left of its `stop_within` (the gateway's bound for when its session
///   may expire, or for its drain hand-off), and of the watchdog's time.
/// - silence: what is left of the watchdog's time — about zero, by definition: the gateway
///   may already have deleted the znode.
/// - the stream ended (`UNAVAILABLE`, `ABORTED`, `OK` after a resign or release by lease
///   through an older gateway, a TTL lapse), or a resign/release by lease was announced
///   (`suspended` with END_REQUESTED, reported `Ended`), before or during the stop: zero. After
///   the announcement the gateway keeps the znode until the verb gives the hold up, so the zero
///   grace is the "about zero after a resign by lease", not a race. The znode is gone or about to
///   go, and a successor may be granted at once: SIGKILL, no SIGTERM.
pub fn stop_grace(flag: Duration, cause: StopCause, left: HoldLeft) -> Duration {
    let cap = match cause {
        StopCause::Exited | StopCause::Interrupted => None,
        StopCause::Lost(LossReason::Suspended) => match (left.stop_within, left.heard) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        },
        StopCause::Lost(LossReason::Silence) => Some(left.heard.unwrap_or(Duration::ZERO)),
        StopCause::Lost(LossReason::Unavailable | LossReason::Ended) | StopCause::StreamEnded => {
            Some(Duration::ZERO)
        }
    };
    cap.map_or(flag, |c| c.min(flag))
}

/// What the keeper has reported so far.
#[derive(Debug, Clone, Copy, Default)]
struct Reports {
    /// CMD's main process ended (raw wait status).
    exited: Option<i32>,
    /// The keeper said its deadline passed.
    expired: bool,
    /// Every process is gone (the keeper said so, or it died and we killed the group).
    gone: bool,
}

/// A running CMD, behind its keeper.
#[derive(Debug)]
pub struct HeldCommand {
    keeper: tokio::process::Child,
    to_keeper: OwnedWriteHalf,
    reports: watch::Receiver<Reports>,
    /// CMD's process group (its pid).
    pub group: i32,
}

/// How long a keeper may take to start and connect (it is this binary, already on disk).
const KEEPER_START: Duration = Duration::from_secs(10);

/// A CLOCK_MONOTONIC deadline for the keeper `until` from now (tokio's clock is the same
/// CLOCK_MONOTONIC, but opaque).
fn monotonic_deadline(until: Instant) -> u64 {
    let left = until.saturating_duration_since(Instant::now());
    keeper::monotonic_ns().saturating_add(u64::try_from(left.as_nanos()).unwrap_or(u64::MAX))
}

impl HeldCommand {
    /// Starts `argv` behind a keeper (this very executable, run as `zkgate __keeper`), with
    /// `env` added, allowed to run until `until` unless renewed.
    ///
    /// # Errors
    /// The keeper could not be started, or CMD could not (not found, not executable, …; the
    /// error carries the errno: see [`spawn_error_code`]).
    ///
    /// # Panics
    /// If `argv` is empty (the verbs only call this with a command).
    pub async fn spawn(
        argv: &[String],
        env: &[(&str, String)],
        until: Instant,
    ) -> std::io::Result<Self> {
        // The running binary itself, even when the file was replaced or deleted since (an
        // upgrade while a long-lived verb runs): `/proc/self/exe` resolves to the mapped image,
        // where `current_exe()` would name a file that may no longer be this binary.
        Self::spawn_with(Path::new("/proc/self/exe"), argv, env, until).await
    }

    /// [`HeldCommand::spawn`] with the `zkgate` binary at `exe` as the keeper.
    ///
    /// # Errors
    /// As [`HeldCommand::spawn`].
    ///
    /// # Panics
    /// If `argv` is empty.
    pub async fn spawn_with(
        exe: &Path,
        argv: &[String],
        env: &[(&str, String)],
        until: Instant,
    ) -> std::io::Result<Self> {
        use std::os::linux::net::SocketAddrExt;
        assert!(!argv.is_empty(), "a command");
        // A random abstract name (no file, gone with the listener); the keeper must connect to
        // it and prove who it is (its pid, by the kernel's peer credentials).
        let name = format!("zkgate-keeper-{:032x}", rand::random::<u128>());
        let listener = std::os::unix::net::UnixListener::bind_addr(
            &std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?,
        )?;
        listener.set_nonblocking(true)?;
        let listener = tokio::net::UnixListener::from_std(listener)?;
        let mut keeper = tokio::process::Command::new(exe)
            .arg0("zkgate")
            .arg(keeper::ARG)
            .arg(monotonic_deadline(until).to_string())
            .arg("--")
            .args(argv)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env(keeper::SOCKET_ENV, &name)
            // Its own group: signals to the verb's group (a terminal's) reach only the verb.
            .process_group(0)
            // No kill_on_drop: killing the keeper would orphan CMD; dropping our end of the
            // socket makes the keeper kill CMD instead.
            .spawn()?;
        let keeper_pid = keeper.id().and_then(|p| i32::try_from(p).ok());
        let sock = loop {
            let accepted = tokio::select! {
                // A keeper that connected and exited at once (CMD could not start) has its
                // connection queued: take it first.
                biased;
                a = listener.accept() => a,
                status = keeper.wait() => {
                    return Err(std::io::Error::other(format!(
                        "the command keeper exited before connecting ({status:?})"
                    )))
                }
                () = tokio::time::sleep(KEEPER_START) => {
                    let _ = keeper.start_kill();
                    return Err(std::io::Error::other("the command keeper did not connect in time"));
                }
            };
            let (sock, _) = accepted?;
            if sock.peer_cred().ok().and_then(|c| c.pid()) == keeper_pid {
                break sock;
            }
            // Someone else found the name: not ours to talk to.
        };
        drop(listener);
        let (read, to_keeper) = sock.into_split();
        let mut lines = BufReader::new(read).lines();
        let group = match lines
            .next_line()
            .await?
            .as_deref()
            .and_then(FromKeeper::parse)
        {
            Some(FromKeeper::Started(pid)) if pid > 1 => pid,
            Some(FromKeeper::Failed(errno)) => {
                let mut keeper = keeper;
                let _ = keeper.wait().await;
                return Err(std::io::Error::from_raw_os_error(errno));
            }
            other => {
                return Err(std::io::Error::other(format!(
                    "the command keeper failed to start ({other:?})"
                )))
            }
        };
        let (tx, reports) = watch::channel(Reports::default());
        tokio::spawn(async move {
            loop {
                match lines.next_line().await {
                    Ok(Some(line)) => match FromKeeper::parse(&line) {
                        Some(FromKeeper::Exited(status)) => {
                            tx.send_modify(|r| r.exited = Some(status));
                        }
                        Some(FromKeeper::Expired) => tx.send_modify(|r| r.expired = true),
                        Some(FromKeeper::Gone) => {
                            tx.send_modify(|r| r.gone = true);
                            return;
                        }
                        _ => {}
                    },
                    _ => {
                        // The keeper died without saying everything is gone: do what we can
                        // ourselves — CMD's group (CMD has no parent-death signal, see the
                        // keeper's module docs; descendants that left the group are out of
                        // reach, the one case README lists).
                        let _ = rustix::process::kill_process_group(
                            rustix::process::Pid::from_raw(group).expect("> 1"),
                            rustix::process::Signal::KILL,
                        );
                        tx.send_modify(|r| r.gone = true);
                        return;
                    }
                }
            }
        });
        Ok(Self {
            keeper,
            to_keeper,
            reports,
            group,
        })
    }

    async fn send(&mut self, m: ToKeeper) {
        // A failed write means the keeper is gone; the report task notices its end.
        let _ = self.to_keeper.write_all(m.line().as_bytes()).await;
    }

    /// Lets CMD run until `until` (renewed while the hold is heard from).
    pub async fn renew(&mut self, until: Instant) {
        self.send(ToKeeper::Until(monotonic_deadline(until))).await;
    }

    /// Starts stopping CMD (or brings the SIGKILL closer): SIGTERM to everything now, SIGKILL
    /// after `grace`; zero kills at once. Returns at once; [`HeldCommand::gone`] waits.
    pub async fn stop(&mut self, grace: Duration) {
        self.send(ToKeeper::Stop(grace)).await;
    }

    /// Waits until CMD's main process has exited; returns its status.
    ///
    /// # Cancellation safety
    /// Cancel safe: it only watches the keeper's reports.
    pub async fn exited(&mut self) -> ExitStatus {
        let r = self
            .reports
            .wait_for(|r| r.exited.is_some() || r.gone)
            .await
            .map(|r| *r)
            .unwrap_or_default();
        ExitStatus::from_raw(r.exited.unwrap_or(rustix::process::Signal::KILL.as_raw()))
    }

    /// Whether the keeper reported that the verb's deadline passed (the verb was frozen).
    pub fn expired(&self) -> bool {
        self.reports.borrow().expired
    }

    /// Waits until CMD's group and every descendant are gone (after [`HeldCommand::stop`],
    /// or after the keeper's own kill), and reaps the keeper. Returns how CMD's main
    /// process ended.
    ///
    /// # Cancellation safety
    /// Cancel safe: it only watches the keeper's reports and waits for the keeper.
    pub async fn gone(&mut self) -> ExitStatus {
        let r = self
            .reports
            .wait_for(|r| r.gone)
            .await
            .map(|r| *r)
            .unwrap_or(Reports {
                gone: true,
                ..Reports::default()
            });
        let _ = self.keeper.wait().await;
        ExitStatus::from_raw(r.exited.unwrap_or(rustix::process::Signal::KILL.as_raw()))
    }
}

/// The exit code a shell would report for `status`: the code itself, or 128 + the signal
/// number for a process killed by a signal.
pub fn exit_code(status: &ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        (None, None) => 1,
    }
}

/// The exit code a shell reports when it cannot run a command: 127 when it does not exist,
/// 126 when it exists but cannot be executed.
pub fn spawn_error_code(e: &std::io::Error) -> u8 {
    if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(&ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(&ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(&ExitStatus::from_raw(255 << 8)), 255);
        // Killed by SIGTERM (15) and SIGKILL (9), no core dump.
        assert_eq!(exit_code(&ExitStatus::from_raw(15)), 143);
        assert_eq!(exit_code(&ExitStatus::from_raw(9)), 137);
        // Killed by SIGSEGV with a core dump (0x80 flag): still 128 + 11.
        assert_eq!(exit_code(&ExitStatus::from_raw(11 | 0x80)), 139);
        let not_found = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(spawn_error_code(&not_found), 127);
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert_eq!(spawn_error_code(&denied), 126);
    }

    #[test]
    fn the_grace_is_capped_by_the_time_until_anyone_else_can_be_granted() {
        let ms = Duration::from_millis;
        let flag = ms(10_000);
        let left = |heard: Option<u64>, stop_within: Option<u64>| HoldLeft {
            heard: heard.map(ms),
            stop_within: stop_within.map(ms),
        };
        let lost = StopCause::Lost;
        use LossReason::*;
        for (cause, left, want) in [
            // Still ours: the flag (a later loss recomputes).
            (StopCause::Exited, left(Some(1_400), None), flag),
            (StopCause::Interrupted, left(Some(300), None), flag),
            (StopCause::Interrupted, left(None, None), flag),
            // suspended: what is left of stop_within and of the watchdog, at most the flag.
            (lost(Suspended), left(Some(1_400), Some(900)), ms(900)),
            (lost(Suspended), left(Some(600), Some(900)), ms(600)),
            (lost(Suspended), left(None, Some(900)), ms(900)),
            (lost(Suspended), left(Some(1_400), None), ms(1_400)),
            (lost(Suspended), left(None, None), flag),
            (lost(Suspended), left(Some(60_000), Some(30_000)), flag),
            (lost(Suspended), left(Some(0), Some(900)), ms(0)),
            // silence: what is left of the watchdog, about zero.
            (lost(Silence), left(Some(0), None), ms(0)),
            (lost(Silence), left(Some(5), Some(900)), ms(5)),
            (lost(Silence), left(None, None), ms(0)),
            // The stream ended, before or during the stop: at once.
            (lost(Unavailable), left(Some(1_400), Some(900)), ms(0)),
            (lost(Ended), left(Some(1_400), None), ms(0)),
            (StopCause::StreamEnded, left(Some(1_400), Some(900)), ms(0)),
        ] {
            assert_eq!(stop_grace(flag, cause, left), want, "{cause:?} {left:?}");
        }
        // The flag is an upper bound everywhere.
        assert_eq!(
            stop_grace(ms(100), lost(Suspended), left(Some(1_400), Some(900))),
            ms(100)
        );
        assert_eq!(
            stop_grace(ms(0), StopCause::Exited, left(None, None)),
            ms(0)
        );
    }
}
