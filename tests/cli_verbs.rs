//! The client verbs of the real binary (`zkgate elect`, `lock`, `leader`, `observe`) against a
//! gateway: `elect -- CMD` / `lock -- CMD` run CMD exactly while they hold (contract "Command line").

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
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(needle) => return l,
            Ok(l) => seen.push(l),
            Err(e) => panic!("no line containing {needle:?} ({e}); read instead: {seen:#?}"),
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
    zkgate_localzk::process::send_signal(elect.id(), "TERM").unwrap();
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
            let _ = zkgate_localzk::process::send_signal(self.0.id(), "TERM");
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
        // `elect` prints its events on stdout, `lock` on stderr. Kept open until the verb
        // exits (a closed pipe would fail its last lines).
        let events = if verb == "elect" {
            lines(&mut child)
        } else {
            err_lines(&mut child)
        };
        let granted = wait_line(
            &events,
            if verb == "elect" {
                "elected: "
            } else {
                "acquired lock"
            },
        );
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
        zkgate_localzk::process::send_signal(child.id(), "TERM").unwrap();
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

/// The next stdout line, which must be one JSON object.
fn json_line(rx: &mpsc::Receiver<String>) -> serde_json::Value {
    let line = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("a line in time");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not one JSON object: {line:?}: {e}"))
}

