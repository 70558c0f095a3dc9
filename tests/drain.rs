//! G7: a graceful drain ends every stream UNAVAILABLE (retry elsewhere), deletes the znodes at
//! once rather than after the session timeout, and returns promptly.

use std::time::{Duration, Instant};

use tonic::Code;
use zkgate_testkit::*;

#[tokio::test]
async fn drain_ends_streams_unavailable_and_removes_znodes_at_once() {
    let zk = shared_zk();
    // A long session timeout: if the znodes vanished only by expiry, this test would notice.
    let gw = Gateway::start_with(
        &zk,
        GatewayOpts {
            session_timeout: Duration::from_secs(5),
            ..Default::default()
        },
    )
    .await;
    let root = gw.root.clone();
    let mut c = gw.client().await;
    let mut leader = Campaign::join(&mut c, "drain", "a", b"").await;
    let mut waiter = Campaign::join(&mut c, "drain", "b", b"").await;
    leader.elected().await;
    let mut obs = observe(&mut c, "drain").await;
    assert!(next_observed(&mut obs).await.is_some());
    let zkc = zk_client(&zk).await;
    assert_eq!(member_znodes(&zkc, &root).await.len(), 2);

    let started = Instant::now();
    gw.stop().await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "drain took {took:?}");
    for cand in [&mut leader, &mut waiter] {
        let e = cand.next().await.unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "{e:?}");
        assert!(e.message().contains("another gateway"), "{e:?}");
    }
    let e = tokio::time::timeout(STEP, obs.message())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    // Gone now, well before a 5 s session could have expired.
    wait_no_members(&zkc, &root, Duration::from_millis(500)).await;
}

/// On drain every name health answers for turns NOT_SERVING — the zkgate services too, not
/// only the server's "" — so a load balancer that checks `zkgate.v1.Election` stops sending.
#[tokio::test]
async fn drain_turns_health_not_serving_for_every_service() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::HealthCheckRequest;
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut health = health_client(&gw).await;
    let mut watches = Vec::new();
    for service in ["", "zkgate.v1.Election", "zkgate.v1.Lock"] {
        let mut w = health
            .watch(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        // The current status first, then every change: wait for SERVING.
        loop {
            let m = tokio::time::timeout(STEP, w.message())
                .await
                .expect("a health status in time")
                .unwrap()
                .expect("watch open");
            if m.status == ServingStatus::Serving as i32 {
                break;
            }
        }
        watches.push((service, w));
    }
    // Drain, and keep reading while it runs (the open watches hold the server until dropped).
    let stopping = tokio::spawn(gw.stop());
    for (service, w) in &mut watches {
        loop {
            match tokio::time::timeout(STEP, w.message()).await {
                Ok(Ok(Some(m))) if m.status == ServingStatus::NotServing as i32 => break,
                Ok(Ok(Some(_))) => continue,
                other => panic!("{service:?}: no NOT_SERVING on drain: {other:?}"),
            }
        }
    }
    drop(watches);
    drop(health);
    stopping.await.unwrap();
}
