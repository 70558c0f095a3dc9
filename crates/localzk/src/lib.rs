//! Real, local Apache ZooKeeper servers run as child processes.
//!
//! `zkgate dev` and the integration tests need an actual ZooKeeper (a mock
//! would not reproduce session expiry, ephemeral-node cleanup or leader
//! fail-over), but nobody should have to run one by hand.  [`ServerSet`] starts
//! servers on free loopback ports, in a scratch directory, and stops them;
//! [`LocalZk`] is the one standalone server of `zkgate dev`.  Ensembles and
//! fault injection (pause, resume, restart, the leader's index, peer links
//! through link cutters) are test tools and live in the test kit
//! (`crates/testkit`), built on [`ServerSet`]; only [`ServerSet::diverge`] and
//! [`ServerSet::wipe`], which rewrite a stopped server's files with the install's own Java
//! and ZooKeeper classes, are here.
//!
//! # Nothing is ever left running
//!
//! Tests keep a shared server in a `static` (whose `Drop` never runs), and a
//! test process may panic, be killed by a timeout or by Ctrl-C.  A stray JVM
//! would hold ports and memory and confuse the next run, so every ZooKeeper
//! JVM is tied to the lifetime of *our process*, independent of `Drop` and of
//! which thread started it:
//!
//! * Each JVM is started through a tiny `sh` wrapper whose stdin is a pipe that
//!   only our process holds open (Rust opens it close-on-exec, so no other child
//!   inherits it).  A watcher inside the wrapper blocks reading that pipe; when
//!   our process exits for *any* reason the kernel closes the pipe, the read
//!   returns, and the watcher `kill -9`s the JVM (and removes the temporary
//!   directory, if [`LocalZk`] created one).
//! * The wrapper prints the JVM's pid as its first line, so that stop, kill,
//!   pause and resume signal the JVM itself rather than the shell.
//! * The wrapper runs in its own process group, so a terminal Ctrl-C reaches only
//!   our process (which then shuts ZooKeeper down, or dies and thereby closes
//!   the pipe) and cannot kill the wrapper behind our back.
//! * [`LocalZk`]'s `Drop` additionally kills every JVM it started, synchronously.
//!
//! # Locating ZooKeeper
//!
//! By default the Debian/Ubuntu package layout is used (`apt-get install -y
//! zookeeper`): `/usr/share/java/zookeeper.jar` (whose manifest carries the
//! class path of its dependencies) and `/etc/zookeeper/conf`.  If
//! `ZOOKEEPER_HOME` is set it takes precedence and is expected to hold an
//! unpacked Apache binary tarball (`lib/*.jar` or `zookeeper*.jar`, plus
//! `conf/`).  Java is taken from `$JAVA_HOME/bin/java` or from `PATH`.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod diverge;
pub mod process;

pub use diverge::Divergence;
pub use process::{pid_alive, send_signal};

/// The ZooKeeper main class; it runs standalone when the config has no
/// `server.N` lines and as a quorum peer otherwise.
const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";

/// Debian package layout.
const DEBIAN_JAR: &str = "/usr/share/java/zookeeper.jar";
const DEBIAN_CONF: &str = "/etc/zookeeper/conf";
/// The Debian jar's manifest only references `slf4j-api`, so without a binding
/// ZooKeeper logs nothing at all.  Adding the log4j 1.2 binding (which reads
/// `/etc/zookeeper/conf/log4j.properties`) makes the log useful in error
/// messages; both jars are optional.
const DEBIAN_LOG_JARS: &[&str] = &[
    "/usr/share/java/slf4j-log4j12.jar",
    "/usr/share/java/log4j-1.2.jar",
];
/// The manifest also leaves out netty's codec and resolver, which the Netty connection factory
/// (the one that serves TLS on `secureClientPort`) needs: without them every TLS connection
/// fails with `NoClassDefFoundError: io/netty/handler/codec/ByteToMessageDecoder`. Optional
/// like the log jars; the plain NIO factory does not load them.
const DEBIAN_NETTY_JARS: &[&str] = &[
    "/usr/share/java/netty-codec.jar",
    "/usr/share/java/netty-resolver.jar",
];
/// The manifest lists Jetty but not the servlet API it implements: without it the AdminServer
/// (which [`ClientListener::NoPlaintext`] servers answer health checks on) logs
/// `NoClassDefFoundError: javax/servlet/Servlet` and does not start. Optional too.
const DEBIAN_ADMIN_JARS: &[&str] = &["/usr/share/java/servlet-api.jar"];

/// How long a (re)started server may take to become healthy.  A JVM starts in
/// 1-3 s; an ensemble additionally needs a leader election.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How many times a whole start is attempted with fresh ports.  Ports are
/// chosen by binding and releasing them, so another process can grab one in
/// between; retrying with new ports makes that race harmless.
const START_ATTEMPTS: usize = 3;
/// Grace period after SIGTERM before [`ServerSet::stop`] escalates to SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long to wait for a process to disappear after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(10);
/// Upper bound for one four-letter-word exchange.  A paused server accepts the
/// TCP connection (the kernel does that) but never answers.
const FOUR_LETTER_TIMEOUT: Duration = Duration::from_secs(2);
/// Poll interval while waiting for health or process exit.
const POLL: Duration = Duration::from_millis(50);
/// Number of log lines included in [`LocalZkError::Unhealthy`].
const LOG_TAIL_LINES: usize = 40;

