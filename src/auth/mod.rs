//! Tenancy (README "Security", G9, G10): who is calling ([`identity`]), what they may touch
//! ([`policy`]), leases nobody can forge ([`lease_key`]) and the audit trail ([`audit`]).
//!
//! [`Auth`] holds the current policy. A tonic interceptor on the Election and Lock services
//! ([`Auth::interceptor`]) turns each call's credentials into an [`Identity`] placed in the
//! request's extensions (an unusable token is `UNAUTHENTICATED` right there); the handlers,
//! which know the name and verb, ask [`Auth::check`]. Health and reflection have no
//! interceptor: they need no identity.

pub mod audit;
pub mod identity;
pub mod lease_key;
pub mod policy;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use tokio::sync::watch;
use tonic::metadata::MetadataMap;

pub use identity::Identity;
pub use lease_key::LeaseKeys;
pub use policy::{Policy, Verb};

use crate::coord::error::CoordError;
use identity::Authorization;

/// The gateway's authorisation state: the policy (none: everything allowed), where it came
/// from, and a counter that moves on every successful reload (holder streams follow it to end
/// holds a reload withdraws, G3c).
#[derive(Debug)]
pub struct Auth {
    policy: RwLock<Option<Arc<Policy>>>,
    path: Option<PathBuf>,
    version: watch::Sender<u64>,
}

impl Auth {
    /// No policy: every caller may do everything (as before tenancy).
    pub fn open() -> Arc<Self> {
        Arc::new(Self {
            policy: RwLock::new(None),
            path: None,
            version: watch::channel(0).0,
        })
    }

    /// A policy given in code (tests), not reloadable from a file.
    pub fn with_policy(policy: Policy) -> Arc<Self> {
        Arc::new(Self {
            policy: RwLock::new(Some(Arc::new(policy))),
            path: None,
            version: watch::channel(0).0,
        })
    }

    /// `--auth-policy FILE`, read now.
    ///
    /// # Errors
    /// The file cannot be read or parsed (the gateway refuses to start).
    pub fn from_file(path: &Path) -> Result<Arc<Self>, String> {
        let policy = read_policy(path)?;
        Ok(Arc::new(Self {
            policy: RwLock::new(Some(Arc::new(policy))),
            path: Some(path.to_owned()),
            version: watch::channel(0).0,
        }))
    }

