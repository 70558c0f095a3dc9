//! Test certificates: a CA (`ca.pem`), a server certificate for 127.0.0.1, localhost and gw.test
//! (`server.pem`, `server.key`) and a client certificate (`client.pem`, `client.key`), made with
//! openssl. Used by `tests/security.rs`, `tests/cli_verbs.rs` and the client suites.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

fn openssl(dir: &Path, args: &[&str]) {
    let ok = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        ok.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl.
pub fn make_pki(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "1",
            "-subj",
            "/CN=zkgate-test-ca",
        ],
    );
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:gw.test\n",
    )
    .unwrap();
    for who in ["server", "client"] {
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{who}.key"),
                "-out",
                &format!("{who}.csr"),
                "-subj",
                &format!("/CN={who}"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{who}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{who}.pem"),
                "-days",
                "1",
                "-extfile",
                "san.ext",
            ],
        );
    }
}

/// A client certificate `{who}.pem`/`{who}.key` signed by [`make_pki`]'s CA (call that first),
/// with subject CN `cn` and, when given, the `subjectAltName` line `san` (e.g.
/// `URI:spiffe://test/ops,DNS:ops.test`): tenancy tests tell identities apart by them.
pub fn make_client_cert(dir: &Path, who: &str, cn: &str, san: Option<&str>) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &format!("{who}.key"),
            "-out",
            &format!("{who}.csr"),
            "-subj",
            &format!("/CN={cn}"),
        ],
    );
    let ext = format!("{who}.ext");
    // Some extension even without a SAN: a certificate without any is X.509 v1, which rustls
    // refuses.
    let mut lines = "basicConstraints=CA:FALSE\n".to_owned();
    if let Some(san) = san {
        lines.push_str(&format!("subjectAltName={san}\n"));
    }
    std::fs::write(dir.join(&ext), lines).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{who}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &format!("{who}.pem"),
            "-days",
            "1",
            "-extfile",
            &ext,
        ],
    );
}
