//! The Lock service end to end, against a real ZooKeeper: mutexes, semaphores, read-write
//! locks, waiting, ttl leases, fencing, release by lease and bad input.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, RwLock, RwLockReadGuard};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Status};
use zkgate::proto as pb;
use zkgate::proto::acquire_request::Request as LReq;
use zkgate::proto::acquire_response::Event as LEvent;
use zkgate::proto::lock_client::LockClient;
use zkgate_testkit::*;

type Client = LockClient<Channel>;

/// The one test with a ZooKeeper of its own starts (and pauses) a JVM, which on a small
/// machine starves the other tests' timing: it runs alone, the others share.
fn exclusive() -> &'static RwLock<()> {
    static LOCK: std::sync::OnceLock<RwLock<()>> = std::sync::OnceLock::new();
    LOCK.get_or_init(|| RwLock::new(()))
}

/// A test's gateway on the shared ZooKeeper (with a root of its own), a client, and the test's
/// share of [`exclusive`].
async fn setup() -> (String, Gateway, Client, RwLockReadGuard<'static, ()>) {
    let shared = exclusive().read().await;
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let c = lock_client(&gw).await;
    (zk, gw, c, shared)
}

/// Every test ends here: no member znode is left behind.
async fn no_members_left(zk: &str, gw: &Gateway) {
    wait_no_members(&zk_client(zk).await, &gw.root, Duration::from_secs(5)).await;
}

async fn lock_client(gw: &Gateway) -> Client {
    LockClient::connect(gw.url())
        .await
        .expect("connect to gateway")
}

/// How late a message may reach a client of the test gateway (`Timing::client_delay_allowance`
/// of its session timeout).
fn delay_allowance() -> Duration {
    let mut cfg = zkgate::coord::CoordConfig::new("unused");
    cfg.session_timeout = GatewayOpts::default().session_timeout;
    zkgate::coord::timing::Timing::requested(&cfg).client_delay_allowance()
}

fn dur(d: Duration) -> Option<prost_types::Duration> {
    Some(prost_types::Duration::try_from(d).unwrap())
}

/// Retries a read while the gateway is (briefly) without a ZooKeeper connection: a loaded
/// machine can stall a session past its connection timeout.
async fn retry_unavailable<T, F>(mut call: impl FnMut() -> F) -> T
where
    F: std::future::Future<Output = Result<T, Status>>,
{
    let deadline = Instant::now() + STEP;
    loop {
        match call().await {
            Err(s) if s.code() == Code::Unavailable && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            r => return r.expect("read API call"),
        }
    }
}

