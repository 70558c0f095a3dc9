//! G7: a graceful drain ends every stream UNAVAILABLE (retry elsewhere), deletes the znodes at
//! once rather than after the session timeout, and returns promptly.

mod common;

use std::time::{Duration, Instant};

use common::*;
use tonic::Code;

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