/// The wrapper run as `sh -c WRAPPER NAME CLEANUP_DIR PROGRAM ARGS...` ([`TiedChild`]).
///
/// * fd 3 keeps the read end of our stdin pipe; the JVM gets `/dev/null` as
///   stdin and the log file (the wrapper's stderr) as stdout and stderr.
/// * The JVM's pid is printed as the only line on stdout, then stdout is
///   pointed at the log so that the pipe to us is closed.
/// * The watcher subshell blocks on fd 3 and `kill -9`s the JVM as soon as the
///   pipe reaches EOF, i.e. as soon as our process closes it or dies.  It then
///   removes CLEANUP_DIR (our temporary base directory, or empty for a
///   caller-provided one), which `TempDir` cannot do when our process is
///   killed or the `LocalZk` lives in a `static`.  It ignores SIGTERM from
///   then on, as the main shell sends one as soon as the JVM is gone.
/// * The main shell waits for the JVM, so the wrapper exits (and reaps the JVM)
///   exactly when the JVM is gone; a SIGSTOPped JVM does not end the `wait`.
///   It then kills the watcher, so a server stopped on purpose keeps its
///   directory.
const WRAPPER_SCRIPT: &str = r#"cleanup=$1; shift
exec 3<&0 0</dev/null
"$@" 1>&2 3<&- &
pid=$!
echo "$pid"
exec 1>&2
{
  read _ignored <&3
  trap '' TERM
  kill -9 "$pid" 2>/dev/null
  if [ -n "$cleanup" ]; then rm -rf -- "$cleanup" 2>/dev/null; fi
} &
watcher=$!
exec 3<&-
wait "$pid"
status=$?
kill "$watcher" 2>/dev/null
exit "$status"
"#;

