//! Reading a manifest with positioned reads, without mapping the file: what
//! a server uses, so that a file truncated under it cannot raise SIGBUS.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::container::{self, Parsed};
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

/// Reads and validates the manifest of an open file with `pread`.
pub fn read_manifest_at(file: &File, label: &str, limits: &Limits) -> Result<FileManifest> {
    let at = || Location::file(label);
    let size = file
        .metadata()
        .map_err(|e| Error::io(at(), "reading file metadata", e))?
        .len();
    let mut head = [0u8; 8];
    let head_len = usize::try_from(size.min(8)).unwrap_or(0);
    let tail_len = size.min(16);
    let mut tail = [0u8; 16];
    let head_buf = head.get_mut(..head_len).unwrap_or_default();
    file.read_exact_at(head_buf, 0)
        .map_err(|e| Error::io(at(), "reading header", e))?;
    let tail_buf = tail
        .get_mut(..usize::try_from(tail_len).unwrap_or(0))
        .unwrap_or_default();
    file.read_exact_at(tail_buf, size.saturating_sub(tail_len))
        .map_err(|e| Error::io(at(), "reading footer", e))?;
    let loc = container::locate(label, size, head_buf, tail_buf, limits)?;
    let len = usize::try_from(loc.length).map_err(|_| {
        Error::io(
            at(),
            "reading manifest",
            std::io::Error::other("manifest larger than memory"),
        )
    })?;
    let mut raw = Vec::new();
    raw.try_reserve_exact(len).map_err(|_| {
        Error::io(
            at(),
            "reading manifest",
            std::io::Error::other("out of memory"),
        )
    })?;
    raw.resize(len, 0);
    file.read_exact_at(&mut raw, loc.offset)
        .map_err(|e| Error::io(at(), "reading manifest", e))?;
    let parsed = container::decode(label, &loc, &raw, limits)?;
    Ok(FileManifest { parsed, raw })
}

/// Reads and validates the header of an open file of any [`Source`] with
/// `pread`, through that source's read plan.
pub fn read_source_at(
    file: &File,
    source: Source,
    label: &str,
    limits: &Limits,
) -> Result<FileManifest> {
    let at = || Location::file(label);
    let size = file
        .metadata()
        .map_err(|e| Error::io(at(), "reading file metadata", e))?
        .len();
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
        file.read_exact_at(&mut buf, r.start)
            .map_err(|e| Error::io(at(), "reading the header", e))?;
        Ok(buf)
    })?;
    Ok(FileManifest {
        parsed: loaded.parsed,
        raw: loaded.raw,
    })
}
