//! The fleet key that signs leases (G9: a lease is a capability nobody can derive from what
//! ZooKeeper stores or shows).
//!
//! A lease names its znode (kind, queue, member name) — all of which any ZooKeeper user who can
//! list the queue, read `dump`, the AdminServer, the server's logs or a snapshot can see. What
//! makes it a capability is an HMAC-SHA256 tag over that text under a key that never touches
//! ZooKeeper: a gateway honours a lease only when the tag verifies under one of its keys.
//!
//! # Provisioning and rotation
//! `--lease-key-file FILE` (env `ZKGATE_LEASE_KEY_FILE`, TOML `lease_key_file`): one key per
//! line as hex, at least 32 bytes (`openssl rand -hex 32`); blank lines and `#` comments are
//! skipped. The first key signs, every key verifies. To rotate: prepend a new key on every
//! gateway (each then verifies both), then — once leases signed under the old key are no longer
//! needed (holders re-campaign, or a session timeout passed after the last restart) — remove
//! the old line. Every gateway of a fleet must have the same file, or a lease issued by one is
//! `NOT_FOUND` on another.
//!
//! # Without a key file
//! A random 256-bit key made once per process (logged as a warning at start): leases then work
//! only on the gateway that issued them (and in-process test fleets, which share the process).
//! The holder's own stream — its in-stream resign/release — never needs the lease, so this only
//! narrows by-lease `Resign`/`Release`/`Proclaim` to the issuing gateway; it never weakens G9.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// The shortest key accepted, in bytes (HMAC-SHA256's own output size).
pub const MIN_KEY_BYTES: usize = 32;

/// The keys that sign (the first) and verify (all) leases. Cheap to clone; never printed.
#[derive(Clone)]
pub struct LeaseKeys {
    keys: Arc<Vec<hmac::Key>>,
    /// Where the keys came from, for the start-up log: a path or "random per-process".
    origin: Arc<str>,
}

impl fmt::Debug for LeaseKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LeaseKeys({} key(s), {})", self.keys.len(), self.origin)
    }
}

/// A key file that cannot be used: the gateway refuses to start (never falls back to a random
/// key silently, which would break by-lease calls across the fleet).
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("reading the lease key file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("lease key file {path}, line {line}: {why} (one key per line, hex, at least {MIN_KEY_BYTES} bytes: `openssl rand -hex 32`)")]
    Bad {
        path: String,
        line: usize,
        why: &'static str,
    },
    #[error("lease key file {path} holds no key (one key per line, hex, at least {MIN_KEY_BYTES} bytes: `openssl rand -hex 32`)")]
    Empty { path: String },
}

impl LeaseKeys {
    /// Keys from raw bytes, the first signing (tests, and [`LeaseKeys::parse`]).
    ///
    /// # Panics
    /// On an empty list (a bug: every caller has at least one key).
    pub fn from_secrets<I: IntoIterator<Item = Vec<u8>>>(secrets: I, origin: &str) -> Self {
        let keys: Vec<hmac::Key> = secrets
            .into_iter()
            .map(|s| hmac::Key::new(hmac::HMAC_SHA256, &s))
            .collect();
        assert!(!keys.is_empty(), "at least one lease key");
        Self {
            keys: Arc::new(keys),
            origin: origin.into(),
        }
    }

