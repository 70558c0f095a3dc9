//! The Java client (`clients/java`): built with `clients/java/build.sh` against Debian's jars,
//! its JUnit 5 suite run with Debian's console launcher against a fleet of three gateways on
//! one ZooKeeper plus a TLS one (elections, locks, Observe, the watchdog on a frozen gateway,
//! failover from a drained and from a killed gateway, mTLS), the conformance agent's protocol,
//! and its checked-in stubs against a fresh `regen.sh` run.

use zkgate_testkit as support;
use zkgate_testkit::dev_process;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dev_process::{
    alive, on_path, repo, repo_file, require, signal, suite_passed, wait_exit, Captured,
};
use support::procgw::{GatewayProc, GatewaySpec};
use zkgate_testkit::localzk::LocalZkOptions;

const BIN: &str = env!("CARGO_BIN_EXE_zkgate");

/// Debian's JUnit 5 console launcher (package junit5).
const JUNIT: &str = "/usr/share/java/junit-platform-console-standalone.jar";

/// The session timeout of the test fleet: silence_limit is 35 % of it (1.4 s), and a killed
/// gateway's znodes go within it. Not shorter: several JVMs and a debug gateway share a small
/// machine here, and silence_limit must stay well above their scheduling stalls (once, with 3 s,
/// an agent saw a second event other than `released` after SIGTERM; not seen again since).
const SESSION: Duration = Duration::from_secs(4);

const INSTALL: &str = "Install them with `apt-get install -y --no-install-recommends \
     openjdk-17-jdk-headless protobuf-compiler protobuf-compiler-grpc-java-plugin libgrpc-java \
     libprotobuf-java libnetty-java libguava-java libperfmark-java libgoogle-gson-java \
     libgoogle-common-protos-java libgeronimo-annotation-1.3-spec-java junit5` \
     (scripts/lib.sh ensure_java_client).";

/// `javac`, `java` and Debian's jars for gRPC, protobuf and JUnit 5.
fn java_deps() -> bool {
    require(
        "the JDK, openssl and Debian's gRPC/protobuf/JUnit 5 jars",
        on_path("openssl")
            && on_path("javac")
            && on_path("java")
            && Path::new(JUNIT).is_file()
            && Path::new("/usr/share/java/grpc-netty.jar").is_file()
            && Path::new("/usr/share/java/protobuf.jar").is_file(),
        INSTALL,
    )
}

/// Runs `clients/java/build.sh` (a few seconds) and returns the runtime classpath it wrote.
fn build() -> String {
    let started = Instant::now();
    let out = Command::new("bash")
        .arg(repo_file("clients/java/build.sh"))
        .stdin(Stdio::null())
        .output()
        .expect("run clients/java/build.sh");
    assert!(
        out.status.success(),
        "clients/java/build.sh failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("clients/java/build.sh took {:?}", started.elapsed());
    std::fs::read_to_string(repo().join("clients/java/build/classpath"))
        .expect("build/classpath")
        .trim()
        .to_owned()
}

/// The number before `NAME` in the launcher's summary (`[        13 tests successful      ]`).
fn summary_count(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let inner = l.trim().strip_prefix('[')?.strip_suffix(']')?.trim();
        let (n, rest) = inner.split_once(' ')?;
        (rest.trim() == name).then(|| n.parse().ok())?
    })
}

/// A conformance agent (`io.zkgate.examples.Agent`) and its JSON lines.
struct Agent {
    child: Child,
    lines: Captured,
    stderr: Captured,
}

impl Agent {
    fn start(classpath: &str, endpoint: &str, args: &[&str]) -> Agent {
        let mut child = Command::new("java")
            .args(["-cp", classpath, "io.zkgate.examples.Agent"])
            .args(args)
            .env("ZKGATE_ENDPOINT", endpoint)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the Java agent");
        let lines = Captured::spawn_reader(child.stdout.take().unwrap());
        let stderr = Captured::spawn_reader(child.stderr.take().unwrap());
        Agent {
            child,
            lines,
            stderr,
        }
    }

