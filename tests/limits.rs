//! G10 limits: past each configured limit the caller gets `RESOURCE_EXHAUSTED` naming the limit
//! and its value (never a transport error or a hang), `zkgate_limit_rejections_total{limit}`
//! counts it, the streams already admitted keep working, and a place given back is usable
//! again. A holder stream that sends no first message ends `DEADLINE_EXCEEDED` and never delays
//! a drain.

use std::time::{Duration, Instant};

use tonic::Code;
use zkgate::api::limits::StreamLimits;
use zkgate::proto as pb;
use zkgate_testkit::*;

/// The value of `zkgate_limit_rejections_total{limit="…"}` on the process's /metrics.
async fn rejections(gw: &Gateway, limit: &str) -> u64 {
    let body = scrape_metrics(gw.http).await;
    metric_value(&body, "zkgate_limit_rejections_total", &[("limit", limit)])
}

/// A gateway on `zk` with these limits.
async fn with_limits(zk: &str, limits: StreamLimits) -> Gateway {
    Gateway::start_with(
        zk,
        GatewayOpts {
            limits: Some(limits),
            ..Default::default()
        },
    )
    .await
}

/// Opens a Campaign stream and returns its first answer: `Ok(lease)` or the refusal.
async fn try_join(
    c: &mut zkgate::proto::election_client::ElectionClient<tonic::transport::Channel>,
    election: &str,
    name: &str,
) -> (Result<Campaign, tonic::Status>,) {
    match CampaignStream::open_with(c, [join_msg(election, name, b"")]).await {
        Err(status) => (Err(status),),
        Ok(stream) => (Campaign::queued(stream).await,),
    }
}

