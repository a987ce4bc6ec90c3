//! Reading a file's header with positioned reads, without mapping the
//! file: what a tool uses on a file that may change under it, so that a
//! file truncated meanwhile cannot raise SIGBUS. The read plan is the
//! source's [`Probe`]; this runs it with `pread`.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::error::{Error, Location, Result};
use crate::manifest::Source;
use crate::options::Limits;
use crate::source::{Loaded, Probe};

/// Reads and validates the header of an open file of any [`Source`] with
/// `pread`, through that source's read plan.
pub fn read_source_at(file: &File, source: Source, label: &str, limits: &Limits) -> Result<Loaded> {
    let at = || Location::file(label);
    let size = file
        .metadata()
        .map_err(|e| Error::io(at(), "reading file metadata", e))?
        .len();
    Probe::new(source, label, size, *limits).run(|r| {
        let len = usize::try_from(r.end.saturating_sub(r.start)).unwrap_or(usize::MAX);
        let mut buf = Vec::new();
        buf.try_reserve_exact(len)
            .map_err(|_| Error::reading_header(label, std::io::Error::other("out of memory")))?;
        buf.resize(len, 0);
        file.read_exact_at(&mut buf, r.start)
            .map_err(|e| Error::reading_header(label, e))?;
        Ok(buf)
    })
}
