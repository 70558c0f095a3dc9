//! The Node.js client (`clients/node`): its `node:test` suite against a real `zkgate dev` plus a
//! second gateway on the same ZooKeeper (ordering, failover, in-stream resign, proclaim, Leader
//! and Observe, the watchdog on a frozen gateway, the fleet rules — a dead endpoint skipped,
//! paging, auto-requeue across a drained gateway), its hermetic tests against a scripted
//! in-process gateway, and the package's own checks (shipped protos equal proto/, `tsc --noEmit`
//! over index.d.ts).

use zkgate_testkit::dev_process;

const BIN: &str = env!("CARGO_BIN_EXE_zkgate");

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dev_process::*;

/// `node` and `npm` on PATH, and the client's pinned packages installed (`npm ci`).
fn node_deps() -> bool {
    let install = "Install Node.js and npm (`apt-get install -y nodejs npm`), then \
                   `npm ci` in clients/node.";
    require("node and npm", on_path("node") && on_path("npm"), install)
        && require(
            "clients/node/node_modules (@grpc/grpc-js, @grpc/proto-loader, typescript)",
            ["@grpc/grpc-js", "@grpc/proto-loader", "typescript"]
                .iter()
                .all(|p| {
                    repo()
                        .join("clients/node/node_modules")
                        .join(p)
                        .join("package.json")
                        .is_file()
                }),
            "Run `npm ci` in clients/node.",
        )
}

/// The number after `# NAME ` in node's TAP summary (`# pass 12`).
fn tap_count(tap: &str, name: &str) -> Option<u64> {
    let prefix = format!("# {name} ");
    tap.lines()
        .rev()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

#[test]
fn node_helpers_elect_lock_fail_over_and_watch_silence() {
    if !node_deps() || !DevGateway::available() {
        return;
    }
    let dir = repo_file("clients/node");
    let mut files: Vec<String> = std::fs::read_dir(dir.join("test"))
        .expect("clients/node/test")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".test.js"))
        .map(|n| format!("test/{n}"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no clients/node/test/*.test.js");

    // A short session timeout keeps the frozen-gateway test short: silence_limit = 1.05 s.
    let fleet = ClientFleet::start(BIN, Duration::from_secs(3));
    let gw = &fleet.dev;
    let started = Instant::now();
    let out = Command::new("node")
        // One file at a time: the election and lock files each freeze the shared gateway.
        .args(["--test", "--test-concurrency=1", "--test-reporter=tap"])
        .args(&files)
        .current_dir(&dir)
        .envs(fleet.env())
        .env_remove("NODE_OPTIONS")
        .stdin(Stdio::null())
        .output()
        .expect("run node --test");
    let stdout = suite_passed("node --test", &out, started, &gw.stderr.text());
    let count = |name| {
        tap_count(&stdout, name).unwrap_or_else(|| panic!("no `# {name}` line in:\n{stdout}"))
    };
    assert!(count("pass") > 0, "no Node test ran: {stdout}");
    assert_eq!(count("fail"), 0, "{stdout}");
    for name in ["skipped", "todo", "cancelled"] {
        assert_eq!(
            count(name),
            0,
            "every Node test must run here ({name}): {stdout}"
        );
    }
}
