//! The gateway's ZooKeeper session: suspended/resumed across a server restart, ABORTED past
//! the session timeout, a fresh session afterwards, and health that follows the link.

use std::time::{Duration, Instant};

use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::HealthCheckRequest;
use zkgate::proto as pb;
use zkgate::proto::campaign_request::Request as Req;
use zkgate::proto::campaign_response::Event;
use zkgate_testkit::localzk::{LocalZk, LocalZkOptions};
use zkgate_testkit::*;

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

/// ZooKeeper's tick for the restart test: a 1 s tick lets a session last up to 20 s (20 ticks),
/// so the restart has ample time within it even when a loaded machine starts the JVM slowly.
const RESTART_TICK: Duration = Duration::from_secs(1);

/// A ZooKeeper of its own, to stop and start, and a gateway whose 16 s session outlives a
/// restart.
async fn restartable() -> (LocalZk, Gateway) {
    let zk = LocalZk::start_standalone(LocalZkOptions {
        tick_time: RESTART_TICK,
        ..Default::default()
    })
    .await
    .expect("start ZooKeeper");
    let gw = Gateway::start_with(
        &zk.connect_string(),
        GatewayOpts {
            session_timeout: Duration::from_secs(16),
            zk_tick_time: Some(RESTART_TICK),
            ..Default::default()
        },
    )
    .await;
    (zk, gw)
}

