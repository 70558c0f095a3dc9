//! G9: with digest auth, zkgate's znodes carry a creator-only ACL so other ZooKeeper users
//! cannot delete (or read) them; TLS and mTLS on the gRPC port.

use std::process::Command;
use std::time::Duration;
use zkgate_testkit::pki;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity, ServerTlsConfig};
use zkgate::coord::CoordConfig;
use zkgate::proto as pb;
use zkgate::proto::election_client::ElectionClient;
use zkgate::server::ServeConfig;
use zkgate_testkit::*;

/// Whether a gateway refuses `channel` (or its connection): anything but the `NOT_FOUND` a
/// served `Leader` call on an empty election gets.
async fn refused(channel: Result<Channel, tonic::transport::Error>) -> bool {
    match channel {
        Err(_) => true,
        Ok(ch) => ElectionClient::new(ch)
            .leader(pb::LeaderRequest {
                election: "tls".into(),
            })
            .await
            .is_err_and(|e| e.code() != tonic::Code::NotFound),
    }
}

#[tokio::test]
async fn digest_auth_makes_znodes_untouchable_for_others() {
    let zk = shared_zk();
    let mut cc = CoordConfig::new(&zk);
    cc.root = unique_root();
    cc.session_timeout = Duration::from_secs(4);
    cc.zk_digest = Some("zkgate:s3cret".into());
    let root = cc.root.clone();
    let (addr, _coord) = serve(ServeConfig::new(cc)).await;
    let mut c = ElectionClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut a = Campaign::join(&mut c, "acl", "a", b"private").await;
    a.elected().await;

    let stranger = zk_client(&zk).await;
    let queue = format!("{root}/elections/acl");
    let e = stranger.list_children(&queue).await.unwrap_err();
    assert_eq!(
        e,
        zookeeper_client::Error::NoAuth,
        "others cannot even list the queue"
    );
    // Guess the member path from our own authenticated view.
    let insider = zookeeper_client::Client::connector()
        .with_auth("digest", b"zkgate:s3cret")
        .connect(&zk)
        .await
        .unwrap();
    let members = insider.list_children(&queue).await.unwrap();
    assert_eq!(members.len(), 1);
    let member = format!("{queue}/{}", members[0]);
    assert_eq!(
        stranger.delete(&member, None).await.unwrap_err(),
        zookeeper_client::Error::NoAuth
    );
    assert_eq!(
        stranger.get_data(&member).await.unwrap_err(),
        zookeeper_client::Error::NoAuth
    );
    // The holder's lease still works through the gateway.
    c.resign(pb::ResignRequest {
        lease: a.lease.clone(),
    })
    .await
    .unwrap();
    a.expect_end(None).await;
}

#[tokio::test]
async fn tls_and_mutual_tls_on_the_grpc_port() {
    let dir = tempfile::tempdir().unwrap();
    pki::make_pki(dir.path());
    let read = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
    let zk = shared_zk();
    let mut cc = CoordConfig::new(&zk);
    cc.root = unique_root();
    cc.session_timeout = Duration::from_secs(4);
    let mut cfg = ServeConfig::new(cc);
    cfg.tls = Some(
        ServerTlsConfig::new()
            .identity(Identity::from_pem(read("server.pem"), read("server.key")))
            .client_ca_root(Certificate::from_pem(read("ca.pem"))),
    );
    let (addr, _coord) = serve(cfg).await;
    let url = format!("https://localhost:{}", addr.port());
    let ca = Certificate::from_pem(read("ca.pem"));

    // With a client certificate: works.
    let tls = ClientTlsConfig::new()
        .ca_certificate(ca.clone())
        .domain_name("localhost")
        .identity(Identity::from_pem(read("client.pem"), read("client.key")));
    let ch = Channel::from_shared(url.clone())
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = ElectionClient::new(ch);
    let e = c
        .leader(pb::LeaderRequest {
            election: "tls".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        tonic::Code::NotFound,
        "a real answer over mTLS: {e:?}"
    );

    // Without a client certificate: refused.
    let tls = ClientTlsConfig::new()
        .ca_certificate(ca)
        .domain_name("localhost");
    let without_cert = Channel::from_shared(url.clone())
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await;
    assert!(
        refused(without_cert).await,
        "a client without a certificate must be refused"
    );
    // Plaintext: refused.
    let plain = format!("http://127.0.0.1:{}", addr.port());
    assert!(refused(Channel::from_shared(plain).unwrap().connect().await).await);
}

/// Half a TLS setup from the environment is refused at startup, never served as plaintext
/// (flags and the config file: the unit tests in src/config.rs).
#[test]
fn half_a_tls_setup_from_the_environment_fails_closed() {
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("x.pem");
    std::fs::write(&pem, "unused").unwrap();
    for (var, missing) in [
        ("ZKGATE_TLS_CERT", "tls_key"),
        ("ZKGATE_TLS_KEY", "tls_cert"),
        ("ZKGATE_TLS_CLIENT_CA", "tls_cert"),
    ] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_zkgate"));
        // Nothing else from this environment may help or hinder.
        for (k, _) in std::env::vars() {
            if k.starts_with("ZKGATE_") {
                cmd.env_remove(k);
            }
        }
        let out = cmd
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--http",
                "127.0.0.1:0",
                // Nothing listens there: the gateway must refuse before it would try.
                "--zk",
                "127.0.0.1:1",
            ])
            .env(var, &pem)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{var}: {err}");
        assert!(
            err.contains(missing) && err.contains("refusing to start without TLS"),
            "{var}: {err}"
        );
    }
}