/// Errors from starting or controlling local ZooKeeper servers.
#[derive(Debug, thiserror::Error)]
pub enum LocalZkError {
    /// Java or the ZooKeeper jars could not be found.
    #[error("ZooKeeper is not available: {reason}; {}", LocalZk::install_hint())]
    NotInstalled {
        /// What exactly is missing.
        reason: String,
    },
    /// A file-system or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A server did not answer `ruok` with `imok` and `srvr` with a `Mode:`
    /// line in time, or its process exited during start-up.
    #[error(
        "ZooKeeper server {server} did not become healthy: {reason}\n\
         --- last lines of {} ---\n{log_tail}",
        .log_path.display()
    )]
    Unhealthy {
        /// 0-based index of the server.
        server: usize,
        /// Why it is considered unhealthy.
        reason: String,
        /// The server's console log (stdout and stderr of the JVM).
        log_path: PathBuf,
        /// The last lines of that log.
        log_tail: String,
    },
    /// A server index was out of range.
    #[error("no ZooKeeper server with index {index} (there are {len})")]
    NoSuchServer {
        /// The index that was asked for.
        index: usize,
        /// The number of servers.
        len: usize,
    },
    /// [`ServerSet::spawn`] was called for a server that is still running.
    #[error("ZooKeeper server {server} is already running")]
    AlreadyRunning {
        /// 0-based index of the server.
        server: usize,
    },
    /// The operation needs a running server but this one is stopped.
    #[error("ZooKeeper server {server} is not running")]
    NotRunning {
        /// 0-based index of the server.
        server: usize,
    },
    /// An ensemble must have at least one server.
    #[error("invalid ZooKeeper ensemble size {size}")]
    InvalidSize {
        /// The requested size.
        size: usize,
    },
    /// [`ServerSet::diverge`] compiles a small Java tool, which needs a JDK's `javac`.
    #[error(
        "no `javac` beside {} or on PATH: rewriting a server's database compiles a Java \
         tool, which needs a JDK (e.g. `apt-get install -y default-jdk-headless`)",
        .java.display()
    )]
    NoJavac {
        /// The `java` that runs ZooKeeper.
        java: PathBuf,
    },
    /// The Java tool behind [`ServerSet::diverge`] could not be compiled, or failed (e.g. an
    /// edit that the server's tree does not allow).
    #[error("{what} failed ({status}):\n{output}")]
    Tool {
        /// What was run.
        what: String,
        /// How it ended.
        status: String,
        /// Its standard output and error.
        output: String,
    },
    /// The process survived SIGKILL for longer than expected.
    #[error("ZooKeeper server {server} (pid {pid}) is still running after SIGKILL")]
    StillRunning {
        /// 0-based index of the server.
        server: usize,
        /// Its JVM pid.
        pid: u32,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> LocalZkError {
    let context = context.into();
    move |source| LocalZkError::Io { context, source }
}

/// Options for [`LocalZk::start_standalone`], the server `zkgate dev` runs.
#[derive(Debug, Clone)]
pub struct LocalZkOptions {
    /// ZooKeeper's `tickTime`.  The server clamps every session timeout to
    /// 2..=20 ticks, so the default of 250 ms allows session timeouts between
    /// 500 ms and 5 s (ZooKeeper's own default, 2 s, would force sessions of
    /// at least 4 s).
    pub tick_time: Duration,
    /// `maxClientCnxns`: connections allowed per client IP.  Everything here
    /// connects from 127.0.0.1, so the default is 0 (unlimited) rather than
    /// ZooKeeper's 60.
    pub max_client_cnxns: u32,
    /// Where to put configuration, data and logs (one `zkN` directory per
    /// server).  `None` (the default) uses a fresh temporary directory that is
    /// deleted when the servers are dropped; a given directory is kept, and
    /// existing data in it is reused.
    pub base_dir: Option<PathBuf>,
}

impl Default for LocalZkOptions {
    fn default() -> Self {
        Self {
            tick_time: Duration::from_millis(250),
            max_client_cnxns: 0,
            base_dir: None,
        }
    }
}

/// How to run ZooKeeper on this machine.
#[derive(Debug, Clone)]
struct Install {
    java: PathBuf,
    classpath: String,
}

/// A child process tied to the lifetime of ours (see the module docs): started through the
/// lifeline wrapper, so it is `kill -9`ed when our process exits for any reason.  A ZooKeeper
/// JVM here; a gateway process in the test kit.
#[derive(Debug)]
pub struct TiedChild {
    /// The `sh` wrapper; it exits once the child is gone.
    wrapper: Child,
    /// Our end of the wrapper's stdin.  Never written to; closing it (or our
    /// process dying) makes the wrapper kill the child.
    _lifeline: ChildStdin,
    /// The child's pid, the target of every signal.
    pid: u32,
}

impl TiedChild {
    /// The command that runs `program` under the wrapper; add the program's arguments,
    /// environment, directory and stderr (its stdout goes to the same place), then
    /// [`TiedChild::spawn`].  `cleanup_dir`, if any, is deleted when our process dies.
    pub fn command(name: &str, program: impl AsRef<OsStr>, cleanup_dir: Option<&Path>) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(WRAPPER_SCRIPT)
            .arg(name)
            .arg(cleanup_dir.map_or(OsStr::new(""), Path::as_os_str))
            .arg(program);
        cmd
    }

    /// Spawns a [`TiedChild::command`] in its own process group (so a terminal's Ctrl-C
    /// reaches only our process) and reads the child's pid.
    ///
    /// # Errors
    /// The wrapper cannot be spawned, or ([`io::ErrorKind::InvalidData`]) reports no pid.
    pub async fn spawn(mut cmd: Command) -> io::Result<TiedChild> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0);
        let mut wrapper = cmd.spawn()?;
        let lifeline = wrapper.stdin.take().expect("stdin is piped");
        let stdout = wrapper.stdout.take().expect("stdout is piped");
        // The wrapper prints the pid right after forking, or exits (EOF).
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).map(|_| line)
        })
        .await
        .map_err(io::Error::other)?;
        match line.map(|l| l.trim().parse::<u32>()) {
            Ok(Ok(pid)) => Ok(TiedChild {
                wrapper,
                _lifeline: lifeline,
                pid,
            }),
            other => {
                // Close the lifeline and reap the wrapper before reporting.
                drop(lifeline);
                let _ = wrapper.kill();
                let _ = wrapper.wait();
                Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the wrapper did not report a pid ({other:?})"),
                ))
            }
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The child's exit status once it is gone (the wrapper exits with it).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.wrapper.try_wait().ok().flatten()
    }

    /// Waits (blocking) for the child to be gone.
    ///
    /// # Errors
    /// As [`Child::wait`].
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        self.wrapper.wait()
    }

    /// Whether the child is gone.  Normally the wrapper exits only after
    /// reaping it; if the wrapper was killed by a signal instead, the child's
    /// pid is checked directly.
    pub fn exited(&mut self) -> bool {
        match self.wrapper.try_wait() {
            Ok(None) => false,
            Ok(Some(status)) if status.signal().is_none() => true,
            Ok(Some(_)) | Err(_) => !pid_alive(self.pid),
        }
    }

    /// Sends `signal` (a name such as `TERM` or `STOP`) to the child.
    ///
    /// # Errors
    /// `kill` failed (with its message).
    pub fn signal(&self, signal: &str) -> Result<(), LocalZkError> {
        send_signal(self.pid, signal)
    }

    /// SIGKILLs the child if it is still there, closes the lifeline and waits up to `limit`
    /// for the wrapper to exit.  Blocking: for `Drop`.
    pub fn kill_and_wait(mut self, limit: Duration) {
        if !self.exited() {
            let _ = send_signal(self.pid, "KILL");
        }
        let TiedChild {
            mut wrapper,
            _lifeline: lifeline,
            ..
        } = self;
        drop(lifeline);
        let deadline = Instant::now() + limit;
        while matches!(wrapper.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// One server of a [`ServerSet`]: its directory, its ports and its process, if running.
pub struct ZkServer {
    /// 0-based index; the ZooKeeper server id (`myid`) is index + 1.
    index: usize,
    /// The client port first, then whatever else [`ServerSetSpec::ports_per_server`] asked
    /// for (an ensemble's quorum and election ports). Chosen afresh on every start attempt.
    ports: Vec<u16>,
    dir: PathBuf,
    proc: Option<TiedChild>,
}

impl ZkServer {
    /// 0-based index in its set.
    pub fn index(&self) -> usize {
        self.index
    }

    /// ZooKeeper server id (`myid`): index + 1.
    pub fn id(&self) -> usize {
        self.index + 1
    }

    /// Port `k` of this server (0 is the client port).
    ///
    /// # Panics
    /// If `k` is not below [`ServerSetSpec::ports_per_server`].
    pub fn port(&self, k: usize) -> u16 {
        self.ports[k]
    }

    /// The loopback client address; it stays the same across stop and restart.
    pub fn client_addr(&self) -> SocketAddr {
        loopback(self.ports[0])
    }

    /// The server's own directory (`zoo.cfg`, `data/`, the log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The console log (JVM stdout and stderr).
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("zookeeper.log")
    }

    /// The JVM pid, or `None` if it was stopped or killed.  A server that crashed on its own
    /// keeps its pid here until [`ServerSet::is_running`] notices the exit.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(TiedChild::pid)
    }
}

/// The loopback address with `port`.
pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
}

/// What [`ServerSet::start`] starts: how many servers, how many ports each, and what goes
/// into each `zoo.cfg` besides the common lines.
pub struct ServerSetSpec<'a> {
    /// Number of servers (at least 1).
    pub size: usize,
    /// Ports per server: 1 (the client port) for a standalone server, 3 (client, quorum,
    /// election) for an ensemble member.
    pub ports_per_server: usize,
    /// `tickTime`.
    pub tick_time: Duration,
    /// `maxClientCnxns`.
    pub max_client_cnxns: u32,
    /// See [`LocalZkOptions::base_dir`].
    pub base_dir: Option<PathBuf>,
    /// Extra `-D` options for every JVM.
    pub jvm_options: Vec<String>,
    /// Lines appended to server `i`'s `zoo.cfg` once every server's ports are chosen (an
    /// ensemble's `server.N` lines).
    pub extra_config: &'a (dyn Fn(&[ZkServer], usize) -> String + Sync),
    /// Whether to write `data/myid` (every ensemble member needs its id there).
    pub myid: bool,
    /// Whether port 0 is a plaintext `clientPort` (and how the servers' health is checked).
    pub client: ClientListener,
}

