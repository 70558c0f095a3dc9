//! G5: a create whose reply was lost to a connection loss is found again by its protected id
//! and adopted: no orphan znode, no ghost candidate ahead of everyone. Every read on that path
//! that fails on the link is tried again, and a release lost to the link is retried until the
//! znode is gone, however long the link stays bad while the session lives (failpoints in
//! `coord::zk::Zk` make each of these happen on demand).

use std::time::Duration;

use zkgate_testkit::*;

#[tokio::test]
async fn a_lost_create_reply_is_adopted_not_orphaned() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut c = gw.client().await;
    let zkc = zk_client(&zk).await;

    gw.coord.session().unwrap().zk.lose_next_create_reply();
    let mut a = Campaign::join(&mut c, "orphan", "a", b"").await;
    assert_eq!(a.position, 0);
    a.elected().await;
    let members = member_znodes(&zkc, &gw.root).await;
    assert_eq!(
        members.len(),
        1,
        "exactly one znode, the adopted one: {members:?}"
    );

    // A waiter behind the adopted leader gets elected when it goes: the adopted znode is owned
    // by the stream and released with it.
    gw.coord.session().unwrap().zk.lose_next_create_reply();
    let mut b = Campaign::join(&mut c, "orphan", "b", b"").await;
    assert_eq!(b.position, 1);
    assert_eq!(member_znodes(&zkc, &gw.root).await.len(), 2);
    drop(a);
    assert_eq!(b.elected().await.candidate, "b");
    drop(b);
    wait_no_members(&zkc, &gw.root, Duration::from_secs(5)).await;
}

/// After a lost create reply, the `sync`, the listing and the ownership read fail on the link
/// too: the gateway looks again instead of giving up (which left the created znode an orphan) or
/// creating a second znode with the same protected id.
#[tokio::test]
async fn failed_reads_after_a_lost_create_reply_look_again() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut c = gw.client().await;
    let zkc = zk_client(&zk).await;
    // The queue's actor is up before the failpoints are armed, so they hit the search.
    let mut first = Campaign::join(&mut c, "lost-reads", "first", b"").await;
    first.elected().await;

    let zkg = gw.coord.session().unwrap().zk.clone();
    zkg.lose_next_create_reply();
    zkg.fail_next_unsent("sync", 2);
    zkg.fail_next_unsent("get_children", 2);
    zkg.fail_next_unsent("get_data", 2);
    let mut a = Campaign::join(&mut c, "lost-reads", "a", b"").await;
    assert_eq!(a.position, 1);
    let members = member_znodes(&zkc, &gw.root).await;
    assert_eq!(members.len(), 2, "first's and a's, no orphan: {members:?}");
    drop(first);
    assert_eq!(a.elected().await.candidate, "a");
    drop(a);
    wait_no_members(&zkc, &gw.root, Duration::from_secs(5)).await;
}

/// The search for a maybe-applied create starts with a `sync` of the queue, so a session that
/// reconnected to a lagging follower cannot miss its own create and make a second znode; a
/// `sync` lost to the link is tried again like every other read of the search.
#[tokio::test]
async fn the_search_after_a_lost_create_reply_syncs_first() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut c = gw.client().await;
    let zkc = zk_client(&zk).await;
    let mut first = Campaign::join(&mut c, "lost-sync", "first", b"").await;
    first.elected().await;

    let zkg = gw.coord.session().unwrap().zk.clone();
    zkg.lose_next_create_reply();
    zkg.fail_next_unsent("sync", 2);
    let a = Campaign::join(&mut c, "lost-sync", "a", b"").await;
    assert_eq!(a.position, 1);
    assert_eq!(
        zkg.unsent_failures_left("sync"),
        0,
        "the search synced (and synced again after each failed sync)"
    );
    let members = member_znodes(&zkc, &gw.root).await;
    assert_eq!(members.len(), 2, "first's and a's, no orphan: {members:?}");
    drop((first, a));
    wait_no_members(&zkc, &gw.root, Duration::from_secs(5)).await;
}

/// A lost create attempt that ZooKeeper applies *after* the gateway's search for it found
/// nothing and it created again: two znodes of one protected id, one adopted by the stream, the
/// other nobody's (a soak saw ZooKeeper do it, session 25). The second is deleted as soon as the
/// queue's watch shows it; before, it stayed until the session ended, and once the members
/// ahead of it left, it headed the election with nobody elected (session 24's soak: 104 s).
#[tokio::test]
async fn a_create_applied_after_its_search_found_nothing_is_deleted() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut c = gw.client().await;
    let zkc = zk_client(&zk).await;
    let mut first = Campaign::join(&mut c, "late-create", "first", b"").await;
    first.elected().await;

    let zkg = gw.coord.session().unwrap().zk.clone();
    zkg.delay_next_create(Duration::from_millis(300));
    let mut a = Campaign::join(&mut c, "late-create", "a", b"").await;
    assert_eq!(
        a.position, 1,
        "created again after the search found nothing"
    );
    wait_until("the lost attempt is applied", STEP, || {
        std::future::ready(zkg.delayed_create_applied())
    })
    .await;
    wait_until(
        "the second znode of a's create is deleted",
        STEP,
        || async { member_znodes(&zkc, &gw.root).await.len() == 2 },
    )
    .await;
    // b queues behind a, and nothing stands between them.
    let mut b = Campaign::join(&mut c, "late-create", "b", b"").await;
    assert_eq!(b.position, 2);
    drop(first);
    assert_eq!(a.elected().await.candidate, "a");
    drop(a);
    assert_eq!(b.elected().await.candidate, "b");
    drop(b);
    wait_no_members(&zkc, &gw.root, Duration::from_secs(5)).await;
}

