//! Natural batching (`--zk-batch`, `coord::batch`): member creates and deletes ready while
//! another write of the session is in flight leave together in one ZooKeeper `multi`. On real
//! ZooKeeper: members created together share one transaction, but never two of one queue (their
//! fencing tokens would be equal, G1); one refused operation does not fail the others of its
//! batch; a batch whose reply is lost leaves no orphan (G5); a hand-over's delete does not wait
//! for the batch in flight.
//!
//! Batches are made deterministic with `Zk::hold_requests`: while the test holds every request
//! slot of the gateway's session, writes gather in the batcher; released, they leave at once.

use std::time::Duration;

use zkgate::coord::batch::Urgency;
use zkgate_testkit::localzk::{LocalZk, LocalZkOptions};
use zkgate_testkit::*;

const JOINS: usize = 12;

/// The creation zxid of each member znode of the queue `kind/name`, by sequence.
async fn czxids(
    zk: &zookeeper_client::Client,
    root: &str,
    kind: &str,
    name: &str,
) -> Vec<(String, i64)> {
    let path = format!("{root}/{kind}/{name}");
    let mut children = zk.list_children(&path).await.expect("queue listed");
    children.sort_by_key(|c| c[c.len() - 10..].to_owned());
    let mut out = Vec::new();
    for c in children {
        let (_, stat) = zk
            .get_data(&format!("{path}/{c}"))
            .await
            .expect("member read");
        out.push((c, stat.czxid));
    }
    out
}

/// A gateway with `--zk-batch` on, set explicitly so these tests test batching whatever the
/// default is.
async fn batching_gateway(zk: &str) -> Gateway {
    Gateway::start_with(
        zk,
        GatewayOpts {
            configure: Some(Box::new(|cfg| cfg.coord.zk_batch = true)),
            ..Default::default()
        },
    )
    .await
}

fn gateway_zk(gw: &Gateway) -> zkgate::coord::zk::Zk {
    gw.coord.session().expect("session").zk.clone()
}

/// Starts `n` joins while the test holds every request slot ([`Zk::hold_requests`]) and returns
/// once each one's create waits in the batcher: released together, they leave in one batch.
async fn gathered<T, F>(
    gz: &zkgate::coord::zk::Zk,
    what: &str,
    n: usize,
    join: impl Fn(usize) -> F,
) -> Vec<tokio::task::JoinHandle<T>>
where
    T: Send + 'static,
    F: std::future::Future<Output = T> + Send + 'static,
{
    let joins: Vec<_> = (0..n).map(|i| tokio::spawn(join(i))).collect();
    wait_until(what, STEP, || async { gz.queued_writes() == n }).await;
    joins
}

/// `JOINS` lock waiters asked at the same moment on `JOINS` different locks: their creates
/// leave in one transaction (one creation zxid for all), and each still gets a fencing token
/// above its lock's previous holder's when that one releases. Many candidates of one election
/// asked at the same moment each get a transaction of their own: their tokens strictly increase
/// in queue order, and they leave pipelined, one batch right behind the other.
#[tokio::test]
async fn creates_ready_together_share_a_transaction_but_never_a_fencing_token() {
    let zk = shared_zk();
    let gw = batching_gateway(&zk).await;
    let zkc = zk_client(&zk).await;
    let mut lc = gw.lock_client().await;
    let mut holders = Vec::new();
    for i in 0..JOINS {
        let mut h = Acquisition::open(&mut lc, acquire_msg(&format!("b{i}"), "holder")).await;
        let token = h.acquired().await.fencing_token;
        holders.push((h, token));
    }

    let gz = gateway_zk(&gw);
    assert!(gz.batching(), "batching is on when asked");
    let hold = gz.hold_requests().await;
    let waiters = gathered(
        &gz,
        "every waiter's create waits in the batcher",
        JOINS,
        |i| {
            let mut lc = lc.clone();
            async move { Acquisition::open(&mut lc, acquire_msg(&format!("b{i}"), "waiter")).await }
        },
    )
    .await;
    drop(hold);
    let mut waiting = Vec::new();
    for w in waiters {
        waiting.push(w.await.expect("waiter joined"));
    }

    let mut waiter_zxids = Vec::new();
    for i in 0..JOINS {
        let members = czxids(&zkc, &gw.root, "locks", &format!("b{i}")).await;
        assert_eq!(members.len(), 2, "holder and waiter of b{i}: {members:?}");
        waiter_zxids.push(members[1].1);
    }
    waiter_zxids.dedup();
    assert_eq!(
        waiter_zxids.len(),
        1,
        "{JOINS} creates asked together left in one transaction"
    );

    for ((holder, token), mut waiter) in holders.into_iter().zip(waiting) {
        drop(holder);
        let next = waiter.acquired().await.fencing_token;
        assert!(next > token, "successive holders' tokens increase");
    }

    // One election, many candidates at once: one create per queue per batch.
    let mut ec = gw.client().await;
    let mut leader = Campaign::join(&mut ec, "many", "leader", b"").await;
    leader.elected().await;
    let hold = gz.hold_requests().await;
    let candidates = gathered(
        &gz,
        "every candidate's create waits in the batcher",
        JOINS,
        |i| {
            let mut ec = ec.clone();
            async move { Campaign::join(&mut ec, "many", &format!("c{i}"), b"").await }
        },
    )
    .await;
    drop(hold);
    let mut joined = Vec::new();
    for c in candidates {
        joined.push(c.await.expect("candidate joined"));
    }
    let members = czxids(&zkc, &gw.root, "elections", "many").await;
    assert_eq!(members.len(), JOINS + 1);
    assert!(
        members.windows(2).all(|w| w[0].1 < w[1].1),
        "tokens strictly increase in queue order: {members:?}"
    );
    // Each batch could take one of them; the rest did not wait a round trip per batch but
    // went out pipelined, each batch behind the one before (2,000 candidates of one election
    // took 2,000 round trips in turn before).
    assert!(
        gz.peak_batch_drivers() > 1,
        "one queue's deferred creates are sent pipelined, not a round trip apart"
    );
    drop(joined);
    drop(leader);
    wait_no_members(&zkc, &gw.root, Duration::from_secs(10)).await;
}

