//! G5: a create whose reply was lost to a connection loss is found again by its protected id
//! and adopted: no orphan znode, no ghost candidate ahead of everyone.

mod common;

use std::time::Duration;

use common::*;

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
