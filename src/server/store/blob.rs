//! Where a served file's bytes are: an open local file (read with
//! `pread` through the handle the catalog keeps), or one version of an
//! object in the store (read with ranged GETs pinned to the ETag it was
//! listed with, so a replaced object fails its reads as "changed on the
//! server" instead of mixing versions).
//!
//! Reads are blocking, for the blocking pool and the daemon's own threads
//! (the hasher, the verifier, scans): an object's GET runs on the
//! daemon's runtime while the calling thread waits.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;
use zt_format::{FileManifest, Limits, Source};

use crate::server::store::object_root::{ObjectRoot, StoreError};
use crate::server::store::READ_CHUNK;

/// A served file's bytes.
#[derive(Debug)]
pub enum Blob {
    File(File),
    Object(StoredObject),
}

/// One version of an object of an object-storage root.
#[derive(Debug, Clone)]
pub struct StoredObject {
    pub(crate) root: Arc<ObjectRoot>,
    /// Its path under the root.
    pub(crate) key: String,
    /// The version listed; `None` for a store that gives no ETags.
    pub(crate) etag: Option<String>,
}

impl StoredObject {
    /// Bytes `range`, all of them (through the piece cache), or the
    /// store's error as an I/O error.
    pub(crate) fn read(&self, range: Range<u64>) -> io::Result<Bytes> {
        self.root
            .read_cached(&self.key, self.etag.as_deref(), range)
            .map_err(io_error)
    }
}

/// A store's answer as an I/O error of the kind a local file gives.
pub(crate) fn io_error(e: StoreError) -> io::Error {
    let kind = match e {
        StoreError::NotFound { .. } => io::ErrorKind::NotFound,
        StoreError::Changed { .. } => io::ErrorKind::UnexpectedEof,
        StoreError::Config(_) | StoreError::Unreachable { .. } => io::ErrorKind::Other,
    };
    io::Error::new(kind, e.to_string())
}

impl Blob {
    /// Another handle on the same bytes.
    pub fn try_clone(&self) -> io::Result<Blob> {
        Ok(match self {
            Blob::File(f) => Blob::File(f.try_clone()?),
            Blob::Object(o) => Blob::Object(o.clone()),
        })
    }

    /// Fills `buf` from `pos` (blocking); `UnexpectedEof` if the bytes end
    /// first or the object changed.
    pub fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        match self {
            Blob::File(f) => f.read_exact_at(buf, pos),
            Blob::Object(o) => {
                let got = o.read(pos..pos.saturating_add(buf.len() as u64))?;
                buf.copy_from_slice(&got);
                Ok(())
            }
        }
    }

    /// The header of a file of `source`, `size` bytes long, read through
    /// the source's read plan: a `.zt` file's footer, then its manifest
    /// (two ranged GETs from a store); a safetensors file's length, then
    /// its JSON (two); GGUF and MATRIX-ATOM headers as their fields say.
    pub fn header(
        &self,
        source: Source,
        label: &str,
        size: u64,
        limits: &Limits,
    ) -> zt_format::Result<FileManifest> {
        zt_format::read_source_with(source, label, size, limits, |buf, pos| {
            self.read_exact_at(buf, pos)
        })
    }

    /// Reads `range` in pieces of [`READ_CHUNK`] bytes, in order, handing
    /// each to `f` (blocking); stops at the first error, a read's
    /// ("reading N bytes at POS: ...") or `f`'s. An object's pieces are
    /// fetched `storage.read_ahead` at a time and kept in the piece cache
    /// for the send that follows a digest check (`keep`).
    pub fn each_piece(
        &self,
        range: Range<u64>,
        keep: bool,
        mut f: impl FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        let file = match self {
            Blob::File(file) => file,
            Blob::Object(o) => {
                let etag = o.etag.as_deref();
                return o.root.each_piece(&o.key, etag, range, READ_CHUNK, keep, f);
            }
        };
        let len = READ_CHUNK.min(range.end.saturating_sub(range.start));
        let mut buf = vec![0u8; usize::try_from(len).unwrap_or(0)];
        let mut pos = range.start;
        while pos < range.end {
            let n = usize::try_from(READ_CHUNK.min(range.end - pos)).unwrap_or(0);
            let part = buf.get_mut(..n).unwrap_or_default();
            file.read_exact_at(part, pos)
                .map_err(|e| format!("reading {n} bytes at {pos}: {e}"))?;
            f(part)?;
            pos += n as u64;
        }
        Ok(())
    }

    /// The bytes of `range` as a reader (blocking), read [`READ_CHUNK`] at
    /// a time (an object's pieces then come from the piece cache where a
    /// digest check left them): what a streaming decoder reads from.
    pub(crate) fn reader(&self, range: Range<u64>) -> BlobReader<'_> {
        BlobReader {
            blob: self,
            pos: range.start,
            end: range.end,
            buf: Vec::new(),
            at: 0,
        }
    }

    /// Reads one reader keeps in flight: 1 for a local file (reads from
    /// the page cache or the disk gain nothing from more), the store's
    /// `storage.read_ahead` for an object.
    pub(crate) fn read_ahead(&self) -> usize {
        match self {
            Blob::File(_) => 1,
            Blob::Object(o) => o.root.read_ahead(),
        }
    }

    /// The local file, for reads that only a file can do (from the page
    /// cache without blocking).
    pub(crate) fn as_file(&self) -> Option<&File> {
        match self {
            Blob::File(f) => Some(f),
            Blob::Object(_) => None,
        }
    }
}

/// [`Blob::reader`]: a range of a served file's bytes as `Read`.
#[derive(Debug)]
pub(crate) struct BlobReader<'a> {
    blob: &'a Blob,
    /// The file offset of the next piece to read, and the range's end.
    pos: u64,
    end: u64,
    /// The piece read last, and how much of it was handed out.
    buf: Vec<u8>,
    at: usize,
}

impl io::Read for BlobReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.at == self.buf.len() {
            let n = READ_CHUNK.min(self.end.saturating_sub(self.pos));
            if n == 0 {
                return Ok(0);
            }
            self.buf.resize(usize::try_from(n).unwrap_or(0), 0);
            self.blob.read_exact_at(&mut self.buf, self.pos)?;
            self.pos += n;
            self.at = 0;
        }
        let rest = self.buf.get(self.at..).unwrap_or_default();
        let n = rest.len().min(out.len());
        out.get_mut(..n)
            .unwrap_or_default()
            .copy_from_slice(rest.get(..n).unwrap_or_default());
        self.at += n;
        Ok(n)
    }
}
