//! Opening a fetch's own files, its partial file and journal, in a
//! folder others may write: never through a link, never blocking on a
//! FIFO, and only a regular file of one name that is this user's.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens `path` as a fetch's own file (its partial file or journal):
/// never through a link planted in its place (it would write, at
/// offsets, into another file), never blocking on a FIFO planted there,
/// and refusing what is not a regular file of one name owned by this
/// user or by the folder's owner (and then not writable by others). A
/// partial file is renamed into place once verified, so one that another
/// user made (in a shared folder, where it cannot be removed) would stay
/// theirs to change after the check; the folder's owner may replace any
/// file there anyway (and on a filesystem that gives every file one
/// owner, the folder has it too).
pub(crate) fn open_own(
    path: &Path,
    options: &mut OpenOptions,
    flags: rustix::fs::OFlags,
) -> io::Result<File> {
    use rustix::io::Errno;
    use std::os::unix::fs::MetadataExt as _;
    let flags = flags | rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    let refused = |why: &str| io::Error::new(io::ErrorKind::PermissionDenied, why.to_owned());
    let file = match options.custom_flags(flags.bits() as i32).open(path) {
        Err(e) => {
            return Err(match Errno::from_io_error(&e) {
                Some(Errno::LOOP) => refused("a link, not this fetch's file: remove it"),
                // A FIFO no one reads (or a device that is not there).
                Some(Errno::NXIO) => refused("not a regular file: remove it"),
                _ => e,
            });
        }
        Ok(file) => file,
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refused("not a regular file: remove it"));
    }
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let me = rustix::process::geteuid().as_raw();
    let owners = [Some(me), std::fs::metadata(folder).ok().map(|m| m.uid())];
    let mine = meta.uid() == me;
    if !owners.contains(&Some(meta.uid())) {
        return Err(refused(
            "another user's file, not this fetch's (the folder is not theirs): remove it",
        ));
    }
    // Not a second name of a file elsewhere (a hard link to one of the
    // user's own), nor another's that others may write in place.
    if meta.nlink() != 1 {
        return Err(refused("a file with other names (a hard link): remove it"));
    }
    if !mine && meta.mode() & 0o022 != 0 {
        return Err(refused(
            "another user's file that others may write: remove it",
        ));
    }
    // Writes block as ever (some network filesystems would honour it).
    let now = rustix::fs::fcntl_getfl(&file)?;
    rustix::fs::fcntl_setfl(&file, now - rustix::fs::OFlags::NONBLOCK)?;
    Ok(file)
}
