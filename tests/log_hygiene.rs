//! What reaches the logs: never a lease or the protected id it encodes, at any log level, and
//! no line forged by a candidate or owner name.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tonic::Code;
use zkgate::proto as pb;
use zkgate::proto::acquire_request::Request as LockReq;
use zkgate::proto::election_client::ElectionClient;
use zkgate::proto::lock_client::LockClient;
use zkgate_testkit::*;

/// The protected id in a member znode's name (`c-<32 hex>-<sequence>`).
fn protected_id(member_path: &str) -> String {
    let name = member_path.rsplit('/').next().unwrap();
    let id = name.split('-').nth(1).unwrap();
    assert_eq!(id.len(), 32, "{member_path}");
    id.to_owned()
}

/// The gateway as the real binary, logging at the most verbose setting, through a campaign,
/// a resign, a lock and a release: neither lease nor protected id may show up, while the
/// ZooKeeper client's own lines (which print request paths at debug and trace) are capped at
/// info rather than silenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_protected_ids_never_reach_the_logs_even_at_trace() {
    let zk = shared_zk();
    let root = unique_root();
    let mut server = Command::new(env!("CARGO_BIN_EXE_zkgate"))
        .args([
            "serve",
            "--log-json",
            "--zk",
            &zk,
            "--root",
            &root,
            "--listen",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--session-timeout",
            "4s",
        ])
        .env("ZKGATE_LOG", "trace")
        .env("RUST_LOG", "trace")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel::<String>();
    let stderr = server.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut log = Vec::new();
    // `zkgate serving` names the bound gRPC address.
    let addr = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(20))
            .expect("the gateway starts");
        log.push(line.clone());
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON log lines");
        if v["fields"]["message"] == "zkgate serving" {
            let grpc = v["fields"]["grpc"].as_str().unwrap().to_owned();
            break grpc
                .trim_start_matches("Some(")
                .trim_end_matches(')')
                .to_owned();
        }
    };
    let url = format!("http://{addr}");
    let zkc = zk_client(&zk).await;

    // Until connected, Campaign answers UNAVAILABLE: retry.
    let mut c = ElectionClient::connect(url.clone()).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut campaign = loop {
        match CampaignStream::open_with(&mut c, [join_msg("hygiene", "alice", b"v")]).await {
            Ok(stream) => match Campaign::queued(stream).await {
                Ok(campaign) => break campaign,
                Err(s) => assert!(tokio::time::Instant::now() < deadline, "no campaign: {s:?}"),
            },
            Err(s) => assert!(tokio::time::Instant::now() < deadline, "{s:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    campaign.elected().await;
    let members = member_znodes(&zkc, &root).await;
    assert_eq!(members.len(), 1);
    let mut secrets = vec![campaign.lease.clone(), protected_id(&members[0])];
    c.resign(pb::ResignRequest {
        lease: campaign.lease.clone(),
    })
    .await
    .unwrap();
    campaign.expect_end(None).await;

    let mut l = LockClient::connect(url).await.unwrap();
    let mut hold = Acquisition::open(&mut l, acquire_msg("hygiene", "bob")).await;
    let lease = hold.acquired().await.lease;
    let members = member_znodes(&zkc, &root).await;
    assert_eq!(members.len(), 1);
    secrets.push(lease.clone());
    secrets.push(protected_id(&members[0]));
    l.release(pb::ReleaseRequest { lease }).await.unwrap();
    while let Ok(Some(_)) = hold.stream.message().await {}
    wait_no_members(&zkc, &root, Duration::from_secs(5)).await;

    zkgate_localzk::process::send_signal(server.id(), "TERM").unwrap();
    assert!(server.wait().unwrap().success());
    reader.join().unwrap();
    log.extend(lines.try_iter());

    let text = log.join("\n");
    for secret in &secrets {
        assert!(!text.contains(secret.as_str()), "{secret} was logged");
        // Nor in upper case, as some formatters print hex.
        assert!(
            !text.contains(&secret.to_uppercase()),
            "{secret} was logged"
        );
    }
    let entries: Vec<serde_json::Value> = log
        .iter()
        .map(|l| serde_json::from_str(l).expect("JSON log lines"))
        .collect();
    let zk_client_levels: Vec<&str> = entries
        .iter()
        .filter(|e| {
            e["target"]
                .as_str()
                .is_some_and(|t| t.starts_with("zookeeper_client"))
        })
        .map(|e| e["level"].as_str().unwrap())
        .collect();
    // The setting took effect (someone logged at trace) …
    assert!(
        entries.iter().any(|e| e["level"] == "TRACE"),
        "nothing logged at trace"
    );
    // … and the ZooKeeper client still logs, but never below info.
    assert!(!zk_client_levels.is_empty(), "no zookeeper_client lines");
    assert!(
        zk_client_levels
            .iter()
            .all(|l| matches!(*l, "INFO" | "WARN" | "ERROR")),
        "{zk_client_levels:?}"
    );
}

/// A newline, carriage return or escape sequence in a candidate or owner name could forge a
/// log line (they are logged when elected or acquired): INVALID_ARGUMENT, and no znode.
#[tokio::test]
async fn control_characters_in_candidates_and_owners_are_refused() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut c = gw.client().await;
    for bad in [
        "alice\nINFO leader elected candidate=mallory",
        "alice\r",
        "\u{1b}[2Jalice",
        "alice\u{2028}bob",
    ] {
        let status = refusal(CampaignStream::open_with(
            &mut c,
            [join_msg("ctl", bad, b"")],
        ))
        .await;
        assert_eq!(status.code(), Code::InvalidArgument, "{bad:?}: {status:?}");
        assert!(status.message().contains("control character"), "{status:?}");

        let mut l = LockClient::connect(gw.url()).await.unwrap();
        let status = refusal(AcquireStream::open_with(
            &mut l,
            [LockReq::Acquire(acquire_msg("ctl", bad)).into()],
        ))
        .await;
        assert_eq!(status.code(), Code::InvalidArgument, "{bad:?}: {status:?}");
    }
    // Ordinary punctuation and non-ASCII names stay fine.
    let mut ok = Campaign::join(&mut c, "ctl", "host-1 (pid 7) — ünïcode", b"").await;
    ok.elected().await;
    drop(ok);
    wait_no_members(&zk_client(&zk).await, &gw.root, Duration::from_secs(5)).await;
}
