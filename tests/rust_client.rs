//! The Rust client (`clients/rust`, crate `zkgate-client`) against real gateways on a real
//! ZooKeeper: the unary calls, holds and their loss reasons, locks with ttl and try-lock,
//! failover from a drained gateway to a second one, and the silence watchdog on a frozen
//! (SIGSTOPped) gateway process.

// Only the process gateway of the fault-injection support (the rest is not needed here).
#[allow(dead_code)]
use zkgate_testkit::procgw;

use std::time::{Duration, Instant};

use tokio_stream::StreamExt;
use zkgate_client::{Client, Endpoints, Error, LockMode, LockOptions, LossReason};
use zkgate_testkit::*;

async fn client_for(urls: &[String]) -> Client {
    Client::connect(Endpoints::new(urls).unwrap())
        .await
        .unwrap()
}

/// The next observed state within `STEP`.
async fn observed(o: &mut zkgate_client::Observer) -> Option<zkgate_client::Leader> {
    tokio::time::timeout(STEP, o.next())
        .await
        .expect("an observed state in time")
        .expect("observing")
        .expect("no error")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_calls_and_loss_by_lease() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let c = client_for(&[gw.url()]).await;

    assert!(c.leader("e").await.unwrap().is_none(), "nobody leads");
    let mut watch = c.observe("e");
    assert!(observed(&mut watch).await.is_none(), "vacant first");

    let a = c.elect("e", "alice", b"v1").await.unwrap();
    assert!(a.is_leader());
    let token = a.fencing_token().unwrap();
    assert_eq!(a.leader().unwrap().candidate, "alice");
    assert!(a.silence_limit().is_some());
    assert_eq!(observed(&mut watch).await.unwrap().fencing_token, token);
    let b = c.campaign("e", "bob", b"").await.unwrap();
    assert_eq!(b.position(), 1);
    assert!(!b.is_leader());

    let names: Vec<String> = c
        .candidates("e")
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.candidate)
        .collect();
    assert_eq!(names, ["alice", "bob"]);
    assert_eq!(a.proclaim(b"v2").await.unwrap().value, b"v2");
    assert_eq!(observed(&mut watch).await.unwrap().value, b"v2");
    let v = c.validate("e", token).await.unwrap();
    assert!(v.current);
    assert!(!c.validate("e", token - 1).await.unwrap().current);
    // A non-leader cannot proclaim; the refusal does not end its candidacy.
    assert_eq!(
        b.proclaim(b"x").await.unwrap_err().code(),
        Some(tonic::Code::FailedPrecondition)
    );

    // Resign by lease from elsewhere: alice's stream ends OK, which is the loss `ended`.
    c.resign(a.lease()).await.unwrap();
    assert_eq!(
        tokio::time::timeout(STEP, a.lost()).await.unwrap(),
        LossReason::Ended
    );
    assert!(a.lost_token().is_cancelled());
    assert!(matches!(a.check(), Err(Error::Lost(LossReason::Ended))));
    // Bob is elected with a larger token; a spent lease is NOT_FOUND.
    let leader = tokio::time::timeout(STEP, b.elected())
        .await
        .unwrap()
        .unwrap();
    assert!(leader.fencing_token > token);
    assert_eq!(
        c.resign(a.lease()).await.unwrap_err().code(),
        Some(tonic::Code::NotFound)
    );
    // Tokens the observer delivers never go down (vacancy, then bob).
    loop {
        match observed(&mut watch).await {
            None => continue,
            Some(l) if l.candidate == "bob" => break,
            Some(l) => assert!(l.fencing_token >= token, "{l:?}"),
        }
    }
    // Dropping a leadership releases it at once.
    drop(b);
    wait_no_members(&zk_client(&zk).await, &gw.root, Duration::from_secs(5)).await;
    // A bad name is refused before anything is queued.
    let e = c.campaign("bad/name", "x", b"").await.unwrap_err();
    assert_eq!(e.code(), Some(tonic::Code::InvalidArgument));
    assert!(e.is_permanent());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_permits_try_lock_ttl_and_release_by_lease() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let c = client_for(&[gw.url()]).await;

    let mut opts = LockOptions::new("l");
    opts.owner = "one".into();
    // A ttl shorter than the wait below: only the client's keep-alives keep it.
    opts.ttl = Some(Duration::from_millis(600));
    let one = c.acquire(opts).await.unwrap();
    let token = one.fencing_token().unwrap();
    assert!(c.validate_lock("l", token).await.unwrap());

    // Try-lock on a held lock: not acquired, and nothing stays queued.
    let mut try_opts = LockOptions::new("l");
    try_opts.wait_timeout = Some(Duration::ZERO);
    assert!(matches!(
        c.acquire(try_opts).await.unwrap_err(),
        Error::NotAcquired
    ));
    // Past several ttls the lock is still held (keep-alives every ttl / 3).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(one.is_held(), "{one:?}");
    let h = c.holders("l").await.unwrap();
    assert_eq!(h.holders.len(), 1);
    assert_eq!(h.holders[0].owner, "one");
    assert_eq!(h.waiting, 0);

    // Release by lease from elsewhere: the hold is lost (`ended`).
    c.release(one.lease()).await.unwrap();
    assert_eq!(
        tokio::time::timeout(STEP, one.lost()).await.unwrap(),
        LossReason::Ended
    );
    assert_eq!(
        c.release(one.lease()).await.unwrap_err().code(),
        Some(tonic::Code::NotFound)
    );

    // Two readers share it; a semaphore of 2 takes two holders; a permits mismatch is refused.
    let mut read = LockOptions::new("rw");
    read.mode = LockMode::Read;
    let r1 = c.acquire(read.clone()).await.unwrap();
    let r2 = c.acquire(read).await.unwrap();
    let h = c.holders("rw").await.unwrap();
    assert_eq!(h.holders.len(), 2);
    assert!(h.holders.iter().all(|h| h.mode == LockMode::Read as i32));
    let mut sem = LockOptions::new("sem");
    sem.permits = 2;
    let s1 = c.acquire(sem.clone()).await.unwrap();
    let s2 = c.acquire(sem.clone()).await.unwrap();
    let mut third = c.queue_lock(sem).await.unwrap();
    assert_eq!(third.position(), 2);
    let mut mismatch = LockOptions::new("sem");
    mismatch.permits = 3;
    let refused = match c.queue_lock(mismatch).await {
        Err(e) => e,
        Ok(h) => h.acquired().await.unwrap_err(),
    };
    assert_eq!(
        refused.code(),
        Some(tonic::Code::FailedPrecondition),
        "{refused:?}"
    );
    // Dropping a holder (no explicit release) hands its permit on.
    drop(s1);
    let t = tokio::time::timeout(STEP, third.acquired())
        .await
        .unwrap()
        .unwrap();
    assert!(t > s2.fencing_token().unwrap());
    assert!(matches!(
        third.next_event().await,
        Some(zkgate_client::HoldEvent::Queued { position: 2 })
    ));
    drop((r1, r2, s2));
    third.release().await;
    wait_no_members(&zk_client(&zk).await, &gw.root, Duration::from_secs(5)).await;
}