async fn holders(c: &mut Client, name: &str) -> pb::HoldersResponse {
    retry_unavailable(|| {
        let mut c = c.clone();
        async move {
            c.holders(pb::HoldersRequest {
                name: name.into(),
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner())
        }
    })
    .await
}

async fn validate(c: &mut Client, name: &str, token: u64) -> bool {
    retry_unavailable(|| {
        let mut c = c.clone();
        async move {
            c.validate(pb::LockValidateRequest {
                name: name.into(),
                fencing_token: token,
            })
            .await
            .map(|r| r.into_inner().current)
        }
    })
    .await
}

async fn members(zk: &str, root: &str) -> usize {
    member_znodes(&zk_client(zk).await, root).await.len()
}

/// 20 contenders on two gateways each do a non-atomic read-modify-write of a counter outside
/// ZooKeeper while holding the lock; no update is lost and fencing tokens only go up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutex_twenty_contenders_lose_no_update() {
    const CONTENDERS: u64 = 20;
    const ROUNDS: u64 = 4;
    let (zk, gw, _, _shared) = setup().await;
    let other = Gateway::start_beside(&zk, &gw).await;
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..CONTENDERS {
        let url = if i % 2 == 0 { gw.url() } else { other.url() };
        let (counter, inside, tokens) = (counter.clone(), inside.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = LockClient::connect(url).await.unwrap();
            for _ in 0..ROUNDS {
                let mut a =
                    Acquisition::open(&mut c, acquire_msg("counter", &format!("c{i}"))).await;
                let token = a.acquired().await.fencing_token;
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                tokens.lock().unwrap().push(token);
                // Deliberately not atomic: a second holder would lose an update.
                let v = counter.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                counter.store(v + 1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                a.release().await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("contender");
    }
    assert_eq!(counter.load(Ordering::SeqCst), CONTENDERS * ROUNDS);
    let tokens = tokens.lock().unwrap().clone();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens of successive holders strictly increase: {tokens:?}"
    );
    no_members_left(&zk, &gw).await;
}

/// A 3-permit semaphore never has more than 3 holders — counted by the holders themselves and
/// polled through `Holders` all along — and all 10 contenders get through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_three_permits_ten_contenders() {
    let (zk, gw, _, _shared) = setup().await;
    let current = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..10 {
        let url = gw.url();
        let (current, most, done) = (current.clone(), most.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = LockClient::connect(url).await.unwrap();
            let mut a = Acquisition::open(
                &mut c,
                pb::AcquireLock {
                    permits: 3,
                    ..acquire_msg("sem", &format!("s{i}"))
                },
            )
            .await;
            a.acquired().await;
            let now = current.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            // Hold until three have held at once (or 10 s pass, and the count below fails),
            // then a little longer for the `Holders` polls: a fixed 60 ms hold needed the first
            // three grants within 60 ms of each other, which a loaded machine need not give.
            let deadline = Instant::now() + Duration::from_secs(10);
            while most.load(Ordering::SeqCst) < 3 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(Duration::from_millis(60)).await;
            current.fetch_sub(1, Ordering::SeqCst);
            a.release().await;
            done.fetch_add(1, Ordering::SeqCst);
        }));
    }
    let mut c = lock_client(&gw).await;
    let mut polls = 0;
    while done.load(Ordering::SeqCst) < 10 {
        let h = holders(&mut c, "sem").await;
        assert!(
            h.holders.len() <= 3,
            "{} holders of 3 permits",
            h.holders.len()
        );
        polls += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for t in tasks {
        t.await.expect("contender");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} holders at once");
    assert_eq!(most, 3, "the semaphore admits three at once");
    assert!(polls > 3);
    no_members_left(&zk, &gw).await;
}

#[tokio::test]
async fn try_lock_on_free_and_held_lock_and_wait_timeout() {
    let (zk, gw, mut c, _shared) = setup().await;
    let try_lock = |owner: &str| pb::AcquireLock {
        wait_timeout: dur(Duration::ZERO),
        ..acquire_msg("try", owner)
    };
    // Free: a try-lock succeeds.
    let mut a = Acquisition::open(&mut c, try_lock("a")).await;
    assert_eq!(a.position, 0);
    a.acquired().await;

    // Held: queued, then DEADLINE_EXCEEDED, and the znode is gone before the status arrives.
    let mut b = Acquisition::open(&mut c, try_lock("b")).await;
    assert_eq!(b.position, 1);
    let s = b.expect_end(Some(Code::DeadlineExceeded)).await.unwrap();
    assert!(s.message().contains("wait_timeout"), "{s:?}");
    assert_eq!(
        members(&zk, &gw.root).await,
        1,
        "only the holder's znode is left"
    );

    // A bounded wait that runs out.
    let started = Instant::now();
    let mut w = Acquisition::open(
        &mut c,
        pb::AcquireLock {
            wait_timeout: dur(Duration::from_millis(300)),
            ..acquire_msg("try", "w")
        },
    )
    .await;
    w.expect_end(Some(Code::DeadlineExceeded)).await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    assert_eq!(members(&zk, &gw.root).await, 1);

    // A bounded wait that is served in time.
    let mut v = Acquisition::open(
        &mut c,
        pb::AcquireLock {
            wait_timeout: dur(Duration::from_secs(5)),
            ..acquire_msg("try", "v")
        },
    )
    .await;
    // An absurdly long one (and an absurdly long ttl) behaves as "forever".
    let mut f = Acquisition::open(
        &mut c,
        pb::AcquireLock {
            wait_timeout: Some(prost_types::Duration {
                seconds: i64::MAX,
                nanos: 0,
            }),
            ttl: Some(prost_types::Duration {
                seconds: i64::MAX,
                nanos: 0,
            }),
            ..acquire_msg("try", "f")
        },
    )
    .await;
    v.quiet_for(Duration::from_millis(100)).await;
    a.release().await;
    v.acquired().await;
    f.quiet_for(Duration::from_millis(50)).await;
    v.release().await;
    f.acquired().await;
    f.quiet_for(Duration::from_millis(100)).await;
    f.release().await;
    no_members_left(&zk, &gw).await;
}

