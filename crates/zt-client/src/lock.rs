//! Advisory locks that keep two fetches from writing one output at once:
//! a fetch's journal (one file) and a sharded fetch's staging folder are
//! each held under an exclusive `flock` for as long as the fetch writes
//! there, and a second fetch finding one held fails at once, naming it,
//! instead of removing or moving the first one's files under it. The
//! lock goes with the last handle, so a fetch that is stopped or dies
//! leaves none behind. The lock is advisory and, on a network
//! filesystem, may be this machine's alone; a filesystem without locks
//! (Lustre mounted without `flock`) fetches unlocked, as before there
//! were locks, with a warning. Blocking calls: made on blocking threads.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};

/// Opens `path` with `open` and takes its lock; `holder` names, in the
/// error, what holds it when another does. A lock taken on a file no
/// longer at `path` (removed by the fetch that held it, as it ended) is
/// dropped and the open made again.
pub(crate) fn open_locked(
    path: &Path,
    holder: &str,
    open: impl Fn() -> Result<File>,
) -> Result<File> {
    let refused = |why: String| {
        Error::io(
            format!("locking {}", path.display()),
            io::Error::new(io::ErrorKind::WouldBlock, why),
        )
    };
    for _ in 0..3 {
        let file = open()?;
        match lock(&file, path) {
            Locked::Ours => return Ok(file),
            Locked::Replaced => continue,
            Locked::Held => {
                return Err(refused(format!(
                    "{holder} holds it: wait for that one to end, or stop it"
                )))
            }
            Locked::Failed(e) => return Err(Error::io(format!("locking {}", path.display()), e)),
        }
    }
    Err(refused(
        "it was replaced each time it was opened".to_owned(),
    ))
}

/// What taking a lock found.
enum Locked {
    /// Taken (or the filesystem has no locks), on the file `path` names.
    Ours,
    /// Taken, on a file no longer at `path`.
    Replaced,
    /// Another holds it.
    Held,
    Failed(io::Error),
}

/// Whether a filesystem without locks was warned of (once a process).
static UNLOCKED_WARNED: AtomicBool = AtomicBool::new(false);

/// Takes `file`'s exclusive lock without waiting.
fn lock(file: &File, path: &Path) -> Locked {
    use rustix::fs::{flock, FlockOperation};
    use rustix::io::Errno;
    use std::os::unix::fs::MetadataExt as _;
    match flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(Errno::WOULDBLOCK) => return Locked::Held,
        // No locks on this filesystem (NFS without a lock daemon, Lustre
        // without `flock`, some FUSE ones).
        Err(e @ (Errno::NOLCK | Errno::NOTSUP | Errno::NOSYS | Errno::INVAL)) => {
            if !UNLOCKED_WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    path = %path.display(),
                    error = %e,
                    "this filesystem has no locks: two fetches into one output are not kept apart"
                );
            }
        }
        Err(e) => return Locked::Failed(e.into()),
    }
    let here = match file.metadata() {
        Ok(m) => m,
        Err(e) => return Locked::Failed(e),
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if (m.dev(), m.ino()) == (here.dev(), here.ino()) => Locked::Ours,
        _ => Locked::Replaced,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn opener(path: &Path) -> Result<File> {
        File::open(path).map_err(|e| Error::io(format!("opening {}", path.display()), e))
    }

    /// A lock taken on a file no longer at the path is dropped and the
    /// open made again; one that never is there fails, naming the path;
    /// a lock held elsewhere fails naming its holder.
    #[test]
    fn a_lock_is_taken_on_the_file_the_path_names() {
        let dir = tempfile::tempdir().unwrap();
        let (at, elsewhere) = (dir.path().join("j"), dir.path().join("old"));
        std::fs::write(&at, b"").unwrap();
        std::fs::write(&elsewhere, b"").unwrap();
        let opens = Cell::new(0);
        let file = open_locked(&at, "the other", || {
            opens.set(opens.get() + 1);
            opener(if opens.get() == 1 { &elsewhere } else { &at })
        })
        .unwrap();
        assert_eq!(opens.get(), 2, "opened again");
        let e = open_locked(&at, "the other", || opener(&elsewhere)).unwrap_err();
        assert!(e.to_string().contains("locking"), "{e}");
        assert!(e.to_string().contains("replaced each time"), "{e}");
        let e = open_locked(&at, "the other fetch", || opener(&at)).unwrap_err();
        assert!(e.to_string().contains("the other fetch holds it"), "{e}");
        drop(file);
        assert!(open_locked(&at, "the other", || opener(&at)).is_ok());
    }
}
