//! Election latency through the gateway on this machine.
//!
//! `cargo run --release --example election_bench [-- --zk HOST:PORT] [--rounds N]`
//!
//! Without `--zk` it starts its own local ZooKeeper (Debian's package). Measures, over N rounds:
//! - campaign → elected on a vacant election (join sent → `elected` received);
//! - handoff: the leader's stream is cancelled → the queued successor receives `elected`;
//!
//! and the ZooKeeper requests the gateway sent per handoff.

use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use zkgate::coord::{CoordConfig, Coordinator};
use zkgate::proto as pb;
use zkgate::proto::campaign_request::Request as Req;
use zkgate::proto::campaign_response::Event;
use zkgate::proto::election_client::ElectionClient;
use zkgate::server::{self, ServeConfig};
use zkgate_client::raw::CampaignStream;
use zkgate_testkit::bench::{percentile_ms, zk_or_local, BenchArgs};

type Client = ElectionClient<tonic::transport::Channel>;

async fn join(c: &mut Client, election: &str) -> CampaignStream {
    let join = Req::Join(pb::Join {
        ping_seq: 0,
        election: election.into(),
        candidate: "bench".into(),
        value: vec![],
    })
    .into();
    CampaignStream::open_with(c, [join]).await.unwrap()
}

async fn until_elected(s: &mut CampaignStream) {
    loop {
        match s.event().await.unwrap() {
            Some(Event::Elected(_)) => return,
            Some(_) => continue,
            None => panic!("stream ended"),
        }
    }
}

fn report(name: &str, mut v: Vec<Duration>) {
    v.sort();
    let p = |q: f64| percentile_ms(&v, q);
    println!(
        "{name:<28} n={:<5} p50={:>7.2} ms  p90={:>7.2} ms  p99={:>7.2} ms  max={:>7.2} ms",
        v.len(),
        p(0.5),
        p(0.9),
        p(0.99),
        p(1.0)
    );
}

async fn leader_token(c: &mut ElectionClient<tonic::transport::Channel>, election: &str) -> u64 {
    c.leader(pb::LeaderRequest {
        election: election.into(),
    })
    .await
    .unwrap()
    .into_inner()
    .leader
    .unwrap()
    .fencing_token
}

#[tokio::main]
async fn main() {
    if let Ok(f) = std::env::var("ZKGATE_LOG") {
        tracing_subscriber::fmt().with_env_filter(f).init();
    }
    let args = BenchArgs::from_env();
    let arg = |name: &str| args.get(name);
    let rounds: usize = arg("--rounds").map(|s| s.parse().unwrap()).unwrap_or(300);
    let (zk, local) = zk_or_local(&args).await;
    let mut cc = CoordConfig::new(&zk);
    cc.root = format!("/bench{:x}", rand::random::<u32>());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let coord = Coordinator::start(cc.clone());
    tokio::spawn(server::run_with(
        coord.clone(),
        ServeConfig::new(cc),
        listener,
        None,
        std::future::pending(),
    ));
    assert!(coord.wait_connected(Duration::from_secs(20)).await);
    let mut c = ElectionClient::connect(format!("http://{addr}"))
        .await
        .unwrap();

    // Warm up.
    for i in 0..20 {
        let mut s = join(&mut c, &format!("warm{i}")).await;
        until_elected(&mut s).await;
    }

    let mut elect = Vec::new();
    for i in 0..rounds {
        let t = Instant::now();
        let mut s = join(&mut c, &format!("e{i}")).await;
        until_elected(&mut s).await;
        elect.push(t.elapsed());
    }

    let mut handoff = Vec::new();
    let mut requests = Vec::new();
    let mut leader = join(&mut c, "handoff").await;
    until_elected(&mut leader).await;
    for _ in 0..rounds {
        let mut next = join(&mut c, "handoff").await;
        // Let the successor's queued event settle so only the handoff is measured.
        tokio::time::sleep(Duration::from_millis(2)).await;
        let before = coord.zk_requests();
        let t = Instant::now();
        drop(leader);
        until_elected(&mut next).await;
        handoff.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(5)).await;
        requests.push(coord.zk_requests() - before);
        leader = next;
    }
    // Validate is a CheckSequencer: a `sync` before its reads (Leader has none), so the
    // difference of the two is what answering from the quorum's state costs.
    let token = leader_token(&mut c, "handoff").await;
    let mut leader_rpc = Vec::new();
    let mut validate_rpc = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        c.leader(pb::LeaderRequest {
            election: "handoff".into(),
        })
        .await
        .unwrap();
        leader_rpc.push(t.elapsed());
        let t = Instant::now();
        let v = c
            .validate(pb::ElectionValidateRequest {
                election: "handoff".into(),
                fencing_token: token,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(v.current);
        validate_rpc.push(t.elapsed());
    }
    println!("zkgate election latency, gateway in-process, ZooKeeper {zk}");
    report("campaign -> elected", elect);
    report("handoff (cancel -> elected)", handoff);
    report("Leader (list + read)", leader_rpc);
    report("Validate (sync + list + read)", validate_rpc);
    let avg = requests.iter().sum::<u64>() as f64 / requests.len() as f64;
    println!(
        "ZooKeeper requests per handoff: avg {avg:.2}, max {}",
        requests.iter().max().unwrap()
    );
    if let Some(zk) = local {
        zk.shutdown().await;
    }
}
