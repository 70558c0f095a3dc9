//! The cost of authorisation per call (README "Security").
//!
//! `cargo run --release --example auth_bench [-- --zk HOST:PORT] [--calls N]`
//!
//! Without `--zk` it starts its own local ZooKeeper (Debian's package). Three gateways in this
//! process on one ZooKeeper, each answering N sequential unary `Leader` calls on an election
//! that has a leader (the answer comes from the gateway's memory, so the call is mostly gRPC
//! and the checks around it):
//! - plaintext, no policy (as before tenancy);
//! - plaintext, a policy, the caller identified by a bearer token (sha256 and a lookup);
//! - mTLS, a policy, the caller identified by its client certificate (parsed on every call);
//!
//! and prints p50/p99 of each. The TLS row includes TLS itself; compare it with the
//! no-policy row only for the whole cost of a secured setup. The policy rows include the
//! per-identity limits' bookkeeping (README "Limits per identity"); their rate limit is raised
//! out of the way.

use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tonic::codegen::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity, ServerTlsConfig};
use tonic::{Request, Status};
use zkgate::auth::{Auth, Policy};
use zkgate::coord::{CoordConfig, Coordinator};
use zkgate::proto as pb;
use zkgate::proto::campaign_request::Request as Req;
use zkgate::proto::campaign_response::Event;
use zkgate::proto::election_client::ElectionClient;
use zkgate::server::{self, ServeConfig};
use zkgate_client::raw::CampaignStream;
use zkgate_testkit::bench::{percentile, zk_or_local, BenchArgs};
use zkgate_testkit::pki;

#[derive(Clone)]
struct Bearer(Option<&'static str>);

impl Interceptor for Bearer {
    fn call(&mut self, mut r: Request<()>) -> Result<Request<()>, Status> {
        if let Some(t) = self.0 {
            r.metadata_mut()
                .insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        Ok(r)
    }
}

type Stub = ElectionClient<InterceptedService<Channel, Bearer>>;

async fn gateway(zk: &str, root: &str, auth: Option<Policy>, tls: Option<ServerTlsConfig>) -> u16 {
    let mut cc = CoordConfig::new(zk);
    cc.root = root.to_owned();
    let mut cfg = ServeConfig::new(cc.clone());
    if let Some(p) = auth {
        cfg.auth = Auth::with_policy(p);
    }
    cfg.tls = tls;
    // Every call still goes through the per-identity accounting (calls in flight, the token
    // bucket); only the rate is set out of reach, so that a fast run measures the checks'
    // cost instead of meeting the default `--max-unary-rate-per-identity`.
    cfg.limits.unary_rate_per_identity = u32::MAX;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let coord = Coordinator::start(cc);
    tokio::spawn(server::run_with(
        coord.clone(),
        cfg,
        listener,
        None,
        std::future::pending(),
    ));
    assert!(coord.wait_connected(Duration::from_secs(20)).await);
    port
}

async fn measure(c: &mut Stub, calls: usize) -> (Duration, Duration) {
    let req = || pb::LeaderRequest {
        election: "bench.auth".into(),
    };
    for _ in 0..200 {
        c.leader(req()).await.unwrap();
    }
    let mut d = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        c.leader(req()).await.unwrap();
        d.push(t.elapsed());
    }
    d.sort();
    (percentile(&d, 0.5), percentile(&d, 0.99))
}

#[tokio::main]
async fn main() {
    let args = BenchArgs::from_env();
    let arg = |name: &str| args.get(name);
    let calls: usize = arg("--calls").map(|s| s.parse().unwrap()).unwrap_or(5000);
    let (zk, _local) = zk_or_local(&args).await;
    let root = format!("/bench{:x}", rand::random::<u32>());
    let dir = tempfile::tempdir().unwrap();
    pki::make_pki(dir.path());
    pki::make_client_cert(
        dir.path(),
        "bench",
        "bench",
        Some("URI:spiffe://bench/client"),
    );
    let read = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
    let hash: String = ring::digest::digest(&ring::digest::SHA256, b"bench-token")
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let policy = || {
        Policy::parse(&format!(
            "[[token]]\nidentity = \"bench\"\nsha256 = \"{hash}\"\n\
             [[allow]]\nidentity = \"other\"\nnames = [\"other.*\"]\nverbs = [\"campaign\", \"lock\", \"observe\"]\n\
             [[allow]]\nidentity = \"bench\"\nnames = [\"bench.*\"]\nverbs = [\"campaign\", \"observe\"]\n\
             [[allow]]\nidentity = \"spiffe://bench/client\"\nnames = [\"bench.*\"]\nverbs = [\"campaign\", \"observe\"]\n"
        ))
        .unwrap()
    };
    let open = gateway(&zk, &root, None, None).await;
    let token = gateway(&zk, &root, Some(policy()), None).await;
    let mtls = gateway(
        &zk,
        &root,
        Some(policy()),
        Some(
            ServerTlsConfig::new()
                .identity(Identity::from_pem(read("server.pem"), read("server.key")))
                .client_ca_root(Certificate::from_pem(read("ca.pem"))),
        ),
    )
    .await;

    let plain = |port: u16| Channel::from_shared(format!("http://127.0.0.1:{port}")).unwrap();
    let mut leader = CampaignStream::open_with(
        &mut ElectionClient::new(plain(open).connect().await.unwrap()),
        [Req::Join(pb::Join {
            ping_seq: 0,
            election: "bench.auth".into(),
            candidate: "bench".into(),
            value: vec![],
        })
        .into()],
    )
    .await
    .unwrap();
    loop {
        if let Some(Event::Elected(_)) = leader.event().await.unwrap() {
            break;
        }
    }
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read("ca.pem")))
        .domain_name("localhost")
        .identity(Identity::from_pem(read("bench.pem"), read("bench.key")));
    let mut rows: Vec<(&str, Stub)> = vec![
        (
            "no policy (plaintext)",
            ElectionClient::with_interceptor(plain(open).connect().await.unwrap(), Bearer(None)),
        ),
        (
            "policy, bearer token (plaintext)",
            ElectionClient::with_interceptor(
                plain(token).connect().await.unwrap(),
                Bearer(Some("bench-token")),
            ),
        ),
        (
            "policy, client certificate (mTLS)",
            ElectionClient::with_interceptor(
                Channel::from_shared(format!("https://localhost:{mtls}"))
                    .unwrap()
                    .tls_config(tls)
                    .unwrap()
                    .connect()
                    .await
                    .unwrap(),
                Bearer(None),
            ),
        ),
    ];
    println!("Leader calls, {calls} sequential per row, after 200 warm-up calls:");
    for (name, stub) in &mut rows {
        let (p50, p99) = measure(stub, calls).await;
        println!("  {name:<36} p50 {p50:>9.1?}  p99 {p99:>9.1?}");
    }
    drop(leader);
}