    /// The JSON events so far (every stdout line must be one).
    fn events(&self) -> Vec<serde_json::Value> {
        self.lines
            .text()
            .lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("agent printed a non-JSON line {l:?}: {e}"))
            })
            .collect()
    }

    /// Waits for the `n`th (1-based) event and returns it.
    fn wait_event(&self, n: usize, within: Duration) -> serde_json::Value {
        self.lines
            .wait_for(&format!("agent event {n}"), within, |t| {
                t.lines().count() >= n
            });
        let events = self.events();
        assert!(
            events.len() >= n,
            "agent events: {events:?}\nstderr:\n{}",
            self.stderr.text()
        );
        events[n - 1].clone()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agent's protocol (clients/CONFORMANCE.md) on one gateway: `elected` with a decimal
/// token and the endpoint, SIGTERM → `released` and exit 0, the queued candidate elected next,
/// and with `--once` a frozen gateway → `lost` `silence` and exit 3.
fn agent_protocol(classpath: &str, gw: &mut GatewayProc) {
    let endpoint = gw.url();
    let first = Agent::start(classpath, &endpoint, &["elect", "agents", "--id", "first"]);
    let elected = first.wait_event(1, Duration::from_secs(20));
    assert_eq!(elected["event"], "elected", "{elected}");
    assert_eq!(elected["endpoint"], endpoint.as_str(), "{elected}");
    let token1: u64 = elected["token"]
        .as_str()
        .expect("the token is a decimal string")
        .parse()
        .expect("a u64");
    let holder = Agent::start(classpath, &endpoint, &["lock", "agents-lock", "--once"]);
    assert_eq!(
        holder.wait_event(1, Duration::from_secs(20))["event"],
        "acquired"
    );
    let second = Agent::start(
        classpath,
        &endpoint,
        &["elect", "agents", "--id", "second", "--once"],
    );
    // The second candidate queues behind the first (its JVM needs a moment to join).
    let deadline = Instant::now() + Duration::from_secs(20);
    while !candidates_include(gw, "agents", "second") {
        assert!(Instant::now() < deadline, "the second agent never queued");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut first = first;
    signal(first.child.id(), "TERM");
    let status = wait_exit(&mut first.child, Duration::from_secs(10)).expect("agent exits");
    assert_eq!(status.code(), Some(0), "{}", first.stderr.text());
    let released = first.wait_event(2, Duration::from_secs(1));
    assert_eq!(
        released["event"],
        "released",
        "{:?}\n{}",
        first.events(),
        first.stderr.text()
    );
    let elected2 = second.wait_event(1, Duration::from_secs(10));
    assert_eq!(elected2["event"], "elected", "{elected2}");
    let token2: u64 = elected2["token"].as_str().unwrap().parse().unwrap();
    assert!(token2 > token1, "{token2} after {token1}");

    // Freeze the gateway: both --once agents report silence and exit 3.
    gw.freeze();
    let (mut second, mut holder) = (second, holder);
    for agent in [&mut second, &mut holder] {
        let lost = agent.wait_event(2, Duration::from_secs(10));
        assert_eq!(
            lost,
            serde_json::json!({"event": "lost", "reason": "silence"})
        );
        let status = wait_exit(&mut agent.child, Duration::from_secs(10)).expect("agent exits");
        assert_eq!(status.code(), Some(3), "{}", agent.stderr.text());
    }
    gw.thaw();
}

/// Whether `candidate` is in the queue of `election`, asked with the gateway's own Rust stubs
/// (not through the Java client under test).
fn candidates_include(gw: &GatewayProc, election: &str, candidate: &str) -> bool {
    let url = gw.url();
    let election = election.to_owned();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let Ok(mut c) = zkgate::proto::election_client::ElectionClient::connect(url.clone()).await
        else {
            return false;
        };
        c.candidates(zkgate::proto::CandidatesRequest {
            election,
            ..Default::default()
        })
        .await
        .map(|r| {
            r.into_inner()
                .candidates
                .iter()
                .any(|x| x.candidate == candidate)
        })
        .unwrap_or(false)
    })
}

/// `zkgate serve` with TLS that requires client certificates (procgw's health check speaks
/// plaintext, so this one is started by hand). Killed on drop.
struct TlsGateway {
    child: Child,
    addr: String,
}

