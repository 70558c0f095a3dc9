//! Endpoints: the gateway fleet a [`crate::Client`] talks to, in the one convention all zkgate
//! clients share (`clients/CONFORMANCE.md`): `host:port`, `http://host:port` or
//! `https://host:port`, a list, `ZKGATE_ENDPOINT` (comma-separated) when none is given.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use crate::Error;

/// The environment variable every zkgate client and the CLI read when no endpoint is given.
pub const ENDPOINT_ENV: &str = "ZKGATE_ENDPOINT";
/// The bearer token sent as `authorization: Bearer <token>` (gateways with `--auth-policy`
/// identify the caller by it).
pub const TOKEN_ENV: &str = "ZKGATE_TOKEN";
/// The endpoint used when neither code nor `ZKGATE_ENDPOINT` names one.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:50051";
/// The deadline of unary calls (and of opening a hold until its `queued`), unless configured.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// One gateway address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// As written, without surrounding blanks (`127.0.0.1:50051`, `https://gw:443`).
    given: String,
    /// `host:port`.
    authority: String,
    /// `Some(true)` for `https://`, `Some(false)` for `http://`, `None` for a bare
    /// `host:port` (TLS exactly when TLS options are configured).
    scheme_tls: Option<bool>,
    /// For one address of a host name expanded by [`expand`]: the name, which TLS verifies
    /// and the `:authority` header carries.
    name: Option<String>,
}

impl Endpoint {
    /// Parses one endpoint.
    ///
    /// # Errors
    /// [`Error::InvalidEndpoint`]: another scheme, no host, or no numeric port on a bare
    /// `host:port`.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let given = s.trim();
        let bad = |why: &str| Error::InvalidEndpoint(given.to_owned(), why.to_owned());
        let (scheme_tls, rest) = if let Some(r) = given.strip_prefix("https://") {
            (Some(true), r)
        } else if let Some(r) = given.strip_prefix("http://") {
            (Some(false), r)
        } else if given.contains("://") {
            return Err(bad("the scheme must be http:// or https://"));
        } else {
            (None, given)
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.is_empty() || authority.contains('/') {
            return Err(bad("expected host:port"));
        }
        // `[::1]:50051` or `host:50051`: the port follows the last colon after any `]`.
        let after_host = authority.rfind(']').map_or(authority, |i| &authority[i..]);
        let port = after_host.rsplit_once(':').map(|(_, p)| p);
        match port {
            Some(p) if !p.is_empty() && p.parse::<u16>().is_ok() => {}
            Some(_) => return Err(bad("the port must be a number")),
            None if scheme_tls.is_none() => return Err(bad("expected host:port")),
            None => {}
        }
        if authority.starts_with(':') {
            return Err(bad("no host"));
        }
        Ok(Endpoint {
            given: given.to_owned(),
            authority: authority.to_owned(),
            scheme_tls,
            name: None,
        })
    }

    /// The host name and port, when the host is a name rather than an IP address.
    fn host_name(&self) -> Option<(&str, u16)> {
        let (host, port) = self.authority.rsplit_once(':')?;
        if host.starts_with('[') || host.parse::<IpAddr>().is_ok() {
            return None;
        }
        Some((host, port.parse().ok()?))
    }

    /// This endpoint at one address of its host name.
    fn at(&self, addr: SocketAddr) -> Endpoint {
        Endpoint {
            given: format!("{} ({addr})", self.given),
            authority: addr.to_string(),
            scheme_tls: self.scheme_tls,
            name: self.host_name().map(|(host, _)| host.to_owned()),
        }
    }

    /// For an address expanded from a host name: the URI naming the host (the request's
    /// `:authority`) and the name TLS verifies.
    pub(crate) fn named(&self, tls_configured: bool) -> Option<(String, &str)> {
        let name = self.name.as_deref()?;
        let scheme = if self.uses_tls(tls_configured) {
            "https"
        } else {
            "http"
        };
        let port = self.authority.rsplit_once(':').map_or("", |(_, p)| p);
        Some((format!("{scheme}://{name}:{port}"), name))
    }