/// What listens on a server's port 0, and so how [`ServerSet`] checks that a server is healthy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientListener {
    /// A plaintext `clientPort` on 127.0.0.1; health by four-letter words (`ruok`, `srvr`)
    /// over it, and the AdminServer stays off.
    Plaintext,
    /// No plaintext client port at all (a server that a security review wants TLS-only): the
    /// caller's [`ServerSetSpec::extra_config`] binds port 0 (e.g. as `secureClientPort`), and
    /// health goes over HTTP to the AdminServer, on 127.0.0.1 and port `admin` of the server's
    /// ports (`/commands/ruok`, `/commands/srvr`; see [`admin_command`]).
    NoPlaintext {
        /// Index of the AdminServer's port among the server's ports.
        admin: usize,
    },
}

/// A set of ZooKeeper servers run as child processes on loopback ports: one standalone server
/// ([`LocalZk`], `zkgate dev`) or, configured by the caller, an ensemble (the test kit).
///
/// Servers are addressed by a 0-based index.  Dropping a `ServerSet` kills all of its servers
/// (and deletes its temporary directory); even if it is never dropped, the servers die
/// together with the current process.
pub struct ServerSet {
    install: Install,
    jvm_options: Vec<String>,
    client: ClientListener,
    base: PathBuf,
    servers: Vec<ZkServer>,
    /// Deleted after `Drop::drop` has killed the processes (fields are
    /// dropped after `drop` runs).
    tempdir: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for ServerSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSet")
            .field("connect_string", &self.connect_string())
            .field("base_dir", &self.base)
            .field(
                "pids",
                &self.servers.iter().map(ZkServer::pid).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl ServerSet {
    /// Starts every server of `spec` and waits until each answers `ruok` with `imok` and
    /// reports its `Mode` (for an ensemble: a leader was elected and everyone joined).
    ///
    /// # Errors
    ///
    /// [`LocalZkError::InvalidSize`] for no servers, [`LocalZkError::NotInstalled`] if Java
    /// or ZooKeeper is missing, [`LocalZkError::Io`] if a directory or process cannot be
    /// created, and [`LocalZkError::Unhealthy`] (with the end of the server log) if the
    /// servers do not become healthy within ~30 s after a few attempts on fresh ports; the
    /// temporary directory is then kept for inspection.
    pub async fn start(spec: ServerSetSpec<'_>) -> Result<ServerSet, LocalZkError> {
        if spec.size == 0 {
            return Err(LocalZkError::InvalidSize { size: spec.size });
        }
        let install = find_install()?;
        let (base, tempdir) = match &spec.base_dir {
            Some(dir) => {
                fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
                (dir.clone(), None)
            }
            None => {
                let tmp = tempfile::Builder::new()
                    .prefix("zkgate-localzk-")
                    .tempdir()
                    .map_err(io_err("creating a temporary directory"))?;
                (tmp.path().to_path_buf(), Some(tmp))
            }
        };
        let servers = (0..spec.size)
            .map(|index| ZkServer {
                index,
                ports: Vec::new(),
                dir: base.join(format!("zk{}", index + 1)),
                proc: None,
            })
            .collect();
        // Owning the processes from the start means that an error or a
        // cancelled future still kills whatever was spawned (via Drop).
        let mut set = ServerSet {
            install,
            jvm_options: spec.jvm_options.clone(),
            client: spec.client,
            base,
            servers,
            tempdir,
        };
        let mut last_err = None;
        for attempt in 1..=START_ATTEMPTS {
            match set.try_start_all(&spec).await {
                Ok(()) => return Ok(set),
                Err(err @ LocalZkError::Unhealthy { .. }) => {
                    tracing::warn!(attempt, error = %err, "local ZooKeeper failed to start");
                    set.kill_all().await;
                    last_err = Some(err);
                }
                Err(err) => return Err(err),
            }
        }
        // Keep the directory so that the log path in the error stays valid.
        if let Some(tmp) = set.tempdir.take() {
            let _ = tmp.keep();
        }
        Err(last_err.expect("at least one attempt was made"))
    }

    /// One attempt: fresh ports, config files, spawn everyone, wait for health.
    async fn try_start_all(&mut self, spec: &ServerSetSpec<'_>) -> Result<(), LocalZkError> {
        let per_server = spec.ports_per_server.max(1);
        let ports = pick_ports(self.servers.len() * per_server)?;
        for (server, ports) in self.servers.iter_mut().zip(ports.chunks(per_server)) {
            server.ports = ports.to_vec();
        }
        for i in 0..self.servers.len() {
            let extra = (spec.extra_config)(&self.servers, i);
            self.write_config(i, spec, &extra)?;
        }
        for i in 0..self.servers.len() {
            self.spawn(i).await?;
        }
        let all: Vec<usize> = (0..self.servers.len()).collect();
        self.wait_healthy(&all).await
    }

    /// The ZooKeeper connect string, `127.0.0.1:p1,127.0.0.1:p2,...`.
    pub fn connect_string(&self) -> String {
        let mut s = String::new();
        for (i, server) in self.servers.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(s, "{}", server.client_addr());
        }
        s
    }

    /// Number of servers.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Always `false`: there is at least one server.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Every server, by index.
    pub fn servers(&self) -> &[ZkServer] {
        &self.servers
    }

    /// The directory holding every server's `zkN` directory.
    pub fn base_dir(&self) -> &Path {
        &self.base
    }

    /// The AdminServer address of server `i`, if the set was started with
    /// [`ClientListener::NoPlaintext`] (`None` otherwise, or for no such server).
    pub fn admin_address(&self, i: usize) -> Option<SocketAddr> {
        match self.client {
            ClientListener::Plaintext => None,
            ClientListener::NoPlaintext { admin } => {
                Some(loopback(*self.servers.get(i)?.ports.get(admin)?))
            }
        }
    }

    /// Server `i`, or [`LocalZkError::NoSuchServer`].
    ///
    /// # Errors
    /// `i` is out of range.
    pub fn server(&self, i: usize) -> Result<&ZkServer, LocalZkError> {
        self.servers.get(i).ok_or(LocalZkError::NoSuchServer {
            index: i,
            len: self.servers.len(),
        })
    }

    /// Whether server `i`'s process is alive (it may still be paused or not
    /// yet serving).  Also forgets a process that exited on its own.
    pub fn is_running(&mut self, i: usize) -> bool {
        let Some(server) = self.servers.get_mut(i) else {
            return false;
        };
        if let Some(proc) = &mut server.proc {
            if proc.exited() {
                server.proc = None;
            }
        }
        server.proc.is_some()
    }

    /// The JVM pid if server `i` has a process that has not exited.
    fn live_pid(&mut self, i: usize) -> Option<u32> {
        if self.is_running(i) {
            self.servers[i].pid()
        } else {
            None
        }
    }

    /// Stops server `i` gracefully: SIGTERM (plus SIGCONT, in case it is
    /// paused), then SIGKILL if it has not exited after 10 s.  Returns once the
    /// process is gone.  Stopping a stopped server does nothing.
    ///
    /// # Errors
    ///
    /// [`LocalZkError::NoSuchServer`], [`LocalZkError::Io`] if signals cannot
    /// be sent, [`LocalZkError::StillRunning`] if it survives SIGKILL.
    pub async fn stop(&mut self, i: usize) -> Result<(), LocalZkError> {
        self.server(i)?;
        let Some(pid) = self.live_pid(i) else {
            return Ok(());
        };
        send_signal(pid, "TERM")?;
        send_signal(pid, "CONT")?;
        if self.wait_exit(i, STOP_GRACE).await {
            self.servers[i].proc = None;
            return Ok(());
        }
        tracing::warn!(
            server = i,
            pid,
            "ZooKeeper ignored SIGTERM, sending SIGKILL"
        );
        self.kill(i).await
    }

    /// Kills server `i` with SIGKILL and returns once the process is gone.  Killing a stopped
    /// server does nothing.
    ///
    /// # Errors
    ///
    /// [`LocalZkError::NoSuchServer`], [`LocalZkError::Io`] if the signal
    /// cannot be sent, [`LocalZkError::StillRunning`] if it survives.
    pub async fn kill(&mut self, i: usize) -> Result<(), LocalZkError> {
        self.server(i)?;
        let Some(pid) = self.live_pid(i) else {
            return Ok(());
        };
        send_signal(pid, "KILL")?;
        if self.wait_exit(i, KILL_WAIT).await {
            self.servers[i].proc = None;
            Ok(())
        } else {
            Err(LocalZkError::StillRunning { server: i, pid })
        }
    }

    /// Sends `signal` (a name such as `STOP`) to server `i`'s JVM.
    ///
    /// # Errors
    /// [`LocalZkError::NoSuchServer`], [`LocalZkError::NotRunning`], [`LocalZkError::Io`] if
    /// the signal cannot be sent.
    pub fn signal(&mut self, i: usize, signal: &str) -> Result<(), LocalZkError> {
        self.server(i)?;
        let pid = self
            .live_pid(i)
            .ok_or(LocalZkError::NotRunning { server: i })?;
        send_signal(pid, signal)
    }

    /// Stops every server gracefully (see [`ServerSet::stop`]) and waits for all
    /// of them; failures are logged and the processes killed.  Prefer this
    /// over dropping when there is an async context, as `Drop` has to block.
    pub async fn shutdown(mut self) {
        for i in 0..self.servers.len() {
            if let Err(err) = self.stop(i).await {
                tracing::warn!(server = i, error = %err, "stopping local ZooKeeper failed");
            }
        }
        // Drop kills anything that is left.
    }

    /// Writes `zoo.cfg` (and, for an ensemble, `myid`) for server `i`.
    fn write_config(
        &self,
        i: usize,
        spec: &ServerSetSpec<'_>,
        extra: &str,
    ) -> Result<(), LocalZkError> {
        let server = &self.servers[i];
        let data_dir = server.dir.join("data");
        fs::create_dir_all(&data_dir)
            .map_err(io_err(format!("creating {}", data_dir.display())))?;
        let tick_ms = spec.tick_time.as_millis().max(1);
        let mut cfg = format!(
            "# Generated by zkgate_localzk\n\
             tickTime={tick_ms}\n\
             dataDir={}\n\
             maxClientCnxns={}\n\
             4lw.commands.whitelist=*\n\
             reconfigEnabled=false\n",
            data_dir.display(),
            spec.max_client_cnxns,
        );
        match spec.client {
            ClientListener::Plaintext => {
                let _ = write!(
                    cfg,
                    "clientPort={}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n",
                    server.ports[0]
                );
            }
            // Neither `clientPort` nor `clientPortAddress` (ZooKeeper refuses the address
            // without the port): the server binds no plaintext client socket.
            ClientListener::NoPlaintext { admin } => {
                let _ = write!(
                    cfg,
                    "admin.enableServer=true\nadmin.serverAddress=127.0.0.1\n\
                     admin.serverPort={}\n",
                    server.ports[admin]
                );
            }
        }
        cfg.push_str(extra);
        if spec.myid {
            let myid = data_dir.join("myid");
            fs::write(&myid, format!("{}\n", server.id()))
                .map_err(io_err(format!("writing {}", myid.display())))?;
        }
        let path = server.dir.join("zoo.cfg");
        fs::write(&path, cfg).map_err(io_err(format!("writing {}", path.display())))
    }

    /// Spawns stopped server `i` through the lifeline wrapper (see the module docs), on its
    /// ports and with its data; [`ServerSet::wait_healthy`] then waits for it to serve.
    ///
    /// # Errors
    /// [`LocalZkError::NoSuchServer`], [`LocalZkError::AlreadyRunning`], [`LocalZkError::Io`]
    /// if it cannot be spawned, [`LocalZkError::Unhealthy`] if it reports no pid.
    pub async fn spawn(&mut self, i: usize) -> Result<(), LocalZkError> {
        self.server(i)?;
        if self.is_running(i) {
            return Err(LocalZkError::AlreadyRunning { server: i });
        }
        let server = &self.servers[i];
        let log_path = server.log_path();
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(io_err(format!("opening {}", log_path.display())))?;
        let cleanup = self.tempdir.as_ref().map(tempfile::TempDir::path);
        let mut cmd = TiedChild::command("zkgate-localzk", &self.install.java, cleanup);
        cmd.args([
            "-Xms16m",
            "-Xmx256m",
            // Fast start-up and a small footprint matter more here than
            // peak throughput.
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:-UsePerfData",
            "-Djava.net.preferIPv4Stack=true",
        ])
        .args(&self.jvm_options)
        .arg(format!("-Dzookeeper.log.dir={}", server.dir.display()))
        .arg("-Dzookeeper.root.logger=INFO,CONSOLE")
        .arg("-Dzookeeper.console.threshold=INFO")
        .arg("-cp")
        .arg(&self.install.classpath)
        .arg(MAIN_CLASS)
        .arg(server.dir.join("zoo.cfg"))
        .current_dir(&server.dir)
        .stderr(log);
        let proc = match TiedChild::spawn(cmd).await {
            Ok(proc) => proc,
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                return Err(self.unhealthy(i, e.to_string()))
            }
            Err(e) => return Err(io_err("spawning sh for ZooKeeper")(e)),
        };
        tracing::debug!(server = i, pid = proc.pid(), addr = %self.servers[i].client_addr(), "started local ZooKeeper");
        self.servers[i].proc = Some(proc);
        Ok(())
    }

