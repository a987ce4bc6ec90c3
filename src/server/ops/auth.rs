//! Optional bearer-token authentication.
//!
//! Tokens live in a file, one per line (blank lines and `#` comments are
//! skipped). A background task looks at the file once a second and re-reads
//! it when its modification time, size or inode changes, so tokens can be
//! rotated without a restart. Requests only read the current set: no
//! request waits on another, or on the file system. A presented token is
//! looked up by its keyed BLAKE3 digest (the key made from the tokens in
//! force, so unknown to a client that holds none), in time independent of
//! how many tokens there are and of where it differs from any of them.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};

/// How often the token file is checked for changes.
pub(crate) const RECHECK: Duration = Duration::from_secs(1);

/// What identifies a version of the token file: modification time, size
/// and inode (a file replaced by a rename of the same size and second).
type Stamp = (Option<SystemTime>, u64, u64);

type Set = Arc<InForce>;

/// The tokens in force, as their digests under `lookup_key`, and the key
/// URLs are signed with, made from them once when they are read (not per
/// signature: a reconstruction signs a URL for each of up to 16,384
/// xorbs). Never printed.
struct InForce {
    digests: HashSet<[u8; 32]>,
    lookup_key: [u8; 32],
    signing_key: [u8; 32],
}

impl std::fmt::Debug for InForce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InForce {{ {} tokens }}", self.digests.len())
    }
}

impl InForce {
    fn new(tokens: HashSet<Vec<u8>>) -> Self {
        let mut sorted: Vec<&Vec<u8>> = tokens.iter().collect();
        sorted.sort();
        let mut h = blake3::Hasher::new_derive_key("ztserve 2026-11 signed URLs");
        for t in sorted {
            h.update(&(t.len() as u64).to_le_bytes());
            h.update(t);
        }
        let signing_key = *h.finalize().as_bytes();
        let lookup_key = blake3::derive_key("ztserve 2026-12 token lookup", &signing_key);
        let digests = tokens
            .iter()
            .map(|t| *blake3::keyed_hash(&lookup_key, t).as_bytes())
            .collect();
        InForce {
            digests,
            lookup_key,
            signing_key,
        }
    }

    /// Whether `token` is one of the tokens in force. The lookup's time
    /// depends on the token's keyed digest alone, which says nothing of
    /// the tokens to one who does not hold the key.
    fn holds(&self, token: &[u8]) -> bool {
        let digest = blake3::keyed_hash(&self.lookup_key, token);
        self.digests.contains(digest.as_bytes())
    }

    fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }
}

/// The set of valid tokens, backed by a file.
#[derive(Debug)]
pub struct Tokens {
    path: PathBuf,
    /// The set in force; requests clone the `Arc` and let go at once.
    current: RwLock<Set>,
    /// The file version `current` was read from; only the reloader takes it.
    stamp: Mutex<Stamp>,
}

fn stamp(meta: &std::fs::Metadata) -> Stamp {
    (meta.modified().ok(), meta.len(), meta.ino())
}

fn read(path: &Path) -> Result<(HashSet<Vec<u8>>, Stamp)> {
    let meta = std::fs::metadata(path).with_context(|| format!("token file {}", path.display()))?;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading token file {}", path.display()))?;
    let tokens = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.as_bytes().to_vec())
        .collect();
    Ok((tokens, stamp(&meta)))
}

