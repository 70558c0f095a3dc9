//! The built `zkgate` binary run as `zkgate dev` on free ports, for tests that drive it with
//! real external clients (grpcurl, Python). Nothing outlives the test: dropping a [`DevGateway`]
//! kills the process, and its ZooKeeper dies with it (see `zkgate_localzk`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The built `zkgate` binary: `$ZKGATE_BIN`, or the one Cargo builds beside the running test
/// (`target/<profile>/zkgate` for `target/<profile>/deps/<test>`). Cargo builds it before any
/// integration test of the `zkgate` package runs; `CARGO_BIN_EXE_zkgate` names it only to the
/// package's own tests, not to this crate.
///
/// # Panics
/// If there is no such file.
pub fn zkgate_bin() -> PathBuf {
    let bin = match std::env::var_os("ZKGATE_BIN") {
        Some(path) => PathBuf::from(path),
        None => {
            let exe = std::env::current_exe().expect("the test's own path");
            let mut dir = exe.parent().expect("the test's directory").to_path_buf();
            if dir.ends_with("deps") || dir.ends_with("examples") {
                dir.pop();
            }
            dir.join("zkgate")
        }
    };
    assert!(
        bin.is_file(),
        "no zkgate binary at {} (build it, or set ZKGATE_BIN)",
        bin.display()
    );
    bin
}

/// The repository root (where README.md and clients/ live).
pub fn repo() -> PathBuf {
    let kit = Path::new(env!("CARGO_MANIFEST_DIR"));
    kit.ancestors()
        .nth(2)
        .expect("crates/testkit sits two levels below the repository root")
        .to_path_buf()
}

/// In CI a missing tool is a failure; on a developer's machine the test says loudly what to
/// install and passes. Returns whether the tool is there.
pub fn require(what: &str, present: bool, install: &str) -> bool {
    if present {
        return true;
    }
    let msg = format!(
        "\n\n*** {what} is not installed: SKIPPING this test. {install} \
         (scripts/test.sh installs everything the tests need) ***\n"
    );
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!("{msg}(CI is set, so a missing tool fails the run)");
    }
    // Straight to stderr, past the test harness's output capture, so it shows in a passing run.
    let _ = writeln!(std::io::stderr(), "{msg}");
    false
}

pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

/// Text a child process writes, collected by a thread so the pipe never fills up.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<String>>);

impl Captured {
    pub fn spawn_reader(stream: impl Read + Send + 'static) -> Self {
        let c = Captured::default();
        let sink = c.0.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stream);
            let mut line = String::new();
            while matches!(r.read_line(&mut line), Ok(n) if n > 0) {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        c
    }

    pub fn text(&self) -> String {
        self.0.lock().unwrap().clone()
    }