    /// The endpoint as written.
    pub fn as_str(&self) -> &str {
        &self.given
    }

    /// Whether calls to it use TLS, given whether TLS options are configured.
    pub fn uses_tls(&self, tls_configured: bool) -> bool {
        self.scheme_tls.unwrap_or(tls_configured)
    }

    /// The URI tonic connects to.
    pub(crate) fn uri(&self, tls_configured: bool) -> String {
        let scheme = if self.uses_tls(tls_configured) {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.authority)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.given)
    }
}

/// Parses a list of endpoints; each item may itself be comma-separated, blanks and empty
/// entries are ignored.
///
/// # Errors
/// The first invalid endpoint, or [`Error::InvalidEndpoint`] for a list with none at all.
pub fn parse_list<I, S>(items: I) -> Result<Vec<Endpoint>, Error>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut out = Vec::new();
    for item in items {
        for part in item.as_ref().split(',') {
            if !part.trim().is_empty() {
                out.push(Endpoint::parse(part)?);
            }
        }
    }
    if out.is_empty() {
        return Err(Error::InvalidEndpoint(
            String::new(),
            "no endpoint given".into(),
        ));
    }
    Ok(out)
}

/// Expands every endpoint whose host name resolves to several addresses of one family (a
/// fleet's A or AAAA records) into one endpoint per address, in the resolver's order, so that
/// failover moves from gateway to gateway; TLS still verifies the name. A name with at most
/// one address per family (`localhost`: 127.0.0.1 and ::1) is one host and stays as written,
/// as does a name that does not resolve within `within` (it is resolved again on each
/// connection). Names are resolved once, here: a client made before the fleet changed keeps
/// the old list.
pub(crate) async fn expand(list: Vec<Endpoint>, within: Duration) -> Vec<Endpoint> {
    let mut out = Vec::with_capacity(list.len());
    for ep in list {
        let addrs = match ep.host_name() {
            // A resolver that does not answer must not hold up `connect`.
            Some((host, port)) => {
                tokio::time::timeout(within, tokio::net::lookup_host((host, port)))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .map(Iterator::collect)
                    .unwrap_or_default()
            }
            None => Vec::new(),
        };
        out.extend(expand_one(ep, addrs));
    }
    out
}

/// [`expand`] for one endpoint and what its name resolved to.
fn expand_one(ep: Endpoint, addrs: Vec<SocketAddr>) -> Vec<Endpoint> {
    let mut unique: Vec<SocketAddr> = Vec::new();
    for a in addrs {
        if !unique.contains(&a) {
            unique.push(a);
        }
    }
    let v4 = unique.iter().filter(|a| a.is_ipv4()).count();
    if v4 < 2 && unique.len() - v4 < 2 {
        return vec![ep];
    }
    unique.into_iter().map(|a| ep.at(a)).collect()
}

/// TLS settings for every endpoint of a client (PEM bytes). Without a CA bundle the
/// webpki (Mozilla) roots are trusted.
#[derive(Clone, Default)]
pub struct TlsOptions {
    pub(crate) ca_pem: Option<Vec<u8>>,
    pub(crate) identity: Option<(Vec<u8>, Vec<u8>)>,
    pub(crate) server_name: Option<String>,
}

impl fmt::Debug for TlsOptions {
    // Never print key material.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsOptions")
            .field("ca", &self.ca_pem.is_some())
            .field("client_identity", &self.identity.is_some())
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl TlsOptions {
    pub fn new() -> Self {
        Self::default()
    }

    /// Trust these CA certificates (PEM) instead of the public roots.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Present this client certificate and key (PEM): mutual TLS.
    pub fn identity_pem(mut self, cert: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Self {
        self.identity = Some((cert.into(), key.into()));
        self
    }

    /// Verify the gateways' certificates against this name instead of the endpoint's host.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Reads the CA bundle and the client certificate and key from files.
    ///
    /// # Errors
    /// [`Error::Tls`]: an unreadable file, or a certificate without its key (or the reverse).
    pub fn from_files(
        ca: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<Self, Error> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|e| Error::Tls(format!("reading {}: {e}", p.display())))
        };
        let mut t = TlsOptions::new();
        if let Some(ca) = ca {
            t = t.ca_pem(read(ca)?);
        }
        match (cert, key) {
            (Some(c), Some(k)) => t = t.identity_pem(read(c)?, read(k)?),
            (None, None) => {}
            _ => {
                return Err(Error::Tls(
                    "a client certificate needs its key, and a key its certificate".into(),
                ))
            }
        }
        Ok(t)
    }
}

