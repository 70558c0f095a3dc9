//! The Prometheus side of contract "Observability": the example config and alert rules pass `promtool` (and the
//! rules' own unit tests), the Grafana dashboard is well formed and queries only metrics the
//! gateway exports, the exposition passes `promtool check metrics`, and a real Prometheus
//! scraping an in-process gateway sees a campaign's churn, the failover, and evaluates every
//! rule and dashboard query without error.
//!
//! `promtool` and `prometheus` come from the Debian package `prometheus`. Without them these
//! tests fail when `CI` is set, and are skipped with a loud message otherwise.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zkgate::metrics as m;
use zkgate::metrics::{
    CONTRACT_METRICS, ELECTION_GAUGES, HISTOGRAMS, NAME_METRICS, ZK_FAULT_METRICS,
};
use zkgate_testkit::*;

/// How long Prometheus may take to start, scrape and evaluate what a test expects.
const PROMETHEUS_WAIT: Duration = Duration::from_secs(30);

/// The metrics recorder is process-global: tests here that run a gateway take this first, so
/// one test's leaders and failovers do not show up in another's unlabelled counters.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The path of an installed tool. Missing: a failure under CI, else a loud skip (`None`).
fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
        assert!(
            !ci,
            "`{name}` is not installed: CI must install the Debian package `prometheus`"
        );
        // Straight to the process's stderr: the test harness captures `eprintln!` of passing
        // tests, and a skip must be seen.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "\n******** SKIPPED: `{name}` is not installed (apt-get install -y prometheus); \
             this test checks nothing without it ********\n"
        );
    }
    found
}

/// Runs a command to completion and fails with its output unless it succeeded.
fn run_ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

// ---------------------------------------------------------------------------------------------
// Metric names used by a file, checked against src/metrics.rs.

/// Every `zkgate_…` metric name in `text`, with histogram series suffixes folded onto their
/// histogram (`zkgate_failover_seconds_bucket` → `zkgate_failover_seconds`).
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("zkgate_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let folded = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|base| HISTOGRAMS.contains(base))
            })
            .unwrap_or(name);
        names.insert(folded.to_owned());
        rest = &tail[end..];
    }
    names
}

