//! How ZooKeeper and the vendored `zookeeper-client` treat packets above `jute.maxbuffer`
//! (1 MiB by default), without the gateway: the measurements behind `--zk-max-packet` and the
//! queue-size limit (README, "Design decisions").
//!
//! `cargo run --release --example large_queue_probe [-- MEMBERS]` starts a local standalone
//! ZooKeeper 3.8 and, on one session:
//! 1. creates MEMBERS (default 100000) ephemeral sequential znodes with the gateway's protected
//!    names under an election with a 200-character name (pipelined creates), then lists them
//!    with one `getChildren` whose reply is ~49 bytes per member;
//! 2. sends one multi-read whose *request* is above 1 MiB (4,500 paths of ~260 bytes);
//! 3. sends one multi-read whose *reply* is above 1 MiB (20 znodes of 64 KiB);
//!
//! and prints, for each, whether it was answered and whether the session's connection survived.

use std::time::{Duration, Instant};

use zkgate_testkit::localzk::{LocalZk, LocalZkOptions};
use zookeeper_client as zkc;

fn protected_prefix() -> String {
    format!("c-{:032x}-", rand::random::<u128>())
}

async fn connection_survived(client: &zkc::Client) -> String {
    match tokio::time::timeout(Duration::from_secs(5), client.check_stat("/")).await {
        Ok(Ok(_)) => format!("connection alive (session 0x{:x})", client.session_id().0),
        Ok(Err(e)) => format!("next request failed: {e}"),
        Err(_) => "next request timed out".into(),
    }
}

#[tokio::main]
async fn main() {
    let members: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("MEMBERS"))
        .unwrap_or(100_000);
    let zk = LocalZk::start_standalone(LocalZkOptions::default())
        .await
        .expect("start ZooKeeper");
    let client = zkc::Client::connect(&zk.connect_string()).await.unwrap();
    let persistent = zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all());
    let ephemeral = zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all());
    let root = format!("/probe{:x}", rand::random::<u32>());
    let queue = format!("{root}/{}", "e".repeat(200));
    client.create(&root, &[], &persistent).await.unwrap();
    client.create(&queue, &[], &persistent).await.unwrap();

    // 1. A very large queue, then one getChildren.
    let t = Instant::now();
    let mut made = 0;
    while made < members {
        let batch = (members - made).min(5_000);
        let paths: Vec<String> = (0..batch)
            .map(|_| format!("{queue}/{}", protected_prefix()))
            .collect();
        let creates: Vec<_> = paths
            .iter()
            .map(|p| client.create(p, b"x", &ephemeral))
            .collect();
        for r in futures::future::join_all(creates).await {
            r.expect("create");
        }
        made += batch;
    }
    println!(
        "created {members} members in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    match client.list_children(&queue).await {
        Ok(children) => {
            let reply: usize = 24 + children.iter().map(|c| 4 + c.len()).sum::<usize>();
            println!(
                "getChildren: {} names, reply ≈ {reply} bytes ({:.2} MiB), {:.0} ms; {}",
                children.len(),
                reply as f64 / 1048576.0,
                t.elapsed().as_secs_f64() * 1e3,
                connection_survived(&client).await
            );
            // 2. A multi-read whose request is above 1 MiB.
            let paths: Vec<String> = children
                .iter()
                .take(4_500)
                .map(|c| format!("{queue}/{c}"))
                .collect();
            let request: usize = paths.iter().map(|p| 9 + 4 + p.len() + 1).sum::<usize>() + 21;
            let mut reader = client.new_multi_reader();
            for p in &paths {
                reader.add_get_data(p).unwrap();
            }
            let t = Instant::now();
            let r = reader.commit().await;
            println!(
                "multi-read of {} paths, request ≈ {request} bytes ({:.2} MiB): {} after {:.0} ms; {}",
                paths.len(),
                request as f64 / 1048576.0,
                match &r {
                    Ok(v) => format!("answered ({} results)", v.len()),
                    Err(e) => format!("failed: {e}"),
                },
                t.elapsed().as_secs_f64() * 1e3,
                connection_survived(&client).await
            );
        }
        Err(e) => println!(
            "getChildren failed after {:.0} ms: {e}; {}",
            t.elapsed().as_secs_f64() * 1e3,
            connection_survived(&client).await
        ),
    }

    // 3. A multi-read whose reply is above 1 MiB (small request).
    let client = zkc::Client::connect(&zk.connect_string()).await.unwrap();
    let big = format!("{root}/big");
    client.create(&big, &[], &persistent).await.unwrap();
    let value = vec![7u8; 64 * 1024];
    let mut paths = Vec::new();
    for i in 0..20 {
        let p = format!("{big}/n{i}");
        client.create(&p, &value, &persistent).await.unwrap();
        paths.push(p);
    }
    let mut reader = client.new_multi_reader();
    for p in &paths {
        reader.add_get_data(p).unwrap();
    }
    let t = Instant::now();
    let r = reader.commit().await;
    println!(
        "multi-read of 20 × 64 KiB, reply ≈ {} bytes ({:.2} MiB): {} after {:.0} ms; {}",
        20 * (9 + 4 + value.len() + 68) + 21,
        (20 * (9 + 4 + value.len() + 68) + 21) as f64 / 1048576.0,
        match &r {
            Ok(v) => format!("answered ({} results)", v.len()),
            Err(e) => format!("failed: {e}"),
        },
        t.elapsed().as_secs_f64() * 1e3,
        connection_survived(&client).await
    );
}
