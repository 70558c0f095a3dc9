//! G7: a graceful drain ends every stream UNAVAILABLE (retry elsewhere), deletes the znodes at
//! once rather than after the session timeout, and returns promptly.

use std::time::{Duration, Instant};

use tonic::Code;
use zkgate::proto::campaign_response::Event;
use zkgate_testkit::*;

/// The timing of a gateway whose session timeout is `t` (the gateway's own rules).
fn timing(t: Duration) -> zkgate::coord::timing::Timing {
    let mut cfg = zkgate::coord::CoordConfig::new("unused");
    cfg.session_timeout = t;
    zkgate::coord::timing::Timing::requested(&cfg)
}

fn silence_limit(t: Duration) -> Duration {
    timing(t).silence_limit
}

/// Two gateways with session timeout `t` on one root of the shared ZooKeeper.
async fn two_gateways(t: Duration) -> (Gateway, Gateway) {
    let zk = shared_zk();
    let opts = |root: Option<String>| GatewayOpts {
        session_timeout: t,
        root,
        ..Default::default()
    };
    let g1 = Gateway::start_with(&zk, opts(None)).await;
    let g2 = Gateway::start_with(&zk, opts(Some(g1.root.clone()))).await;
    (g1, g2)
}

/// How long a revoked holder that keeps its stream open keeps its znode after the last
/// message sent to it: its silence limit, plus how late that message may reach it (G3c).
fn revoked_after(t: Duration) -> Duration {
    silence_limit(t) + timing(t).client_delay_allowance()
}

/// A drain ends waiters and observers `UNAVAILABLE` at once; a leader is told `suspended` first
/// (G3c) with its silence limit as `stop_within`, and one that keeps its stream open ends
/// `UNAVAILABLE` once that limit, plus the allowance for a slow link, has passed since the last
/// message sent to it. Every znode is then gone at once, long before a 5 s session could have
/// expired.
///
/// (Before G3c the leader ended `UNAVAILABLE` at once and its znode went 500 ms later,
/// whether it had read that or not.)
#[tokio::test]
async fn drain_ends_streams_unavailable_and_removes_znodes_at_once() {
    let zk = shared_zk();
    let t = Duration::from_secs(5);
    let gw = Gateway::start_with(
        &zk,
        GatewayOpts {
            session_timeout: t,
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
    let stopping = tokio::spawn(gw.stop());
    // The observer ends at once (the fan-out closes its view), while the drain still waits for
    // the leader's silence limit.
    let e = tokio::time::timeout(STEP, obs.message())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(
        !stopping.is_finished(),
        "the observer ended only with the drain, {:?} after it started",
        started.elapsed()
    );
    stopping.await.unwrap();
    let took = started.elapsed();
    // The leader never ends its stream: the drain waits its silence limit and the link's
    // allowance, and no more.
    assert!(
        took >= revoked_after(t) && took < revoked_after(t) + Duration::from_secs(3),
        "drain took {took:?} (silence limit and allowance {:?})",
        revoked_after(t)
    );
    match leader.next().await {
        Ok(Some(Event::Suspended(s))) => assert_eq!(
            s.stop_within,
            Some(prost_types::Duration::try_from(silence_limit(t)).unwrap())
        ),
        other => panic!("a drained leader hears suspended first, got {other:?}"),
    }
    for cand in [&mut leader, &mut waiter] {
        let e = cand.next().await.unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "{e:?}");
        assert!(e.message().contains("another gateway"), "{e:?}");
    }
    // Gone now, well before a 5 s session could have expired.
    wait_no_members(&zkc, &root, Duration::from_millis(500)).await;
}

/// G3c with a live holder: a leader that ends its stream when it hears `suspended` (as the
/// client helpers do) is replaced through another gateway at once, not a silence limit later,
/// and the drain does not wait for that limit either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drained_leader_that_ends_its_stream_is_replaced_at_once() {
    // A long silence limit (3.5 s), so "at once" and "after the limit" are far apart.
    let t = Duration::from_secs(10);
    let (g1, g2) = two_gateways(t).await;
    let mut c1 = g1.client().await;
    let mut c2 = g2.client().await;
    let mut leader = Campaign::join(&mut c1, "live-drain", "a", b"").await;
    leader.elected().await;
    let mut successor = Campaign::join(&mut c2, "live-drain", "b", b"").await;

    let started = Instant::now();
    let stopping = tokio::spawn(g1.stop());
    match leader.next().await {
        Ok(Some(Event::Suspended(_))) => {}
        other => panic!("a drained leader hears suspended first, got {other:?}"),
    }
    let told = Instant::now();
    // The leader stops and ends its stream (cancel), as a client helper does.
    drop(leader);
    successor.elected().await;
    let replaced = told.elapsed();
    stopping.await.unwrap();
    let drained = started.elapsed();
    eprintln!(
        "successor elected {replaced:?} after the leader heard suspended; drain took {drained:?} (silence limit {:?})",
        silence_limit(t)
    );
    assert!(
        replaced < silence_limit(t),
        "successor elected only {replaced:?} after the leader ended its stream"
    );
    assert!(drained < silence_limit(t), "drain took {drained:?}");
    successor
        .send(zkgate::proto::campaign_request::Request::Resign(
            zkgate::proto::ResignCandidacy {},
        ))
        .await;
    successor.expect_end(None).await;
}