fn assert_known_metrics(file: &str, names: &BTreeSet<String>) {
    let unknown: Vec<&String> = names
        .iter()
        .filter(|n| {
            !CONTRACT_METRICS.contains(&n.as_str())
                && !ELECTION_GAUGES.contains(&n.as_str())
                && !NAME_METRICS.contains(&n.as_str())
                && !ZK_FAULT_METRICS.contains(&n.as_str())
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "{file} uses metrics the gateway does not export: {unknown:?}"
    );
}

#[test]
fn alert_rules_use_only_exported_metrics() {
    let rules = std::fs::read_to_string(repo("deploy/prometheus/zkgate-rules.yml")).unwrap();
    let names = metric_names(&rules);
    assert_known_metrics("zkgate-rules.yml", &names);
    for needed in [
        m::LEADER_CHANGES,
        m::LEADER_TENURE,
        m::ELECTION_CANDIDATES,
        m::ELECTION_LEADERS,
        m::ZK_CONNECTED,
        m::ZK_SESSION_EXPIRATIONS,
        m::FAILOVER,
    ] {
        assert!(names.contains(needed), "no rule uses {needed}");
    }
    for alert in [
        "ZkgateLeaderFlapping",
        "ZkgateElectionLeaderless",
        "ZkgateElectionLabelCapReached",
        "ZkgateZooKeeperDisconnected",
        "ZkgateSessionExpired",
        "ZkgateZooKeeperServerDiverged",
        "ZkgateGatewayStranded",
        "ZkgateFailoverSlow",
        "ZkgateLongWaits",
        "ZkgateWaitersPilingUp",
    ] {
        assert!(
            rules.contains(&format!("alert: {alert}\n")),
            "rule {alert} is missing"
        );
        let doc = std::fs::read_to_string(repo("docs/observability.md")).unwrap();
        assert!(
            doc.contains(alert),
            "docs/observability.md does not explain {alert}"
        );
    }
}

#[test]
fn grafana_dashboard_is_well_formed_and_queries_exported_metrics() {
    let path = repo("deploy/grafana/zkgate-dashboard.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let dash: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    assert_eq!(dash["title"], "zkgate");
    assert!(dash["uid"].as_str().is_some_and(|u| !u.is_empty()));
    assert!(dash["schemaVersion"].as_u64().is_some());
    let vars: Vec<&str> = dash["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for v in ["datasource", "job", "instance"] {
        assert!(vars.contains(&v), "dashboard variable ${v} is missing");
    }

    let panels = dash["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    let mut all_exprs = String::new();
    let mut titles = Vec::new();
    for p in panels {
        let id = p["id"].as_u64().expect("every panel has a numeric id");
        assert!(ids.insert(id), "panel id {id} is used twice");
        let title = p["title"].as_str().expect("every panel has a title");
        for k in ["x", "y", "w", "h"] {
            assert!(p["gridPos"][k].as_u64().is_some(), "{title}: gridPos.{k}");
        }
        if p["type"] == "row" {
            continue;
        }
        titles.push(title.to_owned());
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {title} has no query");
        for t in targets {
            let expr = t["expr"].as_str().expect("every target has an expr");
            assert!(
                expr.contains("zkgate_"),
                "{title}: {expr} queries no zkgate metric"
            );
            assert!(
                expr.contains("job=\"$job\"") && expr.contains("instance=~\"$instance\""),
                "{title}: {expr} ignores the $job/$instance variables"
            );
            assert_eq!(
                expr.matches('(').count(),
                expr.matches(')').count(),
                "{title}: unbalanced parentheses in {expr}"
            );
            all_exprs.push_str(expr);
            all_exprs.push('\n');
        }
    }
    let names = metric_names(&all_exprs);
    assert_known_metrics("zkgate-dashboard.json", &names);
    // What the dashboard is for: churn, tenure, failover, queue depth, lock wait, ZooKeeper
    // latency and connection, gRPC errors by code.
    for needed in [
        m::LEADER_CHANGES,
        m::LEADER_TENURE,
        m::FAILOVER,
        m::CAMPAIGNS_ACTIVE,
        m::ELECTION_CANDIDATES,
        m::ELECTION_LEADERS,
        m::LOCK_WAIT,
        m::ZK_REQUEST_DURATION,
        m::ZK_CONNECTED,
        m::GRPC_REQUESTS,
        m::NAME_WAIT,
        m::NAME_WAITERS,
        m::NAME_HOLD,
    ] {
        assert!(names.contains(needed), "no panel shows {needed}");
    }
    assert!(
        all_exprs
            .contains("histogram_quantile(0.99, sum by (le) (rate(zkgate_failover_seconds_bucket"),
        "failover p99 panel"
    );
    assert!(
        all_exprs.contains("sum by (code)"),
        "gRPC results by code panel"
    );
}

/// The dashboard's queries with its variables filled in, for a real Prometheus.
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo("deploy/grafana/zkgate-dashboard.json")).unwrap();
    let dash: Value = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "1m")
                .replace("$job", "zkgate")
                .replace("$instance", ".*");
            out.push((p["title"].as_str().unwrap().to_owned(), expr));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// promtool

#[test]
fn promtool_accepts_the_config_and_rules_and_the_rule_tests_pass() {
    let Some(promtool) = tool("promtool") else {
        return;
    };
    let dir = repo("deploy/prometheus");
    run_ok(
        Command::new(&promtool)
            .current_dir(&dir)
            .args(["check", "rules", "zkgate-rules.yml"]),
    );
    run_ok(
        Command::new(&promtool)
            .current_dir(&dir)
            .args(["check", "config", "prometheus.yml"]),
    );
    run_ok(Command::new(&promtool).current_dir(&dir).args([
        "test",
        "rules",
        "zkgate-rules.test.yml",
    ]));
}

#[tokio::test]
async fn promtool_accepts_the_metrics_exposition() {
    let Some(promtool) = tool("promtool") else {
        return;
    };
    let _serial = serial().await;
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    // Touch the labelled metrics too: a leader, a failover, a NOT_FOUND.
    let mut c = gw.client().await;
    let mut a = Campaign::join(&mut c, "lint", "a", b"").await;
    a.elected().await;
    let mut b = Campaign::join(&mut c, "lint", "b", b"").await;
    drop(a);
    b.elected().await;
    let _ = c
        .leader(zkgate::proto::LeaderRequest {
            election: "lint-empty".into(),
        })
        .await;
    let (status, body) = http_get(gw.http, "/metrics").await;
    assert_eq!(status, 200);
    for name in CONTRACT_METRICS.iter().chain(ELECTION_GAUGES) {
        assert!(
            body.contains(&format!("# HELP {name} ")),
            "no HELP for {name}"
        );
    }

    let mut child = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start promtool");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(body.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool check metrics found problems:\n{report}\n--- exposition ---\n{body}"
    );
    drop(b);
    gw.stop().await;
}