    /// Whether a policy is in force.
    pub fn enforced(&self) -> bool {
        self.current().is_some()
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn current(&self) -> Option<Arc<Policy>> {
        self.policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Re-reads the policy file (SIGHUP). A file that cannot be read or parsed keeps the old
    /// policy; the caller logs why. Counted in `zkgate_auth_policy_reloads_total{result}`.
    ///
    /// # Errors
    /// Why the file was not taken, or that there is no file to reload.
    pub fn reload(&self) -> Result<(), String> {
        let Some(path) = &self.path else {
            return Err("no --auth-policy file to reload".to_owned());
        };
        match read_policy(path) {
            Ok(p) => {
                self.replace(p);
                crate::metrics::auth_policy_reload("ok");
                Ok(())
            }
            Err(e) => {
                crate::metrics::auth_policy_reload("error");
                Err(e)
            }
        }
    }

    /// Puts `policy` in force and tells the streams that follow it.
    pub fn replace(&self, policy: Policy) {
        *self.policy.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(policy));
        self.version.send_modify(|v| *v += 1);
    }

    /// Moves on every policy change.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// The caller's identity from its `authorization` metadata and its client certificate.
    /// A bearer token, when sent, decides (so a shared mTLS setup can carry many tenants);
    /// else the certificate; else `anonymous`. Without a policy no token can be checked, so a
    /// token counts for nothing (and nothing is refused).
    ///
    /// # Errors
    /// `UNAUTHENTICATED` under a policy: a token that matches no `[[token]]`, or an
    /// `authorization` value that is not `Bearer <token>`.
    pub fn identify(
        &self,
        metadata: &MetadataMap,
        cert: Option<&[u8]>,
    ) -> Result<Identity, CoordError> {
        let header = metadata.get("authorization").map(|v| v.as_bytes());
        let policy = self.current();
        match (identity::authorization(header), &policy) {
            (Authorization::Bearer(token), Some(p)) => match p.token_identity(token) {
                Some(id) => return Ok(Identity::Named(id.to_owned())),
                None => {
                    return Err(CoordError::Unauthenticated(
                        "the bearer token matches no [[token]] of the gateway's policy",
                    ))
                }
            },
            (Authorization::Unusable, Some(_)) => {
                return Err(CoordError::Unauthenticated(
                    "the authorization metadata is not `Bearer <token>`",
                ))
            }
            _ => {}
        }
        Ok(cert
            .and_then(identity::certificate_identity)
            .map_or(Identity::Anonymous, Identity::Named))
    }

    /// Whether `identity` may do `verb` on `name` now (no policy: yes). The hook ObserveMany
    /// filters its names with.
    pub fn allows(&self, identity: &Identity, verb: Verb, name: &str) -> bool {
        self.current()
            .is_none_or(|p| p.allows(identity, verb, name))
    }

    /// [`Auth::allows`], as the handlers use it: a refusal is `PERMISSION_DENIED` and audited.
    ///
    /// # Errors
    /// [`CoordError::PermissionDenied`] naming identity, verb and name.
    pub fn check(&self, identity: &Identity, verb: Verb, name: &str) -> Result<(), CoordError> {
        if self.allows(identity, verb, name) {
            return Ok(());
        }
        audit::denied(identity, verb, name);
        Err(CoordError::PermissionDenied {
            identity: identity.to_string(),
            verb,
            name: name.to_owned(),
        })
    }

    /// The interceptor for the Election and Lock services: puts the caller's [`Identity`] into
    /// the request's extensions, or refuses the call `UNAUTHENTICATED`.
    pub fn interceptor(
        self: &Arc<Self>,
    ) -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone {
        let auth = self.clone();
        move |mut request: tonic::Request<()>| {
            let certs = request.peer_certs();
            let cert = certs.as_deref().and_then(|c| c.first()).map(|c| c.as_ref());
            let id = auth.identify(request.metadata(), cert)?;
            request.extensions_mut().insert(id);
            Ok(request)
        }
    }
}

/// The identity the interceptor found (anonymous when a service runs without it: unit tests).
pub fn caller<T>(request: &tonic::Request<T>) -> Identity {
    request
        .extensions()
        .get::<Identity>()
        .cloned()
        .unwrap_or(Identity::Anonymous)
}

fn read_policy(path: &Path) -> Result<Policy, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("reading --auth-policy {}: {e}", path.display()))?;
    Policy::parse(&text).map_err(|e| format!("--auth-policy {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(auth: Option<&str>) -> MetadataMap {
        let mut m = MetadataMap::new();
        if let Some(a) = auth {
            m.insert("authorization", a.parse().unwrap());
        }
        m
    }

    #[test]
    fn identities_with_and_without_a_policy() {
        let hash =
            lease_key::hex_encode(ring::digest::digest(&ring::digest::SHA256, b"t0k").as_ref());
        let p = Policy::parse(&format!(
            "[[token]]\nidentity = \"billing\"\nsha256 = \"{hash}\"\n"
        ))
        .unwrap();
        let with = Auth::with_policy(p);
        let without = Auth::open();
        let named = |s: &str| Ok(Identity::Named(s.into()));
        // (auth, header, identity or the error's code)
        type Row<'a> = (&'a Auth, Option<&'a str>, Result<Identity, tonic::Code>);
        let table: [Row<'_>; 6] = [
            (&with, Some("Bearer t0k"), named("billing")),
            (
                &with,
                Some("Bearer nope"),
                Err(tonic::Code::Unauthenticated),
            ),
            (&with, Some("Basic x"), Err(tonic::Code::Unauthenticated)),
            (&with, None, Ok(Identity::Anonymous)),
            (&without, Some("Bearer nope"), Ok(Identity::Anonymous)),
            (&without, Some("Basic x"), Ok(Identity::Anonymous)),
        ];
        for (auth, header, want) in table {
            let got = auth
                .identify(&md(header), None)
                .map_err(|e| tonic::Status::from(e).code());
            assert_eq!(got, want, "{header:?} enforced={}", auth.enforced());
        }
    }

    #[test]
    fn checks_name_identity_verb_and_name_and_reloads_move_the_version() {
        let auth = Auth::with_policy(Policy::default());
        let rx = auth.changes();
        let e = auth
            .check(&Identity::Named("billing".into()), Verb::Lock, "cron")
            .unwrap_err();
        let status = tonic::Status::from(e);
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        for part in ["billing", "lock", "cron"] {
            assert!(status.message().contains(part), "{status:?}");
        }
        auth.replace(
            Policy::parse(
                "[[allow]]\nidentity = \"billing\"\nnames = [\"cron\"]\nverbs = [\"lock\"]\n",
            )
            .unwrap(),
        );
        assert!(rx.has_changed().unwrap());
        assert!(auth
            .check(&Identity::Named("billing".into()), Verb::Lock, "cron")
            .is_ok());
        assert!(Auth::open().allows(&Identity::Anonymous, Verb::Campaign, "x"));
    }
}