#[tokio::test]
async fn ttl_expires_without_keep_alive_and_survives_with_it() {
    let (zk, gw, mut c, _shared) = setup().await;
    let ttl = Duration::from_millis(800);
    let with_ttl = |owner: &str| pb::AcquireLock {
        ttl: dur(ttl),
        ..acquire_msg("ttl", owner)
    };

    // No keep-alive: after ttl the holder is told `suspended{stop_within: silence limit}`
    // first (G3c); one that keeps its stream open keeps the znode for that limit after the
    // last message sent to it, then the stream ends ABORTED and the waiter takes over. (Before
    // G3c the znode went at the lapse and the holder heard ABORTED afterwards.)
    // The ttl runs from the grant, which comes after this: told no sooner than ttl from here.
    // (Counting from after b's open, as once, allowed b's create only 50 ms.)
    let opened = Instant::now();
    let mut a = Acquisition::open(&mut c, with_ttl("a")).await;
    let silence_limit = a.acquired().await.silence_limit.unwrap();
    let silence_limit = Duration::try_from(silence_limit).unwrap();
    let mut b = Acquisition::open(&mut c, with_ttl("b")).await;
    let started = Instant::now();
    match a.next_any().await {
        Ok(Some(LEvent::Suspended(s))) => {
            assert_eq!(
                Duration::try_from(s.stop_within.unwrap()).unwrap(),
                silence_limit
            )
        }
        other => panic!("a lapsed ttl is told as suspended first, got {other:?}"),
    }
    let told = started.elapsed();
    assert!(opened.elapsed() >= ttl, "{:?}", opened.elapsed());
    let s = a.expect_end(Some(Code::Aborted)).await.unwrap();
    assert!(s.message().contains("lease expired"), "{s:?}");
    let held = started.elapsed();
    // The znode stays the silence limit and the slow-link allowance after the notice (G3c).
    let allowance = delay_allowance();
    assert!(held >= told + silence_limit + allowance, "{held:?}");
    assert!(
        held < ttl + silence_limit + allowance + Duration::from_secs(2),
        "{held:?}"
    );
    // The waiter takes over.
    let tb = b.acquired().await.fencing_token;

    // Keep-alives well within ttl keep it for several ttls.
    let started = Instant::now();
    while started.elapsed() < ttl * 3 {
        b.send(LReq::KeepAlive(pb::KeepAlive {})).await;
        tokio::time::sleep(ttl / 4).await;
    }
    assert!(validate(&mut c, "ttl", tb).await, "still the holder");
    let h = holders(&mut c, "ttl").await;
    assert_eq!(h.holders.len(), 1);
    assert_eq!(h.holders[0].owner, "b");
    b.release().await;
    no_members_left(&zk, &gw).await;
}

