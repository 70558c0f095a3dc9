//! The workloads. Each runs the three systems under the same rules and in the same order
//! (zkgate, etcd, raw ZK); the latency workloads interleave them in small blocks, so a change
//! in the shared machine's load falls on all three alike.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tonic::transport::Channel;
use zookeeper_client as zkc;

use zkgate::proto as zpb;
use zkgate_client::raw::CampaignStream;

use crate::clients::{self, channel, Client, Hold, Kind, Target};
use crate::env::{self, Gateway, ZkCounters};
use crate::frames::ObservedToken;
use crate::phase;
use crate::report::Report;
use crate::stats::{Better, Row, Summary, SYSTEMS};
use crate::ObserveReader;
use crate::Scale;

pub struct Ctx {
    pub targets: [Target; 3],
    pub zk_addr: SocketAddr,
    pub zk_pid: Option<u32>,
    pub etcd_addr: SocketAddr,
    pub gateway: Gateway,
    pub gateway_bin: PathBuf,
    pub scale: Scale,
    pub report: Report,
}

/// What one system spent on a stretch of work: ZooKeeper's (or etcd's) log flushes, ZooKeeper's
/// watch notifications and the requests it received (a `multi` of many operations is one), and
/// the gateway's ZooKeeper requests by operation.
#[derive(Debug, Clone, Default)]
pub struct Cost {
    pub fsyncs: f64,
    pub notifications: f64,
    pub packets_received: f64,
    pub requests: BTreeMap<String, f64>,
}

impl Cost {
    fn add_delta(&mut self, before: &Cost, after: &Cost) {
        self.fsyncs += after.fsyncs - before.fsyncs;
        self.notifications += after.notifications - before.notifications;
        self.packets_received += after.packets_received - before.packets_received;
        for (op, v) in &after.requests {
            *self.requests.entry(op.clone()).or_insert(0.0) +=
                v - before.requests.get(op).copied().unwrap_or(0.0);
        }
    }
}

/// The counters of system `s` now. etcd's fsyncs come from its own `/metrics`
/// (`etcd_disk_wal_fsync_duration_seconds_count`); it has no watch-notification counter.
async fn counters(ctx: &Ctx, s: usize) -> Cost {
    match s {
        1 => {
            let text = env::http_get(ctx.etcd_addr, "/metrics")
                .await
                .map(|(_, b)| b)
                .unwrap_or_default();
            Cost {
                fsyncs: env::metric_sum(&text, "etcd_disk_wal_fsync_duration_seconds_count"),
                ..Default::default()
            }
        }
        _ => {
            let ZkCounters {
                fsyncs,
                notifications,
                packets_received,
            } = env::mntr(ctx.zk_addr).await;
            let requests = if s == 0 {
                ctx.gateway.zk_requests().await
            } else {
                BTreeMap::new()
            };
            Cost {
                fsyncs,
                notifications,
                packets_received,
                requests,
            }
        }
    }
}

/// Lets work a system finished in the background (the gateway's clean-up after a stream
/// ended, a watch notification in flight) land before its counters are read.
const SETTLE: Duration = Duration::from_millis(50);

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Election => "election",
        Kind::Lock => "lock",
    }
}

fn some3(v: [f64; 3]) -> [Option<f64>; 3] {
    v.map(Some)
}

/// A few acquisitions on each system, unmeasured: connections, JIT and caches warm.
pub async fn warm_up(ctx: &mut Ctx) {
    for t in &ctx.targets {
        let mut c = Client::connect(t).await;
        for kind in [Kind::Election, Kind::Lock] {
            for i in 0..30 {
                let name = format!("warm-{}", i % 3);
                let h = c.hold(kind, &name).await;
                h.release(&mut c).await;
            }
        }
        c.close().await;
    }
}