#[tokio::test]
async fn holder_streams_per_connection_and_per_gateway() {
    // One at a time: each counts rejections in the process-wide metrics, which the others'
    // refusals would add to (a `holder_streams_per_gateway` refusal of the drain test was
    // counted by the per-gateway test when both ran at once).
    let _serial = serial().lock().await;
    let zk = shared_zk();
    let gw = with_limits(
        &zk,
        StreamLimits {
            holder_streams_per_gateway: 30,
            holder_streams_per_connection: 20,
            ..Default::default()
        },
    )
    .await;
    let per_conn_before = rejections(&gw, "holder_streams_per_connection").await;
    let per_gw_before = rejections(&gw, "holder_streams_per_gateway").await;
    // A bystander leader on its own connection, admitted first.
    let mut bc = gw.client().await;
    let mut bystander = Campaign::join(&mut bc, "bystander", "b", b"").await;
    bystander.elected().await;

    let mut c1 = gw.client().await;
    let mut held = Vec::new();
    let mut refused = Vec::new();
    for i in 0..25 {
        match try_join(&mut c1, "crowd", &format!("c1-{i}")).await.0 {
            Ok(c) => held.push(c),
            Err(s) => refused.push(s),
        }
    }
    assert_eq!(held.len(), 20, "the per-connection limit admits 20");
    for s in &refused {
        assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
        assert!(
            s.message()
                .contains("--max-holder-streams-per-connection = 20"),
            "{s:?}"
        );
    }
    // Another connection: 30 per gateway, 21 used.
    let mut c2 = gw.client().await;
    let mut refused2 = Vec::new();
    for i in 0..12 {
        match try_join(&mut c2, "crowd", &format!("c2-{i}")).await.0 {
            Ok(c) => held.push(c),
            Err(s) => refused2.push(s),
        }
    }
    assert_eq!(held.len(), 29);
    assert_eq!(refused2.len(), 3);
    for s in &refused2 {
        assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
        assert!(s.message().contains("--max-holder-streams = 30"), "{s:?}");
    }
    assert_eq!(
        rejections(&gw, "holder_streams_per_connection").await - per_conn_before,
        5
    );
    assert_eq!(
        rejections(&gw, "holder_streams_per_gateway").await - per_gw_before,
        3
    );
    // The bystander heard nothing but heartbeats meanwhile, and the crowd's head leads.
    bystander.quiet_for(Duration::from_millis(300)).await;
    assert_eq!(held[0].elected().await.candidate, "c1-0");

    // Places given back are usable again.
    held.truncate(10);
    let deadline = Instant::now() + STEP;
    let again = loop {
        match try_join(&mut c2, "crowd", "again").await.0 {
            Ok(c) => break c,
            Err(s) => {
                assert_eq!(s.code(), Code::ResourceExhausted);
                assert!(Instant::now() < deadline, "places never given back");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    drop((again, held, bystander));
    wait_no_members(&zk_client(&zk).await, &gw.root, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn observe_streams_per_connection_and_queues_per_gateway() {
    // One at a time: each counts rejections in the process-wide metrics, which the others'
    // refusals would add to (a `holder_streams_per_gateway` refusal of the drain test was
    // counted by the per-gateway test when both ran at once).
    let _serial = serial().lock().await;
    let zk = shared_zk();
    let gw = Gateway::start_with(
        &zk,
        GatewayOpts {
            limits: Some(StreamLimits {
                observe_streams_per_connection: 3,
                ..Default::default()
            }),
            max_queues: Some(4),
            ..Default::default()
        },
    )
    .await;
    let mut c = gw.client().await;
    let mut observers = Vec::new();
    for _ in 0..3 {
        observers.push(observe(&mut c, "watched").await);
    }
    let e = c
        .observe(pb::ObserveRequest {
            election: "watched".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message()
            .contains("--max-observe-streams-per-connection = 3"),
        "{e:?}"
    );
    // Another connection has places of its own.
    let mut c2 = gw.client().await;
    let _other = observe(&mut c2, "watched").await;

    // Queues: "watched" is one; three more elections fit, the fifth distinct name does not.
    let before = rejections(&gw, "queues_per_gateway").await;
    let mut held = Vec::new();
    for i in 0..3 {
        held.push(Campaign::join(&mut c2, &format!("q{i}"), "x", b"").await);
    }
    let e = try_join(&mut c2, "q3", "x").await.0.err().expect("refused");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("--max-queues = 4"), "{e:?}");
    assert_eq!(rejections(&gw, "queues_per_gateway").await - before, 1);
    // An existing queue still takes more members.
    let _more = Campaign::join(&mut c2, "q0", "y", b"").await;
    // Once a queue's last stream goes, its place is free.
    held.remove(1);
    let deadline = Instant::now() + STEP;
    let _fresh = loop {
        match try_join(&mut c2, "q3", "x").await.0 {
            Ok(c) => break c,
            Err(s) => {
                assert_eq!(s.code(), Code::ResourceExhausted);
                assert!(Instant::now() < deadline, "queue place never given back");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
}

#[tokio::test]
async fn a_silent_holder_stream_times_out_and_never_delays_a_drain() {
    // One at a time: each counts rejections in the process-wide metrics, which the others'
    // refusals would add to (a `holder_streams_per_gateway` refusal of the drain test was
    // counted by the per-gateway test when both ran at once).
    let _serial = serial().lock().await;
    let zk = shared_zk();
    let gw = with_limits(
        &zk,
        StreamLimits {
            first_message_timeout: Duration::from_millis(500),
            ..Default::default()
        },
    )
    .await;
    let before = rejections(&gw, "first_message_timeout").await;
    let mut c = gw.client().await;
    let started = Instant::now();
    let e = refusal(CampaignStream::open_with(&mut c, [])).await;
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    assert!(e.message().contains("first-message timeout"), "{e:?}");
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert_eq!(rejections(&gw, "first_message_timeout").await - before, 1);
    gw.stop().await;

    // A gateway whose first-message timeout is long: a silent stream must not hold up SIGTERM.
    // One holder stream per gateway, so a refusal proves the silent stream is being served.
    let gw = with_limits(
        &zk,
        StreamLimits {
            first_message_timeout: Duration::from_secs(60),
            holder_streams_per_gateway: 1,
            ..Default::default()
        },
    )
    .await;
    let mut c = gw.client().await;
    let mut silent = gw.client().await;
    let pending =
        tokio::spawn(async move { refusal(CampaignStream::open_with(&mut silent, [])).await });
    let deadline = Instant::now() + STEP;
    loop {
        match try_join(&mut c, "probe", "p").await.0 {
            Err(s) if s.code() == Code::ResourceExhausted => break,
            other => {
                drop(other);
                assert!(
                    Instant::now() < deadline,
                    "the silent stream never reached the gateway"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    let stopping = Instant::now();
    gw.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "drain took {:?}",
        stopping.elapsed()
    );
    let e = pending.await.unwrap();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
}

/// Without a policy, one client address (every connection from it together) may have at most
/// `--max-unary-in-flight-per-client` unary calls of a kind in flight, so a flood from one
/// machine cannot fill `--max-unary-in-flight` for the others. Here the gateway admits 200
/// reads, 100 per address: 250 callers on 127.0.0.1 keep reads in flight (backing off 20 ms
/// when refused), and another client on 127.0.0.2 reads meanwhile. Every refusal names the
/// per-address bound and 127.0.0.1; the other address is never refused. Without the
/// per-address bound the flood fills the gateway's 200 and the other address's reads are
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_address_cannot_fill_the_unary_calls_in_flight() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use tonic::transport::{Channel, Endpoint};
    use zkgate::proto::election_client::ElectionClient;

    let _serial = serial().lock().await;
    let zk = shared_zk();
    let gw = with_limits(
        &zk,
        StreamLimits {
            unary_in_flight_per_gateway: 200,
            unary_in_flight_per_client: 100,
            ..Default::default()
        },
    )
    .await;
    let before = rejections(&gw, "unary_in_flight_per_client").await;
    let mut lc = gw.client().await;
    let mut leader = Campaign::join(&mut lc, "read-me", "leader", b"").await;
    let token = leader.elected().await.fencing_token;
    let connect = |from: [u8; 4]| {
        let url = gw.url();
        async move {
            Endpoint::from_shared(url)
                .unwrap()
                .local_address(Some(from.into()))
                .connect()
                .await
                .unwrap()
        }
    };
    let read = move |c: Channel| async move {
        ElectionClient::new(c)
            .validate(pb::ElectionValidateRequest {
                election: "read-me".into(),
                fencing_token: token,
            })
            .await
    };
    let until = Instant::now() + Duration::from_secs(3);
    let (answered, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut flood = Vec::new();
    for _ in 0..2 {
        let channel = connect([127, 0, 0, 1]).await;
        for _ in 0..125 {
            let (channel, answered, refused) = (channel.clone(), answered.clone(), refused.clone());
            flood.push(tokio::spawn(async move {
                while Instant::now() < until {
                    match read(channel.clone()).await {
                        Ok(_) => answered.fetch_add(1, Ordering::Relaxed),
                        Err(st) => {
                            assert_eq!(st.code(), Code::ResourceExhausted, "{st:?}");
                            for part in ["--max-unary-in-flight-per-client = 100", "127.0.0.1"] {
                                assert!(st.message().contains(part), "{st:?}");
                            }
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            refused.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            }));
        }
    }
    let other = connect([127, 0, 0, 2]).await;
    let others: Vec<_> = (0..4)
        .map(|_| {
            let other = other.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < until {
                    if let Err(st) = read(other.clone()).await {
                        panic!("another address's read was refused: {st:?}");
                    }
                    n += 1;
                }
                n
            })
        })
        .collect();
    for f in flood {
        f.await.unwrap();
    }
    let mut other_answered = 0;
    for o in others {
        other_answered += o.await.unwrap();
    }
    let (answered, refused) = (
        answered.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    eprintln!(
        "127.0.0.1: {answered} answered, {refused} refused; 127.0.0.2: {other_answered} answered"
    );
    assert!(answered > 0 && other_answered > 0);
    assert!(refused > 0, "the flood never met the per-address bound");
    assert_eq!(
        rejections(&gw, "unary_in_flight_per_client").await - before,
        refused
    );
    // The leader heard nothing but heartbeats meanwhile.
    leader.quiet_for(Duration::from_millis(300)).await;
    drop(leader);
    wait_no_members(&zk_client(&zk).await, &gw.root, Duration::from_secs(5)).await;
}

/// Client connections per address and per gateway (`--max-connections-per-client`,
/// `--max-connections`): one past either is closed as soon as it is accepted, the rest keep
/// working, and a place comes back with its connection.
#[tokio::test]
async fn connections_per_client_address_and_per_gateway() {
    use tonic::transport::Endpoint;
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let _serial = serial().lock().await;
    let zk = shared_zk();
    let gw = with_limits(
        &zk,
        StreamLimits {
            connections_per_gateway: 6,
            connections_per_client: 4,
            ..Default::default()
        },
    )
    .await;
    let per_client = rejections(&gw, "connections_per_client").await;
    let per_gateway = rejections(&gw, "connections_per_gateway").await;
    // `Some` if admitted: one health check answered on a fresh connection from `from`.
    let open = |from: [u8; 4]| {
        let url = gw.url();
        async move {
            let channel = Endpoint::from_shared(url)
                .unwrap()
                .local_address(Some(from.into()))
                .connect()
                .await
                .ok()?;
            HealthClient::new(channel.clone())
                .check(HealthCheckRequest::default())
                .await
                .ok()
                .map(|_| channel)
        }
    };
    let mut a = Vec::new();
    for _ in 0..5 {
        a.extend(open([127, 0, 0, 3]).await);
    }
    assert_eq!(a.len(), 4, "one address gets --max-connections-per-client");
    let mut b = Vec::new();
    for _ in 0..3 {
        b.extend(open([127, 0, 0, 4]).await);
    }
    assert_eq!(b.len(), 2, "the gateway's 6 are full");
    // At least once each: a refused channel may try to connect again for its request.
    assert!(rejections(&gw, "connections_per_client").await > per_client);
    assert!(rejections(&gw, "connections_per_gateway").await > per_gateway);
    // The admitted ones still answer.
    for c in a.iter().chain(&b) {
        HealthClient::new(c.clone())
            .check(HealthCheckRequest::default())
            .await
            .expect("an admitted connection answers");
    }
    // A connection closed gives its place back (once the gateway has seen it close).
    a.pop();
    let deadline = Instant::now() + STEP;
    loop {
        if let Some(c) = open([127, 0, 0, 4]).await {
            b.push(c);
            break;
        }
        assert!(Instant::now() < deadline, "the place never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