/// Members created in one `multi` that hold the moment they register (readers beside a reader)
/// take their fencing token from the transaction's zxid, which zookeeper-client's patched
/// `multi` returns from the reply header: each token is its znode's creation zxid, and no
/// `exists` is sent to read it.
#[tokio::test]
async fn a_batched_member_takes_its_token_from_the_transaction_without_a_read() {
    let zk = shared_zk();
    let gw = batching_gateway(&zk).await;
    let zkc = zk_client(&zk).await;
    let mut lc = gw.lock_client().await;
    let read = |name: &str, owner: &str| zkgate::proto::AcquireLock {
        mode: zkgate::proto::LockMode::Read.into(),
        ..acquire_msg(name, owner)
    };
    // A reader on each lock keeps its queue (and the gateway's view of it) while the others
    // join: a reader queued behind a reader holds the moment it registers.
    let mut first = Vec::new();
    for i in 0..JOINS {
        let mut r = Acquisition::open(&mut lc, read(&format!("t{i}"), "first")).await;
        r.acquired().await;
        first.push(r);
    }
    let gz = gateway_zk(&gw);
    let hold = gz.hold_requests().await;
    let joins = gathered(
        &gz,
        "every reader's create waits in the batcher",
        JOINS,
        |i| {
            let mut lc = lc.clone();
            async move { Acquisition::open(&mut lc, read(&format!("t{i}"), "second")).await }
        },
    )
    .await;
    let (batches, reads) = (
        gw.coord.zk_requests_of("batch"),
        gw.coord.zk_requests_of("exists"),
    );
    drop(hold);
    let mut tokens = Vec::new();
    let mut second = Vec::new();
    for (i, j) in joins.into_iter().enumerate() {
        let mut r = j.await.expect("reader joined");
        let token = r.acquired().await.fencing_token;
        let members = czxids(&zkc, &gw.root, "locks", &format!("t{i}")).await;
        assert_eq!(members.len(), 2, "both readers of t{i}: {members:?}");
        assert_eq!(
            token, members[1].1 as u64,
            "t{i}'s second reader's token is its znode's creation zxid"
        );
        tokens.push(token);
        second.push(r);
    }
    tokens.dedup();
    assert_eq!(
        tokens.len(),
        1,
        "the {JOINS} creates left in one transaction"
    );
    assert_eq!(gw.coord.zk_requests_of("batch"), batches + 1);
    assert_eq!(
        gw.coord.zk_requests_of("exists"),
        reads,
        "no read for a batched member's token"
    );
    drop((first, second));
    wait_no_members(&zkc, &gw.root, Duration::from_secs(10)).await;
}

