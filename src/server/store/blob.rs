//! The handle on a served file's bytes that everything above the store
//! holds: a [`ByteSource`] (a local file or one version of an object; the
//! holder never asks which) shared by every request and entry of that
//! version, and the ways to read it that callers need: whole, in pieces,
//! as a reader, from memory when there, and its header through its
//! source's read plan.
//!
//! [`Blob::read_now`] never blocks; [`Blob::read_async`],
//! [`Blob::visit`] and [`Blob::confirm`] are for the runtime (an object's
//! GETs awaited, a local file's reads on the blocking pool); the others
//! block, for the blocking pool and the daemon's own threads (the hasher,
//! the verifier, scans).

use std::fs::File;
use std::io;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use zt_format::source::Probe;
use zt_format::{FileManifest, Limits, Source};

use super::local::LocalFile;
use super::object::StoredObject;
use super::source::{ByteSource, Gone};
use super::{Identity, READ_CHUNK};

/// A served file's bytes.
#[derive(Debug, Clone)]
pub(crate) struct Blob(Arc<dyn ByteSource>);

impl Blob {
    /// A local file, opened with the identity it had.
    pub(crate) fn local(file: File, identity: Identity) -> Blob {
        Blob(Arc::new(LocalFile { file, identity }))
    }

    /// One version of an object.
    pub(crate) fn object(object: StoredObject) -> Blob {
        Blob(Arc::new(object))
    }

    /// Whether the bytes may no longer be the version opened
    /// ([`ByteSource::changed`]).
    pub(crate) fn changed(&self) -> bool {
        self.0.changed()
    }

    /// Fills `buf` from `pos` (blocking); `UnexpectedEof` if the bytes end
    /// first or the version is gone.
    pub(crate) fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, pos)
    }

    /// Exactly `len` bytes at `pos` (blocking).
    pub(crate) fn read_exact(&self, len: usize, pos: u64) -> io::Result<Bytes> {
        self.0.read_held(len, pos, None)
    }

    /// Exactly `len` bytes at `pos`, on the runtime: no thread is held
    /// across an object's GET ([`ByteSource::read_async`]); the buffer
    /// holds `permit` until the last [`Bytes`] of it is dropped (for ztp/1:
    /// once the client acknowledged the bytes and quinn let go of them), so
    /// a budget counts memory, not calls.
    pub(crate) async fn read_async(
        &self,
        len: usize,
        pos: u64,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> io::Result<Bytes> {
        Arc::clone(&self.0).read_async(len, pos, permit).await
    }

    /// Whether the version is still there where its identity cannot tell
    /// ([`ByteSource::confirm`]).
    pub(crate) async fn confirm(&self, chunks: Vec<Range<u64>>) -> Result<(), Gone> {
        Arc::clone(&self.0).confirm(chunks).await
    }

    /// `range` if it is in memory now, without blocking
    /// ([`ByteSource::read_now`]).
    pub(crate) fn read_now(&self, range: &Range<u64>) -> Option<io::Result<Bytes>> {
        self.0.read_now(range)
    }

    /// The header of a file of `source`, `size` bytes long, read through
    /// the source's read plan: a `.zt` file's footer, then its manifest
    /// (two ranged GETs from a store); a safetensors file's length, then
    /// its JSON (two); GGUF and MATRIX-ATOM headers as their fields say.
    /// Reads held in memory are taken at once; a read or a parse of more
    /// than [`PARSE_INLINE`] bytes is left off the runtime's workers.
    pub(crate) async fn header(
        &self,
        source: Source,
        label: &str,
        size: u64,
        limits: &Limits,
    ) -> zt_format::Result<FileManifest> {
        let failed = |e| zt_format::Error::reading_header(label, e);
        let mut probe = Probe::new(source, label, size, *limits);
        let mut fed = 0u64;
        while let Some(r) = probe.next_read() {
            let len = r.end.saturating_sub(r.start);
            let bytes = match self.read_now(&r) {
                Some(got) => got,
                None => {
                    let len = usize::try_from(len).map_err(|e| failed(io::Error::other(e)))?;
                    self.read_async(len, r.start, None).await
                }
            }
            .map_err(failed)?;
            fed = fed.saturating_add(len);
            if len <= PARSE_INLINE {
                probe.feed(&bytes)?;
            } else {
                probe = off_runtime(move || probe.feed(&bytes).map(|()| probe))
                    .await
                    .map_err(failed)??;
            }
        }
        let loaded = if fed <= PARSE_INLINE {
            probe.finish()?
        } else {
            off_runtime(move || probe.finish())
                .await
                .map_err(failed)??
        };
        Ok(FileManifest {
            parsed: loaded.parsed,
            raw: loaded.raw,
        })
    }

    /// Reads `range` in pieces of [`READ_CHUNK`] bytes, in order, handing
    /// each to `f` (blocking); stops at the first error, a read's
    /// ("reading N bytes at POS: ...") or `f`'s. An object's pieces are
    /// fetched `storage.read_ahead` at a time and kept in the piece cache
    /// for the send that follows a digest check (`keep`).
    pub(crate) fn each_piece(
        &self,
        range: Range<u64>,
        keep: bool,
        mut f: impl FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        self.0.each_piece(range, READ_CHUNK, keep, &mut f)
    }

    /// [`Blob::each_piece`] on the runtime ([`ByteSource::visit`]).
    pub(crate) async fn visit(
        &self,
        range: Range<u64>,
        keep: bool,
        f: impl FnMut(&[u8]) -> Result<(), String> + Send + 'static,
    ) -> Result<(), String> {
        Arc::clone(&self.0)
            .visit(range, READ_CHUNK, keep, Box::new(f))
            .await
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
            failed: None,
        }
    }

    /// Reads one reader keeps in flight: 1 for a local file (reads from
    /// the page cache or the disk gain nothing from more), the store's
    /// `storage.read_ahead` for an object.
    pub(crate) fn read_ahead(&self) -> usize {
        self.0.read_ahead()
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
    /// Why a read failed, when one did (a decoder reading through this
    /// reports any error as its data's).
    failed: Option<String>,
}

impl BlobReader<'_> {
    /// Why a read of the bytes failed, if one did.
    pub(crate) fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }
}

impl io::Read for BlobReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.at == self.buf.len() {
            let n = READ_CHUNK.min(self.end.saturating_sub(self.pos));
            if n == 0 {
                return Ok(0);
            }
            self.buf.resize(usize::try_from(n).unwrap_or(0), 0);
            if let Err(e) = self.blob.read_exact_at(&mut self.buf, self.pos) {
                self.failed = Some(format!("reading {n} bytes at {}: {e}", self.pos));
                return Err(e);
            }
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

/// Header bytes parsed on the runtime's worker as they arrive; more go to
/// the blocking pool (a manifest of thousands of tensors takes
/// milliseconds to validate).
const PARSE_INLINE: u64 = 64 << 10;

/// Runs `f` on the blocking pool.
async fn off_runtime<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| io::Error::other(format!("the blocking pool: {e}")))
}
