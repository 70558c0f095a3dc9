//! The client verbs of the real binary (`zkgate elect`, `lock`, `leader`, `observe`) against a
//! gateway: `elect -- CMD` / `lock -- CMD` run CMD exactly while they hold (SPEC §5).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use zkgate_testkit::*;

fn zkgate(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zkgate"));
    c.args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    c
}

/// Lines of a child's stdout, as they come.
fn lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_line(rx: &mpsc::Receiver<String>, needle: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(needle) => return l,
            Ok(_) => continue,
            Err(e) => panic!("no line containing {needle:?}: {e}"),
        }
    }
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_runs_a_command_while_leader_and_leader_observe_report_it() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let url = gw.url();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 60", pidfile.display());

    let mut observe = zkgate(&["observe", "cli", "--endpoint", &url])
        .spawn()
        .unwrap();
    let observed = lines(&mut observe);
    wait_line(&observed, "vacant");

    let mut elect = zkgate(&[
        "elect",
        "cli",
        "--candidate",
        "alice",
        "--value",
        "v1",
        "--endpoint",
        &url,
        "--",
        "sh",
        "-c",
        &script,
    ])
    .spawn()
    .unwrap();
    let out = lines(&mut elect);
    wait_line(&out, "queued at position 0");
    let elected = wait_line(&out, "elected: alice");
    assert!(elected.contains("fencing token"), "{elected}");
    assert!(wait_line(&observed, "leader alice").contains("v1"));

    let leader = zkgate(&["leader", "cli", "--endpoint", &url])
        .output()
        .unwrap();
    assert!(leader.status.success());
    assert!(String::from_utf8_lossy(&leader.stdout).starts_with("alice (fencing token "));

    // The command runs while leader.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let pid: u32 = loop {
        if let Some(p) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break p;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(alive(pid));

    // SIGTERM to `zkgate elect`: it stops the command and leaves the election, and exits as
    // the command did (`sleep` dies of the forwarded SIGTERM: 128 + 15).
    Command::new("kill")
        .arg(elect.id().to_string())
        .status()
        .unwrap();
    let status = elect.wait().unwrap();
    assert_eq!(status.code(), Some(143), "{status:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while alive(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "the leader-only command outlived leadership"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_line(&observed, "vacant");
    wait_no_members(&zk_client(&zk).await, &gw.root, Duration::from_secs(5)).await;

    let leader = zkgate(&["leader", "cli", "--endpoint", &url])
        .output()
        .unwrap();
    assert!(!leader.status.success(), "no leader is an error exit");
    assert!(String::from_utf8_lossy(&leader.stderr).contains("no leader"));
    let _ = observe.kill();
    let _ = observe.wait();
}

