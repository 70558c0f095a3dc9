//! A throwaway MIT Kerberos KDC for tests: its own realm, database, `krb5.conf` and keytabs
//! under a temporary directory, serving on a free loopback port (TCP; clients are told to
//! prefer it), started from Debian's `krb5-kdc` and `krb5-admin-server` packages.
//!
//! Like the ZooKeeper servers, the `krb5kdc` process is tied to the test process
//! ([`zkgate_localzk::TiedChild`]): it dies with it, however the test ends.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use zkgate_localzk::TiedChild;

/// The realm of every test KDC.
pub const REALM: &str = "ZKGATE.TEST";

/// A running test KDC; dropping it kills the KDC and deletes its directory.
#[derive(Debug)]
pub struct TestKdc {
    proc: Option<TiedChild>,
    port: u16,
    dir: tempfile::TempDir,
}

/// Where the MIT tools are: `/usr/sbin` (Debian) is not on every user's `PATH`.
fn tool(name: &str) -> PathBuf {
    for dir in ["/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
        let path = Path::new(dir).join(name);
        if path.is_file() {
            return path;
        }
    }
    PathBuf::from(name)
}

impl TestKdc {
    /// Whether the KDC, its database tool and `kinit` are installed, so that a test can say
    /// what to install instead of failing obscurely.
    pub fn is_installed() -> bool {
        ["krb5kdc", "kdb5_util", "kadmin.local", "kinit"]
            .iter()
            .all(|t| tool(t).is_absolute())
    }