/// A batch holding operations ZooKeeper refuses (a create under a vanished queue, a delete of a
/// znode already gone): nothing of it is applied, the refused ones get their own error, and the
/// others leave again and succeed.
#[tokio::test]
async fn a_refused_operation_does_not_fail_the_others_of_its_batch() {
    let zk = shared_zk();
    let gw = batching_gateway(&zk).await;
    let zkc = zk_client(&zk).await;
    let gz = gateway_zk(&gw);
    // Queues of their own (persistent, so nothing reaps them while the test runs), one per
    // create: a batch creates at most one member per queue.
    let parent = format!("{}/batch-refused", gw.root);
    gz.ensure_folders(&gw.root, "batch-refused").await.unwrap();
    let persistent =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    for i in 0..4 {
        zkc.create(&format!("{parent}/q{i}"), b"", &persistent)
            .await
            .unwrap();
    }

    let hold = gz.hold_requests().await;
    let creates: Vec<_> = (0..4)
        .map(|i| {
            let (gz, prefix) = (gz.clone(), format!("{parent}/q{i}/ok-"));
            tokio::spawn(async move { gz.create_member(&prefix, b"x").await })
        })
        .collect();
    let vanished = {
        let (gz, prefix) = (gz.clone(), format!("{parent}/gone/m-"));
        tokio::spawn(async move { gz.create_member(&prefix, b"x").await })
    };
    let gone = {
        let (gz, path) = (gz.clone(), format!("{parent}/never-made"));
        tokio::spawn(async move { gz.delete(&path, Urgency::Gather).await })
    };
    wait_until("six writes wait in the batcher", STEP, || async {
        gz.queued_writes() == 6
    })
    .await;
    drop(hold);

    assert_eq!(
        vanished.await.unwrap().unwrap_err(),
        zookeeper_client::Error::NoNode
    );
    assert_eq!(
        gone.await.unwrap().unwrap_err(),
        zookeeper_client::Error::NoNode
    );
    let mut zxids = Vec::new();
    for c in creates {
        let (czxid, _) = c.await.unwrap().expect("a good create succeeds");
        zxids.push(czxid);
    }
    for (i, czxid) in zxids.iter().enumerate() {
        let q = format!("{parent}/q{i}");
        let children = zkc.list_children(&q).await.unwrap();
        assert_eq!(
            children.len(),
            1,
            "the good create of q{i} once: {children:?}"
        );
        let member = format!("{q}/{}", children[0]);
        let (_, stat) = zkc.get_data(&member).await.unwrap();
        assert_eq!(
            *czxid, stat.czxid,
            "the create's answer is its creation zxid"
        );
        gz.delete(&member, Urgency::Gather).await.unwrap();
        gz.delete(&q, Urgency::Gather).await.unwrap();
    }
    zxids.dedup();
    assert_eq!(zxids.len(), 1, "the good creates went in one batch again");
    gz.delete(&parent, Urgency::Gather).await.unwrap();
}

/// A batch of member creates whose reply is lost with the connection (applied, reported as
/// `ConnectionLoss` to every member): each member finds its own znode by its protected name and
/// adopts it, so every lock has exactly its holder and one waiter, and nothing is left once
/// every stream is gone (G5, per member of a batch).
#[tokio::test]
async fn a_lost_batch_reply_leaves_no_orphan() {
    let zk = shared_zk();
    let gw = batching_gateway(&zk).await;
    let zkc = zk_client(&zk).await;
    let mut lc = gw.lock_client().await;
    let mut holders = Vec::new();
    for i in 0..JOINS {
        let mut h = Acquisition::open(&mut lc, acquire_msg(&format!("l{i}"), "holder")).await;
        h.acquired().await;
        holders.push(h);
    }
    let gz = gateway_zk(&gw);
    let hold = gz.hold_requests().await;
    gz.lose_next_batch_reply();
    let waiters = gathered(
        &gz,
        "every waiter's create waits in the batcher",
        JOINS,
        |i| {
            let mut lc = lc.clone();
            async move { Acquisition::open(&mut lc, acquire_msg(&format!("l{i}"), "waiter")).await }
        },
    )
    .await;
    drop(hold);
    let mut waiting = Vec::new();
    for w in waiters {
        let w = w.await.expect("waiter joined");
        assert_eq!(w.position, 1);
        waiting.push(w);
    }
    assert!(!gz.batch_reply_loss_armed(), "the batch's reply was lost");
    for i in 0..JOINS {
        let members = czxids(&zkc, &gw.root, "locks", &format!("l{i}")).await;
        assert_eq!(
            members.len(),
            2,
            "holder and adopted waiter of l{i}: {members:?}"
        );
    }
    for (holder, waiter) in holders.into_iter().zip(waiting.iter_mut()) {
        drop(holder);
        waiter.acquired().await;
    }
    drop(waiting);
    wait_no_members(&zkc, &gw.root, Duration::from_secs(10)).await;
}

