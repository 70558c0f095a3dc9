//! The client verbs of the real binary (`zkgate elect`, `leader`, `observe`) against a gateway.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;

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

    // SIGTERM to `zkgate elect`: it stops the command and leaves the election.
    Command::new("kill")
        .arg(elect.id().to_string())
        .status()
        .unwrap();
    let status = elect.wait().unwrap();
    assert!(status.success(), "{status:?}");
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