/// G3c with a live holder: a ttl holder that ends its stream when it hears `suspended` (as the
/// client helpers do) is replaced at once, not a silence limit later.
#[tokio::test]
async fn lapsed_ttl_holder_that_ends_its_stream_is_replaced_at_once() {
    let (zk, gw, mut c, _shared) = setup().await;
    let ttl = Duration::from_millis(300);
    let mut a = Acquisition::open(
        &mut c,
        pb::AcquireLock {
            ttl: dur(ttl),
            ..acquire_msg("ttl-live", "a")
        },
    )
    .await;
    let silence_limit = Duration::try_from(a.acquired().await.silence_limit.unwrap()).unwrap();
    let mut b = Acquisition::open(&mut c, acquire_msg("ttl-live", "b")).await;
    match a.next_any().await {
        Ok(Some(LEvent::Suspended(_))) => {}
        other => panic!("a lapsed ttl is told as suspended first, got {other:?}"),
    }
    let told = Instant::now();
    drop(a);
    b.acquired().await;
    let replaced = told.elapsed();
    assert!(
        replaced < silence_limit,
        "b acquired {replaced:?} after a ended its stream (silence limit {silence_limit:?})"
    );
    b.release().await;
    no_members_left(&zk, &gw).await;
}

#[tokio::test]
async fn release_by_lease_from_another_gateway_then_not_found() {
    let (zk, gw, _, _shared) = setup().await;
    let other = Gateway::start_beside(&zk, &gw).await;
    let mut c = lock_client(&gw).await;
    let mut c2 = lock_client(&other).await;

    let mut a = Acquisition::open(&mut c, acquire_msg("rel", "a")).await;
    let mut b = Acquisition::open(&mut c, acquire_msg("rel", "b")).await;
    let mut w = Acquisition::open(&mut c, acquire_msg("rel", "w")).await;
    a.acquired().await;
    // Release the holder by lease on the other gateway: its stream ends OK, b takes over.
    c2.release(pb::ReleaseRequest {
        lease: a.lease.clone(),
    })
    .await
    .expect("release by lease");
    a.expect_end(None).await;
    b.acquired().await;
    // A waiter can be released by lease too; nobody else hears of it.
    c2.release(pb::ReleaseRequest {
        lease: w.lease.clone(),
    })
    .await
    .expect("release a waiter by lease");
    w.expect_end(None).await;
    b.quiet_for(Duration::from_millis(100)).await;

    // Spent, malformed, never issued, or an election's: NOT_FOUND.
    let mut e = zkgate::proto::election_client::ElectionClient::connect(gw.url())
        .await
        .unwrap();
    let cand = Campaign::join(&mut e, "rel", "x", b"").await;
    let mut never_issued = a.lease.clone();
    never_issued.replace_range(never_issued.len() - 4.., "3030");
    for lease in [
        a.lease.clone(),
        w.lease.clone(),
        "nonsense".into(),
        String::new(),
        never_issued,
        cand.lease.clone(),
    ] {
        for client in [&mut c, &mut c2] {
            let e = client
                .release(pb::ReleaseRequest {
                    lease: lease.clone(),
                })
                .await
                .unwrap_err();
            assert_eq!(e.code(), Code::NotFound, "{lease}: {e:?}");
        }
    }
    drop(cand);
    b.release().await;
    no_members_left(&zk, &gw).await;
}

/// Readers share, a writer excludes, and a writer queued behind readers goes before every
/// reader that queued after it (FIFO: writers are not starved).
#[tokio::test]
async fn read_write_lock_fifo() {
    let (zk, gw, mut c, _shared) = setup().await;
    let read = |owner: &str| pb::AcquireLock {
        mode: pb::LockMode::Read.into(),
        ..acquire_msg("rw", owner)
    };
    let mut r1 = Acquisition::open(&mut c, read("r1")).await;
    let mut r2 = Acquisition::open(&mut c, read("r2")).await;
    r1.acquired().await;
    r2.acquired().await;
    let mut w = Acquisition::open(&mut c, acquire_msg("rw", "w")).await;
    let mut r3 = Acquisition::open(&mut c, read("r3")).await;
    assert_eq!((w.position, r3.position), (2, 3));
    w.quiet_for(Duration::from_millis(100)).await;
    r3.quiet_for(Duration::from_millis(10)).await;
    let h = holders(&mut c, "rw").await;
    assert_eq!(
        h.holders
            .iter()
            .map(|h| (h.owner.as_str(), h.mode()))
            .collect::<Vec<_>>(),
        [("r1", pb::LockMode::Read), ("r2", pb::LockMode::Read)]
    );
    assert_eq!(h.waiting, 2);

    r1.release().await;
    w.quiet_for(Duration::from_millis(50)).await;
    r2.release().await;
    let tw = w.acquired().await.fencing_token;
    r3.quiet_for(Duration::from_millis(100)).await;
    let h = holders(&mut c, "rw").await;
    assert_eq!(h.holders.len(), 1);
    assert_eq!(
        (
            h.holders[0].owner.as_str(),
            h.holders[0].mode(),
            h.holders[0].fencing_token
        ),
        ("w", pb::LockMode::Write, tw)
    );
    assert_eq!(h.waiting, 1);
    // While the writer holds, a new writer waits too.
    let mut w2 = Acquisition::open(&mut c, acquire_msg("rw", "w2")).await;
    w.release().await;
    r3.acquired().await;
    w2.quiet_for(Duration::from_millis(50)).await;
    r3.release().await;
    w2.acquired().await;
    w2.release().await;
    no_members_left(&zk, &gw).await;
}

