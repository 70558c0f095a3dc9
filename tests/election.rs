//! The Election service end to end, against a real ZooKeeper.

use std::time::Duration;

use tonic::Code;
use zkgate::proto as pb;
use zkgate::proto::campaign_request::Request as Req;
use zkgate::proto::campaign_response::Event;
use zkgate_testkit::*;

#[tokio::test]
async fn fifo_order_of_five_candidates_and_cancel_releases() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut c = gw.client().await;
    let mut cands = Vec::new();
    for i in 0..5 {
        let cand = Campaign::join(&mut c, "fifo", &format!("c{i}"), b"v").await;
        assert_eq!(cand.position, i, "position counts the candidates ahead");
        cands.push(cand);
    }
    let zkc = zk_client(&zk).await;
    let mut last_token = 0;
    for i in 0..5 {
        let mut cand = cands.remove(0);
        let leader = cand.elected().await;
        assert_eq!(leader.candidate, format!("c{i}"));
        assert!(leader.fencing_token > last_token);
        last_token = leader.fencing_token;
        // Nobody behind the leader has heard anything.
        if let Some(next) = cands.first_mut() {
            next.quiet_for(Duration::from_millis(100)).await;
        }
        assert_eq!(member_znodes(&zkc, &gw.root).await.len(), 5 - i as usize);
        drop(cand); // cancel: stream loss is release
    }
    wait_no_members(&zkc, &gw.root, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn resign_in_stream_and_by_lease_from_another_gateway() {
    let zk = shared_zk();
    let (gw, other) = two_gateways_on_one_root(&zk).await;
    let mut c = gw.client().await;
    let mut c2 = other.client().await;

    let mut a = Campaign::join(&mut c, "resign", "a", b"").await;
    let mut b = Campaign::join(&mut c, "resign", "b", b"").await;
    a.elected().await;
    a.send(Req::Resign(pb::ResignCandidacy {})).await;
    a.expect_end(None).await;
    b.elected().await;

    // Resign by lease on another gateway: the stream on the first gateway ends OK.
    c2.resign(pb::ResignRequest {
        lease: b.lease.clone(),
    })
    .await
    .expect("resign by lease");
    b.expect_end(None).await;
    let again = c2
        .resign(pb::ResignRequest {
            lease: b.lease.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::NotFound, "{again:?}");
    let again = c
        .resign(pb::ResignRequest {
            lease: a.lease.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::NotFound);

    // A waiting (not leading) candidate can be resigned by lease too.
    let mut x = Campaign::join(&mut c, "resign", "x", b"").await;
    let mut y = Campaign::join(&mut c, "resign", "y", b"").await;
    x.elected().await;
    c2.resign(pb::ResignRequest {
        lease: y.lease.clone(),
    })
    .await
    .unwrap();
    y.expect_end(None).await;
    x.quiet_for(Duration::from_millis(100)).await;
    drop(x);
    wait_no_members(&zk_client(&zk).await, &gw.root, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn half_close_keeps_candidacy() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut c = gw.client().await;
    let mut a = Campaign::join(&mut c, "halfclose", "a", b"").await;
    let mut b = Campaign::join(&mut c, "halfclose", "b", b"").await;
    a.elected().await;
    // Close the request side of b (like grpcurl -d): b stays a candidate and is elected next.
    b.stream.close_requests();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        member_znodes(&zk_client(&zk).await, &gw.root).await.len(),
        2
    );
    drop(a);
    assert_eq!(b.elected().await.candidate, "b");
}

#[tokio::test]
async fn proclaim_by_leader_and_non_leader() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut c = gw.client().await;
    let mut obs = observe(&mut c, "procl").await;
    assert!(next_observed(&mut obs).await.is_none(), "vacant first");

    let mut a = Campaign::join(&mut c, "procl", "a", b"v1").await;
    let mut b = Campaign::join(&mut c, "procl", "b", b"").await;
    let la = a.elected().await;
    assert_eq!(la.value, b"v1");
    let seen = next_observed(&mut obs).await.expect("leader");
    assert_eq!(
        (seen.candidate.as_str(), seen.value.as_slice()),
        ("a", &b"v1"[..])
    );

    // In-stream proclaim.
    a.send(Req::Proclaim(pb::ProclaimValue {
        value: b"v2".to_vec(),
    }))
    .await;
    match a.next().await.unwrap() {
        Some(Event::Proclaimed(p)) => {
            let l = p.leader.unwrap();
            assert_eq!(l.value, b"v2");
            assert_eq!(
                l.fencing_token, la.fencing_token,
                "proclaim keeps the token"
            );
        }
        other => panic!("expected proclaimed, got {other:?}"),
    }
    assert_eq!(next_observed(&mut obs).await.unwrap().value, b"v2");

    // Proclaim RPC by lease.
    let r = c
        .proclaim(pb::ProclaimRequest {
            lease: a.lease.clone(),
            value: b"v3".to_vec(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.leader.unwrap().value, b"v3");
    assert_eq!(next_observed(&mut obs).await.unwrap().value, b"v3");
    match a.next().await.unwrap() {
        Some(Event::Proclaimed(p)) => assert_eq!(p.leader.unwrap().value, b"v3"),
        other => panic!("expected proclaimed, got {other:?}"),
    }
    let leader = c
        .leader(pb::LeaderRequest {
            election: "procl".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .leader
        .unwrap();
    assert_eq!(leader.value, b"v3");

    // A non-leader may not proclaim: by lease, and in-stream.
    let e = c
        .proclaim(pb::ProclaimRequest {
            lease: b.lease.clone(),
            value: b"x".to_vec(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    b.send(Req::Proclaim(pb::ProclaimValue {
        value: b"x".to_vec(),
    }))
    .await;
    b.expect_end(Some(Code::FailedPrecondition)).await;
    drop(a);
    assert!(
        next_observed(&mut obs).await.is_none(),
        "vacant after the last candidate left"
    );
    wait_no_members(&zk_client(&zk).await, &gw.root, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn observe_vacant_leader_vacant_and_handoff() {
    let zk = shared_zk();
    let (gw, other) = two_gateways_on_one_root(&zk).await;
    let mut c = gw.client().await;
    let mut c2 = other.client().await;
    let mut obs_local = observe(&mut c, "obs").await;
    let mut obs_remote = observe(&mut c2, "obs").await;
    assert!(next_observed(&mut obs_local).await.is_none());
    assert!(next_observed(&mut obs_remote).await.is_none());

    let mut a = Campaign::join(&mut c, "obs", "a", b"").await;
    let ta = a.elected().await.fencing_token;
    for obs in [&mut obs_local, &mut obs_remote] {
        let l = next_observed(obs).await.expect("leader a");
        assert_eq!((l.candidate.as_str(), l.fencing_token), ("a", ta));
    }
    let mut b = Campaign::join(&mut c2, "obs", "b", b"").await;
    drop(a);
    let tb = b.elected().await.fencing_token;
    assert!(tb > ta);
    for obs in [&mut obs_local, &mut obs_remote] {
        // Between two leaders an observer may see the interregnum; tokens never go down.
        let mut l = next_observed(obs).await;
        if l.is_none() {
            l = next_observed(obs).await;
        }
        assert_eq!(l.expect("leader b").fencing_token, tb);
    }
    drop(b);
    for obs in [&mut obs_local, &mut obs_remote] {
        assert!(next_observed(obs).await.is_none(), "vacant at the end");
    }
    let e = c
        .leader(pb::LeaderRequest {
            election: "obs".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
}

#[tokio::test]
async fn fifty_candidates_one_change_costs_constant_requests_and_wakes_only_the_successor() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut c = gw.client().await;
    let mut obs = observe(&mut c, "herd").await;
    let _ = next_observed(&mut obs).await;
    let mut cands = Vec::new();
    for i in 0..50 {
        cands.push(Campaign::join(&mut c, "herd", &format!("c{i}"), b"").await);
    }
    let mut first = cands.remove(0);
    first.elected().await;
    next_observed(&mut obs).await.expect("leader");
    tokio::time::sleep(Duration::from_millis(300)).await;

    let before = gw.coord.zk_requests();
    drop(first);
    let mut second = cands.remove(0);
    assert_eq!(second.elected().await.candidate, "c1");
    // Let any stragglers (observer fetches, the old node's delete) finish.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cost = gw.coord.zk_requests() - before;
    // delete + confirm (set_data) + at most a couple of reads: independent of the 48 waiters.
    assert!(
        cost <= 5,
        "one leader change cost {cost} ZooKeeper requests"
    );
    // Only the successor was woken: every other waiter heard nothing since `queued`.
    for w in cands.iter_mut() {
        w.quiet_for(Duration::from_millis(5)).await;
    }
}

/// On a name whose queue lingers, a campaign costs ZooKeeper what the raw recipe's does: the
/// create (whose reply confirms the new leader) and the delete — no read of the new head.
#[tokio::test]
async fn a_campaign_on_a_reused_name_costs_its_create_and_its_delete() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut c = gw.client().await;
    let mut costs = Vec::new();
    for i in 0..6 {
        let before = gw.coord.zk_requests();
        let mut cand = Campaign::join(&mut c, "reused", &format!("l{i}"), b"").await;
        cand.elected().await;
        cand.send(Req::Resign(pb::ResignCandidacy {})).await;
        cand.expect_end(None).await;
        costs.push(gw.coord.zk_requests() - before);
    }
    // The first round also places the queue's watch and lists it; a retry after a stalled
    // connection on a loaded machine may add one to a round, never remove one.
    assert_eq!(
        costs[1..].iter().min(),
        Some(&2),
        "requests per round: {costs:?}"
    );
}

#[tokio::test]
async fn twenty_successive_leaders_have_increasing_tokens_and_validate() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut c = gw.client().await;
    let mut tokens = Vec::new();
    for i in 0..20 {
        let mut cand = Campaign::join(&mut c, "tokens", &format!("l{i}"), b"").await;
        let l = cand.elected().await;
        let v = c
            .validate(pb::ElectionValidateRequest {
                election: "tokens".into(),
                fencing_token: l.fencing_token,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(v.current);
        assert_eq!(v.leader.unwrap().candidate, format!("l{i}"));
        if let Some(&old) = tokens.last() {
            assert!(l.fencing_token > old, "tokens must strictly increase");
            let v = c
                .validate(pb::ElectionValidateRequest {
                    election: "tokens".into(),
                    fencing_token: old,
                })
                .await
                .unwrap()
                .into_inner();
            assert!(!v.current, "an old leader's token is not current");
        }
        tokens.push(l.fencing_token);
        drop(cand);
    }
    wait_no_members(&zk_client(&zk).await, &gw.root, Duration::from_secs(5)).await;
    let v = c
        .validate(pb::ElectionValidateRequest {
            election: "tokens".into(),
            fencing_token: *tokens.last().unwrap(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!v.current && v.leader.is_none(), "nobody leads any more");
}

#[tokio::test]
async fn leases_never_leak_through_read_apis() {
    use prost::Message;
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut c = gw.client().await;
    let mut obs = observe(&mut c, "secret").await;
    let _ = next_observed(&mut obs).await;
    let mut a = Campaign::join(&mut c, "secret", "a", b"").await;
    let _b = Campaign::join(&mut c, "secret", "b", b"").await;
    a.elected().await;
    // The znode name's protected id is the lease's secret: it must appear nowhere else.
    let zkc = zk_client(&zk).await;
    let ids: Vec<String> = member_znodes(&zkc, &gw.root)
        .await
        .iter()
        .map(|p| p.rsplit('/').next().unwrap()[2..34].to_owned())
        .collect();
    assert_eq!(ids.len(), 2);
    let mut blobs: Vec<Vec<u8>> = Vec::new();
    blobs.push(
        c.leader(pb::LeaderRequest {
            election: "secret".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .encode_to_vec(),
    );
    blobs.push(
        c.candidates(pb::CandidatesRequest {
            election: "secret".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .encode_to_vec(),
    );
    blobs.push(
        tokio::time::timeout(STEP, obs.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
            .encode_to_vec(),
    );
    let cands = c
        .candidates(pb::CandidatesRequest {
            election: "secret".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        cands
            .candidates
            .iter()
            .map(|x| x.candidate.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert!(cands.candidates[0].leader && !cands.candidates[1].leader);
    assert_eq!(cands.candidates[1].position, 1);
    for blob in &blobs {
        let text = String::from_utf8_lossy(blob).to_lowercase();
        for id in &ids {
            assert!(!text.contains(id.as_str()), "a lease secret leaked");
        }
        assert!(!text.contains(&a.lease.to_lowercase()));
    }
}

#[tokio::test]
async fn observe_first_message_is_the_existing_leader_on_a_fresh_gateway() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut c = gw.client().await;
    let mut a = Campaign::join(&mut c, "first", "a", b"v").await;
    let token = a.elected().await.fencing_token;
    // A second gateway that has never seen this election: its first Observe message must be
    // the leader, not a vacancy, and so must Leader/Validate.
    for _ in 0..3 {
        let other = Gateway::start_beside(&zk, &gw).await;
        let mut c2 = other.client().await;
        let mut obs = observe(&mut c2, "first").await;
        let l = next_observed(&mut obs)
            .await
            .expect("the current leader first");
        assert_eq!((l.candidate.as_str(), l.fencing_token), ("a", token));
        let v = c2
            .validate(pb::ElectionValidateRequest {
                election: "first".into(),
                fencing_token: token,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(v.current);
    }
    a.quiet_for(Duration::from_millis(50)).await;
}

#[tokio::test]
async fn a_pool_of_sessions_spreads_queues_and_keeps_each_election_on_one() {
    let zk = shared_zk();
    let gw = Gateway::start_with(
        &zk,
        GatewayOpts {
            zk_sessions: Some(3),
            ..Default::default()
        },
    )
    .await;
    let mut c = gw.client().await;
    let zkc = zk_client(&zk).await;
    let owners = |prefix: String| {
        let zkc = &zkc;
        let root = gw.root.clone();
        async move {
            let mut owners = std::collections::HashSet::new();
            for p in member_znodes(zkc, &root).await {
                if p.contains(&prefix) {
                    owners.insert(zkc.get_data(&p).await.unwrap().1.ephemeral_owner);
                }
            }
            owners
        }
    };
    // Queues, not streams, are spread over the pool: the candidates of one election all share
    // one session (one queue actor, one watch) …
    let mut cands = Vec::new();
    for i in 0..6 {
        cands.push(Campaign::join(&mut c, "pool", &format!("p{i}"), b"").await);
    }
    assert_eq!(owners("/elections/pool/".into()).await.len(), 1);
    // … and thirty elections use every session of the pool (a name's session is its hash's).
    let mut others = Vec::new();
    for i in 0..30 {
        others.push(Campaign::join(&mut c, &format!("spread{i}"), "s", b"").await);
    }
    assert_eq!(
        owners("/elections/spread".into()).await.len(),
        3,
        "elections spread over the pool's sessions"
    );
    drop(others);
    let mut last = 0;
    for i in 0..6 {
        let mut cand = cands.remove(0);
        let l = cand.elected().await;
        assert_eq!(l.candidate, format!("p{i}"));
        assert!(l.fencing_token > last);
        last = l.fencing_token;
    }
}

/// Every event a stream delivers, stamped on the test's clock as it is read, until it ends.
type Stamped<E> = (std::time::Instant, Result<Option<E>, tonic::Status>);

/// Reads `stream` in a task of its own: its events and its end, each with the instant it was
/// read (one clock for every stream of the test).
fn record(
    mut stream: zkgate_testkit::raw::CampaignStream,
) -> tokio::sync::mpsc::UnboundedReceiver<Stamped<Event>> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let e = stream.event().await;
            let last = !matches!(e, Ok(Some(_)));
            if tx.send((std::time::Instant::now(), e)).is_err() || last {
                break;
            }
        }
    });
    rx
}

/// The instant `rx` delivers an event that `want` accepts (heartbeats skipped; anything else
/// fails the test), within [`STEP`].
async fn stamped(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Stamped<Event>>,
    what: &str,
    want: impl Fn(&Event) -> bool,
) -> std::time::Instant {
    skipping_at_most(what, async {
        loop {
            let (at, e) = tokio::time::timeout(STEP, rx.recv())
                .await
                .unwrap_or_else(|_| panic!("{what}: nothing in time"))
                .unwrap_or_else(|| panic!("{what}: the stream's reader stopped"));
            match e {
                Ok(Some(Event::Heartbeat(_))) => continue,
                Ok(Some(e)) if want(&e) => return at,
                other => panic!("{what}: got {other:?}"),
            }
        }
    })
    .await
}

fn end_requested(e: &Event) -> bool {
    matches!(e, Event::Suspended(s) if s.reason == pb::SuspendReason::EndRequested as i32 && s.stop_within.is_some())
}

/// G3c for a resign by lease (issue 19): a leader on gateway A resigned by lease through
/// gateway B is told first (`suspended`, reason END_REQUESTED) — before its successor on B is
/// elected — and its znode goes once it ends its stream (here by an in-stream resign, as the
/// client helpers do); the stream ends OK, the call returns only once the znode is gone, and a
/// repeat is NOT_FOUND. Before this, B deleted the znode at once and the successor could be
/// elected before the leader heard anything.
#[tokio::test]
async fn a_leader_resigned_by_lease_elsewhere_is_told_before_its_successor_is_elected() {
    let zk = shared_zk();
    let (gw, other) = two_gateways_on_one_root(&zk).await;
    let mut c = gw.client().await;
    let mut c2 = other.client().await;
    let zkc = zk_client(&zk).await;

    let mut a = Campaign::join(&mut c, "told", "a", b"").await;
    a.elected().await;
    let b = Campaign::join(&mut c2, "told", "b", b"").await;
    let mut b_events = record(b.stream);

    let (root, lease) = (gw.root.clone(), a.lease.clone());
    let resign = tokio::spawn(async move {
        let r = c2.resign(pb::ResignRequest { lease }).await;
        let returned = std::time::Instant::now();
        // What ZooKeeper holds the moment the call returns: b's znode only.
        (r, returned, member_znodes(&zkc, &root).await.len(), c2)
    });
    // a hears it first, on a stream that stays open…
    let told = match a.next().await {
        Ok(Some(e)) if end_requested(&e) => std::time::Instant::now(),
        other => panic!("expected suspended (END_REQUESTED), got {other:?}"),
    };
    // …and ends its stream (a helper stops its work first, then resigns in-stream).
    a.send(Req::Resign(pb::ResignCandidacy {})).await;
    a.expect_end(None).await;
    let elected = stamped(&mut b_events, "b elected", |e| {
        matches!(e, Event::Elected(_))
    })
    .await;
    let (r, returned, left, mut c2) = resign.await.unwrap();
    r.expect("resign by lease");
    assert!(
        told < elected,
        "b was elected {:?} before a was told",
        told - elected
    );
    assert_eq!(left, 1, "the call returned before a's znode was gone");
    eprintln!(
        "resign by lease: a told, then b elected {:?} later; the call returned {:?} after b's election",
        elected - told,
        returned.saturating_duration_since(elected)
    );
    let again = c2
        .resign(pb::ResignRequest {
            lease: a.lease.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::NotFound, "{again:?}");
}

/// A resign by lease asked while the leader's gateway is cut off from ZooKeeper: the mark is
/// written then, and no data-change event reaches that gateway (ZooKeeper forgets its
/// persistent watch with the connection; it is placed again after the reconnect). Its gateway reads its own members' records once the session is back,
/// so the leader is told (`suspended`, END_REQUESTED) and ends its stream itself — before the
/// requester's fallback (a direct delete after `silence_limit` + 1 s) would take its znode
/// without a word.
#[tokio::test]
async fn a_resign_by_lease_asked_while_the_leaders_gateway_is_cut_off_is_told_once_it_is_back() {
    let zk = shared_zk();
    let cut = zkgate_testkit::linkcut::LinkCutter::start(zk.parse().expect("one address"))
        .await
        .unwrap();
    let gw = Gateway::start(&cut.addr().to_string()).await;
    let other = Gateway::start_beside(&zk, &gw).await;
    let mut c = gw.client().await;
    let mut c2 = other.client().await;
    let zkc = zk_client(&zk).await;

    let mut a = Campaign::join(&mut c, "told-after-cut", "a", b"").await;
    a.elected().await;
    // Reset, and refused until passed again: the library reconnects afterwards, and the
    // server forgets the persistent watch with the connection.
    cut.drop_all();
    match a.next().await {
        Ok(Some(Event::Suspended(s))) if s.reason != pb::SuspendReason::EndRequested as i32 => {}
        other => panic!("expected suspended (the link), got {other:?}"),
    }
    let lease = a.lease.clone();
    let resign = tokio::spawn(async move { c2.resign(pb::ResignRequest { lease }).await });
    // The mark is in ZooKeeper while a's gateway cannot see it.
    let member = member_znodes(&zkc, &gw.root)
        .await
        .pop()
        .expect("a's znode");
    wait_until(
        "the end request is marked",
        Duration::from_secs(5),
        || async {
            zkc.get_data(&member).await.is_ok_and(|(d, _)| {
                zkgate::coord::record::NodeRecord::decode_lossy(&d).end_requested_ms > 0
            })
        },
    )
    .await;
    cut.pass();
    // a hears the end request once its gateway is back (a `resumed`-like link notice may come
    // first), not the end of its stream.
    loop {
        match a.next().await {
            Ok(Some(e)) if end_requested(&e) => break,
            Ok(Some(Event::Suspended(_))) | Ok(Some(Event::Resumed(_))) => continue,
            other => {
                panic!("expected suspended (END_REQUESTED) after the reconnect, got {other:?}")
            }
        }
    }
    a.send(Req::Resign(pb::ResignCandidacy {})).await;
    a.expect_end(None).await;
    resign.await.unwrap().expect("resign by lease");
}

/// A leader that hears the resign-by-lease notice but does not end its stream (a bare grpcurl
/// user, a stuck process) keeps its znode until `silence_limit` has passed since the notice:
/// its successor is elected no sooner, and its stream then ends OK.
#[tokio::test]
async fn a_leader_that_does_not_act_on_the_notice_keeps_its_znode_for_its_silence_limit() {
    let zk = shared_zk();
    let (gw, other) = two_gateways_on_one_root(&zk).await;
    let mut c = gw.client().await;
    let mut c2 = other.client().await;
    let mut a = Campaign::join(&mut c, "deaf", "a", b"").await;
    let limit = elected_silence_limit(&mut a).await;
    let lease = a.lease.clone();
    let mut a_events = record(a.stream);
    let b = Campaign::join(&mut c2, "deaf", "b", b"").await;
    let mut b_events = record(b.stream);
    let called = std::time::Instant::now();
    let resign = tokio::spawn(async move {
        let r = c2.resign(pb::ResignRequest { lease }).await;
        (r, std::time::Instant::now())
    });
    let told = stamped(&mut a_events, "a told", end_requested).await;
    let elected = stamped(&mut b_events, "b elected", |e| {
        matches!(e, Event::Elected(_))
    })
    .await;
    let (r, returned) = resign.await.unwrap();
    r.expect("resign by lease");
    // The znode stays the silence limit and the slow-link allowance after the notice (G3c).
    let allowance = {
        let mut cfg = zkgate::coord::CoordConfig::new("unused");
        cfg.session_timeout = zkgate_testkit::GatewayOpts::default().session_timeout;
        zkgate::coord::timing::Timing::requested(&cfg).client_delay_allowance()
    };
    assert!(
        elected >= called + limit + allowance,
        "b elected {:?} after the call, within a's silence limit {limit:?} and allowance {allowance:?}",
        elected - called
    );
    // a's stream ends OK once its znode is gone.
    let (_, end) = tokio::time::timeout(STEP, a_events.recv())
        .await
        .expect("a's end in time")
        .expect("a's end");
    assert!(matches!(end, Ok(None)), "{end:?}");
    eprintln!(
        "a silent holder: told {:?} after the call, b elected {:?} after it, the call returned {:?} after it",
        told - called,
        elected - called,
        returned - called
    );
}

/// Waits for `elected` on a fresh campaign and returns the silence limit it carries.
async fn elected_silence_limit(a: &mut Campaign) -> Duration {
    match a.next().await {
        Ok(Some(Event::Elected(e))) => e
            .silence_limit
            .expect("a silence limit")
            .try_into()
            .unwrap(),
        other => panic!("expected elected, got {other:?}"),
    }
}

/// A leader that cannot hear (its link to its gateway blackholed: no FIN, nothing delivered)
/// is resigned by lease through another gateway: the notice never reaches it, so its znode
/// stays until `silence_limit` has passed since the last message its gateway sent it — its
/// successor is elected only after the leader's own watchdog has fired (`silence_limit` after
/// the last message it heard). Before this, the successor was elected within milliseconds
/// while the old leader still believed it led.
#[tokio::test]
async fn a_leader_that_cannot_hear_is_replaced_only_after_its_watchdog_fired() {
    let zk = shared_zk();
    let (gw, other) = two_gateways_on_one_root(&zk).await;
    let cut = zkgate_testkit::linkcut::LinkCutter::start(gw.addr)
        .await
        .unwrap();
    let mut c = pb::election_client::ElectionClient::connect(cut.url())
        .await
        .unwrap();
    let mut c2 = other.client().await;
    let mut a = Campaign::join(&mut c, "unheard", "a", b"").await;
    let limit = elected_silence_limit(&mut a).await;
    let lease = a.lease.clone();
    let mut a_events = record(a.stream);
    let b = Campaign::join(&mut c2, "unheard", "b", b"").await;
    let mut b_events = record(b.stream);
    // A heartbeat through the cutter first, so a's last message is one. (A fixed sleep of
    // limit/2 once could let the cut come first on a loaded machine, leaving a nothing heard.)
    let (first_heard, e) = tokio::time::timeout(limit * 2, a_events.recv())
        .await
        .expect("a heartbeat within the silence limit")
        .expect("a's stream recorded");
    assert!(
        matches!(e, Ok(Some(_))),
        "a's first message after elected: {e:?}"
    );

    cut.blackhole();
    let called = std::time::Instant::now();
    let resign = tokio::spawn(async move { c2.resign(pb::ResignRequest { lease }).await });
    let elected = stamped(&mut b_events, "b elected", |e| {
        matches!(e, Event::Elected(_))
    })
    .await;
    resign.await.unwrap().expect("resign by lease");
    // Everything a heard, and when: nothing after the cut.
    let mut last_heard = Some(first_heard);
    while let Ok((at, e)) = a_events.try_recv() {
        assert!(
            matches!(e, Ok(Some(_))),
            "a heard its end through a blackhole: {e:?}"
        );
        assert!(
            !matches!(e, Ok(Some(ref e)) if end_requested(e)),
            "a heard the notice"
        );
        last_heard = Some(at);
    }
    let a_stops = last_heard.expect("a heard something") + limit;
    eprintln!(
        "a leader that cannot hear: its watchdog fired {:?} after the call, b elected {:?} after it",
        a_stops.saturating_duration_since(called),
        elected - called
    );
    assert!(
        a_stops <= elected,
        "b elected {:?} before a's watchdog fired",
        a_stops - elected
    );
    cut.pass();
}

/// G3b with a link failed one way: a leader whose gateway no longer hears it (its pings are
/// lost) but which still hears its gateway, 300 ms late, keeps hearing heartbeats until the
/// gateway gives its connection up as dead. The znode then stays until the leader's silence
/// limit has passed since the last message sent, plus the client-delay allowance, so the
/// successor is elected only after the leader's own watchdog (`silence_limit` after the last
/// message it heard) fired. Before, the znode went the moment the connection was given up,
/// while heartbeats sent just before were still on their way to the leader (a probe on real
/// processes: the old leader held 215–283 ms past its successor's election, 3 of 3 runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_its_gateway_no_longer_hears_is_replaced_only_after_its_watchdog_fired() {
    let zk = shared_zk();
    let (gw, other) = two_gateways_on_one_root(&zk).await;
    let link = zkgate_testkit::slowlink::SlowLink::start(gw.addr, Duration::from_millis(300))
        .await
        .unwrap();
    let mut c = pb::election_client::ElectionClient::connect(link.url())
        .await
        .unwrap();
    let mut c2 = other.client().await;
    let mut a = Campaign::join(&mut c, "one-way", "a", b"").await;
    let limit = elected_silence_limit(&mut a).await;
    let mut a_events = record(a.stream);
    let b = Campaign::join(&mut c2, "one-way", "b", b"").await;
    let mut b_events = record(b.stream);
    // A heartbeat heard first: the link carries the hold's messages both ways.
    let (_, e) = tokio::time::timeout(limit * 2, a_events.recv())
        .await
        .expect("a heartbeat within the silence limit")
        .expect("a's stream recorded");
    assert!(matches!(e, Ok(Some(Event::Heartbeat(_)))), "{e:?}");

    link.mute_upstream();
    let muted = std::time::Instant::now();
    let elected = stamped(&mut b_events, "b elected", |e| {
        matches!(e, Event::Elected(_))
    })
    .await;
    // The last message a heard before b was elected, and that it heard heartbeats after the
    // cut (else this is the blackhole case, already safe).
    let mut last_heard = None;
    let mut heard_after_cut = 0;
    while let Ok((at, e)) = a_events.try_recv() {
        if at > elected {
            break;
        }
        if matches!(e, Ok(Some(_))) {
            last_heard = Some(at);
            heard_after_cut += usize::from(at > muted);
        }
    }
    let a_stops = last_heard.expect("a heard something") + limit;
    eprintln!(
        "one-way link: a heard {heard_after_cut} messages after the cut, its watchdog fired {:?} after the cut, b elected {:?} after it",
        a_stops.saturating_duration_since(muted),
        elected - muted
    );
    assert!(heard_after_cut > 0, "a heard nothing after the cut");
    assert!(
        a_stops <= elected,
        "b elected {:?} before a's watchdog fired",
        a_stops - elected
    );
}

/// An observer that stops reading holds up no other observer, and when it reads again it gets
/// the newest state after at most what had already left for it: an Observe stream is polled
/// by the transport only once its previous message has gone out (no task or channel per
/// observer, issue 21), so it keeps no backlog of states. Before, a channel of 16 states sat
/// between the two and a returning reader worked through them first.
#[tokio::test]
async fn a_stalled_observer_holds_up_no_one_and_reads_the_newest_state_when_it_returns() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut c = gw.client().await;
    // A small window: one 30 KiB state fills it.
    let small = small_window_channel(&gw.url()).await;
    let mut stalled = observe(
        &mut zkgate::proto::election_client::ElectionClient::new(small),
        "stall",
    )
    .await;
    assert!(next_observed(&mut stalled).await.is_none(), "vacant first");
    let mut reader = observe(&mut c, "stall").await;
    assert!(next_observed(&mut reader).await.is_none(), "vacant first");

    let mut a = Campaign::join(&mut c, "stall", "a", b"").await;
    a.elected().await;
    let proclaims = 24u8;
    let value = |i: u8| vec![i; 30 * 1024];
    for i in 0..proclaims {
        a.send(Req::Proclaim(pb::ProclaimValue { value: value(i) }))
            .await;
        match a.next().await {
            Ok(Some(Event::Proclaimed(_))) => {}
            other => panic!("expected proclaimed, got {other:?}"),
        }
        // The reader is not held up by the stalled observer: it sees this very state.
        loop {
            let l = next_observed(&mut reader).await.expect("a leads");
            if l.value == value(i) {
                break;
            }
        }
    }

    // The stalled observer reads again: what had left for it (a's election, the first
    // proclaim, at most one more), then the newest state, not the 24 in between.
    let newest = value(proclaims - 1);
    let mut before_newest = 0;
    loop {
        let l = next_observed(&mut stalled).await.expect("a leads");
        if l.value == newest {
            break;
        }
        before_newest += 1;
    }
    assert!(
        before_newest <= 4,
        "{before_newest} stale states before the newest: the observer kept a backlog"
    );
    drop(a);
    assert!(next_observed(&mut stalled).await.is_none(), "vacant again");
}

/// Every observer ends on the newest state, whichever shard of the fan-out it is in: a leader
/// that proclaims value after value without waiting changes the view while the relay is still
/// handing the previous one to the shards (`coord::fanout`), and the shards it had already
/// passed must get the newest too. Before the fix they kept the older state until the next
/// change: `zkgate-bench --only observe --observe-rounds 30` lost a leader change for 256 of
/// 10,000 observers.
///
/// The observers are spread over three connections and read only at the end: a tonic client
/// (h2 ≥ 0.4.16) ends its own connection with `ENHANCE_YOUR_CALM` ("too_many_data_frames")
/// once it holds more small messages unread than its budget (half its connection window,
/// ≈ 12,800 messages of this size), and one connection with all 768 observers reached it.
#[tokio::test]
async fn every_observer_of_several_shards_ends_on_the_newest_state() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut clients = [gw.client().await, gw.client().await, gw.client().await];
    let observers = 3 * zkgate::coord::fanout::OBSERVERS_PER_WAKE;
    let mut streams = Vec::with_capacity(observers);
    for i in 0..observers {
        let mut s = observe(&mut clients[i % 3], "shards").await;
        assert!(next_observed(&mut s).await.is_none(), "vacant first");
        streams.push(s);
    }
    let mut a = Campaign::join(&mut clients[0], "shards", "a", b"").await;
    a.elected().await;
    let proclaims = 10u8;
    for i in 1..=proclaims {
        a.send(Req::Proclaim(pb::ProclaimValue { value: vec![i] }))
            .await;
    }
    // `proclaimed` reports the value the leader's znode holds when the gateway reads it, not
    // each write: proclaims sent back to back may be told once, with the newest (docs/contract.md).
    // Told in order, so the leader ends on the newest value too.
    let mut last = 0u8;
    while last < proclaims {
        match a.next().await {
            Ok(Some(Event::Proclaimed(p))) => {
                let value = p.leader.expect("a leader").value;
                assert!(
                    value.len() == 1 && value[0] > last,
                    "{value:?} after {last}"
                );
                last = value[0];
            }
            other => panic!("expected proclaimed, got {other:?}"),
        }
    }
    // Each observer reads until the newest value; `next_observed` gives up after a step, so
    // one left on an older state fails here rather than hanging.
    for (i, s) in streams.iter_mut().enumerate() {
        loop {
            let l = next_observed(s)
                .await
                .unwrap_or_else(|| panic!("observer {i}: vacant"));
            if l.value == [proclaims] {
                break;
            }
        }
    }
    drop(a);
}