    /// How to make [`TestKdc::is_installed`] true.
    pub fn install_hint() -> &'static str {
        "apt-get install -y krb5-kdc krb5-admin-server krb5-user (and libkrb5-dev libclang-dev \
         to build --features zk-kerberos)"
    }

    /// Creates the realm's database and starts the KDC on a free loopback port; returns once
    /// it accepts TCP connections.
    ///
    /// # Panics
    /// If a tool fails or the KDC does not listen within 10 s (with its log).
    pub async fn start() -> TestKdc {
        let dir = tempfile::Builder::new()
            .prefix("zkgate-kdc-")
            .tempdir()
            .expect("a KDC directory");
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").expect("a free port");
            l.local_addr().unwrap().port()
        };
        let d = dir.path().display();
        std::fs::write(
            dir.path().join("kdc.conf"),
            format!(
                "[kdcdefaults]\n kdc_ports = {port}\n kdc_tcp_ports = {port}\n\
                 [realms]\n {REALM} = {{\n  database_name = {d}/principal\n  \
                 key_stash_file = {d}/stash\n  acl_file = {d}/kadm5.acl\n  \
                 admin_keytab = FILE:{d}/kadm5.keytab\n  \
                 kdc_ports = {port}\n  kdc_tcp_ports = {port}\n  max_life = 1h\n  \
                 supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal\n }}\n"
            ),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("krb5.conf"),
            format!(
                "[libdefaults]\n default_realm = {REALM}\n dns_lookup_realm = false\n \
                 dns_lookup_kdc = false\n dns_canonicalize_hostname = false\n rdns = false\n \
                 udp_preference_limit = 1\n\
                 [realms]\n {REALM} = {{\n  kdc = 127.0.0.1:{port}\n }}\n\
                 [domain_realm]\n 127.0.0.1 = {REALM}\n localhost = {REALM}\n"
            ),
        )
        .unwrap();
        let mut kdc = TestKdc {
            proc: None,
            port,
            dir,
        };
        kdc.run(
            "kdb5_util",
            &["create", "-s", "-r", REALM, "-P", "throwaway-master-key"],
        );
        let log = std::fs::File::create(kdc.path("kdc.log")).unwrap();
        let mut cmd = TiedChild::command("zkgate-kdc", tool("krb5kdc"), None);
        cmd.args(["-n", "-r", REALM])
            .envs(kdc.env())
            .env("KRB5_KDC_PROFILE", kdc.path("kdc.conf"))
            .stderr(log);
        kdc.proc = Some(TiedChild::spawn(cmd).await.expect("starting krb5kdc"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "the KDC does not listen on {port}: {}",
                std::fs::read_to_string(kdc.path("kdc.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        kdc
    }

    /// A file in the KDC's directory (a place for keytabs, caches, JAAS files).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The `krb5.conf` clients (and Java, `-Djava.security.krb5.conf`) use for this realm.
    pub fn krb5_conf(&self) -> PathBuf {
        self.path("krb5.conf")
    }

    /// The environment that points MIT's tools and libraries at this realm (`KRB5_CONFIG`).
    pub fn env(&self) -> Vec<(String, String)> {
        vec![("KRB5_CONFIG".into(), self.krb5_conf().display().to_string())]
    }

    /// The KDC's port (TCP and UDP on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Adds `principal` (no realm: this one's) with a random key and writes its key to a new
    /// keytab; returns the keytab's path and the full principal name.
    pub fn add_principal(&self, principal: &str) -> (PathBuf, String) {
        let keytab = self.path(&format!("{}.keytab", principal.replace('/', "_")));
        self.kadmin(&format!("addprinc -randkey {principal}"));
        self.kadmin(&format!("ktadd -k {} {principal}", keytab.display()));
        (keytab, format!("{principal}@{REALM}"))
    }

    /// Gives `principal` a new random key without writing it anywhere: its keytabs are stale
    /// from then on, so nobody gets a ticket with them.
    pub fn rekey(&self, principal: &str) {
        self.kadmin(&format!("cpw -randkey {principal}"));
    }

    /// Runs `kinit -k -t KEYTAB -c CACHE PRINCIPAL` against this realm, asking for a ticket
    /// that lives `lifetime` (`kinit -l`, e.g. `"2s"`) if given, else as long as the realm
    /// allows (an hour).
    ///
    /// # Panics
    /// If `kinit` fails.
    pub fn kinit(&self, keytab: &Path, principal: &str, cache: &str, lifetime: Option<&str>) {
        let mut cmd = Command::new(tool("kinit"));
        cmd.envs(self.env()).arg("-k").arg("-t").arg(keytab);
        if let Some(lifetime) = lifetime {
            cmd.args(["-l", lifetime]);
        }
        let out = cmd
            .args(["-c", cache, principal])
            .output()
            .expect("running kinit");
        assert!(
            out.status.success(),
            "kinit {principal}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Whether `cache` holds a ticket that has not expired (`klist -s`).
    pub fn has_valid_ticket(&self, cache: &str) -> bool {
        Command::new(tool("klist"))
            .envs(self.env())
            .args(["-s", "-c", cache])
            .status()
            .is_ok_and(|s| s.success())
    }

    fn kadmin(&self, query: &str) {
        self.run("kadmin.local", &["-r", REALM, "-q", query]);
    }

    fn run(&self, program: &str, args: &[&str]) {
        let out = Command::new(tool(program))
            .args(args)
            .envs(self.env())
            .env("KRB5_KDC_PROFILE", self.path("kdc.conf"))
            .output()
            .unwrap_or_else(|e| panic!("running {program}: {e}"));
        // kadmin.local reports a failed query on stderr but exits 0.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !stderr.contains("while "),
            "{program} {args:?}: {}\n{stderr}",
            out.status
        );
    }
}

impl Drop for TestKdc {
    fn drop(&mut self) {
        if let Some(proc) = self.proc.take() {
            proc.kill_and_wait(Duration::from_secs(5));
        }
    }
}

/// Writes a JAAS file whose `Server` section logs ZooKeeper in as `principal` (full name) from
/// `keytab`: the server side of SASL GSSAPI.
pub fn write_kerberos_jaas(path: &Path, keytab: &Path, principal: &str) {
    let text = format!(
        "Server {{\n  com.sun.security.auth.module.Krb5LoginModule required\n  \
         useKeyTab=true\n  keyTab=\"{}\"\n  storeKey=true\n  useTicketCache=false\n  \
         principal=\"{principal}\";\n}};\n",
        keytab.display()
    );
    std::fs::write(path, text).expect("writing the JAAS file");
}
