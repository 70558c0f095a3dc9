//! Queues far larger than one ZooKeeper packet (G10): 20,000 members with 200-character names.
//! Candidates, Holders, both Validates and a fresh queue actor's permit check answer
//! correctly, a bystander leader and a bystander lock holder on the same gateway are never
//! suspended and keep getting
//! heartbeats, and a queue at its size limit refuses newcomers with `RESOURCE_EXHAUSTED`.
//!
//! The members are made directly on a second ZooKeeper session (pipelined creates, in the
//! gateway's protected-name format), which takes seconds instead of 20,000 Campaign streams.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost::Message;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};
use zkgate::coord::record::NodeRecord;
use zkgate::proto as pb;
use zkgate::proto::acquire_request::Request as LReq;
use zkgate::proto::acquire_response::Event as LEvent;
use zkgate::proto::campaign_response::Event;
use zkgate::proto::lock_client::LockClient;
use zkgate_testkit::*;
use zookeeper_client as zkc;

const MEMBERS: usize = 20_000;
/// gRPC's default receive limit, which the unchanged default client in these tests has.
const CLIENT_RECEIVE_LIMIT: usize = 4 * 1024 * 1024;

/// The two 20,000-member tests run one at a time: on a small shared machine, two of them at
/// once in debug builds starve each other's ZooKeeper session task of CPU for longer than its
/// connection timeout, which measures the machine rather than the gateway.
fn one_big_queue_at_a_time() -> &'static tokio::sync::Mutex<()> {
    static LOCK: std::sync::OnceLock<tokio::sync::Mutex<()>> = std::sync::OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
}

fn long_name(prefix: &str) -> String {
    format!("{prefix:-<200}")
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A queue filled directly in ZooKeeper: its members' fencing tokens (czxid) in queue order.
struct Filled {
    /// The session that owns the members: dropping it closes the session, which deletes them.
    _client: zkc::Client,
    tokens: Vec<u64>,
}

/// Creates `n` members (mode letter `mode`) in `/<root>/<folder>/<queue>`, `record(i)` as the
/// data of the i-th, pipelined on a session of its own.
async fn fill(
    zk: &str,
    root: &str,
    folder: &str,
    queue: &str,
    mode: char,
    n: usize,
    record: impl Fn(usize) -> NodeRecord,
) -> Filled {
    let client = zk_client(zk).await;
    let persistent = zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all());
    let container = zkc::CreateMode::Container.with_acls(zkc::Acls::anyone_all());
    let ephemeral = zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all());
    for (path, mode) in [
        (root.to_owned(), &persistent),
        (format!("{root}/{folder}"), &persistent),
        (format!("{root}/{folder}/{queue}"), &container),
    ] {
        match client.create(&path, &[], mode).await {
            Ok(_) | Err(zkc::Error::NodeExists) => {}
            Err(e) => panic!("creating {path}: {e}"),
        }
    }
    let mut made: Vec<(i64, u64)> = Vec::with_capacity(n);
    for start in (0..n).step_by(2_000) {
        let batch: Vec<(String, Vec<u8>)> = (start..(start + 2_000).min(n))
            .map(|i| {
                (
                    format!(
                        "{root}/{folder}/{queue}/{mode}-{:032x}-",
                        rand::random::<u128>()
                    ),
                    record(i).encode_to_vec(),
                )
            })
            .collect();
        let creates: Vec<_> = batch
            .iter()
            .map(|(p, d)| client.create(p, d, &ephemeral))
            .collect();
        for r in futures::future::join_all(creates).await {
            let (stat, seq) = r.expect("create member");
            made.push((seq.into_i64(), stat.czxid as u64));
        }
    }
    made.sort();
    Filled {
        _client: client,
        tokens: made.into_iter().map(|(_, t)| t).collect(),
    }
}

/// A leader on the same gateway, watched in the background: it must never be suspended and
/// must hear something (heartbeats) at least every `silence_limit`.
struct Bystander {
    log: Arc<Mutex<BystanderLog>>,
    task: tokio::task::JoinHandle<()>,
    _tx: mpsc::Sender<pb::CampaignRequest>,
    /// A lock holder on the same gateway, watched the same way.
    lock_log: Arc<Mutex<BystanderLog>>,
    lock_task: tokio::task::JoinHandle<()>,
    _lock_tx: mpsc::Sender<pb::AcquireRequest>,
}

