//! A gateway in a child process, so it can be SIGKILLed, SIGSTOPped and SIGCONTed.
//!
//! Tests run the real binary (`zkgate serve …`); the soak example runs itself in gateway mode
//! (examples do not get the binary's path). Either way the process is started through a small
//! `sh` wrapper holding a pipe from us, as [`zkgate::localzk`] does for ZooKeeper: when this
//! process dies for any reason the pipe closes and the wrapper `kill -9`s the gateway, so no
//! gateway outlives its test.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use tonic::transport::Endpoint;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// `$1` is the program; the gateway's pid is printed first, then the wrapper waits for it
/// (a stopped child does not end `wait`), while a watcher kills it when our pipe closes.
const WRAPPER: &str = r#"exec 3<&0 0</dev/null
"$@" 3<&- &
pid=$!
echo "$pid"
exec 1>&2
{ read _ignored <&3; kill -9 "$pid" 2>/dev/null; } &
watcher=$!
exec 3<&-
wait "$pid"
status=$?
kill "$watcher" 2>/dev/null
exit "$status"
"#;

/// How to start a gateway.
#[derive(Debug, Clone)]
pub struct GatewaySpec {
    /// Program and leading arguments, e.g. `[zkgate, serve]`.
    pub command: Vec<OsString>,
    /// ZooKeeper connect string (possibly link cutters).
    pub zk: String,
    pub root: String,
    pub session_timeout: Duration,
    /// Extra flags.
    pub extra: Vec<String>,
    /// Extra environment (e.g. the `ZKGATE_FAILPOINT_*` test seams of `src/coord/zk.rs`),
    /// set after the harness's own `ZKGATE_*` variables are cleared.
    pub env: Vec<(String, String)>,
}

