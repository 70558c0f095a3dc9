//! The Go client (`clients/go`): its `go test` suite against three real gateways on one
//! ZooKeeper — `zkgate dev` plus two `zkgate serve` on its ZooKeeper — (elections: order,
//! failover when the leader's stream ends, observe; locks: mutex, semaphore, try-lock, ttl
//! keep-alive, read-write; failover from a drained and from a killed gateway to the main one;
//! `suspended` when ZooKeeper freezes; the watchdog on a frozen gateway; TLS and mTLS against a fourth
//! gateway the Go test starts with certificates it makes), the conformance agent and the
//! example building (`go vet`, `gofmt`), and its checked-in stubs against a fresh `regen.sh`
//! run.
//!
//! Go builds offline against Debian's Go packages (clients/go/go.sh; scripts/lib.sh
//! `ensure_go` installs them).

use zkgate_testkit as support;
use zkgate_testkit::dev_process;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use dev_process::{on_path, repo_file, require, suite_passed, DevGateway};

const BIN: &str = env!("CARGO_BIN_EXE_zkgate");
use support::procgw::{GatewayProc, GatewaySpec};

/// The gateways' session timeout: short, so that the killed gateway's session expires soon
/// (its leader's successor waits for that) and silence_limit (35%) is 1.05 s.
const T: Duration = Duration::from_secs(3);

const DEBIAN_GO: &str = "/usr/share/gocode/src";

/// Go, and the Debian packages clients/go builds against offline.
fn go_tools() -> bool {
    require(
        "Go with Debian's gRPC and protobuf Go packages",
        on_path("go")
            && Path::new(DEBIAN_GO)
                .join("google.golang.org/grpc/go.mod")
                .is_file()
            && Path::new(DEBIAN_GO)
                .join("google.golang.org/protobuf/go.mod")
                .is_file(),
        "Install them with `apt-get install -y golang-go golang-google-grpc-dev \
         golang-google-protobuf-dev golang-github-golang-protobuf-1-5-dev`.",
    )
}

fn run(what: &str, cmd: &mut Command) -> Output {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({})\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn go_helpers_elect_lock_fail_over_and_watch_silence() {
    if !go_tools() || !DevGateway::available() {
        return;
    }
    let dir = repo_file("clients/go");
    // Compile first, before any gateway runs: the agent, the example (vet) and the test binary.
    let built = Instant::now();
    run(
        "clients/go/build.sh",
        Command::new("bash").arg(dir.join("build.sh")),
    );
    let test_bin = dir.join("bin/zkgate.test");
    run(
        "go test -c",
        Command::new("bash")
            .arg(dir.join("go.sh"))
            .args(["test", "-c", "-o"])
            .arg(&test_bin)
            .arg("."),
    );
    println!("built in {:?}", built.elapsed());
    let unformatted = run(
        "gofmt -l",
        Command::new("gofmt").arg("-l").arg(".").current_dir(&dir),
    );
    assert!(
        unformatted.stdout.is_empty(),
        "run gofmt -w on: {}",
        String::from_utf8_lossy(&unformatted.stdout)
    );

    // The main gateway is `zkgate dev`: it prints its ZooKeeper's pid, which the Go test
    // freezes to make the gateway send `suspended`. The other gateways share that ZooKeeper.
    let dev = tokio::task::spawn_blocking(|| DevGateway::start(&["--session-timeout", "3s"]))
        .await
        .unwrap();
    let zk = dev.zk.clone();
    let root = "/zkgate".to_owned(); // zkgate dev's
    let spawn = |name: &'static str| {
        let spec = GatewaySpec::binary(BIN, &zk, &root, T);
        async move {
            GatewayProc::spawn(name, spec)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        }
    };
    let (drain, kill) = tokio::join!(spawn("drain"), spawn("kill"));

    let started = Instant::now();
    let (zk, root) = (zk.clone(), root.clone());
    let out = tokio::task::spawn_blocking({
        let (main, zk_pid, drain, kill) = (
            (dev.grpc, dev.pid()),
            dev.zk_pid,
            (drain.addr, drain.pid),
            (kill.addr, kill.pid),
        );
        move || {
            Command::new(&test_bin)
                .args(["-test.v", "-test.count=1", "-test.timeout=120s"])
                .current_dir(&dir)
                .env("ZKGATE_ADDR", main.0.to_string())
                .env("ZKGATE_PID", main.1.to_string())
                .env("ZKGATE_ZK_PID", zk_pid.to_string())
                .env("ZKGATE_DRAIN_ADDR", drain.0.to_string())
                .env("ZKGATE_DRAIN_PID", drain.1.to_string())
                .env("ZKGATE_KILL_ADDR", kill.0.to_string())
                .env("ZKGATE_KILL_PID", kill.1.to_string())
                .env("ZKGATE_SESSION_TIMEOUT_MS", T.as_millis().to_string())
                // For the TLS test, which starts its own gateway with its own certificates.
                .env("ZKGATE_BIN", BIN)
                .env("ZKGATE_ZK", zk)
                .env("ZKGATE_ROOT", root)
                .env_remove("ZKGATE_ENDPOINT")
                .stdin(Stdio::null())
                .output()
                .expect("run the Go tests")
        }
    })
    .await
    .unwrap();
    let stdout = suite_passed("go test", &out, started, &dev.stderr.text());
    assert!(stdout.contains("--- PASS"), "no Go test ran: {stdout}");
    assert!(
        !stdout.contains("--- SKIP"),
        "every Go test must run here: {stdout}"
    );
    drop((dev, drain, kill));
}

#[test]
fn go_stubs_match_the_protos() {
    let tools = ["protoc", "protoc-gen-go", "protoc-gen-go-grpc"];
    if !require(
        "protoc with the Go plugins",
        tools.iter().all(|t| on_path(t)),
        "Install them with `apt-get install -y protobuf-compiler protoc-gen-go protoc-gen-go-grpc`.",
    ) {
        return;
    }
    let fresh = dev_process::regenerate("clients/go/regen.sh");
    let generated = fresh.path().join("zkgatev1");
    let checked_in = repo_file("clients/go/zkgatev1");
    dev_process::assert_stubs_match(
        &generated,
        &checked_in,
        |n| n.ends_with(".pb.go"),
        "clients/go/regen.sh (with Debian's protobuf-compiler, protoc-gen-go and protoc-gen-go-grpc)",
    );
}
