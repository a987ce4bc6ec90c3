//! The handle on a served file's bytes that everything above the store
//! holds: a [`ByteSource`] (a local file or one version of an object; the
//! holder never asks which) shared by every request and entry of that
//! version, and the ways to read it that callers need: whole, in pieces
//! (handed to a stream or to a function on the blocking pool), from memory
//! when there, and its header through its source's read plan.
//!
//! Every read is for the runtime, and none holds a thread across network
//! I/O: an object's GETs are awaited, a local file's reads run on the
//! blocking pool; [`Blob::read_now`] never blocks.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::StreamExt as _;
use zt_format::source::{Loaded, Probe};
use zt_format::{Limits, Source};

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

    /// Any other source of bytes (files in memory, for tests).
    #[cfg(test)]
    pub(crate) fn from_source(source: Arc<dyn ByteSource>) -> Blob {
        Blob(source)
    }

    /// Whether the bytes may no longer be the version opened
    /// ([`ByteSource::changed`]).
    pub(crate) fn changed(&self) -> bool {
        self.0.changed()
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
    ) -> zt_format::Result<Loaded> {
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
        if fed <= PARSE_INLINE {
            probe.finish()
        } else {
            off_runtime(move || probe.finish()).await.map_err(failed)?
        }
    }

    /// `range` in pieces of [`READ_CHUNK`] bytes, in order
    /// ([`ByteSource::pieces`]); an object's pieces are fetched
    /// `storage.read_ahead` at a time, and kept in the piece cache for the
    /// send that follows a digest check when `keep`.
    pub(crate) fn pieces(
        &self,
        range: Range<u64>,
        keep: bool,
    ) -> BoxStream<'static, io::Result<Bytes>> {
        Arc::clone(&self.0).pieces(range, READ_CHUNK, keep)
    }

    /// Hands every piece of `range` ([`Blob::pieces`]) to `v` on the
    /// blocking pool (it hashes, decodes, sums), in order, and gives `v`
    /// back when done; stops at the first error, a read's or `v`'s.
    pub(crate) async fn visit<V: Visit>(
        &self,
        range: Range<u64>,
        keep: bool,
        mut v: V,
    ) -> Result<V, Stop<V::Error>> {
        let mut pieces = self.pieces(range, keep);
        while let Some(piece) = pieces.next().await {
            v = feed(v, piece.map_err(Stop::Read)?).await?;
        }
        Ok(v)
    }

    /// Hands the bytes of each of `spans` (in order, each at most
    /// [`READ_CHUNK`] long) to `v` on the blocking pool, and `v` back: a
    /// local file's read there in one hop, into one buffer reused for
    /// every span (a slice's windows: many short reads); an object's read
    /// on the runtime and handed over a span at a time. Stops at the first
    /// error, a read's (a span cut short included) or `v`'s.
    pub(crate) async fn visit_spans<V: Visit>(
        &self,
        spans: Arc<[Range<u64>]>,
        v: V,
    ) -> Result<V, Stop<V::Error>> {
        let source = Arc::clone(&self.0);
        let todo = Arc::clone(&spans);
        let blocking = off_runtime(move || {
            let longest = todo.iter().map(|s| s.end - s.start).max().unwrap_or(0);
            let mut buf = vec![0u8; usize::try_from(longest.min(READ_CHUNK)).unwrap_or(0)];
            let mut v = v;
            for span in todo.iter() {
                let len = usize::try_from(span.end - span.start).unwrap_or(usize::MAX);
                let Some(into) = buf.get_mut(..len) else {
                    return Err(Stop::Read(io::Error::other("a span longer than a read")));
                };
                match source.read_blocking(into, span.start) {
                    None => return Ok(Err(v)),
                    Some(read) => read.map_err(|e| Stop::Read(at(len, span.start, e)))?,
                }
                v.piece(into).map_err(Stop::By)?;
            }
            Ok(Ok(v))
        });
        let mut v = match blocking.await.map_err(Stop::Read)?? {
            Ok(done) => return Ok(done),
            // Not a source read from the blocking pool, and nothing read.
            Err(v) => v,
        };
        for span in spans.iter() {
            let len = usize::try_from(span.end - span.start).unwrap_or(usize::MAX);
            let bytes = match self.read_now(span) {
                Some(got) => got,
                None => self.read_async(len, span.start, None).await,
            }
            .map_err(|e| Stop::Read(at(len, span.start, e)))?;
            if bytes.len() != len {
                let short = io::Error::new(io::ErrorKind::UnexpectedEof, "cut short");
                return Err(Stop::Read(at(len, span.start, short)));
            }
            v = feed(v, bytes).await?;
        }
        Ok(v)
    }

    /// Reads one reader keeps in flight: 1 for a local file (reads from
    /// the page cache or the disk gain nothing from more), the store's
    /// `storage.read_ahead` for an object.
    pub(crate) fn read_ahead(&self) -> usize {
        self.0.read_ahead()
    }

    /// Whether responses read it in whole chunks
    /// ([`ByteSource::whole_chunks`]).
    pub(crate) fn whole_chunks(&self) -> bool {
        self.0.whole_chunks()
    }
}

/// What [`Blob::visit`] hands the pieces to: a hash, a decoder, a sum.
pub(crate) trait Visit: Send + 'static {
    type Error: Send + 'static;

    /// Takes the next piece, in order.
    fn piece(&mut self, bytes: &[u8]) -> Result<(), Self::Error>;
}

/// Hands `piece` to `v` on the blocking pool, and `v` back.
pub(crate) async fn feed<V: Visit>(mut v: V, piece: Bytes) -> Result<V, Stop<V::Error>> {
    off_runtime(move || v.piece(&piece).map(|()| v))
        .await
        .map_err(Stop::Read)?
        .map_err(Stop::By)
}

/// Why [`Blob::visit`] stopped short.
#[derive(Debug)]
pub(crate) enum Stop<E> {
    /// A read failed: "reading N bytes at POS: ...".
    Read(io::Error),
    /// The visitor said so.
    By(E),
}

/// Header bytes parsed on the runtime's worker as they arrive; more go to
/// the blocking pool (a manifest of thousands of tensors takes
/// milliseconds to validate).
const PARSE_INLINE: u64 = 64 << 10;

/// A read's error, saying which read.
fn at(len: usize, pos: u64, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("reading {len} bytes at {pos}: {e}"))
}

/// Runs `f` on the blocking pool.
async fn off_runtime<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| io::Error::other(format!("the blocking pool: {e}")))
}
