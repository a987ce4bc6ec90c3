//! Memory mapping: the one place in the project that uses `unsafe`.
//!
//! # The SIGBUS hazard
//! A mapping stays valid only while the file keeps its length. If another
//! process truncates a mapped file, touching a page past the new end raises
//! SIGBUS and kills the process; no Rust check can prevent it. So:
//! - map only files you control, or that are replaced by rename (a rename
//!   leaves the old inode, and the mapping, intact);
//! - a server that must survive in-place truncation reads bodies with
//!   `pread` instead (see [`crate::read_manifest_at`]), and maps nothing it serves.

#![allow(unsafe_code)]

use std::fs::File;
use std::io;

use memmap2::Mmap;

/// Maps `file` read-only.
pub(crate) fn map(file: &File) -> io::Result<Mmap> {
    // SAFETY: the mapping is read-only and private to this process. Its
    // validity depends on the file not being truncated while mapped; that
    // hazard is documented above and on `ZtFile::open`, whose callers accept it.
    unsafe { Mmap::map(file) }
}
