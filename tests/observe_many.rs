//! `Election.ObserveMany` end to end, against a real ZooKeeper: the snapshot then changes,
//! elections appearing later, vacancies and resigns, a ZooKeeper reconnect, the per-stream
//! election limit, the cost per change with 1 and 100 streams (G4), a policy reload, and the
//! `/ui` page built on it: fleet-wide, and costing nothing per viewer.

use std::collections::BTreeMap;
use std::time::Duration;

use tonic::transport::Channel;
use tonic::{Code, Streaming};
use zkgate::proto as pb;
use zkgate::proto::campaign_request::Request as Req;
use zkgate::proto::election_client::ElectionClient;
use zkgate::proto::observe_many_response::Event;
use zkgate_testkit::linkcut::LinkCutter;
use zkgate_testkit::*;

/// One message of a stream: `Some((election, leader))` for a state, `None` for
/// `snapshot_complete`.
type Msg = Option<(String, Option<pb::Leader>)>;

async fn observe_many(
    c: &mut ElectionClient<Channel>,
    prefix: &str,
    names: &[&str],
) -> Result<Streaming<pb::ObserveManyResponse>, tonic::Status> {
    c.observe_many(pb::ObserveManyRequest {
        prefix: prefix.into(),
        elections: names.iter().map(|s| s.to_string()).collect(),
    })
    .await
    .map(|r| r.into_inner())
}

async fn next(s: &mut Streaming<pb::ObserveManyResponse>) -> Msg {
    next_within(s, STEP).await
}

async fn next_within(s: &mut Streaming<pb::ObserveManyResponse>, within: Duration) -> Msg {
    let m = tokio::time::timeout(within, s.message())
        .await
        .expect("an ObserveMany message in time")
        .expect("stream ok")
        .expect("stream open");
    match m.event.expect("an event") {
        Event::State(st) => Some((st.election, st.leader)),
        Event::SnapshotComplete(_) => None,
    }
}

/// Reads the snapshot: every state up to `snapshot_complete`, by election.
async fn snapshot(
    s: &mut Streaming<pb::ObserveManyResponse>,
) -> BTreeMap<String, Option<pb::Leader>> {
    let mut out = BTreeMap::new();
    while let Some((e, l)) = next(s).await {
        assert!(
            out.insert(e.clone(), l).is_none(),
            "{e} twice in the snapshot"
        );
    }
    out
}

fn who(l: &Option<pb::Leader>) -> Option<&str> {
    l.as_ref().map(|l| l.candidate.as_str())
}

/// Reads states until `election`'s satisfies `done`, checking that its tokens never go down;
/// returns the last state of every election seen meanwhile.
async fn until(
    s: &mut Streaming<pb::ObserveManyResponse>,
    tokens: &mut BTreeMap<String, u64>,
    election: &str,
    done: impl Fn(&Option<pb::Leader>) -> bool,
) -> Option<pb::Leader> {
    loop {
        let (e, l) = next(s)
            .await
            .expect("a state, not a second snapshot_complete");
        if let Some(l) = &l {
            let top = tokens.entry(e.clone()).or_default();
            assert!(l.fencing_token >= *top, "{e}: token went down");
            *top = l.fencing_token;
        }
        if e == election && done(&l) {
            return l;
        }
    }
}