/// A hand-over to a waiter on the same gateway costs the holder's delete and nothing more: the
/// waiter is granted on its predecessor's deletion event, with its own create reply's creation
/// zxid as its token — no `exists` to read it — with batching off and on.
#[tokio::test]
async fn a_hand_over_on_one_gateway_costs_its_delete_and_no_read() {
    let zk = shared_zk();
    let zkc = zk_client(&zk).await;
    for batching in [false, true] {
        let gw = Gateway::start_with(
            &zk,
            GatewayOpts {
                configure: Some(Box::new(move |cfg| cfg.coord.zk_batch = batching)),
                ..Default::default()
            },
        )
        .await;
        assert_eq!(gateway_zk(&gw).batching(), batching);
        let mut lc = gw.lock_client().await;
        let name = format!("handover-{batching}");
        let mut holder = Acquisition::open(&mut lc, acquire_msg(&name, "holder")).await;
        let t0 = holder.acquired().await.fencing_token;
        let mut waiter = Acquisition::open(&mut lc, acquire_msg(&name, "waiter")).await;
        assert_eq!(waiter.position, 1);
        let members = czxids(&zkc, &gw.root, "locks", &name).await;
        assert_eq!(members.len(), 2, "{members:?}");
        let reads = gw.coord.zk_requests_of("exists");
        drop(holder);
        let t1 = waiter.acquired().await.fencing_token;
        assert!(t1 > t0, "successive holders' tokens increase");
        assert_eq!(
            t1, members[1].1 as u64,
            "the waiter's token is its znode's creation zxid"
        );
        assert_eq!(
            gw.coord.zk_requests_of("exists"),
            reads,
            "batching {batching}: no read to confirm the successor"
        );
        drop(waiter);
        wait_no_members(&zkc, &gw.root, Duration::from_secs(10)).await;
    }
}

/// How long the freezing tests below wait for a step while ZooKeeper is frozen.
const FROZEN_AT_MOST: Duration = Duration::from_secs(3);

/// An own ZooKeeper with its default tick, so it grants the 20 s session timeout the batching
/// gateway asks: a freeze (a few milliseconds when the rule under test holds,
/// [`FROZEN_AT_MOST`] when it does not) never comes near the point where the gateway would
/// presume the session lost and retry its writes.
async fn zookeeper_to_freeze() -> (LocalZk, Gateway) {
    let zk = LocalZk::start_standalone(LocalZkOptions {
        tick_time: Duration::from_secs(2),
        ..Default::default()
    })
    .await
    .expect("start ZooKeeper");
    let gw = Gateway::start_with(
        &zk.connect_string(),
        GatewayOpts {
            session_timeout: Duration::from_secs(20),
            configure: Some(Box::new(|cfg| cfg.coord.zk_batch = true)),
            ..Default::default()
        },
    )
    .await;
    (zk, gw)
}

/// A hand-over's delete does not wait for the batch in flight (`batch::Urgency`): with
/// ZooKeeper frozen and another lock's release in flight, a holder with a waiter behind it goes
/// away, and its delete leaves at once, pipelined behind the first, while a create asked after
/// it gathers for the next batch as every other write does. Thawed, the waiter holds with a
/// greater token and nothing is left behind.
#[tokio::test]
async fn a_hand_over_delete_leaves_behind_a_batch_in_flight() {
    let (mut zk, gw) = zookeeper_to_freeze().await;
    let zkc = zk_client(&zk.connect_string()).await;
    let gz = gateway_zk(&gw);
    let mut lc = gw.lock_client().await;
    let mut lone = Acquisition::open(&mut lc, acquire_msg("alone", "lone")).await;
    lone.acquired().await;
    let mut holder = Acquisition::open(&mut lc, acquire_msg("busy", "holder")).await;
    let t0 = holder.acquired().await.fencing_token;
    let mut waiter = Acquisition::open(&mut lc, acquire_msg("busy", "waiter")).await;
    assert_eq!(waiter.position, 1);

    zk.pause(0).await.unwrap();
    let deletes = gw.coord.zk_requests_of("delete");
    // The only member of its lock: nothing in flight, so it leaves at once, and stays in
    // flight while ZooKeeper is frozen.
    drop(lone);
    wait_until("the lone release sent", FROZEN_AT_MOST, || async {
        gw.coord.zk_requests_of("delete") == deletes + 1
    })
    .await;
    assert_eq!(gz.peak_batch_drivers(), 1);
    drop(holder);
    wait_until(
        "the hand-over's delete sent behind the release in flight",
        FROZEN_AT_MOST,
        || async { gw.coord.zk_requests_of("delete") == deletes + 2 },
    )
    .await;
    assert_eq!(gz.queued_writes(), 0, "the hand-over waited for nothing");
    assert_eq!(gz.peak_batch_drivers(), 2, "it has a driver of its own");
    let mut lc2 = lc.clone();
    let again =
        tokio::spawn(
            async move { Acquisition::open(&mut lc2, acquire_msg("alone", "again")).await },
        );
    wait_until(
        "a create gathering for the next batch",
        FROZEN_AT_MOST,
        || async { gz.queued_writes() == 1 },
    )
    .await;

    zk.resume(0).await.unwrap();
    let t1 = waiter.acquired().await.fencing_token;
    assert!(
        t1 > t0,
        "successive holders' tokens increase: {t0} then {t1}"
    );
    let mut again = again.await.expect("acquire task");
    again.acquired().await;
    drop((waiter, again));
    wait_no_members(&zkc, &gw.root, Duration::from_secs(10)).await;
}