/// G3c on a slow link: a drained leader hears `suspended{stop_within}` a link delay after it was
/// sent, and counts its `stop_within` from there (a client cannot know how old a message is).
/// One that does not act on it — a stuck process, or a command that ignores SIGTERM until the
/// grace runs out — stops only then; the successor through another gateway must not be elected
/// before. Found on real processes (a CLI verb whose link delayed every packet by 150 ms ran its
/// command 40–99 ms beside its successor): the gateway deleted the znode `silence_limit` after
/// it *sent* the notice. It now waits `Timing::client_delay_allowance` more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_leader_on_a_slow_link_is_replaced_only_after_its_stop_within_where_it_heard_it()
{
    let t = Duration::from_secs(4);
    let (g1, g2) = two_gateways(t).await;
    let delay = Duration::from_millis(300);
    assert!(delay < timing(t).client_delay_allowance());
    let slow = zkgate_testkit::slowlink::SlowLink::start(g1.addr, delay)
        .await
        .unwrap();
    let mut c1 = zkgate::proto::election_client::ElectionClient::connect(slow.url())
        .await
        .unwrap();
    let mut c2 = g2.client().await;
    let mut leader = Campaign::join(&mut c1, "slow-drain", "a", b"").await;
    leader.elected().await;
    let mut successor = Campaign::join(&mut c2, "slow-drain", "b", b"").await;

    let started = Instant::now();
    let stopping = tokio::spawn(g1.stop());
    let (heard, stop_within) = loop {
        match leader.next().await {
            Ok(Some(Event::Suspended(s))) => {
                let within = s.stop_within.expect("a stop_within");
                break (Instant::now(), Duration::try_from(within).unwrap());
            }
            Ok(Some(Event::Heartbeat(_))) => continue,
            other => panic!("a drained leader hears suspended first, got {other:?}"),
        }
    };
    // It does not act on the notice: it stops when `stop_within` from here runs out.
    let stops = heard + stop_within;
    successor.elected().await;
    let elected = Instant::now();
    eprintln!(
        "leader heard suspended {:?} after the drain began (link delay {delay:?}), stop_within {stop_within:?}; successor elected {:?} after the drain began, {:?} after the leader stopped",
        heard - started,
        elected - started,
        elected.saturating_duration_since(stops),
    );
    assert!(
        elected >= stops,
        "the successor was elected {:?} before the leader's stop_within ran out where it heard it",
        stops - elected
    );
    stopping.await.unwrap();
    successor
        .send(zkgate::proto::campaign_request::Request::Resign(
            zkgate::proto::ResignCandidacy {},
        ))
        .await;
    successor.expect_end(None).await;
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
