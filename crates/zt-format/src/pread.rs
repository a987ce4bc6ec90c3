//! Reading a manifest with positioned reads, without mapping the file: what
//! a server uses, so that a file truncated under it cannot raise SIGBUS.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::container::Parsed;
use crate::error::{Error, Location, Result};
use crate::manifest::Source;
use crate::options::Limits;
use crate::source::{self, Probe};

/// The manifest and the raw bytes it was decoded from.
#[derive(Debug, Clone)]
pub struct FileManifest {
    pub parsed: Parsed,
    /// The manifest's bytes exactly as stored (CBOR).
    pub raw: Vec<u8>,
}

/// Reads and validates the manifest of an open `.zt` file with `pread`.
pub fn read_manifest_at(file: &File, label: &str, limits: &Limits) -> Result<FileManifest> {
    read_source_at(file, Source::Zt, label, limits)
}

/// Reads and validates the header of an open file of any [`Source`] with
/// `pread`, through that source's read plan.
pub fn read_source_at(
    file: &File,
    source: Source,
    label: &str,
    limits: &Limits,
) -> Result<FileManifest> {
    let size = file
        .metadata()
        .map_err(|e| Error::io(Location::file(label), "reading file metadata", e))?
        .len();
    read_source_with(source, label, size, limits, |buf, pos| {
        file.read_exact_at(buf, pos)
    })
}

/// Reads and validates the header of a file of any [`Source`], `size`
/// bytes long, through that source's read plan, each read made with
/// `read_exact_at(buf, pos)` (filling `buf` from `pos`): a positioned
/// read of a local file, or a ranged GET of an object.
pub fn read_source_with(
    source: Source,
    label: &str,
    size: u64,
    limits: &Limits,
    mut read_exact_at: impl FnMut(&mut [u8], u64) -> std::io::Result<()>,
) -> Result<FileManifest> {
    let at = || Location::file(label);
    let probe = Probe::new(source, label, size, *limits);
    let loaded = source::read_with(probe, |r| {
        let len = usize::try_from(r.end.saturating_sub(r.start)).unwrap_or(usize::MAX);
        let mut buf = Vec::new();
        buf.try_reserve_exact(len).map_err(|_| {
            Error::io(
                at(),
                "reading the header",
                std::io::Error::other("out of memory"),
            )
        })?;
        buf.resize(len, 0);
        read_exact_at(&mut buf, r.start).map_err(|e| Error::io(at(), "reading the header", e))?;
        Ok(buf)
    })?;
    Ok(FileManifest {
        parsed: loaded.parsed,
        raw: loaded.raw,
    })
}
