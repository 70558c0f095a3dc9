//! The Python client (`clients/python`): its pytest suite against a real `zkgate dev` plus a
//! second gateway on the same ZooKeeper (elections and locks: ordering, failover, semaphores,
//! try-lock, ttl keep-alive, the context managers, the watchdog on a frozen gateway, the fleet
//! rules — a dead endpoint skipped, paging, auto-requeue across a drained gateway — and the
//! asyncio API), its checked-in stubs against a fresh `regen.sh` run, and `pip install` of the
//! package.

use zkgate_testkit::dev_process;

const BIN: &str = env!("CARGO_BIN_EXE_zkgate");

use std::process::{Command, Stdio};
use std::time::Duration;

use dev_process::*;

/// Whether `python3` can import every module in `modules`.
fn python_has(modules: &[&str]) -> bool {
    let script = modules
        .iter()
        .map(|m| format!("import {m}"))
        .collect::<Vec<_>>()
        .join("; ");
    Command::new("python3")
        .args(["-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn python_deps(modules: &[&str]) -> bool {
    require(
        &format!("python3 with {}", modules.join(", ")),
        python_has(modules),
        "Install them with `pip install -r clients/python/requirements-dev.txt`.",
    )
}

#[test]
fn python_helpers_elect_lock_fail_over_and_watch_silence() {
    if !python_deps(&["grpc", "google.protobuf", "pytest"]) || !DevGateway::available() {
        return;
    }
    // A short session timeout keeps the frozen-gateway test short: silence_limit = 1.05 s.
    let fleet = ClientFleet::start(BIN, Duration::from_secs(3));
    let gw = &fleet.dev;
    let started = std::time::Instant::now();
    let out = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(repo_file("clients/python"))
        .envs(fleet.env())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run pytest");
    let stdout = suite_passed("pytest", &out, started, &gw.stderr.text());
    assert!(
        !stdout.contains("skipped"),
        "every Python test must run here: {stdout}"
    );
}

#[test]
fn python_stubs_match_the_protos() {
    if !python_deps(&["grpc_tools"]) {
        return;
    }
    let fresh = regenerate("clients/python/regen.sh");
    let generated = fresh.path().join("zkgate/v1");
    let checked_in = repo_file("clients/python/zkgate/v1");
    assert_stubs_match(
        &generated,
        &checked_in,
        |n| n.contains("_pb2"),
        "clients/python/regen.sh (with grpcio-tools from clients/python/requirements-dev.txt)",
    );
}

#[test]
fn python_package_installs_with_pip() {
    if !python_deps(&["grpc", "google.protobuf", "pip"]) {
        return;
    }
    // From a copy (setuptools builds in the source tree), into a scratch target, without
    // dependencies (requirements.txt pins them) and without the network: the build backend
    // (setuptools, which Debian's python3-pip brings) must already be there.
    let scratch = tempfile::tempdir().unwrap();
    let src = scratch.path().join("src");
    let target = scratch.path().join("target");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(repo_file("clients/python"))
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    assert!(copied, "copying clients/python failed");
    let out = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
        ])
        .arg("--target")
        .arg(&target)
        .arg(&src)
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .env("PIP_BREAK_SYSTEM_PACKAGES", "1")
        .env("PIP_ROOT_USER_ACTION", "ignore")
        .output()
        .expect("run pip");
    assert!(
        out.status.success(),
        "pip install clients/python failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let check = Command::new("python3")
        .args([
            "-c",
            "import zkgate, zkgate.aio, zkgate.v1.election_pb2; print(zkgate.__file__)",
        ])
        .current_dir(&target)
        .env("PYTHONPATH", &target)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run python3");
    let printed = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success() && printed.starts_with(&target.display().to_string()),
        "the installed package does not import from the install target: {printed}{}",
        String::from_utf8_lossy(&check.stderr)
    );
}