impl Drop for Bystander {
    fn drop(&mut self) {
        self.lock_task.abort();
    }
}

#[derive(Debug)]
struct BystanderLog {
    heartbeats: usize,
    last_message: Instant,
    longest_silence: Duration,
    other: Vec<String>,
}

/// Records what a holder stream hears from now on: heartbeats are counted, anything else
/// (or `2 × silence_limit` of silence) is noted and ends the recording.
fn record_heartbeats<T: std::fmt::Debug + Send + 'static>(
    mut stream: Streaming<T>,
    silence_limit: Duration,
    is_heartbeat: fn(&T) -> bool,
) -> (Arc<Mutex<BystanderLog>>, tokio::task::JoinHandle<()>) {
    let log = Arc::new(Mutex::new(BystanderLog {
        heartbeats: 0,
        last_message: Instant::now(),
        longest_silence: Duration::ZERO,
        other: Vec::new(),
    }));
    let task = tokio::spawn({
        let log = log.clone();
        async move {
            loop {
                let m = tokio::time::timeout(2 * silence_limit, stream.message()).await;
                let mut log = log.lock().unwrap();
                log.longest_silence = log.longest_silence.max(log.last_message.elapsed());
                log.last_message = Instant::now();
                match m {
                    Ok(Ok(Some(msg))) if is_heartbeat(&msg) => log.heartbeats += 1,
                    other => {
                        log.other.push(format!("{other:?}"));
                        return;
                    }
                }
            }
        }
    });
    (log, task)
}

