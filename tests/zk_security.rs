//! G9 on the link to ZooKeeper (SPEC §7): TLS to a `secureClientPort`, with and without a
//! client certificate; SASL DIGEST-MD5 against a ZooKeeper that requires it; and, whenever the
//! gateway authenticates, znodes that no other ZooKeeper user can list, read or delete. (The
//! same for `--zk-digest`: `tests/security.rs` `digest_auth_makes_znodes_untouchable_for_others`.)
//!
//! Each test starts its own ZooKeeper, configured as the case needs (a few seconds each).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zkgate::coord::{ZkSasl, ZkTls};
use zkgate_testkit::localzk::{
    write_digest_jaas, LocalZk, LocalZkOptions, SaslServer, SecureClient,
};
use zkgate_testkit::*;
use zookeeper_client as zkc;

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap()
}

/// A gateway on `zk` whose link is set up by `link` (TLS, SASL, …).
async fn gateway(
    zk: &str,
    wait_connected: bool,
    link: impl FnOnce(&mut zkgate::coord::CoordConfig) + Send + 'static,
) -> Gateway {
    Gateway::start_with(
        zk,
        GatewayOpts {
            wait_connected,
            configure: Some(Box::new(move |cfg| link(&mut cfg.coord))),
            ..Default::default()
        },
    )
    .await
}

/// Resigns `holder` by its lease: the gateway can still delete what it made.
async fn resign(
    c: &mut zkgate::proto::election_client::ElectionClient<tonic::transport::Channel>,
    holder: &mut Campaign,
) {
    c.resign(zkgate::proto::ResignRequest {
        lease: holder.lease.clone(),
    })
    .await
    .unwrap();
    holder.expect_end(None).await;
}