#[tokio::test]
async fn restart_within_session_timeout_suspends_then_resumes_keeping_places() {
    let (mut zk, gw) = restartable().await;
    assert_eq!(health(&gw).await, ServingStatus::Serving);
    let mut c = gw.client().await;
    let mut a = Campaign::join(&mut c, "restart", "a", b"").await;
    let mut b = Campaign::join(&mut c, "restart", "b", b"").await;
    let token = a.elected().await.fencing_token;

    zk.stop(0).await.unwrap();
    let stopped = Instant::now();
    // The earliest moment a candidate was told to stop by: ZooKeeper must be back before it
    // for this test's premise (the session outlives the restart).
    let mut deadline: Option<Instant> = None;
    for cand in [&mut a, &mut b] {
        match cand.next().await.unwrap() {
            Some(Event::Suspended(s)) => {
                let within = std::time::Duration::try_from(s.stop_within.unwrap()).unwrap();
                assert!(
                    within > Duration::from_secs(6) && within < Duration::from_secs(16),
                    "stop_within {within:?}"
                );
                let by = Instant::now() + within;
                deadline = Some(deadline.map_or(by, |d| d.min(by)));
            }
            other => panic!("expected suspended, got {other:?}"),
        }
    }
    wait_health(&gw, ServingStatus::NotServing).await;
    zk.start(0).await.unwrap();
    let back = Instant::now();
    assert!(
        back + Duration::from_secs(1) < deadline.expect("both were suspended"),
        "ZooKeeper took {:?} to restart: too close to the candidates' deadline for this test",
        back - stopped
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
    let mut zk = own_standalone().await;
    let gw = Gateway::start_with(
        &zk.connect_string(),
        GatewayOpts {
            session_timeout: Duration::from_secs(4),
            zk_tick_time: Some(Duration::from_millis(500)),
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

/// G2 with a request in flight: an in-stream `proclaim{}` or `resign{}` sent while ZooKeeper is
/// frozen never holds up the stream loop. The leader still hears `suspended` and the stream
/// ends `ABORTED` within `stop_within`, although the request never got an answer.
#[tokio::test]
async fn in_stream_requests_during_a_frozen_zookeeper_still_suspend_then_abort() {
    let mut zk = own_standalone().await;
    let t = Duration::from_secs(4);
    let gw = Gateway::start_with(
        &zk.connect_string(),
        GatewayOpts {
            session_timeout: t,
            zk_tick_time: Some(Duration::from_millis(500)),
            ..Default::default()
        },
    )
    .await;
    let mut c = gw.client().await;
    let mut a = Campaign::join(&mut c, "frozen-proclaim", "a", b"").await;
    a.elected().await;
    let mut b = Campaign::join(&mut c, "frozen-resign", "b", b"").await;
    b.elected().await;

    zk.pause(0).await.unwrap();
    let frozen = Instant::now();
    a.send(Req::Proclaim(pb::ProclaimValue {
        value: b"while frozen".to_vec(),
    }))
    .await;
    b.send(Req::Resign(pb::ResignCandidacy {})).await;
    for (name, cand) in [("a (proclaim)", &mut a), ("b (resign)", &mut b)] {
        let stop_within = match cand.next().await {
            Ok(Some(Event::Suspended(s))) => {
                Duration::try_from(s.stop_within.expect("stop_within")).unwrap()
            }
            other => panic!("{name}: expected suspended, got {other:?}"),
        };
        let suspended = Instant::now();
        cand.expect_end(Some(Code::Aborted)).await;
        let ended = Instant::now();
        assert!(
            ended - suspended <= stop_within + Duration::from_millis(500),
            "{name}: ABORTED {:?} after suspended, stop_within {stop_within:?}",
            ended - suspended
        );
        assert!(
            ended - frozen < t,
            "{name}: ABORTED only {:?} after the freeze",
            ended - frozen
        );
    }
    zk.resume(0).await.unwrap();
    // The old session's znodes go with it once ZooKeeper expires it.
    wait_no_members(
        &zk_client(&zk.connect_string()).await,
        &gw.root,
        Duration::from_secs(20),
    )
    .await;
}

/// G3b against a server that grants less than was asked: an explicit silence limit that the
/// negotiated session timeout cannot honour is clamped (loudly, in the log) to the default for
/// the granted timeout, so a frozen gateway's leaders still stop before the quorum can expire
/// its session.
#[tokio::test]
async fn an_explicit_silence_limit_is_clamped_to_the_granted_session_timeout() {
    let granted = Duration::from_millis(1500);
    let zk = LocalZk::start_standalone(LocalZkOptions {
        max_session_timeout: Some(granted),
        ..Default::default()
    })
    .await
    .expect("start ZooKeeper");
    let configured = Duration::from_millis(1200);
    let gw = Gateway::start_with(
        &zk.connect_string(),
        GatewayOpts {
            session_timeout: Duration::from_secs(4),
            silence_limit: Some(configured),
            ..Default::default()
        },
    )
    .await;
    let session = gw.coord.session().unwrap();
    assert_eq!(
        session.timing.negotiated, granted,
        "the server cut the timeout down"
    );
    let mut c = gw.client().await;
    let mut a = Campaign::join(&mut c, "clamped", "a", b"").await;
    let limit = match a.next().await {
        Ok(Some(Event::Elected(e))) => Duration::try_from(e.silence_limit.unwrap()).unwrap(),
        other => panic!("expected elected, got {other:?}"),
    };
    assert_eq!(
        limit,
        granted * 35 / 100,
        "the default for the granted timeout"
    );
    assert!(limit < session.timing.silence_bound() && limit < configured);
    assert_eq!(session.timing.clamped_silence_limit, Some(configured));
}

/// The next event that is not a heartbeat answering no ping (`seq` 0), failing on any
/// heartbeat that answers a ping in `refused`.
async fn next_but_unsolicited(c: &mut Campaign, refused: impl Fn(u64) -> bool) -> Event {
    skipping_at_most("an event past unsolicited heartbeats", async {
        loop {
            match c.stream.event().await {
                Ok(Some(Event::Heartbeat(h))) if refused(h.seq) => {
                    panic!("ping {} answered while the link was suspended", h.seq)
                }
                Ok(Some(Event::Heartbeat(h))) if h.seq == 0 => continue,
                Ok(Some(e)) => return e,
                other => panic!("stream ended: {other:?}"),
            }
        }
    })
    .await
}

/// A pinging leader's lease is renewed only on a connected link (README "Timing", the lease on
/// the holder's own clock). While ZooKeeper is down the gateway tells its leaders `suspended`;
/// from then on a ping it reads is refused (`zkgate_holder_pings_total{result="unvouched"}`)
/// although the session may still live, so a holder that cannot hear `suspended` stops by its
/// own deadline; once the link is resumed, pings are answered again.
#[tokio::test]
async fn a_suspended_link_answers_no_ping_until_it_is_resumed() {
    let (mut zk, gw) = restartable().await;
    let unvouched = || async {
        metric_value(
            &scrape_metrics(gw.http).await,
            "zkgate_holder_pings_total",
            &[("result", "unvouched")],
        )
    };
    let mut c = gw.client().await;
    let mut join = join_msg("pinged", "a", b"");
    if let Some(Req::Join(j)) = &mut join.request {
        j.ping_seq = 1;
    }
    let mut a = Campaign::queued(CampaignStream::open_with(&mut c, [join]).await.unwrap())
        .await
        .unwrap();
    match next_but_unsolicited(&mut a, |s| s >= 1).await {
        Event::Elected(e) => assert_eq!(e.ping_seq, 1, "the grant carries the join's ping"),
        other => panic!("expected elected, got {other:?}"),
    }
    a.send(Req::Ping(pb::Ping { seq: 2 })).await;
    match a.stream.event().await {
        Ok(Some(Event::Heartbeat(h))) => assert_eq!(h.seq, 2, "a connected link answers"),
        other => panic!("expected the ping's answer, got {other:?}"),
    }

    let before = unvouched().await;
    zk.stop(0).await.unwrap();
    match next_but_unsolicited(&mut a, |s| s >= 3).await {
        Event::Suspended(s) => assert_eq!(s.reason, pb::SuspendReason::Connection as i32),
        other => panic!("expected suspended, got {other:?}"),
    }
    // Two pings read while suspended: refused, each counted, neither answered.
    for seq in [3, 4] {
        a.send(Req::Ping(pb::Ping { seq })).await;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while unvouched().await < before + 2 {
        if Instant::now() > deadline {
            let next = tokio::time::timeout(Duration::from_secs(1), a.stream.event()).await;
            panic!("the pings were not refused; the stream's next message: {next:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    zk.start(0).await.unwrap();
    match next_but_unsolicited(&mut a, |s| s >= 3).await {
        Event::Resumed(_) => {}
        other => panic!("expected resumed, got {other:?}"),
    }
    a.send(Req::Ping(pb::Ping { seq: 5 })).await;
    match next_but_unsolicited(&mut a, |s| s == 3 || s == 4).await {
        Event::Heartbeat(h) => assert_eq!(h.seq, 5, "answered again once resumed"),
        other => panic!("expected the ping's answer, got {other:?}"),
    }
}