/// W1: one client acquires and releases, on a fresh name each time and on one reused name;
/// the time from asking to holding. Interleaved in blocks of 10 rounds per system.
pub async fn w1(ctx: &mut Ctx) {
    let rounds = ctx.scale.w1_rounds;
    phase(&format!(
        "W1: acquire latency, {rounds} rounds per case and system"
    ));
    let mut cs = Vec::new();
    for t in &ctx.targets {
        cs.push(Client::connect(t).await);
    }
    for kind in [Kind::Election, Kind::Lock] {
        for fresh in [true, false] {
            let k = kind_name(kind);
            let case = if fresh {
                "fresh names"
            } else {
                "one name reused"
            };
            phase(&format!("W1: {k}, {case}"));
            let mut samples: [Vec<Duration>; 3] = Default::default();
            let mut cost: [Cost; 3] = Default::default();
            let mut n = 0;
            while n < rounds {
                let b = 10.min(rounds - n);
                for (s, c) in cs.iter_mut().enumerate() {
                    tokio::time::sleep(SETTLE).await;
                    let before = counters(ctx, s).await;
                    for r in n..n + b {
                        let name = if fresh {
                            format!("w1-{k}-{r}")
                        } else {
                            format!("w1-{k}")
                        };
                        let t = Instant::now();
                        let h = c.hold(kind, &name).await;
                        samples[s].push(t.elapsed());
                        h.release(c).await;
                    }
                    tokio::time::sleep(SETTLE).await;
                    let after = counters(ctx, s).await;
                    cost[s].add_delta(&before, &after);
                }
                n += b;
            }
            let label = format!("{k} acquire, {case}");
            // Distributions drawn for the lock cases (the election ones look alike).
            ctx.report
                .latency("W1", &label, &samples, kind == Kind::Lock);
            let per = |v: f64| Some(v / rounds as f64);
            ctx.report.rows.push(
                Row::new(
                    "W1",
                    &format!("fsyncs per {k} acquire + release, {case}"),
                    "",
                    Better::Count,
                )
                .values([
                    per(cost[0].fsyncs),
                    per(cost[1].fsyncs),
                    per(cost[2].fsyncs),
                ]),
            );
            ctx.report.rows.push(
                Row::new(
                    "W1",
                    &format!("ZooKeeper watch notifications per {k} acquire + release, {case}"),
                    "",
                    Better::Count,
                )
                .values([
                    per(cost[0].notifications),
                    None,
                    per(cost[2].notifications),
                ]),
            );
            ctx.report.requests_per_op(
                &format!("W1 {k} acquire + release, {case}"),
                &cost[0].requests,
                rounds as f64,
            );
        }
    }
    w1_breakdown(ctx, &mut cs).await;
    for c in cs {
        c.close().await;
    }
}

/// Where W1's "one name reused" time goes, for the issue-21 note: the gRPC round trip to the
/// gateway alone (an `Acquire` it refuses `INVALID_ARGUMENT` before any ZooKeeper request),
/// the gateway's own create round trip (its `zkgate_zk_request_duration_seconds`), the raw
/// recipe's create and list round trips timed one by one, and what the gateway's process spends
/// per acquire + release (CPU, context switches). Means, not medians: the gateway's round trips
/// come from a histogram's sum and count. The lock acquire of the reused case is zkgate's
/// create plus the gRPC round trip plus the gateway's own handling; the recipe's is its create
/// plus its list.
async fn w1_breakdown(ctx: &mut Ctx, cs: &mut [Client]) {
    let rounds = ctx.scale.w1_rounds * 5;
    phase(&format!(
        "W1: where the reused-name time goes, {rounds} rounds"
    ));
    let name = "w1-breakdown";
    let Client::Zkgate(ch) = &cs[0] else {
        panic!("the first client is zkgate's")
    };
    let ch = ch.clone();
    let mut refused = Duration::ZERO;
    for _ in 0..rounds {
        let t = Instant::now();
        let empty = zpb::AcquireLock {
            owner: "bench".into(),
            ..Default::default()
        };
        let status = match zkgate_client::raw::AcquireStream::acquire(ch.clone(), empty).await {
            Err(status) => status,
            Ok(mut s) => s
                .event()
                .await
                .expect_err("an Acquire without a name is refused"),
        };
        refused += t.elapsed();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    }
    tokio::time::sleep(SETTLE).await;
    let (creates0, create_secs0) = ctx.gateway.zk_round_trips("create").await;
    let cpu0 = ctx.gateway.cpu_time();
    let switches0 = ctx.gateway.context_switches();
    for _ in 0..rounds {
        let h = cs[0].hold(Kind::Lock, name).await;
        h.release(&mut cs[0]).await;
    }
    let cpu = ctx.gateway.cpu_time() - cpu0;
    let switches = ctx.gateway.context_switches() - switches0;
    tokio::time::sleep(SETTLE).await;
    let (creates1, create_secs1) = ctx.gateway.zk_round_trips("create").await;
    let gateway_create_ms = (create_secs1 - create_secs0) / (creates1 - creates0).max(1.0) * 1e3;
    let Client::Raw { zk } = &cs[2] else {
        panic!("the third client is the raw recipe's")
    };
    let parent = format!("/raw/{name}");
    let persistent = zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all());
    match zk.create(&parent, b"", &persistent).await {
        Ok(_) | Err(zkc::Error::NodeExists) => {}
        Err(zkc::Error::NoNode) => {
            zk.create("/raw", b"", &persistent).await.ok();
            zk.create(&parent, b"", &persistent)
                .await
                .expect("create the breakdown's parent");
        }
        Err(e) => panic!("create {parent}: {e}"),
    }
    let member = zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all());
    let (mut create, mut list) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..rounds {
        let t = Instant::now();
        let (_, seq) = zk
            .create(&format!("{parent}/n-"), b"", &member)
            .await
            .expect("raw create");
        create += t.elapsed();
        let t = Instant::now();
        zk.list_children(&parent).await.expect("raw list");
        list += t.elapsed();
        zk.delete(&format!("{parent}/n-{seq}"), None)
            .await
            .expect("raw delete");
    }
    zk.delete(&parent, None).await.ok();
    let mean_ms = |total: Duration| total.as_secs_f64() / rounds as f64 * 1e3;
    let row = |label: &str, unit: &str, better, values| {
        Row::new("W1", &format!("one name reused, {label}"), unit, better).values(values)
    };
    ctx.report.rows.extend([
        row(
            "gRPC round trip without ZooKeeper (a refused Acquire), mean",
            "ms",
            Better::Lower,
            [Some(mean_ms(refused)), None, None],
        ),
        row(
            "create round trip, mean (zkgate: the gateway's own)",
            "ms",
            Better::Lower,
            [Some(gateway_create_ms), None, Some(mean_ms(create))],
        ),
        row(
            "list round trip, mean",
            "ms",
            Better::Lower,
            [None, None, Some(mean_ms(list))],
        ),
        row(
            "gateway CPU per lock acquire + release",
            "µs",
            Better::Lower,
            [Some(cpu.as_secs_f64() / rounds as f64 * 1e6), None, None],
        ),
        row(
            "gateway context switches per lock acquire + release",
            "",
            Better::Count,
            [Some(switches as f64 / rounds as f64), None, None],
        ),
    ]);
}