#[tokio::test]
async fn permit_mismatch_is_refused_without_a_znode() {
    let (zk, gw, mut c, _shared) = setup().await;
    let with = |permits: u32, owner: &str| pb::AcquireLock {
        permits,
        ..acquire_msg("perm", owner)
    };
    let mut a = Acquisition::open(&mut c, with(3, "a")).await;
    a.acquired().await;
    let mut b = Acquisition::open(&mut c, with(3, "b")).await;
    b.acquired().await;
    for (permits, mode) in [
        (2, pb::LockMode::Write),
        (0, pb::LockMode::Write),
        (1, pb::LockMode::Read),
    ] {
        let e = Acquisition::try_open(
            &mut c,
            pb::AcquireLock {
                mode: mode.into(),
                ..with(permits, "x")
            },
        )
        .await
        .err()
        .expect("refused");
        assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
        assert!(e.message().contains("permit"), "{e:?}");
        assert_eq!(
            members(&zk, &gw.root).await,
            2,
            "no znode left by the refusal"
        );
    }
    // Once the name is idle, a new count may be chosen.
    a.release().await;
    b.release().await;
    let mut m = Acquisition::open(&mut c, with(1, "m")).await;
    m.acquired().await;
    m.release().await;
    no_members_left(&zk, &gw).await;
}

/// A refused newcomer's znode lives until its gateway deletes it; meanwhile `Holders` and
/// `Validate` judge it by the queue's agreed count, not its own: a mutex's newcomer asking for
/// 5 permits is neither listed nor valid (it was, judged by its own 5). Its znode is made by
/// hand here (as if its refusal's delete had not run yet), so the window is not a race.
#[tokio::test]
async fn a_refused_newcomer_never_holds_by_its_own_permit_count() {
    use zkgate::coord::record::NodeRecord;
    use zookeeper_client as zkc;
    let (zk, gw, mut c, _shared) = setup().await;
    let mut a = Acquisition::open(&mut c, acquire_msg("refused", "a")).await;
    let a_token = a.acquired().await.fencing_token;

    let other = zk_client(&zk).await;
    let ephemeral = zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all());
    let record = NodeRecord {
        participant: "x".into(),
        permits: 5,
        ..Default::default()
    };
    let path = format!(
        "{}/locks/refused/w-{:032x}-",
        gw.root,
        rand::random::<u128>()
    );
    let (stat, _) = other
        .create(&path, &record.encode_to_vec(), &ephemeral)
        .await
        .expect("create the newcomer's znode");

    let h = holders(&mut c, "refused").await;
    let owners: Vec<&str> = h.holders.iter().map(|h| h.owner.as_str()).collect();
    assert_eq!(owners, vec!["a"], "only the mutex's holder");
    assert!(validate(&mut c, "refused", a_token).await);
    assert!(
        !validate(&mut c, "refused", stat.czxid as u64).await,
        "a refused count never validates"
    );
    drop(other);
    a.release().await;
    no_members_left(&zk, &gw).await;
}