    /// Waits until `pred` holds for the text so far; panics with `what` and the text if not.
    pub fn wait_for(&self, what: &str, within: Duration, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + within;
        loop {
            let t = self.text();
            if pred(&t) {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {within:?} waiting for {what}; output so far:\n{t}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Sends `signal` (e.g. "INT") to `pid` ([`zkgate_localzk::send_signal`]).
pub fn signal(pid: u32, signal: &str) {
    if let Err(e) = zkgate_localzk::send_signal(pid, signal) {
        panic!("{e}");
    }
}

/// Whether `pid` is a live (not zombie) process ([`zkgate_localzk::pid_alive`]).
pub fn alive(pid: u32) -> bool {
    zkgate_localzk::pid_alive(pid)
}

/// Waits up to `within` for `child` to exit.
pub fn wait_exit(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running `zkgate dev`.
pub struct DevGateway {
    pub child: Child,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub zk: String,
    pub zk_pid: u32,
    pub stdout: Captured,
    pub stderr: Captured,
}

impl DevGateway {
    /// Whether `zkgate dev` can run here (Java and ZooKeeper installed).
    pub fn available() -> bool {
        require(
            "ZooKeeper (and Java)",
            crate::localzk::LocalZk::is_installed(),
            "Install it with `apt-get install -y zookeeper`.",
        )
    }

    /// Starts `zkgate dev --listen 127.0.0.1:0 --http 127.0.0.1:0 EXTRA…` and waits for its
    /// `ready` line.
    pub fn start(extra: &[&str]) -> DevGateway {
        let mut child = Command::new(zkgate_bin())
            .args(["dev", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .args(extra)
            .current_dir(repo())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn zkgate dev");
        let stderr = Captured::spawn_reader(child.stderr.take().unwrap());
        let stdout = Captured::spawn_reader(child.stdout.take().unwrap());
        let (tx, rx) = mpsc::channel();
        {
            let stdout = stdout.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(90);
                while Instant::now() < deadline {
                    if stdout.text().lines().any(|l| l.starts_with("ready")) {
                        let _ = tx.send(());
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
        }
        let mut gw = DevGateway {
            child,
            grpc: "0.0.0.0:0".parse().unwrap(),
            http: "0.0.0.0:0".parse().unwrap(),
            zk: String::new(),
            zk_pid: 0,
            stdout,
            stderr,
        };
        if rx.recv_timeout(Duration::from_secs(90)).is_err() {
            let status = gw.child.try_wait();
            panic!(
                "zkgate dev did not print `ready` (status {status:?})\n--- stdout ---\n{}\n--- stderr ---\n{}",
                gw.stdout.text(),
                gw.stderr.text()
            );
        }
        for line in gw.stdout.text().lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["gRPC", addr, ..] => gw.grpc = addr.parse().expect("gRPC address"),
                ["HTTP", addr, ..] => gw.http = addr.parse().expect("HTTP address"),
                ["ZooKeeper", zk, "pid", pid, ..] => {
                    gw.zk = (*zk).to_owned();
                    gw.zk_pid = pid.parse().expect("ZooKeeper pid");
                }
                _ => {}
            }
        }
        assert!(
            gw.grpc.port() != 0 && gw.http.port() != 0 && gw.zk_pid != 0,
            "could not read the addresses from:\n{}",
            gw.stdout.text()
        );
        gw
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Ctrl-C: SIGINT, then waits for the process to exit.
    pub fn interrupt(&mut self, within: Duration) -> ExitStatus {
        signal(self.pid(), "INT");
        wait_exit(&mut self.child, within).unwrap_or_else(|| {
            panic!(
                "zkgate dev still running {within:?} after SIGINT\n--- stderr ---\n{}",
                self.stderr.text()
            )
        })
    }
}

impl Drop for DevGateway {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // A stopped gateway (a test froze it) must be continued to die cleanly.
            let _ = zkgate_localzk::send_signal(self.pid(), "CONT");
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether `path` exists relative to the repository root.
/// Checks the output of a client's own test suite (pytest, `node --test`, `go test`, JUnit),
/// run since `started`: prints its stdout and how long it took, and panics with both streams
/// and `context` (a gateway's log) if it failed. Returns the stdout, for counting its tests.
pub fn suite_passed(
    what: &str,
    out: &std::process::Output,
    started: Instant,
    context: &str,
) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}");
    println!("{what} took {:?}", started.elapsed());
    assert!(
        out.status.success(),
        "{what} failed ({})\n{stdout}\n--- stderr ---\n{}\n--- gateway ---\n{context}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
    );
    stdout
}

pub fn repo_file(path: &str) -> PathBuf {
    let p = repo().join(path);
    assert!(Path::new(&p).exists(), "{} is missing", p.display());
    p
}

/// The fleet the Python and Node suites run against: `zkgate dev` (ZooKeeper and gateway 1, with
/// session timeout `t`), a second plaintext gateway on the same ZooKeeper and root (one fleet
/// test drains it), and a third with mutual TLS (certificates from [`crate::pki`] in `pki`).
pub struct ClientFleet {
    pub dev: DevGateway,
    pub g2: crate::procgw::GatewayProc,
    pub g3: crate::procgw::GatewayProc,
    pub pki: tempfile::TempDir,
    _runtimes: (tokio::runtime::Runtime, tokio::runtime::Runtime),
}

impl ClientFleet {
    pub fn start(bin: &str, t: Duration) -> Self {
        use crate::procgw::{GatewayProc, GatewaySpec};
        let secs = format!("{}s", t.as_secs());
        let dev = DevGateway::start(&["--session-timeout", &secs]);
        let spec = GatewaySpec::binary(bin, &dev.zk, "/zkgate", t);
        let (rt2, g2) = GatewayProc::spawn_sync("g2", spec);
        let pki = tempfile::tempdir().expect("temp dir");
        crate::pki::make_pki(pki.path());
        let mut spec = GatewaySpec::binary(bin, &dev.zk, "/zkgate", t);
        let file = |f: &str| pki.path().join(f).display().to_string();
        spec.extra = vec![
            "--tls-cert".into(),
            file("server.pem"),
            "--tls-key".into(),
            file("server.key"),
            "--tls-client-ca".into(),
            file("ca.pem"),
        ];
        let (rt3, g3) = GatewayProc::spawn_sync("g3", spec);
        Self {
            dev,
            g2,
            g3,
            pki,
            _runtimes: (rt2, rt3),
        }
    }

    /// What a client suite reads to find the fleet: `ZKGATE_ADDR`/`ZKGATE_PID` (gateway 1),
    /// `ZKGATE_FLEET` (gateways 1 and 2), `ZKGATE_PID2`, `ZKGATE_TLS_ADDR`, `ZKGATE_TLS_DIR`.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("ZKGATE_ADDR", self.dev.grpc.to_string()),
            ("ZKGATE_PID", self.dev.pid().to_string()),
            (
                "ZKGATE_FLEET",
                format!("http://{},{}", self.dev.grpc, self.g2.url()),
            ),
            ("ZKGATE_PID2", self.g2.pid.to_string()),
            ("ZKGATE_TLS_ADDR", self.g3.addr.to_string()),
            ("ZKGATE_TLS_DIR", self.pki.path().display().to_string()),
        ]
    }
}

/// Runs a client's stub generator (`script`, a path in the repository, e.g.
/// `clients/go/regen.sh`) into a fresh directory, which it returns.
pub fn regenerate(script: &str) -> tempfile::TempDir {
    let fresh = tempfile::tempdir().expect("a temporary directory");
    let status = Command::new("bash")
        .arg(repo_file(script))
        .arg(fresh.path())
        .status()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    assert!(status.success(), "{script} failed");
    fresh
}

/// Checked-in generated stubs equal a fresh regeneration: the same files (those `is_stub`
/// accepts) with the same bytes. `regen` names the script to run when they do not.
pub fn assert_stubs_match(
    generated: &Path,
    checked_in: &Path,
    is_stub: impl Fn(&str) -> bool,
    regen: &str,
) {
    let list = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| is_stub(n))
            .collect();
        names.sort();
        names
    };
    let names = list(generated);
    assert!(!names.is_empty(), "{regen} generated nothing");
    assert_eq!(names, list(checked_in), "stub files differ: run {regen}");
    for name in names {
        let a = std::fs::read_to_string(generated.join(&name)).unwrap();
        let b = std::fs::read_to_string(checked_in.join(&name)).unwrap();
        assert!(
            a == b,
            "{} is stale: run {regen}",
            checked_in.join(&name).display()
        );
    }
}
