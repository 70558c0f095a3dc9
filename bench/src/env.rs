//! What the benchmark runs against: the gateway as a child process, ZooKeeper's `mntr`
//! counters, Prometheus text from `/metrics`, and the machine and versions for the report.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `$@` is the gateway's command line. Prints the gateway's pid, then waits for it, while a
/// watcher `kill -9`s it when our end of the stdin pipe closes (this process exited for any
/// reason), as `zkgate_localzk` does for ZooKeeper: no gateway outlives a benchmark run.
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

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `zkgate serve` with its default flags (plus any `--gateway-arg`), except the addresses: free
/// loopback ports rather than :50051/:9090 (the machine is shared), and the ZooKeeper started
/// for this run.
pub struct Gateway {
    pub pid: u32,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    wrapper: Child,
    _lifeline: ChildStdin,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Gateway {
    /// Starts `bin serve` and waits until `/readyz` answers 200 (its ZooKeeper session is up).
    /// Tries fresh ports up to three times (a port picked free can be taken before it binds).
    pub async fn start(bin: &Path, zk: &str, extra: &[String]) -> Result<Gateway, String> {
        let mut last = String::new();
        for _ in 0..3 {
            match Self::try_start(bin, zk, extra).await {
                Ok(g) => return Ok(g),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    async fn try_start(bin: &Path, zk: &str, extra: &[String]) -> Result<Gateway, String> {
        let dir = tempfile::Builder::new()
            .prefix("zkgate-bench-gw-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let log = dir.path().join("gateway.log");
        let log_file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let grpc = SocketAddr::from(([127, 0, 0, 1], free_port().map_err(|e| e.to_string())?));
        let http = SocketAddr::from(([127, 0, 0, 1], free_port().map_err(|e| e.to_string())?));
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(WRAPPER).arg("zkgate-bench-gateway");
        cmd.arg(bin).arg("serve");
        cmd.args(["--zk", zk]);
        cmd.arg("--listen").arg(grpc.to_string());
        cmd.arg("--http").arg(http.to_string());
        cmd.args(extra);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ZKGATE_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("ZKGATE_LOG", "warn");
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file);
        let mut wrapper = cmd
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", bin.display()))?;
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
        let mut gw = Gateway {
            pid,
            grpc,
            http,
            wrapper,
            _lifeline: lifeline,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = gw.wrapper.try_wait() {
                return Err(format!(
                    "the gateway exited ({status}) before it was ready:\n{}",
                    gw.log_tail()
                ));
            }
            if let Ok((200, _)) = http_get(gw.http, "/readyz").await {
                return Ok(gw);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the gateway was not ready within 30 s:\n{}",
                    gw.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Resident memory of the gateway process (`VmRSS`), in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// CPU time (user + system) the gateway has used so far.
    pub fn cpu_time(&self) -> Duration {
        proc_cpu_time(self.pid)
    }

    /// Context switches (voluntary and not) of all the gateway's threads so far.
    pub fn context_switches(&self) -> u64 {
        proc_context_switches(self.pid)
    }

    /// Write system calls (`write`, `writev`, `sendto`, …) the gateway has made so far, from
    /// `syscw` in `/proc/<pid>/io`: every write to a client and to ZooKeeper.
    pub fn write_calls(&self) -> u64 {
        let io = std::fs::read_to_string(format!("/proc/{}/io", self.pid)).unwrap_or_default();
        io.lines()
            .find_map(|l| l.strip_prefix("syscw:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The gateway's ZooKeeper round trips of one operation so far: (count, total seconds),
    /// from `zkgate_zk_request_duration_seconds` (all results).
    pub async fn zk_round_trips(&self, op: &str) -> (f64, f64) {
        let text = self.metrics().await;
        let of = |metric| sum_by_op(&text, metric).get(op).copied().unwrap_or(0.0);
        (
            of("zkgate_zk_request_duration_seconds_count"),
            of("zkgate_zk_request_duration_seconds_sum"),
        )
    }

    /// The gateway's `zkgate_zk_requests_total` by operation (all results summed).
    pub async fn zk_requests(&self) -> BTreeMap<String, f64> {
        sum_by_op(&self.metrics().await, "zkgate_zk_requests_total")
    }

    /// The gateway's `/metrics` text; empty if it does not answer 200.
    async fn metrics(&self) -> String {
        match http_get(self.http, "/metrics").await {
            Ok((200, text)) => text,
            _ => String::new(),
        }
    }

    /// SIGTERM (a drain), then SIGKILL if it takes more than 10 s.
    pub async fn stop(mut self) {
        let _ = Command::new("kill").arg(self.pid.to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.wrapper.try_wait() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = Command::new("kill")
            .args(["-9", &self.pid.to_string()])
            .status();
        let _ = self.wrapper.wait();
    }
}

/// utime + stime of a process from `/proc/PID/stat`, at the usual 100 ticks per second.
pub fn proc_cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// Context switches of every thread of `pid` so far (`/proc/<pid>/task/*/status`); threads
/// that have exited are not counted, which the gateway's long-lived workers make negligible.
pub fn proc_context_switches(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .map(|t| {
            std::fs::read_to_string(t.path().join("status"))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

/// A plain HTTP/1.0 GET on loopback: (status, body). The gateway's and etcd's metrics are all
/// this needs, so no HTTP client crate.
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let exchange = async {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map_or(String::new(), |(_, b)| b.to_owned());
        Ok((status, body))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in 5 s"))?
}

/// (metric name, label text, value) for each sample line of Prometheus text.
pub fn prometheus_samples(text: &str) -> Vec<(String, String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (head, value) = l.rsplit_once(' ')?;
            let value: f64 = value.parse().ok()?;
            let (name, labels) = match head.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (head, ""),
            };
            Some((name.to_owned(), labels.to_owned(), value))
        })
        .collect()
}

fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"'))
    })
}

/// One metric's samples in Prometheus text summed by their `op` label (other labels summed over).
fn sum_by_op(text: &str, metric: &str) -> BTreeMap<String, f64> {
    let mut by_op = BTreeMap::new();
    for (name, labels, v) in prometheus_samples(text) {
        if name == metric {
            if let Some(op) = label(&labels, "op") {
                *by_op.entry(op.to_owned()).or_insert(0.0) += v;
            }
        }
    }
    by_op
}

/// The sum of one metric's samples (all label sets) in Prometheus text.
pub fn metric_sum(text: &str, metric: &str) -> f64 {
    prometheus_samples(text)
        .into_iter()
        .filter(|(n, _, _)| n == metric)
        .map(|(_, _, v)| v)
        .sum()
}

/// The ZooKeeper counters the report uses, from `mntr`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ZkCounters {
    /// Log flushes (`zk_cnt_fsynctime`): one per group commit of the transaction log.
    pub fsyncs: f64,
    /// Watch notifications sent (the sum of `zk_sum_node_{created,deleted,changed,children}_watch_count`,
    /// which count the watchers each event triggered).
    pub notifications: f64,
    /// Requests received (`zk_packets_received`).
    pub packets_received: f64,
}

impl std::ops::Sub for ZkCounters {
    type Output = ZkCounters;
    fn sub(self, o: ZkCounters) -> ZkCounters {
        ZkCounters {
            fsyncs: self.fsyncs - o.fsyncs,
            notifications: self.notifications - o.notifications,
            packets_received: self.packets_received - o.packets_received,
        }
    }
}

pub fn parse_mntr(text: &str) -> ZkCounters {
    let mut c = ZkCounters::default();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(k), Some(v)) = (it.next(), it.next()) else {
            continue;
        };
        let Ok(v) = v.parse::<f64>() else { continue };
        match k {
            "zk_cnt_fsynctime" => c.fsyncs = v,
            "zk_packets_received" => c.packets_received = v,
            "zk_sum_node_created_watch_count"
            | "zk_sum_node_deleted_watch_count"
            | "zk_sum_node_changed_watch_count"
            | "zk_sum_node_children_watch_count" => c.notifications += v,
            _ => {}
        }
    }
    c
}

pub async fn mntr(zk: SocketAddr) -> ZkCounters {
    match zkgate_localzk::four_letter_word(zk, "mntr", Duration::from_secs(5)).await {
        Ok(text) => parse_mntr(&text),
        Err(e) => {
            eprintln!("mntr failed: {e}");
            ZkCounters::default()
        }
    }
}

/// The first line a command prints, or `?`.
pub fn version_of(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(|l| l.trim().to_owned())
        })
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| "?".into())
}

/// CPU model, cores and memory of this machine.
pub fn machine() -> (String, usize, f64) {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "?".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    (cpu, cores, mem_gib)
}

/// The machine's CPU time so far, all of it and the part the hypervisor gave to others
/// (`steal` in `/proc/stat`'s `cpu` line), in ticks.
pub fn cpu_ticks() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    steal_of(&text)
}

fn steal_of(stat: &str) -> (u64, u64) {
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return (0, 0);
    };
    // user nice system idle iowait irq softirq steal [guest guest_nice, counted in user]
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|x| x.parse().ok())
        .collect();
    (v.iter().sum(), v.get(7).copied().unwrap_or(0))
}