impl GatewaySpec {
    /// The real binary, `zkgate serve`. Only integration tests know its path.
    pub fn binary(bin: &str, zk: &str, root: &str, session_timeout: Duration) -> Self {
        GatewaySpec {
            command: vec![bin.into(), "serve".into()],
            zk: zk.into(),
            root: root.into(),
            session_timeout,
            extra: Vec::new(),
            env: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcState {
    Running,
    Stopped,
    Dead,
}

/// A running gateway process. Dropping it kills it.
#[derive(Debug)]
pub struct GatewayProc {
    pub name: String,
    pub addr: SocketAddr,
    pub pid: u32,
    pub spec: GatewaySpec,
    pub state: ProcState,
    wrapper: Child,
    _lifeline: ChildStdin,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl GatewayProc {
    /// Starts the gateway and waits until its health is `SERVING` (it has a ZooKeeper
    /// session).
    ///
    /// # Errors
    /// A sentence with the end of the gateway's log.
    pub async fn spawn(name: &str, spec: GatewaySpec) -> Result<GatewayProc, String> {
        let dir = tempfile::Builder::new()
            .prefix("zkgate-gw-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let log = dir.path().join("gateway.log");
        let log_file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(WRAPPER).arg("zkgate-gateway");
        cmd.args(&spec.command);
        cmd.args(["--log-json", "--zk", &spec.zk, "--root", &spec.root]);
        cmd.args(["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"]);
        // Every ZooKeeper of the suite runs with the harness's tick (LocalZkOptions::default).
        cmd.args(["--zk-tick-time", "250ms"]);
        cmd.arg("--session-timeout")
            .arg(format!("{}ms", spec.session_timeout.as_millis()));
        cmd.args(&spec.extra);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ZKGATE_") {
                cmd.env_remove(k);
            }
        }
        if std::env::var_os("ZKGATE_GW_LOG").is_some() {
            cmd.env("ZKGATE_LOG", std::env::var_os("ZKGATE_GW_LOG").unwrap());
        } else {
            cmd.env("ZKGATE_LOG", "info");
        }
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file);
        cmd.process_group(0);
        let mut wrapper = cmd.spawn().map_err(|e| format!("spawning gateway: {e}"))?;
        let lifeline = wrapper.stdin.take().expect("piped stdin");
        let stdout = wrapper.stdout.take().expect("piped stdout");
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).map(|_| line)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        let pid: u32 = line
            .trim()
            .parse()
            .map_err(|_| format!("the wrapper printed {line:?}, not a pid"))?;
        let mut gw = GatewayProc {
            name: name.into(),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            pid,
            spec,
            state: ProcState::Running,
            wrapper,
            _lifeline: lifeline,
            log,
            _dir: dir,
        };
        gw.addr = gw.wait_listening(Duration::from_secs(20)).await?;
        if gw.spec.extra.iter().any(|a| a == "--tls-cert") {
            // The health check below speaks plaintext: a TLS gateway is ready once its
            // ZooKeeper session is.
            return gw
                .wait_logged("ZooKeeper session established", Duration::from_secs(20))
                .await
                .map(|()| gw);
        }
        if !gw.wait_serving(Duration::from_secs(20)).await {
            return Err(format!(
                "gateway {name} never became SERVING:\n{}",
                gw.log_tail(30)
            ));
        }
        Ok(gw)
    }

    /// [`spawn`](Self::spawn) for synchronous tests: also returns the runtime that started it
    /// (keep both alive; dropping the gateway kills it).
    ///
    /// # Panics
    /// If the gateway does not start.
    pub fn spawn_sync(name: &str, spec: GatewaySpec) -> (tokio::runtime::Runtime, GatewayProc) {
        let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
        let gw = rt
            .block_on(GatewayProc::spawn(name, spec))
            .unwrap_or_else(|e| panic!("{e}"));
        (rt, gw)
    }

    /// Reads the bound gRPC address from the log (`--listen 127.0.0.1:0`).
    async fn wait_listening(&mut self, within: Duration) -> Result<SocketAddr, String> {
        let deadline = Instant::now() + within;
        loop {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            for line in text.lines().filter(|l| l.contains("zkgate serving")) {
                if let Some(addr) = line
                    .split("\"grpc\":\"Some(")
                    .nth(1)
                    .and_then(|rest| rest.split(')').next())
                    .and_then(|a| a.parse().ok())
                {
                    return Ok(addr);
                }
            }
            if let Ok(Some(status)) = self.wrapper.try_wait() {
                self.state = ProcState::Dead;
                return Err(format!(
                    "gateway {} exited ({status}) before serving:\n{}",
                    self.name,
                    self.log_tail(30)
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "gateway {} did not log its address:\n{}",
                    self.name,
                    self.log_tail(30)
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn wait_logged(&self, what: &str, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        while !std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .contains(what)
        {
            if Instant::now() > deadline {
                return Err(format!(
                    "gateway {} never logged {what:?}:\n{}",
                    self.name,
                    self.log_tail(30)
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Whether the gateway answers health `SERVING` (connected to ZooKeeper) right now.
    pub async fn serving(&self) -> bool {
        let check = async {
            let ch = Endpoint::from_shared(self.url())
                .ok()?
                .connect_timeout(Duration::from_millis(500))
                .connect()
                .await
                .ok()?;
            let r = HealthClient::new(ch)
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .ok()?;
            Some(r.into_inner().status() == ServingStatus::Serving)
        };
        matches!(
            tokio::time::timeout(Duration::from_secs(1), check).await,
            Ok(Some(true))
        )
    }

    pub async fn wait_serving(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.serving().await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    fn signal(&self, sig: &str) {
        let _ = Command::new("sh")
            .args([
                "-c",
                r#"kill -s "$1" "$2""#,
                "kill",
                sig,
                &self.pid.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// SIGKILL, and waits until the process is gone.
    pub async fn kill9(&mut self) {
        if self.state == ProcState::Dead {
            return;
        }
        self.signal("KILL");
        for _ in 0..200 {
            if let Ok(Some(_)) = self.wrapper.try_wait() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.state = ProcState::Dead;
    }

    /// SIGSTOP: the process freezes with every socket open.
    pub fn freeze(&mut self) {
        if self.state == ProcState::Running {
            self.signal("STOP");
            self.state = ProcState::Stopped;
        }
    }

    /// SIGCONT.
    pub fn thaw(&mut self) {
        if self.state == ProcState::Stopped {
            self.signal("CONT");
            self.state = ProcState::Running;
        }
    }

    /// SIGTERM (graceful drain), and waits up to `within` for the exit.
    pub async fn terminate(&mut self, within: Duration) -> bool {
        if self.state == ProcState::Dead {
            return true;
        }
        self.thaw();
        self.signal("TERM");
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.wrapper.try_wait() {
                self.state = ProcState::Dead;
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// The last `n` lines of the gateway's log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    pub fn log_path(&self) -> &std::path::Path {
        &self.log
    }
}

impl Drop for GatewayProc {
    fn drop(&mut self) {
        if self.state != ProcState::Dead {
            self.signal("KILL");
            let _ = self.wrapper.wait();
        }
    }
}
