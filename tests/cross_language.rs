//! The same fleet scenarios for all five clients (clients/CONFORMANCE.md), driven through each
//! client's conformance agent against two gateway processes (`g1`, `g2`) on one ZooKeeper:
//!
//! - **kill**: language X's leader (agent `elect`, endpoints g1,g2) is SIGKILLed; the next
//!   language's waiter is elected, with a larger fencing token.
//! - **drain**: X holds a lock through g1 while the next language's Y waits; g1 is SIGTERMed
//!   (drained): X reports `lost` with reason `suspended` (a drain revokes a hold with
//!   `suspended` first, G3c) and acquires again through g2 (if Y gets there first, Y is stopped
//!   so that X can); X's and Y's reported hold intervals never overlap — the gateway keeps a
//!   drained holder's znode until X has ended its stream (which the helpers do right after
//!   reporting the loss) or its silence limit has passed, so X has reported the loss before Y
//!   can be granted; only the agents' output reaching the test out of order could show, within
//!   [`DRAIN_REACTION_BOUND`] (measured and printed as "late by") — and every grant has a
//!   larger fencing token than the one before.
//! - **freeze**: every language's agent is elected through g1 only; g1 is SIGSTOPped: every
//!   agent reports `lost` (`silence` or `suspended`) within the silence limit plus
//!   [`FREEZE_SLACK`], and no sooner than two thirds of it; after SIGCONT each is elected again.
//!
//! The ring of languages is rust → go → java → python → node → rust, over the languages whose
//! agent is present. A missing agent skips its language on a developer's machine and fails the
//! run under `CI` (the `require` pattern). The languages run each scenario side by side (one
//! election or lock per language; one kill, drain or freeze serves them all). A hold interval
//! runs from the `elected`/`acquired` line to the `lost` line, or to the SIGTERM the harness sent
//! before a `released` line (the agent gives the hold up once told to stop; its `released` line
//! comes after the gateway confirmed, possibly after the successor's grant), or to the SIGKILL.
//! Lines are timestamped as the harness reads them, and each agent's lines are checked against
//! the agent protocol as they arrive (a `lost` only for a hold — a waiter whose gateway fails
//! held nothing —, no second grant while holding, nothing after `released`).
//!
//! A per-language table of the measured times is printed at the end (to stderr, past the test
//! harness's capture).

use zkgate_testkit as support;
use zkgate_testkit::dev_process;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use dev_process::{on_path, repo, require};

const BIN: &str = env!("CARGO_BIN_EXE_zkgate");
use support::procgw::{GatewayProc, GatewaySpec};
use zkgate_testkit::localzk::LocalZkOptions;
use zkgate_testkit::wait_until;

/// The gateways' session timeout (silence limit 1.05 s).
const T: Duration = Duration::from_secs(3);
/// How long any one expected event may take (a JVM starting on a busy two-core machine).
const STEP: Duration = Duration::from_secs(30);
/// Beyond the silence limit, what a frozen gateway's leaders may take to report the loss: the
/// watchdog's timer firing late and the agent's line reaching us on a loaded two-core machine.
const FREEZE_SLACK: Duration = Duration::from_millis(2000);
/// How late a drained holder's `lost(suspended)` may come after its successor's grant. A
/// draining gateway tells the holder `suspended` and deletes its znode only once the holder
/// has ended its stream (the helpers report the loss first) or its silence limit has passed
/// (G3c), so the report always precedes the successor's grant at the agents; only the agents'
/// lines reaching this test out of order on a loaded machine could show as lateness. This
/// bound keeps such CI noise from failing the run, and the table prints the lateness ("drain:
/// late by"). Every other hand-over (SIGKILL, SIGTERM, freeze) is checked strictly.
const DRAIN_REACTION_BOUND: Duration = Duration::from_millis(1000);

/// The gateways' silence limit for [`T`], from the gateway's own timing rules.
fn silence_limit() -> Duration {
    zkgate::coord::timing::default_silence_limit(T, T)
}

// ------------------------------------------------------------------------------------ languages

/// One client's conformance agent.
struct Lang {
    name: &'static str,
    /// Whether the agent can run here; otherwise what to do about it.
    present: fn() -> Result<(), String>,
    /// The agent's command for `verb` (`elect`/`lock`), `name` and `id`.
    command: fn(verb: &str, name: &str, id: &str) -> Command,
}

/// The ring, in order: each language's successor is the next one (wrapping).
const LANGS: [Lang; 5] = [
    Lang {
        name: "rust",
        present: rust_present,
        command: rust_command,
    },
    Lang {
        name: "go",
        present: go_present,
        command: go_command,
    },
    Lang {
        name: "java",
        present: java_present,
        command: java_command,
    },
    Lang {
        name: "python",
        present: python_present,
        command: python_command,
    },
    Lang {
        name: "node",
        present: node_present,
        command: node_command,
    },
];

