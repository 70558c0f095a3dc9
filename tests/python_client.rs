//! The Python client (`clients/python`): its pytest suite against a real `zkgate dev`
//! (elections and locks: ordering, failover, semaphores, try-lock, ttl keep-alive, the context
//! managers, the watchdog on a frozen gateway), and its
//! checked-in stubs against a fresh `regen.sh` run.

use zkgate_testkit::dev_process;

use std::path::Path;
use std::process::{Command, Stdio};

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
    let gw = DevGateway::start(&["--session-timeout", "3s"]);
    let out = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(repo_file("clients/python"))
        .env("ZKGATE_ADDR", gw.grpc.to_string())
        .env("ZKGATE_PID", gw.pid().to_string())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run pytest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "pytest failed\n{stdout}\n{}\n--- zkgate dev stderr ---\n{}",
        String::from_utf8_lossy(&out.stderr),
        gw.stderr.text()
    );
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
    let fresh = tempfile::tempdir().unwrap();
    let status = Command::new("bash")
        .arg(repo_file("clients/python/regen.sh"))
        .arg(fresh.path())
        .status()
        .expect("run regen.sh");
    assert!(status.success(), "regen.sh failed");
    let generated = fresh.path().join("zkgate/v1");
    let checked_in = repo_file("clients/python/zkgate/v1");
    let list = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("_pb2"))
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        list(&generated),
        list(&checked_in),
        "stub files differ: run clients/python/regen.sh"
    );
    for name in list(&generated) {
        let a = std::fs::read_to_string(generated.join(&name)).unwrap();
        let b = std::fs::read_to_string(checked_in.join(&name)).unwrap();
        assert!(
            a == b,
            "clients/python/zkgate/v1/{name} is stale: run clients/python/regen.sh \
             (with grpcio-tools from clients/python/requirements-dev.txt)"
        );
    }
}