/// Compares without an early exit, so timing does not reveal a prefix
/// (of a URL's signature).
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Tokens {
    /// Loads the token file; an unreadable or empty file is an error.
    pub fn load(path: &Path) -> Result<Self> {
        let (tokens, stamp) = read(path)?;
        if tokens.is_empty() {
            anyhow::bail!("token file {} holds no tokens", path.display());
        }
        Ok(Tokens {
            path: path.to_owned(),
            current: RwLock::new(Arc::new(InForce::new(tokens))),
            stamp: Mutex::new(stamp),
        })
    }

    /// Re-reads the file if it changed since it was last read. Blocking
    /// file I/O: the reloader calls it off the runtime's threads.
    pub(crate) fn refresh(&self) {
        let Ok(mut last) = self.stamp.lock() else {
            return;
        };
        let now = std::fs::metadata(&self.path).ok().map(|m| stamp(&m));
        if now == Some(*last) {
            return;
        }
        match read(&self.path) {
            Ok((tokens, stamp)) => {
                tracing::info!(file = %self.path.display(), tokens = tokens.len(), "token file reloaded");
                let in_force = Arc::new(InForce::new(tokens));
                if let Ok(mut c) = self.current.write() {
                    *c = in_force;
                }
                *last = stamp;
            }
            // Keep the last good set: a half-written file must not lock everyone out.
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "cannot reload the token file; keeping the previous tokens")
            }
        }
    }

    /// Whether an `Authorization` header value carries a valid bearer token.
    pub fn allows(&self, authorization: Option<&str>) -> bool {
        let Some(token) = authorization.and_then(|v| {
            let (scheme, rest) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        }) else {
            return false;
        };
        let Some(set) = self.current.read().ok().map(|c| Arc::clone(&c)) else {
            return false;
        };
        set.holds(token.as_bytes())
    }

    /// The signature of `message` (a URL the daemon hands out in place
    /// of a token: the Xet protocol's xorb URLs, fetched without one):
    /// keyed BLAKE3, keyed by the tokens in force, so every replica given
    /// the same file signs alike and a rotation voids what was signed
    /// before it.
    pub(crate) fn sign(&self, message: &[u8]) -> String {
        let mac = blake3::keyed_hash(&self.signing_key(), message);
        mac.to_hex()[..32].to_owned()
    }

    /// Whether `signature` is [`Tokens::sign`]'s of `message`, compared in
    /// time independent of where they differ. Never, without tokens (a
    /// key made of none would be anyone's).
    pub(crate) fn signed(&self, message: &[u8], signature: &str) -> bool {
        let any = self.current.read().is_ok_and(|c| !c.is_empty());
        any && same(self.sign(message).as_bytes(), signature.as_bytes())
    }

    fn signing_key(&self) -> [u8; 32] {
        self.current
            .read()
            .map(|c| c.signing_key)
            .unwrap_or_else(|_| InForce::new(HashSet::new()).signing_key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_follow_the_tokens() {
        let dir = std::env::temp_dir().join(format!("zt-sign-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("tokens");
        std::fs::write(&f, "alpha\nbeta\n").unwrap();
        let t = Tokens::load(&f).unwrap();
        let sig = t.sign(b"/xet/a\n1");
        assert!(t.signed(b"/xet/a\n1", &sig));
        assert!(!t.signed(b"/xet/b\n1", &sig));
        assert!(!t.signed(b"/xet/a\n1", &sig[1..]));
        // Another set of tokens signs otherwise.
        std::fs::write(&f, "gamma\n").unwrap();
        let other = Tokens::load(&f).unwrap();
        assert!(!other.signed(b"/xet/a\n1", &sig));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tokens_and_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        std::fs::write(&f, "# comment\n\nalpha\n beta \n").unwrap();
        let t = Tokens::load(&f).unwrap();
        assert!(t.allows(Some("Bearer alpha")));
        assert!(t.allows(Some("bearer beta")));
        assert!(!t.allows(Some("Bearer alph")));
        assert!(!t.allows(Some("Basic alpha")));
        assert!(!t.allows(None));
        let signed = t.sign(b"/xet/a\n1");
        std::fs::write(&f, "gamma-longer\n").unwrap();
        t.refresh();
        assert!(t.allows(Some("Bearer gamma-longer")));
        assert!(!t.allows(Some("Bearer alpha")));
        // The rotation made a new signing key: what was signed is void.
        assert!(!t.signed(b"/xet/a\n1", &signed));
        assert!(t.signed(b"/xet/a\n1", &t.sign(b"/xet/a\n1")));
        std::fs::write(&f, "").unwrap();
        assert!(Tokens::load(&f).is_err());
    }

    #[test]
    fn a_token_is_found_among_a_hundred_thousand() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        let text: String = (0..100_000).map(|i| format!("token-{i:06}\n")).collect();
        std::fs::write(&f, text).unwrap();
        let t = Tokens::load(&f).unwrap();
        for i in [0, 1, 54_321, 99_999] {
            assert!(t.allows(Some(&format!("Bearer token-{i:06}"))), "{i}");
        }
        for bad in [
            "token-100000",
            "token-00000",
            "token-0000000",
            "",
            "token-000001 ",
        ] {
            assert!(!t.allows(Some(&format!("Bearer {bad}x"))), "{bad}");
        }
        assert!(!t.allows(Some("Bearer")));
    }
}