/// The gateway fleet and how to talk to it: what [`crate::Client::connect`] takes.
#[derive(Clone)]
pub struct Endpoints {
    pub(crate) list: Vec<Endpoint>,
    pub(crate) tls: Option<TlsOptions>,
    pub(crate) timeout: Duration,
    /// The bearer token sent with every call and stream.
    pub(crate) token: Option<String>,
}

impl fmt::Debug for Endpoints {
    // Never print the token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoints")
            .field("list", &self.list)
            .field("tls", &self.tls)
            .field("timeout", &self.timeout)
            .field("token", &self.token.is_some())
            .finish()
    }
}

impl Endpoints {
    /// These endpoints, tried in this order (each item may be a comma-separated list).
    ///
    /// # Errors
    /// [`Error::InvalidEndpoint`].
    pub fn new<I, S>(items: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Ok(Endpoints {
            list: parse_list(items)?,
            tls: None,
            timeout: DEFAULT_TIMEOUT,
            token: None,
        })
    }

    /// `ZKGATE_ENDPOINT`, or [`DEFAULT_ENDPOINT`] when it is unset or blank; with the bearer
    /// token of `ZKGATE_TOKEN` when that is set.
    ///
    /// # Errors
    /// [`Error::InvalidEndpoint`] when the variable holds an invalid endpoint.
    pub fn from_env() -> Result<Self, Error> {
        let e = match std::env::var(ENDPOINT_ENV) {
            Ok(v) if !v.trim().trim_matches(',').trim().is_empty() => Self::new([v]),
            _ => Self::new([DEFAULT_ENDPOINT]),
        }?;
        Ok(match std::env::var(TOKEN_ENV) {
            Ok(t) if !t.trim().is_empty() => e.token(t.trim()),
            _ => e,
        })
    }

