//! Integration tests for `zkgate_testkit::localzk` (and the `zkgate_localzk::ServerSet` under it): real ZooKeeper JVMs are started,
//! stopped, killed, paused and resumed, and must never outlive their owner.
//!
//! Every test skips (with a hint) when Java or ZooKeeper is not installed.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zkgate_testkit::localzk::{LocalZk, LocalZkOptions};

fn installed() -> bool {
    let ok = LocalZk::is_installed();
    if !ok {
        eprintln!(
            "skipping: ZooKeeper is not installed ({})",
            LocalZk::install_hint()
        );
    }
    ok
}

/// Sends a four-letter word over a raw socket, independently of the module's
/// own helper.
async fn ask(addr: SocketAddr, cmd: &str) -> std::io::Result<String> {
    tokio::time::timeout(Duration::from_secs(2), async {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(cmd.as_bytes()).await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok(out)
    })
    .await
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer"))?
}

/// The process state letter from /proc (`R`, `S`, `T`, `Z`, ...), or `None`
/// if the pid does not exist.
fn proc_state(pid: u32) -> Option<char> {
    zkgate_localzk::process::process_state(pid)
}

/// Gone or a zombie (a zombie holds no ports or memory).
fn pid_gone(pid: u32) -> bool {
    matches!(proc_state(pid), None | Some('Z' | 'X'))
}

/// Polls `pid_gone` for up to `limit`.
fn wait_gone(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if pid_gone(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    pid_gone(pid)
}

async fn start_standalone() -> LocalZk {
    match LocalZk::start_standalone(LocalZkOptions::default()).await {
        Ok(zk) => zk,
        Err(e) => panic!("starting a standalone ZooKeeper failed: {e}"),
    }
}

#[tokio::test]
async fn standalone_answers_ruok() {
    if !installed() {
        return;
    }
    let zk = start_standalone().await;
    assert_eq!(zk.len(), 1);
    let addr = zk.server_address(0);
    assert!(addr.ip().is_loopback());
    assert_eq!(zk.connect_string(), addr.to_string());
    assert_eq!(ask(addr, "ruok").await.unwrap(), "imok");
    assert_eq!(zk.mode(0).await.as_deref(), Some("standalone"));
    assert_eq!(zk.leader_index().await, None);

    let pid = zk.pid(0).expect("running");
    assert!(!pid_gone(pid));
    zk.shutdown().await;
    assert!(pid_gone(pid), "java pid {pid} survived shutdown");
}

#[tokio::test]
async fn standalone_stop_and_start_on_the_same_port() {
    if !installed() {
        return;
    }
    let mut zk = start_standalone().await;
    let addr = zk.server_address(0);
    let old_pid = zk.pid(0).unwrap();

    zk.stop(0).await.unwrap();
    assert_eq!(zk.pid(0), None);
    assert!(pid_gone(old_pid), "java pid {old_pid} survived stop");
    assert!(
        ask(addr, "ruok").await.is_err(),
        "stopped server still answers"
    );
    zk.stop(0).await.expect("stopping twice is fine");

    zk.start(0)
        .await
        .unwrap_or_else(|e| panic!("restart failed: {e}"));
    assert_eq!(zk.server_address(0), addr);
    assert_ne!(zk.pid(0), Some(old_pid));
    assert_eq!(ask(addr, "ruok").await.unwrap(), "imok");
    assert!(matches!(
        zk.start(0).await,
        Err(zkgate_testkit::localzk::LocalZkError::AlreadyRunning { server: 0 })
    ));

    // kill (SIGKILL) and start again, too.
    zk.kill(0).await.unwrap();
    assert!(ask(addr, "ruok").await.is_err());
    zk.start(0).await.unwrap();
    assert_eq!(ask(addr, "ruok").await.unwrap(), "imok");
}

#[tokio::test]
async fn pause_and_resume() {
    if !installed() {
        return;
    }
    let mut zk = start_standalone().await;
    let addr = zk.server_address(0);
    let pid = zk.pid(0).unwrap();

    zk.pause(0).await.unwrap();
    assert_eq!(proc_state(pid), Some('T'), "the JVM itself must be stopped");
    assert!(ask(addr, "ruok").await.is_err(), "paused server answered");
    assert_eq!(zk.mode(0).await, None);

    zk.resume(0).await.unwrap();
    assert_ne!(proc_state(pid), Some('T'));
    assert_eq!(ask(addr, "ruok").await.unwrap(), "imok");

    // A paused server can still be stopped gracefully.
    zk.pause(0).await.unwrap();
    let started = Instant::now();
    zk.stop(0).await.unwrap();
    assert!(pid_gone(pid));
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "stop needed SIGKILL"
    );
    assert!(zk.pause(0).await.is_err(), "pausing a stopped server");
}