/// Lines of a child's stderr, as they come.
fn err_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The number after "fencing token " in a line.
fn token_in(line: &str) -> u64 {
    let rest = &line[line.find("fencing token ").expect(line) + "fencing token ".len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "zkgate did not exit within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `path` holds a parsable value.
fn wait_file<T: std::str::FromStr>(path: &std::path::Path) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(v) = std::fs::read_to_string(path)
            .ok()
            .filter(|s| s.ends_with('\n'))
            .and_then(|s| s.trim().parse().ok())
        {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} never written",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A verb process that is stopped with SIGTERM (so it stops its CMD) when the test ends,
/// also when it fails.
struct Verb(Child);

impl Drop for Verb {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = Command::new("kill").arg(self.0.id().to_string()).status();
            let deadline = std::time::Instant::now() + Duration::from_secs(15);
            while self.0.try_wait().ok().flatten().is_none() && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_and_lock_exit_with_the_commands_code_and_pass_the_fencing_token() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let url = gw.url();
    let dir = tempfile::tempdir().unwrap();

    for verb in ["elect", "lock"] {
        let tokenfile = dir.path().join(format!("{verb}-token"));
        let script = format!(
            "echo \"$ZKGATE_FENCING_TOKEN\" > {}; exit 7",
            tokenfile.display()
        );
        let mut child = zkgate(&[verb, "codes", "--endpoint", &url, "--", "sh", "-c", &script])
            .spawn()
            .unwrap();
        // `elect` prints its events on stdout, `lock` on stderr.
        let granted = if verb == "elect" {
            wait_line(&lines(&mut child), "elected: ")
        } else {
            wait_line(&err_lines(&mut child), "acquired lock")
        };
        let status = wait_exit(&mut child, Duration::from_secs(15));
        assert_eq!(status.code(), Some(7), "{verb}: {status:?}");
        let token: u64 = wait_file(&tokenfile);
        assert_eq!(token, token_in(&granted), "{verb}: {granted}");
        assert!(token > 0);

        // Death by a signal is 128 + its number, as shells report it (SIGUSR1 = 10).
        let status = zkgate(&[
            verb,
            "codes",
            "--endpoint",
            &url,
            "--",
            "sh",
            "-c",
            "kill -USR1 $$",
        ])
        .status()
        .unwrap();
        assert_eq!(status.code(), Some(138), "{verb}: {status:?}");
        // A command that cannot be run: 127, as a shell says.
        let status = zkgate(&[verb, "codes", "--endpoint", &url, "--", "/nonexistent/cmd"])
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(127), "{verb}: {status:?}");
    }
    // Each exit gave the hold up.
    wait_no_members(&zk_client(&zk).await, &gw.root, Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_ignoring_sigterm_is_killed_after_the_grace() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let url = gw.url();
    let dir = tempfile::tempdir().unwrap();
    for verb in ["elect", "lock"] {
        let pidfile = dir.path().join(format!("{verb}.pid"));
        // `trap '' TERM` is inherited by `sleep`, so the whole process group ignores SIGTERM.
        let script = format!(
            "trap '' TERM; echo $$ > {}; while :; do sleep 0.05; done",
            pidfile.display()
        );
        let mut child = zkgate(&[
            verb,
            "stubborn",
            "--kill-grace",
            "1s",
            "--endpoint",
            &url,
            "--",
            "sh",
            "-c",
            &script,
        ])
        .spawn()
        .unwrap();
        let pid: u32 = wait_file(&pidfile);
        assert!(alive(pid));
        let asked = std::time::Instant::now();
        Command::new("kill")
            .arg(child.id().to_string())
            .status()
            .unwrap();
        let status = wait_exit(&mut child, Duration::from_secs(15));
        let took = asked.elapsed();
        // SIGKILL (9): 128 + 9, and only after the grace.
        assert_eq!(status.code(), Some(137), "{verb}: {status:?}");
        assert!(
            took >= Duration::from_secs(1),
            "{verb}: killed after {took:?}"
        );
        assert!(!alive(pid), "{verb}: the command survived");
    }
    wait_no_members(&zk_client(&zk).await, &gw.root, Duration::from_secs(5)).await;
}

/// Which of the candidates' commands run now (a pid file per candidate, the pid alive).
fn running(dir: &std::path::Path, candidates: &[&str]) -> Vec<String> {
    candidates
        .iter()
        .filter(|c| {
            std::fs::read_to_string(dir.join(format!("{c}.pid")))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .is_some_and(alive)
        })
        .map(|c| (*c).to_owned())
        .collect()
}

/// Item 6 of issue 10: after a ZooKeeper blip that suspends the leader, exactly one of two
/// `elect -- CMD` processes runs CMD (before, the suspended leader killed CMD but kept its
/// candidacy, so nobody ran it), and the standby waits past `silence_limit` without giving up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_zookeeper_blip_exactly_one_elect_runs_its_command() {
    let mut zk = own_zk().await;
    // T = 5 s (the most this ZooKeeper grants): silence_limit 1.75 s, heartbeats every 0.58 s.
    let gw = Gateway::start_with(
        &zk.connect_string(),
        GatewayOpts {
            session_timeout: Duration::from_secs(5),
            ..Default::default()
        },
    )
    .await;
    let url = gw.url();
    let dir = tempfile::tempdir().unwrap();
    let candidates = ["a", "b"];
    let mut verbs = Vec::new();
    let mut outs = Vec::new();
    for c in candidates {
        let script = format!(
            "echo $$ > {}; exec sleep 600",
            dir.path().join(format!("{c}.pid")).display()
        );
        let mut child = zkgate(&[
            "elect",
            "blip",
            "--candidate",
            c,
            "--kill-grace",
            "2s",
            "--endpoint",
            &url,
            "--",
            "sh",
            "-c",
            &script,
        ])
        .spawn()
        .unwrap();
        outs.push(lines(&mut child));
        verbs.push(Verb(child));
        // Queue in a known order.
        wait_line(outs.last().unwrap(), "queued at position");
    }
    wait_line(&outs[0], "elected: a");
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while running(dir.path(), &candidates) != ["a"] {
        assert!(
            std::time::Instant::now() < deadline,
            "a never ran its command"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // The blip: ZooKeeper stops answering until the leader has been told `suspended`, well
    // within the session timeout.
    zk.pause(0).await.unwrap();
    let suspended = std::panic::catch_unwind(|| wait_line(&outs[0], "suspended"));
    zk.resume(0).await.unwrap();
    suspended.expect("the leader was suspended during the blip");

    let leader = |url: String| {
        let out = zkgate(&["leader", "blip", "--endpoint", &url])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split(' ')
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    let mut client = gw.client().await;
    let mut queued_tokens = || {
        let r = futures::executor::block_on(client.candidates(zkgate::proto::CandidatesRequest {
            election: "blip".into(),
            ..Default::default()
        }));
        r.map(|r| {
            r.into_inner()
                .candidates
                .iter()
                .filter(|c| !c.leader)
                .map(|c| (c.candidate.clone(), c.fencing_token))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
    };
    // Settled: exactly one command runs, its candidate is the election's leader, and the other
    // one is queued again.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (settled, standby) = loop {
        let now = running(dir.path(), &candidates);
        let queued = queued_tokens();
        if now.len() == 1 && leader(url.clone()) == now[0] && queued.len() == 1 {
            break (now[0].clone(), queued);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never settled on one command: {now:?} running, leader {:?}",
            leader(url.clone())
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // Stays settled, for longer than silence_limit (the queued one must not give up).
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(
            running(dir.path(), &candidates),
            std::slice::from_ref(&settled)
        );
        for v in &mut verbs {
            assert!(
                v.0.try_wait().unwrap().is_none(),
                "a verb gave up: {v:?}",
                v = v.0.id()
            );
        }
    }
    assert_eq!(leader(url.clone()), settled);
    // The standby kept its place: the same znode (fencing token), not a fresh campaign.
    assert_eq!(queued_tokens(), standby);
    drop(verbs);
    zk.shutdown().await;
}
