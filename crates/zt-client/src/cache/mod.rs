//! A content-addressed cache of components on the client's disk, so that
//! the same bytes are never fetched twice.
//!
//! # What is reused where
//! - A component named by a **cryptographic digest** (sha256, blake3) is
//!   stored under that digest, `sha256/ab/abcd…` (`blake3/…`), and reused
//!   wherever the same digest appears: another file, another server,
//!   another version of the model, whoever attested the digest (the file
//!   or the server). The bytes are the ones that hashed to it when they
//!   arrived, and every read checks they are still those bytes (below).
//! - A component named only by a **checksum** (crc32c) is reused only for
//!   the same URL, ETag, object and component: a checksum says the bytes
//!   arrived intact, not which bytes they are. It is stored under a sha256
//!   of that scope, with the checksum in its name (`crc32c/ab/<scope>-<crc>`).
//! - A component without a digest, or with one this client cannot
//!   compute, is never cached; nor are rows and slices (they are parts),
//!   nor anything read from a local file.
//!
//! # On disk
//! One file per component holding exactly its stored bytes (compressed
//! for zstd), written to `tmp/` and renamed into place, so a reader sees
//! a whole file or none, and two processes storing the same component
//! leave one copy. Reads take no lock: an entry is opened, read and
//! checked, against its seal (a crc32c taken when it was stored, kept in
//! an extended attribute, `seal.rs`) where the entry is this user's alone,
//! else against the digest it is named by; one that fails is removed and
//! fetched again. Each read touches the entry's modification time;
//! past the size bound the least recently used entries are removed until
//! the cache is back under 90 % of it. An entry removed while another
//! process reads it stays readable to that process (an open file). The
//! folders are this user's alone (0700).

mod evict;
pub(crate) mod fetch;
mod map;
mod seal;
mod store;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest as _, Sha256};
use zt_format::{Digest, DigestValue};

pub use evict::{Entry, Pruned, Verified};
pub use map::Mapped;

/// The cache's size bound by default: 64 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 30;

/// The environment variable naming the cache's folder (`off` turns the
/// cache off).
pub const CACHE_ENV: &str = "ZTSERVE_CACHE";

/// The environment variable bounding the cache's size, in bytes (`K`,
/// `M`, `G` and `T` suffixes, powers of 1024).
pub const CACHE_MAX_ENV: &str = "ZTSERVE_CACHE_MAX";

/// A cache folder, cheap to clone (one per process is typical; several
/// processes may share the folder).
#[derive(Debug, Clone)]
pub struct Cache {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    max_bytes: u64,
    /// What this process believes the cache holds (other processes
    /// store in it too: rescanned every tenth of the bound stored here).
    usage: Mutex<Usage>,
    /// Store large entries with direct I/O ([`Cache::direct_io`]).
    direct_io: bool,
}

#[derive(Debug, Default)]
struct Usage {
    /// The bytes the cache held at the last scan, plus this process's
    /// stores since; `None` before the first scan.
    held: Option<u64>,
    /// Bytes this process stored since the last scan.
    since_scan: u64,
}

/// Where one component lives in the cache, and the digest it is checked
/// against when read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Key {
    pub(crate) rel: PathBuf,
    pub(crate) digest: Digest,
}

/// Where a component came from, for the entries only that place may reuse.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scope<'a> {
    pub(crate) url: &'a str,
    pub(crate) etag: &'a str,
    pub(crate) object: &'a str,
    pub(crate) component: &'a str,
}

impl Cache {
    /// The cache in `dir` (created when missing), bounded at `max_bytes`.
    pub fn open(dir: impl Into<PathBuf>, max_bytes: u64) -> std::io::Result<Cache> {
        let dir = dir.into();
        private_dirs(&dir.join(store::TMP))?;
        Ok(Cache {
            inner: Arc::new(Inner {
                dir,
                max_bytes,
                usage: Mutex::default(),
                direct_io: false,
            }),
        })
    }

