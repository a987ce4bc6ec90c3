//! Reading and writing one entry: a whole file or none, checked on every
//! read. Blocking: callers run these on a blocking thread.

use std::fs::File;
use std::io::Read as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use zt_format::{AlignedBuf, Hasher};

use std::os::unix::fs::PermissionsExt as _;

use super::{seal, Cache, Key};

/// The folder new entries are written in before they are renamed into place.
pub(super) const TMP: &str = "tmp";

impl Cache {
    /// The entry at `key`, `len` bytes long, read and checked against its
    /// seal (`seal.rs`) or its digest: `None` when there is none;
    /// `Some(Err(why))` when there was one and it failed (it is removed, so
    /// the caller fetches again).
    pub(crate) fn get(&self, key: &Key, len: u64) -> Option<Result<AlignedBuf, String>> {
        self.read(key, len, true)
    }

    /// [`Cache::get`], checked against the digest whatever the seal says
    /// (`zt cache verify`).
    pub(super) fn get_hashed(&self, key: &Key, len: u64) -> Option<Result<AlignedBuf, String>> {
        self.read(key, len, false)
    }

    fn read(&self, key: &Key, len: u64, use_seal: bool) -> Option<Result<AlignedBuf, String>> {
        let path = self.dir().join(&key.rel);
        // A FIFO planted there would block a plain open: a miss.
        let mut file = zt_format::open_regular(&path).ok()?;
        let got = read_checked(&mut file, key, len, use_seal);
        if got.is_ok() {
            // The least recently used go first: this one was just used
            // (a check by `zt cache verify` is no use).
            if use_seal {
                let _ = file.set_modified(SystemTime::now());
            }
        } else {
            let _ = std::fs::remove_file(&path);
        }
        Some(got.map_err(|why| format!("cache entry {}: {why}", path.display())))
    }

    /// Whether an entry exists at `key` (it may still fail its check).
    pub(crate) fn has(&self, key: &Key) -> bool {
        self.dir().join(&key.rel).is_file()
    }

    /// Stores `bytes` at `key`: written beside the cache and renamed into
    /// place, so readers see all of it or nothing. Bytes larger than the
    /// whole cache are not stored. Failing to store is not an error of
    /// the fetch that delivered them: it is logged, and the fetch goes on.
    pub(crate) fn put(&self, key: &Key, bytes: &[u8]) {
        let len = bytes.len() as u64;
        if len > self.max_bytes() {
            return;
        }
        let path = self.dir().join(&key.rel);
        if let Ok(f) = zt_format::open_regular(&path) {
            // Stored already (by another file, or another process): used now.
            let _ = f.set_modified(SystemTime::now());
            return;
        }
        let tmp = self.dir().join(TMP).join(temp_name());
        let written = (|| {
            if let Some(parent) = path.parent() {
                super::private_dirs(parent)?;
            }
            crate::part::write_new(&tmp, bytes, self.inner.direct_io)?;
            // The user's alone whatever the umask (a seal is trusted only
            // on such an entry).
            let file = File::open(&tmp)?;
            match file.set_permissions(std::fs::Permissions::from_mode(0o600)) {
                Ok(()) => seal::put(&file, &key.digest, bytes),
                // A filesystem without modes: stored unsealed, hashed on
                // every read.
                Err(e) => {
                    tracing::debug!(entry = %path.display(), error = %e, "cache entry not sealed")
                }
            }
            std::fs::rename(&tmp, &path)
        })();
        match written {
            Ok(()) => self.stored(len),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                tracing::warn!(entry = %path.display(), error = %e, "not cached");
            }
        }
    }
}