#[tokio::test]
async fn dropping_kills_every_java_process() {
    if !installed() {
        return;
    }
    let zk = start_standalone().await;
    let pid = zk.pid(0).unwrap();
    let dir = zk.base_dir().to_path_buf();
    assert!(dir.exists());
    drop(zk);
    assert!(pid_gone(pid), "java pid {pid} survived drop");
    assert!(!dir.exists(), "temporary directory {} kept", dir.display());
}

#[tokio::test]
async fn ensemble_elects_a_new_leader_after_the_leader_dies() {
    if !installed() {
        return;
    }
    let mut zk = match LocalZk::start_ensemble(3, LocalZkOptions::default()).await {
        Ok(zk) => zk,
        Err(e) => panic!("starting an ensemble failed: {e}"),
    };
    assert_eq!(zk.len(), 3);
    assert_eq!(zk.connect_string().split(',').count(), 3);
    for i in 0..3 {
        assert_eq!(ask(zk.server_address(i), "ruok").await.unwrap(), "imok");
    }
    let leader = zk.leader_index().await.expect("a leader after start");
    let followers = (0..3).filter(|&i| i != leader);
    for i in followers {
        assert_eq!(zk.mode(i).await.as_deref(), Some("follower"));
    }

    let old_pid = zk.pid(leader).unwrap();
    zk.kill(leader).await.unwrap();
    assert!(pid_gone(old_pid));
    assert_eq!(zk.mode(leader).await, None);

    let deadline = Instant::now() + Duration::from_secs(20);
    let new_leader = loop {
        if let Some(l) = zk.leader_index().await {
            break l;
        }
        assert!(Instant::now() < deadline, "no new leader within 20 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_ne!(new_leader, leader);

    zk.start(leader)
        .await
        .unwrap_or_else(|e| panic!("restarting the old leader failed: {e}"));
    assert_eq!(zk.mode(leader).await.as_deref(), Some("follower"));
    assert_eq!(zk.leader_index().await, Some(new_leader));

    let pids: Vec<u32> = (0..3).map(|i| zk.pid(i).unwrap()).collect();
    zk.shutdown().await;
    for pid in pids {
        assert!(pid_gone(pid), "java pid {pid} survived shutdown");
    }
}

/// A client of server `addr` alone (it never fails over to another one).
async fn client_of(addr: SocketAddr) -> zookeeper_client::Client {
    tokio::time::timeout(
        Duration::from_secs(10),
        zookeeper_client::Client::connect(&addr.to_string()),
    )
    .await
    .unwrap_or_else(|_| panic!("connecting to {addr} timed out"))
    .unwrap_or_else(|e| panic!("connecting to {addr}: {e}"))
}

/// The children of `/q` that `client`'s server lists, sorted.
async fn children(client: &zookeeper_client::Client) -> Vec<String> {
    let mut names = client.list_children("/q").await.expect("listing /q");
    names.sort();
    names
}

/// Polls until `client`'s server lists exactly `want` under `/q`.
async fn wait_children(client: &zookeeper_client::Client, what: &str, want: &[&str]) {
    zkgate_testkit::wait_until(what, Duration::from_secs(20), || async {
        children(client).await == want
    })
    .await;
}

/// A follower diverged by `LocalZk::diverge` serves its own edits (a ghost ephemeral, a missing
/// committed znode) while following the leader for everything else, writes that check a
/// ghost fail at the leader, and `LocalZk::wipe` heals it.
#[tokio::test]
async fn diverged_follower_keeps_its_edits_until_wiped() {
    use zkgate_testkit::localzk::{Divergence, LocalZkError};
    use zookeeper_client::{Acls, CreateMode, Error};

    if !installed() {
        return;
    }
    let started = Instant::now();
    let mut zk = LocalZk::start_ensemble(3, LocalZkOptions::default())
        .await
        .unwrap_or_else(|e| panic!("starting an ensemble failed: {e}"));
    let leader = zk.leader_index().await.expect("a leader after start");
    let (f, o) = ((leader + 1) % 3, (leader + 2) % 3);
    assert_eq!(zk.mode(f).await.as_deref(), Some("follower"));

    let quorum = client_of(zk.server_address(o)).await;
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    quorum.create("/q", b"", &persistent).await.unwrap();
    for child in ["a", "b"] {
        quorum
            .create(&format!("/q/{child}"), b"", &persistent)
            .await
            .unwrap();
    }
    quorum.create("/q/e", b"", &ephemeral).await.unwrap();
    {
        let follower = client_of(zk.server_address(f)).await;
        wait_children(&follower, "f to have /q's children", &["a", "b", "e"]).await;
    }

    let ghost_owner: i64 = 0x0bad_c0de_0000_0001;
    let edits = Divergence {
        delete: vec!["/q/a".to_owned()],
        ghosts: vec![("/q/ghost".to_owned(), ghost_owner)],
    };
    assert!(matches!(
        zk.diverge(f, &edits).await,
        Err(LocalZkError::AlreadyRunning { .. })
    ));
    zk.kill(f).await.unwrap();
    // An impossible edit fails with the tool's word for it and changes nothing (the deletion
    // of /q/a below would fail otherwise).
    let impossible = Divergence {
        delete: vec!["/q/a".to_owned(), "/q/nope".to_owned()],
        ghosts: Vec::new(),
    };
    match zk.diverge(f, &impossible).await {
        Err(LocalZkError::Tool { output, .. }) => {
            assert!(output.contains("/q/nope: no such znode"), "{output}")
        }
        other => panic!("deleting a missing znode: {other:?}"),
    }
    zk.diverge(f, &edits)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Committed while f is down: the leader's DIFF brings it.
    quorum.create("/q/c", b"", &persistent).await.unwrap();
    zk.start(f).await.unwrap_or_else(|e| panic!("{e}"));

    let follower = client_of(zk.server_address(f)).await;
    wait_children(&follower, "f to serve its edits", &["b", "c", "e", "ghost"]).await;
    let stat = follower
        .check_stat("/q/ghost")
        .await
        .unwrap()
        .expect("the ghost on f");
    assert_eq!(stat.ephemeral_owner, ghost_owner);
    assert_eq!(children(&quorum).await, ["a", "b", "c", "e"]);
    // f still follows the leader: a new write shows up there, the edits stay.
    quorum.create("/q/d", b"", &persistent).await.unwrap();
    wait_children(
        &follower,
        "f to follow new writes",
        &["b", "c", "d", "e", "ghost"],
    )
    .await;
    // The leader has no ghost: a write that checks it fails.
    let mut multi = follower.new_multi_writer();
    multi.add_check_version("/q/ghost", -1).unwrap();
    let err = multi
        .commit()
        .await
        .expect_err("checking the ghost at the leader");
    assert_eq!(Error::from(err), Error::NoNode);
    drop(follower);

    zk.kill(f).await.unwrap();
    zk.wipe(f).await.unwrap();
    zk.start(f).await.unwrap_or_else(|e| panic!("{e}"));
    let healed = client_of(zk.server_address(f)).await;
    wait_children(&healed, "f to be healed", &["a", "b", "c", "d", "e"]).await;
    assert_eq!(children(&quorum).await, children(&healed).await);
    eprintln!("diverge, follow, heal: {:?}", started.elapsed());
    zk.shutdown().await;
}

const HELPER_ENV: &str = "ZKGATE_LOCALZK_DIE_HELPER";

/// Not a test on its own: run by `zookeeper_dies_with_its_owner` in a child
/// process.  Keeps a server in a `static` (never dropped), prints the JVM pid
/// and waits to be SIGKILLed.
#[test]
fn helper_holds_server_in_static() {
    if std::env::var_os(HELPER_ENV).is_none() {
        return;
    }
    static SHARED: OnceLock<LocalZk> = OnceLock::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let zk = rt.block_on(LocalZk::start_standalone(LocalZkOptions::default()));
    let zk = SHARED.get_or_init(|| zk.expect("helper start"));
    println!("BASE_DIR={}", zk.base_dir().display());
    println!("JAVA_PID={}", zk.pid(0).unwrap());
    std::thread::sleep(Duration::from_secs(60));
    std::process::exit(1);
}

#[test]
fn zookeeper_dies_with_its_owner() {
    if !installed() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "helper_holds_server_in_static",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    // libtest may print "test NAME ... " on the same line first.
    let value = |line: &str, key: &str| Some(line.split_once(key)?.1.trim().to_owned());
    let mut base_dir = None;
    let mut pid = None;
    for line in stdout.lines().map_while(Result::ok) {
        if let Some(dir) = value(&line, "BASE_DIR=") {
            base_dir = Some(std::path::PathBuf::from(dir));
        }
        if let Some(p) = value(&line, "JAVA_PID=") {
            pid = Some(p.parse::<u32>().unwrap());
            break;
        }
    }
    let (Some(pid), Some(base_dir)) = (pid, base_dir) else {
        let _ = child.kill();
        panic!("the helper did not report a JVM pid");
    };
    assert!(!pid_gone(pid));

    child.kill().unwrap(); // SIGKILL: no destructor, no atexit, nothing.
    child.wait().unwrap();
    assert!(
        wait_gone(pid, Duration::from_secs(10)),
        "java pid {pid} outlived the process that started it"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while base_dir.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !base_dir.exists(),
        "temporary directory {} outlived its owner",
        base_dir.display()
    );
}