/// W2: a leader resigns while one waiter has been queued for `settle`; the time from the
/// resignation to the waiter's election.
pub async fn w2(ctx: &mut Ctx) {
    for (settle_ms, rounds) in [
        (150, ctx.scale.w2_rounds_150ms),
        (20, ctx.scale.w2_rounds_20ms),
    ] {
        phase(&format!(
            "W2: handoff to a waiter queued {settle_ms} ms earlier, {rounds} rounds per system"
        ));
        let settle = Duration::from_millis(settle_ms);
        let name = format!("w2-{settle_ms}");
        let mut pairs = Vec::new();
        let mut leaders = Vec::new();
        for t in &ctx.targets {
            let mut pair = [Client::connect(t).await, Client::connect(t).await];
            leaders.push(Some((0usize, pair[0].hold(Kind::Election, &name).await)));
            pairs.push(pair);
        }
        let mut samples: [Vec<Duration>; 3] = Default::default();
        for _ in 0..rounds {
            for s in 0..3 {
                let (li, hold) = leaders[s].take().expect("a leader");
                let wi = 1 - li;
                let pending = pairs[s][wi].enqueue(Kind::Election, &name, true).await;
                tokio::time::sleep(settle).await;
                let t = Instant::now();
                let ((), (next, took)) = tokio::join!(hold.release(&mut pairs[s][li]), async {
                    let h = pending.acquired().await;
                    (h, t.elapsed())
                });
                samples[s].push(took);
                leaders[s] = Some((wi, next));
            }
        }
        for (s, mut pair) in pairs.into_iter().enumerate() {
            let (li, hold) = leaders[s].take().expect("a leader");
            hold.release(&mut pair[li]).await;
            for c in pair {
                c.close().await;
            }
        }
        ctx.report.latency(
            "W2",
            &format!("handoff to a waiter queued {settle_ms} ms earlier"),
            &samples,
            true,
        );
    }
}

/// What a throughput run measured for one system.
struct Throughput {
    rate: f64,
    waits: Vec<Duration>,
    cost: Cost,
    /// CPU used by ZooKeeper's JVM and by the gateway, as % of one core.
    zk_cpu: f64,
    gateway_cpu: f64,
    /// CPU of this program (the clients).
    bench_cpu: f64,
    elapsed: Duration,
    acquisitions: u64,
}

impl Throughput {
    /// Adds another slice of the same run: counts and times add up, rates are recomputed.
    fn merge(mut self, o: Throughput) -> Throughput {
        let (a, b) = (self.elapsed.as_secs_f64(), o.elapsed.as_secs_f64());
        let avg = |x: f64, y: f64| (x * a + y * b) / (a + b);
        self.zk_cpu = avg(self.zk_cpu, o.zk_cpu);
        self.gateway_cpu = avg(self.gateway_cpu, o.gateway_cpu);
        self.bench_cpu = avg(self.bench_cpu, o.bench_cpu);
        self.elapsed += o.elapsed;
        self.acquisitions += o.acquisitions;
        self.rate = self.acquisitions as f64 / self.elapsed.as_secs_f64();
        self.waits.extend(o.waits);
        let zero = Cost::default();
        self.cost.add_delta(&zero, &o.cost);
        self
    }
}

