//! Where a lock acquire on a reused name spends its time, against the raw requests it is made
//! of: a measuring aid beside the benchmark (issue 21), not part of its report.
//!
//! ```text
//! zkgate dev                      # prints ZooKeeper's address; the gateway on 127.0.0.1:50051
//! cargo run --release -p zkgate-bench --example acquire_probe -- 127.0.0.1:50051 <zk> 2000
//! ```
//!
//! In rounds of 10, interleaved, it times (p50 of each):
//! * a lock acquire on one name through the gateway (until `acquired`; and until `queued`),
//!   then its release (until the stream ends);
//! * a refused acquire (no name: `INVALID_ARGUMENT` before any ZooKeeper request), the gRPC
//!   round trip alone;
//! * on a ZooKeeper session of its own: an EPHEMERAL_SEQUENTIAL create, a `getChildren` and a
//!   delete on a short path (the recipe's requests); the same create with a persistent recursive
//!   watch on its parent (the gateway's watch); a create and a delete on a path shaped like a
//!   gateway member's (a protected name, 45 bytes of data, a container parent).
//!
//! `PROBE_ONLY=gw` runs only the gateway's acquires and releases, `PROBE_ONLY=raw` only the raw
//! requests: between two runs, ZooKeeper's own latency (`srst`, then `mntr`'s
//! `zk_avg_updatelatency`) can be read for each alone. Run it with the gateway traced
//! (`perf trace -p <pid> -e writev,sendto`) to count the writes an acquire costs.

use std::time::{Duration, Instant};

use tonic::transport::Channel;
use zkgate_client::{pb, raw::AcquireStream};
use zookeeper_client as zkc;

fn p50_us(mut v: Vec<Duration>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6
}

async fn session(zk: &str) -> zkc::Client {
    zkc::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(zk)
        .await
        .expect("a ZooKeeper session")
}

fn mode(m: zkc::CreateMode) -> zkc::CreateOptions<'static> {
    m.with_acls(zkc::Acls::anyone_all())
}

/// Times `f` and pushes the time onto `into`.
async fn timed<T>(into: &mut Vec<Duration>, f: impl std::future::Future<Output = T>) -> T {
    let t = Instant::now();
    let r = f.await;
    into.push(t.elapsed());
    r
}

#[derive(Default)]
struct Samples {
    acquire: Vec<Duration>,
    queued: Vec<Duration>,
    release: Vec<Duration>,
    refused: Vec<Duration>,
    create: Vec<Duration>,
    list: Vec<Duration>,
    delete: Vec<Duration>,
    watched_create: Vec<Duration>,
    shaped_create: Vec<Duration>,
    shaped_delete: Vec<Duration>,
}

async fn gateway_round(ch: &Channel, s: &mut Samples, refused_too: bool) {
    let acquire = |name: &str| pb::AcquireLock {
        name: name.into(),
        owner: "probe".into(),
        ..Default::default()
    };
    for _ in 0..10 {
        let t = Instant::now();
        let mut stream = AcquireStream::acquire(ch.clone(), acquire("probe"))
            .await
            .expect("acquire");
        loop {
            match stream.event().await.expect("an event") {
                Some(pb::acquire_response::Event::Queued(_)) => s.queued.push(t.elapsed()),
                Some(pb::acquire_response::Event::Acquired(_)) => break,
                _ => {}
            }
        }
        s.acquire.push(t.elapsed());
        let t = Instant::now();
        stream.release();
        while let Ok(Some(_)) = stream.message().await {}
        s.release.push(t.elapsed());
    }
    if !refused_too {
        return;
    }
    for _ in 0..10 {
        let t = Instant::now();
        let refused = match AcquireStream::acquire(ch.clone(), acquire("")).await {
            Ok(mut stream) => stream.event().await.is_err(),
            Err(_) => true,
        };
        assert!(refused, "an acquire without a name is refused");
        s.refused.push(t.elapsed());
    }
}

async fn raw_round(zk: &zkc::Client, watched: &zkc::Client, s: &mut Samples) {
    let member = mode(zkc::CreateMode::EphemeralSequential);
    let data = [7u8; 45];
    let shaped = "/probe-shaped/locks/probe/_c_0123456789abcdef0123456789abcdef-lock-";
    for _ in 0..10 {
        let (_, seq) = timed(&mut s.create, zk.create("/probe/n-", b"", &member))
            .await
            .expect("create");
        timed(&mut s.list, zk.list_children("/probe"))
            .await
            .expect("list");
        timed(&mut s.delete, zk.delete(&format!("/probe/n-{seq}"), None))
            .await
            .expect("delete");
        let (_, seq) = timed(
            &mut s.watched_create,
            watched.create("/probe-watched/n-", b"", &member),
        )
        .await
        .expect("create under a watch");
        watched
            .delete(&format!("/probe-watched/n-{seq}"), None)
            .await
            .expect("delete");
        let (_, seq) = timed(&mut s.shaped_create, zk.create(shaped, &data, &member))
            .await
            .expect("shaped create");
        timed(
            &mut s.shaped_delete,
            zk.delete(&format!("{shaped}{seq}"), None),
        )
        .await
        .expect("shaped delete");
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, gateway, zk_addr, n] = &args[..] else {
        eprintln!("usage: acquire_probe <gateway host:port> <zookeeper host:port> <acquisitions>");
        std::process::exit(2);
    };
    let n: usize = n.parse().expect("a number of acquisitions");
    let only = std::env::var("PROBE_ONLY").unwrap_or_default();
    let ch = Channel::from_shared(format!("http://{gateway}"))
        .expect("an address")
        .connect()
        .await
        .expect("the gateway");
    let zk = session(zk_addr).await;
    let watched = session(zk_addr).await;
    let persistent = mode(zkc::CreateMode::Persistent);
    for path in [
        "/probe",
        "/probe-watched",
        "/probe-shaped",
        "/probe-shaped/locks",
    ] {
        let _ = zk.create(path, b"", &persistent).await;
    }
    let _ = zk
        .create(
            "/probe-shaped/locks/probe",
            b"",
            &mode(zkc::CreateMode::Container),
        )
        .await;
    // A child that keeps the container from being reaped while the probe runs.
    let _ = zk
        .create(
            "/probe-shaped/locks/probe/keep",
            b"",
            &mode(zkc::CreateMode::Ephemeral),
        )
        .await;
    let mut watch = watched
        .watch("/probe-watched", zkc::AddWatchMode::PersistentRecursive)
        .await
        .expect("a recursive watch");
    tokio::spawn(async move {
        loop {
            watch.changed().await;
        }
    });
    let mut s = Samples::default();
    for _ in 0..n.div_ceil(10) {
        if only != "raw" {
            gateway_round(&ch, &mut s, only.is_empty()).await;
        }
        if only != "gw" {
            raw_round(&zk, &watched, &mut s).await;
        }
    }
    println!(
        "gateway lock acquire, reused name: p50 {:.0} µs (queued at {:.0} µs); release {:.0} µs",
        p50_us(s.acquire),
        p50_us(s.queued),
        p50_us(s.release)
    );
    println!(
        "refused acquire (gRPC alone): p50 {:.0} µs",
        p50_us(s.refused)
    );
    println!(
        "raw create {:.0}, list {:.0}, delete {:.0} µs; create under a recursive watch {:.0} µs; \
         gateway-shaped create {:.0}, delete {:.0} µs (p50)",
        p50_us(s.create),
        p50_us(s.list),
        p50_us(s.delete),
        p50_us(s.watched_create),
        p50_us(s.shaped_create),
        p50_us(s.shaped_delete)
    );
}
