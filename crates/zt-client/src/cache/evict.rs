//! The cache as a whole: its entries, least recently used first out when
//! it passes its bound, and a check of every entry (`zt cache`).
//! Blocking: callers run these on a blocking thread.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use zt_format::{Digest, DigestAlgorithm};

use super::store::TMP;
use super::{Cache, Key};

/// A temporary file older than this was left by a writer that died.
const STALE_TMP: Duration = Duration::from_secs(3600);

/// One cached component.
#[derive(Debug, Clone)]
pub struct Entry {
    pub path: PathBuf,
    /// The digest it is named by and checked against.
    pub digest: Digest,
    pub len: u64,
    /// When it was last stored or read.
    pub used: SystemTime,
}

/// What [`Cache::prune`] removed, and what is left.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub removed: usize,
    pub freed: u64,
    pub left: u64,
}

/// What [`Cache::verify`] found.
#[derive(Debug, Clone, Default)]
pub struct Verified {
    pub checked: usize,
    pub bytes: u64,
    /// Entries that failed their digest, removed, and why.
    pub removed: Vec<(PathBuf, String)>,
}

impl Cache {
    /// Every entry, in no particular order. Files that are no entry
    /// (unknown names) are left out, and left alone.
    pub fn entries(&self) -> std::io::Result<Vec<Entry>> {
        let mut out = Vec::new();
        for algorithm in DigestAlgorithm::ALL {
            let top = self.dir().join(algorithm.name());
            let Ok(fans) = std::fs::read_dir(&top) else {
                continue;
            };
            for fan in fans.flatten() {
                let Ok(files) = std::fs::read_dir(fan.path()) else {
                    continue;
                };
                for f in files.flatten() {
                    let (path, meta) = match f.metadata() {
                        Ok(m) if m.is_file() => (f.path(), m),
                        _ => continue,
                    };
                    let Some(digest) = digest_of(algorithm, &path) else {
                        continue;
                    };
                    out.push(Entry {
                        path,
                        digest,
                        len: meta.len(),
                        used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    });
                }
            }
        }
        Ok(out)
    }