/// `clients` clients, each on its own connection (raw ZK: its own session), loop
/// acquire → release on lock `name(i)` for `secs`.
async fn throughput(
    ctx: &Ctx,
    s: usize,
    clients: usize,
    name: fn(usize) -> String,
    secs: f64,
) -> Throughput {
    let mut cs = Vec::new();
    for _ in 0..clients {
        cs.push(Client::connect(&ctx.targets[s]).await);
    }
    tokio::time::sleep(SETTLE).await;
    let before = counters(ctx, s).await;
    let zk_cpu0 = ctx.zk_pid.map(env::proc_cpu_time).unwrap_or_default();
    let gw_cpu0 = ctx.gateway.cpu_time();
    let own_cpu0 = env::proc_cpu_time(std::process::id());
    let count = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for (i, mut c) in cs.into_iter().enumerate() {
        let count = count.clone();
        let name = name(i);
        tasks.push(tokio::spawn(async move {
            let mut waits = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                let h = c.hold(Kind::Lock, &name).await;
                waits.push(t.elapsed());
                h.release(&mut c).await;
                count.fetch_add(1, Ordering::Relaxed);
            }
            (waits, c)
        }));
    }
    let mut waits = Vec::new();
    let mut cs = Vec::new();
    for t in tasks {
        let (w, c) = t.await.expect("client task");
        waits.extend(w);
        cs.push(c);
    }
    let elapsed = started.elapsed();
    let zk_cpu = ctx.zk_pid.map(env::proc_cpu_time).unwrap_or_default() - zk_cpu0;
    let gw_cpu = ctx.gateway.cpu_time() - gw_cpu0;
    let own_cpu = env::proc_cpu_time(std::process::id()) - own_cpu0;
    tokio::time::sleep(SETTLE).await;
    let after = counters(ctx, s).await;
    let mut cost = Cost::default();
    cost.add_delta(&before, &after);
    for c in cs {
        c.close().await;
    }
    let n = count.load(Ordering::Relaxed);
    Throughput {
        rate: n as f64 / elapsed.as_secs_f64(),
        waits,
        cost,
        zk_cpu: zk_cpu.as_secs_f64() / elapsed.as_secs_f64() * 100.0,
        gateway_cpu: gw_cpu.as_secs_f64() / elapsed.as_secs_f64() * 100.0,
        bench_cpu: own_cpu.as_secs_f64() / elapsed.as_secs_f64() * 100.0,
        elapsed,
        acquisitions: n,
    }
}

async fn throughput_workload(
    ctx: &mut Ctx,
    workload: &str,
    clients: usize,
    what: &str,
    name: fn(usize) -> String,
) {
    // Three slices per system, interleaved (zkgate, etcd, raw ZK, zkgate, …), so that a change
    // in the machine's load between slices falls on all three.
    const SLICES: usize = 3;
    let secs = ctx.scale.throughput_secs / SLICES as f64;
    let mut results: Vec<Option<Throughput>> = vec![None, None, None];
    for slice in 0..SLICES {
        for (s, sys) in SYSTEMS.iter().enumerate() {
            phase(&format!(
                "{workload}: {what}, {sys}, slice {} of {SLICES}, {secs:.1} s",
                slice + 1
            ));
            let t = throughput(ctx, s, clients, name, secs).await;
            results[s] = Some(match results[s].take() {
                None => t,
                Some(prev) => prev.merge(t),
            });
        }
    }
    let results: Vec<Throughput> = results.into_iter().map(|t| t.expect("run")).collect();
    let r = &results;
    ctx.report.rows.push(
        Row::new(
            workload,
            &format!("{what}: acquisitions/s"),
            "/s",
            Better::Higher,
        )
        .values(some3([r[0].rate, r[1].rate, r[2].rate])),
    );
    let waits: [Vec<Duration>; 3] = [r[0].waits.clone(), r[1].waits.clone(), r[2].waits.clone()];
    ctx.report
        .latency(workload, &format!("{what}: acquire wait"), &waits, false);
    let per = |t: &Throughput, v: f64| Some(v / t.acquisitions.max(1) as f64);
    ctx.report.rows.push(
        Row::new(
            workload,
            &format!("{what}: fsyncs per acquisition"),
            "",
            Better::Count,
        )
        .values([
            per(&r[0], r[0].cost.fsyncs),
            per(&r[1], r[1].cost.fsyncs),
            per(&r[2], r[2].cost.fsyncs),
        ]),
    );
    ctx.report.rows.push(
        Row::new(
            workload,
            &format!("{what}: ZooKeeper watch notifications per acquisition"),
            "",
            Better::Count,
        )
        .values([
            per(&r[0], r[0].cost.notifications),
            None,
            per(&r[2], r[2].cost.notifications),
        ]),
    );
    // Requests, not operations: a `multi` of many creates and deletes is one (what batching
    // saves ZooKeeper's request pipeline; the operations inside still cost their own share).
    ctx.report.rows.push(
        Row::new(
            workload,
            &format!("{what}: requests ZooKeeper received per acquisition"),
            "",
            Better::Count,
        )
        .values([
            per(&r[0], r[0].cost.packets_received),
            None,
            per(&r[2], r[2].cost.packets_received),
        ]),
    );
    ctx.report.rows.push(
        Row::new(
            workload,
            &format!("{what}: ZooKeeper CPU"),
            "%",
            Better::Count,
        )
        .values([Some(r[0].zk_cpu), None, Some(r[2].zk_cpu)]),
    );
    ctx.report.rows.push(
        Row::new(
            workload,
            &format!("{what}: gateway CPU"),
            "%",
            Better::Count,
        )
        .values([Some(r[0].gateway_cpu), None, None]),
    );
    ctx.report.rows.push(
        Row::new(
            workload,
            &format!("{what}: load generator CPU"),
            "%",
            Better::Count,
        )
        .values([
            Some(r[0].bench_cpu),
            Some(r[1].bench_cpu),
            Some(r[2].bench_cpu),
        ]),
    );
    // The CPU one acquisition costs everything measured on this machine (ZooKeeper, the
    // gateway, the clients), which all share its cores: once they saturate them, the rate is
    // that budget over this figure (docs/batching.md, "What is left"). etcd's own CPU is not
    // measured.
    let cpu_per =
        |t: &Throughput, pct: f64| Some(pct / 100.0 / t.rate.max(f64::MIN_POSITIVE) * 1e6);
    // The ensemble's share alone: what every tenant of a shared ensemble pays (issue 21's
    // target compares it with the recipe's in W4).
    ctx.report.rows.push(
        Row::new(
            workload,
            &format!("{what}: ZooKeeper CPU per acquisition"),
            "µs",
            Better::Count,
        )
        .values([
            cpu_per(&r[0], r[0].zk_cpu),
            None,
            cpu_per(&r[2], r[2].zk_cpu),
        ]),
    );
    ctx.report.rows.push(
        Row::new(
            workload,
            &format!("{what}: CPU per acquisition, ZooKeeper + gateway + load generator"),
            "µs",
            Better::Count,
        )
        .values([
            cpu_per(&r[0], r[0].zk_cpu + r[0].gateway_cpu + r[0].bench_cpu),
            None,
            cpu_per(&r[2], r[2].zk_cpu + r[2].bench_cpu),
        ]),
    );
    ctx.report.requests_per_op(
        &format!("{workload} {what}, per acquisition"),
        &r[0].cost.requests,
        r[0].acquisitions.max(1) as f64,
    );
}

