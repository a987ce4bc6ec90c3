//! Memory mapping: the one place in the project that uses `unsafe`.
//!
//! # The SIGBUS hazard
//! A mapping stays valid only while the file keeps its length. If another
//! process truncates a mapped file, touching a page past the new end raises
//! SIGBUS and kills the process; no Rust check can prevent it. So:
//! - map only files you control, or that are replaced by rename (a rename
//!   leaves the old inode, and the mapping, intact);
//! - a server that must survive in-place truncation reads bodies with
//!   `pread` instead (it drives [`crate::source::Probe`] with its reads), and maps nothing it serves.

#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::ops::Deref;
use std::path::Path;

use memmap2::Mmap;

/// Maps `file` read-only.
pub(crate) fn map(file: &File) -> io::Result<Mmap> {
    // SAFETY: the mapping is read-only and private to this process. Its
    // validity depends on the file not being truncated while mapped; that
    // hazard is documented above and on `ZtFile::open`, whose callers accept it.
    unsafe { Mmap::map(file) }
}

/// A whole file mapped read-only, for readers of other formats (`zt pack`
/// reads safetensors this way). The SIGBUS note above applies.
#[derive(Debug)]
pub struct MappedFile {
    map: Option<Mmap>,
}

impl MappedFile {
    /// Maps `path`; an empty file gives an empty slice.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        let map = if file.metadata()?.len() == 0 {
            None
        } else {
            Some(map(&file)?)
        };
        Ok(MappedFile { map })
    }
}

impl Deref for MappedFile {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.map.as_deref().unwrap_or_default()
    }
}