    /// Parses a key file's text (see the module docs for the format).
    ///
    /// # Errors
    /// A line that is not hex, a key shorter than [`MIN_KEY_BYTES`], or no key at all.
    pub fn parse(text: &str, path: &str) -> Result<Self, KeyFileError> {
        let mut secrets = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why| KeyFileError::Bad {
                path: path.to_owned(),
                line: i + 1,
                why,
            };
            let bytes = hex_decode(line).ok_or_else(|| bad("not hex"))?;
            if bytes.len() < MIN_KEY_BYTES {
                return Err(bad("key too short"));
            }
            secrets.push(bytes);
        }
        if secrets.is_empty() {
            return Err(KeyFileError::Empty {
                path: path.to_owned(),
            });
        }
        Ok(Self::from_secrets(secrets, path))
    }

    /// Reads and parses `--lease-key-file`.
    ///
    /// # Errors
    /// See [`LeaseKeys::parse`]; an unreadable file.
    pub fn from_file(path: &Path) -> Result<Self, KeyFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| KeyFileError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::parse(&text, &shown)
    }

    /// The random key of this process, made once: every gateway started in this process without
    /// a key file shares it (in-process test fleets honour each other's leases); another process
    /// has another.
    pub fn per_process() -> Self {
        static KEY: OnceLock<LeaseKeys> = OnceLock::new();
        KEY.get_or_init(|| {
            let mut secret = vec![0u8; 32];
            SystemRandom::new()
                .fill(&mut secret)
                .expect("the system's random source");
            Self::from_secrets([secret], "random per-process key")
        })
        .clone()
    }

    /// Whether these keys were generated by this process (no `--lease-key-file`).
    pub fn is_per_process(&self) -> bool {
        Arc::ptr_eq(&self.keys, &Self::per_process().keys)
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The tag of `message` under the signing key.
    pub fn sign(&self, message: &[u8]) -> hmac::Tag {
        hmac::sign(&self.keys[0], message)
    }

    /// Whether `tag` is `message`'s tag under any key, compared in constant time.
    pub fn verify(&self, message: &[u8], tag: &[u8]) -> bool {
        self.keys
            .iter()
            .any(|k| hmac::verify(k, message, tag).is_ok())
    }
}

/// Lower- or upper-case hex to bytes; `None` for anything else.
pub(crate) fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

pub(crate) fn hex_encode(bytes: &[u8]) -> String {
    // By table, not `write!("{b:02x}")`: every queued stream's lease is encoded, and the
    // formatter's per-byte dispatch was 1 % of the gateway's CPU in W4 (docs/batching.md).
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0x0f)] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    const K2: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

    #[test]
    fn hex_is_lowercase_two_digits_per_byte_and_decodes_back() {
        assert_eq!(hex_encode(&[]), "");
        assert_eq!(hex_encode(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        let all: Vec<u8> = (0..=255).collect();
        let text = hex_encode(&all);
        let by_format: String = all.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(text, by_format);
        assert_eq!(hex_decode(&text), Some(all));
    }

    #[test]
    fn the_first_key_signs_and_every_key_verifies() {
        let old = LeaseKeys::parse(K1, "t").unwrap();
        let rotated = LeaseKeys::parse(&format!("# new first\n{K2}\n\n{K1}\n"), "t").unwrap();
        let retired = LeaseKeys::parse(K2, "t").unwrap();
        let msg = b"lease";
        let by_old = old.sign(msg);
        assert!(
            rotated.verify(msg, by_old.as_ref()),
            "old key still verifies"
        );
        assert!(
            !retired.verify(msg, by_old.as_ref()),
            "a retired key no longer verifies"
        );
        let by_new = rotated.sign(msg);
        assert!(retired.verify(msg, by_new.as_ref()), "the first key signs");
        assert!(!rotated.verify(b"other", by_new.as_ref()));
        assert!(
            !rotated.verify(msg, &by_new.as_ref()[..31]),
            "truncated tag"
        );
    }

    #[test]
    fn bad_key_files_are_refused() {
        // (text, what the error says)
        let table = [
            ("", "holds no key"),
            ("# only a comment\n", "holds no key"),
            ("zz", "not hex"),
            ("abc", "not hex"),
            ("00112233", "too short"),
        ];
        for (text, want) in table {
            let e = LeaseKeys::parse(text, "f").unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        assert!(!format!("{:?}", LeaseKeys::parse(K1, "f").unwrap()).contains("0011"));
    }

    #[test]
    fn the_per_process_key_is_one_key() {
        let a = LeaseKeys::per_process();
        assert!(a.is_per_process());
        assert!(LeaseKeys::per_process().verify(b"m", a.sign(b"m").as_ref()));
        assert!(!LeaseKeys::parse(K1, "f").unwrap().is_per_process());
    }
}