/// W3: 16 clients on one lock.
pub async fn w3(ctx: &mut Ctx) {
    throughput_workload(ctx, "W3", 16, "16 clients on one lock", |_| "w3".into()).await;
}

/// W4: 64 clients, each on its own lock.
pub async fn w4(ctx: &mut Ctx) {
    throughput_workload(ctx, "W4", 64, "64 clients on their own locks", |i| {
        format!("w4-{i}")
    })
    .await;
}

/// W5: `n` candidates queue on one election at once (enqueue: until every one is queued),
/// then the leader resigns `failovers` times (failover: resignation → the next one elected).
pub async fn w5(ctx: &mut Ctx) {
    let n = ctx.scale.w5_candidates;
    let failovers = ctx.scale.w5_failovers.min(n - 1);
    let mut enqueue = [None; 3];
    let mut samples: [Vec<Duration>; 3] = Default::default();
    for (s, sys) in SYSTEMS.iter().enumerate() {
        phase(&format!("W5: {n} candidates, {sys}"));
        let (e, f) = w5_one(ctx, s, n, failovers).await;
        enqueue[s] = Some(e.as_secs_f64() * 1000.0);
        samples[s] = f;
    }
    ctx.report.rows.push(
        Row::new(
            "W5",
            &format!(
                "{} waiting candidates: enqueue all",
                crate::stats::thousands(n as u64)
            ),
            "ms",
            Better::Lower,
        )
        .values(enqueue),
    );
    ctx.report.latency(
        "W5",
        &format!(
            "{} waiting candidates: failover",
            crate::stats::thousands(n as u64)
        ),
        &samples,
        false,
    );
}

async fn w5_one(ctx: &Ctx, s: usize, n: usize, failovers: usize) -> (Duration, Vec<Duration>) {
    let target = &ctx.targets[s];
    let name = "w5";
    // Connections: the gateway takes 1,000 streams per connection by default; etcd's waiters
    // share 8; the raw recipe has one session per candidate.
    let shared = match s {
        0 => n.div_ceil(1000),
        1 => 8,
        _ => 0,
    };
    let mut channels = Vec::new();
    for _ in 0..shared {
        channels.push(channel(target).await);
    }
    let mut cs = Vec::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let made = futures_join(chunk.iter().map(|&i| {
            let ch = channels.get(i % shared.max(1)).cloned().flatten();
            let target = target.clone();
            async move { Client::on(&target, ch.as_ref()).await }
        }))
        .await;
        cs.extend(made);
    }
    let (queued_tx, mut queued_rx) = mpsc::unbounded_channel::<()>();
    let (elected_tx, mut elected_rx) = mpsc::unbounded_channel::<(usize, Instant)>();
    let mut releases = Vec::new();
    let mut tasks = Vec::new();
    let started = Instant::now();
    for (i, mut c) in cs.into_iter().enumerate() {
        let (release_tx, mut release_rx) = oneshot::channel::<()>();
        releases.push(Some(release_tx));
        let queued_tx = queued_tx.clone();
        let elected_tx = elected_tx.clone();
        tasks.push(tokio::spawn(async move {
            let p = c.enqueue(Kind::Election, name, false).await;
            let _ = queued_tx.send(());
            let acquired = p.acquired();
            tokio::pin!(acquired);
            let hold: Option<Hold> = tokio::select! {
                h = &mut acquired => Some(h),
                _ = &mut release_rx => None,
            };
            if let Some(h) = hold {
                let _ = elected_tx.send((i, Instant::now()));
                if release_rx.await.is_ok() {
                    h.release(&mut c).await;
                }
            }
            c.close().await;
        }));
    }
    drop(queued_tx);
    drop(elected_tx);
    let enqueue = if s == 1 {
        // etcd: every waiter's key is in place.
        let mut kv = crate::pb::etcdserverpb::kv_client::KvClient::new(
            channels[0].clone().expect("a channel"),
        );
        let (key, end) = clients::etcd_prefix(name);
        while (clients::etcd_count(&mut kv, &key, Some(end.clone())).await as usize) < n {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        started.elapsed()
    } else {
        for _ in 0..n {
            queued_rx.recv().await.expect("a candidate failed to queue");
        }
        started.elapsed()
    };
    let (mut leader, _) = elected_rx.recv().await.expect("a leader");
    let mut samples = Vec::new();
    for _ in 0..failovers {
        let t = Instant::now();
        let _ = releases[leader]
            .take()
            .expect("the leader's release")
            .send(());
        let (next, at) = elected_rx.recv().await.expect("a next leader");
        samples.push(at - t);
        leader = next;
    }
    // The rest leave: zkgate's streams are cancelled, etcd's leases revoked, and the raw
    // recipe's leftover members deleted below.
    drop(releases);
    for t in tasks {
        let _ = t.await;
    }
    if s == 2 {
        raw_delete_children(target, "/raw/election/w5").await;
    }
    (enqueue, samples)
}

