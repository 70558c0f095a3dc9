//! `zkgate elect NAME -- CMD` never lets CMD outlive its hold, nor run beside another holder's
//! (issue 19 item 1, README "Command line"): two verbs on two gateways of one ZooKeeper, each
//! CMD appending a timestamp every 20 ms to its own log; the first verb meets a fault, and
//! every timestamp of the first (CMD and whatever it left behind) must precede every timestamp
//! of the second. Real processes throughout: the verbs, their keepers, shells, `setsid`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use zkgate::cli::held_command::{exit_code, HeldCommand};
use zkgate_testkit::*;

/// A writer: appends `date +%s%N` to LOG every 20 ms, its pid to PIDS, the lease to
/// LOG.lease. With `slow` it ignores SIGTERM for 1.5 s (keeps writing), then exits 0.
const WRITER: &str = r#"
echo $$ >> "$2"
echo "$ZKGATE_LEASE" > "$1.lease.tmp" && mv "$1.lease.tmp" "$1.lease"
deadline=""
if [ "$3" = slow ]; then
  trap 'deadline=$(( $(date +%s%N) + 1500000000 ))' TERM
fi
while :; do
  now=$(date +%s%N)
  [ -n "$now" ] && echo "$now" >> "$1"
  if [ -n "$deadline" ] && [ -n "$now" ] && [ "$now" -gt "$deadline" ]; then exit 0; fi
  sleep 0.02
done
"#;

/// A start script in the style of many: starts its worker in the background, another one in
/// a session of its own (it leaves CMD's process group), and exits 0 once both run and the
/// log holds written stamps. (Waiting for the pids alone once let the verb stop both workers
/// before either wrote a stamp on a slow machine, leaving the test nothing to compare.)
const STARTER: &str = r#"
sh "$0.writer" "$1" "$2" &
setsid sh "$0.writer" "$1" "$2" &
while [ "$(cat "$2" 2>/dev/null | wc -l)" -lt 2 ] || [ "$(cat "$1" 2>/dev/null | wc -l)" -lt 2 ]; do
  sleep 0.01
done
exit 0
"#;

struct Scripts {
    dir: tempfile::TempDir,
}

impl Scripts {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("writer.sh"), WRITER).unwrap();
        std::fs::write(dir.path().join("starter.sh"), STARTER).unwrap();
        std::fs::write(dir.path().join("starter.sh.writer"), WRITER).unwrap();
        Self { dir }
    }

    fn log(&self, who: &str) -> PathBuf {
        self.dir.path().join(format!("{who}.log"))
    }

    fn pids(&self, who: &str) -> PathBuf {
        self.dir.path().join(format!("{who}.pids"))
    }

    /// CMD for `who`: the writer (`mode` "slow" or "fast"), or the starter.
    fn cmd(&self, who: &str, mode: &str) -> Vec<String> {
        let (log, pids) = (
            self.log(who).display().to_string(),
            self.pids(who).display().to_string(),
        );
        let script = if mode == "starter" {
            "starter.sh"
        } else {
            "writer.sh"
        };
        let script = self.dir.path().join(script).display().to_string();
        vec!["sh".into(), script, log, pids, mode.into()]
    }
}

/// The timestamps in a log (lines cut by a kill are skipped).
fn stamps(path: &Path) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn pids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// Every process whose process group is `group` (from /proc).
fn group_members(group: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                let fields: Vec<&str> = s
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .split_whitespace()
                    .collect();
                // state ppid pgrp …
                fields.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(group)
                    && !fields.first().is_some_and(|st| st.starts_with('Z'))
            })
        })
        .collect()
}

fn zkgate(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zkgate"));
    c.args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    c
}

/// A verb that is killed (SIGTERM, then SIGKILL) when the test ends, also when it fails.
struct Verb {
    child: Child,
    out: mpsc::Receiver<String>,
}

impl Verb {
    /// `zkgate elect` (or `lock`) `NAME --candidate WHO` (`--owner`) `… -- CMD`.
    fn start(verb: &str, name: &str, who: &str, url: &str, extra: &[&str], cmd: &[String]) -> Verb {
        let id = if verb == "lock" {
            "--owner"
        } else {
            "--candidate"
        };
        let mut args = vec![verb, name, id, who, "--endpoint", url];
        args.extend_from_slice(extra);
        args.push("--");
        let mut child = zkgate(&args).args(cmd).spawn().unwrap();
        let (tx, out) = mpsc::channel();
        // stdout (events) and stderr (diagnostics) both, to wait on either.
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Verb { child, out }
    }

