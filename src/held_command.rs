//! The command that `zkgate elect NAME -- CMD…` and `zkgate lock NAME -- CMD…` run while they
//! hold leadership or the lock.
//!
//! CMD runs in a process group of its own, so a terminal's Ctrl-C reaches only the verb, which
//! then decides, and so that stopping CMD reaches everything CMD started: SIGTERM to the whole
//! group, then SIGKILL to the group if CMD's main process has not exited within a grace period.
//! CMD's environment carries [`FENCING_TOKEN_ENV`].

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use rustix::process::{kill_process_group, Pid, Signal};

/// The environment variable carrying the hold's fencing token to CMD.
pub const FENCING_TOKEN_ENV: &str = "ZKGATE_FENCING_TOKEN";

/// A running CMD, leader of its own process group.
#[derive(Debug)]
pub struct HeldCommand {
    child: tokio::process::Child,
    group: Option<Pid>,
}

impl HeldCommand {
    /// Starts `argv` in a new process group with `ZKGATE_FENCING_TOKEN=fencing_token`.
    ///
    /// # Errors
    /// The spawn failed (not found, not executable, …); see [`spawn_error_code`].
    ///
    /// # Panics
    /// If `argv` is empty (the verbs only call this with a command).
    pub fn spawn(argv: &[String], fencing_token: u64) -> std::io::Result<Self> {
        let (program, args) = argv.split_first().expect("a command");
        let child = tokio::process::Command::new(program)
            .args(args)
            .env(FENCING_TOKEN_ENV, fencing_token.to_string())
            .process_group(0)
            // A safety net only: `stop` is the way CMD ends (a panic must not leave it running).
            .kill_on_drop(true)
            .spawn()?;
        // With `process_group(0)` the group id is the child's pid. Never 0 or 1 (`kill(-1)`
        // would signal every process we may signal): `from_raw` refuses 0, and we refuse 1.
        let group = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .filter(|&id| id > 1)
            .and_then(Pid::from_raw);
        Ok(Self { child, group })
    }

    /// Waits for CMD's main process to exit by itself.
    ///
    /// # Cancellation safety
    /// Cancel safe (tokio's `Child::wait`): CMD keeps running.
    ///
    /// # Errors
    /// Waiting failed (should not happen for our own child).
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Stops CMD: SIGTERM to its process group, then SIGKILL to the group if its main process
    /// has not exited within `grace`. Returns how the main process ended (a CMD that exited by
    /// itself just before is reported as it exited).
    pub async fn stop(mut self, grace: Duration) -> std::io::Result<ExitStatus> {
        self.signal_group(Signal::TERM);
        if let Ok(status) = tokio::time::timeout(grace, self.child.wait()).await {
            return status;
        }
        self.signal_group(Signal::KILL);
        // SIGKILL cannot be ignored: this returns as soon as the kernel has reaped it.
        self.child.wait().await
    }

    fn signal_group(&mut self, signal: Signal) {
        match self.group {
            // ESRCH (the whole group is gone already) is fine.
            Some(group) => {
                let _ = kill_process_group(group, signal);
            }
            // No pid: the child has been reaped already, there is nothing left to stop.
            None => {
                let _ = self.child.start_kill();
            }
        }
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

    #[tokio::test]
    async fn stop_kills_a_command_that_ignores_sigterm_after_the_grace() {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let script = format!(
            "trap '' TERM; echo \"$ZKGATE_FENCING_TOKEN\" > {}; while :; do sleep 0.05; done",
            ready.display()
        );
        let argv = ["sh".to_owned(), "-c".to_owned(), script];
        let cmd = HeldCommand::spawn(&argv, 42).unwrap();
        // Wait until the trap is set (the file is written after it).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(&ready).map_or(true, |s| s.trim() != "42") {
            assert!(std::time::Instant::now() < deadline, "CMD never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let started = std::time::Instant::now();
        let status = cmd.stop(Duration::from_millis(300)).await.unwrap();
        assert_eq!(exit_code(&status), 137, "{status:?}");
        assert!(started.elapsed() >= Duration::from_millis(300));
    }
}
