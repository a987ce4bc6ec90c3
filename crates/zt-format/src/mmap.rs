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

use memmap2::{Mmap, MmapMut, MmapOptions};

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
        let file = crate::open_regular(path)?;
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

/// A whole file mapped private and copy-on-write, for handing cached
/// bytes to a caller without a copy: its pages are the page cache's
/// until the caller writes one, which then becomes this process's own;
/// the file never changes. Starts on a page boundary. The SIGBUS note
/// above applies (the client's cache replaces entries by rename and
/// removes them by unlink, never truncating one in place).
#[derive(Debug)]
pub struct PrivateMap {
    map: Option<MmapMut>,
}

impl PrivateMap {
    /// Maps `file` (an empty file gives an empty slice).
    pub fn open(file: &File) -> io::Result<Self> {
        let map = if file.metadata()?.len() == 0 {
            None
        } else {
            // SAFETY: as `map` above; the mapping is private, so writes
            // through it never reach the file.
            Some(unsafe { MmapOptions::new().map_copy(file) }?)
        };
        Ok(PrivateMap { map })
    }

    pub fn as_slice(&self) -> &[u8] {
        self.map.as_deref().unwrap_or_default()
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.map.as_deref_mut().unwrap_or_default()
    }
}