    /// Waits until every listed server answers `ruok` with `imok` and `srvr`
    /// with a `Mode:` line (`ruok` alone also succeeds while a server is not
    /// serving yet), for up to ~30 s.  Fails fast if a process exits.
    ///
    /// # Errors
    /// [`LocalZkError::Unhealthy`], with the end of the server's log.
    pub async fn wait_healthy(&mut self, indices: &[usize]) -> Result<(), LocalZkError> {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut pending: Vec<usize> = indices.to_vec();
        loop {
            // (index, why it is not healthy yet) for every server not done.
            let mut not_yet: Vec<(usize, String)> = Vec::new();
            for i in pending {
                let server = &mut self.servers[i];
                let Some(proc) = server.proc.as_mut() else {
                    return Err(self.unhealthy(i, "no process".into()));
                };
                if let Some(status) = proc.try_wait() {
                    server.proc = None;
                    let reason = format!("the JVM exited ({})", describe(status));
                    return Err(self.unhealthy(i, reason));
                }
                let checked = match self.client {
                    ClientListener::Plaintext => check_health(server.client_addr()).await,
                    ClientListener::NoPlaintext { admin } => {
                        check_admin_health(loopback(server.ports[admin])).await
                    }
                };
                if let Err(why) = checked {
                    not_yet.push((i, why));
                }
            }
            let Some((first, why)) = not_yet.first() else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                let reason = format!("not healthy within {START_TIMEOUT:?}: {why}");
                return Err(self.unhealthy(*first, reason));
            }
            pending = not_yet.into_iter().map(|(i, _)| i).collect();
            tokio::time::sleep(POLL * 2).await;
        }
    }

    fn unhealthy(&self, i: usize, reason: String) -> LocalZkError {
        let log_path = self.servers[i].log_path();
        LocalZkError::Unhealthy {
            server: i,
            reason,
            log_tail: log_tail(&log_path, LOG_TAIL_LINES),
            log_path,
        }
    }

    /// Waits up to `limit` for server `i`'s JVM to be gone.
    async fn wait_exit(&mut self, i: usize, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let gone = match self.servers[i].proc.as_mut() {
                None => true,
                Some(proc) => proc.exited(),
            };
            if gone {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// SIGKILLs every server and waits; used between start attempts.
    async fn kill_all(&mut self) {
        for i in 0..self.servers.len() {
            if let Err(err) = self.kill(i).await {
                tracing::warn!(server = i, error = %err, "killing local ZooKeeper failed");
            }
        }
    }
}

impl Drop for ServerSet {
    /// Kills every JVM still running, closes the lifelines (which makes the
    /// wrappers kill them too) and waits up to a few seconds for all of them
    /// to be gone.  Best effort: errors are ignored.
    fn drop(&mut self) {
        let mut procs: Vec<TiedChild> = self
            .servers
            .iter_mut()
            .filter_map(|s| s.proc.take())
            .collect();
        // Signal all before waiting for any: they die in parallel.
        for proc in &mut procs {
            if !proc.exited() {
                let _ = proc.signal("KILL");
            }
        }
        for proc in procs {
            proc.kill_and_wait(Duration::from_secs(5));
        }
    }
}

/// One standalone ZooKeeper server (`zkgate dev`).  The test kit's `LocalZk` adds
/// ensembles and fault injection on top of the same [`ServerSet`].
#[derive(Debug)]
pub struct LocalZk {
    set: ServerSet,
}

impl LocalZk {
    /// Whether Java and the ZooKeeper jars can be found, so that callers can
    /// say what to install (with [`LocalZk::install_hint`]) instead of failing obscurely.
    pub fn is_installed() -> bool {
        find_install().is_ok()
    }

    /// How to make [`LocalZk::is_installed`] true.
    pub fn install_hint() -> &'static str {
        "install Java and Apache ZooKeeper, e.g. `apt-get install -y zookeeper` \
         (Debian/Ubuntu), or unpack the Apache ZooKeeper binary tarball and set \
         ZOOKEEPER_HOME to it (Java is taken from JAVA_HOME or PATH)"
    }

    /// Starts one standalone server and waits until it serves requests.
    ///
    /// # Errors
    ///
    /// As for [`ServerSet::start`].
    pub async fn start_standalone(opts: LocalZkOptions) -> Result<LocalZk, LocalZkError> {
        let set = ServerSet::start(ServerSetSpec {
            size: 1,
            ports_per_server: 1,
            tick_time: opts.tick_time,
            max_client_cnxns: opts.max_client_cnxns,
            base_dir: opts.base_dir,
            jvm_options: Vec::new(),
            extra_config: &|_, _| String::new(),
            myid: false,
            client: ClientListener::Plaintext,
        })
        .await?;
        Ok(LocalZk { set })
    }

    /// The ZooKeeper connect string, `127.0.0.1:PORT`.
    pub fn connect_string(&self) -> String {
        self.set.connect_string()
    }

    /// The JVM pid of server `i` (only 0 exists), or `None` if it is not running.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.set.servers().get(i)?.pid()
    }

    /// Stops the server gracefully (see [`ServerSet::shutdown`]).
    pub async fn shutdown(self) {
        self.set.shutdown().await;
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => status.to_string(),
    }
}

