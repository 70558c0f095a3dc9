//! Tenancy on real parts (README "Security"; G9, G10): leases nobody can forge from what
//! ZooKeeper shows, rotated lease keys, a policy serving tenants over mTLS and bearer tokens
//! (allowed, denied, unauthenticated, by-lease calls across tenants, a reload that withdraws a
//! holder's right and one that does not parse), per-identity limits, and — through the real
//! binary — SIGHUP and the audit file.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity, ServerTlsConfig};
use tonic::{Code, Request, Status, Streaming};
use zkgate::auth::{Auth, LeaseKeys};
use zkgate::coord::CoordConfig;
use zkgate::proto as pb;
use zkgate::proto::campaign_response::Event;
use zkgate::proto::election_client::ElectionClient;
use zkgate::proto::lock_client::LockClient;
use zkgate::server::ServeConfig;
use zkgate_testkit::procgw::{GatewayProc, GatewaySpec};
use zkgate_testkit::*;

const ANSWER: Duration = Duration::from_secs(10);

fn base(zk: &str) -> ServeConfig {
    let mut cc = CoordConfig::new(zk);
    cc.root = unique_root();
    cc.session_timeout = Duration::from_secs(4);
    ServeConfig::new(cc)
}

fn sha256_hex(token: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Sends `authorization: Bearer <token>` when it has one.
#[derive(Clone)]
struct Bearer(Option<&'static str>);

impl Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(t) = self.0 {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        Ok(request)
    }
}

type Stub = ElectionClient<InterceptedService<Channel, Bearer>>;

fn stub(ch: &Channel, token: Option<&'static str>) -> Stub {
    ElectionClient::with_interceptor(ch.clone(), Bearer(token))
}

/// A Campaign stream past its `queued`.
struct Held {
    tx: Option<mpsc::Sender<pb::CampaignRequest>>,
    rx: Streaming<pb::CampaignResponse>,
    lease: String,
}

async fn campaign(c: &mut Stub, election: &str, who: &str) -> Result<Held, Status> {
    campaign_with(c, election, who, b"").await
}

async fn campaign_with(
    c: &mut Stub,
    election: &str,
    who: &str,
    value: &[u8],
) -> Result<Held, Status> {
    let (tx, rx) = mpsc::channel(8);
    tx.send(join_msg(election, who, value)).await.unwrap();
    let mut s = c.campaign(ReceiverStream::new(rx)).await?.into_inner();
    match tokio::time::timeout(ANSWER, s.message())
        .await
        .expect("an answer in time")?
    {
        Some(pb::CampaignResponse {
            event: Some(Event::Queued(q)),
        }) => Ok(Held {
            tx: Some(tx),
            rx: s,
            lease: q.lease,
        }),
        other => panic!("expected queued, got {other:?}"),
    }
}

impl Held {
    /// The next event that is not a heartbeat; `Err` is the stream's end status.
    async fn next(&mut self) -> Result<Option<Event>, Status> {
        skipping_at_most("the next event", async {
            loop {
                let m = tokio::time::timeout(ANSWER, self.rx.message())
                    .await
                    .expect("an event in time")?;
                match m.and_then(|m| m.event) {
                    Some(Event::Heartbeat(_)) => continue,
                    other => return Ok(other),
                }
            }
        })
        .await
    }

    async fn elected(&mut self) -> pb::Leader {
        match self.next().await {
            Ok(Some(Event::Elected(e))) => e.leader.unwrap(),
            other => panic!("expected elected, got {other:?}"),
        }
    }
}

async fn leader_of(c: &mut Stub, election: &str) -> Result<pb::Leader, Status> {
    c.leader(pb::LeaderRequest {
        election: election.into(),
    })
    .await
    .map(|r| r.into_inner().leader.unwrap())
}

fn assert_denied(e: &Status, identity: &str, verb: &str, name: &str) {
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    for part in [identity, verb, name] {
        assert!(e.message().contains(part), "{part} in {e:?}");
    }
}

/// Issue 20's forgery: a plain ZooKeeper client lists the queue, builds the old `zkg1.` lease
/// (and a `zkg2.` one with a made-up tag) and calls Resign. Both are `NOT_FOUND`; the leader
/// stays and hears nothing but heartbeats; its real lease still works.
#[tokio::test]
async fn a_lease_forged_from_a_zookeeper_listing_is_not_found_and_the_leader_stays() {
    let zk = shared_zk();
    let cfg = base(&zk);
    let root = cfg.coord.root.clone();
    let (addr, _coord) = serve(cfg).await;
    let mut c = ElectionClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut a = Campaign::join(&mut c, "forge", "a", b"").await;
    a.elected().await;

    let stranger = zk_client(&zk).await;
    let members = stranger
        .list_children(&format!("{root}/elections/forge"))
        .await
        .unwrap();
    assert_eq!(members.len(), 1);
    let hex: String = format!("e/forge/{}", members[0])
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect();
    for forged in [
        format!("zkg1.{hex}"),
        format!("zkg2.{hex}.{}", "0".repeat(64)),
    ] {
        let e = c
            .resign(pb::ResignRequest {
                lease: forged.clone(),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{forged}: {e:?}");
    }
    let leader = c
        .leader(pb::LeaderRequest {
            election: "forge".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .leader
        .unwrap();
    assert_eq!(leader.candidate, "a");
    a.quiet_for(Duration::from_millis(300)).await;
    c.resign(pb::ResignRequest {
        lease: a.lease.clone(),
    })
    .await
    .unwrap();
    a.expect_end(None).await;
}

/// Rotation: a lease signed under a key a gateway no longer holds is `NOT_FOUND` there (and
/// the leader stays); a gateway whose file has that key second honours it.
#[tokio::test]
async fn leases_verify_under_any_key_of_the_file_and_not_under_a_rotated_out_one() {
    let zk = shared_zk();
    let dir = tempfile::tempdir().unwrap();
    let (k1, k2) = ("11".repeat(32), "22".repeat(32));
    let file = |name: &str, text: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        LeaseKeys::from_file(&p).unwrap()
    };
    let first = base(&zk);
    let root = first.coord.root.clone();
    let on = |keys: LeaseKeys| {
        let mut cfg = base(&zk);
        cfg.coord.root = root.clone();
        cfg.lease_keys = keys;
        cfg
    };
    let (old, _c1) = serve(on(file("old", format!("{k1}\n")))).await;
    let (rotated_out, _c2) = serve(on(file("new", format!("{k2}\n")))).await;
    let (both, _c3) = serve(on(file("both", format!("# new\n{k2}\n{k1}\n")))).await;
    let connect = |a: std::net::SocketAddr| ElectionClient::connect(format!("http://{a}"));
    let mut c_old = connect(old).await.unwrap();
    let mut a = Campaign::join(&mut c_old, "rotate", "a", b"").await;
    a.elected().await;

    let e = connect(rotated_out)
        .await
        .unwrap()
        .resign(pb::ResignRequest {
            lease: a.lease.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    a.quiet_for(Duration::from_millis(200)).await;
    connect(both)
        .await
        .unwrap()
        .resign(pb::ResignRequest {
            lease: a.lease.clone(),
        })
        .await
        .expect("the second key of the file verifies");
    a.expect_end(None).await;
}

const POLICY: &str = r#"
[[token]]
identity = "billing"
sha256 = "BILLING"
[[token]]
identity = "search"
sha256 = "SEARCH"
[[allow]]
identity = "billing"
names = ["billing.*"]
verbs = ["campaign", "lock", "observe"]
[[allow]]
identity = "search"
names = ["search.*"]
verbs = ["campaign", "observe"]
[[allow]]
identity = "spiffe://test/ops"
names = ["*"]
verbs = ["campaign", "lock", "observe"]
[[allow]]
identity = "cn-only"
names = ["cn.*"]
verbs = ["observe"]
[[allow]]
identity = "anonymous"
names = ["public"]
verbs = ["observe"]
"#;

fn policy_text(without_billing_campaign: bool) -> String {
    let mut p = POLICY
        .replace("BILLING", &sha256_hex("billing-token"))
        .replace("SEARCH", &sha256_hex("search-token"));
    if without_billing_campaign {
        p = p.replacen(
            "names = [\"billing.*\"]\nverbs = [\"campaign\", \"lock\", \"observe\"]",
            "names = [\"billing.*\"]\nverbs = [\"observe\"]",
            1,
        );
    }
    p
}

async fn tls_channel(dir: &Path, port: u16, cert: Option<&str>) -> Channel {
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read("ca.pem")))
        .domain_name("localhost");
    if let Some(who) = cert {
        tls = tls.identity(Identity::from_pem(
            read(&format!("{who}.pem")),
            read(&format!("{who}.key")),
        ));
    }
    Channel::from_shared(format!("https://localhost:{port}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// One gateway with a policy, serving tenants by bearer token, by client certificate (URI SAN,
/// and CN when there is no SAN) and anonymously over TLS: each may do what the policy allows
/// and nothing else; by-lease calls need the verb on the lease's name; health needs no
/// identity; a reload that withdraws a leader's right revokes it (told first), and a file
/// that does not parse keeps the policy.
#[tokio::test]
async fn a_policy_serves_tenants_by_token_and_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    pki::make_pki(d);
    pki::make_client_cert(
        d,
        "ops",
        "ops-cn",
        Some("URI:spiffe://test/ops,DNS:ops.test"),
    );
    pki::make_client_cert(d, "cnonly", "cn-only", None);
    let policy = d.join("policy.toml");
    std::fs::write(&policy, policy_text(false)).unwrap();
    let read = |f: &str| std::fs::read(d.join(f)).unwrap();
    let zk = shared_zk();
    let mut cfg = base(&zk);
    cfg.tls = Some(
        ServerTlsConfig::new()
            .identity(Identity::from_pem(read("server.pem"), read("server.key")))
            .client_ca_root(Certificate::from_pem(read("ca.pem")))
            .client_auth_optional(true),
    );
    let auth = Auth::from_file(&policy).unwrap();
    cfg.auth = auth.clone();
    let (addr, _coord) = serve(cfg).await;
    let plain = tls_channel(d, addr.port(), None).await;
    let mut billing = stub(&plain, Some("billing-token"));
    let mut search = stub(&plain, Some("search-token"));
    let mut anonymous = stub(&plain, None);
    let mut forged_token = stub(&plain, Some("guessed-token"));
    let mut ops = stub(&tls_channel(d, addr.port(), Some("ops")).await, None);
    let mut cn_only = stub(&tls_channel(d, addr.port(), Some("cnonly")).await, None);

    // Allowed, and denied with identity, verb and name.
    let mut b = campaign(&mut billing, "billing.db", "b1").await.unwrap();
    let token = b.elected().await.fencing_token;
    let e = campaign(&mut billing, "search.db", "b1")
        .await
        .err()
        .unwrap();
    assert_denied(&e, "billing", "campaign", "search.db");
    let e = LockClient::with_interceptor(plain.clone(), Bearer(Some("search-token")))
        .holders(pb::HoldersRequest {
            name: "billing.lock".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_denied(&e, "search", "observe", "billing.lock");

    // A token that matches no [[token]]: unauthenticated, whatever the name.
    let e = leader_of(&mut forged_token, "public").await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    // Anonymous: only what "anonymous" is allowed.
    let e = leader_of(&mut anonymous, "public").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "allowed, nobody leads: {e:?}");
    let e = leader_of(&mut anonymous, "billing.db").await.unwrap_err();
    assert_denied(&e, "anonymous", "observe", "billing.db");
    // Certificates: the URI SAN, else (no SAN at all) the CN.
    assert_eq!(
        leader_of(&mut ops, "billing.db")
            .await
            .unwrap()
            .fencing_token,
        token
    );
    let e = leader_of(&mut cn_only, "cn.x").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let e = leader_of(&mut cn_only, "billing.db").await.unwrap_err();
    assert_denied(&e, "cn-only", "observe", "billing.db");

    // By lease across tenants: the lease alone is not enough without the verb on its name.
    let e = search
        .resign(pb::ResignRequest {
            lease: b.lease.clone(),
        })
        .await
        .unwrap_err();
    assert_denied(&e, "search", "campaign", "billing.db");
    assert_eq!(
        leader_of(&mut ops, "billing.db")
            .await
            .unwrap()
            .fencing_token,
        token,
        "still the leader"
    );
    ops.proclaim(pb::ProclaimRequest {
        lease: b.lease.clone(),
        value: b"from ops".to_vec(),
    })
    .await
    .expect("ops may campaign on every name");

    // Health needs no identity, not even an acceptable one.
    let mut health = tonic_health::pb::health_client::HealthClient::with_interceptor(
        plain.clone(),
        Bearer(Some("guessed-token")),
    );
    let h = health
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .unwrap();
    assert_eq!(h.into_inner().status, 1, "SERVING");

    // A file that does not parse: the old policy stays, the reload is counted.
    std::fs::write(&policy, "[[allow]\n").unwrap();
    let e = auth.reload().unwrap_err();
    assert!(e.contains("policy.toml"), "{e}");
    assert!(leader_of(&mut billing, "billing.db").await.is_ok());
    let metrics = zkgate::metrics::install(zkgate::metrics::DEFAULT_NAME_LABEL_CAP).render();
    assert!(
        metrics.contains("zkgate_auth_policy_reloads_total{result=\"error\"}"),
        "{metrics}"
    );

    // A reload that withdraws billing's campaign right: the leader is told first
    // (`suspended`, reason RIGHT_WITHDRAWN), and once it ends its stream the hold is gone with PERMISSION_DENIED.
    std::fs::write(&policy, policy_text(true)).unwrap();
    auth.reload().unwrap();
    // Heartbeats keep coming to a holder that is not revoked: bound the whole wait.
    tokio::time::timeout(ANSWER, async {
        loop {
            match b.next().await {
                Ok(Some(Event::Proclaimed(_))) => continue,
                Ok(Some(Event::Suspended(s))) => {
                    assert_eq!(s.reason(), pb::SuspendReason::RightWithdrawn, "{s:?}");
                    break;
                }
                other => panic!("expected suspended, got {other:?}"),
            }
        }
    })
    .await
    .expect("suspended after the reload withdrew the right");
    drop(b.tx.take());
    let end = b.next().await.unwrap_err();
    assert_denied(&end, "billing", "campaign", "billing.db");
    let e = leader_of(&mut ops, "billing.db").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "the hold is gone: {e:?}");
    let e = campaign(&mut billing, "billing.db", "b1")
        .await
        .err()
        .unwrap();
    assert_denied(&e, "billing", "campaign", "billing.db");
    assert!(leader_of(&mut billing, "billing.db")
        .await
        .is_err_and(|e| e.code() == Code::NotFound));
}

/// G10 with tenants: one identity's flood of holder streams meets its own limit (naming the
/// limit, the identity and the value), and another identity still gets in.
#[tokio::test]
async fn one_tenants_flood_meets_its_own_limit_and_another_tenant_gets_in() {
    let zk = shared_zk();
    let mut cfg = base(&zk);
    cfg.limits.holder_streams_per_identity = 2;
    cfg.auth = Auth::with_policy(
        zkgate::auth::Policy::parse(&format!(
            "[[token]]\nidentity = \"flood\"\nsha256 = \"{}\"\n[[token]]\nidentity = \"quiet\"\nsha256 = \"{}\"\n[[allow]]\nidentity = \"*\"\nnames = [\"*\"]\nverbs = [\"campaign\"]\n",
            sha256_hex("flood-token"),
            sha256_hex("quiet-token")
        ))
        .unwrap(),
    );
    let (addr, _coord) = serve(cfg).await;
    let ch = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut flood = stub(&ch, Some("flood-token"));
    let mut quiet = stub(&ch, Some("quiet-token"));
    let _f1 = campaign(&mut flood, "f1", "x").await.unwrap();
    let _f2 = campaign(&mut flood, "f2", "x").await.unwrap();
    let e = campaign(&mut flood, "f3", "x").await.err().unwrap();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    for part in ["flood", "--max-holder-streams-per-identity = 2"] {
        assert!(e.message().contains(part), "{part} in {e:?}");
    }
    let mut q = campaign(&mut quiet, "q1", "y").await.unwrap();
    q.elected().await;
}

/// Two tenants, one token each, both allowed every verb on every name.
fn two_tenants() -> Arc<Auth> {
    Auth::with_policy(
        zkgate::auth::Policy::parse(&format!(
            "[[token]]\nidentity = \"flood\"\nsha256 = \"{}\"\n[[token]]\nidentity = \"quiet\"\nsha256 = \"{}\"\n[[allow]]\nidentity = \"*\"\nnames = [\"*\"]\nverbs = [\"campaign\", \"lock\", \"observe\"]\n",
            sha256_hex("flood-token"),
            sha256_hex("quiet-token")
        ))
        .unwrap(),
    )
}

fn assert_exhausted(e: &Status, identity: &str, limit: &str) {
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    for part in [identity, limit] {
        assert!(e.message().contains(part), "{part} in {e:?}");
    }
}

/// `zkgate_identity_limit_rejections_total{limit, identity}` on the gateway's /metrics.
async fn identity_rejections(gw: &Gateway, limit: &str, identity: &str) -> u64 {
    let body = zkgate_testkit::scrape_metrics(gw.http).await;
    zkgate_testkit::metric_value(
        &body,
        "zkgate_identity_limit_rejections_total",
        &[("limit", limit), ("identity", identity)],
    )
}

async fn candidates(c: &mut Stub, election: &str) -> Result<u32, Status> {
    c.candidates(pb::CandidatesRequest {
        election: election.into(),
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner().total)
}

/// G10 with tenants, the rest of the per-identity limits: queues, bytes in flight and unary
/// calls in flight. The flood meets each of its own limits (the refusal names the limit, the
/// identity and the value); the quiet tenant's calls meanwhile succeed; and once the flood's
/// streams end, its places come back and no znode is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_flood_of_queues_bytes_and_unary_calls_meets_its_own_limits() {
    let zk = shared_zk();
    let gw = Gateway::start_with(
        &zk,
        GatewayOpts {
            limits: Some(zkgate::api::limits::StreamLimits {
                queues_per_identity: 2,
                bytes_in_flight_per_identity: 100,
                unary_in_flight_per_identity: 1,
                ..Default::default()
            }),
            configure: Some(Box::new(|cfg| cfg.auth = two_tenants())),
            ..Default::default()
        },
    )
    .await;
    let root = gw.root.clone();
    let ch = Channel::from_shared(gw.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut flood = stub(&ch, Some("flood-token"));
    let mut quiet = stub(&ch, Some("quiet-token"));

    // Queues: two names, however many streams in them; a third name is refused.
    let mut fa = campaign_with(&mut flood, "fa", "x", &[1; 10])
        .await
        .unwrap();
    fa.elected().await;
    let fa2 = campaign_with(&mut flood, "fa", "y", &[1; 10])
        .await
        .unwrap();
    let fb = campaign_with(&mut flood, "fb", "x", &[1; 10])
        .await
        .unwrap();
    let e = campaign(&mut flood, "fc", "x").await.err().unwrap();
    assert_exhausted(&e, "flood", "--max-queues-per-identity = 2");
    let e = LockClient::with_interceptor(ch.clone(), Bearer(Some("flood-token")))
        .acquire(tokio_stream::iter([pb::AcquireRequest {
            request: Some(pb::acquire_request::Request::Acquire(acquire_msg(
                "fc", "x",
            ))),
        }]))
        .await
        .err()
        .unwrap();
    assert_exhausted(&e, "flood", "--max-queues-per-identity = 2");
    let mut q = campaign(&mut quiet, "fc", "q").await.unwrap();
    q.elected().await;

    // Bytes: the flood's values (30 bytes so far) plus 80 pass 100, in a join or a proclaim.
    let e = campaign_with(&mut flood, "fa", "z", &[1; 80])
        .await
        .err()
        .unwrap();
    assert_exhausted(&e, "flood", "--max-bytes-in-flight-per-identity = 100");
    let e = flood
        .proclaim(pb::ProclaimRequest {
            lease: fa.lease.clone(),
            value: vec![2; 80],
        })
        .await
        .err()
        .unwrap();
    assert_exhausted(&e, "flood", "--max-bytes-in-flight-per-identity = 100");
    let _q80 = campaign_with(&mut quiet, "fc", "q80", &[1; 80])
        .await
        .unwrap();
    // In a stream a proclaim that grows past it ends the stream (no per-message error there);
    // the stream's bytes come back once it is gone, so a value that fits gets in again.
    fa.tx
        .as_ref()
        .unwrap()
        .send(pb::CampaignRequest {
            request: Some(pb::campaign_request::Request::Proclaim(pb::ProclaimValue {
                value: vec![2; 81],
            })),
        })
        .await
        .unwrap();
    let e = loop {
        match fa.next().await {
            Err(e) => break e,
            Ok(Some(Event::Proclaimed(p))) => panic!("proclaimed past the limit: {p:?}"),
            Ok(_) => continue,
        }
    };
    assert_exhausted(&e, "flood", "--max-bytes-in-flight-per-identity = 100");
    let deadline = tokio::time::Instant::now() + ANSWER;
    let fa = loop {
        match campaign_with(&mut flood, "fa", "z", &[1; 80]).await {
            Ok(held) => break held,
            Err(e) if tokio::time::Instant::now() < deadline => {
                assert_exhausted(&e, "flood", "--max-bytes-in-flight-per-identity = 100");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("the ended stream's bytes never came back: {e:?}"),
        }
    };

    // Unary calls in flight: bursts of concurrent reads until one finds another in flight,
    // while the quiet tenant's reads, one at a time, all succeed.
    let quiet_reads = {
        let mut quiet = quiet.clone();
        tokio::spawn(async move {
            for _ in 0..20 {
                assert_eq!(candidates(&mut quiet, "fc").await.unwrap(), 2);
            }
        })
    };
    let mut refused = None;
    for _ in 0..200 {
        let burst: Vec<_> = (0..16)
            .map(|_| {
                let mut flood = flood.clone();
                tokio::spawn(async move { candidates(&mut flood, "fa").await })
            })
            .collect();
        for call in burst {
            if let Err(e) = call.await.unwrap() {
                refused = Some(e);
            }
        }
        if refused.is_some() {
            break;
        }
    }
    let e = refused.expect("a burst of 16 concurrent calls has two in flight at once");
    assert_exhausted(&e, "flood", "--max-unary-in-flight-per-identity = 1");
    quiet_reads.await.unwrap();

    // Each refusal is counted under its limit and the flood's identity.
    for limit in [
        "queues_per_identity",
        "bytes_in_flight_per_identity",
        "unary_in_flight_per_identity",
    ] {
        assert!(
            identity_rejections(&gw, limit, "flood").await >= 1,
            "{limit} counted"
        );
    }

    // Places come back when streams end, and nothing is left in ZooKeeper.
    drop((fa, fa2, fb));
    wait_until("the flood's queues given back", ANSWER, || {
        let mut flood = flood.clone();
        async move { campaign(&mut flood, "fd", "x").await.is_ok() }
    })
    .await;
    drop((q, _q80));
    let zkc = zk_client(&zk).await;
    wait_no_members(&zkc, &root, ANSWER).await;
}

/// The unary rate per identity: a token bucket of one call a second. The flood's sequential
/// calls meet it; the quiet tenant's next call gets in at once.
#[tokio::test]
async fn a_tenants_unary_rate_meets_its_own_bucket() {
    let zk = shared_zk();
    let mut cfg = base(&zk);
    cfg.limits.unary_rate_per_identity = 1;
    cfg.auth = two_tenants();
    let (addr, _coord) = serve(cfg).await;
    let ch = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut flood = stub(&ch, Some("flood-token"));
    let mut quiet = stub(&ch, Some("quiet-token"));
    let mut refused = None;
    // One call a second: two calls within a second meet the limit (1,000 calls cannot all
    // be a second apart within the test's time).
    for _ in 0..1_000 {
        if let Err(e) = candidates(&mut flood, "r").await {
            refused = Some(e);
            break;
        }
    }
    let e = refused.expect("the flood meets its rate");
    assert_exhausted(&e, "flood", "--max-unary-rate-per-identity = 1");
    assert_eq!(candidates(&mut quiet, "r").await.unwrap(), 0);
}

/// Through the real binary: `--auth-policy` and `--audit-log` from flags, SIGHUP reloads the
/// policy, and the audit file has the grant (identity, verb, name, fencing token), the denial
/// and the loss by the reload, and never a lease.
#[tokio::test]
async fn sighup_reloads_the_policy_and_the_audit_file_records_without_leases() {
    let zk = shared_zk();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    let audit = dir.path().join("audit.jsonl");
    std::fs::write(&policy, policy_text(false)).unwrap();
    let mut spec = GatewaySpec::binary(
        env!("CARGO_BIN_EXE_zkgate"),
        &zk,
        &unique_root(),
        Duration::from_secs(4),
    );
    spec.extra = vec![
        "--auth-policy".into(),
        policy.display().to_string(),
        "--audit-log".into(),
        audit.display().to_string(),
    ];
    let gw = GatewayProc::spawn("policy", spec).await.unwrap();
    let ch = Channel::from_shared(gw.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut billing = stub(&ch, Some("billing-token"));
    let mut b = campaign(&mut billing, "billing.audit", "b").await.unwrap();
    let token = b.elected().await.fencing_token;
    let e = campaign(&mut billing, "search.audit", "b")
        .await
        .err()
        .unwrap();
    assert_denied(&e, "billing", "campaign", "search.audit");

    std::fs::write(&policy, policy_text(true)).unwrap();
    zkgate_localzk::process::send_signal(gw.pid, "HUP").expect("SIGHUP");
    match tokio::time::timeout(ANSWER, b.next()).await {
        Ok(Ok(Some(Event::Suspended(_)))) => {}
        other => panic!("expected suspended after SIGHUP, got {other:?}"),
    }
    drop(b.tx.take());
    assert_denied(
        &b.next().await.unwrap_err(),
        "billing",
        "campaign",
        "billing.audit",
    );

    let lines = || std::fs::read_to_string(&audit).unwrap_or_default();
    wait_until("the loss in the audit file", ANSWER, || async {
        lines().contains("\"loss\"")
    })
    .await;
    let text = lines();
    assert!(
        !text.contains("zkg1.") && !text.contains("zkg2."),
        "no lease in the audit trail: {text}"
    );
    let grant = text
        .lines()
        .find(|l| l.contains("\"grant\""))
        .unwrap_or_else(|| panic!("a grant in {text}"));
    for part in [
        "\"identity\":\"billing\"",
        "\"verb\":\"campaign\"",
        "\"name\":\"billing.audit\"",
        &format!("\"fencing_token\":{token}"),
    ] {
        assert!(grant.contains(part), "{part} in {grant}");
    }
    assert!(
        text.lines()
            .any(|l| l.contains("\"denial\"") && l.contains("search.audit")),
        "{text}"
    );
    assert!(
        gw.log_tail(200).contains("reloaded"),
        "the reload is logged: {}",
        gw.log_tail(50)
    );
}

/// The client verbs send a bearer token from `--token-file` or `ZKGATE_TOKEN`, on unary calls
/// (`leader`) and on holder streams (`elect -- CMD`); without one the caller is anonymous.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_sends_its_token_from_a_file_or_the_environment() {
    let zk = shared_zk();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = base(&zk);
    cfg.auth = Auth::with_policy(zkgate::auth::Policy::parse(&policy_text(false)).unwrap());
    let (addr, _coord) = serve(cfg).await;
    let token_file = dir.path().join("billing.token");
    std::fs::write(&token_file, "billing-token\n").unwrap();
    let endpoint = format!("http://{addr}");
    let run = |args: &[&str], env_token: Option<&str>| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_zkgate"));
        // The verb, then the endpoint, then the rest (which may end in `-- CMD`).
        c.arg(args[0])
            .args(["--endpoint", &endpoint])
            .args(&args[1..]);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ZKGATE_") {
                c.env_remove(k);
            }
        }
        if let Some(t) = env_token {
            c.env("ZKGATE_TOKEN", t);
        }
        c.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        // A verb that hangs (say, retrying an endpoint it cannot reach) fails the test
        // instead of hanging the suite.
        let mut child = c.spawn().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("zkgate {args:?} did not exit within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().unwrap()
    };
    let file = token_file.to_str().unwrap();
    let tokio_run = |args: Vec<String>, env_token: Option<&'static str>| {
        let run = &run;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&args, env_token)
    };
    // A holder stream with the file's token: elected, CMD runs, exit 0.
    let out = tokio::task::block_in_place(|| {
        tokio_run(
            vec![
                "elect".into(),
                "billing.cli".into(),
                "--token-file".into(),
                file.into(),
                "--".into(),
                "true".into(),
            ],
            None,
        )
    });
    assert!(out.status.success(), "{out:?}");
    // The environment's token: search may not campaign on billing.*.
    let out = tokio::task::block_in_place(|| {
        tokio_run(
            vec![
                "elect".into(),
                "billing.cli".into(),
                "--".into(),
                "true".into(),
            ],
            Some("search-token"),
        )
    });
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        err.contains("permission denied") && err.contains("search"),
        "{err}"
    );
    // Unary: anonymous is refused billing.*, billing's token is not.
    let out = tokio::task::block_in_place(|| {
        tokio_run(vec!["leader".into(), "billing.cli".into()], None)
    });
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("anonymous"), "{out:?}");
    let out = tokio::task::block_in_place(|| {
        tokio_run(
            vec![
                "leader".into(),
                "billing.cli".into(),
                "--token-file".into(),
                file.into(),
            ],
            None,
        )
    });
    let text = format!("{out:?}");
    assert!(!text.contains("permission denied"), "{text}");
}
