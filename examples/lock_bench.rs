//! Lock throughput and latency through the gateway on this machine.
//!
//! `cargo run --release --example lock_bench [-- --zk HOST:PORT] [--rounds N] [--seconds S]`
//!
//! Without `--zk` it starts its own local ZooKeeper (Debian's package). A gateway runs in this
//! process; clients talk to it over loopback gRPC, one HTTP/2 connection each. Measures:
//! - uncontended acquire latency: `acquire` sent → `acquired` received, N rounds on a free lock
//!   (each round then releases in-stream and waits for the stream to end OK);
//! - acquisitions per second with 16 clients contending for one lock (acquire → release →
//!   acquire again, for S seconds);
//! - acquisitions per second with 64 clients on 64 different locks;
//!
//! and the ZooKeeper requests the gateway sent per acquisition in each phase.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use zkgate::coord::{CoordConfig, Coordinator};
use zkgate::proto as pb;
use zkgate::proto::acquire_request::Request as Req;
use zkgate::proto::acquire_response::Event;
use zkgate::proto::lock_client::LockClient;
use zkgate::server::{self, ServeConfig};
use zkgate_client::raw::AcquireStream;
use zkgate_testkit::bench::{percentile_ms, zk_or_local, BenchArgs};

type Client = LockClient<tonic::transport::Channel>;

/// One acquisition: `acquire` sent → `acquired`; then in-stream release → stream ends OK.
/// Returns (acquire latency, release latency).
async fn acquire_release(c: &mut Client, name: &str) -> (Duration, Duration) {
    let started = Instant::now();
    let acquire = Req::Acquire(pb::AcquireLock {
        name: name.into(),
        owner: "bench".into(),
        ..Default::default()
    })
    .into();
    let mut s = AcquireStream::open_with(c, [acquire]).await.unwrap();
    loop {
        match s.event().await.unwrap() {
            Some(Event::Acquired(_)) => break,
            Some(_) => continue,
            None => panic!("stream ended before acquired"),
        }
    }
    let acquired = started.elapsed();
    let t = Instant::now();
    assert!(s.release());
    while s.message().await.unwrap().is_some() {}
    (acquired, t.elapsed())
}

fn pct(v: &mut [Duration], q: f64) -> f64 {
    v.sort();
    percentile_ms(v, q)
}

/// `clients` tasks loop acquire → release on `locks` names for `secs`; returns
/// (acquisitions/s, hand-over p50 ms, p99 ms as seen by a client: acquire sent → acquired).
async fn throughput(
    url: &str,
    clients: usize,
    locks: usize,
    secs: f64,
    tag: &str,
) -> (f64, f64, f64, u64) {
    let count = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for i in 0..clients {
        let url = url.to_owned();
        let count = count.clone();
        let name = format!("{tag}{}", i % locks);
        tasks.push(tokio::spawn(async move {
            let mut c = LockClient::connect(url).await.unwrap();
            let mut waits = Vec::new();
            while Instant::now() < deadline {
                let (w, _) = acquire_release(&mut c, &name).await;
                waits.push(w);
                count.fetch_add(1, Ordering::Relaxed);
            }
            waits
        }));
    }
    let started = Instant::now();
    let mut waits = Vec::new();
    for t in tasks {
        waits.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    let n = count.load(Ordering::Relaxed);
    (
        n as f64 / elapsed,
        pct(&mut waits, 0.5),
        pct(&mut waits, 0.99),
        n,
    )
}

#[tokio::main]
async fn main() {
    let args = BenchArgs::from_env();
    let arg = |name: &str| args.get(name);
    let rounds: usize = arg("--rounds").map_or(1000, |s| s.parse().expect("--rounds N"));
    let secs: f64 = arg("--seconds").map_or(5.0, |s| s.parse().expect("--seconds S"));
    let (zk, local) = zk_or_local(&args).await;
    let mut cc = CoordConfig::new(&zk);
    cc.root = format!("/lockbench{:x}", rand::random::<u32>());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let coord = Coordinator::start(cc.clone());
    tokio::spawn(server::run_with(
        coord.clone(),
        ServeConfig::new(cc),
        listener,
        None,
        std::future::pending(),
    ));
    assert!(coord.wait_connected(Duration::from_secs(20)).await);
    let mut c = LockClient::connect(url.clone()).await.unwrap();

    // Warm up (connections, the lock's container znode, JIT in ZooKeeper).
    for _ in 0..50 {
        acquire_release(&mut c, "free").await;
    }

    let before = coord.zk_requests();
    let (mut acq, mut rel) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (a, r) = acquire_release(&mut c, "free").await;
        acq.push(a);
        rel.push(r);
    }
    let free_reqs = (coord.zk_requests() - before) as f64 / rounds as f64;

    let before = coord.zk_requests();
    let (one_rate, one_p50, one_p99, one_n) = throughput(&url, 16, 1, secs, "one").await;
    let one_reqs = (coord.zk_requests() - before) as f64 / one_n as f64;
    let before = coord.zk_requests();
    let (many_rate, many_p50, many_p99, many_n) = throughput(&url, 64, 64, secs, "many").await;
    let many_reqs = (coord.zk_requests() - before) as f64 / many_n as f64;

    println!("zkgate lock benchmark: gateway in-process (1 ZooKeeper session), ZooKeeper {zk}");
    println!(
        "{:<38} {:>12} {:>12} {:>12} {:>10}",
        "scenario", "acq/s", "p50 ms", "p99 ms", "zk req/acq"
    );
    let uncontended_rate = rounds as f64
        / acq
            .iter()
            .chain(rel.iter())
            .map(Duration::as_secs_f64)
            .sum::<f64>();
    println!(
        "{:<38} {:>12.0} {:>12.2} {:>12.2} {:>10.1}",
        format!("uncontended acquire (n={rounds})"),
        uncontended_rate,
        pct(&mut acq, 0.5),
        pct(&mut acq, 0.99),
        free_reqs
    );
    println!(
        "{:<38} {:>12} {:>12.2} {:>12.2} {:>10}",
        "  its in-stream release -> end OK",
        "",
        pct(&mut rel, 0.5),
        pct(&mut rel, 0.99),
        ""
    );
    println!(
        "{:<38} {:>12.0} {:>12.2} {:>12.2} {:>10.1}",
        format!("16 clients, 1 lock ({secs} s, n={one_n})"),
        one_rate,
        one_p50,
        one_p99,
        one_reqs
    );
    println!(
        "{:<38} {:>12.0} {:>12.2} {:>12.2} {:>10.1}",
        format!("64 clients, 64 locks ({secs} s, n={many_n})"),
        many_rate,
        many_p50,
        many_p99,
        many_reqs
    );
    println!("(p50/p99: acquire sent -> acquired, as the client sees it; with contention that includes the queue wait)");
    if let Some(zk) = local {
        zk.shutdown().await;
    }
}