/// Sends a ZooKeeper "four letter word" (`ruok`, `srvr`, `stat`, `mntr`, ...)
/// to `addr` and returns the answer.  All of them are whitelisted on servers
/// started by [`LocalZk`].
///
/// # Errors
///
/// Connection or I/O errors, or [`io::ErrorKind::TimedOut`] if the whole
/// exchange takes longer than `timeout` (e.g. the server is paused).
pub async fn four_letter_word(
    addr: SocketAddr,
    cmd: &str,
    timeout: Duration,
) -> io::Result<String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(cmd.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok(String::from_utf8_lossy(&answer).into_owned())
    };
    tokio::time::timeout(timeout, exchange).await.map_err(|_| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer to {cmd:?} from {addr} within {timeout:?}"),
        )
    })?
}

/// `Ok` if the server answers `ruok` and reports a `Mode:` in `srvr`;
/// otherwise a description of what it said, for the error message.
async fn check_health(addr: SocketAddr) -> Result<(), String> {
    let ruok = four_letter_word(addr, "ruok", FOUR_LETTER_TIMEOUT)
        .await
        .map_err(|e| format!("ruok: {e}"))?;
    if ruok.trim() != "imok" {
        return Err(format!("ruok answered {ruok:?}"));
    }
    let srvr = four_letter_word(addr, "srvr", FOUR_LETTER_TIMEOUT)
        .await
        .map_err(|e| format!("srvr: {e}"))?;
    match parse_mode(&srvr) {
        Some(_) => Ok(()),
        None => Err(format!("srvr answered {:?}", srvr.trim())),
    }
}