#[tokio::test]
async fn snapshot_then_changes_new_elections_vacancies_and_resigns() {
    let zk = shared_zk();
    let gw = Gateway::start(&zk).await;
    let mut c = gw.client().await;
    let mut a1 = Campaign::join(&mut c, "p.a", "a1", b"v").await;
    let ta1 = a1.elected().await.fencing_token;
    let mut a2 = Campaign::join(&mut c, "p.a", "a2", b"").await;
    let mut other = Campaign::join(&mut c, "q.other", "o", b"").await;
    other.elected().await;

    let mut s = observe_many(&mut c, "p.", &["named"]).await.unwrap();
    let snap = snapshot(&mut s).await;
    assert_eq!(
        snap.iter()
            .map(|(e, l)| (e.as_str(), who(l)))
            .collect::<Vec<_>>(),
        [("named", None), ("p.a", Some("a1"))],
        "one state per election of the prefix and the list, vacant ones included"
    );
    assert_eq!(snap["p.a"].as_ref().unwrap().fencing_token, ta1);
    let mut tokens = BTreeMap::new();

    // An election that appears later.
    let mut n1 = Campaign::join(&mut c, "p.new", "n1", b"").await;
    n1.elected().await;
    let l = until(&mut s, &mut tokens, "p.new", |l| l.is_some()).await;
    assert_eq!(who(&l), Some("n1"));

    // A resign hands p.a to a2, with a larger token.
    a1.send(Req::Resign(pb::ResignCandidacy {})).await;
    a1.expect_end(None).await;
    let ta2 = a2.elected().await.fencing_token;
    let l = until(&mut s, &mut tokens, "p.a", |l| l.is_some()).await;
    assert_eq!(
        (who(&l), l.as_ref().unwrap().fencing_token),
        (Some("a2"), ta2)
    );
    assert!(ta2 > ta1);

    // A vacancy: the only candidate of p.new leaves.
    drop(n1);
    until(&mut s, &mut tokens, "p.new", |l| l.is_none()).await;

    // A listed name that did not exist gets a leader.
    let mut m = Campaign::join(&mut c, "named", "m", b"").await;
    m.elected().await;
    let l = until(&mut s, &mut tokens, "named", |l| l.is_some()).await;
    assert_eq!(who(&l), Some("m"));
    drop((a2, m, other));
}

/// A gateway whose ZooKeeper link is cut while elections change on another gateway: once the
/// link is back, the stream shows the truth (re-listed): the new leader, not the old one, and
/// the election created meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_zookeeper_reconnect_the_stream_is_truthful() {
    let zk = shared_zk();
    let cut = LinkCutter::start(zk.parse().expect("one address"))
        .await
        .unwrap();
    // A session timeout long enough that the cut below is a reconnect, not an expiry.
    let observed = Gateway::start_with(
        &cut.addr().to_string(),
        GatewayOpts {
            session_timeout: Duration::from_secs(8),
            ..Default::default()
        },
    )
    .await;
    let direct = Gateway::start_beside(&zk, &observed).await;
    let mut c = direct.client().await;
    let mut a = Campaign::join(&mut c, "r.x", "a", b"").await;
    let ta = a.elected().await.fencing_token;
    let mut b = Campaign::join(&mut c, "r.x", "b", b"").await;

    let mut oc = observed.client().await;
    let mut s = observe_many(&mut oc, "r.", &[]).await.unwrap();
    let snap = snapshot(&mut s).await;
    assert_eq!(who(&snap["r.x"]), Some("a"));

    cut.blackhole();
    wait_until("the observed gateway notices the cut", STEP, || async {
        !observed.coord.is_connected()
    })
    .await;
    // While it is cut off: a resigns (b leads), and a new election appears.
    a.send(Req::Resign(pb::ResignCandidacy {})).await;
    a.expect_end(None).await;
    let tb = b.elected().await.fencing_token;
    let mut y = Campaign::join(&mut c, "r.y", "y", b"").await;
    y.elected().await;
    // Events queued on the old connection are lost with it: only a re-listing can tell.
    cut.drop_all();
    cut.pass();

    let mut tokens = BTreeMap::from([("r.x".to_owned(), ta)]);
    let mut last = BTreeMap::new();
    loop {
        let (e, l) = next_within(&mut s, Duration::from_secs(10))
            .await
            .expect("a state");
        if let Some(l) = &l {
            let top = tokens.entry(e.clone()).or_default();
            assert!(l.fencing_token >= *top, "{e}: token went down");
            *top = l.fencing_token;
        }
        last.insert(e, who(&l).map(str::to_owned));
        if last.get("r.x") == Some(&Some("b".into())) && last.get("r.y") == Some(&Some("y".into()))
        {
            break;
        }
    }
    assert_eq!(tokens["r.x"], tb);
    drop((b, y));
}

