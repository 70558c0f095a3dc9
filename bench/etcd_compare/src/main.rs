//! zkgate against etcd 3.4, measured in one run on this machine.
//!
//! `cargo run --release --manifest-path bench/etcd_compare/Cargo.toml [-- --rounds N]
//!  [--seconds S] [--etcd PATH]`
//!
//! Starts a local standalone ZooKeeper (Debian's `zookeeper` package, via `zkgate::localzk`)
//! with a zkgate gateway in this process, exactly as `examples/election_bench.rs` and
//! `examples/lock_bench.rs` do, and a single-member etcd (Debian's `etcd-server`, 3.4) on free
//! loopback ports with a fresh data directory. Both keep their default durability: ZooKeeper and
//! etcd each fsync their log before acknowledging a write. Each scenario runs on zkgate and then
//! on etcd, with the same client counts and rounds; README.md beside this file says what each
//! number means.

mod etcd;
mod pb;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use zkgate::coord::{CoordConfig, Coordinator};
use zkgate::localzk::{four_letter_word, LocalZk, LocalZkOptions};
use zkgate::proto as zpb;
use zkgate::server::{self, ServeConfig};

use etcd::{Etcd, Session};
use pb::etcdserverpb::kv_client::KvClient;
use pb::etcdserverpb::lease_client::LeaseClient;
use pb::etcdserverpb::{LeaseGrantRequest, LeaseRevokeRequest, RangeRequest};
use pb::v3electionpb::election_client::ElectionClient as EtcdElection;
use pb::v3electionpb::{CampaignRequest, LeaderKey, ResignRequest};
use pb::v3lockpb::lock_client::LockClient as EtcdLock;
use pb::v3lockpb::{LockRequest, UnlockRequest};

type ZkElection = zpb::election_client::ElectionClient<Channel>;
type ZkLock = zpb::lock_client::LockClient<Channel>;

/// A waiter that queued this long before the leader left ("just queued"), and one that has
/// waited long enough for etcd's watch to catch up (its unsynced watchers are caught up every
/// 100 ms).
const SETTLE_SHORT: Duration = Duration::from_millis(2);
const SETTLE_LONG: Duration = Duration::from_millis(200);

// ---------------------------------------------------------------------------------------------
// Statistics and the table.