/// Runs AdminServer command `cmd` (`ruok`, `srvr`, `stat`, `mntr`, … as in
/// `/commands/<cmd>`) on the AdminServer at `addr` and returns the body of the answer (JSON).
/// The four-letter words' counterpart for servers without a plaintext client port.
///
/// # Errors
///
/// Connection or I/O errors, an answer that is not `HTTP/1.x 200`
/// ([`io::ErrorKind::InvalidData`]), or [`io::ErrorKind::TimedOut`] if the whole exchange takes
/// longer than `timeout`.
pub async fn admin_command(addr: SocketAddr, cmd: &str, timeout: Duration) -> io::Result<String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        // HTTP/1.0: the answer is delimited by the connection's end, never chunked.
        let request = format!("GET /commands/{cmd} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        let status = head.lines().next().unwrap_or("");
        if status.split_whitespace().nth(1) != Some("200") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("/commands/{cmd} answered {status:?}"),
            ));
        }
        Ok(body.to_owned())
    };
    tokio::time::timeout(timeout, exchange).await.map_err(|_| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer to /commands/{cmd} from {addr} within {timeout:?}"),
        )
    })?
}

/// `Ok` if the AdminServer at `addr` answers `ruok` without an error (it reports one while the
/// server does not serve) and `srvr` with a `server_state`; otherwise what it said.
async fn check_admin_health(addr: SocketAddr) -> Result<(), String> {
    let ruok = admin_command(addr, "ruok", FOUR_LETTER_TIMEOUT)
        .await
        .map_err(|e| format!("ruok: {e}"))?;
    let ruok: serde_json::Value =
        serde_json::from_str(&ruok).map_err(|e| format!("ruok answered {ruok:?}: {e}"))?;
    if !ruok["error"].is_null() {
        return Err(format!("ruok answered {}", ruok["error"]));
    }
    let srvr = admin_command(addr, "srvr", FOUR_LETTER_TIMEOUT)
        .await
        .map_err(|e| format!("srvr: {e}"))?;
    match parse_admin_mode(&srvr) {
        Some(_) => Ok(()),
        None => Err(format!("srvr answered {:?}", srvr.trim())),
    }
}

/// The role (`standalone`, `leader`, `follower`, …) in the AdminServer's answer to `srvr`
/// (`server_stats.server_state`): what [`parse_mode`] reads from the four-letter word.
pub fn parse_admin_mode(srvr: &str) -> Option<String> {
    let answer: serde_json::Value = serde_json::from_str(srvr).ok()?;
    if !answer["error"].is_null() {
        return None;
    }
    answer["server_stats"]["server_state"]
        .as_str()
        .filter(|mode| !mode.is_empty())
        .map(str::to_owned)
}

/// The `Mode:` of a `srvr` answer (`standalone`, `leader`, `follower`, …).
pub fn parse_mode(srvr: &str) -> Option<&str> {
    srvr.lines()
        .find_map(|line| line.strip_prefix("Mode:"))
        .map(str::trim)
        .filter(|mode| !mode.is_empty())
}