/// Runs a query verb with `--output json` against `url`; its exit code and its JSON answer.
fn query_json(args: &[&str], url: &str) -> (Option<i32>, serde_json::Value) {
    let out = zkgate(args)
        .args(["--output", "json", "--endpoint", url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(text.trim()).unwrap_or(serde_json::Value::Null);
    (out.status.code(), v)
}

fn sigterm(child: &Child) {
    zkgate_localzk::process::send_signal(child.id(), "TERM").unwrap();
}

/// `zkgate elect/lock NAME --output json` without CMD is the Rust conformance agent
/// (clients/CONFORMANCE.md): exactly its event lines on stdout, the endpoint from
/// `ZKGATE_ENDPOINT`, held until SIGTERM, then released with `{"event":"released"}` and exit 0.
/// The query verbs answer in JSON meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_and_lock_without_cmd_are_the_json_conformance_agent() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let url = gw.url();
    for (verb, event) in [("elect", "elected"), ("lock", "acquired")] {
        let mut child = zkgate(&[verb, "agent", "--output", "json", "--id", "x"]);
        if verb == "lock" {
            child.arg("--requeue");
        }
        let mut child = child.env("ZKGATE_ENDPOINT", &url).spawn().unwrap();
        let out = lines(&mut child);
        let granted = json_line(&out);
        assert_eq!(granted["event"], event, "{granted}");
        assert_eq!(granted["endpoint"], url.as_str(), "{granted}");
        let token: u64 = granted["token"].as_str().unwrap().parse().unwrap();
        let t = token.to_string();
        if verb == "elect" {
            let (code, v) = query_json(&["leader", "agent"], &url);
            assert_eq!(code, Some(0));
            assert_eq!(v["leader"]["candidate"], "x");
            assert_eq!(v["leader"]["fencing_token"], t.as_str());
            let (code, v) = query_json(&["candidates", "agent"], &url);
            assert_eq!(code, Some(0));
            assert_eq!(v["candidates"][0]["leader"], true, "{v}");
            let (code, v) = query_json(&["validate", "agent", &t], &url);
            assert_eq!((code, &v["current"]), (Some(0), &true.into()), "{v}");
            assert_eq!(v["leader"]["candidate"], "x");
            let older = (token - 1).to_string();
            let (code, v) = query_json(&["validate", "agent", &older], &url);
            assert_eq!((code, &v["current"]), (Some(5), &false.into()), "{v}");
        } else {
            let (code, v) = query_json(&["holders", "agent"], &url);
            assert_eq!(code, Some(0));
            assert_eq!(v["holders"][0]["owner"], "x", "{v}");
            assert_eq!(v["holders"][0]["mode"], "write");
            assert_eq!(v["holders"][0]["fencing_token"], t.as_str());
            assert_eq!(v["waiting"], 0);
            let (code, _) = query_json(&["validate", "--lock", "agent", &t], &url);
            assert_eq!(code, Some(0));
        }
        sigterm(&child);
        assert_eq!(json_line(&out), serde_json::json!({"event": "released"}));
        let status = wait_exit(&mut child, Duration::from_secs(15));
        assert_eq!(status.code(), Some(0), "{verb}: {status:?}");
        assert!(out.recv().is_err(), "{verb}: nothing after released");
        wait_no_members(&zk_client(&zk).await, &gw.root, Duration::from_secs(5)).await;
    }
}

/// A drained gateway: the agent with `--once` reports `lost`, names the drain on stderr, and
/// exits 3; the requeueing one,
/// given two endpoints, is elected again on the second gateway. Both held, so the drain's first
/// sign is the `suspended` that revokes their holds (G3c; before, it was the `UNAVAILABLE`
/// end, reported as `unavailable`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_agent_reports_loss_and_fails_over_to_the_next_endpoint() {
    let zk = shared_zk();
    let root = unique_root();
    let opts = || GatewayOpts {
        root: Some(root.clone()),
        ..Default::default()
    };
    let gw1 = Gateway::start_with(&zk, opts()).await;
    let gw2 = Gateway::start_with(&zk, opts()).await;
    let (url1, url2) = (gw1.url(), gw2.url());
    let mut once = Verb(
        zkgate(&["elect", "once", "--output", "json", "--once"])
            .env("ZKGATE_ENDPOINT", &url1)
            .spawn()
            .unwrap(),
    );
    let once_out = lines(&mut once.0);
    let once_err = err_lines(&mut once.0);
    let both = format!("{url1},{url2}");
    let mut requeue = Verb(
        zkgate(&["elect", "again", "--output", "json"])
            .env("ZKGATE_ENDPOINT", &both)
            .spawn()
            .unwrap(),
    );
    let requeue_out = lines(&mut requeue.0);
    assert_eq!(json_line(&once_out)["event"], "elected");
    let first = json_line(&requeue_out);
    assert_eq!(first["endpoint"], url1.as_str(), "{first}");

    gw1.stop().await;
    let lost = serde_json::json!({"event": "lost", "reason": "suspended"});
    assert_eq!(json_line(&once_out), lost);
    // Its stderr says which suspension it was (`suspended.reason`, DRAIN).
    wait_line(&once_err, "suspended: the gateway is draining");
    assert_eq!(
        wait_exit(&mut once.0, Duration::from_secs(15)).code(),
        Some(3)
    );
    assert_eq!(json_line(&requeue_out), lost);
    let again = json_line(&requeue_out);
    assert_eq!(again["event"], "elected", "{again}");
    assert_eq!(again["endpoint"], url2.as_str(), "{again}");
    let token = |v: &serde_json::Value| v["token"].as_str().unwrap().parse::<u64>().unwrap();
    assert!(token(&again) > token(&first));
    sigterm(&requeue.0);
    assert_eq!(json_line(&requeue_out)["event"], "released");
    assert_eq!(
        wait_exit(&mut requeue.0, Duration::from_secs(15)).code(),
        Some(0)
    );
    wait_no_members(&zk_client(&zk).await, &root, Duration::from_secs(5)).await;
}