/// `len` bytes of `file`, checked against the entry's seal (with
/// `use_seal`, where it has one it may trust: `seal.rs`) or `key`'s
/// digest: read and hashed a piece at a time, each piece hashed while it
/// is still in the CPU's cache. A private entry that passed its digest
/// without a seal (stored by an older client) is sealed then. An entry
/// named by a checksum (crc32c) is refused unless it is this user's
/// alone: a checksum is as easy to forge as a seal, so bytes someone
/// else wrote or could write would pass it.
fn read_checked(
    file: &mut File,
    key: &Key,
    len: u64,
    use_seal: bool,
) -> Result<AlignedBuf, String> {
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if meta.len() != len {
        return Err(format!("{} bytes where {len} were expected", meta.len()));
    }
    if key.digest.algorithm() == Some(zt_format::DigestAlgorithm::Crc32c) && !seal::private(&meta) {
        return Err(
            "named by a checksum (crc32c) and not this user's alone (another owner, writable by others, or linked elsewhere): not trusted"
                .to_owned(),
        );
    }
    let check = match use_seal {
        true => seal::check_for(file, &meta, &key.digest),
        false => seal::Check {
            digest: key.digest.clone(),
            sealed: false,
        },
    };
    let algorithm = check
        .digest
        .algorithm()
        .ok_or_else(|| format!("digest {} cannot be computed here", check.digest))?;
    let mut buf = AlignedBuf::zeroed(len).map_err(|r| r.to_string())?;
    let mut hasher = Hasher::new(algorithm);
    for piece in buf.as_mut_slice().chunks_mut(PIECE) {
        file.read_exact(piece).map_err(|e| e.to_string())?;
        hasher.update(piece);
    }
    check
        .digest
        .compare(&hasher.finish())
        .map_err(|rule| format!("{}: {rule}", rule.name()))?;
    if use_seal && !check.sealed && seal::private(&meta) {
        seal::put(file, &key.digest, buf.as_slice());
    }
    Ok(buf)
}

/// Bytes read and hashed at once.
const PIECE: usize = 1 << 20;