/// The last `lines` lines of the file at `path` (at most its last 64 KiB).
fn log_tail(path: &Path, lines: usize) -> String {
    const MAX: u64 = 64 * 1024;
    let read = || -> io::Result<String> {
        let mut file = fs::File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(MAX)))?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    match read() {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Picks `n` distinct free loopback ports by binding them all at once and
/// releasing them.
///
/// Ports are drawn at random from *below* the kernel's ephemeral range when
/// possible: a port from the ephemeral range (what binding port 0 returns) can
/// be taken as the local port of any outgoing connection, e.g. while a server
/// is stopped and about to be restarted on the same port.
fn pick_ports(n: usize) -> Result<Vec<u16>, LocalZkError> {
    let range = non_ephemeral_range();
    let mut rng = rand::rng();
    let mut held = Vec::with_capacity(n);
    let mut ports = Vec::with_capacity(n);
    let mut tries = 0;
    while ports.len() < n {
        tries += 1;
        let candidate = match range {
            Some((lo, hi)) if tries <= 1000 => rng.random_range(lo..hi),
            _ => 0,
        };
        match TcpListener::bind((Ipv4Addr::LOCALHOST, candidate)) {
            Ok(listener) => {
                let port = listener
                    .local_addr()
                    .map_err(io_err("reading a bound port"))?
                    .port();
                if !ports.contains(&port) {
                    ports.push(port);
                    held.push(listener);
                }
            }
            Err(_) if candidate != 0 => {}
            Err(e) => return Err(io_err("binding a free loopback port")(e)),
        }
    }
    drop(held);
    Ok(ports)
}

/// A port range outside `/proc/sys/net/ipv4/ip_local_port_range`.
fn non_ephemeral_range() -> Option<(u16, u16)> {
    let text = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = text.split_whitespace().map(|s| s.parse::<u32>().ok());
    let (lo, hi) = (it.next()??, it.next()??);
    if lo >= 12_000 {
        Some((10_000, u16::try_from(lo).ok()?))
    } else if hi <= 63_000 {
        Some((u16::try_from(hi + 1).ok()?, 65_000))
    } else {
        None
    }
}

/// Finds Java and builds the class path (see the module docs).
fn find_install() -> Result<Install, LocalZkError> {
    let java = find_java().ok_or_else(|| LocalZkError::NotInstalled {
        reason: "no `java` in JAVA_HOME/bin or PATH".into(),
    })?;
    let classpath = match std::env::var_os("ZOOKEEPER_HOME").filter(|h| !h.is_empty()) {
        Some(home) => tarball_classpath(Path::new(&home))?,
        None => {
            if !Path::new(DEBIAN_JAR).is_file() {
                return Err(LocalZkError::NotInstalled {
                    reason: format!("{DEBIAN_JAR} not found and ZOOKEEPER_HOME not set"),
                });
            }
            let mut cp = vec![DEBIAN_CONF.to_owned(), DEBIAN_JAR.to_owned()];
            cp.extend(
                DEBIAN_LOG_JARS
                    .iter()
                    .chain(DEBIAN_NETTY_JARS)
                    .chain(DEBIAN_ADMIN_JARS)
                    .filter(|jar| Path::new(jar).is_file())
                    .map(|jar| (*jar).to_owned()),
            );
            cp.join(":")
        }
    };
    Ok(Install { java, classpath })
}

/// `$ZOOKEEPER_HOME/conf`, `$ZOOKEEPER_HOME/lib/*` and any
/// `$ZOOKEEPER_HOME/zookeeper*.jar` (older tarballs keep the jar at the top).
fn tarball_classpath(home: &Path) -> Result<String, LocalZkError> {
    let jars_in = |dir: &Path| -> Vec<PathBuf> {
        let Ok(entries) = fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut jars: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("zookeeper") && n.ends_with(".jar"))
            })
            .collect();
        jars.sort();
        jars
    };
    let lib = home.join("lib");
    let top_jars = jars_in(home);
    if top_jars.is_empty() && jars_in(&lib).is_empty() {
        return Err(LocalZkError::NotInstalled {
            reason: format!(
                "no zookeeper*.jar in ZOOKEEPER_HOME={} or its lib/",
                home.display()
            ),
        });
    }
    let mut cp = vec![home.join("conf").display().to_string()];
    cp.extend(top_jars.iter().map(|j| j.display().to_string()));
    if lib.is_dir() {
        // A class-path wildcard, expanded by java itself.
        cp.push(format!("{}/*", lib.display()));
    }
    Ok(cp.join(":"))
}

fn find_java() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("JAVA_HOME").filter(|h| !h.is_empty()) {
        let java = Path::new(&home).join("bin").join("java");
        if java.is_file() {
            return Some(java);
        }
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("java"))
        .find(|java| java.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mode() {
        let srvr = "Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.0/0\nMode: follower\nNode count: 5\n";
        assert_eq!(parse_mode(srvr), Some("follower"));
        assert_eq!(
            parse_mode("This ZooKeeper instance is not currently serving requests\n"),
            None
        );
    }

    #[test]
    fn parses_admin_mode() {
        let srvr = r#"{"server_stats": {"server_state": "leader", "uptime": 1}, "error": null}"#;
        assert_eq!(parse_admin_mode(srvr).as_deref(), Some("leader"));
        let not_serving = r#"{"command": "server_stats",
            "error": "This ZooKeeper instance is not currently serving requests"}"#;
        assert_eq!(parse_admin_mode(not_serving), None);
        assert_eq!(
            parse_admin_mode(r#"{"server_stats": {}, "error": null}"#),
            None
        );
        assert_eq!(parse_admin_mode("<html>"), None);
    }

    #[test]
    fn picks_distinct_ports() {
        let ports = pick_ports(9).unwrap();
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 9);
    }

    #[test]
    fn local_zk_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<LocalZk>();
    }
}