/// `resign`/`release` by lease (exit 4 for a spent one), the lock flags (`--permits`,
/// `--read`, `--timeout 0`, `--ttl`), several endpoints, and the TLS flags' checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_lease_verbs_lock_flags_and_endpoint_lists() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let url = gw.url();
    let c = zkgate_client::Client::connect(zkgate_client::Endpoints::new([&url]).unwrap())
        .await
        .unwrap();

    // Resign by lease; the lease on the command line, then from standard input.
    let lead = c.elect("byl", "a", b"").await.unwrap();
    let (code, v) = query_json(&["resign", lead.lease()], &url);
    assert_eq!((code, v), (Some(0), serde_json::json!({"resigned": true})));
    // Told first (G3c): the helper hears `suspended` (END_REQUESTED), reports the loss as
    // `ended` and ends its stream; only then is the znode deleted and the verb answered.
    assert_eq!(
        tokio::time::timeout(STEP, lead.lost()).await.unwrap(),
        zkgate_client::LossReason::Ended
    );
    let (code, _) = query_json(&["resign", lead.lease()], &url);
    assert_eq!(code, Some(4), "a spent lease is not found");
    let held = c
        .acquire(zkgate_client::LockOptions::new("byl"))
        .await
        .unwrap();
    let release = |lease: &str| {
        use std::io::Write;
        let mut p = zkgate(&["release", "-", "--endpoint", &url])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        writeln!(p.stdin.take().unwrap(), "{lease}").unwrap();
        let out = p.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    assert_eq!(release(held.lease()), (Some(0), "released\n".to_owned()));
    assert_eq!(release(held.lease()).0, Some(4));

    // A semaphore of two: two holders, a try-lock times out (exit 6), a mismatch is refused.
    let mut holders = Vec::new();
    for _ in 0..2 {
        let mut v = Verb(
            zkgate(&[
                "lock",
                "sem",
                "--permits",
                "2",
                "--ttl",
                "2s",
                "--output",
                "json",
                "--endpoint",
                &url,
            ])
            .spawn()
            .unwrap(),
        );
        let out = lines(&mut v.0);
        assert_eq!(json_line(&out)["event"], "acquired");
        // Keep reading its stdout, so that its last line never meets a closed pipe.
        holders.push((v, out));
    }
    let (code, v) = query_json(&["lock", "sem", "--permits", "2", "--timeout", "0"], &url);
    assert_eq!(
        (code, v),
        (Some(6), serde_json::json!({"event": "timeout"}))
    );
    let (code, v) = query_json(&["lock", "sem", "--permits", "3", "--timeout", "0"], &url);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["event"], "error", "{v}");
    // Two readers at once.
    let mut readers = Vec::new();
    for _ in 0..2 {
        let mut v = Verb(
            zkgate(&[
                "lock",
                "rw",
                "--read",
                "--output",
                "json",
                "--endpoint",
                &url,
            ])
            .spawn()
            .unwrap(),
        );
        let out = lines(&mut v.0);
        assert_eq!(json_line(&out)["event"], "acquired");
        readers.push((v, out));
    }
    let (_, v) = query_json(&["holders", "rw"], &url);
    let modes: Vec<&str> = v["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["read", "read"]);
    let (code, _) = query_json(&["validate", "--lock", "rw", "1"], &url);
    assert_eq!(code, Some(5));

    // Several endpoints, repeated or comma-separated: a refused first one is skipped.
    for args in [
        vec!["--endpoint", "http://127.0.0.1:1", "--endpoint", &url],
        vec!["--endpoint", &format!("127.0.0.1:1,{url}")],
    ] {
        let mut all = vec!["holders", "sem", "--output", "json"];
        all.extend(args.iter().copied());
        let out = zkgate(&all).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["holders"].as_array().unwrap().len(), 2, "{v}");
    }
    // TLS flags: half an identity is a usage error; an unreadable CA a failure.
    let out = zkgate(&["leader", "x", "--cert", "c.pem", "--endpoint", &url])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = zkgate(&[
        "leader",
        "x",
        "--ca",
        "/nonexistent/ca.pem",
        "--endpoint",
        &url,
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/ca.pem"));
    drop(holders);
    drop(readers);
    wait_no_members(&zk_client(&zk).await, &gw.root, Duration::from_secs(5)).await;
}

/// The TLS flags against a gateway that requires client certificates (mTLS): with `--ca`,
/// `--cert`, `--key` (and `--server-name` for a name the endpoint does not carry) the verbs
/// work; without a client certificate they are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_flags_reach_a_mutual_tls_gateway() {
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    let dir = tempfile::tempdir().unwrap();
    zkgate_testkit::pki::make_pki(dir.path());
    let path = |f: &str| dir.path().join(f).to_str().unwrap().to_owned();
    let read = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
    let zk = shared_zk();
    let mut cc = zkgate::coord::CoordConfig::new(&zk);
    cc.root = unique_root();
    cc.session_timeout = Duration::from_secs(4);
    let mut cfg = zkgate::server::ServeConfig::new(cc);
    cfg.tls = Some(
        ServerTlsConfig::new()
            .identity(Identity::from_pem(read("server.pem"), read("server.key")))
            .client_ca_root(Certificate::from_pem(read("ca.pem"))),
    );
    let port = zkgate_testkit::serve(cfg).await.0.port();

    let (ca, cert, key) = (path("ca.pem"), path("client.pem"), path("client.key"));
    // A bare host:port uses TLS once TLS flags are given; the certificate names `gw.test`,
    // which the endpoint (an IP) does not carry: --server-name.
    let endpoint = format!("127.0.0.1:{port}");
    let tls = [
        "--ca",
        &ca,
        "--cert",
        &cert,
        "--key",
        &key,
        "--server-name",
        "gw.test",
    ];
    let out = zkgate(&["leader", "tls", "--endpoint", &endpoint])
        .args(tls)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "a real answer (no leader): {out:?}"
    );
    let mut elect = Verb(
        zkgate(&["elect", "tls", "--output", "json", "--endpoint", &endpoint])
            .args(tls)
            .spawn()
            .unwrap(),
    );
    let events = lines(&mut elect.0);
    assert_eq!(json_line(&events)["event"], "elected");
    // Without a client certificate the gateway refuses.
    let https = format!("https://localhost:{port}");
    let out = zkgate(&["leader", "tls", "--ca", &ca, "--endpoint", &https])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    sigterm(&elect.0);
    assert_eq!(json_line(&events)["event"], "released");
    assert_eq!(
        wait_exit(&mut elect.0, Duration::from_secs(15)).code(),
        Some(0)
    );
}