/// A join dropped while it searches for its create whose reply was lost (the client went away
/// mid-join): its znode, which ZooKeeper did create but whose name the join does not know yet,
/// is deleted at once by the queue, which the join's cleanup asked to delete any znode of the
/// join's protected id (`Cleanup::drop`, `queue::state::Strays`). Every `sync` fails meanwhile,
/// and a search for a lost create starts with one (`member::find_protected`), so neither the
/// join's search nor its cleanup's can have found the znode: only the drop's rule removes it.
/// Without that rule the znode stays until the cleanup's search gets through, which needs the
/// link to answer again; while it cannot, the znode heads the election once the members ahead
/// of it leave, with nobody elected.
#[tokio::test]
async fn a_join_dropped_while_it_searches_for_its_lost_create_leaves_nothing() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut c = gw.client().await;
    let zkc = zk_client(&zk).await;
    let mut first = Campaign::join(&mut c, "dropped-join", "first", b"").await;
    first.elected().await;

    let zkg = gw.coord.session().unwrap().zk.clone();
    const ARMED: u32 = 1_000_000;
    zkg.lose_next_create_reply();
    zkg.fail_next_unsent("sync", ARMED);
    // The call is answered only once the join is done, which it cannot be while every `sync`
    // fails: the join runs in a task that the test aborts (the client going away).
    let mut c2 = c.clone();
    let join = tokio::spawn(async move {
        CampaignStream::open_with(&mut c2, [join_msg("dropped-join", "a", b"")]).await
    });
    wait_until("a's create applied, its search under way", STEP, || async {
        member_znodes(&zkc, &gw.root).await.len() == 2 && zkg.unsent_failures_left("sync") < ARMED
    })
    .await;
    join.abort();
    assert!(
        join.await.is_err_and(|e| e.is_cancelled()),
        "no answer came"
    );
    wait_until("a's znode deleted", STEP, || async {
        member_znodes(&zkc, &gw.root).await.len() == 1
    })
    .await;
    assert!(
        zkg.unsent_failures_left("sync") > 0,
        "no search got past its sync meanwhile"
    );
    zkg.clear_unsent_failures("sync");
    first.quiet_for(Duration::from_millis(200)).await;
    drop(first);
    wait_no_members(&zkc, &gw.root, Duration::from_secs(5)).await;
    gw.stop().await;
}

/// A resign (in-stream) or a stream's end whose deletes keep failing on the link for longer
/// than the session timeout, while the session itself lives on: the delete is retried until
/// the znode is gone, so the waiter behind is elected and nothing is left. (Giving up after
/// the session timeout left the znode at the head of the queue until the session ended.)
#[tokio::test]
async fn releases_lost_to_the_link_are_retried_until_gone() {
    let zk = shared_zk();
    let t = Duration::from_secs(2);
    let gw = Gateway::start_with(
        &zk,
        GatewayOpts {
            session_timeout: t,
            ..Default::default()
        },
    )
    .await;
    let mut c = gw.client().await;
    let zkc = zk_client(&zk).await;
    let zkg = gw.coord.session().unwrap().zk.clone();
    // Retries are 50 ms apart: this many failures keep the delete failing for longer than T.
    let failures = (t.as_millis() / 50 * 3 / 2) as u32;

    for how in ["resign", "cancel"] {
        let e = format!("lost-release-{how}");
        let mut a = Campaign::join(&mut c, &e, "a", b"").await;
        a.elected().await;
        let mut b = Campaign::join(&mut c, &e, "b", b"").await;
        zkg.fail_next_unsent("delete", failures);
        let asked = std::time::Instant::now();
        if how == "resign" {
            a.send(zkgate::proto::campaign_request::Request::Resign(
                zkgate::proto::ResignCandidacy {},
            ))
            .await;
            a.expect_end(None).await;
        } else {
            drop(a);
        }
        let leader = tokio::time::timeout(t * 4, b.elected())
            .await
            .unwrap_or_else(|_| panic!("{how}: b never elected: a's znode was left behind"));
        assert_eq!(leader.candidate, "b");
        assert!(
            asked.elapsed() > t,
            "{how}: the failpoint kept the delete failing past T, yet b was elected after {:?}",
            asked.elapsed()
        );
        drop(b);
        // b's own delete must not share the next round's failures.
        wait_no_members(&zkc, &gw.root, Duration::from_secs(5)).await;
    }
}