impl Bystander {
    async fn start(gw: &Gateway) -> Bystander {
        let mut client = gw.client().await;
        let mut c = Campaign::join(&mut client, "bystander", "b", b"").await;
        let elected = loop {
            match tokio::time::timeout(STEP, c.stream.message()).await {
                Ok(Ok(Some(pb::CampaignResponse {
                    event: Some(Event::Elected(e)),
                }))) => break e,
                Ok(Ok(Some(pb::CampaignResponse {
                    event: Some(Event::Heartbeat(_)),
                }))) => continue,
                other => panic!("bystander: expected elected, got {other:?}"),
            }
        };
        let silence_limit: Duration = elected.silence_limit.unwrap().try_into().unwrap();
        let (tx, responses) = c.stream.into_parts();
        let (log, task) = record_heartbeats(responses, silence_limit, |m| {
            matches!(m.event, Some(Event::Heartbeat(_)))
        });
        // The lock holder: acquired, then only heartbeats.
        let mut lc = LockClient::connect(gw.url()).await.unwrap();
        let (mut lstream, first) = acquire(
            &mut lc,
            pb::AcquireLock {
                name: "bystander-lock".into(),
                owner: "h".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert!(matches!(first, LEvent::Queued(_)), "{first:?}");
        loop {
            match tokio::time::timeout(STEP, lstream.message()).await {
                Ok(Ok(Some(pb::AcquireResponse {
                    event: Some(LEvent::Acquired(_)),
                }))) => break,
                Ok(Ok(Some(pb::AcquireResponse {
                    event: Some(LEvent::Heartbeat(_)),
                }))) => continue,
                other => panic!("bystander lock: expected acquired, got {other:?}"),
            }
        }
        let (lock_tx, lresponses) = lstream.into_parts();
        let (lock_log, lock_task) = record_heartbeats(lresponses, silence_limit, |m| {
            matches!(m.event, Some(LEvent::Heartbeat(_)))
        });
        Bystander {
            log,
            task,
            _tx: tx,
            lock_log,
            lock_task,
            _lock_tx: lock_tx,
        }
    }

    /// Asserts that the leader and the lock holder heard only heartbeats, often enough, so far.
    fn check(&self, silence_limit: Duration) -> usize {
        let held = check_log(&self.lock_log, "lock holder", silence_limit);
        assert!(held > 0, "the bystander lock holder heard no heartbeat");
        check_log(&self.log, "leader", silence_limit)
    }
}

/// Asserts that a recorded stream heard only heartbeats, never `silence_limit` apart; returns
/// how many.
fn check_log(log: &Mutex<BystanderLog>, who: &str, silence_limit: Duration) -> usize {
    let log = log.lock().unwrap();
    assert!(
        log.other.is_empty(),
        "the bystander {who} heard something other than heartbeats: {:?}",
        log.other
    );
    let longest = log.longest_silence.max(log.last_message.elapsed());
    assert!(
        longest < silence_limit,
        "the bystander {who} went {longest:?} without a message (silence limit {silence_limit:?})"
    );
    log.heartbeats
}

async fn assert_serving(gw: &Gateway) {
    let mut h = health_client(gw).await;
    let status = h
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .expect("health check")
        .into_inner()
        .status;
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

/// Every page of Candidates with `page_size`, checking each reply's size.
async fn all_candidates(
    client: &mut zkgate::proto::election_client::ElectionClient<Channel>,
    election: &str,
    page_size: u32,
) -> (Vec<pb::Candidate>, usize) {
    let mut out = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let r = client
            .candidates(pb::CandidatesRequest {
                election: election.into(),
                page_size,
                page_token: token,
            })
            .await
            .expect("Candidates")
            .into_inner();
        pages += 1;
        assert!(
            r.encoded_len() < CLIENT_RECEIVE_LIMIT / 2,
            "a Candidates reply of {} bytes",
            r.encoded_len()
        );
        assert_eq!(r.total as usize, MEMBERS);
        out.extend(r.candidates);
        if r.next_page_token.is_empty() {
            return (out, pages);
        }
        token = r.next_page_token;
    }
}

async fn all_holders(client: &mut LockClient<Channel>, name: &str) -> (Vec<pb::Holder>, u32) {
    let mut out = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let r = client
            .holders(pb::HoldersRequest {
                name: name.into(),
                page_size: 0,
                page_token: token,
            })
            .await
            .expect("Holders")
            .into_inner();
        pages += 1;
        assert!(
            r.encoded_len() < CLIENT_RECEIVE_LIMIT / 2,
            "a Holders reply of {} bytes",
            r.encoded_len()
        );
        assert_eq!(r.total as usize, MEMBERS);
        assert_eq!(r.waiting, 0);
        out.extend(r.holders);
        if r.next_page_token.is_empty() {
            return (out, pages);
        }
        token = r.next_page_token;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_of_20000_candidates() {
    let _alone = one_big_queue_at_a_time().lock().await;
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let election = long_name("big");
    let since = now_ms();
    let filled = fill(&zk, &gw.root, "elections", &election, 'c', MEMBERS, |i| {
        NodeRecord {
            participant: format!("{i:0>200}"),
            value: b"v".to_vec(),
            elected_at_ms: if i == 0 { since } else { 0 },
            permits: 0,
            ..Default::default()
        }
    })
    .await;
    let bystander = Bystander::start(&gw).await;
    let mut client = gw.client().await;

    // All 20,000 in order, over several byte-bounded pages, each well under 4 MiB.
    let t = Instant::now();
    let (all, pages) = all_candidates(&mut client, &election, 0).await;
    eprintln!(
        "Candidates: {MEMBERS} candidates in {pages} pages, {:?}",
        t.elapsed()
    );
    assert_eq!(all.len(), MEMBERS);
    assert!(pages > 1);
    for (i, c) in all.iter().enumerate() {
        assert_eq!(c.position as usize, i);
        assert_eq!(c.candidate, format!("{i:0>200}"));
        assert_eq!(c.fencing_token, filled.tokens[i]);
        assert_eq!(c.leader, i == 0);
    }
    // Explicit page sizes continue exactly where the previous page ended.
    let (paged, pages) = all_candidates(&mut client, &election, 1_000).await;
    assert_eq!(pages, 20);
    assert_eq!(paged, all);
    // Called in a loop, as an operator's dashboard might, for longer than the silence limit.
    let until = Instant::now() + Duration::from_secs(3);
    let mut rounds = 0;
    while Instant::now() < until {
        assert_eq!(
            all_candidates(&mut client, &election, 0).await.0.len(),
            MEMBERS
        );
        rounds += 1;
    }
    eprintln!("Candidates in a loop: {rounds} full reads in 3 s");

    // Validate: the head's token is current, anyone else's is not.
    for (token, current) in [(filled.tokens[0], true), (filled.tokens[5], false)] {
        let v = client
            .validate(pb::ElectionValidateRequest {
                election: election.clone(),
                fencing_token: token,
            })
            .await
            .expect("Validate")
            .into_inner();
        assert_eq!(v.current, current);
        assert_eq!(v.leader.unwrap().fencing_token, filled.tokens[0]);
    }

    // Operators polling the huge election never disturb a leader elsewhere on the gateway.
    for _ in 0..2 {
        let (again, _) = all_candidates(&mut client, &election, 0).await;
        assert_eq!(again.len(), MEMBERS);
    }
    let silence_limit = Duration::from_secs_f64(gw.coord.cfg.session_timeout.as_secs_f64() * 0.35);
    let heartbeats = bystander.check(silence_limit);
    assert!(heartbeats > 0);
    assert_serving(&gw).await;

    // A small election still answers whole, with no token.
    let small = client
        .candidates(pb::CandidatesRequest {
            election: "bystander".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((small.candidates.len(), small.total), (1, 1));
    assert!(small.next_page_token.is_empty());
    let bad = client
        .candidates(pb::CandidatesRequest {
            election: election.clone(),
            page_token: "nonsense".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);

    bystander.task.abort();
    drop(bystander);
    drop(filled);
    wait_no_members(&zk_client(&zk).await, &gw.root, Duration::from_secs(20)).await;
    gw.stop().await;
}

/// Opens an Acquire stream and returns its first event, or the status it was refused with.
async fn acquire(
    client: &mut LockClient<Channel>,
    lock: pb::AcquireLock,
) -> Result<(AcquireStream, LEvent), Status> {
    let mut stream = AcquireStream::open_with(client, [LReq::Acquire(lock).into()]).await?;
    let first = tokio::time::timeout(STEP, stream.event())
        .await
        .expect("first event in time")?
        .expect("an event");
    Ok((stream, first))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_lock_of_20000_holders() {
    let _alone = one_big_queue_at_a_time().lock().await;
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let name = long_name("big");
    let since = now_ms();
    // Readers all hold: 20,000 confirmed holders.
    let filled = fill(&zk, &gw.root, "locks", &name, 'r', MEMBERS, |i| {
        NodeRecord {
            participant: format!("{i:0>200}"),
            value: Vec::new(),
            elected_at_ms: since,
            permits: 1,
            ..Default::default()
        }
    })
    .await;
    let bystander = Bystander::start(&gw).await;
    let mut client = LockClient::connect(gw.url()).await.unwrap();

    let t = Instant::now();
    let (holders, pages) = all_holders(&mut client, &name).await;
    eprintln!(
        "Holders: {MEMBERS} holders in {pages} pages, {:?}",
        t.elapsed()
    );
    assert_eq!(holders.len(), MEMBERS);
    assert!(pages > 1);
    for (i, h) in holders.iter().enumerate() {
        assert_eq!(h.owner, format!("{i:0>200}"));
        assert_eq!(h.fencing_token, filled.tokens[i]);
        assert_eq!(h.mode, pb::LockMode::Read as i32);
    }

    for (token, current) in [(filled.tokens[17_000], true), (1, false)] {
        let v = client
            .validate(pb::LockValidateRequest {
                name: name.clone(),
                fencing_token: token,
            })
            .await
            .expect("Validate")
            .into_inner();
        assert_eq!(v.current, current);
    }

    // Called in a loop for longer than the silence limit (the holders of a read lock are
    // all re-read on every page: the heaviest read there is).
    let until = Instant::now() + Duration::from_secs(3);
    let mut rounds = 0;
    while Instant::now() < until {
        assert_eq!(all_holders(&mut client, &name).await.0.len(), MEMBERS);
        rounds += 1;
    }
    eprintln!("Holders in a loop: {rounds} full reads in 3 s");
    let silence_limit = Duration::from_secs_f64(gw.coord.cfg.session_timeout.as_secs_f64() * 0.35);
    assert!(bystander.check(silence_limit) > 0);
    assert_serving(&gw).await;

    // A fresh gateway's queue actor reads every member ahead to compare permits: a reader
    // joins behind all 20,000 and holds at once, …
    let same_root = || GatewayOpts {
        root: Some(gw.root.clone()),
        ..Default::default()
    };
    let fresh = Gateway::start_with(&zk, same_root()).await;
    let mut fresh_client = LockClient::connect(fresh.url()).await.unwrap();
    let (mut stream, first) = acquire(
        &mut fresh_client,
        pb::AcquireLock {
            name: name.clone(),
            owner: "late reader".into(),
            mode: pb::LockMode::Read as i32,
            ..Default::default()
        },
    )
    .await
    .expect("a reader joins");
    match first {
        LEvent::Queued(q) => assert_eq!(q.position as usize, MEMBERS),
        other => panic!("expected queued, got {other:?}"),
    }
    match tokio::time::timeout(STEP, stream.message()).await {
        Ok(Ok(Some(pb::AcquireResponse {
            event: Some(LEvent::Acquired(_)),
        }))) => {}
        other => panic!("expected acquired, got {other:?}"),
    }
    drop(stream);
    // … and a writer asking for other permits is refused on another fresh gateway.
    let other = Gateway::start_with(&zk, same_root()).await;
    let mut other_client = LockClient::connect(other.url()).await.unwrap();
    let refused = acquire(
        &mut other_client,
        pb::AcquireLock {
            name: name.clone(),
            owner: "writer".into(),
            permits: 2,
            ..Default::default()
        },
    )
    .await
    .expect_err("a permit mismatch is refused");
    assert_eq!(
        refused.code(),
        Code::FailedPrecondition,
        "{}",
        refused.message()
    );
    assert_serving(&fresh).await;
    assert_serving(&other).await;

    bystander.task.abort();
    drop(bystander);
    drop(filled);
    wait_no_members(&zk_client(&zk).await, &gw.root, Duration::from_secs(20)).await;
    other.stop().await;
    fresh.stop().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_refuses_newcomers() {
    let zk = shared_zk();
    // A small packet budget makes the size limit small: (32768 − 24) / 49 = 668 members.
    let gw = Gateway::start_with(
        &zk,
        GatewayOpts {
            zk_max_packet: Some(32 * 1024),
            max_value_bytes: Some(1024),
            ..Default::default()
        },
    )
    .await;
    let limit = gw.coord.cfg.max_queue_members();
    assert_eq!(limit, 668);
    let record = |_| NodeRecord {
        participant: "p".repeat(200),
        value: vec![b'v'; 1024],
        ..Default::default()
    };
    let e = fill(&zk, &gw.root, "elections", "full", 'c', limit, record).await;
    let l = fill(&zk, &gw.root, "locks", "full", 'w', limit, |_| NodeRecord {
        participant: "o".into(),
        permits: 1,
        ..Default::default()
    })
    .await;
    let mut client = gw.client().await;
    let status = refusal(CampaignStream::open_with(
        &mut client,
        [join_msg("full", "late", b"")],
    ))
    .await;
    assert_eq!(
        status.code(),
        Code::ResourceExhausted,
        "{}",
        status.message()
    );
    assert!(status.message().contains("668"), "{}", status.message());
    let mut locks = LockClient::connect(gw.url()).await.unwrap();
    let status = acquire(
        &mut locks,
        pb::AcquireLock {
            name: "full".into(),
            owner: "late".into(),
            ..Default::default()
        },
    )
    .await
    .expect_err("refused");
    assert_eq!(
        status.code(),
        Code::ResourceExhausted,
        "{}",
        status.message()
    );
    // A mutex with a full queue: Holders reads only the head, the one member the holder rule
    // admits (it holds: a gateway confirms its own members without writing, so whoever heads
    // the queue holds) — one listing and one multi-read.
    let before = gw.coord.zk_requests();
    let h = locks
        .holders(pb::HoldersRequest {
            name: "full".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (h.holders.len(), h.total, h.waiting),
        (1, 1, limit as u32 - 1)
    );
    assert_eq!(gw.coord.zk_requests() - before, 2);
    // Reads of the full queue still work, in many small pages (16 members of up to ~2 KiB
    // each per multi-read within 32 KiB).
    let r = client
        .candidates(pb::CandidatesRequest {
            election: "full".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.candidates.len(), r.total as usize), (limit, limit));
    assert_serving(&gw).await;
    drop((e, l));
    wait_no_members(&zk_client(&zk).await, &gw.root, Duration::from_secs(20)).await;
    gw.stop().await;
}