/// Runs futures concurrently and collects their results in order.
async fn futures_join<F>(futs: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

async fn raw_delete_children(target: &Target, parent: &str) {
    let Target::Raw(connect) = target else { return };
    let zk = zkc::Client::connect(connect).await.expect("connect");
    if let Ok(children) = zk.list_children(parent).await {
        for c in children {
            let _ = zk.delete(&format!("{parent}/{c}"), None).await;
        }
    }
}

/// `Election.Observe` through tonic, read as [`ObservedToken`]s (`--observe-reader grpc`).
async fn observe_tokens(
    ch: Channel,
    election: &str,
) -> Result<tonic::codec::Streaming<ObservedToken>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(ch);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unknown(e.to_string()))?;
    let request = tonic::Request::new(zpb::ObserveRequest {
        election: election.into(),
    });
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/zkgate.v1.Election/Observe");
    let codec = tonic_prost::ProstCodec::<zpb::ObserveRequest, ObservedToken>::default();
    Ok(grpc
        .server_streaming(request, path, codec)
        .await?
        .into_inner())
}

/// How many observers have seen each token, and when the first and the last did: counted
/// where the observers are read, so that a change costs this process no message per observer.
#[derive(Default)]
struct Sightings {
    by_token: std::sync::Mutex<std::collections::HashMap<u64, Tally>>,
    /// Told when a token has been seen by every observer.
    all_seen: tokio::sync::Notify,
}

#[derive(Clone, Copy)]
struct Tally {
    seen: usize,
    first: Instant,
    last: Instant,
}

impl Sightings {
    /// `count` observers saw `token` at `at`.
    fn saw(&self, token: u64, count: usize, at: Instant, of: usize) {
        let mut by_token = self.by_token.lock().unwrap();
        let tally = by_token.entry(token).or_insert(Tally {
            seen: 0,
            first: at,
            last: at,
        });
        tally.seen += count;
        tally.first = tally.first.min(at);
        tally.last = tally.last.max(at);
        if tally.seen >= of && tally.seen - count < of {
            self.all_seen.notify_one();
        }
    }

    fn tally(&self, token: u64) -> Option<Tally> {
        self.by_token.lock().unwrap().get(&token).copied()
    }

    fn clear(&self) {
        self.by_token.lock().unwrap().clear();
    }
}

/// A connection's observers as the frame reader reports them: ready once each has its first
/// message; each read's sightings counted at the instant of that read.
struct FrameObservers {
    ready: mpsc::UnboundedSender<()>,
    sightings: Arc<Sightings>,
    of: usize,
}

impl crate::frames::Observers for FrameObservers {
    fn ready(&mut self, _index: usize) {
        let _ = self.ready.send(());
    }

    fn saw(&mut self, token: u64, count: usize) {
        self.sightings.saw(token, count, Instant::now(), self.of);
    }
}

/// Observe fan-out (zkgate): `k` observers of one election over `k / 1000` connections, each
/// connection's observers read by one task; the leader resigns to a waiter queued 150 ms
/// earlier; the time from the resignation until the last (and the first) observer has seen the
/// new leader.
pub async fn observe(ctx: &mut Ctx) {
    for reader in ctx.scale.observe_readers.clone() {
        observe_read_by(ctx, reader).await;
    }
}

