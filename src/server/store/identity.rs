//! What tells one version of a file from another: for a local file its
//! device, inode, size and times (an in-place rewrite of the same size
//! moves the change time, a replacement the inode), for an object its key,
//! ETag, size and time as listed. The catalog keys entries and the digest
//! store keys computed digests by it, and a reader asks whether the bytes
//! under an open file are still the version it opened
//! ([`Identity::same_bytes`]).

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::object_root::Listed;

/// What tells a changed file from an unchanged one between scans (and
/// keys the digest store): an in-place rewrite of the same size changes
/// the change time, a replacement the inode.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Identity {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) size: u64,
    pub(crate) mtime_ns: i128,
    pub(crate) ctime_ns: i128,
    /// The link count when it was taken: no part of the version (see
    /// [`Identity::same_bytes`]), so neither compared nor stored.
    #[serde(skip)]
    pub(crate) links: u64,
}

impl PartialEq for Identity {
    fn eq(&self, o: &Identity) -> bool {
        (self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns)
            == (o.dev, o.ino, o.size, o.mtime_ns, o.ctime_ns)
    }
}

impl Eq for Identity {}

impl Identity {
    pub(crate) fn bytes(&self) -> Vec<u8> {
        [
            &self.dev.to_le_bytes()[..],
            &self.ino.to_le_bytes(),
            &self.size.to_le_bytes(),
            &self.mtime_ns.to_le_bytes(),
            &self.ctime_ns.to_le_bytes(),
        ]
        .concat()
    }

    /// The device number that marks an object's identity (no device has it).
    const OBJECT: u64 = u64::MAX;

    /// An object's identity: its key and ETag (in place of the inode), its
    /// size and time as listed. The same on every replica, so the ETags
    /// made from it are too.
    pub(crate) fn of_object(l: &Listed) -> Self {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        h.update(l.key.as_bytes());
        h.update(b"\0");
        h.update(l.etag.as_deref().unwrap_or_default().as_bytes());
        let sum = h.finalize();
        let mut ino = [0u8; 8];
        ino.copy_from_slice(sum.get(..8).unwrap_or(&[0; 8]));
        // Whole seconds: a listing gives milliseconds on some stores, a
        // HEAD (an object listed again on its own) only seconds.
        let ns = l
            .modified
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| i128::from(d.as_secs()) * 1_000_000_000);
        Identity {
            dev: Self::OBJECT,
            ino: u64::from_le_bytes(ino),
            size: l.size,
            mtime_ns: ns,
            ctime_ns: 0,
            links: 1,
        }
    }

    /// Whether this identity names the same bytes on every replica (an
    /// object's version in a store, not a local file's inode and times),
    /// so that a tag made from it holds for good.
    pub(crate) fn is_shared(&self) -> bool {
        self.dev == Self::OBJECT
    }

    pub(crate) fn of(m: &Metadata) -> Self {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Identity {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
            links: m.nlink(),
        }
    }

    /// Whether an open file whose identity is now `now` still holds the
    /// bytes it held when this was taken. A write changes the change
    /// time, and the modification time unless it was set back (`rsync
    /// --inplace -t`); so does a truncation, which changes the size. The
    /// change time alone also moves when the file is renamed over or
    /// deleted (its link count drops), which leaves an open file's bytes
    /// as they were: only then are they taken as unchanged. (A chmod moves
    /// it too, and is taken as a change: a transfer cut for nothing, never
    /// wrong bytes.)
    pub(crate) fn same_bytes(&self, now: &Identity) -> bool {
        if now == self {
            return true;
        }
        (now.dev, now.ino, now.size, now.mtime_ns) == (self.dev, self.ino, self.size, self.mtime_ns)
            && now.links != self.links
    }
}

#[cfg(test)]
mod tests {
    use super::Identity;
    use std::io::Write;
    use std::os::unix::fs::{FileExt, PermissionsExt};

    /// Which changes to an open file's identity leave its bytes as they were.
    #[test]
    fn only_link_changes_keep_an_open_files_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let then = Identity::of(&f.metadata().unwrap());
        let now = || Identity::of(&f.metadata().unwrap());
        assert!(then.same_bytes(&now()));
        // A hard link; a rename over the path: links change, bytes do not.
        // (Two link changes that cancel out, between the catalog's look
        // and the check, read as a change: a transfer cut for nothing.)
        std::fs::hard_link(&path, dir.path().join("g")).unwrap();
        assert!(then.same_bytes(&now()), "linked");
        let then = now();
        let other = dir.path().join("other");
        std::fs::File::create(&other)
            .unwrap()
            .write_all(b"x")
            .unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert!(then.same_bytes(&now()), "renamed over");
        // A mode change: taken as a change (a transfer cut for nothing).
        let then = now();
        let mut mode = f.metadata().unwrap().permissions();
        mode.set_mode(0o600);
        f.set_permissions(mode).unwrap();
        assert!(!then.same_bytes(&now()), "chmod");
        // A write, then its modification time set back: a change.
        let then = now();
        let mtime = f.metadata().unwrap().modified().unwrap();
        f.write_all_at(b"x", 3).unwrap();
        f.set_modified(mtime).unwrap();
        assert!(!then.same_bytes(&now()), "written in place");
        // Deleted while open: the bytes stay.
        let then = now();
        std::fs::remove_file(dir.path().join("g")).unwrap();
        assert!(then.same_bytes(&now()), "unlinked");
    }
}