/// Two gateways on one root; the client lists both. Draining the first revokes its leader
/// (G3c: `suspended` first, so the one-shot campaign reports `suspended` — before G3c the
/// drain's first sign was the `UNAVAILABLE` end, reported as `unavailable`) and ends its other
/// streams `UNAVAILABLE`: `run_while_leader` campaigns again on the second gateway and leads
/// there with a larger token, and `observe` follows without ever delivering a smaller token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_from_a_drained_gateway_to_a_second_one() {
    let zk = shared_zk();
    let root = unique_root();
    let opts = || GatewayOpts {
        root: Some(root.clone()),
        ..Default::default()
    };
    let gw1 = Gateway::start_with(&zk, opts()).await;
    let gw2 = Gateway::start_with(&zk, opts()).await;
    let (url1, url2) = (gw1.url(), gw2.url());
    let c = client_for(&[url1.clone(), url2.clone()]).await;
    assert_eq!(c.current_endpoint().as_str(), url1);

    let mut watch = c.observe("f");
    assert!(observed(&mut watch).await.is_none());
    let one_shot = c.campaign("f", "one-shot", b"").await.unwrap();
    assert_eq!(one_shot.endpoint().as_str(), url1);
    one_shot.elected().await.unwrap();

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let runner = {
        let c = c.clone();
        tokio::spawn(async move {
            c.run_while_leader("f", "runner", b"", move |lead| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send((lead.fencing_token, lead.endpoint.to_string()));
                    std::future::pending::<()>().await;
                }
            })
            .await
        })
    };
    // The runner queues behind the one-shot candidate; resign that one to let it lead.
    let seen = observed(&mut watch).await.unwrap();
    assert_eq!(seen.candidate, "one-shot");
    let wait_runner_queued = Instant::now();
    while c.candidates("f").await.unwrap().len() < 2 {
        assert!(
            wait_runner_queued.elapsed() < STEP,
            "the runner never queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lost = one_shot.lost();
    gw1.stop().await;
    assert_eq!(
        tokio::time::timeout(STEP, lost).await.unwrap(),
        LossReason::Suspended
    );
    let (token, endpoint) = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("the runner leads again in time")
        .unwrap();
    assert_eq!(endpoint, url2, "campaigned again on the second gateway");
    assert!(token > seen.fencing_token);
    assert_eq!(c.current_endpoint().as_str(), url2);
    // The observer reconnected to the second gateway and reaches the runner, tokens
    // non-decreasing on the way.
    let mut last = seen.fencing_token;
    loop {
        match observed(&mut watch).await {
            None => continue,
            Some(l) => {
                assert!(l.fencing_token >= last, "{l:?} after {last}");
                last = l.fencing_token;
                if l.candidate == "runner" {
                    break;
                }
            }
        }
    }
    runner.abort();
    let _ = runner.await;
    wait_no_members(&zk_client(&zk).await, &root, Duration::from_secs(5)).await;
}

/// A SIGSTOPped gateway sends nothing: its leader's watchdog reports `silence` once
/// `silence_limit` has passed without a message, and the client then cancels the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_reports_silence_on_a_frozen_gateway() {
    let zk = shared_zk();
    let spec = procgw::GatewaySpec::binary(
        env!("CARGO_BIN_EXE_zkgate"),
        &zk,
        &unique_root(),
        Duration::from_secs(4),
    );
    let mut gw = procgw::GatewayProc::spawn("frozen", spec).await.unwrap();
    let c = client_for(&[gw.url()]).await;
    let lead = c.elect("w", "a", b"").await.unwrap();
    let limit = lead.silence_limit().expect("a silence limit");
    let lost = lead.lost();
    gw.freeze();
    let frozen = Instant::now();
    let reason = tokio::time::timeout(limit * 3, lost).await;
    let took = frozen.elapsed();
    gw.thaw();
    assert_eq!(reason.expect("lost in time"), LossReason::Silence);
    // Not before the limit less the heartbeat interval (≤ limit / 3) that may already have
    // elapsed at the freeze (half the limit, for slack), and within three limits (above).
    assert!(took >= limit / 2, "lost after {took:?}, limit {limit:?}");
    assert!(!lead.is_leader());
}