/// `zkgate observe --prefix P` (text and `--output json`): the snapshot, its end, then each
/// election's changes on lines that name it; an election created later is included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_prefix_prints_every_election_in_text_and_json() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let url = gw.url();
    let mut c = gw.client().await;
    let mut a = Campaign::join(&mut c, "cli.a", "alice", b"va").await;
    a.elected().await;

    let mut text = zkgate(&[
        "observe",
        "--prefix",
        "cli.",
        "cli-named",
        "--endpoint",
        &url,
    ])
    .spawn()
    .unwrap();
    let text_lines = lines(&mut text);
    let mut json = zkgate(&[
        "observe",
        "--prefix",
        "cli.",
        "--endpoint",
        &url,
        "--output",
        "json",
    ])
    .spawn()
    .unwrap();
    let json_lines = lines(&mut json);
    // The snapshot, in any order, then its end.
    let mut snapshot = Vec::new();
    loop {
        let line = wait_line(&text_lines, "");
        if line == "-- snapshot complete" {
            break;
        }
        snapshot.push(line);
    }
    snapshot.sort();
    assert_eq!(snapshot.len(), 2, "{snapshot:?}");
    assert_eq!(snapshot[0], "cli-named vacant");
    assert!(
        snapshot[1].starts_with("cli.a leader alice (fencing token ")
            && snapshot[1].ends_with("va"),
        "{snapshot:?}"
    );
    let first: serde_json::Value =
        serde_json::from_str(&wait_line(&json_lines, "\"election\"")).unwrap();
    assert_eq!(first["election"], "cli.a");
    assert_eq!(first["leader"]["candidate"], "alice");
    wait_line(&json_lines, "\"snapshot_complete\":true");

    let mut b = Campaign::join(&mut c, "cli.b", "bob", b"").await;
    b.elected().await;
    wait_line(&text_lines, "cli.b leader bob");
    let later: serde_json::Value =
        serde_json::from_str(&wait_line(&json_lines, "\"candidate\":\"bob\"")).unwrap();
    assert_eq!(later["leader"]["candidate"], "bob");
    drop(a);
    wait_line(&text_lines, "cli.a vacant");
    let vacant: serde_json::Value = serde_json::from_str(&wait_line(&json_lines, "cli.a")).unwrap();
    assert!(vacant["leader"].is_null(), "{vacant}");

    let usage = zkgate(&["observe", "one", "two", "--endpoint", &url])
        .output()
        .unwrap();
    assert_eq!(usage.status.code(), Some(2), "two names without --prefix");
    for mut child in [text, json] {
        let _ = child.kill();
        let _ = child.wait();
    }
    drop(b);
}
