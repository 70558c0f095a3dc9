//! The gateway's ZooKeeper session: suspended/resumed across a server restart, ABORTED past
//! the session timeout, a fresh session afterwards, and health that follows the link.

mod common;

use std::time::{Duration, Instant};

use common::*;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::HealthCheckRequest;
use zkgate::localzk::{LocalZk, LocalZkOptions};
use zkgate::proto::campaign_response::Event;

async fn zk_with_long_sessions() -> LocalZk {
    // tickTime 500 ms allows session timeouts up to 10 s.
    LocalZk::start_standalone(LocalZkOptions {
        tick_time: Duration::from_millis(500),
        ..Default::default()
    })
    .await
    .expect("start ZooKeeper")
}

async fn health(gw: &Gateway) -> ServingStatus {
    let mut h = health_client(gw).await;
    h.check(HealthCheckRequest {
        service: "zkgate.v1.Election".into(),
    })
    .await
    .unwrap()
    .into_inner()
    .status()
}

async fn wait_health(gw: &Gateway, want: ServingStatus) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while health(gw).await != want {
        assert!(Instant::now() < deadline, "health never became {want:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn restart_within_session_timeout_suspends_then_resumes_keeping_places() {
    let mut zk = zk_with_long_sessions().await;
    let gw = Gateway::start_with(
        &zk.connect_string(),
        GatewayOpts {
            session_timeout: Duration::from_secs(8),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(health(&gw).await, ServingStatus::Serving);
    let mut c = gw.client().await;
    let mut a = Campaign::join(&mut c, "restart", "a", b"").await;
    let mut b = Campaign::join(&mut c, "restart", "b", b"").await;
    let token = a.elected().await.fencing_token;

    zk.stop(0).await.unwrap();
    let stopped = Instant::now();
    for cand in [&mut a, &mut b] {
        match cand.next().await.unwrap() {
            Some(Event::Suspended(s)) => {
                let within = std::time::Duration::try_from(s.stop_within.unwrap()).unwrap();
                assert!(
                    within > Duration::from_secs(3) && within < Duration::from_secs(8),
                    "stop_within {within:?}"
                );
            }
            other => panic!("expected suspended, got {other:?}"),
        }
    }
    wait_health(&gw, ServingStatus::NotServing).await;
    zk.start(0).await.unwrap();
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "restart took too long for this test"
    );
    for cand in [&mut a, &mut b] {
        match cand.next().await.unwrap() {
            Some(Event::Resumed(_)) => {}
            other => panic!("expected resumed, got {other:?}"),
        }
    }
    wait_health(&gw, ServingStatus::Serving).await;
    // Same places: a still leads with its token; b is next.
    let mut c2 = gw.client().await;
    let leader = c2
        .leader(zkgate::proto::LeaderRequest {
            election: "restart".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(leader.leader.unwrap().fencing_token, token);
    b.quiet_for(Duration::from_millis(200)).await;
    drop(a);
    assert_eq!(b.elected().await.candidate, "b");
    drop(b);
    wait_no_members(
        &zk_client(&zk.connect_string()).await,
        &gw.root,
        Duration::from_secs(5),
    )
    .await;
}

#[tokio::test]
async fn down_past_session_timeout_aborts_streams_then_new_campaigns_work() {
    let mut zk = zk_with_long_sessions().await;
    let gw = Gateway::start_with(
        &zk.connect_string(),
        GatewayOpts {
            session_timeout: Duration::from_secs(4),
            ..Default::default()
        },
    )
    .await;
    let mut c = gw.client().await;
    let mut a = Campaign::join(&mut c, "down", "a", b"").await;
    let mut b = Campaign::join(&mut c, "down", "b", b"").await;
    a.elected().await;
    let mut obs = observe(&mut c, "down").await;
    assert!(next_observed(&mut obs).await.is_some());

    zk.stop(0).await.unwrap();
    let stopped = Instant::now();
    for cand in [&mut a, &mut b] {
        assert!(matches!(
            cand.next().await.unwrap(),
            Some(Event::Suspended(_))
        ));
        cand.expect_end(Some(Code::Aborted)).await;
    }
    // Ended before the server could have expired the session (4 s after the last contact).
    assert!(
        stopped.elapsed() < Duration::from_secs(4),
        "aborted only after {:?}",
        stopped.elapsed()
    );
    let e = tokio::time::timeout(STEP, obs.message())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code(), Code::Aborted, "{e:?}");

    tokio::time::sleep(Duration::from_secs(1)).await;
    zk.start(0).await.unwrap();
    assert!(gw.coord.wait_connected(Duration::from_secs(20)).await);
    let mut c = gw.client().await;
    let mut fresh = Campaign::join(&mut c, "down", "fresh", b"").await;
    // The old session's znodes go when ZooKeeper expires (or we close) that session.
    let leader = tokio::time::timeout(Duration::from_secs(15), fresh.elected())
        .await
        .expect("elected after the old session ended");
    assert_eq!(leader.candidate, "fresh");
}
