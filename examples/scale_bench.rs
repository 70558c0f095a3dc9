//! Scale figures for one gateway (issue 9): how many holder streams it serves, the memory each
//! costs, how long enqueueing them takes, and how long `Candidates` takes on a 20,000-member
//! queue. A benchmark, not a test: it prints figures; nothing is asserted.
//!
//! ```text
//! cargo build --release && cargo run --release --example scale_bench -- --streams 100000
//! ```
//!
//! Starts a local ZooKeeper and the release `zkgate` binary (next to this example in
//! `target/release`) as a child process, so the gateway's resident memory (`VmRSS`) is its own.
//! The streams come from this process over `streams / 1000` connections (the default
//! per-connection limit), 1,000 members per election except one election of 20,000 members
//! (read back with `Candidates`, page by page).

use zkgate_testkit as support;

use std::time::{Duration, Instant};

use support::procgw::{GatewayProc, GatewaySpec};
use tonic::transport::Channel;
use zkgate::proto as pb;
use zkgate::proto::campaign_request::Request as Req;
use zkgate::proto::campaign_response::Event;
use zkgate::proto::election_client::ElectionClient;
use zkgate_client::raw::CampaignStream;
use zkgate_testkit::localzk::{LocalZk, LocalZkOptions};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn join(c: &mut ElectionClient<Channel>, election: &str, candidate: &str) -> CampaignStream {
    let join = Req::Join(pb::Join {
        ping_seq: 0,
        election: election.into(),
        candidate: candidate.into(),
        value: Vec::new(),
    })
    .into();
    let mut stream = CampaignStream::open_with(c, [join]).await.unwrap();
    match stream.event().await.unwrap() {
        Some(Event::Queued(_)) => stream,
        other => panic!("first message {other:?}"),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let streams: usize = arg("--streams").map_or(50_000, |s| s.parse().unwrap());
    let big: usize = arg("--big").map_or(20_000, |s| s.parse().unwrap());
    let zk = LocalZk::start_standalone(LocalZkOptions::default())
        .await
        .expect("start ZooKeeper");
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("zkgate");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --release` first",
        bin.display()
    );
    let root = support::named_root("scale");
    let mut spec = GatewaySpec::binary(
        bin.to_str().unwrap(),
        &zk.connect_string(),
        &root,
        Duration::from_secs(10),
    );
    spec.extra = vec![
        "--max-holder-streams".into(),
        streams.max(1).to_string(),
        "--max-value-bytes".into(),
        "1024".into(),
    ];
    let gw = GatewayProc::spawn("scale", spec).await.unwrap();
    let url = gw.url();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let base = rss_kib(gw.pid);

    let connections = streams.div_ceil(1000);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for conn in 0..connections {
        let url = url.clone();
        let n = 1000.min(streams - conn * 1000);
        tasks.push(tokio::spawn(async move {
            let c = ElectionClient::connect(url).await.unwrap();
            let mut workers = Vec::new();
            for w in 0..8 {
                let mut c = c.clone();
                workers.push(tokio::spawn(async move {
                    let mut held = Vec::new();
                    for i in (w..n).step_by(8) {
                        let k = conn * 1000 + i;
                        let election = if k < big {
                            "big".to_owned()
                        } else {
                            format!("e{}", k / 1000)
                        };
                        held.push(join(&mut c, &election, &format!("candidate-{k:06}")).await);
                    }
                    held
                }));
            }
            let mut held = Vec::new();
            for w in workers {
                held.extend(w.await.unwrap());
            }
            held
        }));
    }
    let mut held = Vec::new();
    for t in tasks {
        held.extend(t.await.unwrap());
    }
    let enqueue = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let loaded = rss_kib(gw.pid);

    let mut c = ElectionClient::connect(url.clone()).await.unwrap();
    let mut reads = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let mut token = String::new();
        let mut seen = 0;
        let mut pages = 0;
        loop {
            let r = c
                .candidates(pb::CandidatesRequest {
                    election: "big".into(),
                    page_token: token.clone(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            seen += r.candidates.len();
            pages += 1;
            if r.next_page_token.is_empty() {
                break;
            }
            token = r.next_page_token;
        }
        assert_eq!(seen, big.min(streams));
        reads.push((t.elapsed(), pages));
    }
    reads.sort();
    println!("zkgate scale, one gateway (release binary, child process), standalone ZooKeeper 3.8");
    println!(
        "holder streams: {} over {connections} connections, enqueued (all `queued`) in {:.2} s ({:.0}/s)",
        held.len(),
        enqueue.as_secs_f64(),
        held.len() as f64 / enqueue.as_secs_f64()
    );
    println!(
        "gateway RSS: {:.1} MiB idle, {:.1} MiB with the streams: {:.1} KiB per stream",
        base as f64 / 1024.0,
        loaded as f64 / 1024.0,
        (loaded.saturating_sub(base)) as f64 / held.len() as f64
    );
    println!(
        "Candidates on a {}-member queue (all pages): median {:?} over 5 reads, {} pages",
        big.min(streams),
        reads[2].0,
        reads[2].1
    );
    drop(held);
    drop(gw);
    zk.shutdown().await;
}