/// A name no other writer, in this process or another, uses at once.
fn temp_name() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    PathBuf::from(format!(
        "{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(bytes: &[u8]) -> Key {
        super::super::test_key(zt_format::DigestAlgorithm::Sha256, bytes)
    }

    #[test]
    fn stored_bytes_come_back_checked_and_corrupt_ones_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), 1 << 20).unwrap();
        let k = key(b"hello, weights");
        assert!(cache.get(&k, 14).is_none());
        cache.put(&k, b"hello, weights");
        let got = cache.get(&k, 14).unwrap().unwrap();
        assert_eq!(got.as_slice(), b"hello, weights");
        assert_eq!(got.as_slice().as_ptr() as usize % 64, 0);

        // One byte changed on disk: refused by the digest, and removed.
        let path = dir.path().join(&k.rel);
        std::fs::write(&path, b"hello, weighTs").unwrap();
        let why = cache.get(&k, 14).unwrap().unwrap_err();
        assert!(why.contains("digest"), "{why}");
        assert!(!path.exists());

        // Truncated: refused by its length before it is read.
        cache.put(&k, b"hello, weights");
        std::fs::write(&path, b"hello").unwrap();
        let why = cache.get(&k, 14).unwrap().unwrap_err();
        assert!(why.contains("5 bytes where 14"), "{why}");
        // Nothing is left half-written in the temporary folder.
        assert_eq!(std::fs::read_dir(dir.path().join(TMP)).unwrap().count(), 0);
    }

    /// An entry named by a checksum that others could have written (a
    /// forged crc32c is easy) is refused and removed, on a read and on
    /// `zt cache verify`; this user's own comes back. A verify leaves the
    /// entries' order of use as it was.
    #[test]
    fn a_checksum_named_entry_is_trusted_only_when_it_is_the_users_alone() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), 1 << 20).unwrap();
        let bytes = b"hello, weights";
        let k = super::super::test_key(zt_format::DigestAlgorithm::Crc32c, bytes);
        cache.put(&k, bytes);
        let path = dir.path().join(&k.rel);
        let old = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1 << 30);
        File::open(&path).unwrap().set_modified(old).unwrap();
        assert_eq!(cache.get_hashed(&k, 14).unwrap().unwrap().as_slice(), bytes);
        let touched = std::fs::metadata(&path).unwrap().modified().unwrap();
        assert_eq!(touched, old, "a verify counted as a use");
        assert_eq!(cache.get(&k, 14).unwrap().unwrap().as_slice(), bytes);
        for mode in [0o660, 0o606] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let why = cache.get(&k, 14).unwrap().unwrap_err();
            assert!(why.contains("not trusted"), "{why}");
            assert!(!path.exists());
            cache.put(&k, bytes);
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o664)).unwrap();
        let why = cache.get_hashed(&k, 14).unwrap().unwrap_err();
        assert!(why.contains("not trusted"), "{why}");
        assert!(!path.exists());
    }

    #[test]
    fn a_private_entry_is_read_against_its_seal_a_shared_one_against_its_digest() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), 1 << 20).unwrap();
        let k = key(b"hello, weights");
        cache.put(&k, b"hello, weights");
        let path = dir.path().join(&k.rel);
        let seal = rustix::fs::getxattr(&path, "user.ztserve.seal", &mut [0u8; 160][..]);
        let Ok(len) = seal else {
            eprintln!(
                "SKIPPED: {} keeps no user extended attributes",
                dir.path().display()
            );
            return;
        };
        assert!(len > 64, "the seal names the digest it vouches for");

        // A seal of other bytes: the private entry is refused by its seal
        // (its digest would have passed), and removed.
        let forged = format!(
            "{} {}",
            k.digest,
            zt_format::DigestAlgorithm::Crc32c.digest(b"x")
        );
        let flags = rustix::fs::XattrFlags::empty();
        rustix::fs::setxattr(&path, "user.ztserve.seal", forged.as_bytes(), flags).unwrap();
        let why = cache.get(&k, 14).unwrap().unwrap_err();
        assert!(why.contains("crc32c"), "{why}");
        assert!(!path.exists());

        // The same on an entry others may write: its seal is not trusted,
        // the digest is checked, and the bytes come back.
        cache.put(&k, b"hello, weights");
        rustix::fs::setxattr(&path, "user.ztserve.seal", forged.as_bytes(), flags).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o664)).unwrap();
        assert_eq!(
            cache.get(&k, 14).unwrap().unwrap().as_slice(),
            b"hello, weights"
        );

        // A seal for another digest (an entry renamed) is not this one's.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let other = format!(
            "{} {}",
            key(b"other").digest,
            zt_format::DigestAlgorithm::Crc32c.digest(b"x")
        );
        rustix::fs::setxattr(&path, "user.ztserve.seal", other.as_bytes(), flags).unwrap();
        assert_eq!(
            cache.get(&k, 14).unwrap().unwrap().as_slice(),
            b"hello, weights"
        );

        // An entry rewritten with a seal to match (what only the user
        // could do) passes a read; `zt cache verify` hashes it, and removes it.
        std::fs::write(&path, b"HELLO, weights").unwrap();
        let resealed = format!(
            "{} {}",
            k.digest,
            zt_format::DigestAlgorithm::Crc32c.digest(b"HELLO, weights")
        );
        rustix::fs::setxattr(&path, "user.ztserve.seal", resealed.as_bytes(), flags).unwrap();
        assert_eq!(
            cache.get(&k, 14).unwrap().unwrap().as_slice(),
            b"HELLO, weights"
        );
        let v = cache.verify().unwrap();
        assert_eq!(v.removed.len(), 1, "{:?}", v.removed);
        assert!(!path.exists());

        // An entry without a seal (an older client's) is sealed by the
        // first read that hashed it.
        cache.put(&k, b"hello, weights");
        rustix::fs::removexattr(&path, "user.ztserve.seal").unwrap();
        assert_eq!(
            cache.get(&k, 14).unwrap().unwrap().as_slice(),
            b"hello, weights"
        );
        assert!(rustix::fs::getxattr(&path, "user.ztserve.seal", &mut [0u8; 160][..]).is_ok());

        // Sealed as stored, a byte changed in place is caught by the seal.
        std::fs::remove_file(&path).unwrap();
        cache.put(&k, b"hello, weights");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| std::os::unix::fs::FileExt::write_at(&f, b"W", 7))
            .unwrap();
        let why = cache.get(&k, 14).unwrap().unwrap_err();
        assert!(why.contains("crc32c"), "{why}");
    }

    #[test]
    fn bytes_larger_than_the_cache_are_not_stored() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), 8).unwrap();
        let k = key(b"more than eight");
        cache.put(&k, b"more than eight");
        assert!(cache.get(&k, 15).is_none());
    }
}