fn rust_present() -> Result<(), String> {
    let help = Command::new(BIN)
        .args(["elect", "--help"])
        .output()
        .map_err(|e| e.to_string())?;
    if String::from_utf8_lossy(&help.stdout).contains("--output") {
        Ok(())
    } else {
        Err("`zkgate elect` has no `--output json` yet (the Rust client's agent).".into())
    }
}

fn rust_command(verb: &str, name: &str, id: &str) -> Command {
    let mut c = Command::new(BIN);
    match verb {
        "elect" => c.args(["elect", name, "--output", "json", "--candidate", id]),
        _ => c.args(["lock", name, "--output", "json", "--requeue", "--owner", id]),
    };
    c
}

fn go_agent() -> PathBuf {
    repo().join("clients/go/bin/zkgate-agent")
}

fn go_present() -> Result<(), String> {
    if go_agent().is_file() {
        Ok(())
    } else {
        Err("Build it with `clients/go/build.sh`.".into())
    }
}

fn go_command(verb: &str, name: &str, id: &str) -> Command {
    let mut c = Command::new(go_agent());
    c.args([verb, name, "--id", id]);
    c
}

fn java_classpath() -> PathBuf {
    repo().join("clients/java/build/classpath")
}

fn java_present() -> Result<(), String> {
    if on_path("java") && java_classpath().is_file() {
        Ok(())
    } else {
        Err("Build it with `clients/java/build.sh` (needs java).".into())
    }
}

fn java_command(verb: &str, name: &str, id: &str) -> Command {
    let cp = std::fs::read_to_string(java_classpath()).unwrap_or_default();
    let mut c = Command::new("java");
    c.args([
        "-cp",
        cp.trim(),
        "io.zkgate.examples.Agent",
        verb,
        name,
        "--id",
        id,
    ]);
    c
}

fn python_present() -> Result<(), String> {
    let ok = Command::new("python3")
        .args(["-c", "import grpc, google.protobuf"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err("Install `pip install -r clients/python/requirements-dev.txt`.".into())
    }
}

fn python_command(verb: &str, name: &str, id: &str) -> Command {
    let mut c = Command::new("python3");
    c.args(["clients/python/examples/agent.py", verb, name, "--id", id])
        .env("PYTHONDONTWRITEBYTECODE", "1");
    c
}

fn node_present() -> Result<(), String> {
    let modules = repo().join("clients/node/node_modules/@grpc/grpc-js/package.json");
    if on_path("node") && modules.is_file() {
        Ok(())
    } else {
        Err("Install Node.js, then `npm ci` in clients/node.".into())
    }
}

fn node_command(verb: &str, name: &str, id: &str) -> Command {
    let mut c = Command::new("node");
    c.args(["clients/node/examples/agent.js", verb, name, "--id", id])
        .env_remove("NODE_OPTIONS");
    c
}

/// The languages whose agent is present (each missing one announced, or fatal under CI).
fn present_langs() -> Vec<&'static Lang> {
    LANGS
        .iter()
        .filter(|l| match (l.present)() {
            Ok(()) => true,
            Err(how) => require(&format!("the {} conformance agent", l.name), false, &how),
        })
        .collect()
}

// ------------------------------------------------------------------------------------ agents

#[derive(Debug, Clone, PartialEq)]
enum Ev {
    Granted {
        token: u64,
        endpoint: String,
    },
    Lost(String),
    Released,
    Error(String),
    /// A line that is not one of the agent's events (a protocol violation).
    Garbage(String),
    /// End of its output: the agent exited.
    Exited,
}

fn parse_line(line: &str) -> Ev {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
        return Ev::Garbage(line.into());
    };
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    match s("event").as_deref() {
        Some("elected" | "acquired") => {
            match (s("token").and_then(|t| t.parse().ok()), s("endpoint")) {
                (Some(token), Some(endpoint)) => Ev::Granted { token, endpoint },
                _ => Ev::Garbage(line.into()),
            }
        }
        Some("lost") => Ev::Lost(s("reason").unwrap_or_default()),
        Some("released") => Ev::Released,
        Some("error") => Ev::Error(s("message").unwrap_or_default()),
        _ => Ev::Garbage(line.into()),
    }
}

