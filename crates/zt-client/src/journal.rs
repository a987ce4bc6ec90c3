//! A fetch's journal, `OUT.part.journal`: a header line naming what is
//! being fetched (the remote ETag, the selection, the layout), then one
//! line, `OBJECT\tCOMPONENT`, for each component whose bytes are in the
//! part file. A line is appended after its component's bytes are written,
//! in one write, so a crash leaves it whole or absent; a resumed fetch
//! checks every component its journal names against its digest again
//! anyway. Every call here blocks: the fetch makes them on blocking
//! threads.
//!
//! The journal is also the fetch's lock ([`crate::lock`]), held from its
//! first read to the rename of the finished file: a second fetch into
//! the same output (a second terminal, a retry while the first still
//! ends) fails at once instead of removing or renaming the first one's
//! partial file under it.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The components a journal names: (object, component).
pub(crate) type Entries = HashSet<(String, String)>;

/// A fetch's journal, open to read and append.
pub(crate) struct Journal {
    file: File,
    path: PathBuf,
    /// Whether it held nothing when opened (this fetch made it).
    fresh: bool,
}

impl Journal {
    /// Opens (or creates) the journal at `path` as the fetch's own
    /// ([`crate::own::open_own`]: never through a link or a FIFO planted
    /// there, which would be cut to nothing or block), and reads the
    /// components it names if its header is `header`; locked (see the
    /// module docs) until dropped.
    pub(crate) fn open(path: &Path, header: &str) -> Result<(Self, Option<Entries>)> {
        let file = crate::lock::open_locked(path, "another fetch into the same output", || {
            crate::own::open_own(
                path,
                OpenOptions::new().read(true).create(true).append(true),
                rustix::fs::OFlags::empty(),
            )
            .map_err(|e| writing(path, e))
        })?;
        let fresh = file.metadata().map(|m| m.len() == 0).unwrap_or(false);
        let entries = if fresh { None } else { read(&file, header) };
        let journal = Journal {
            file,
            path: path.to_owned(),
            fresh,
        };
        Ok((journal, entries))
    }

    /// Empties the journal and writes `header`: the fetch starts over.
    pub(crate) fn start(&self, header: &str) -> Result<()> {
        self.file
            .set_len(0)
            .and_then(|()| (&self.file).write_all(format!("{header}\n").as_bytes()))
            .map_err(|e| writing(&self.path, e))
    }

    /// Appends that `component` of `object` is in the part file, once
    /// its bytes are written: one write, so a crash leaves the line
    /// whole or absent.
    pub(crate) fn append(&self, object: &str, component: &str) -> Result<()> {
        (&self.file)
            .write_all(format!("{object}\t{component}\n").as_bytes())
            .map_err(|e| writing(&self.path, e))
    }

    /// Removes the journal if this fetch made it and wrote nothing to it
    /// (the fetch could not start): no empty journal is left behind.
    pub(crate) fn forget_if_fresh(&self) {
        let empty = self.file.metadata().map(|m| m.len() == 0).unwrap_or(false);
        if self.fresh && empty {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Removes the journal: the fetch is done, or nothing it names is
    /// worth resuming.
    pub(crate) fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn writing(path: &Path, e: io::Error) -> Error {
    Error::io(format!("writing {}", path.display()), e)
}

/// The components the journal open at `f` names, if its header is
/// `header` (it belongs to this fetch).
fn read(f: &File, header: &str) -> Option<Entries> {
    let mut lines = BufReader::new(f).lines();
    if lines.next()?.ok()? != header {
        return None;
    }
    Some(
        lines
            .map_while(io::Result::ok)
            .filter_map(|l| {
                l.split_once('\t')
                    .map(|(o, c)| (o.to_owned(), c.to_owned()))
            })
            .collect(),
    )
}
