//! Opening a file named by a path to read it, only if it is a regular
//! file. A FIFO put where a model was would block the open until someone
//! writes to it, and a device (`/dev/zero`) reads without end; neither is
//! a file of any format read here. One rule for the reader, the client's
//! caches and the daemon.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rustix::fs::OFlags;

/// What [`open_regular`] says of a path that is not a regular file.
pub const NOT_REGULAR: &str = "not a regular file (a FIFO, a device or a folder)";

/// Opens `path` to read if it is a regular file (through symlinks), and
/// fails with [`NOT_REGULAR`] (`InvalidInput`) otherwise, without
/// blocking on a FIFO. The handle's reads block as usual.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let refused = || io::Error::new(io::ErrorKind::InvalidInput, NOT_REGULAR);
    // Refused before any open where the path names no regular file:
    // opening a device can act on it (a tape rewinds).
    if !std::fs::metadata(path)?.is_file() {
        return Err(refused());
    }
    let nonblocking = OpenOptions::new()
        .read(true)
        .custom_flags(OFlags::NONBLOCK.bits() as i32)
        .open(path);
    let file = match nonblocking {
        // A regular file that another holds a lease on (a Samba oplock,
        // an NFS delegation) refuses a non-blocking open: waited for, as
        // any open waits for the lease to be given up.
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => File::open(path)?,
        opened => opened?,
    };
    // Checked again on the handle: the path may name another file now.
    if !file.metadata()?.is_file() {
        return Err(refused());
    }
    // Some network filesystems would honour the flag on reads.
    let now = rustix::fs::fcntl_getfl(&file)?;
    rustix::fs::fcntl_setfl(&file, now.difference(OFlags::NONBLOCK))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_open() {
        let dir = tempfile::tempdir().unwrap();
        let (file, fifo) = (dir.path().join("m.zt"), dir.path().join("fifo.zt"));
        std::fs::write(&file, b"bytes").unwrap();
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success(), "mkfifo");
        let opened = open_regular(&file).unwrap();
        let flags = rustix::fs::fcntl_getfl(&opened).unwrap();
        assert!(!flags.contains(OFlags::NONBLOCK), "reads block as usual");
        for bad in [fifo.as_path(), dir.path(), Path::new("/dev/zero")] {
            let e = open_regular(bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{}", bad.display());
            assert_eq!(e.to_string(), NOT_REGULAR);
        }
    }
}