    /// The bytes the entries hold, and the temporary files beside them,
    /// once those a dead writer left are gone ([`STALE_TMP`]): each
    /// process's first store scans, so what a killed fetch left goes
    /// then, not only once the cache is past its bound.
    pub(super) fn scan_size(&self) -> u64 {
        self.remove_stale_tmp();
        let tmp: u64 = std::fs::read_dir(self.dir().join(TMP))
            .map(|files| {
                files
                    .flatten()
                    .filter_map(|f| f.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        let entries: u64 = self
            .entries()
            .map(|e| e.iter().map(|e| e.len).sum())
            .unwrap_or(0);
        entries.saturating_add(tmp)
    }

    /// Removes the least recently used entries until the rest hold at
    /// most `max_bytes`, and temporary files writers left behind.
    pub fn prune(&self, max_bytes: u64) -> std::io::Result<Pruned> {
        self.remove_stale_tmp();
        let mut entries = self.entries()?;
        let mut left: u64 = entries.iter().map(|e| e.len).sum();
        entries.sort_by_key(|e| e.used);
        let mut p = Pruned::default();
        for e in entries {
            if left <= max_bytes {
                break;
            }
            if std::fs::remove_file(&e.path).is_ok() {
                p.removed += 1;
                p.freed += e.len;
            }
            // Gone either way (another process may have pruned it).
            left = left.saturating_sub(e.len);
        }
        p.left = left;
        Ok(p)
    }

    /// Reads every entry and checks it against the digest it is named
    /// by (not its seal); those that fail are removed.
    pub fn verify(&self) -> std::io::Result<Verified> {
        let mut v = Verified::default();
        for e in self.entries()? {
            let Ok(rel) = e.path.strip_prefix(self.dir()) else {
                continue;
            };
            let key = Key {
                rel: rel.to_owned(),
                digest: e.digest.clone(),
            };
            match self.get_hashed(&key, e.len) {
                Some(Ok(_)) => {
                    v.checked += 1;
                    v.bytes += e.len;
                }
                Some(Err(why)) => v.removed.push((e.path, why)),
                // Removed by another process meanwhile.
                None => {}
            }
        }
        Ok(v)
    }

    fn remove_stale_tmp(&self) {
        let Ok(files) = std::fs::read_dir(self.dir().join(TMP)) else {
            return;
        };
        let now = SystemTime::now();
        for f in files.flatten() {
            let old = f
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).unwrap_or_default() > STALE_TMP);
            if old {
                let _ = std::fs::remove_file(f.path());
            }
        }
    }
}

/// The digest an entry's file name gives: the cryptographic hash itself,
/// or the checksum after the scope.
fn digest_of(algorithm: DigestAlgorithm, path: &Path) -> Option<Digest> {
    let name = path.file_name()?.to_str()?;
    match algorithm {
        DigestAlgorithm::Sha256 | DigestAlgorithm::Blake3 => {
            Digest::parse(&format!("{}:{name}", algorithm.name())).ok()
        }
        DigestAlgorithm::Crc32c => {
            let (_, crc) = name.rsplit_once('-')?;
            u32::from_str_radix(crc, 16).ok().map(Digest::from_crc32c)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(cache: &Cache, bytes: &[u8]) -> Key {
        let k = super::super::test_key(DigestAlgorithm::Sha256, bytes);
        cache.put(&k, bytes);
        k
    }

    #[test]
    fn the_bound_holds_and_the_least_recently_used_go_first() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), 3000).unwrap();
        let (a, b) = (vec![1u8; 1000], vec![2u8; 1000]);
        let ka = put(&cache, &a);
        std::thread::sleep(Duration::from_millis(20));
        let kb = put(&cache, &b);
        std::thread::sleep(Duration::from_millis(20));
        // Reading `a` makes `b` the least recently used.
        assert!(cache.get(&ka, 1000).unwrap().is_ok());
        std::thread::sleep(Duration::from_millis(20));
        let kc = put(&cache, &[3u8; 1500]);
        // 3,500 bytes passed 3,000: pruned to at most 2,700.
        let entries = cache.entries().unwrap();
        let total: u64 = entries.iter().map(|e| e.len).sum();
        assert!(total <= 2700, "{total} bytes left");
        assert!(
            cache.get(&kb, 1000).is_none(),
            "the least recently used went"
        );
        assert!(cache.get(&ka, 1000).is_some());
        assert!(cache.get(&kc, 1500).is_some());
    }

    #[test]
    fn what_a_dead_writer_left_goes_at_the_first_store() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), 1 << 20).unwrap();
        let (stale, fresh) = (
            dir.path().join(TMP).join("1-0-0"),
            dir.path().join(TMP).join("2-0-0"),
        );
        for f in [&stale, &fresh] {
            std::fs::write(f, vec![0u8; 1000]).unwrap();
        }
        let long_ago = SystemTime::now() - STALE_TMP * 2;
        std::fs::File::open(&stale)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        assert_eq!(
            cache.scan_size(),
            1000,
            "the fresh one counts, the stale one is gone"
        );
        assert!(!stale.exists() && fresh.exists());
        std::fs::remove_file(&fresh).unwrap();
        std::fs::write(&stale, vec![0u8; 1000]).unwrap();
        std::fs::File::open(&stale)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        put(&cache, b"good");
        assert!(!stale.exists(), "left by the first store's scan");
    }

    #[test]
    fn verify_names_and_removes_what_fails() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), 1 << 20).unwrap();
        put(&cache, b"good");
        let bad = put(&cache, b"soon bad");
        std::fs::write(dir.path().join(&bad.rel), b"soon BAD").unwrap();
        let v = cache.verify().unwrap();
        assert_eq!(v.checked, 1);
        assert_eq!(v.removed.len(), 1);
        assert!(v.removed[0].1.contains("digest"), "{:?}", v.removed);
        assert_eq!(cache.entries().unwrap().len(), 1);
        assert_eq!(cache.prune(0).unwrap().removed, 1);
        assert!(cache.entries().unwrap().is_empty());
    }
}