    /// The cache the tools use unless told otherwise: `$ZTSERVE_CACHE`
    /// (`off`: none), else `$XDG_CACHE_HOME/ztserve`, else
    /// `~/.cache/ztserve`; bounded by `$ZTSERVE_CACHE_MAX` or
    /// [`DEFAULT_MAX_BYTES`]. `None` when it is off or no folder can be
    /// named (no home).
    pub fn default_dir() -> Option<PathBuf> {
        match std::env::var_os(CACHE_ENV) {
            Some(v) if v == "off" => None,
            Some(v) if !v.is_empty() => Some(PathBuf::from(v)),
            _ => std::env::var_os("XDG_CACHE_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
                .map(|base| base.join("ztserve")),
        }
    }

    /// The size bound `$ZTSERVE_CACHE_MAX` names, or [`DEFAULT_MAX_BYTES`].
    pub fn default_max_bytes() -> Result<u64, String> {
        match std::env::var(CACHE_MAX_ENV) {
            Ok(v) => parse_size(&v).map_err(|e| format!("{CACHE_MAX_ENV}={v:?}: {e}")),
            Err(_) => Ok(DEFAULT_MAX_BYTES),
        }
    }

    /// This cache, storing entries of 1 MiB or more with direct I/O where
    /// the filesystem allows it: no copy through the page cache and no
    /// writeback (what a bulk download such as `zt fetch` wants, as for its
    /// own output), but a later read of the entry comes from the disk.
    /// Off by default: a loader that reads the same weights again soon
    /// finds them in the page cache.
    pub fn direct_io(self, on: bool) -> Cache {
        let inner = &self.inner;
        Cache {
            inner: Arc::new(Inner {
                dir: inner.dir.clone(),
                max_bytes: inner.max_bytes,
                usage: Mutex::default(),
                direct_io: on,
            }),
        }
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The size bound, in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.inner.max_bytes
    }

    /// Where a component with `digest`, from `scope`, is cached: by the
    /// digest alone when it is cryptographic, by the scope and checksum
    /// otherwise; `None` when it cannot be (no digest this client computes).
    pub(crate) fn key(digest: &Digest, scope: Scope<'_>) -> Option<Key> {
        let rel = match digest.value() {
            DigestValue::Sha256(_) | DigestValue::Blake3(_) => {
                let (algorithm, hash) = digest.cryptographic()?;
                let hex = hex(hash);
                Path::new(algorithm).join(&hex[..2]).join(&hex)
            }
            DigestValue::Crc32c(crc) => {
                let mut h = Sha256::new();
                for part in [scope.url, scope.etag, scope.object, scope.component] {
                    h.update(part.as_bytes());
                    h.update([0]);
                }
                let hex = hex(&h.finalize());
                Path::new("crc32c")
                    .join(&hex[..2])
                    .join(format!("{hex}-{crc:08x}"))
            }
            DigestValue::Unknown { .. } => return None,
        };
        Some(Key {
            rel,
            digest: digest.clone(),
        })
    }

    /// Counts `len` bytes stored by this process; past the bound, prunes
    /// back to 90 % of it. The first store scans the folder, and so does
    /// every tenth of the bound stored since (other processes share the
    /// folder), and every pruning.
    fn stored(&self, len: u64) {
        let max = self.inner.max_bytes;
        let Ok(mut u) = self.inner.usage.lock() else {
            return;
        };
        u.since_scan = u.since_scan.saturating_add(len);
        let mut held = match u.held {
            Some(n) if u.since_scan <= max / 10 => n.saturating_add(len),
            _ => {
                u.since_scan = 0;
                self.scan_size()
            }
        };
        if held > max {
            if let Ok(p) = self.prune(max / 10 * 9) {
                held = p.left;
            }
            u.since_scan = 0;
        }
        u.held = Some(held);
    }
}

/// Creates `dir` and the folders above it that are missing, readable and
/// writable by this user alone: cached weights are the user's.
pub(super) fn private_dirs(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// A size in bytes: digits with an optional `K`, `M`, `G` or `T` (powers
/// of 1024, `B`/`iB` accepted after them).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 10),
        Some((i, 'M' | 'm')) => (&t[..i], 20),
        Some((i, 'G' | 'g')) => (&t[..i], 30),
        Some((i, 'T' | 't')) => (&t[..i], 40),
        _ => (t, 0),
    };
    let n: u64 = digits
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a size (bytes, or a number with K, M, G or T)"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// The key of `bytes` hashed with `algorithm`, in one file's scope (for
/// the store's and eviction's tests).
#[cfg(test)]
pub(crate) fn test_key(algorithm: zt_format::DigestAlgorithm, bytes: &[u8]) -> Key {
    let scope = Scope {
        url: "u",
        etag: "e",
        object: "o",
        component: "data",
    };
    Cache::key(&algorithm.digest(bytes), scope).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope<'a>(url: &'a str, etag: &'a str) -> Scope<'a> {
        Scope {
            url,
            etag,
            object: "w",
            component: "data",
        }
    }

    #[test]
    fn a_cryptographic_digest_is_its_own_key_a_checksum_is_scoped() {
        let sha = zt_format::DigestAlgorithm::Sha256.digest(b"abc");
        let a = Cache::key(&sha, scope("http://a/x.zt", "e1")).unwrap();
        let b = Cache::key(&sha, scope("quic://b/y.zt", "e2")).unwrap();
        assert_eq!(a, b, "sha256 is reused wherever it appears");
        assert!(a.rel.starts_with("sha256"));
        let blake = zt_format::DigestAlgorithm::Blake3.digest(b"abc");
        let a = Cache::key(&blake, scope("http://a/x.zt", "e1")).unwrap();
        let b = Cache::key(&blake, scope("quic://b/y.zt", "e2")).unwrap();
        assert_eq!(a, b, "blake3 is reused wherever it appears");
        assert!(a.rel.starts_with("blake3"));

        let crc = zt_format::DigestAlgorithm::Crc32c.digest(b"abc");
        let a = Cache::key(&crc, scope("http://a/x.zt", "e1")).unwrap();
        let same = Cache::key(&crc, scope("http://a/x.zt", "e1")).unwrap();
        let other_etag = Cache::key(&crc, scope("http://a/x.zt", "e2")).unwrap();
        let other_url = Cache::key(&crc, scope("http://b/x.zt", "e1")).unwrap();
        assert_eq!(a, same);
        assert_ne!(a, other_etag);
        assert_ne!(a, other_url);
        assert!(a.rel.starts_with("crc32c"));

        let unknown = Digest::parse("blake9:00").unwrap();
        assert!(Cache::key(&unknown, scope("http://a/x.zt", "e1")).is_none());
    }

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("123"), Ok(123));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1t"), Ok(1 << 40));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999T").is_err());
    }
}