/// Starts `"$2"…` in the background, writes its pid to `$1`, and waits for it, while a watcher
/// `kill -9`s it when our pipe (its stdin) closes: no agent outlives the test, whatever ends it.
const WRAPPER: &str = r#"pidfile=$1; shift
exec 3<&0 0</dev/null
"$@" 3<&- &
pid=$!
echo "$pid" > "$pidfile.tmp" && mv "$pidfile.tmp" "$pidfile"
{ read _ignored <&3; kill -9 "$pid" 2>/dev/null; } >/dev/null 2>&1 &
watcher=$!
exec 3<&-
wait "$pid"
status=$?
kill "$watcher" 2>/dev/null
exit "$status"
"#;

type Log = Arc<(Mutex<Vec<(Instant, Ev)>>, Condvar)>;

/// One running agent: its events as they arrive, timestamped.
struct Agent {
    label: String,
    pid: u32,
    wrapper: Child,
    _lifeline: ChildStdin,
    log: Log,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
    /// When the harness sent SIGTERM / SIGKILL.
    terminated: Option<Instant>,
    killed: Option<Instant>,
}

impl Agent {
    fn start(lang: &Lang, verb: &str, name: &str, id: &str, endpoints: &[&GatewayProc]) -> Agent {
        let list: Vec<String> = endpoints.iter().map(|g| g.url()).collect();
        Self::start_with(lang, verb, name, id, &list.join(","), &[])
    }

