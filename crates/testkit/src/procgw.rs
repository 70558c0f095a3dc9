//! A gateway in a child process, so it can be SIGKILLed, SIGSTOPped and SIGCONTed.
//!
//! Tests run the real binary (`zkgate serve …`); the soak example runs itself in gateway mode
//! (examples do not get the binary's path). Either way the process is started through a small
//! `sh` wrapper holding a pipe from us, [`zkgate_localzk::TiedChild`], as for ZooKeeper: when
//! this process dies for any reason the pipe closes and the wrapper `kill -9`s the gateway, so
//! no gateway outlives its test.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tonic::transport::Endpoint;
pub use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use zkgate_localzk::TiedChild;

/// How to start a gateway.
#[derive(Debug, Clone)]
pub struct GatewaySpec {
    /// Program and leading arguments, e.g. `[zkgate, serve]`.
    pub command: Vec<OsString>,
    /// ZooKeeper connect string (possibly link cutters).
    pub zk: String,
    pub root: String,
    pub session_timeout: Duration,
    /// `--zk-tick-time`: the harness's tick (250 ms) by default; `None` leaves it unstated,
    /// as an operator who does not know it would (the gateway then assumes T/2).
    pub zk_tick_time: Option<Duration>,
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
            zk_tick_time: Some(HARNESS_TICK),
            extra: Vec::new(),
            env: Vec::new(),
        }
    }
}

/// The lease key of every test fleet ([`GatewayProc`] passes it as `--lease-key-file` unless
/// the spec names one). Public, so a test must never rely on it being secret.
pub const TEST_FLEET_LEASE_KEY: &str =
    "7a6b6761746520746573742066656c6c6f77206b657920e28094206e6f7420736563726574\n";

/// The tick every ZooKeeper of the suite runs with unless a test says otherwise
/// (`LocalZkOptions::default`).
pub const HARNESS_TICK: Duration = Duration::from_millis(250);

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
    child: TiedChild,
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
        let gw = Self::spawn_listening(name, spec).await?;
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

    /// [`spawn`](Self::spawn) without waiting for the gateway to serve: returns once it
    /// listens, for a test of a gateway that must never get a ZooKeeper session.
    ///
    /// # Errors
    /// A sentence with the end of the gateway's log.
    pub async fn spawn_listening(name: &str, spec: GatewaySpec) -> Result<GatewayProc, String> {
        let dir = tempfile::Builder::new()
            .prefix("zkgate-gw-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let log = dir.path().join("gateway.log");
        let log_file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let (program, args) = spec
            .command
            .split_first()
            .ok_or("GatewaySpec::command is empty")?;
        let mut cmd = TiedChild::command("zkgate-gateway", program, None);
        cmd.args(args);
        cmd.args(["--log-json", "--zk", &spec.zk, "--root", &spec.root]);
        cmd.args(["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"]);
        if let Some(tick) = spec.zk_tick_time {
            cmd.arg("--zk-tick-time")
                .arg(format!("{}ms", tick.as_millis()));
        }
        cmd.arg("--session-timeout")
            .arg(format!("{}ms", spec.session_timeout.as_millis()));
        cmd.args(&spec.extra);
        // One fleet, one lease key: every gateway process of a test honours the others'
        // leases (by-lease resign/release across gateways), unless the test chose a key.
        let chose_key = spec.extra.iter().any(|a| a.starts_with("--lease-key-file"))
            || spec.env.iter().any(|(k, _)| k == "ZKGATE_LEASE_KEY_FILE");
        if !chose_key {
            let keys = dir.path().join("lease.keys");
            std::fs::write(&keys, TEST_FLEET_LEASE_KEY).map_err(|e| e.to_string())?;
            cmd.arg("--lease-key-file").arg(&keys);
        }
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
        cmd.stderr(log_file);
        let child = TiedChild::spawn(cmd)
            .await
            .map_err(|e| format!("spawning gateway: {e}"))?;
        let mut gw = GatewayProc {
            name: name.into(),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            pid: child.pid(),
            spec,
            state: ProcState::Running,
            child,
            log,
            _dir: dir,
        };
        gw.addr = gw.wait_listening(Duration::from_secs(20)).await?;
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
            if let Some(status) = self.child.try_wait() {
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

    pub async fn wait_logged(&self, what: &str, within: Duration) -> Result<(), String> {
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
    /// One health answer (the whole server's), if the gateway gives it within `within`; `None`
    /// if it could not be reached or did not answer in time. Loaded machines answer late, so a
    /// check that the gateway serves should allow seconds and look at the answer itself.
    pub async fn health(&self, within: Duration) -> Option<ServingStatus> {
        let check = async {
            let ch = Endpoint::from_shared(self.url())
                .ok()?
                .connect_timeout(within)
                .connect()
                .await
                .ok()?;
            let r = HealthClient::new(ch)
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .ok()?;
            Some(r.into_inner().status())
        };
        tokio::time::timeout(within, check).await.ok().flatten()
    }

    /// Answers `SERVING` within a second.
    pub async fn serving(&self) -> bool {
        self.health(Duration::from_secs(1)).await == Some(ServingStatus::Serving)
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
        let _ = self.child.signal(sig);
    }

    /// SIGKILL, and waits until the process is gone.
    pub async fn kill9(&mut self) {
        if self.state == ProcState::Dead {
            return;
        }
        self.signal("KILL");
        for _ in 0..200 {
            if self.child.exited() {
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
            if self.child.exited() {
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
            let _ = self.child.wait();
        }
        // A long run's logs outlive the process when asked (the soak's forensics: which
        // session held a member that nobody was granted after).
        if let Some(dir) = std::env::var_os("ZKGATE_KEEP_GATEWAY_LOGS") {
            let dir = PathBuf::from(dir);
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::copy(
                &self.log,
                dir.join(format!("{}-{}.log", self.name, self.pid)),
            );
        }
    }
}
