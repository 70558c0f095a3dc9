//! The authorisation policy (`--auth-policy FILE`, README "Security"): who may do which verb on
//! which names. A pure core — parse, then `identity × verb × name → allow/deny` — with table
//! tests; the gateway holds the current one in [`super::Auth`] and swaps it on SIGHUP.
//!
//! ```toml
//! [[token]]                      # bearer tokens: `authorization: Bearer <token>`
//! identity = "billing"
//! sha256 = "<hex sha256 of the token>"
//! [[allow]]
//! identity = "billing"           # a token's or a certificate's identity, "*" (any
//!                                # authenticated caller) or "anonymous" (no credentials)
//! names = ["billing.*", "cron"]  # exact names, or prefixes ending in "*"
//! verbs = ["campaign", "lock", "observe"]
//! ```
//! Everything not allowed is denied. Unknown keys and verbs are errors: a typo must not
//! silently widen or narrow access.

use std::collections::HashMap;
use std::fmt;

use serde::Deserialize;

use super::identity::Identity;

/// What a call does to a name (README "Security" lists the RPCs of each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// Campaign, Proclaim, Resign.
    Campaign,
    /// Acquire, Release.
    Lock,
    /// Leader, Observe, ObserveMany, Candidates, Holders, both Validates.
    Observe,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Campaign => "campaign",
            Verb::Lock => "lock",
            Verb::Observe => "observe",
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name pattern: exact, or a prefix (`billing.*`; `*` alone is every name).
#[derive(Debug, Clone, PartialEq, Eq)]
enum NamePattern {
    Exact(String),
    Prefix(String),
}

impl NamePattern {
    fn parse(s: &str) -> Result<Self, String> {
        match s.strip_suffix('*') {
            Some(p) if p.contains('*') => Err(format!("name pattern {s:?}: '*' only at the end")),
            Some(p) => Ok(Self::Prefix(p.to_owned())),
            None if s.contains('*') => Err(format!("name pattern {s:?}: '*' only at the end")),
            None if s.is_empty() => Err("an empty name pattern".to_owned()),
            None => Ok(Self::Exact(s.to_owned())),
        }
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            Self::Exact(n) => n == name,
            Self::Prefix(p) => name.starts_with(p.as_str()),
        }
    }
}

/// Whom a rule is for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Who {
    /// `*`: any authenticated caller (a token or a certificate), never `anonymous`.
    Authenticated,
    Anonymous,
    Named(String),
}

impl Who {
    fn parse(s: &str) -> Self {
        match s {
            "*" => Self::Authenticated,
            "anonymous" => Self::Anonymous,
            other => Self::Named(other.to_owned()),
        }
    }

    fn matches(&self, id: &Identity) -> bool {
        match (self, id) {
            (Self::Authenticated, Identity::Named(_)) => true,
            (Self::Anonymous, Identity::Anonymous) => true,
            (Self::Named(want), Identity::Named(n)) => want == n,
            _ => false,
        }
    }
}

#[derive(Debug, Clone)]
struct Rule {
    who: Who,
    names: Vec<NamePattern>,
    verbs: Vec<Verb>,
}

/// A parsed policy file.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// sha256 (lower-case hex) of a token → its identity.
    tokens: HashMap<String, String>,
    rules: Vec<Rule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    token: Vec<TokenEntry>,
    #[serde(default)]
    allow: Vec<AllowEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    identity: String,
    sha256: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AllowEntry {
    identity: String,
    names: Vec<String>,
    verbs: Vec<Verb>,
}

