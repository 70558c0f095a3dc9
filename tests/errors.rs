//! Every bad input of contract "Errors" gets a precise status, and leaves no znode behind (G8).
// `Streaming` is not Debug, so `expect_err` is not available on these results.
#![allow(clippy::err_expect)]

use std::time::Duration;

use tonic::Code;
use zkgate::coord::types::{Lease, MemberMode, MemberName, ProtectedId, QueueKind, QueueName};
use zkgate::proto as pb;
use zkgate::proto::campaign_request::Request as Req;
use zkgate_testkit::*;

/// A lease for a znode that never existed, signed like a real one (the in-process gateway's
/// key is this process's), so only the znode's absence makes it `NOT_FOUND`.
fn fake_lease(kind: QueueKind, queue: &str) -> String {
    let id = ProtectedId::random();
    let member = MemberName::parse(&format!(
        "{}{:010}",
        MemberName::prefix(MemberMode::Candidate, &id),
        1
    ))
    .unwrap();
    Lease {
        kind,
        queue: QueueName::new(queue).unwrap(),
        member,
    }
    .encode(&zkgate::auth::LeaseKeys::per_process())
}

#[tokio::test]
async fn bad_campaigns_are_refused_with_precise_codes_and_leave_nothing() {
    let zk = shared_zk();
    let gw = Gateway::start_with(
        &zk,
        GatewayOpts {
            max_value_bytes: Some(16),
            ..Default::default()
        },
    )
    .await;
    let mut c = gw.client().await;
    let long = "x".repeat(201);
    let cases: Vec<(&str, Vec<pb::CampaignRequest>, Code)> = vec![
        (
            "empty election",
            vec![join_msg("", "a", b"")],
            Code::InvalidArgument,
        ),
        (
            "slash in election",
            vec![join_msg("a/b", "a", b"")],
            Code::InvalidArgument,
        ),
        (
            "space in election",
            vec![join_msg("a b", "a", b"")],
            Code::InvalidArgument,
        ),
        ("dot", vec![join_msg(".", "a", b"")], Code::InvalidArgument),
        (
            "dotdot",
            vec![join_msg("..", "a", b"")],
            Code::InvalidArgument,
        ),
        (
            "201 chars",
            vec![join_msg(&long, "a", b"")],
            Code::InvalidArgument,
        ),
        (
            "non-ascii",
            vec![join_msg("é", "a", b"")],
            Code::InvalidArgument,
        ),
        (
            "empty candidate",
            vec![join_msg("e", "", b"")],
            Code::InvalidArgument,
        ),
        (
            "value over limit",
            vec![join_msg("e", "a", &[0u8; 17])],
            Code::InvalidArgument,
        ),
        (
            "proclaim first",
            vec![pb::CampaignRequest {
                request: Some(Req::Proclaim(pb::ProclaimValue { value: vec![] })),
            }],
            Code::InvalidArgument,
        ),
        (
            "resign first",
            vec![pb::CampaignRequest {
                request: Some(Req::Resign(pb::ResignCandidacy {})),
            }],
            Code::InvalidArgument,
        ),
        (
            "empty first message",
            vec![pb::CampaignRequest { request: None }],
            Code::InvalidArgument,
        ),
        ("closed before join", vec![], Code::InvalidArgument),
    ];
    for (what, msgs, code) in cases {
        let status = if msgs.is_empty() {
            // A request stream that ends without any message.
            let r = c
                .campaign(tokio_stream::iter(Vec::<pb::CampaignRequest>::new()))
                .await;
            r.err().expect("refused")
        } else {
            refusal(CampaignStream::open_with(&mut c, msgs)).await
        };
        assert_eq!(status.code(), code, "{what}: {status:?}");
        assert!(
            !status.message().is_empty(),
            "{what}: a message a person can act on"
        );
    }
    // The exact value limit is accepted.
    let ok = Campaign::join(&mut c, "limit", "a", &[0u8; 16]).await;
    drop(ok);
    wait_no_members(&zk_client(&zk).await, &gw.root, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn bad_messages_inside_a_campaign_end_it_and_release_the_znode() {
    let zk = shared_zk();
    let gw = Gateway::start_with(
        &zk,
        GatewayOpts {
            max_value_bytes: Some(16),
            ..Default::default()
        },
    )
    .await;
    let mut c = gw.client().await;
    let zkc = zk_client(&zk).await;

    let mut a = Campaign::join(&mut c, "inner", "a", b"").await;
    a.elected().await;
    a.send(Req::Join(pb::Join {
        ping_seq: 0,
        election: "inner".into(),
        candidate: "again".into(),
        value: vec![],
    }))
    .await;
    a.expect_end(Some(Code::InvalidArgument)).await;
    wait_no_members(&zkc, &gw.root, Duration::from_secs(5)).await;

    let mut b = Campaign::join(&mut c, "inner", "b", b"").await;
    b.elected().await;
    b.send(Req::Proclaim(pb::ProclaimValue { value: vec![1; 17] }))
        .await;
    b.expect_end(Some(Code::InvalidArgument)).await;
    wait_no_members(&zkc, &gw.root, Duration::from_secs(5)).await;

    let mut d = Campaign::join(&mut c, "inner", "d", b"").await;
    d.elected().await;
    d.stream
        .send(pb::CampaignRequest { request: None })
        .await
        .unwrap();
    d.expect_end(Some(Code::InvalidArgument)).await;
    wait_no_members(&zkc, &gw.root, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn unknown_or_malformed_leases_are_not_found() {
    let zk = shared_zk();
    let gw = Gateway::start_with(
        &zk,
        GatewayOpts {
            max_value_bytes: Some(16),
            ..Default::default()
        },
    )
    .await;
    let mut c = gw.client().await;
    let never_issued = fake_lease(QueueKind::Election, "e");
    let lock_lease = fake_lease(QueueKind::Lock, "e");
    for lease in [
        "",
        "nonsense",
        "zkg1.",
        "zkg1.zz",
        never_issued.as_str(),
        lock_lease.as_str(),
    ] {
        let e = c
            .resign(pb::ResignRequest {
                lease: lease.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "resign {lease:?}: {e:?}");
        let e = c
            .proclaim(pb::ProclaimRequest {
                lease: lease.into(),
                value: vec![],
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "proclaim {lease:?}: {e:?}");
    }
    // A real lease, with an oversized value: the value is checked first.
    let mut a = Campaign::join(&mut c, "e", "a", b"").await;
    a.elected().await;
    let e = c
        .proclaim(pb::ProclaimRequest {
            lease: a.lease.clone(),
            value: vec![0; 17],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    // A lease for the same znode but a tampered id is unknown.
    let mut tampered = a.lease.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == '0' { '1' } else { '0' });
    let e = c
        .resign(pb::ResignRequest { lease: tampered })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    a.quiet_for(Duration::from_millis(100)).await;
}

#[tokio::test]
async fn read_apis_validate_names_and_report_no_leader() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut c = gw.client().await;
    for bad in ["", "a/b", "..", "x y"] {
        let e = c
            .leader(pb::LeaderRequest {
                election: bad.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad:?}");
        let e = c
            .candidates(pb::CandidatesRequest {
                election: bad.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        let e = c
            .validate(pb::ElectionValidateRequest {
                election: bad.into(),
                fencing_token: 1,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        let e = c
            .observe(pb::ObserveRequest {
                election: bad.into(),
            })
            .await
            .err()
            .expect("refused");
        assert_eq!(e.code(), Code::InvalidArgument);
    }
    let e = c
        .leader(pb::LeaderRequest {
            election: "nobody".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("no leader"), "{e:?}");
    let r = c
        .candidates(pb::CandidatesRequest {
            election: "nobody".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.candidates.is_empty());
    let v = c
        .validate(pb::ElectionValidateRequest {
            election: "nobody".into(),
            fencing_token: 7,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!v.current);
}

#[tokio::test]
async fn no_zookeeper_is_unavailable() {
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gw = Gateway::start_unconnected(&format!("127.0.0.1:{port}")).await;
    let mut c = gw.client().await;
    let e = refusal(CampaignStream::open_with(&mut c, [join_msg("e", "a", b"")])).await;
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("ZooKeeper"), "{e:?}");
    let e = c
        .leader(pb::LeaderRequest {
            election: "e".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    let e = c
        .observe(pb::ObserveRequest {
            election: "e".into(),
        })
        .await
        .err()
        .unwrap();
    assert_eq!(e.code(), Code::Unavailable);
    let e = c
        .resign(pb::ResignRequest {
            lease: fake_lease(QueueKind::Election, "e"),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    // Health says so too.
    let mut h = health_client(&gw).await;
    let s = h
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        s.status(),
        tonic_health::pb::health_check_response::ServingStatus::NotServing
    );
}