#[tokio::test]
async fn bad_input_is_invalid_argument_and_leaves_nothing() {
    let (zk, gw, mut c, _shared) = setup().await;
    let neg = Some(prost_types::Duration {
        seconds: -1,
        nanos: 0,
    });
    let cases: Vec<(&str, Vec<pb::AcquireRequest>)> = vec![
        (
            "slash in name",
            vec![LReq::Acquire(acquire_msg("a/b", "o")).into()],
        ),
        (
            "empty name",
            vec![LReq::Acquire(acquire_msg("", "o")).into()],
        ),
        (
            "dot-dot name",
            vec![LReq::Acquire(acquire_msg("..", "o")).into()],
        ),
        (
            "long name",
            vec![LReq::Acquire(acquire_msg(&"x".repeat(201), "o")).into()],
        ),
        (
            "empty owner",
            vec![LReq::Acquire(acquire_msg("ok", "")).into()],
        ),
        (
            "first message keep_alive",
            vec![LReq::KeepAlive(pb::KeepAlive {}).into()],
        ),
        (
            "first message release",
            vec![LReq::Release(pb::ReleaseLock {}).into()],
        ),
        (
            "empty first message",
            vec![pb::AcquireRequest { request: None }],
        ),
        ("no message at all", vec![]),
        (
            "negative wait_timeout",
            vec![LReq::Acquire(pb::AcquireLock {
                wait_timeout: neg,
                ..acquire_msg("ok", "o")
            })
            .into()],
        ),
        (
            "negative ttl",
            vec![LReq::Acquire(pb::AcquireLock {
                ttl: neg,
                ..acquire_msg("ok", "o")
            })
            .into()],
        ),
        (
            "zero ttl",
            vec![LReq::Acquire(pb::AcquireLock {
                ttl: dur(Duration::ZERO),
                ..acquire_msg("ok", "o")
            })
            .into()],
        ),
        (
            "unknown mode",
            vec![LReq::Acquire(pb::AcquireLock {
                mode: 7,
                ..acquire_msg("ok", "o")
            })
            .into()],
        ),
        (
            "absurd permits",
            vec![LReq::Acquire(pb::AcquireLock {
                permits: 10_001,
                ..acquire_msg("ok", "o")
            })
            .into()],
        ),
        (
            "read with permits",
            vec![LReq::Acquire(pb::AcquireLock {
                permits: 3,
                mode: pb::LockMode::Read.into(),
                ..acquire_msg("ok", "o")
            })
            .into()],
        ),
    ];
    for (what, first) in cases {
        let (tx, rx) = mpsc::channel(4);
        for m in first {
            tx.send(m).await.unwrap();
        }
        drop(tx); // half-close: the gateway must not wait for more
        let e = tokio::time::timeout(STEP, c.acquire(ReceiverStream::new(rx)))
            .await
            .unwrap_or_else(|_| panic!("{what}: no answer in time"))
            .err()
            .unwrap_or_else(|| panic!("{what}: accepted"));
        assert_eq!(e.code(), Code::InvalidArgument, "{what}: {e:?}");
        assert!(!e.message().is_empty(), "{what}");
    }
    // A second acquire inside a stream, and an empty message later on, end the stream.
    let mut a = Acquisition::open(&mut c, acquire_msg("ok", "o")).await;
    a.acquired().await;
    a.send(LReq::Acquire(acquire_msg("ok", "o"))).await;
    a.expect_end(Some(Code::InvalidArgument)).await;
    let mut a = Acquisition::open(&mut c, acquire_msg("ok", "o")).await;
    a.acquired().await;
    a.stream
        .send(pb::AcquireRequest { request: None })
        .await
        .unwrap();
    a.expect_end(Some(Code::InvalidArgument)).await;
    // Read APIs validate names too.
    let e = c
        .holders(pb::HoldersRequest {
            name: "a/b".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = c
        .validate(pb::LockValidateRequest {
            name: "".into(),
            fencing_token: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    no_members_left(&zk, &gw).await;
}

/// `Holders` and `Validate` tell holders from waiters and never reveal a lease; a hand-over
/// wakes only the successor and costs a bounded number of ZooKeeper requests (G4).
#[tokio::test]
async fn holders_validate_and_herd_free_hand_over() {
    use prost::Message;
    let (zk, gw, mut c, _shared) = setup().await;
    let mut first = Acquisition::open(&mut c, acquire_msg("herd", "h0")).await;
    let t0 = first.acquired().await.fencing_token;
    let mut waiters = Vec::new();
    for i in 1..30 {
        waiters.push(Acquisition::open(&mut c, acquire_msg("herd", &format!("h{i}"))).await);
    }
    let h = holders(&mut c, "herd").await;
    assert_eq!(h.holders.len(), 1);
    assert_eq!(
        (h.holders[0].owner.as_str(), h.holders[0].fencing_token),
        ("h0", t0)
    );
    assert!(h.holders[0].since.is_some());
    assert_eq!(h.waiting, 29);
    assert!(validate(&mut c, "herd", t0).await);
    assert!(!validate(&mut c, "herd", t0 + 1).await);
    assert!(!validate(&mut c, "nothing-here", t0).await);
    let text = String::from_utf8_lossy(&h.encode_to_vec()).to_lowercase();
    for a in std::iter::once(&first).chain(waiters.iter()) {
        assert!(!text.contains(&a.lease.to_lowercase()));
    }
    let ids: Vec<String> = member_znodes(&zk_client(&zk).await, &gw.root)
        .await
        .iter()
        .map(|p| p.rsplit('/').next().unwrap()[2..34].to_owned())
        .collect();
    assert_eq!(ids.len(), 30);
    assert!(
        ids.iter().all(|id| !text.contains(id.as_str())),
        "a lease secret leaked"
    );

    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = gw.coord.zk_requests();
    drop(first);
    let mut second = waiters.remove(0);
    let t1 = second.acquired().await.fencing_token;
    assert!(t1 > t0);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let cost = gw.coord.zk_requests() - before;
    // The delete and the successor's confirming write (measured: exactly 2), with slack for a
    // retry: independent of the 28 other waiters.
    assert!(cost <= 3, "one hand-over cost {cost} ZooKeeper requests");
    for w in waiters.iter_mut() {
        w.quiet_for(Duration::from_millis(5)).await;
    }
    assert!(
        !validate(&mut c, "herd", t0).await,
        "the old token is stale"
    );
    assert!(validate(&mut c, "herd", t1).await);
    drop(second);
    drop(waiters);
    no_members_left(&zk, &gw).await;
}

/// Half-closing the request side keeps the hold; cancelling the stream releases it at once.
#[tokio::test]
async fn half_close_keeps_the_hold_and_cancel_releases() {
    let (zk, gw, mut c, _shared) = setup().await;
    let mut a = Acquisition::open(&mut c, acquire_msg("hc", "a")).await;
    a.acquired().await;
    let mut b = Acquisition::open(&mut c, acquire_msg("hc", "b")).await;
    let mut stream = a.stream;
    stream.close_requests();
    tokio::time::sleep(Duration::from_millis(200)).await;
    b.quiet_for(Duration::from_millis(10)).await;
    assert_eq!(members(&zk, &gw.root).await, 2, "half-close keeps the hold");
    let started = Instant::now();
    drop(stream);
    b.acquired().await;
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(b);
    no_members_left(&zk, &gw).await;
}

/// A short ZooKeeper outage: the holder hears `suspended` (stop work) then `resumed` and
/// still holds with the same token; the queue behind it still works afterwards.
#[tokio::test]
async fn zookeeper_pause_suspends_then_resumes_the_holder() {
    let _alone = exclusive().write().await;
    let mut zk = own_zk().await;
    let connect = zk.connect_string();
    let gw = Gateway::start(&connect).await;
    let mut c = lock_client(&gw).await;
    let mut a = Acquisition::open(&mut c, acquire_msg("pause", "a")).await;
    let token = a.acquired().await.fencing_token;
    let mut b = Acquisition::open(&mut c, acquire_msg("pause", "b")).await;

    zk.pause(0).await.unwrap();
    let stop_within = match a.next_any().await {
        Ok(Some(LEvent::Suspended(s))) => Duration::try_from(s.stop_within.unwrap()).unwrap(),
        other => panic!("expected suspended, got {other:?}"),
    };
    assert!(stop_within > Duration::ZERO);
    zk.resume(0).await.unwrap();
    match a.next_any().await {
        Ok(Some(LEvent::Resumed(_))) => {}
        other => panic!("expected resumed, got {other:?}"),
    }
    assert!(
        validate(&mut c, "pause", token).await,
        "same hold, same token"
    );
    // b waited throughout (it heard of the outage too, but of no lock).
    b.quiet_for(Duration::from_millis(100)).await;
    a.release().await;
    assert!(b.acquired().await.fencing_token > token);
    b.release().await;
    no_members_left(&connect, &gw).await;
    drop(gw);
    zk.shutdown().await;
}

/// G3c for a release by lease (issue 19): the holder on gateway A, released by lease through
/// gateway B, is told first (`suspended`, reason END_REQUESTED) — before the next holder on B
/// acquires — and its znode goes once it ends its stream (here by cancelling it, as the client
/// helpers do on `suspended`); the call returns only once the znode is gone, and a repeat is
/// NOT_FOUND. Before this, B deleted the znode at once and the next holder could acquire before
/// the holder heard anything.
#[tokio::test]
async fn a_holder_released_by_lease_elsewhere_is_told_before_the_next_holder_acquires() {
    let (zk, gw, mut c, _shared) = setup().await;
    let other = Gateway::start_beside(&zk, &gw).await;
    let mut c2 = lock_client(&other).await;
    let zkc = zk_client(&zk).await;
    let mut a = Acquisition::open(&mut c, acquire_msg("told", "a")).await;
    a.acquired().await;
    let b = Acquisition::open(&mut c2, acquire_msg("told", "b")).await;
    // b's events, stamped as they arrive (one clock for both streams).
    let (tx, mut b_events) = mpsc::unbounded_channel();
    let mut b_stream = b.stream;
    tokio::spawn(async move {
        loop {
            let e = b_stream.event().await;
            let last = !matches!(e, Ok(Some(_)));
            if tx.send((Instant::now(), e)).is_err() || last {
                break;
            }
        }
    });
    let (root, lease) = (gw.root.clone(), a.lease.clone());
    let release = tokio::spawn(async move {
        let r = c2.release(pb::ReleaseRequest { lease }).await;
        (r, member_znodes(&zkc, &root).await.len(), c2)
    });
    let told = skipping_at_most("suspended (END_REQUESTED)", async {
        loop {
            match tokio::time::timeout(STEP, a.stream.event())
                .await
                .expect("in time")
            {
                Ok(Some(LEvent::Heartbeat(_))) => continue,
                Ok(Some(LEvent::Suspended(s)))
                    if s.reason == pb::SuspendReason::EndRequested as i32 =>
                {
                    break Instant::now()
                }
                other => panic!("expected suspended (END_REQUESTED), got {other:?}"),
            }
        }
    })
    .await;
    // The holder stops its work, then cancels its stream.
    drop(a.stream);
    let acquired = skipping_at_most("b acquires", async {
        loop {
            let (at, e) = tokio::time::timeout(STEP, b_events.recv())
                .await
                .expect("b acquires in time")
                .expect("b's reader");
            match e {
                Ok(Some(LEvent::Acquired(_))) => break at,
                Ok(Some(LEvent::Heartbeat(_))) => continue,
                other => panic!("expected acquired, got {other:?}"),
            }
        }
    })
    .await;
    assert!(
        told < acquired,
        "b acquired {:?} before a was told",
        told - acquired
    );
    let (r, left, mut c2) = release.await.unwrap();
    r.expect("release by lease");
    assert_eq!(left, 1, "the call returned before a's znode was gone");
    let again = c2
        .release(pb::ReleaseRequest {
            lease: a.lease.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::NotFound, "{again:?}");
}