/// The share of the machine's CPU time from `start` (a [`cpu_ticks`]) until now that the
/// hypervisor gave to other machines: on a shared host, time our processes waited with work
/// to do, which inflates every absolute figure of the run.
pub fn steal_since(start: (u64, u64)) -> f64 {
    let now = cpu_ticks();
    let total = now.0.saturating_sub(start.0);
    if total == 0 {
        return 0.0;
    }
    now.1.saturating_sub(start.1) as f64 / total as f64
}

/// The 1-, 5- and 15-minute load averages.
pub fn loadavg() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let v: Vec<f64> = text
        .split_whitespace()
        .take(3)
        .filter_map(|x| x.parse().ok())
        .collect();
    [0, 1, 2].map(|i| v.get(i).copied().unwrap_or(f64::NAN))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_read_from_the_cpu_line() {
        let stat = "cpu  100 5 50 800 10 1 2 32 0 0\ncpu0 50 2 25 400 5 0 1 16 0 0\n";
        assert_eq!(steal_of(stat), (1000, 32));
        assert_eq!(steal_of("intr 1 2 3\n"), (0, 0));
    }

    #[test]
    fn mntr_counters_are_read_and_subtracted() {
        let a = parse_mntr(
            "zk_version\t3.8.0\nzk_packets_received\t10\nzk_cnt_fsynctime\t4\n\
             zk_sum_node_deleted_watch_count\t2\nzk_sum_node_created_watch_count\t1\n\
             zk_avg_node_created_watch_count\t0.5\n",
        );
        assert_eq!(a.fsyncs, 4.0);
        assert_eq!(a.notifications, 3.0);
        let b = parse_mntr(
            "zk_packets_received\t30\nzk_cnt_fsynctime\t10\nzk_sum_node_children_watch_count\t7\n",
        );
        let d = b - a;
        assert_eq!(
            (d.fsyncs, d.notifications, d.packets_received),
            (6.0, 4.0, 20.0)
        );
    }

    #[test]
    fn prometheus_text_is_summed_by_label() {
        let text = "# HELP x\nzkgate_zk_requests_total{op=\"create\",result=\"ok\"} 3\n\
                    zkgate_zk_requests_total{op=\"create\",result=\"node_exists\"} 1\n\
                    zkgate_zk_requests_total{op=\"delete\",result=\"ok\"} 2\nother 5\n";
        assert_eq!(metric_sum(text, "zkgate_zk_requests_total"), 6.0);
        let s = prometheus_samples(text);
        assert_eq!(label(&s[0].1, "op"), Some("create"));
        assert_eq!(label(&s[3].1, "op"), None);
        let by_op = sum_by_op(text, "zkgate_zk_requests_total");
        assert_eq!(
            by_op.into_iter().collect::<Vec<_>>(),
            [("create".to_owned(), 4.0), ("delete".to_owned(), 2.0)]
        );
    }
}