    /// Send `authorization: Bearer <token>` with every call and stream (a gateway with
    /// `--auth-policy` identifies the caller by it).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The bearer token from a file (its content, trimmed: `--token-file`).
    ///
    /// # Errors
    /// [`Error::InvalidEndpoint`] naming the file when it cannot be read or is empty.
    pub fn token_file(self, path: &Path) -> Result<Self, Error> {
        let bad =
            |why: String| Error::InvalidEndpoint(format!("--token-file {}", path.display()), why);
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(bad("the file is empty".into()));
        }
        Ok(self.token(token))
    }

    /// The given endpoints, or [`Endpoints::from_env`] when there are none.
    ///
    /// # Errors
    /// [`Error::InvalidEndpoint`].
    pub fn or_env<I, S>(items: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let items: Vec<S> = items.into_iter().collect();
        if items
            .iter()
            .all(|s| s.as_ref().trim().trim_matches(',').is_empty())
        {
            Self::from_env()
        } else {
            Self::new(items)
        }
    }

    /// TLS (and mTLS) for every endpoint that is not written `http://`.
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The deadline of unary calls, and of opening a Campaign or Acquire stream until its
    /// `queued` arrives [default: 5 s].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn list(&self) -> &[Endpoint] {
        &self.list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_and_their_schemes() {
        let e = Endpoint::parse(" 127.0.0.1:50051 ").unwrap();
        assert_eq!(e.as_str(), "127.0.0.1:50051");
        assert_eq!(e.uri(false), "http://127.0.0.1:50051");
        assert_eq!(
            e.uri(true),
            "https://127.0.0.1:50051",
            "bare + TLS options: TLS"
        );
        let e = Endpoint::parse("http://gw:1").unwrap();
        assert_eq!(e.uri(true), "http://gw:1", "http:// stays plaintext");
        let e = Endpoint::parse("https://gw.example.com:443/").unwrap();
        assert_eq!(e.uri(false), "https://gw.example.com:443");
        assert!(Endpoint::parse("https://gw.example.com").is_ok());
        let e = Endpoint::parse("[::1]:50051").unwrap();
        assert_eq!(e.uri(false), "http://[::1]:50051");
    }

    #[test]
    fn refuses_what_is_not_an_endpoint() {
        for bad in [
            "",
            "gw",
            "gw:",
            "gw:port",
            ":50051",
            "grpc://gw:1",
            "http://",
            "http://gw:1/path",
            "[::1]",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn lists_are_repeatable_and_comma_separated() {
        let l = parse_list(["a:1,b:2", " ", "https://c:3,,"]).unwrap();
        let s: Vec<&str> = l.iter().map(Endpoint::as_str).collect();
        assert_eq!(s, ["a:1", "b:2", "https://c:3"]);
        assert!(parse_list([",", ""]).is_err());
        assert!(parse_list(["a:1,bogus"]).is_err());
        let e = Endpoints::or_env(["x:1"]).unwrap();
        assert_eq!(e.list().len(), 1);
        assert_eq!(e.timeout, DEFAULT_TIMEOUT);
    }

    #[test]
    fn a_name_with_several_addresses_becomes_one_endpoint_each() {
        let ep = Endpoint::parse("https://gw.fleet:443").unwrap();
        let addrs: Vec<SocketAddr> = ["10.0.0.1:443", "10.0.0.2:443", "10.0.0.1:443"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let out = expand_one(ep.clone(), addrs);
        let uris: Vec<String> = out.iter().map(|e| e.uri(false)).collect();
        assert_eq!(uris, ["https://10.0.0.1:443", "https://10.0.0.2:443"]);
        assert_eq!(out[1].as_str(), "https://gw.fleet:443 (10.0.0.2:443)");
        assert_eq!(
            out[0].named(false),
            Some(("https://gw.fleet:443".to_owned(), "gw.fleet")),
            "TLS verifies the name, the request carries it"
        );
        // One address per family (localhost), one address, nothing resolved: as written.
        let local = Endpoint::parse("localhost:50051").unwrap();
        let both = vec![
            "127.0.0.1:50051".parse().unwrap(),
            "[::1]:50051".parse().unwrap(),
        ];
        assert_eq!(expand_one(local.clone(), both), vec![local.clone()]);
        assert_eq!(expand_one(local.clone(), Vec::new()), vec![local.clone()]);
        assert_eq!(local.named(false), None);
        // IP literals are never names.
        for ip in ["127.0.0.1:1", "[::1]:1", "http://10.1.2.3:80"] {
            assert_eq!(Endpoint::parse(ip).unwrap().host_name(), None, "{ip}");
        }
        assert_eq!(
            Endpoint::parse("gw.fleet:7").unwrap().host_name(),
            Some(("gw.fleet", 7))
        );
    }

    #[tokio::test]
    async fn localhost_stays_one_endpoint() {
        let list = parse_list(["localhost:50051", "127.0.0.1:1"]).unwrap();
        assert_eq!(expand(list.clone(), DEFAULT_TIMEOUT).await, list);
    }

    #[test]
    fn half_an_identity_is_refused() {
        let dir = std::env::temp_dir();
        assert!(TlsOptions::from_files(None, Some(&dir), None).is_err());
        assert!(TlsOptions::from_files(None, None, Some(&dir)).is_err());
        assert!(TlsOptions::from_files(None, None, None).is_ok());
        let dbg = format!("{:?}", TlsOptions::new().identity_pem("c", "SECRET"));
        assert!(!dbg.contains("SECRET"), "{dbg}");
    }
}