    fn wait_line(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.out.recv_timeout(left) {
                Ok(l) if l.contains(needle) => return l,
                Ok(_) => continue,
                Err(e) => panic!("no line containing {needle:?}: {e}"),
            }
        }
    }

    fn signal(&self, sig: &str) {
        zkgate_localzk::process::send_signal(self.child.id(), sig).unwrap();
    }

    fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the verb did not exit within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Verb {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.signal("CONT");
            self.signal("TERM");
            let deadline = Instant::now() + Duration::from_secs(15);
            while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn wait_for(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < deadline, "waited {within:?} for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How the first holder meets its end.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    /// CMD starts workers (one leaves the group with `setsid`) and exits 0.
    LeavesWorkers,
    /// SIGHUP to the verb (a closed terminal).
    Hangup,
    /// SIGTSTP to the verb (Ctrl-Z).
    CtrlZ,
    /// SIGHUP to the verb, then, while its CMD is still stopping (it ignores SIGTERM for
    /// 1.5 s), a resign by lease: its notice cuts the grace to zero at once, and the successor
    /// starts only once CMD is gone.
    HangupThenResign,
    /// SIGKILL to the verb.
    Kill,
    /// SIGSTOP to the verb (frozen: it cannot even see its hold lapse).
    Freeze,
    /// `zkgate resign LEASE` from elsewhere.
    ResignByLease,
    /// The first gateway drains (SIGTERM to `zkgate serve`).
    Drain,
    /// The same with the verb on a slow link ([`SLOW_LINK`] each way, longer than a heartbeat
    /// period): it hears the last heartbeat before the drain only after the drain began, and
    /// `suspended` a link delay after it was sent, and counts its grace from there (G3c: the
    /// gateway allows for that delay).
    SlowDrain,
    /// ZooKeeper stops answering until the leader is told `suspended`, then answers again.
    Blip,
}

/// `zkgate resign` (`release`) with the lease `a`'s CMD found in `ZKGATE_LEASE`.
fn by_lease(verb: &str, s: &Scripts, url: &str) {
    let lease = std::fs::read_to_string(format!("{}.lease", s.log("a").display())).unwrap();
    let by_lease = if verb == "lock" { "release" } else { "resign" };
    let out = zkgate(&[by_lease, lease.trim(), "--endpoint", url])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// The one-way delay of [`Fault::SlowDrain`]'s link: above the heartbeat period of the test
/// gateways (`silence_limit / 3` = 467 ms at their 4 s session timeout), so every drain begins
/// within a link delay of the last heartbeat sent; below the delay allowance (the keepalive
/// timeout, 1.6 s). Found on real processes: at 150 ms, with the drain 60 ms after a
/// heartbeat, a command that ignored SIGTERM ran 40–99 ms beside its successor.
const SLOW_LINK: Duration = Duration::from_millis(500);

/// Two verbs, `a` on one gateway and `b` on another (same ZooKeeper, same root): `a` leads
/// and meets `fault`; then `b` leads. Checks that every timestamp `a`'s processes wrote
/// precedes every one `b`'s wrote, and that none of `a`'s processes is left.
async fn handover(verb: &str, fault: Fault) {
    let mut own = if fault == Fault::Blip {
        Some(own_zk().await)
    } else {
        None
    };
    let zk = own.as_ref().map_or_else(shared_zk, |z| z.connect_string());
    let root = unique_root();
    let opts = || GatewayOpts {
        root: Some(root.clone()),
        ..Default::default()
    };
    let gw1 = Gateway::start_with(&zk, opts()).await;
    let gw2 = Gateway::start_with(&zk, opts()).await;
    let s = Scripts::new();
    let name = "handover";
    let slow = if fault == Fault::SlowDrain {
        Some(
            slowlink::SlowLink::start(gw1.addr, SLOW_LINK)
                .await
                .unwrap(),
        )
    } else {
        None
    };
    let a_url = slow.as_ref().map_or_else(|| gw1.url(), |l| l.url());
    let a_mode = match fault {
        Fault::LeavesWorkers => "starter",
        _ => "slow",
    };
    let granted = |who: &str| {
        if verb == "lock" {
            format!("acquired lock {name:?}")
        } else {
            format!("elected: {who}")
        }
    };
    let mut a = Verb::start(
        verb,
        name,
        "a",
        &a_url,
        &["--no-requeue"],
        &s.cmd("a", a_mode),
    );
    a.wait_line(&granted("a"));
    if fault != Fault::LeavesWorkers {
        wait_for("a's command to write", Duration::from_secs(10), || {
            stamps(&s.log("a")).len() >= 3
        });
    }
    let b = Verb::start(verb, name, "b", &gw2.url(), &[], &s.cmd("b", "fast"));
    match fault {
        Fault::LeavesWorkers => {
            // Both workers started (each wrote its pid), whatever the verb did meanwhile.
            wait_for("a's workers", Duration::from_secs(10), || {
                pids(&s.pids("a")).len() >= 2
            });
        }
        Fault::Hangup => {
            b.wait_line("queued at position 1");
            a.signal("HUP");
        }
        Fault::Kill => {
            b.wait_line("queued at position 1");
            a.signal("KILL");
        }
        Fault::CtrlZ => {
            b.wait_line("queued at position 1");
            a.signal("TSTP");
        }
        Fault::HangupThenResign => {
            b.wait_line("queued at position 1");
            a.signal("HUP");
            // CMD keeps writing while it stops: let it write a few more (≈ 100 ms).
            let before = stamps(&s.log("a")).len();
            wait_for(
                "a's command to keep writing",
                Duration::from_secs(10),
                || stamps(&s.log("a")).len() >= before + 5,
            );
            by_lease(verb, &s, &gw1.url());
        }
        Fault::Freeze => {
            b.wait_line("queued at position 1");
            a.signal("STOP");
        }
        Fault::ResignByLease => {
            b.wait_line("queued at position 1");
            by_lease(verb, &s, &gw1.url());
        }
        Fault::Drain | Fault::SlowDrain => {
            b.wait_line("queued at position 1");
            gw1.stop().await;
        }
        Fault::Blip => {
            b.wait_line("queued at position 1");
            let zk = own.as_mut().unwrap();
            zk.pause(0).await.unwrap();
            let suspended = std::panic::catch_unwind(|| a.wait_line("suspended"));
            zk.resume(0).await.unwrap();
            suspended.expect("the leader was suspended during the blip");
        }
    }
    // From the end of the fault (the drain done, ZooKeeper answering again; for a
    // worker-leaving CMD, its workers running).
    let started = Instant::now();
    b.wait_line(&granted("b"));
    let b_pids = {
        wait_for("b's command to write", Duration::from_secs(10), || {
            stamps(&s.log("b")).len() >= 10
        });
        pids(&s.pids("b"))
    };
    // Whatever `a` left: all gone by now (a survivor would still be writing).
    let a_pids = pids(&s.pids("a"));
    assert!(!a_pids.is_empty());
    wait_for("a's processes to be gone", Duration::from_secs(5), || {
        a_pids.iter().all(|&p| !alive(p))
    });
    if fault == Fault::Freeze {
        // The frozen verb's command was killed by its keeper; thaw it so it can notice.
        a.signal("CONT");
    }
    let status = a.wait_exit(Duration::from_secs(15));
    for &p in &a_pids {
        assert!(
            group_members(p).is_empty(),
            "{fault:?}: group {p} still has members"
        );
    }
    let (a_stamps, b_stamps) = (stamps(&s.log("a")), stamps(&s.log("b")));
    let a_last = *a_stamps
        .iter()
        .max()
        .expect("a's command wrote before its hold ended");
    let b_first = *b_stamps.iter().min().expect("b's command wrote");
    let late = a_stamps.iter().filter(|&&t| t >= b_first).count();
    eprintln!(
        "{verb} {fault:?}: a's verb exited {:?}; a's last write {:.1} ms before b's first; b granted \
         {:?} after the fault",
        status.code(),
        (b_first as f64 - a_last as f64) / 1e6,
        started.elapsed(),
    );
    // No fault may leave a window with both writing — a resign or release by lease included:
    // the holder is told first (`suspended`, END_REQUESTED) and its znode goes only once the
    // verb has stopped CMD and ended its stream (G3c). Before that, the by-lease delete came
    // first and the holder's kill raced the successor's start.
    assert!(
        a_last < b_first,
        "{verb} {fault:?}: a wrote {late} times after b began, the last {:.1} ms after",
        (a_last - b_first) as f64 / 1e6
    );
    drop(b);
    wait_for("b's processes to be gone", Duration::from_secs(15), || {
        b_pids.iter().all(|&p| !alive(p))
    });
    drop(gw2);
    if let Some(zk) = own {
        zk.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_a_command_leaves_behind_are_stopped_before_the_hold_is_given_up() {
    handover("elect", Fault::LeavesWorkers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_to_the_verb_stops_its_command_before_the_hold_is_given_up() {
    handover("elect", Fault::Hangup).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_z_to_the_verb_stops_its_command_before_the_hold_is_given_up() {
    handover("elect", Fault::CtrlZ).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_while_the_command_stops_cuts_the_grace() {
    handover("elect", Fault::HangupThenResign).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_verb_kills_its_command() {
    handover("elect", Fault::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_verb_has_its_command_killed_when_the_hold_lapses() {
    handover("elect", Fault::Freeze).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resign_by_lease_kills_the_command_at_once() {
    handover("elect", Fault::ResignByLease).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_kills_a_slow_command_before_the_successor_starts() {
    handover("elect", Fault::Drain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_kills_a_slow_command_on_a_slow_link_before_the_successor_starts() {
    handover("elect", Fault::SlowDrain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_workers_a_command_leaves_behind_are_stopped_before_the_lock_is_released() {
    handover("lock", Fault::LeavesWorkers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_sigkill_of_the_verb_kills_its_command() {
    handover("lock", Fault::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_a_release_by_lease_kills_the_command_at_once() {
    handover("lock", Fault::ResignByLease).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_zookeeper_blip_the_suspended_leaders_command_is_gone_before_the_next_starts() {
    handover("elect", Fault::Blip).await;
}

/// The keeper alone: SIGTERM, then SIGKILL after the grace, to a command that ignores
/// SIGTERM; a descendant that left the group goes too; the exit status is the main process's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keeper_kills_the_whole_tree_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let script = format!(
        "trap '' TERM; setsid sh -c 'trap \"\" TERM; echo $$ >> {p}; while :; do sleep 0.05; done' & \
         echo $$ >> {p}; while :; do sleep 0.05; done",
        p = pids.display()
    );
    let argv = ["sh".to_owned(), "-c".to_owned(), script];
    let exe = Path::new(env!("CARGO_BIN_EXE_zkgate"));
    let far = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut cmd = HeldCommand::spawn_with(exe, &argv, &[], far).await.unwrap();
    wait_for("both processes", Duration::from_secs(10), || {
        self::pids(&pids).len() == 2
    });
    let started = Instant::now();
    cmd.stop(Duration::from_millis(300)).await;
    let status = cmd.gone().await;
    assert_eq!(exit_code(&status), 137, "{status:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    for p in self::pids(&pids) {
        assert!(!alive(p), "{p} survived");
    }

    // A missed deadline kills at once, without a stop.
    let pidfile = dir.path().join("second");
    let script = format!("echo $$ > {}; exec sleep 60", pidfile.display());
    let argv = ["sh".to_owned(), "-c".to_owned(), script];
    // Far enough for a loaded machine to start the keeper and `sh` (which writes its pid
    // first); 500 ms once left room for neither.
    let soon = tokio::time::Instant::now() + Duration::from_secs(3);
    let mut cmd = HeldCommand::spawn_with(exe, &argv, &[], soon)
        .await
        .unwrap();
    wait_for("the command", Duration::from_secs(10), || {
        !self::pids(&pidfile).is_empty()
    });
    let status = tokio::time::timeout(Duration::from_secs(10), cmd.gone())
        .await
        .expect("killed at the deadline");
    assert_eq!(exit_code(&status), 137);
    assert!(cmd.expired());

    // A command that cannot be started: the errno comes back.
    let argv = ["/nonexistent/cmd".to_owned()];
    let e = HeldCommand::spawn_with(exe, &argv, &[], far)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
}

/// A signal to the verb while it stops CMD after a loss still means "exit": the verb exits once
/// CMD is gone, and does not campaign again. (It used to only kill CMD at once and campaign
/// again: a soak saw a verb told to stop take the lock once more and start CMD again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_while_the_command_stops_after_a_loss_ends_the_verb() {
    let mut zk = own_zk().await;
    let gw = Gateway::start(&zk.connect_string()).await;
    let s = Scripts::new();
    // `slow`: CMD ignores SIGTERM for 1.5 s, so the stop lasts that long.
    let mut a = Verb::start(
        "elect",
        "stop-after-loss",
        "a",
        &gw.url(),
        &[],
        &s.cmd("a", "slow"),
    );
    a.wait_line("elected: a");
    zk.pause(0).await.unwrap();
    let giving_up = std::panic::catch_unwind(|| a.wait_line("giving up leadership"));
    a.signal("TERM");
    zk.resume(0).await.unwrap();
    giving_up.expect("a lost its hold during the blip");
    a.wait_line("received signal 15");
    a.wait_line("command stopped");
    a.wait_exit(Duration::from_secs(10));
    let rest: Vec<String> = a.out.try_iter().collect();
    assert!(
        !rest
            .iter()
            .any(|l| l.contains("zkgate: campaigning again in")),
        "the verb campaigned again after its signal: {rest:?}"
    );
    gw.stop().await;
}