/// A hand-over's delete pipelined behind a batch that ZooKeeper then refuses: the refused
/// operation alone fails, the batch's good create leaves again and succeeds once, and the
/// hand-over — already on the wire behind it — is applied regardless: the waiter holds with a
/// greater token and nothing is left behind.
#[tokio::test]
async fn a_hand_over_delete_behind_a_refused_batch_still_hands_over() {
    let (mut zk, gw) = zookeeper_to_freeze().await;
    let zkc = zk_client(&zk.connect_string()).await;
    let gz = gateway_zk(&gw);
    let parent = format!("{}/refused-ahead", gw.root);
    gz.ensure_folders(&gw.root, "refused-ahead").await.unwrap();
    let persistent =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let q = format!("{parent}/q");
    zkc.create(&q, b"", &persistent).await.unwrap();
    let mut lc = gw.lock_client().await;
    let mut holder = Acquisition::open(&mut lc, acquire_msg("busy", "holder")).await;
    let t0 = holder.acquired().await.fencing_token;
    let mut waiter = Acquisition::open(&mut lc, acquire_msg("busy", "waiter")).await;
    assert_eq!(waiter.position, 1);

    // A batch of a good create and a delete ZooKeeper will refuse, gathered, then sent while
    // ZooKeeper is frozen, so it stays in flight.
    let hold = gz.hold_requests().await;
    let good = {
        let (gz, prefix) = (gz.clone(), format!("{q}/ok-"));
        tokio::spawn(async move { gz.create_member(&prefix, b"x").await })
    };
    let gone = {
        let (gz, path) = (gz.clone(), format!("{parent}/never-made"));
        tokio::spawn(async move { gz.delete(&path, Urgency::Gather).await })
    };
    wait_until("two writes wait in the batcher", STEP, || async {
        gz.queued_writes() == 2
    })
    .await;
    zk.pause(0).await.unwrap();
    let (batches, deletes) = (
        gw.coord.zk_requests_of("batch"),
        gw.coord.zk_requests_of("delete"),
    );
    drop(hold);
    wait_until("the batch sent", FROZEN_AT_MOST, || async {
        gw.coord.zk_requests_of("batch") == batches + 1
    })
    .await;
    drop(holder);
    wait_until(
        "the hand-over's delete sent behind the batch",
        FROZEN_AT_MOST,
        || async { gw.coord.zk_requests_of("delete") == deletes + 1 },
    )
    .await;
    assert_eq!(
        gz.peak_batch_drivers(),
        2,
        "the hand-over had a driver of its own"
    );

    zk.resume(0).await.unwrap();
    assert_eq!(
        gone.await.unwrap().unwrap_err(),
        zookeeper_client::Error::NoNode,
        "the refused operation alone fails"
    );
    good.await
        .unwrap()
        .expect("the batch's good create leaves again and succeeds");
    let children = zkc.list_children(&q).await.unwrap();
    assert_eq!(children.len(), 1, "the good create once: {children:?}");
    let t1 = waiter.acquired().await.fencing_token;
    assert!(
        t1 > t0,
        "successive holders' tokens increase: {t0} then {t1}"
    );
    gz.delete(&format!("{q}/{}", children[0]), Urgency::Gather)
        .await
        .unwrap();
    drop(waiter);
    wait_no_members(&zkc, &gw.root, Duration::from_secs(10)).await;
}