impl Policy {
    /// Parses a policy file's text.
    ///
    /// # Errors
    /// A sentence naming what is wrong: TOML, an unknown key or verb, a token hash that is not
    /// 64 hex digits, a token identity of `*`/`anonymous`, the same hash twice, a bad pattern.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut tokens = HashMap::new();
        for t in file.token {
            let hash = t.sha256.trim().to_ascii_lowercase();
            if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "[[token]] for {:?}: sha256 must be 64 hex digits (`printf %s TOKEN | sha256sum`)",
                    t.identity
                ));
            }
            if t.identity.is_empty() || t.identity == "*" || t.identity == "anonymous" {
                return Err(format!(
                    "[[token]]: identity {:?} is reserved or empty",
                    t.identity
                ));
            }
            if tokens.insert(hash, t.identity.clone()).is_some() {
                return Err(format!(
                    "[[token]] for {:?}: the same sha256 appears twice",
                    t.identity
                ));
            }
        }
        let mut rules = Vec::new();
        for a in file.allow {
            if a.identity.is_empty() {
                return Err("[[allow]]: empty identity".to_owned());
            }
            let names = a
                .names
                .iter()
                .map(|n| NamePattern::parse(n))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("[[allow]] for {:?}: {e}", a.identity))?;
            rules.push(Rule {
                who: Who::parse(&a.identity),
                names,
                verbs: a.verbs,
            });
        }
        Ok(Self { tokens, rules })
    }

    /// The identity of a bearer token, by the sha256 of the token; `None`: no `[[token]]`
    /// matches (the caller is `UNAUTHENTICATED`).
    pub fn token_identity(&self, token: &str) -> Option<&str> {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        self.tokens
            .get(&super::lease_key::hex_encode(digest.as_ref()))
            .map(String::as_str)
    }

    /// Whether `identity` may do `verb` on `name`: some rule for it names both. The hook for
    /// every check, ObserveMany's filter included.
    pub fn allows(&self, identity: &Identity, verb: Verb, name: &str) -> bool {
        self.rules.iter().any(|r| {
            r.who.matches(identity)
                && r.verbs.contains(&verb)
                && r.names.iter().any(|p| p.matches(name))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// sha256("billing-token")
    fn billing_hash() -> String {
        let d = ring::digest::digest(&ring::digest::SHA256, b"billing-token");
        super::super::lease_key::hex_encode(d.as_ref())
    }

    fn policy() -> Policy {
        Policy::parse(&format!(
            r#"
            [[token]]
            identity = "billing"
            sha256 = "{}"
            [[allow]]
            identity = "billing"
            names = ["billing.*", "cron"]
            verbs = ["campaign", "lock"]
            [[allow]]
            identity = "*"
            names = ["*"]
            verbs = ["observe"]
            [[allow]]
            identity = "anonymous"
            names = ["public"]
            verbs = ["observe", "lock"]
            [[allow]]
            identity = "spiffe://prod/ops"
            names = ["*"]
            verbs = ["campaign", "lock", "observe"]
            "#,
            billing_hash().to_uppercase()
        ))
        .unwrap()
    }

    #[test]
    fn decisions() {
        let p = policy();
        let billing = Identity::Named("billing".into());
        let ops = Identity::Named("spiffe://prod/ops".into());
        let other = Identity::Named("search".into());
        let anon = Identity::Anonymous;
        use Verb::*;
        // (identity, verb, name, allowed)
        let table = [
            (&billing, Campaign, "billing.db", true),
            (&billing, Lock, "billing.", true),
            (&billing, Lock, "cron", true),
            (&billing, Lock, "cron2", false),
            (&billing, Campaign, "billingx", false),
            (&billing, Campaign, "search.db", false),
            (&billing, Observe, "search.db", true),
            (&other, Observe, "anything", true),
            (&other, Campaign, "billing.db", false),
            (&other, Lock, "public", false),
            (&anon, Observe, "public", true),
            (&anon, Lock, "public", true),
            (&anon, Observe, "billing.db", false),
            (&anon, Campaign, "public", false),
            (&ops, Campaign, "billing.db", true),
            (&ops, Observe, "x", true),
        ];
        for (id, verb, name, want) in table {
            assert_eq!(p.allows(id, verb, name), want, "{id} {verb} {name}");
        }
        assert!(
            !Policy::default().allows(&anon, Observe, "x"),
            "empty: nothing"
        );
    }

    #[test]
    fn tokens_by_hash() {
        let p = policy();
        assert_eq!(p.token_identity("billing-token"), Some("billing"));
        assert_eq!(p.token_identity("billing-token "), None);
        assert_eq!(p.token_identity(""), None);
    }

    #[test]
    fn bad_files_say_why() {
        let h = billing_hash();
        // (text, the error mentions)
        let table = [
            ("[[allow]]\nidentity = \"a\"\nnames = [\"x\"]\nverbs = [\"write\"]\n", "write"),
            ("[[allow]]\nidentity = \"a\"\nnames = [\"x\"]\nverbs = []\nextra = 1\n", "extra"),
            ("[[allow]]\nidentity = \"a\"\nnames = [\"x*y\"]\nverbs = []\n", "only at the end"),
            ("[[allow]]\nidentity = \"a\"\nnames = [\"*x*\"]\nverbs = []\n", "only at the end"),
            ("[[allow]]\nidentity = \"a\"\nnames = [\"\"]\nverbs = []\n", "empty name"),
            ("[[token]]\nidentity = \"a\"\nsha256 = \"abc\"\n", "64 hex"),
            (&format!("[[token]]\nidentity = \"*\"\nsha256 = \"{h}\"\n"), "reserved"),
            (
                &format!("[[token]]\nidentity = \"a\"\nsha256 = \"{h}\"\n[[token]]\nidentity = \"b\"\nsha256 = \"{h}\"\n"),
                "twice",
            ),
            ("[[allow]\n", "TOML"),
            ("[[rule]]\n", "rule"),
        ];
        for (text, want) in table {
            let e = Policy::parse(text).unwrap_err();
            assert!(
                e.contains(want) || (want == "TOML" && !e.is_empty()),
                "{text:?}: {e}"
            );
        }
        assert!(
            Policy::parse("").is_ok(),
            "an empty policy denies everything"
        );
    }
}
