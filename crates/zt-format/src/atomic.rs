//! Writing a file so that a crash never leaves one that looks complete:
//! write to a hidden temporary beside the target, sync, then rename.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Location, Result};

/// The temporary name used while `target` is being written: a dotfile ending
/// in `.tmp`, which servers and scanners ignore.
pub fn temp_path(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Runs `write` against a buffered temporary file, then renames it over
/// `target`. On any error the temporary is removed and `target` is untouched.
pub fn write_atomic<T>(
    target: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<T>,
) -> Result<T> {
    let label = target.display().to_string();
    let at = Location::file(&label);
    let tmp = temp_path(target);
    let result = (|| {
        let file =
            File::create(&tmp).map_err(|e| Error::io(at.clone(), "creating temporary file", e))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let value = write(&mut out)?;
        let file = out
            .into_inner()
            .map_err(|e| Error::io(at.clone(), "flushing output", e.into_error()))?;
        file.sync_all()
            .map_err(|e| Error::io(at.clone(), "syncing output", e))?;
        fs::rename(&tmp, target).map_err(|e| Error::io(at.clone(), "renaming into place", e))?;
        if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
            // Make the rename durable; not all filesystems allow syncing a directory.
            let _ = File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(value)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Flushes `w` (a helper for closures passed to [`write_atomic`]).
pub fn flush(w: &mut impl Write, label: &str) -> Result<()> {
    w.flush()
        .map_err(|e| Error::io(Location::file(label), "flushing output", e))
}