#[tokio::test]
async fn more_elections_than_the_limit_is_resource_exhausted() {
    let zk = shared_zk();
    let gw = Gateway::start_with(
        &zk,
        GatewayOpts {
            limits: Some(zkgate::api::limits::StreamLimits {
                observe_many_elections: 2,
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await;
    let mut c = gw.client().await;
    let mut l1 = Campaign::join(&mut c, "l.1", "x", b"").await;
    l1.elected().await;
    // Two elections (one existing, one named): within the limit.
    let mut s = observe_many(&mut c, "l.", &["l.named"]).await.unwrap();
    assert_eq!(snapshot(&mut s).await.len(), 2);
    // Three at once: refused, naming the limit.
    let e = observe_many(&mut c, "l.", &["l.named", "l.other"])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert!(
        e.message().contains("--max-observe-many-elections = 2"),
        "{}",
        e.message()
    );
    // A third election appearing later ends the open stream the same way: it could not stay
    // truthful about every election of its prefix.
    let mut l2 = Campaign::join(&mut c, "l.2", "x", b"").await;
    l2.elected().await;
    let end = skipping_at_most("the end of the stream", async {
        loop {
            match tokio::time::timeout(STEP, s.message())
                .await
                .expect("in time")
            {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("ended OK"),
                Err(status) => break status,
            }
        }
    })
    .await;
    assert_eq!(end.code(), Code::ResourceExhausted, "{end:?}");
    drop((l1, l2));
}

/// The gateway's ZooKeeper requests for one leader change and for one new election, with 1 and
/// with 100 ObserveMany streams on the prefix: the same (G4). Prints the figures (docs).
#[tokio::test]
async fn cost_per_change_does_not_grow_with_streams() {
    let zk = shared_zk();
    let mut costs = Vec::new();
    for streams in [1usize, 100] {
        let gw = Gateway::start(&zk).await;
        let mut c = gw.client().await;
        let mut a = Campaign::join(&mut c, "c.e", "a", b"").await;
        a.elected().await;
        let mut b = Campaign::join(&mut c, "c.e", "b", b"").await;
        let mut ss = Vec::new();
        for _ in 0..streams {
            let mut s = observe_many(&mut c, "c.", &[]).await.unwrap();
            assert_eq!(snapshot(&mut s).await.len(), 1);
            ss.push(s);
        }
        // A leader change: a resigns, b is elected; every stream sees b.
        let before = gw.coord.zk_requests();
        a.send(Req::Resign(pb::ResignCandidacy {})).await;
        a.expect_end(None).await;
        b.elected().await;
        for s in ss.iter_mut() {
            let mut t = BTreeMap::new();
            until(s, &mut t, "c.e", |l| who(l) == Some("b")).await;
        }
        let change = gw.coord.zk_requests() - before;
        // A new election: its first candidate's create, the folder's listing, the new queue's
        // watch and listing, its confirmation; every stream sees it.
        let before = gw.coord.zk_requests();
        let mut n = Campaign::join(&mut c, "c.new", "n", b"").await;
        n.elected().await;
        for s in ss.iter_mut() {
            let mut t = BTreeMap::new();
            until(s, &mut t, "c.new", |l| l.is_some()).await;
        }
        let appear = gw.coord.zk_requests() - before;
        eprintln!(
            "ObserveMany cost with {streams} stream(s): {change} ZooKeeper requests per leader \
             change, {appear} per new election"
        );
        costs.push((change, appear));
        drop((b, n, ss));
    }
    let (one, hundred) = (costs[0], costs[1]);
    assert!(one.0 <= 4 && one.1 <= 8, "cost with one stream: {one:?}");
    assert!(
        hundred.0 <= one.0 + 1 && hundred.1 <= one.1 + 1,
        "100 streams cost {hundred:?}, 1 stream {one:?}"
    );
}

/// SPEC §7: under a policy ObserveMany shows only the names the caller may observe — a prefix
/// filters, a listed name it may not observe is `PERMISSION_DENIED` — and so does the `/ui`
/// state for the identity of its `authorization` header.
#[tokio::test]
async fn under_a_policy_only_names_the_caller_may_observe_are_shown() {
    let sha = |t: &str| -> String {
        ring::digest::digest(&ring::digest::SHA256, t.as_bytes())
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            r#"
[[token]]
identity = "billing"
sha256 = "{}"
[[allow]]
identity = "billing"
names = ["billing.*"]
verbs = ["observe"]
[[allow]]
identity = "anonymous"
names = ["*"]
verbs = ["campaign"]
[[allow]]
identity = "anonymous"
names = ["public"]
verbs = ["observe"]
"#,
            sha("billing-token")
        ),
    )
    .unwrap();
    let zk = shared_zk();
    let auth = zkgate::auth::Auth::from_file(&policy).unwrap();
    let gw = Gateway::start_with(
        &zk,
        GatewayOpts {
            configure: Some(Box::new(move |cfg| cfg.auth = auth)),
            ..Default::default()
        },
    )
    .await;
    let mut c = gw.client().await;
    let mut held = Vec::new();
    for name in ["billing.a", "search.b", "public"] {
        let mut m = Campaign::join(&mut c, name, "x", b"").await;
        m.elected().await;
        held.push(m);
    }
    let as_billing = |msg: pb::ObserveManyRequest| {
        let mut r = tonic::Request::new(msg);
        r.metadata_mut()
            .insert("authorization", "Bearer billing-token".parse().unwrap());
        r
    };
    let everything = || pb::ObserveManyRequest {
        prefix: String::new(),
        elections: Vec::new(),
    };

    let mut s = c
        .observe_many(as_billing(everything()))
        .await
        .unwrap()
        .into_inner();
    let names: Vec<String> = snapshot(&mut s).await.into_keys().collect();
    assert_eq!(names, ["billing.a"], "billing sees its own names only");
    let mut s = observe_many(&mut c, "", &[]).await.unwrap();
    let names: Vec<String> = snapshot(&mut s).await.into_keys().collect();
    assert_eq!(
        names,
        ["public"],
        "anonymous sees what anonymous may observe"
    );
    let e = c
        .observe_many(as_billing(pb::ObserveManyRequest {
            prefix: "billing.".into(),
            elections: vec!["search.b".into()],
        }))
        .await
        .expect_err("a listed name the caller may not observe is refused");
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("search.b"), "{e:?}");

    // The page's state, as an authenticating proxy in front of it would ask for it.
    let get = |auth: Option<&'static str>| {
        let addr = gw.http;
        async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
            let header = auth.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
            conn.write_all(
                format!("GET /ui/state HTTP/1.1\r\nhost: x\r\n{header}connection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .unwrap();
            let mut body = String::new();
            conn.read_to_string(&mut body).await.unwrap();
            body
        }
    };
    let page = get(Some("billing-token")).await;
    assert!(page.contains("billing.a"), "{page}");
    assert!(
        !page.contains("search.b") && !page.contains("\"public\""),
        "{page}"
    );
    let page = get(None).await;
    assert!(page.contains("\"public\""), "{page}");
    assert!(
        !page.contains("billing.a") && !page.contains("search.b"),
        "{page}"
    );
    let page = get(Some("guessed")).await;
    assert!(
        !page.contains("billing.a") && !page.contains("search.b") && !page.contains("\"public\""),
        "{page}"
    );
    drop(held);
}

/// A policy reload re-judges the names open streams follow, without any change of the
/// elections folder: a prefix's name the caller may no longer observe leaves the stream with a
/// vacancy (and comes back, with its leader, when a later reload allows it again); a name the
/// caller listed ends the stream `PERMISSION_DENIED` naming it.
#[tokio::test]
async fn a_policy_reload_rejudges_the_names_a_stream_follows() {
    let policy = |billing_names: &str| {
        format!(
            r#"
[[token]]
identity = "billing"
sha256 = "{}"
[[allow]]
identity = "billing"
names = [{billing_names}]
verbs = ["observe"]
[[allow]]
identity = "anonymous"
names = ["*"]
verbs = ["campaign"]
"#,
            ring::digest::digest(&ring::digest::SHA256, b"billing-token")
                .as_ref()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.toml");
    std::fs::write(&file, policy(r#""billing.*", "shared""#)).unwrap();
    let auth = zkgate::auth::Auth::from_file(&file).unwrap();
    let zk = shared_zk();
    let gw = Gateway::start_with(
        &zk,
        GatewayOpts {
            configure: Some(Box::new({
                let auth = auth.clone();
                move |cfg| cfg.auth = auth
            })),
            ..Default::default()
        },
    )
    .await;
    let mut c = gw.client().await;
    let mut held = Vec::new();
    for name in ["billing.a", "billing.b", "shared"] {
        let mut m = Campaign::join(&mut c, name, "x", b"").await;
        m.elected().await;
        held.push(m);
    }
    let as_billing = |prefix: &str, names: &[&str]| {
        let mut r = tonic::Request::new(pb::ObserveManyRequest {
            prefix: prefix.into(),
            elections: names.iter().map(|s| s.to_string()).collect(),
        });
        r.metadata_mut()
            .insert("authorization", "Bearer billing-token".parse().unwrap());
        r
    };
    let mut by_prefix = c
        .observe_many(as_billing("billing.", &[]))
        .await
        .unwrap()
        .into_inner();
    let snap = snapshot(&mut by_prefix).await;
    assert_eq!(
        snap.keys().map(String::as_str).collect::<Vec<_>>(),
        ["billing.a", "billing.b"]
    );
    let mut listed = c
        .observe_many(as_billing("", &["shared"]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(snapshot(&mut listed).await.len(), 1);

    // The reload withdraws billing.b and shared.
    std::fs::write(&file, policy(r#""billing.a""#)).unwrap();
    auth.reload().unwrap();
    assert_eq!(
        next(&mut by_prefix).await,
        Some(("billing.b".to_owned(), None)),
        "a prefix's withdrawn name leaves with a vacancy"
    );
    let end = tokio::time::timeout(STEP, listed.message())
        .await
        .expect("the listed stream ends in time")
        .expect_err("a withdrawn listed name ends the stream");
    assert_eq!(end.code(), Code::PermissionDenied, "{end:?}");
    assert!(end.message().contains("shared"), "{end:?}");

    // The prefix's stream goes on: billing.b's changes no longer come, billing.a's do.
    let mut b2 = Campaign::join(&mut c, "billing.b", "b2", b"").await;
    drop(held.remove(1));
    b2.elected().await;
    let mut a2 = Campaign::join(&mut c, "billing.a", "a2", b"").await;
    drop(held.remove(0));
    a2.elected().await;
    loop {
        let (e, l) = next(&mut by_prefix).await.expect("a state");
        assert_eq!(e, "billing.a", "only billing.a is followed now");
        if who(&l) == Some("a2") {
            break;
        }
    }
    // A reload that allows billing.b again: it is followed again, with its leader.
    std::fs::write(&file, policy(r#""billing.*""#)).unwrap();
    auth.reload().unwrap();
    let (e, l) = next(&mut by_prefix).await.expect("a state");
    assert_eq!((e.as_str(), who(&l)), ("billing.b", Some("b2")));
    drop((held, a2, b2));
}

/// The `/ui` page's event stream, read as a browser would: one JSON state per `data:` line.
struct PageViewer {
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::net::TcpStream>>,
}

impl PageViewer {
    async fn open(http: std::net::SocketAddr, prefix: &str) -> PageViewer {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let mut conn = tokio::net::TcpStream::connect(http).await.unwrap();
        conn.write_all(
            format!("GET /ui/events?prefix={prefix} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        PageViewer {
            lines: tokio::io::BufReader::new(conn).lines(),
        }
    }

    /// Reads states until one satisfies `done`.
    async fn until(&mut self, what: &str, done: impl Fn(&serde_json::Value) -> bool) {
        tokio::time::timeout(STEP, async {
            loop {
                let line = self.lines.next_line().await.unwrap().expect("stream open");
                // Chunked framing lines and keep-alives are not states.
                let Some(data) = line.strip_prefix("data: ") else {
                    continue;
                };
                if done(&serde_json::from_str(data).unwrap()) {
                    return;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the page never showed {what}"));
    }
}

/// `/ui/state` on `http` for `prefix`, as JSON.
async fn ui_state(http: std::net::SocketAddr, prefix: &str) -> serde_json::Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(http).await.unwrap();
    conn.write_all(
        format!("GET /ui/state?prefix={prefix} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).await.unwrap();
    let body = reply.split_once("\r\n\r\n").expect("a body").1;
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// The row of `name` in the state's `table` ("elections" or "locks").
fn row<'a>(state: &'a serde_json::Value, table: &str, name: &str) -> Option<&'a serde_json::Value> {
    state[table]
        .as_array()
        .expect("a table")
        .iter()
        .find(|r| r["name"] == name)
}

/// The page is fleet-wide: the waiters and lock holders whose streams are on gateway B show on
/// gateway A's page (and its `/ui/state`), and go when they leave.
#[tokio::test]
async fn the_page_shows_waiters_and_lock_holders_of_every_gateway() {
    let zk = shared_zk();
    let (a, b) = two_gateways_on_one_root(&zk).await;
    let mut viewer = PageViewer::open(a.http, "f.").await;
    let (mut c, mut l) = (b.client().await, b.lock_client().await);
    let mut leader = Campaign::join(&mut c, "f.e", "lead", b"").await;
    leader.elected().await;
    let waiter = Campaign::join(&mut c, "f.e", "wait", b"").await;
    let mut holder = Acquisition::open(&mut l, acquire_msg("f.lock", "hold")).await;
    let token = holder.acquired().await.fencing_token.to_string();
    let lock_waiter = Acquisition::open(&mut l, acquire_msg("f.lock", "queued")).await;

    let shows_all = |s: &serde_json::Value| {
        let e = row(s, "elections", "f.e");
        let k = row(s, "locks", "f.lock");
        e.is_some_and(|e| {
            e["leader"]["candidate"] == "lead" && e["waiting"] == 1 && e["waiting_since"].is_f64()
        }) && k.is_some_and(|k| {
            k["holders"][0]["owner"] == "hold"
                && k["holders"][0]["fencing_token"] == token.as_str()
                && k["waiting"] == 1
                && k["waiting_since"].is_f64()
        })
    };
    viewer.until("B's waiters and lock holder", shows_all).await;
    let state = ui_state(a.http, "f.").await;
    assert!(shows_all(&state), "{state}");
    assert!(
        !state.to_string().contains("lease"),
        "never a lease: {state}"
    );

    // They leave: the hand-over shows, with the recent change.
    drop(lock_waiter);
    holder.release().await;
    drop(waiter);
    viewer
        .until("the lock free and no waiter", |s| {
            row(s, "locks", "f.lock").is_none()
                && row(s, "elections", "f.e").is_some_and(|e| e["waiting"] == 0)
                && s["recent"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| c["name"] == "f.lock" && c["what"] == "hold released")
        })
        .await;
    drop(leader);
}

/// The gateway's ZooKeeper requests for a lock hand-over and a new waiter with 1 and with 50
/// page viewers of the prefix: the same (one watch per prefix per gateway, shared). Prints the
/// figures, and those without a page open (docs).
#[tokio::test]
async fn the_page_costs_nothing_per_viewer() {
    let zk = shared_zk();
    let mut costs = Vec::new();
    for viewers in [0usize, 1, 50] {
        let gw = Gateway::start(&zk).await;
        let mut l = gw.lock_client().await;
        let mut first = Acquisition::open(&mut l, acquire_msg("v.lock", "first")).await;
        first.acquired().await;
        let mut second = Acquisition::open(&mut l, acquire_msg("v.lock", "second")).await;
        let mut pages = Vec::new();
        for _ in 0..viewers {
            let mut p = PageViewer::open(gw.http, "v.").await;
            p.until("first holds, one waits", |s| {
                row(s, "locks", "v.lock")
                    .is_some_and(|k| k["holders"][0]["owner"] == "first" && k["waiting"] == 1)
            })
            .await;
            pages.push(p);
        }
        // A hand-over: first releases, second acquires; every page shows it.
        let before = gw.coord.zk_requests();
        first.release().await;
        second.acquired().await;
        for p in pages.iter_mut() {
            p.until("second holds", |s| {
                row(s, "locks", "v.lock")
                    .is_some_and(|k| k["holders"][0]["owner"] == "second" && k["waiting"] == 0)
            })
            .await;
        }
        let hand_over = gw.coord.zk_requests() - before;
        // A new waiter; every page shows it.
        let before = gw.coord.zk_requests();
        let third = Acquisition::open(&mut l, acquire_msg("v.lock", "third")).await;
        for p in pages.iter_mut() {
            p.until("one waiter", |s| {
                row(s, "locks", "v.lock").is_some_and(|k| k["waiting"] == 1)
            })
            .await;
        }
        let waiter = gw.coord.zk_requests() - before;
        eprintln!(
            "/ui cost with {viewers} viewer(s): {hand_over} ZooKeeper requests per lock \
             hand-over, {waiter} per new waiter"
        );
        costs.push((hand_over, waiter));
        drop((second, third, pages));
    }
    let (one, many) = (costs[1], costs[2]);
    assert!(one.0 <= 6 && one.1 <= 4, "cost with one viewer: {one:?}");
    assert!(
        many.0 <= one.0 + 1 && many.1 <= one.1 + 1,
        "50 viewers cost {many:?}, 1 viewer {one:?}"
    );
}

/// A page on a gateway whose ZooKeeper link is cut while a lock changes hands on another
/// gateway: once the link is back, the page shows the truth (its watch placed again and the
/// queues read again), not the holder it saw before the cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_zookeeper_reconnect_the_page_is_truthful() {
    let zk = shared_zk();
    let cut = LinkCutter::start(zk.parse().expect("one address"))
        .await
        .unwrap();
    let observed = Gateway::start_with(
        &cut.addr().to_string(),
        GatewayOpts {
            session_timeout: Duration::from_secs(8),
            ..Default::default()
        },
    )
    .await;
    let direct = Gateway::start_beside(&zk, &observed).await;
    let mut l = direct.lock_client().await;
    let mut x = Acquisition::open(&mut l, acquire_msg("r.lock", "x")).await;
    x.acquired().await;
    let mut y = Acquisition::open(&mut l, acquire_msg("r.lock", "y")).await;
    let mut page = PageViewer::open(observed.http, "r.").await;
    page.until("x holds", |s| {
        row(s, "locks", "r.lock").is_some_and(|k| k["holders"][0]["owner"] == "x")
    })
    .await;

    cut.blackhole();
    wait_until("the observed gateway notices the cut", STEP, || async {
        !observed.coord.is_connected()
    })
    .await;
    x.release().await;
    y.acquired().await;
    let z = Acquisition::open(&mut l, acquire_msg("r.lock", "z")).await;
    // Events queued on the old connection are lost with it: only reading again can tell.
    cut.drop_all();
    cut.pass();
    page.until("y holds and z waits, after the reconnect", |s| {
        row(s, "locks", "r.lock").is_some_and(|k| {
            k["holders"].as_array().unwrap().len() == 1
                && k["holders"][0]["owner"] == "y"
                && k["waiting"] == 1
        }) && s["note"].is_null()
    })
    .await;
    drop((y, z));
}