/// [`observe`] with the observers read by `reader`. The frame reader's rows are the fan-out's
/// figures (and issue 21's target); tonic's say what reading them through a gRPC library on
/// the gateway's 2 cores adds.
async fn observe_read_by(ctx: &mut Ctx, reader: ObserveReader) {
    let k = ctx.scale.observers;
    let rounds = ctx.scale.observe_rounds;
    let (title, name, key) = match reader {
        ObserveReader::Grpc => (
            "Observe fan-out, read by tonic clients",
            "observe-grpc",
            "observe_grpc",
        ),
        _ => ("Observe fan-out", "observe", "observe"),
    };
    phase(&format!(
        "observe: {k} observers of one election, {rounds} leader changes, read by {reader:?}"
    ));
    let target = &ctx.targets[0];
    let mut pair = [Client::connect(target).await, Client::connect(target).await];
    let mut leader = (0usize, pair[0].hold(Kind::Election, name).await);
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel::<()>();
    let sightings = Arc::new(Sightings::default());
    let mut tasks = Vec::new();
    match reader {
        // One task per connection parses its frames (`frames`): see that module for why.
        ObserveReader::Frames => {
            for conn in 0..k.div_ceil(1000) {
                let n = 1000.min(k - conn * 1000);
                let reader = FrameObservers {
                    ready: ready_tx.clone(),
                    sightings: sightings.clone(),
                    of: k,
                };
                let addr = ctx.gateway.grpc;
                tasks.push(tokio::spawn(async move {
                    match crate::frames::observe(addr, name, n, reader).await {
                        Ok(why) => eprintln!("observe: connection {conn} ended: {why}"),
                        Err(e) => eprintln!("observe: connection {conn} failed: {e}"),
                    }
                }));
            }
        }
        ObserveReader::Grpc => {
            // One task per connection reads its 1,000 observers (`SelectAll`) and counts what
            // they saw in place: a task per observer added 10,000 task wake-ups in this
            // process to every change, a message per observer to the measuring task 10,000
            // more, both measured as the gateway's (issue 21).
            for conn in 0..k.div_ceil(1000) {
                let n = 1000.min(k - conn * 1000);
                let ch = channel(target).await.expect("a channel");
                let ready_tx = ready_tx.clone();
                let sightings = sightings.clone();
                tasks.push(tokio::spawn(async move {
                    let mut streams = futures::stream::SelectAll::new();
                    for _ in 0..n {
                        let mut stream = observe_tokens(ch.clone(), name).await.expect("Observe");
                        let _ = stream.message().await;
                        let _ = ready_tx.send(());
                        streams.push(stream);
                    }
                    while let Some(m) = futures::StreamExt::next(&mut streams).await {
                        if let Some(l) = m.ok().and_then(|m| m.leader) {
                            sightings.saw(l.fencing_token, 1, Instant::now(), k);
                        }
                    }
                }));
            }
        }
    }
    drop(ready_tx);
    for _ in 0..k {
        ready_rx.recv().await.expect("an observer failed");
    }
    let (mut to_last, mut to_first) = (Vec::new(), Vec::new());
    // The new leader's own `elected` shares the gateway with the fan-out: it must not wait for
    // the 10,000 observers' messages.
    let mut to_elected = Vec::new();
    // CPU time per leader change, the gateway's and this process's (the observers' reader),
    // from the resignation until the last observer has seen the change: on a 2-core machine the
    // two compete, so the wall time alone does not say whose cost it is.
    let (mut gw_cpu, mut own_cpu) = (Vec::new(), Vec::new());
    // The gateway's write calls per change: each is a trip through the kernel's send path, and
    // how many frames leave per write decides much of the fan-out's cost.
    let mut gw_writes = Vec::new();
    // Observers that never saw a round's new leader (within 120 s): must be 0, and reported as
    // a row, so that a lost change cannot hide behind the medians.
    let mut missed = 0usize;
    for _ in 0..rounds {
        let (li, hold) = leader;
        let wi = 1 - li;
        let pending = pair[wi].enqueue(Kind::Election, name, true).await;
        tokio::time::sleep(Duration::from_millis(150)).await;
        sightings.clear();
        let (gw0, own0, writes0) = (
            ctx.gateway.cpu_time(),
            env::proc_cpu_time(std::process::id()),
            ctx.gateway.write_calls(),
        );
        let t = Instant::now();
        let ((), (next, elected)) = tokio::join!(hold.release(&mut pair[li]), async {
            let next = pending.acquired().await;
            (next, t.elapsed())
        });
        to_elected.push(elected);
        let token = next.token();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        let tally = loop {
            let tally = sightings.tally(token);
            if tally.is_some_and(|t| t.seen >= k) {
                break tally;
            }
            let notified = sightings.all_seen.notified();
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let seen = sightings.tally(token).map_or(0, |t| t.seen);
                eprintln!("observe: only {seen} of {k} observers saw the new leader");
                missed += k - seen;
                break sightings.tally(token);
            }
        };
        let (first, last) = tally.map_or((t, t), |t| (t.first, t.last));
        to_last.push(last - t);
        to_first.push(first - t);
        gw_cpu.push(ctx.gateway.cpu_time().saturating_sub(gw0));
        own_cpu.push(env::proc_cpu_time(std::process::id()).saturating_sub(own0));
        gw_writes.push(ctx.gateway.write_calls().saturating_sub(writes0) as f64);
        leader = (wi, next);
    }
    for t in &tasks {
        t.abort();
    }
    let (li, hold) = leader;
    hold.release(&mut pair[li]).await;
    let label = crate::stats::thousands(k as u64);
    let last = Summary::of(&to_last);
    let first = Summary::of(&to_first);
    ctx.report.zkgate_only(
        &format!("{title}: leader change → last of {label} observers, p50"),
        "ms",
        last.p50_ms,
    );
    ctx.report.zkgate_only(
        &format!("{title}: leader change → first of {label} observers, p50"),
        "ms",
        first.p50_ms,
    );
    let elected = Summary::of(&to_elected);
    ctx.report.zkgate_only(
        &format!("{title}: leader change → the new leader elected, {label} observers, p50"),
        "ms",
        elected.p50_ms,
    );
    // Mean over the rounds: /proc counts in 10 ms ticks, so one round's figure is coarse.
    let mean_ms = |v: &[Duration]| {
        v.iter().map(Duration::as_secs_f64).sum::<f64>() * 1e3 / v.len().max(1) as f64
    };
    let (gw_ms, own_ms) = (mean_ms(&gw_cpu), mean_ms(&own_cpu));
    ctx.report.zkgate_only(
        &format!("{title}: observers that missed a leader change, {rounds} rounds (must be 0)"),
        "",
        missed as f64,
    );
    ctx.report.zkgate_only(
        &format!("{title}: gateway CPU per leader change, {label} observers"),
        "ms",
        gw_ms,
    );
    ctx.report.zkgate_only(
        &format!("{title}: load generator CPU per leader change (reading {label} observers)"),
        "ms",
        own_ms,
    );
    let writes = gw_writes.iter().sum::<f64>() / gw_writes.len().max(1) as f64;
    ctx.report.zkgate_only(
        &format!("{title}: gateway write calls per leader change, {label} observers"),
        "",
        writes,
    );
    ctx.report.extra(
        key,
        serde_json::json!({
            "observers": k,
            "rounds": rounds,
            "gateway_write_calls": writes,
            "to_last": last,
            "to_first": first,
            "to_elected": elected,
            "gateway_cpu_ms": gw_ms,
            "load_generator_cpu_ms": own_ms,
        }),
    );
}