// ---------------------------------------------------------------------------------------------
// A real Prometheus

/// A Prometheus server of the test's own, killed when dropped (also when the test panics).
struct Prometheus {
    child: Child,
    url_addr: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` every second and evaluating the zkgate rules every
    /// second; waits until it is ready.
    async fn start(binary: &Path, target: SocketAddr) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        let rules = repo("deploy/prometheus/zkgate-rules.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {rules}\n\
                 scrape_configs:\n  - job_name: zkgate\n    static_configs:\n      - targets: ['{target}']\n",
                rules = rules.display()
            ),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let log = dir.path().join("prometheus.log");
        let log_file = std::fs::File::create(&log).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .args([
                "--storage.tsdb.retention.time=1h",
                "--query.max-concurrency=2",
                "--web.max-connections=32",
                "--log.level=warn",
            ])
            // Small machine, shared: one OS thread for Go code, a lazier GC.
            .env("GOMAXPROCS", "1")
            .env("GOGC", "200")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("start prometheus");
        let mut prom = Prometheus {
            child,
            url_addr: addr,
            log,
            _dir: dir,
        };
        let deadline = tokio::time::Instant::now() + PROMETHEUS_WAIT;
        loop {
            if let Ok(Some(status)) = prom.child.try_wait() {
                panic!("prometheus exited with {status}:\n{}", prom.log_tail());
            }
            if let Ok((200, _)) = try_http_get(addr, "/-/ready").await {
                return prom;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "prometheus not ready after {PROMETHEUS_WAIT:?}:\n{}",
                prom.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// `GET /api/v1/…`, the JSON `data` of a successful answer.
    async fn api(&self, path_and_query: &str) -> Result<Value, String> {
        let (status, body) = try_http_get(self.url_addr, path_and_query)
            .await
            .map_err(|e| format!("GET {path_and_query}: {e}"))?;
        let v: Value =
            serde_json::from_str(&body).map_err(|e| format!("{path_and_query}: {e}: {body}"))?;
        if status != 200 || v["status"] != "success" {
            return Err(format!("{path_and_query}: HTTP {status}: {body}"));
        }
        Ok(v["data"].clone())
    }

    /// An instant query: the value of each series, or the error Prometheus gave.
    async fn query(&self, promql: &str) -> Result<Vec<f64>, String> {
        let data = self
            .api(&format!("/api/v1/query?query={}", url_encode(promql)))
            .await?;
        Ok(data["result"]
            .as_array()
            .map(|r| {
                r.iter()
                    .filter_map(|s| s["value"][1].as_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The value of a query that yields one series, once it does.
    async fn value(&self, promql: &str) -> f64 {
        let deadline = tokio::time::Instant::now() + PROMETHEUS_WAIT;
        loop {
            let got = self.query(promql).await;
            if let Ok([v]) = got.as_deref() {
                return *v;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "Prometheus: `{promql}` gave {got:?} for {PROMETHEUS_WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Polls `promql` until it yields exactly one series with value `want`.
    async fn wait_for(&self, promql: &str, want: f64) {
        let deadline = tokio::time::Instant::now() + PROMETHEUS_WAIT;
        loop {
            let got = self.query(promql).await;
            if got.as_deref() == Ok(&[want][..]) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "Prometheus: `{promql}` should be {want}, is {got:?} after {PROMETHEUS_WAIT:?}\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn url_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[tokio::test]
async fn a_real_prometheus_sees_churn_failover_and_evaluates_rules_and_dashboard() {
    let Some(binary) = tool("prometheus") else {
        return;
    };
    let _serial = serial().await;
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let prom = Prometheus::start(&binary, gw.http).await;
    prom.wait_for(r#"up{job="zkgate"}"#, 1.0).await;
    // Unlabelled series count for the whole test process: start from what is there.
    let failovers = r#"sum(zkgate_failover_seconds_count{job="zkgate"})"#;
    let campaigns = r#"sum(zkgate_campaigns_active{job="zkgate"})"#;
    let in_office = "zkgate:leaders_in_office:sum";
    let failovers_before = prom.value(failovers).await;
    let campaigns_before = prom.value(campaigns).await;
    prom.wait_for(in_office, 0.0).await;

    // A leads; B waits; A's stream is cancelled; B takes over.
    const ELECTION: &str = "e2e-churn";
    let mut c = gw.client().await;
    let mut a = Campaign::join(&mut c, ELECTION, "a", b"").await;
    a.elected().await;
    let mut b = Campaign::join(&mut c, ELECTION, "b", b"").await;
    drop(a);
    b.elected().await;

    let churn =
        format!(r#"sum(zkgate_leader_changes_total{{job="zkgate",election="{ELECTION}"}})"#);
    prom.wait_for(&churn, 2.0).await;
    prom.wait_for(failovers, failovers_before + 1.0).await;
    prom.wait_for(r#"zkgate_zk_connected{job="zkgate"}"#, 1.0)
        .await;
    // The recording rule: B is the one leader in office (2 elected, 1 tenure ended).
    prom.wait_for(in_office, 1.0).await;
    prom.wait_for(campaigns, campaigns_before + 1.0).await;
    // Per election: B is the one candidate left and leads.
    let election_candidates =
        format!(r#"sum(zkgate_election_candidates{{job="zkgate",election="{ELECTION}"}})"#);
    let election_leaders =
        format!(r#"sum(zkgate_election_leaders{{job="zkgate",election="{ELECTION}"}})"#);
    prom.wait_for(&election_candidates, 1.0).await;
    prom.wait_for(&election_leaders, 1.0).await;

    // Every rule evaluates without error against real series, and nothing fires on a healthy
    // gateway (2 leaders in a minute is no flapping; B leads).
    let deadline = tokio::time::Instant::now() + PROMETHEUS_WAIT;
    loop {
        let groups = prom.api("/api/v1/rules").await.unwrap();
        let rules: Vec<Value> = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().clone())
            .collect();
        assert!(rules.len() >= 9, "the zkgate rules are loaded: {groups}");
        let evaluated = rules.iter().all(|r| {
            r["lastEvaluation"]
                .as_str()
                .is_some_and(|t| !t.starts_with("0001"))
        });
        if evaluated {
            for r in &rules {
                assert_eq!(
                    r["health"], "ok",
                    "rule {} failed: {}",
                    r["name"], r["lastError"]
                );
                if r["type"] == "alerting" {
                    assert_eq!(
                        r["state"], "inactive",
                        "{} fires on a healthy gateway: {r}",
                        r["name"]
                    );
                }
            }
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "rules never evaluated: {groups}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Every dashboard query is valid PromQL, and the ones about elections see this churn.
    for (title, expr) in dashboard_queries() {
        let got = prom
            .query(&expr)
            .await
            .unwrap_or_else(|e| panic!("dashboard panel {title:?}: {e}"));
        if title == "Leaders in office" && expr.contains("leader_changes") {
            assert_eq!(got, vec![1.0], "{title}: {expr}");
        }
        // Every election of this test process with candidates has its leader.
        if title == "Elections without a leader" {
            assert_eq!(got, Vec::<f64>::new(), "{title}: {expr}");
        }
    }

    // B resigns: nobody leads, nobody campaigns.
    b.send(zkgate::proto::campaign_request::Request::Resign(
        zkgate::proto::ResignCandidacy {},
    ))
    .await;
    b.expect_end(None).await;
    prom.wait_for(in_office, 0.0).await;
    prom.wait_for(campaigns, campaigns_before).await;
    prom.wait_for(&churn, 2.0).await;
    prom.wait_for(&election_candidates, 0.0).await;
    prom.wait_for(&election_leaders, 0.0).await;

    drop(prom);
    gw.stop().await;
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1 GET over a plain TcpStream (no HTTP client in the dependency tree).

async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    try_http_get(addr, path)
        .await
        .unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
}

async fn try_http_get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let work = async {
        let mut conn = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        conn.write_all(req.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        conn.read_to_end(&mut raw)
            .await
            .map_err(|e| e.to_string())?;
        let raw = String::from_utf8(raw).map_err(|e| e.to_string())?;
        let (head, body) = raw
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("no HTTP head in {raw:?}"))?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad status line in {head:?}"))?;
        let chunked = head
            .lines()
            .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"));
        let body = if chunked {
            dechunk(body)?
        } else {
            body.to_owned()
        };
        Ok((status, body))
    };
    tokio::time::timeout(STEP, work)
        .await
        .map_err(|_| "timed out".to_owned())?
}

fn dechunk(mut body: &str) -> Result<String, String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").ok_or("bad chunk")?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|e| format!("chunk size: {e}"))?;
        if size == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..size).ok_or("short chunk")?);
        body = rest.get(size + 2..).ok_or("short chunk")?;
    }
}