fn pct(v: &[Duration], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort();
    v[((v.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1000.0
}

#[derive(Clone, Copy)]
enum Better {
    Lower,
    Higher,
}

struct Row {
    name: String,
    zk: f64,
    etcd: f64,
    better: Better,
}

#[derive(Default)]
struct Table(Vec<Row>);

impl Table {
    fn latency(&mut self, name: &str, zk: &[Duration], etcd: &[Duration]) {
        for (q, label) in [(0.5, "p50"), (0.99, "p99")] {
            self.0.push(Row {
                name: format!("{name}, {label} (ms)"),
                zk: pct(zk, q),
                etcd: pct(etcd, q),
                better: Better::Lower,
            });
        }
    }

    fn rate(&mut self, name: &str, zk: f64, etcd: f64) {
        self.0.push(Row {
            name: name.to_owned(),
            zk,
            etcd,
            better: Better::Higher,
        });
    }

    fn print(&self) {
        println!(
            "{:<58} {:>10} {:>10} {:>14}",
            "", "zkgate", "etcd", "zkgate better"
        );
        for r in &self.0 {
            let ratio = match r.better {
                Better::Lower => r.etcd / r.zk,
                Better::Higher => r.zk / r.etcd,
            };
            let fmt = |x: f64| match r.better {
                Better::Lower => format!("{x:.2}"),
                Better::Higher => format!("{x:.0}"),
            };
            println!(
                "{:<58} {:>10} {:>10} {:>13.2}x",
                r.name,
                fmt(r.zk),
                fmt(r.etcd),
                ratio
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// zkgate: the gateway's gRPC API (as in examples/election_bench.rs and examples/lock_bench.rs).

struct ZkCandidate {
    _tx: mpsc::Sender<zpb::CampaignRequest>,
    rx: tonic::Streaming<zpb::CampaignResponse>,
}

async fn zk_join(c: &mut ZkElection, election: &str) -> ZkCandidate {
    let (tx, rx) = mpsc::channel(4);
    tx.send(zpb::CampaignRequest {
        request: Some(zpb::campaign_request::Request::Join(zpb::Join {
            election: election.into(),
            candidate: "bench".into(),
            value: vec![],
        })),
    })
    .await
    .unwrap();
    let rx = c
        .campaign(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    ZkCandidate { _tx: tx, rx }
}

async fn zk_until(s: &mut ZkCandidate, elected: bool) {
    use zpb::campaign_response::Event;
    loop {
        match s.rx.message().await.unwrap().and_then(|m| m.event) {
            Some(Event::Elected(_)) if elected => return,
            Some(Event::Queued(_)) if !elected => return,
            Some(_) => continue,
            None => panic!("stream ended"),
        }
    }
}

async fn zk_campaign(c: &mut ZkElection, rounds: usize, tag: &str) -> Vec<Duration> {
    let mut v = Vec::new();
    for i in 0..rounds {
        let t = Instant::now();
        let mut s = zk_join(c, &format!("{tag}{i}")).await;
        zk_until(&mut s, true).await;
        v.push(t.elapsed());
        // Dropping the stream resigns; the gateway cleans up in the background.
    }
    v
}

async fn zk_handoff(c: &mut ZkElection, rounds: usize, settle: Duration) -> Vec<Duration> {
    let name = format!("handoff{}", settle.as_millis());
    let mut leader = zk_join(c, &name).await;
    zk_until(&mut leader, true).await;
    let mut v = Vec::new();
    for _ in 0..rounds {
        let mut next = zk_join(c, &name).await;
        zk_until(&mut next, false).await; // its znode exists
        tokio::time::sleep(settle).await;
        let t = Instant::now();
        drop(leader); // cancels the leader's stream
        zk_until(&mut next, true).await;
        v.push(t.elapsed());
        leader = next;
    }
    v
}

/// One acquisition: `acquire` sent → `acquired`; then in-stream release → stream ends OK.
async fn zk_acquire_release(c: &mut ZkLock, name: &str) -> (Duration, Duration) {
    use zpb::acquire_request::Request as Req;
    use zpb::acquire_response::Event;
    let started = Instant::now();
    let (tx, rx) = mpsc::channel(4);
    tx.send(zpb::AcquireRequest {
        request: Some(Req::Acquire(zpb::AcquireLock {
            name: name.into(),
            owner: "bench".into(),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let mut s = c
        .acquire(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    loop {
        match s.message().await.unwrap().and_then(|m| m.event) {
            Some(Event::Acquired(_)) => break,
            Some(_) => continue,
            None => panic!("stream ended before acquired"),
        }
    }
    let acquired = started.elapsed();
    let t = Instant::now();
    tx.send(zpb::AcquireRequest {
        request: Some(Req::Release(zpb::ReleaseLock {})),
    })
    .await
    .unwrap();
    while s.message().await.unwrap().is_some() {}
    (acquired, t.elapsed())
}

// ---------------------------------------------------------------------------------------------
// etcd: its v3election and v3lock gRPC services, as a client of `etcdctl elect`/`lock` would
// use them (concurrency.Election/Mutex run inside the server behind these RPCs).

fn etcd_campaign_req(name: &str, lease: i64) -> CampaignRequest {
    CampaignRequest {
        name: name.as_bytes().to_vec(),
        lease,
        value: b"bench".to_vec(),
    }
}

async fn etcd_grant(lease: &mut LeaseClient<Channel>) -> i64 {
    lease
        .lease_grant(LeaseGrantRequest {
            ttl: etcd::SESSION_TTL_SECS,
            id: 0,
        })
        .await
        .expect("LeaseGrant")
        .into_inner()
        .id
}

fn etcd_revoke_later(lease: &LeaseClient<Channel>, id: i64) {
    let mut lease = lease.clone();
    tokio::spawn(async move {
        let _ = lease.lease_revoke(LeaseRevokeRequest { id }).await;
    });
}

/// Returns (LeaseGrant + Campaign, Campaign alone).
async fn etcd_campaign(ch: &Channel, rounds: usize, tag: &str) -> (Vec<Duration>, Vec<Duration>) {
    let mut lease = LeaseClient::new(ch.clone());
    let mut el = EtcdElection::new(ch.clone());
    let (mut both, mut alone) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let t = Instant::now();
        let id = etcd_grant(&mut lease).await;
        let t2 = Instant::now();
        el.campaign(etcd_campaign_req(&format!("{tag}{i}"), id))
            .await
            .expect("Campaign");
        both.push(t.elapsed());
        alone.push(t2.elapsed());
        // Like dropping zkgate's stream: the leader goes away in the background.
        etcd_revoke_later(&lease, id);
    }
    (both, alone)
}

async fn etcd_handoff(ch: &Channel, rounds: usize, settle: Duration) -> Vec<Duration> {
    let name = format!("handoff{}", settle.as_millis());
    let mut lease = LeaseClient::new(ch.clone());
    let mut kv = KvClient::new(ch.clone());
    let mut el = EtcdElection::new(ch.clone());
    let mut leader_lease = etcd_grant(&mut lease).await;
    let mut leader: LeaderKey = el
        .campaign(etcd_campaign_req(&name, leader_lease))
        .await
        .expect("Campaign")
        .into_inner()
        .leader
        .unwrap();
    let mut v = Vec::new();
    for _ in 0..rounds {
        let id = etcd_grant(&mut lease).await;
        let mut el2 = el.clone();
        let req = etcd_campaign_req(&name, id);
        let next = tokio::spawn(async move {
            el2.campaign(req)
                .await
                .expect("Campaign")
                .into_inner()
                .leader
                .unwrap()
        });
        // Wait until the waiter's key exists (concurrency.Election: "<name>/<lease in hex>"),
        // the counterpart of zkgate's `queued`.
        let key = format!("{name}/{id:x}").into_bytes();
        loop {
            let r = kv
                .range(RangeRequest {
                    key: key.clone(),
                    count_only: true,
                    serializable: true,
                    ..Default::default()
                })
                .await
                .expect("Range")
                .into_inner();
            if r.count > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        tokio::time::sleep(settle).await;
        let t = Instant::now();
        // What `etcdctl elect` does on Ctrl-C: Resign (deletes the leader's key).
        el.resign(ResignRequest {
            leader: Some(leader),
        })
        .await
        .expect("Resign");
        let new_leader = next.await.unwrap();
        v.push(t.elapsed());
        // etcdctl then exits and its lease expires after its TTL; revoke it now instead.
        lease
            .lease_revoke(LeaseRevokeRequest { id: leader_lease })
            .await
            .expect("LeaseRevoke");
        leader = new_leader;
        leader_lease = id;
    }
    v
}

/// One acquisition on a session's lease: Lock → key; then Unlock(key).
async fn etcd_acquire_release(c: &mut EtcdLock<Channel>, name: &str, lease: i64) -> (Duration, Duration) {
    let t = Instant::now();
    let key = c
        .lock(LockRequest {
            name: name.as_bytes().to_vec(),
            lease,
        })
        .await
        .expect("Lock")
        .into_inner()
        .key;
    let acquired = t.elapsed();
    let t = Instant::now();
    c.unlock(UnlockRequest { key }).await.expect("Unlock");
    (acquired, t.elapsed())
}

// ---------------------------------------------------------------------------------------------
// Throughput: `clients` tasks, one connection each, loop acquire → release on `locks` names for
// `secs`. Returns (acquisitions/s, acquire latencies as the clients saw them).

enum Target {
    Zk(String),
    Etcd(String),
}

async fn throughput(target: &Target, clients: usize, locks: usize, secs: f64, tag: &str) -> (f64, Vec<Duration>) {
    let count = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for i in 0..clients {
        let count = count.clone();
        let name = format!("{tag}{}", i % locks);
        let target = match target {
            Target::Zk(u) => Target::Zk(u.clone()),
            Target::Etcd(u) => Target::Etcd(u.clone()),
        };
        tasks.push(tokio::spawn(async move {
            let mut waits = Vec::new();
            match target {
                Target::Zk(url) => {
                    let mut c = ZkLock::connect(url).await.unwrap();
                    while Instant::now() < deadline {
                        waits.push(zk_acquire_release(&mut c, &name).await.0);
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Target::Etcd(url) => {
                    let ch = Channel::from_shared(url).unwrap().connect().await.unwrap();
                    let session = Session::grant(ch.clone()).await;
                    let mut c = EtcdLock::new(ch);
                    while Instant::now() < deadline {
                        waits.push(etcd_acquire_release(&mut c, &name, session.id).await.0);
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    session.close().await;
                }
            }
            waits
        }));
    }
    let started = Instant::now();
    let mut waits = Vec::new();
    for t in tasks {
        waits.extend(t.await.unwrap());
    }
    let n = count.load(Ordering::Relaxed);
    (n as f64 / started.elapsed().as_secs_f64(), waits)
}

fn sequential_rate(acq: &[Duration], rel: &[Duration]) -> f64 {
    acq.len() as f64 / acq.iter().chain(rel).map(Duration::as_secs_f64).sum::<f64>()
}

// ---------------------------------------------------------------------------------------------

static START: OnceLock<Instant> = OnceLock::new();

/// Progress on stderr, so that stdout is just the report.
fn phase(name: &str) {
    let t = START.get_or_init(Instant::now).elapsed().as_secs_f64();
    eprintln!("[{t:>6.1} s] {name}");
}

#[tokio::main]
async fn main() {
    START.get_or_init(Instant::now);
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "usage: etcd_compare [--rounds N] [--seconds S] [--etcd PATH]\n\
             --rounds N   rounds of each latency scenario (default: 300 for elections, 1000 for\n\
             \x20            the uncontended lock, as in examples/*_bench.rs); the handoff with a\n\
             \x20            long-queued waiter runs N/3 rounds\n\
             --seconds S  length of each throughput scenario (default 5)\n\
             --etcd PATH  the etcd 3.4 server binary (default /usr/bin/etcd)"
        );
        return;
    }
    let rounds_arg: Option<usize> = arg("--rounds").map(|s| s.parse().expect("--rounds N"));
    let e_rounds = rounds_arg.unwrap_or(300).max(1);
    let long_rounds = (e_rounds / 3).max(1);
    let l_rounds = rounds_arg.unwrap_or(1000).max(1);
    let secs: f64 = arg("--seconds").map_or(5.0, |s| s.parse().expect("--seconds S"));
    let etcd_bin = PathBuf::from(arg("--etcd").unwrap_or_else(|| "/usr/bin/etcd".into()));

    // ZooKeeper and the gateway, as in examples/election_bench.rs.
    phase("starting ZooKeeper, the gateway and etcd");
    let local = LocalZk::start_standalone(LocalZkOptions::default())
        .await
        .unwrap_or_else(|e| panic!("start ZooKeeper: {e} ({})", LocalZk::install_hint()));
    let zk = local.connect_string();
    let zk_version = four_letter_word(local.server_address(0), "srvr", Duration::from_secs(5))
        .await
        .ok()
        .and_then(|s| s.lines().next().map(|l| l.trim().to_owned()))
        .unwrap_or_default();
    let mut cc = CoordConfig::new(&zk);
    cc.root = format!("/etcdcompare{:x}", rand::random::<u32>());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let zurl = format!("http://{}", listener.local_addr().unwrap());
    let coord = Coordinator::start(cc.clone());
    tokio::spawn(server::run_with(
        coord.clone(),
        ServeConfig::new(cc),
        listener,
        None,
        std::future::pending(),
    ));
    assert!(coord.wait_connected(Duration::from_secs(20)).await);

    let etcd = match Etcd::start(&etcd_bin).await {
        Ok(e) => e,
        Err(e) => {
            eprintln!("{e}");
            local.shutdown().await;
            std::process::exit(1);
        }
    };
    let ech = etcd.channel().await;

    let mut zel = ZkElection::connect(zurl.clone()).await.unwrap();
    let mut zlock = ZkLock::connect(zurl.clone()).await.unwrap();
    let mut elock = EtcdLock::new(ech.clone());

    phase("warm-up");
    zk_campaign(&mut zel, 20, "warm").await;
    etcd_campaign(&ech, 20, "warm").await;
    let warm = Session::grant(ech.clone()).await;
    for _ in 0..50 {
        zk_acquire_release(&mut zlock, "free").await;
        etcd_acquire_release(&mut elock, "free", warm.id).await;
    }
    warm.close().await;

    let mut table = Table::default();

    phase(&format!("campaign -> elected, {e_rounds} rounds each"));
    let zk_c = zk_campaign(&mut zel, e_rounds, "e").await;
    let (etcd_c, etcd_c_alone) = etcd_campaign(&ech, e_rounds, "e").await;
    table.latency("election: campaign -> elected (vacant)", &zk_c, &etcd_c);

    phase(&format!(
        "handoff, waiter queued {SETTLE_SHORT:?} before, {e_rounds} rounds each"
    ));
    let zk_h = zk_handoff(&mut zel, e_rounds, SETTLE_SHORT).await;
    let etcd_h = etcd_handoff(&ech, e_rounds, SETTLE_SHORT).await;
    table.latency("election: handoff, waiter queued 2 ms before", &zk_h, &etcd_h);

    phase(&format!(
        "handoff, waiter queued {SETTLE_LONG:?} before, {long_rounds} rounds each"
    ));
    let zk_hl = zk_handoff(&mut zel, long_rounds, SETTLE_LONG).await;
    let etcd_hl = etcd_handoff(&ech, long_rounds, SETTLE_LONG).await;
    table.latency("election: handoff, waiter queued 200 ms before", &zk_hl, &etcd_hl);

    phase(&format!("uncontended lock, {l_rounds} rounds each"));
    let (mut zk_a, mut zk_r) = (Vec::new(), Vec::new());
    for _ in 0..l_rounds {
        let (a, r) = zk_acquire_release(&mut zlock, "free").await;
        zk_a.push(a);
        zk_r.push(r);
    }
    let session = Session::grant(ech.clone()).await;
    let (mut etcd_a, mut etcd_r) = (Vec::new(), Vec::new());
    for _ in 0..l_rounds {
        let (a, r) = etcd_acquire_release(&mut elock, "free", session.id).await;
        etcd_a.push(a);
        etcd_r.push(r);
    }
    session.close().await;
    table.latency("lock, uncontended: acquire", &zk_a, &etcd_a);
    table.latency("lock, uncontended: release", &zk_r, &etcd_r);
    table.rate(
        "lock, uncontended: acquire+release per s, 1 client",
        sequential_rate(&zk_a, &zk_r),
        sequential_rate(&etcd_a, &etcd_r),
    );

    let zt = Target::Zk(zurl.clone());
    let et = Target::Etcd(etcd.url().to_owned());
    phase(&format!("16 clients on 1 lock, {secs} s each"));
    let (zk_one, zk_one_w) = throughput(&zt, 16, 1, secs, "one").await;
    let (etcd_one, etcd_one_w) = throughput(&et, 16, 1, secs, "one").await;
    table.rate("lock, 16 clients on 1 lock: acquisitions/s", zk_one, etcd_one);
    table.latency("lock, 16 clients on 1 lock: wait", &zk_one_w, &etcd_one_w);

    phase(&format!("64 clients on 64 locks, {secs} s each"));
    let (zk_many, zk_many_w) = throughput(&zt, 64, 64, secs, "many").await;
    let (etcd_many, etcd_many_w) = throughput(&et, 64, 64, secs, "many").await;
    table.rate("lock, 64 clients on 64 locks: acquisitions/s", zk_many, etcd_many);
    table.latency("lock, 64 clients on 64 locks: acquire", &zk_many_w, &etcd_many_w);

    println!();
    println!("zkgate vs etcd, one run on this machine ({} cores)", std::thread::available_parallelism().map_or(0, |n| n.get()));
    println!("  zkgate: gateway in-process (1 ZooKeeper session), {zk_version}, standalone at {zk}");
    println!("  etcd:   {}, single member at {}", etcd.version(), etcd.url());
    println!("  both keep their default durability: ZooKeeper and etcd each fsync their log before acknowledging a write");
    println!("  (data in {} and ZooKeeper's temp dir, same file system)", etcd.data_dir().display());
    println!(
        "  rounds: {e_rounds} (elections), {long_rounds} (handoff, 200 ms), {l_rounds} (uncontended lock); throughput {secs} s per scenario"
    );
    println!();
    table.print();
    println!();
    println!(
        "  etcd Campaign alone on a lease granted beforehand: p50 {:.2} ms, p99 {:.2} ms (the row above includes LeaseGrant)",
        pct(&etcd_c_alone, 0.5),
        pct(&etcd_c_alone, 0.99)
    );
    println!("  'zkgate better': etcd/zkgate for times, zkgate/etcd for rates; below 1 means etcd did better");
    println!("  handoff: zkgate's leader cancels its Campaign stream; etcd's leader calls Resign (what etcdctl elect does on Ctrl-C)");
    println!("  wait/acquire under load: acquire sent -> acquired, as a client sees it (with contention, includes the queue wait)");

    etcd.shutdown().await;
    local.shutdown().await;
}
