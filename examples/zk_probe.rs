//! Raw ZooKeeper request latency on one session, without the gateway: the floor that
//! election latency through zkgate is compared with.
//!
//! `cargo run --release --example zk_probe [-- HOST:PORT]` (starts a local ZooKeeper otherwise).

use std::time::{Duration, Instant};

use zkgate_testkit::localzk::{LocalZk, LocalZkOptions};
use zookeeper_client as zkc;

#[tokio::main]
async fn main() {
    let given = std::env::args().nth(1);
    let local = match given {
        Some(_) => None,
        None => Some(
            LocalZk::start_standalone(LocalZkOptions::default())
                .await
                .expect("start ZooKeeper"),
        ),
    };
    let zk = given.unwrap_or_else(|| local.as_ref().unwrap().connect_string());
    let client = zkc::Client::connect(&zk).await.unwrap();
    let root = format!("/probe{:x}", rand::random::<u32>());
    client
        .create(
            &root,
            &[],
            &zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let opts = zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all());
    for (name, n) in [("warmup", 50), ("create", 300)] {
        let mut v = Vec::new();
        for _ in 0..n {
            let t = Instant::now();
            client
                .create(&format!("{root}/n-"), b"x", &opts)
                .await
                .unwrap();
            v.push(t.elapsed());
        }
        v.sort();
        println!(
            "{name}: p50 {:?} p99 {:?}",
            v[v.len() / 2],
            v[v.len() * 99 / 100]
        );
    }
    let mut v: Vec<Duration> = Vec::new();
    for _ in 0..300 {
        let t = Instant::now();
        client.get_data(&root).await.unwrap();
        v.push(t.elapsed());
    }
    v.sort();
    println!(
        "get_data: p50 {:?} p99 {:?}",
        v[v.len() / 2],
        v[v.len() * 99 / 100]
    );
}