/// Waiting streams (zkgate): a fresh gateway with default flags, `n` Campaign streams over
/// `n / 1000` connections in elections of 1,000 members; the gateway's RSS before and after.
pub async fn streams(ctx: &mut Ctx) {
    let n = ctx.scale.streams;
    phase(&format!("streams: {n} waiting streams on a fresh gateway"));
    let zk = match &ctx.targets[2] {
        Target::Raw(c) => c.clone(),
        _ => unreachable!(),
    };
    let gw = Gateway::start(&ctx.gateway_bin, &zk, &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let base = gw.rss_kib();
    let url = gw.url();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for conn in 0..n.div_ceil(1000) {
        let url = url.clone();
        let m = 1000.min(n - conn * 1000);
        tasks.push(tokio::spawn(async move {
            let ch = Channel::from_shared(url)
                .expect("URL")
                .connect()
                .await
                .expect("connect");
            let mut workers = Vec::new();
            for w in 0..8 {
                let ch = ch.clone();
                workers.push(tokio::spawn(async move {
                    let mut held = Vec::new();
                    for i in (w..m).step_by(8) {
                        let join = zpb::Join {
                            ping_seq: 0,
                            election: format!("streams-{conn}"),
                            candidate: format!("c-{i}"),
                            value: Vec::new(),
                        };
                        let mut s = CampaignStream::join(ch.clone(), join)
                            .await
                            .expect("Campaign");
                        s.message().await.expect("queued").expect("queued");
                        held.push(s);
                    }
                    held
                }));
            }
            let mut held = Vec::new();
            for w in workers {
                held.extend(w.await.expect("worker"));
            }
            held
        }));
    }
    let mut held = Vec::new();
    for t in tasks {
        held.extend(t.await.expect("connection"));
    }
    let enqueue = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let loaded = gw.rss_kib();
    let per = loaded.saturating_sub(base) as f64 / held.len().max(1) as f64;
    drop(held);
    gw.stop().await;
    let label = crate::stats::thousands(n as u64);
    ctx.report.zkgate_only(
        &format!("{label} waiting streams on one gateway: memory per stream"),
        "KiB",
        per,
    );
    ctx.report.zkgate_only(
        &format!("{label} waiting streams on one gateway: enqueue all"),
        "ms",
        enqueue.as_secs_f64() * 1000.0,
    );
    ctx.report.extra(
        "streams",
        serde_json::json!({
            "streams": n,
            "rss_idle_kib": base,
            "rss_loaded_kib": loaded,
            "kib_per_stream": per,
            "enqueue_s": enqueue.as_secs_f64(),
        }),
    );
}
