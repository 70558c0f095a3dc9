//! The gateway's Kerberos ticket for a GSSAPI link to ZooKeeper (`--zk-sasl-mechanism gssapi`,
//! cargo feature `zk-kerberos`).
//!
//! The ZooKeeper client library authenticates with the system's GSSAPI (MIT Kerberos), which
//! takes its ticket from the process's default credential cache and has no way to be handed a
//! keytab or a cache per connection. So the ticket is the process's, one principal per
//! gateway process, and the gateway keeps it itself rather than relying on a `kinit` cron job
//! or sidecar:
//!
//! * at start it creates a private cache (`FILE:` in a fresh directory that only its user can
//!   read) and runs `kinit -k -t KEYTAB -c CACHE PRINCIPAL` into it, which checks the keytab
//!   and the principal against the KDC at once and pins the cache to that principal;
//! * it points `KRB5CCNAME` at that cache and `KRB5_CLIENT_KTNAME` at the keytab. With a
//!   client keytab, MIT's GSSAPI obtains a fresh ticket from the keytab by itself whenever a
//!   connection needs one and the cached ticket is expired, about to expire or gone — and the
//!   library asks on every (re)connect to ZooKeeper, the only time a session authenticates.
//!   No ticket is needed between reconnects: ZooKeeper keeps an authenticated session's
//!   identity for the session's life.
//!
//! A failed `kinit` at start (KDC unreachable, a stale keytab) is logged and the gateway starts
//! anyway, like a wrong SASL password: it gets no session and is not ready until a reconnect
//! finds a ticket (GSSAPI retries from the keytab on each attempt).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The Kerberos login of the gateway's ZooKeeper link: a principal and its keytab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkKerberos {
    /// The gateway's principal (`zkgate/host@REALM`, `zkgate@REALM`): ZooKeeper's ACLs then
    /// name it as `sasl:<principal>` (as the server's `kerberos.remove*FromPrincipal`
    /// settings shorten it).
    pub principal: String,
    /// The keytab holding the principal's key.
    pub keytab: PathBuf,
}

/// The process's ticket cache, once [`login`] made it.
struct Login {
    principal: String,
    cache: String,
    /// Holds the cache; [`logout`] empties it when the gateway stops (a static is never
    /// dropped, and a killed process leaves it to the machine's temporary-file cleanup).
    dir: tempfile::TempDir,
}

static LOGIN: OnceLock<Login> = OnceLock::new();

/// Sets the process up to authenticate to ZooKeeper as `k.principal` (see the module docs) and
/// returns the credential cache's name. Called once per process before the first ZooKeeper
/// session; calling it again with the same principal returns the same cache.
///
/// # Errors
/// A second principal in the same process (GSSAPI's default credentials are per process), a
/// keytab path that cannot be made absolute, or a private directory that cannot be created.
/// A `kinit` that fails is not an error (see the module docs): it is logged.
pub async fn login(k: &ZkKerberos) -> Result<String, String> {
    if let Some(done) = LOGIN.get() {
        return if done.principal == k.principal {
            Ok(done.cache.clone())
        } else {
            Err(format!(
                "one Kerberos principal per process: {} already logged in, {} asked for",
                done.principal, k.principal
            ))
        };
    }
    let keytab = std::path::absolute(&k.keytab)
        .map_err(|e| format!("--zk-kerberos-keytab {}: {e}", k.keytab.display()))?;
    let dir = tempfile::Builder::new()
        .prefix("zkgate-krb5-")
        .tempdir()
        .map_err(|e| format!("a private directory for the Kerberos ticket cache: {e}"))?;
    let cache = format!("FILE:{}", dir.path().join("ccache").display());
    kinit(&k.principal, &keytab, &cache).await;
    // Before any ZooKeeper session exists, the only reader of these variables here.
    std::env::set_var("KRB5CCNAME", &cache);
    std::env::set_var("KRB5_CLIENT_KTNAME", format!("FILE:{}", keytab.display()));
    let login = Login {
        principal: k.principal.clone(),
        cache: cache.clone(),
        dir,
    };
    if LOGIN.set(login).is_err() {
        return Err("two Kerberos logins raced at start".into());
    }
    tracing::info!(
        principal = %k.principal,
        keytab = %keytab.display(),
        cache = %cache,
        "Kerberos: the ZooKeeper link authenticates with GSSAPI; tickets come from the keytab and are renewed from it"
    );
    Ok(cache)
}

/// Deletes the ticket cache [`login`] made, when the gateway stops serving, so no ticket outlives
/// it on disk. A later session in the same process would get a new ticket from the keytab.
pub fn logout() {
    if let Some(done) = LOGIN.get() {
        let _ = std::fs::remove_file(done.dir.path().join("ccache"));
    }
}

/// `kinit -k -t KEYTAB -c CACHE PRINCIPAL`; logs its failure (or its absence) and goes on.
async fn kinit(principal: &str, keytab: &Path, cache: &str) {
    let out = tokio::process::Command::new("kinit")
        .arg("-k")
        .arg("-t")
        .arg(keytab)
        .arg("-c")
        .arg(cache)
        .arg(principal)
        .stdin(std::process::Stdio::null())
        .output()
        .await;
    match out {
        Ok(out) if out.status.success() => {}
        Ok(out) => tracing::error!(
            principal,
            keytab = %keytab.display(),
            status = %out.status,
            stderr = %String::from_utf8_lossy(&out.stderr).trim(),
            "kinit failed: no Kerberos ticket, so no ZooKeeper session until one can be had from the keytab"
        ),
        Err(e) => tracing::error!(
            principal,
            error = %e,
            "cannot run kinit (install the MIT Kerberos user tools, krb5-user): GSSAPI still tries the keytab on each connect"
        ),
    }
}