    /// [`Agent::start`] with `ZKGATE_ENDPOINT` = `endpoints` and more environment.
    fn start_with(
        lang: &Lang,
        verb: &str,
        name: &str,
        id: &str,
        endpoints: &str,
        env: &[(&str, &str)],
    ) -> Agent {
        let dir = tempfile::Builder::new()
            .prefix("zkgate-agent-")
            .tempdir()
            .unwrap();
        let pidfile = dir.path().join("pid");
        let stderr = dir.path().join("stderr");
        let inner = (lang.command)(verb, name, id);
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(WRAPPER)
            .arg("zkgate-agent")
            .arg(&pidfile)
            .arg(inner.get_program())
            .args(inner.get_args());
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd.env("ZKGATE_ENDPOINT", endpoints)
            .envs(env.iter().copied())
            .current_dir(repo())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap());
        let mut wrapper = cmd.spawn().expect("spawn agent wrapper");
        let lifeline = wrapper.stdin.take().unwrap();
        let stdout = wrapper.stdout.take().unwrap();
        let log: Log = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let at = Instant::now();
                let (m, cv) = &*sink;
                m.lock().unwrap().push((at, parse_line(&line)));
                cv.notify_all();
            }
            let (m, cv) = &*sink;
            m.lock().unwrap().push((Instant::now(), Ev::Exited));
            cv.notify_all();
        });
        let deadline = Instant::now() + STEP;
        let pid = loop {
            if let Some(pid) = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|t| t.trim().parse().ok())
            {
                break pid;
            }
            assert!(Instant::now() < deadline, "agent wrapper wrote no pid");
            std::thread::sleep(Duration::from_millis(5));
        };
        Agent {
            label: format!("{}:{verb} {name}", lang.name),
            pid,
            wrapper,
            _lifeline: lifeline,
            log,
            stderr,
            _dir: dir,
            terminated: None,
            killed: None,
        }
    }

    fn events(&self) -> Vec<(Instant, Ev)> {
        self.log.0.lock().unwrap().clone()
    }

    fn describe(&self) -> String {
        format!(
            "{} (pid {}): events {:?}\n--- stderr ---\n{}",
            self.label,
            self.pid,
            self.events().iter().map(|(_, e)| e).collect::<Vec<_>>(),
            std::fs::read_to_string(&self.stderr).unwrap_or_default()
        )
    }

    /// Waits until the `nth` event (0-based) has arrived; returns it. Panics on an `error` or
    /// garbage line, or after [`STEP`].
    async fn next(&self, nth: usize) -> (Instant, Ev) {
        let log = self.log.clone();
        let got = tokio::task::spawn_blocking(move || wait_nth(&log, nth))
            .await
            .unwrap();
        got.unwrap_or_else(|e| {
            // The Python agent dumps every thread's stack on SIGUSR1 (faulthandler): where it
            // hangs, in the panic's stderr.
            if self.label.starts_with("python:") {
                self.signal("USR1");
                std::thread::sleep(Duration::from_millis(500));
            }
            panic!("{e} from {}", self.describe())
        })
    }

    fn signal(&self, sig: &str) {
        dev_process::signal(self.pid, sig);
    }

    fn sigkill(&mut self) -> Instant {
        let at = Instant::now();
        self.signal("KILL");
        self.killed = Some(at);
        at
    }

    /// SIGTERM, then waits for `released` and exit status 0.
    async fn terminate(&mut self) {
        // Count the events before the signal: a fast agent may answer it (and exit) before
        // the count could be read afterwards.
        let mut i = self.events().len();
        self.terminated = Some(Instant::now());
        self.signal("TERM");
        loop {
            let (_, e) = self.next(i).await;
            if e == Ev::Released {
                break;
            }
            i += 1;
        }
        let status = dev_process::wait_exit(&mut self.wrapper, STEP);
        assert!(
            status.is_some_and(|s| s.success()),
            "{} exited {status:?} after SIGTERM: {}",
            self.label,
            self.describe()
        );
    }

    /// Waits for the agent to exit by itself (a refusal it cannot retry); returns its exit
    /// status, its `error` messages and its standard error, and checks that it never held.
    async fn refused(mut self) -> (Option<std::process::ExitStatus>, String) {
        let status = dev_process::wait_exit(&mut self.wrapper, STEP);
        let evs = self.events();
        assert!(
            !evs.iter().any(|(_, e)| matches!(e, Ev::Granted { .. })),
            "{} was granted: {}",
            self.label,
            self.describe()
        );
        let mut said: String = evs
            .iter()
            .filter_map(|(_, e)| match e {
                Ev::Error(m) => Some(m.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        said += &std::fs::read_to_string(&self.stderr).unwrap_or_default();
        (status, said)
    }

    /// The hold intervals this agent reported.
    fn holds(&self) -> Vec<Hold> {
        let mut out = Vec::new();
        let mut open: Option<(Instant, u64)> = None;
        for (at, e) in &self.events() {
            match e {
                Ev::Granted { token, .. } => open = Some((*at, *token)),
                Ev::Lost(_) | Ev::Released => {
                    if let Some((granted, token)) = open.take() {
                        let by_loss = matches!(e, Ev::Lost(_));
                        // Told to stop, the agent stops acting as holder at once; its `released`
                        // line follows the gateway's confirmation.
                        let end = if by_loss {
                            *at
                        } else {
                            self.terminated.unwrap_or(*at).min(*at)
                        };
                        out.push(Hold {
                            granted,
                            token,
                            end,
                            by_loss,
                            who: self.label.clone(),
                        });
                    }
                }
                _ => {}
            }
        }
        if let Some((granted, token)) = open {
            let end = self.killed.or(self.terminated).unwrap_or_else(Instant::now);
            out.push(Hold {
                granted,
                token,
                end,
                by_loss: false,
                who: self.label.clone(),
            });
        }
        out
    }
}

/// One reported hold: from the grant line to its end (see the module doc).
#[derive(Debug)]
struct Hold {
    granted: Instant,
    token: u64,
    end: Instant,
    /// Ended by the agent's own `lost` line (not by the harness's SIGTERM or SIGKILL).
    by_loss: bool,
    who: String,
}

/// The agent's protocol (CONFORMANCE.md): a loss is reported once per grant, and only for a hold
/// (a waiter whose gateway fails held nothing); no second grant while holding; nothing after
/// `released`.
fn protocol(evs: &[(Instant, Ev)]) -> Result<(), String> {
    let mut holding = false;
    let mut released = false;
    for (i, (_, e)) in evs.iter().enumerate() {
        let bad = |what: &str| Err(format!("protocol violation at event #{i} ({e:?}): {what}"));
        if released && *e != Ev::Exited {
            return bad("an event after `released`");
        }
        match e {
            Ev::Granted { .. } if holding => return bad("a second grant without a loss"),
            Ev::Granted { .. } => holding = true,
            Ev::Lost(_) if !holding => return bad("`lost` without a hold (a waiter held nothing)"),
            Ev::Lost(_) => holding = false,
            Ev::Released => released = true,
            _ => {}
        }
    }
    Ok(())
}

/// Blocks until event `nth` is in `log`: the event, or what went wrong.
fn wait_nth(log: &Log, nth: usize) -> Result<(Instant, Ev), String> {
    let deadline = Instant::now() + STEP;
    let (m, cv) = &**log;
    let mut evs = m.lock().unwrap();
    loop {
        if let Some((_, e)) = evs
            .iter()
            .find(|(_, e)| matches!(e, Ev::Error(_) | Ev::Garbage(_)))
        {
            return Err(format!("{e:?}"));
        }
        protocol(&evs)?;
        if let Some(ev) = evs.get(nth) {
            if ev.1 == Ev::Exited {
                return Err(format!("the agent exited before event #{nth}"));
            }
            return Ok(ev.clone());
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(format!("no event #{nth} within {STEP:?}"));
        }
        evs = cv.wait_timeout(evs, deadline - now).unwrap().0;
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Ok(None) = self.wrapper.try_wait() {
            let _ = zkgate_localzk::process::send_signal(self.pid, "KILL");
            let _ = self.wrapper.wait();
        }
    }
}

// ------------------------------------------------------------------------------------ fleet

struct Fleet {
    zk: String,
    root: String,
    g1: GatewayProc,
    g2: GatewayProc,
}

impl Fleet {
    async fn start() -> Fleet {
        let zk = support::shared_standalone(LocalZkOptions::default);
        let root = support::named_root("x");
        let g1 = gateway("g1", &zk, &root).await;
        let g2 = gateway("g2", &zk, &root).await;
        Fleet { zk, root, g1, g2 }
    }

    /// A new g1 (after a drain): same ZooKeeper and root, a new port.
    async fn restart_g1(&mut self) {
        self.g1 = gateway("g1", &self.zk, &self.root).await;
    }
}

async fn gateway(name: &str, zk: &str, root: &str) -> GatewayProc {
    GatewayProc::spawn(name, GatewaySpec::binary(BIN, zk, root, T))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A client (the Rust client crate) of `gw` alone.
async fn client_of(gw: &GatewayProc) -> zkgate_client::Client {
    zkgate_client::Client::connect(zkgate_client::Endpoints::new([gw.url()]).unwrap())
        .await
        .unwrap()
}

/// Waits until `election`'s queue has `n` members (through `gw`'s `Candidates`).
async fn wait_candidates(gw: &GatewayProc, election: &str, n: u32) {
    let c = client_of(gw).await;
    wait_until(
        &format!("{election} to have {n} candidates"),
        STEP,
        || async {
            c.candidates(election)
                .await
                .is_ok_and(|v| v.len() == n as usize)
        },
    )
    .await;
}

/// Waits until lock `name` has `n` waiters (through `gw`'s `Holders`).
async fn wait_waiters(gw: &GatewayProc, name: &str, n: u32) {
    let c = client_of(gw).await;
    wait_until(
        &format!("lock {name} to have {n} waiters"),
        STEP,
        || async { c.holders(name).await.is_ok_and(|h| h.waiting == n) },
    )
    .await;
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// Measured times, per language and column.
type Table = BTreeMap<&'static str, BTreeMap<&'static str, String>>;

// ------------------------------------------------------------------------------------ scenarios

/// (a) Each language's leader is SIGKILLed; the next language's waiter takes over.
async fn kill(fleet: &Fleet, langs: &[&'static Lang], table: &mut Table) {
    let gws = [&fleet.g1, &fleet.g2];
    let n = langs.len();
    let election = |i: usize| format!("kill-{}", langs[i].name);
    let mut leaders: Vec<Agent> = (0..n)
        .map(|i| {
            Agent::start(
                langs[i],
                "elect",
                &election(i),
                &format!("{}-leader", langs[i].name),
                &gws,
            )
        })
        .collect();
    let mut first_tokens = Vec::new();
    for a in &leaders {
        match a.next(0).await.1 {
            Ev::Granted { token, endpoint } => {
                assert_eq!(
                    endpoint,
                    fleet.g1.url(),
                    "the first endpoint is tried first"
                );
                first_tokens.push(token);
            }
            e => panic!("{e:?}: {}", a.describe()),
        }
    }
    // The successor of language i's leader is language i+1's waiter.
    let mut waiters: Vec<Agent> = (0..n)
        .map(|i| {
            let next = langs[(i + 1) % n];
            Agent::start(
                next,
                "elect",
                &election(i),
                &format!("{}-waiter", next.name),
                &gws,
            )
        })
        .collect();
    for i in 0..n {
        wait_candidates(&fleet.g2, &election(i), 2).await;
    }
    let killed: Vec<Instant> = leaders.iter_mut().map(Agent::sigkill).collect();
    for i in 0..n {
        let (at, e) = waiters[i].next(0).await;
        let Ev::Granted { token, .. } = e else {
            panic!("{e:?}: {}", waiters[i].describe())
        };
        assert!(
            token > first_tokens[i],
            "{} took over {} with token {token} <= {}",
            waiters[i].label,
            leaders[i].label,
            first_tokens[i]
        );
        let next = langs[(i + 1) % n].name;
        table
            .entry(next)
            .or_default()
            .insert("kill: took over after", ms(at - killed[i]));
        // Nobody else was ever reported leader of this election in between.
        assert_eq!(leaders[i].holds().len(), 1, "{}", leaders[i].describe());
    }
    for w in &mut waiters {
        w.terminate().await;
    }
}

/// (b) g1 drains under each language's lock holder while the next language waits.
async fn drain(fleet: &mut Fleet, langs: &[&'static Lang], table: &mut Table) {
    let n = langs.len();
    let lock = |i: usize| format!("drain-{}", langs[i].name);
    let g1_url = fleet.g1.url();
    let g2_url = fleet.g2.url();
    let mut xs: Vec<Agent> = Vec::new();
    let mut ys: Vec<Agent> = Vec::new();
    {
        let gws = [&fleet.g1, &fleet.g2];
        for (i, l) in langs.iter().enumerate() {
            xs.push(Agent::start(
                l,
                "lock",
                &lock(i),
                &format!("{}-x", l.name),
                &gws,
            ));
        }
        for x in &xs {
            match x.next(0).await.1 {
                Ev::Granted { endpoint, .. } => assert_eq!(endpoint, g1_url),
                e => panic!("{e:?}: {}", x.describe()),
            }
        }
        for i in 0..n {
            let next = langs[(i + 1) % n];
            ys.push(Agent::start(
                next,
                "lock",
                &lock(i),
                &format!("{}-y", next.name),
                &gws,
            ));
        }
        for i in 0..n {
            wait_waiters(&fleet.g2, &lock(i), 1).await;
        }
    }
    let drained = Instant::now();
    assert!(
        fleet.g1.terminate(Duration::from_secs(20)).await,
        "g1 did not exit after SIGTERM:\n{}",
        fleet.g1.log_tail(20)
    );
    for i in 0..n {
        let (x, y) = (&mut xs[i], &mut ys[i]);
        let (lost_at, e) = x.next(1).await;
        // A drain revokes the hold with `suspended` first (G3c).
        assert_eq!(e, Ev::Lost("suspended".into()), "{}", x.describe());
        // Whoever reaches g2 first gets the lock; if it is Y, Y stops so that X can show its
        // re-acquisition (and Y its own failover as a waiter).
        loop {
            let x_evs = x.events();
            if x_evs.len() > 2 {
                break;
            }
            if y.terminated.is_none() {
                if let Some((_, Ev::Granted { endpoint, .. })) = y.events().first() {
                    assert_eq!(endpoint, &g2_url, "{}", y.describe());
                    y.terminate().await;
                    continue;
                }
                if let Err(e) = protocol(&y.events()) {
                    panic!("{e}: {}", y.describe());
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            assert!(
                Instant::now() < drained + STEP,
                "{}\n{}",
                x.describe(),
                y.describe()
            );
        }
        let (again_at, e) = x.next(2).await;
        match e {
            Ev::Granted { endpoint, .. } => assert_eq!(endpoint, g2_url, "{}", x.describe()),
            e => panic!("{e:?}: {}", x.describe()),
        }
        let row = table.entry(langs[i].name).or_default();
        row.insert("drain: lost after", ms(lost_at - drained));
        row.insert("drain: re-acquired after", ms(again_at - drained));
    }
    for i in 0..n {
        xs[i].terminate().await;
        if ys[i].terminated.is_none() {
            // Y gets the lock once X released it (through g2: g1 is gone).
            let (_, e) = ys[i].next(0).await;
            assert!(matches!(e, Ev::Granted { .. }), "{}", ys[i].describe());
            ys[i].terminate().await;
        }
        // The reported holds of X and Y never overlap, and tokens grow grant after grant. One
        // exception, bounded: see DRAIN_REACTION_BOUND.
        let mut holds: Vec<Hold> = xs[i].holds();
        holds.extend(ys[i].holds());
        holds.sort_by_key(|h| h.granted);
        let mut overlap = Duration::ZERO;
        for w in holds.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            let over = a.end.saturating_duration_since(b.granted);
            let allowed = if a.by_loss {
                DRAIN_REACTION_BOUND
            } else {
                Duration::ZERO
            };
            assert!(
                over <= allowed,
                "overlapping holds of lock {}: {} until +{:?} and {} from +{:?} \
                 (allowed: {allowed:?})\n{}\n{}",
                lock(i),
                a.who,
                a.end.saturating_duration_since(drained),
                b.who,
                b.granted.saturating_duration_since(drained),
                xs[i].describe(),
                ys[i].describe()
            );
            overlap = overlap.max(over);
            assert!(b.token > a.token, "fencing tokens did not grow: {holds:?}");
        }
        table
            .entry(langs[i].name)
            .or_default()
            .insert("drain: late by", ms(overlap));
    }
    fleet.restart_g1().await;
}

/// (c) g1 freezes under every language's leader.
async fn freeze(fleet: &mut Fleet, langs: &[&'static Lang], table: &mut Table) {
    let limit = silence_limit();
    let mut agents: Vec<Agent> = langs
        .iter()
        .map(|l| {
            Agent::start(
                l,
                "elect",
                &format!("freeze-{}", l.name),
                &format!("{}-f", l.name),
                &[&fleet.g1],
            )
        })
        .collect();
    let mut tokens = Vec::new();
    for a in &agents {
        match a.next(0).await.1 {
            Ev::Granted { token, .. } => tokens.push(token),
            e => panic!("{e:?}: {}", a.describe()),
        }
    }
    let frozen = Instant::now();
    fleet.g1.freeze();
    let mut waited = Vec::new();
    let outcome: Result<(), String> = async {
        for a in &agents {
            let (at, e) = a.next(1).await;
            let Ev::Lost(reason) = e else {
                return Err(format!("{e:?}: {}", a.describe()));
            };
            if reason != "silence" && reason != "suspended" {
                return Err(format!("lost({reason}) on a freeze: {}", a.describe()));
            }
            waited.push((at - frozen, reason));
        }
        Ok(())
    }
    .await;
    fleet.g1.thaw();
    outcome.unwrap_or_else(|e| panic!("{e}"));
    for (i, l) in langs.iter().enumerate() {
        let (w, reason) = &waited[i];
        table
            .entry(l.name)
            .or_default()
            .insert("freeze: lost after", format!("{} ({reason})", ms(*w)));
    }
    for (i, (w, _)) in waited.iter().enumerate() {
        // Heartbeats come at least every limit/3, so the watchdog cannot fire sooner than
        // 2/3 of the limit after the freeze; it must fire within the limit plus the slack.
        assert!(
            *w >= limit * 2 / 3 && *w <= limit + FREEZE_SLACK,
            "{}: lost {w:?} after the freeze (silence limit {limit:?}, slack {FREEZE_SLACK:?})",
            agents[i].label
        );
    }
    // Thawed, every agent campaigns again (through g1, its only endpoint) and is elected.
    for (i, a) in agents.iter().enumerate() {
        match a.next(2).await.1 {
            Ev::Granted { token, .. } => assert!(token > tokens[i], "{}", a.describe()),
            e => panic!("{e:?}: {}", a.describe()),
        }
    }
    for a in &mut agents {
        a.terminate().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_clients_fail_over_alike_on_kill_drain_and_freeze() {
    if !dev_process::DevGateway::available() {
        return;
    }
    let langs = present_langs();
    if langs.len() < 2 {
        require("at least two conformance agents", false, "See above.");
        return;
    }
    let _serial = support::serial().lock().await;
    let started = Instant::now();
    let mut fleet = Fleet::start().await;
    let mut table = Table::new();
    let t = Instant::now();
    kill(&fleet, &langs, &mut table).await;
    let kill_took = t.elapsed();
    let t = Instant::now();
    drain(&mut fleet, &langs, &mut table).await;
    let drain_took = t.elapsed();
    let t = Instant::now();
    freeze(&mut fleet, &langs, &mut table).await;
    let freeze_took = t.elapsed();

    let columns = [
        "kill: took over after",
        "drain: lost after",
        "drain: re-acquired after",
        "drain: late by",
        "freeze: lost after",
    ];
    let mut out = format!(
        "\ncross-language fleet scenarios (session timeout {T:?}, silence limit {:?}); \
         kill {}, drain {}, freeze {}, all {}\n{:<8}",
        silence_limit(),
        ms(kill_took),
        ms(drain_took),
        ms(freeze_took),
        ms(started.elapsed()),
        "client"
    );
    for c in columns {
        out += &format!(" | {c:<26}");
    }
    out.push('\n');
    for l in &langs {
        out += &format!("{:<8}", l.name);
        for c in columns {
            let v = table
                .get(l.name)
                .and_then(|r| r.get(c))
                .cloned()
                .unwrap_or_default();
            out += &format!(" | {v:<26}");
        }
        out.push('\n');
    }
    let _ = writeln!(std::io::stderr(), "{out}");
}

/// Tokens in every client (CONFORMANCE.md "Tokens"): against a gateway with a policy, each
/// language's agent, given its tenant's token in `ZKGATE_TOKEN` and a fleet whose first
/// endpoint is down, fails over to the live one and is elected there on its tenant's name —
/// the token rides on the failover's new connection too; on another tenant's name it is
/// refused `PERMISSION_DENIED`; with a token the policy does not know, `UNAUTHENTICATED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_client_sends_its_token_also_after_a_failover() {
    let langs = present_langs();
    if langs.is_empty() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    let hash: String = ring::digest::digest(&ring::digest::SHA256, b"tenant-token")
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::write(
        &policy,
        format!(
            "[[token]]\nidentity = \"tenant\"\nsha256 = \"{hash}\"\n\
             [[allow]]\nidentity = \"tenant\"\nnames = [\"tenant.*\"]\nverbs = [\"campaign\", \"lock\", \"observe\"]\n"
        ),
    )
    .unwrap();
    let zk = support::shared_standalone(LocalZkOptions::default);
    let mut spec = GatewaySpec::binary(BIN, &zk, &support::named_root("tok"), T);
    spec.extra = vec!["--auth-policy".into(), policy.display().to_string()];
    let gw = GatewayProc::spawn("g", spec)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // A port nobody listens on, first in the list: every client starts there and fails over.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_port = dead.local_addr().unwrap().port();
    drop(dead);
    let fleet = format!("http://127.0.0.1:{dead_port},{}", gw.url());
    let good = [("ZKGATE_TOKEN", "tenant-token")];
    let bad = [("ZKGATE_TOKEN", "not-a-token")];

    let mut allowed: Vec<Agent> = langs
        .iter()
        .map(|l| {
            let name = format!("tenant.{}", l.name);
            Agent::start_with(l, "elect", &name, &format!("{}-t", l.name), &fleet, &good)
        })
        .collect();
    for a in &allowed {
        match a.next(0).await.1 {
            Ev::Granted { endpoint, .. } => {
                assert_eq!(endpoint.trim_end_matches('/'), gw.url(), "{}", a.describe())
            }
            other => panic!("expected elected, got {other:?}: {}", a.describe()),
        }
    }
    let denied: Vec<Agent> = langs
        .iter()
        .map(|l| {
            let name = format!("other.{}", l.name);
            Agent::start_with(l, "elect", &name, &format!("{}-d", l.name), &fleet, &good)
        })
        .collect();
    let unauthenticated: Vec<Agent> = langs
        .iter()
        .map(|l| {
            let name = format!("tenant.{}.x", l.name);
            Agent::start_with(l, "elect", &name, &format!("{}-u", l.name), &fleet, &bad)
        })
        .collect();
    for (agents, says) in [
        (
            denied,
            ["PERMISSION_DENIED", "PermissionDenied", "permission denied"],
        ),
        (
            unauthenticated,
            ["UNAUTHENTICATED", "Unauthenticated", "matches no [[token]]"],
        ),
    ] {
        for a in agents {
            let label = a.label.clone();
            let (status, said) = a.refused().await;
            assert!(
                status.is_some_and(|s| !s.success()),
                "{label} exits with an error, not {status:?}: {said}"
            );
            assert!(
                says.iter().any(|w| said.contains(w)),
                "{label} says one of {says:?}: {said}"
            );
        }
    }
    for a in &mut allowed {
        a.terminate().await;
    }
}

/// `zkgate_holder_pings_total{result="answered"}` on an in-process gateway's /metrics.
async fn answered_pings(gw: &support::Gateway) -> u64 {
    let body = support::scrape_metrics(gw.http).await;
    support::metric_value(
        &body,
        "zkgate_holder_pings_total",
        &[("result", "answered")],
    )
}

/// Every helper holds on the lease of its own clock (clients/CONFORMANCE.md "The lease on the
/// holder's own clock"): its join carries ping 1, so the gateway sends it no unsolicited
/// heartbeats, and it keeps leading for three silence limits only because it pings and the
/// gateway answers (a helper that announced ping 1 and then did not ping would lose by silence
/// within one). The gateway's count of answered pings grows by each helper's own while it
/// leads alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_holds_on_its_answered_pings() {
    let langs = present_langs();
    if langs.is_empty() {
        return;
    }
    let zk = support::shared_standalone(LocalZkOptions::default);
    let gw = support::Gateway::start(&zk).await;
    let t = support::GatewayOpts::default().session_timeout;
    let limit = zkgate::coord::timing::default_silence_limit(t, t);
    for l in langs {
        let before = answered_pings(&gw).await;
        let name = format!("pings.{}", l.name);
        let mut a = Agent::start_with(l, "elect", &name, &format!("{}-p", l.name), &gw.url(), &[]);
        match a.next(0).await.1 {
            Ev::Granted { .. } => {}
            other => panic!("expected elected, got {other:?}: {}", a.describe()),
        }
        tokio::time::sleep(limit * 3).await;
        let events = a.events();
        assert_eq!(events.len(), 1, "{} still leads: {}", l.name, a.describe());
        let answered = answered_pings(&gw).await - before;
        eprintln!("{}: {answered} pings answered in {:?}", l.name, limit * 3);
        // Every quarter of the limit: about 12; at least one per limit to have held.
        assert!(answered >= 3, "{}: only {answered} pings answered", l.name);
        a.terminate().await;
    }
}
