//! Advisory locks that keep two fetches from writing one output at once:
//! a fetch's journal (one file) and a sharded fetch's staging folder are
//! each held under an exclusive `flock` for as long as the fetch writes
//! there, and a second fetch finding one held fails at once, naming it,
//! instead of removing or moving the first one's files under it. The
//! lock goes with the last handle, so a fetch that is stopped or dies
//! leaves none behind. Blocking calls: made on blocking threads.

use std::fs::File;
use std::io;
use std::path::Path;

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
    let failed = |why: String| {
        Error::io(
            format!("locking {}", path.display()),
            io::Error::new(io::ErrorKind::WouldBlock, why),
        )
    };
    for _ in 0..3 {
        let file = open()?;
        if lock(&file, path).map_err(|held| {
            held.map_or_else(
                || {
                    failed(format!(
                        "{holder} holds it: wait for that one to end, or stop it"
                    ))
                },
                |e| Error::io(format!("locking {}", path.display()), e),
            )
        })? {
            return Ok(file);
        }
    }
    Err(failed("it was replaced each time it was opened".to_owned()))
}

/// Takes `file`'s exclusive lock without waiting: whether `path` still
/// names `file` then. `Err(None)`: another holds it.
fn lock(file: &File, path: &Path) -> std::result::Result<bool, Option<io::Error>> {
    use rustix::fs::{flock, FlockOperation};
    use rustix::io::Errno;
    use std::os::unix::fs::MetadataExt as _;
    match flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(Errno::WOULDBLOCK) => return Err(None),
        // A filesystem without locks (some network ones): unlocked, as
        // before there were locks.
        Err(e @ (Errno::NOLCK | Errno::NOTSUP)) => {
            tracing::debug!(path = %path.display(), error = %e, "not locked");
        }
        Err(e) => return Err(Some(e.into())),
    }
    let here = file.metadata().map_err(Some)?;
    Ok(std::fs::symlink_metadata(path)
        .is_ok_and(|m| (m.dev(), m.ino()) == (here.dev(), here.ino())))
}
