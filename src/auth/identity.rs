//! Who is calling (README "Security"): a bearer token's identity (by the policy's
//! `[[token]]`), else the client certificate's (first URI SAN, else first DNS SAN, else the
//! subject's CN), else `anonymous`.

use std::fmt;

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// A caller as the policy sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identity {
    /// No credentials.
    Anonymous,
    /// A token's or a certificate's identity.
    Named(String),
}

impl Identity {
    pub fn as_str(&self) -> &str {
        match self {
            Identity::Anonymous => "anonymous",
            Identity::Named(n) => n,
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an `authorization` header says.
#[derive(Debug, PartialEq, Eq)]
pub enum Authorization<'a> {
    None,
    Bearer(&'a str),
    /// Another scheme, or a value that is not text: never accepted.
    Unusable,
}

/// Reads an `authorization` metadata value: `Bearer <token>` (scheme case-insensitive).
pub fn authorization(value: Option<&[u8]>) -> Authorization<'_> {
    let Some(value) = value else {
        return Authorization::None;
    };
    let Ok(text) = std::str::from_utf8(value) else {
        return Authorization::Unusable;
    };
    match text.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => {
            let token = token.trim();
            if token.is_empty() {
                Authorization::Unusable
            } else {
                Authorization::Bearer(token)
            }
        }
        _ => Authorization::Unusable,
    }
}

/// The identity of a client certificate (DER): its first URI SAN, else its first DNS SAN,
/// else its subject's CN; `None` when it has none of them or does not parse (TLS already
/// verified it against `--tls-client-ca`).
pub fn certificate_identity(der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let mut dns = None;
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::URI(uri) => return Some((*uri).to_owned()),
                GeneralName::DNSName(d) if dns.is_none() => dns = Some((*d).to_owned()),
                _ => {}
            }
        }
    }
    if dns.is_some() {
        return dns;
    }
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_owned);
    cn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorization_headers() {
        // (header, read as)
        let table: [(Option<&[u8]>, Authorization<'_>); 7] = [
            (None, Authorization::None),
            (Some(b"Bearer abc"), Authorization::Bearer("abc")),
            (Some(b"bearer  abc "), Authorization::Bearer("abc")),
            (Some(b"Bearer "), Authorization::Unusable),
            (Some(b"Basic dXNlcjpwdw=="), Authorization::Unusable),
            (Some(b"abc"), Authorization::Unusable),
            (Some(&[0xff, 0xfe]), Authorization::Unusable),
        ];
        for (value, want) in table {
            assert_eq!(authorization(value), want, "{value:?}");
        }
    }

    #[test]
    fn garbage_is_no_certificate() {
        assert_eq!(certificate_identity(b"not a certificate"), None);
    }
}