/// `/readyz` of a gateway: its status and body.
async fn readyz(addr: SocketAddr) -> (String, String) {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    conn.write_all(req.as_bytes()).await.unwrap();
    let mut raw = String::new();
    conn.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("HTTP head and body");
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

/// The one member znode of election `name` under `root`, as seen by `insider`.
async fn only_member(insider: &zkc::Client, root: &str, name: &str) -> String {
    let queue = format!("{root}/elections/{name}");
    let members = insider.list_children(&queue).await.unwrap();
    assert_eq!(members.len(), 1, "{members:?}");
    format!("{queue}/{}", members[0])
}

/// Whether `stranger` can do nothing with the gateway's queue and its member: not list the
/// queue, not read the member, not delete it (`NoAuth` each, or its session refused).
async fn untouchable(stranger: &zkc::Client, member: &str) {
    let queue = member.rsplit_once('/').unwrap().0;
    let listed = stranger.list_children(queue).await;
    assert!(listed.is_err(), "a stranger listed {queue}: {listed:?}");
    let read = stranger.get_data(member).await;
    assert!(read.is_err(), "a stranger read {member}");
    let deleted = stranger.delete(member, None).await;
    assert!(deleted.is_err(), "a stranger deleted {member}");
}

/// The TCP ports process `pid` listens on (Linux: its socket inodes looked up in
/// `/proc/net/tcp` and `tcp6`, state `0A`, LISTEN).
fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_owned(),
            )
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            if *state == "0A" && inodes.iter().any(|i| i == inode) {
                let port = local.rsplit_once(':').unwrap().1;
                ports.push(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports.sort_unstable();
    ports
}

/// ZooKeeper with TLS clients on its `secureClientPort` only (client certificates wanted, not
/// needed): the server listens on nothing but the secure port and its AdminServer (no
/// `clientPort` in its config, no other listening socket), and the kit saw it healthy over
/// the AdminServer. A gateway with `--zk-tls-ca` is elected over it; one without TLS never gets
/// a session; one with a client certificate is identified by it (`x509:CN=client`) and its
/// znodes are closed to everyone else, while the anonymous TLS gateway's stay open (and its
/// `/readyz` says so).
#[tokio::test]
async fn tls_link_to_the_secure_client_port() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path();
    pki::make_pki(pki);
    let combined = pki.join("server-combined.pem");
    std::fs::write(
        &combined,
        read(pki, "server.pem") + &read(pki, "server.key"),
    )
    .unwrap();
    let zk = LocalZk::start_standalone(LocalZkOptions {
        secure_client: Some(SecureClient {
            key_store: combined,
            trust_store: pki.join("ca.pem"),
            client_auth: "want",
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let secure = zk.secure_address(0).to_string();
    let admin = zk
        .admin_address(0)
        .expect("a TLS-only server has an AdminServer");
    let config = std::fs::read_to_string(zk.base_dir().join("zk1/zoo.cfg")).unwrap();
    assert!(
        !config.lines().any(|l| l.starts_with("clientPort")),
        "{config}"
    );
    let mut expected = vec![zk.secure_address(0).port(), admin.port()];
    expected.sort_unstable();
    assert_eq!(listening_ports(zk.pid(0).unwrap()), expected, "{config}");
    assert_eq!(zk.mode(0).await.as_deref(), Some("standalone"));
    let ca_only = ZkTls {
        ca: read(pki, "ca.pem"),
        identity: None,
    };
    let with_cert = ZkTls {
        identity: Some((read(pki, "client.pem"), read(pki, "client.key"))),
        ..ca_only.clone()
    };

    // Without TLS the secure port is no ZooKeeper to talk to: no session, not ready, and the
    // library says why (a plaintext handshake that the TLS server never answers).
    let plain = gateway(&secure, false, |_| {}).await;
    assert!(
        !plain.coord.wait_connected(Duration::from_secs(3)).await,
        "a plaintext gateway got a session on the secure port"
    );
    let (status, _) = readyz(plain.http).await;
    assert!(status.contains("503"), "{status}");
    plain.stop().await;

    // With the CA: elected. No client certificate, so nobody is authenticated: open ACL, and
    // /readyz says so without changing its status.
    let anon = gateway(&secure, true, move |c| c.zk_tls = Some(ca_only)).await;
    let mut c = anon.client().await;
    let mut a = Campaign::join(&mut c, "tls", "a", b"v").await;
    a.elected().await;
    let (status, body) = readyz(anon.http).await;
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("no ZooKeeper authentication"), "{body}");
    // A ZooKeeper user with TLS but no certificate: authenticated as nobody.
    let stranger = zkc::Client::connector()
        .with_tls(
            zkc::TlsOptions::new()
                .with_pem_ca(&read(pki, "ca.pem"))
                .unwrap(),
        )
        .secure_connect(&zk.connect_string())
        .await
        .unwrap();
    let member = only_member(&stranger, &anon.root, "tls").await;
    stranger.get_data(&member).await.unwrap();

    // With a client certificate: the session is x509:CN=client, and only it may touch the
    // znodes the gateway makes.
    let authed = gateway(&secure, true, move |c| c.zk_tls = Some(with_cert)).await;
    let mut c = authed.client().await;
    let mut b = Campaign::join(&mut c, "tls-cert", "b", b"v").await;
    b.elected().await;
    let (_, body) = readyz(authed.http).await;
    assert!(!body.contains("no ZooKeeper authentication"), "{body}");
    let queue = format!("{}/elections/tls-cert", authed.root);
    assert_eq!(
        stranger.list_children(&queue).await.unwrap_err(),
        zkc::Error::NoAuth
    );
    let insider = zkc::Client::connector()
        .with_tls(
            zkc::TlsOptions::new()
                .with_pem_ca(&read(pki, "ca.pem"))
                .unwrap()
                .with_pem_identity(&read(pki, "client.pem"), &read(pki, "client.key"))
                .unwrap(),
        )
        .secure_connect(&secure)
        .await
        .unwrap();
    let member = only_member(&insider, &authed.root, "tls-cert").await;
    let (acl, _) = insider.get_acl(&member).await.unwrap();
    assert!(
        acl.iter()
            .all(|a| a.auth_id().scheme() == "x509" && a.auth_id().id().contains("CN=client")),
        "{acl:?}"
    );
    untouchable(&stranger, &member).await;
    resign(&mut c, &mut b).await;
}

/// ZooKeeper that requires SASL: a gateway with a DIGEST-MD5 login is elected; an
/// unauthenticated client and another SASL user can neither list, read nor delete what it
/// made; the gateway's own login can.
#[tokio::test]
async fn sasl_link_and_creator_only_znodes() {
    let dir = tempfile::tempdir().unwrap();
    let jaas = dir.path().join("jaas.conf");
    write_digest_jaas(&jaas, &[("zkgate", "s3cret"), ("other", "0ther")]);
    let zk = LocalZk::start_standalone(LocalZkOptions {
        sasl: Some(SaslServer {
            jaas,
            required: true,
            krb5_conf: None,
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let zk_addr = zk.connect_string();
    let login = |user: &str, password: &str| ZkSasl {
        user: user.into(),
        password: password.into(),
    };
    let gw_login = login("zkgate", "s3cret");
    let gw = gateway(&zk_addr, true, move |c| c.zk_sasl = Some(gw_login)).await;
    let mut c = gw.client().await;
    let mut a = Campaign::join(&mut c, "sasl", "a", b"private").await;
    a.elected().await;
    let (status, body) = readyz(gw.http).await;
    assert!(status.contains("200"), "{status}");
    assert!(!body.contains("no ZooKeeper authentication"), "{body}");

    let sasl_client = |user: &'static str, password: &'static str| {
        let zk_addr = zk_addr.clone();
        async move {
            zkc::Client::connector()
                .with_sasl(zkc::SaslOptions::digest_md5(user, password))
                .connect(&zk_addr)
                .await
                .unwrap()
        }
    };
    let insider = sasl_client("zkgate", "s3cret").await;
    let member = only_member(&insider, &gw.root, "sasl").await;
    let (acl, _) = insider.get_acl(&member).await.unwrap();
    assert!(
        acl.iter()
            .all(|a| a.auth_id().scheme() == "sasl" && a.auth_id().id() == "zkgate"),
        "{acl:?}"
    );
    let other = sasl_client("other", "0ther").await;
    assert_eq!(
        other
            .list_children(&format!("{}/elections/sasl", gw.root))
            .await
            .unwrap_err(),
        zkc::Error::NoAuth
    );
    untouchable(&other, &member).await;
    // An unauthenticated client gets no further (ZooKeeper refuses its requests outright).
    if let Ok(anonymous) = zkc::Client::connect(&zk_addr).await {
        untouchable(&anonymous, &member).await;
    }
    // A wrong password gets no session at all, so no gateway can start on it unnoticed.
    let bad = login("zkgate", "wrong");
    let refused = gateway(&zk_addr, false, move |c| c.zk_sasl = Some(bad)).await;
    assert!(!refused.coord.wait_connected(Duration::from_secs(3)).await);
    refused.stop().await;

    resign(&mut c, &mut a).await;
}

/// ZooKeeper that requires Kerberos (SASL GSSAPI against a throwaway KDC): the real gateway
/// binary with `--zk-sasl-mechanism gssapi`, a principal and a keytab is elected; its znodes
/// carry `sasl:<principal>` only, so an unauthenticated client and another Kerberos principal
/// can neither list, read nor delete them; its ticket comes back from the keytab after its
/// cache is destroyed (the gateway renews without a `kinit` cron job); a gateway whose keytab
/// is stale gets no ticket and no session.
#[cfg(feature = "zk-kerberos")]
#[tokio::test]
async fn kerberos_link_and_creator_only_znodes() {
    use std::path::PathBuf;
    use zkgate_testkit::kdc::{write_kerberos_jaas, TestKdc};
    use zkgate_testkit::procgw::{GatewayProc, GatewaySpec};

    assert!(TestKdc::is_installed(), "{}", TestKdc::install_hint());
    let kdc = TestKdc::start().await;
    // The library names the server `zookeeper/<host of the connect string>`.
    let (zk_keytab, zk_principal) = kdc.add_principal("zookeeper/127.0.0.1");
    let (gw_keytab, gw_principal) = kdc.add_principal("zkgate");
    let (other_keytab, other_principal) = kdc.add_principal("other");
    let (stale_keytab, stale_principal) = kdc.add_principal("stale");
    kdc.rekey("stale");
    let jaas = kdc.path("jaas.conf");
    write_kerberos_jaas(&jaas, &zk_keytab, &zk_principal);
    let mut zk = LocalZk::start_standalone(LocalZkOptions {
        sasl: Some(SaslServer {
            jaas,
            required: true,
            krb5_conf: Some(kdc.krb5_conf()),
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let zk_addr = zk.connect_string();
    let root = unique_root();
    let spec = |principal: &str, keytab: &Path| {
        let mut spec = GatewaySpec::binary(
            env!("CARGO_BIN_EXE_zkgate"),
            &zk_addr,
            &root,
            Duration::from_secs(2),
        );
        spec.extra = vec![
            "--zk-sasl-mechanism".into(),
            "gssapi".into(),
            "--zk-kerberos-principal".into(),
            principal.into(),
            "--zk-kerberos-keytab".into(),
            keytab.display().to_string(),
        ];
        spec.env = kdc.env();
        // The gateway's private ticket cache goes under the KDC's directory, deleted with it
        // (a gateway killed at the end of the test cannot empty it itself).
        spec.env
            .push(("TMPDIR".into(), kdc.path("").display().to_string()));
        spec
    };

    let gw = GatewayProc::spawn("kerberos", spec(&gw_principal, &gw_keytab))
        .await
        .unwrap();
    let mut c = zkgate::proto::election_client::ElectionClient::connect(gw.url())
        .await
        .unwrap();
    let mut a = Campaign::join(&mut c, "krb", "a", b"private").await;
    a.elected().await;

    // This test process's own Kerberos clients: the gateway's principal, then another one.
    // (Only this test of the binary uses Kerberos, so setting the process's variables is safe.)
    std::env::set_var("KRB5_CONFIG", kdc.krb5_conf());
    let kerberos_client = |keytab: PathBuf, principal: String, cache: &str| {
        let cache = format!("FILE:{}", kdc.path(cache).display());
        kdc.kinit(&keytab, &principal, &cache, None);
        std::env::set_var("KRB5CCNAME", &cache);
        let zk_addr = zk_addr.clone();
        async move {
            zkc::Client::connector()
                .with_sasl(zkc::SaslOptions::gssapi())
                .connect(&zk_addr)
                .await
                .unwrap()
        }
    };
    let insider = kerberos_client(gw_keytab.clone(), gw_principal.clone(), "insider.cc").await;
    let member = only_member(&insider, &root, "krb").await;
    let (acl, _) = insider.get_acl(&member).await.unwrap();
    assert!(
        acl.iter()
            .all(|a| a.auth_id().scheme() == "sasl" && a.auth_id().id() == gw_principal),
        "{acl:?}"
    );
    let other = kerberos_client(other_keytab, other_principal, "other.cc").await;
    assert_eq!(
        other
            .list_children(&format!("{root}/elections/krb"))
            .await
            .unwrap_err(),
        zkc::Error::NoAuth
    );
    untouchable(&other, &member).await;
    // An unauthenticated client gets no further (ZooKeeper refuses its requests outright).
    if let Ok(anonymous) = zkc::Client::connect(&zk_addr).await {
        untouchable(&anonymous, &member).await;
    }

    // Renewal without kinit: the gateway's ticket expired, or its cache destroyed, then
    // ZooKeeper restarted, so the gateway must authenticate again; its next ticket can only
    // come from the keytab.
    let log = std::fs::read_to_string(gw.log_path()).unwrap();
    let cache = log
        .split("FILE:")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the gateway logs its credential cache");
    assert!(cache.ends_with("ccache"), "{cache}");
    let cache_name = format!("FILE:{cache}");
    /// ZooKeeper restarted: the gateway must open a session again, with a ticket.
    async fn reauthenticates(
        what: &str,
        zk: &mut LocalZk,
        gw: &GatewayProc,
        c: &mut zkgate::proto::election_client::ElectionClient<tonic::transport::Channel>,
        kdc: &TestKdc,
        cache_name: &str,
    ) {
        zk.stop(0).await.unwrap();
        zk.start(0).await.unwrap();
        assert!(
            gw.wait_serving(Duration::from_secs(20)).await,
            "no session after the ticket {what}:\n{}",
            gw.log_tail(30)
        );
        let mut b = Campaign::join(c, &format!("krb-{what}"), "b", b"v").await;
        b.elected().await;
        assert!(
            kdc.has_valid_ticket(cache_name),
            "the ticket was not renewed into {cache_name}"
        );
    }
    // A ticket that lives 2 s, in place of the gateway's.
    kdc.kinit(&gw_keytab, &gw_principal, &cache_name, Some("2s"));
    wait_until(
        "the gateway's ticket expired",
        Duration::from_secs(10),
        || async { !kdc.has_valid_ticket(&cache_name) },
    )
    .await;
    reauthenticates("expired", &mut zk, &gw, &mut c, &kdc, &cache_name).await;
    std::fs::remove_file(cache).unwrap();
    reauthenticates("destroyed", &mut zk, &gw, &mut c, &kdc, &cache_name).await;

    // A keytab the KDC no longer honours: no ticket, so ZooKeeper refuses the gateway.
    let refused = GatewayProc::spawn_listening("stale", spec(&stale_principal, &stale_keytab))
        .await
        .unwrap();
    assert!(
        !refused.wait_serving(Duration::from_secs(3)).await,
        "a gateway without a ticket got a session"
    );
    refused
        .wait_logged("kinit failed", Duration::from_secs(5))
        .await
        .unwrap();
}