/// Observers the application does not read cost nothing else on their connection, and read
/// late give the newest state. Each observer's task reads its stream whether or not the
/// application takes what it read (`mailbox`). Before, a task stopped reading once 16 states
/// waited, the unread messages piled up in the client's HTTP/2 buffers, and h2 ended the
/// client's one connection with `ENHANCE_YOUR_CALM` ("too_many_data_frames") after ≈ 13,000:
/// here the 80th proclaim failed `RESOURCE_EXHAUSTED` and the leadership was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_observers_do_not_cost_the_leadership_on_their_connection() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let c = client_for(&[gw.url()]).await;
    let a = c.elect("unread", "alice", b"v").await.unwrap();
    let mut watches: Vec<_> = (0..200).map(|_| c.observe("unread")).collect();
    for w in &mut watches {
        assert!(observed(w).await.is_some());
    }
    for i in 0..120u32 {
        if let Err(e) = a.proclaim(format!("v{i}").as_bytes()).await {
            panic!("proclaim {i}: {e:?}; loss {:?}", a.loss_reason());
        }
    }
    assert_eq!(a.loss_reason(), None);
    a.check().unwrap();
    // Read at last: the newest state after at most what was still on its way when the last
    // proclaim returned — not the 120 before it, nor the 16 a channel used to keep.
    for w in &mut watches {
        let mut before_newest = 0;
        while observed(w).await.unwrap().value != b"v119" {
            before_newest += 1;
        }
        assert!(before_newest <= 8, "{before_newest} older states first");
    }
}