impl TlsGateway {
    fn start(zk: &str, root: &str, pki: &Path) -> TlsGateway {
        let log = pki.join("gateway.log");
        let pem = |f: &str| pki.join(f).display().to_string();
        let mut child = Command::new(BIN)
            .args(["serve", "--log-json", "--zk", zk, "--root", root])
            .args(["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .args(["--zk-tick-time", "250ms", "--session-timeout", "4s"])
            .args([
                "--tls-cert",
                &pem("server.pem"),
                "--tls-key",
                &pem("server.key"),
            ])
            .args(["--tls-client-ca", &pem("ca.pem")])
            .env("ZKGATE_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start the TLS gateway");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(addr) = text
                .lines()
                .filter(|l| l.contains("zkgate serving"))
                .find_map(|l| l.split("\"grpc\":\"Some(").nth(1)?.split(')').next())
            {
                return TlsGateway {
                    addr: addr.to_owned(),
                    child,
                };
            }
            let exited = child.try_wait().ok().flatten();
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "the TLS gateway did not start ({exited:?}):\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TlsGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn java_client_elects_locks_fails_over_and_watches_silence() {
    if !java_deps() || !dev_process::DevGateway::available() {
        return;
    }
    let classpath = build();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let zk = support::shared_standalone(LocalZkOptions::default);
    let root = support::named_root("java");
    let spawn = |name: &str| {
        let spec = GatewaySpec::binary(BIN, &zk, &root, SESSION);
        rt.block_on(GatewayProc::spawn(name, spec))
            .unwrap_or_else(|e| panic!("gateway {name}: {e}"))
    };
    let (mut gw1, gw2, gw3) = (spawn("gw1"), spawn("gw2"), spawn("gw3"));
    let pki = tempfile::tempdir().unwrap();
    zkgate_testkit::pki::make_pki(pki.path());
    let tls = TlsGateway::start(&zk, &root, pki.path());

    let started = Instant::now();
    let out = Command::new("java")
        .args(["-jar", JUNIT, "-cp", &classpath])
        .args(["--select-package", "io.zkgate", "--disable-banner"])
        .args(["--details", "tree", "--disable-ansi-colors"])
        .env("ZKGATE_ADDR", gw1.addr.to_string())
        .env("ZKGATE_ADDR2", gw2.addr.to_string())
        .env("ZKGATE_PID2", gw2.pid.to_string())
        .env("ZKGATE_ADDR3", gw3.addr.to_string())
        .env("ZKGATE_PID3", gw3.pid.to_string())
        .env("ZKGATE_TLS_ADDR", &tls.addr)
        .env("ZKGATE_TLS_DIR", pki.path())
        .env_remove("ZKGATE_ENDPOINT")
        .stdin(Stdio::null())
        .output()
        .expect("run the JUnit console launcher");
    let stdout = suite_passed("the JUnit suite", &out, started, &gw1.log_tail(40));
    let count = |name: &str| {
        summary_count(&stdout, name).unwrap_or_else(|| panic!("no `{name}` in:\n{stdout}"))
    };
    assert!(count("tests successful") >= 27, "{stdout}");
    for name in [
        "tests failed",
        "tests skipped",
        "tests aborted",
        "containers failed",
    ] {
        assert_eq!(count(name), 0, "{name}: {stdout}");
    }
    // The suite drained gateway 2 and killed gateway 3.
    assert!(!alive(gw2.pid) && !alive(gw3.pid), "FleetTest did not run");

    let started = Instant::now();
    agent_protocol(&classpath, &mut gw1);
    println!("the agent protocol check took {:?}", started.elapsed());
}

/// Every file under `dir`, relative, sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().filter_map(Result::ok) {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn java_stubs_match_the_protos() {
    if !require(
        "protoc and the gRPC Java plugin",
        on_path("protoc") && on_path("grpc_java_plugin"),
        INSTALL,
    ) {
        return;
    }
    let fresh = dev_process::regenerate("clients/java/regen.sh");
    let checked_in = repo_file("clients/java/src/generated/java");
    let (a, b) = (files_under(fresh.path()), files_under(&checked_in));
    assert!(!a.is_empty());
    assert_eq!(
        a, b,
        "stub files differ: run clients/java/regen.sh (Debian's protoc and grpc_java_plugin)"
    );
    for rel in a {
        let x = std::fs::read(fresh.path().join(&rel)).unwrap();
        let y = std::fs::read(checked_in.join(&rel)).unwrap();
        assert!(
            x == y,
            "clients/java/src/generated/java/{} is stale: run clients/java/regen.sh",
            rel.display()
        );
    }
}
