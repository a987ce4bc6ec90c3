//! What a served file's bytes are to everything above the store: a byte
//! source that knows whether it is still the version opened, read whole
//! or in pieces on the runtime, or from memory when they are there. Implemented for a local file (`local.rs`) and for one
//! version of an object (`object.rs`); [`super::Blob`] is the handle the
//! rest of the daemon holds.

use std::fmt;
use std::io;
use std::ops::Range;

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;

/// A served file's bytes, one version of them. Every read is for the
/// runtime: a local file's on the blocking pool (disk I/O), an object's
/// GETs awaited there, so no thread is held across network I/O; only
/// [`ByteSource::read_now`], which never blocks, answers at once.
pub(crate) trait ByteSource: Send + Sync + fmt::Debug + 'static {
    /// Whether the bytes may no longer be that version: a local file
    /// written since (its identity moved), an object a read found
    /// replaced or gone in the store.
    fn changed(&self) -> bool;

    /// `range`, if every byte of it is in memory now (the page cache, the
    /// piece cache), without blocking: the caller may stay on the async
    /// runtime. `None` when they are not, or cannot be told.
    fn read_now(&self, range: &Range<u64>) -> Option<io::Result<Bytes>>;

    /// Exactly `len` bytes at `pos` (`UnexpectedEof` if they end first or
    /// the version is gone), in a buffer that holds `permit` until the
    /// last [`Bytes`] of it is dropped.
    fn read_async(
        self: Arc<Self>,
        len: usize,
        pos: u64,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> BoxFuture<'static, io::Result<Bytes>>;

    /// [`ByteSource::read_async`] into a buffer of the bytes' own, for
    /// bytes kept long after the read: a local file's reads otherwise go
    /// into pooled buffers, which may be half again as large.
    fn read_unpooled(
        self: Arc<Self>,
        len: usize,
        pos: u64,
    ) -> BoxFuture<'static, io::Result<Bytes>> {
        self.read_async(len, pos, None)
    }

    /// A read into `buf` ([`ByteSource::read_async`] or
    /// [`ByteSource::read_unpooled`]), then whether the version changed
    /// ([`ByteSource::changed`]), both where the read runs: a local file's
    /// `fstat` beside its `pread` on the blocking pool, so that a network
    /// file system slow to answer holds a pool thread, never the runtime.
    fn read_checked(
        self: Arc<Self>,
        len: usize,
        pos: u64,
        buf: Buffer,
    ) -> BoxFuture<'static, io::Result<Checked>> {
        Box::pin(async move {
            let bytes = match buf {
                Buffer::Pooled(permit) => Arc::clone(&self).read_async(len, pos, permit).await?,
                Buffer::Own => Arc::clone(&self).read_unpooled(len, pos).await?,
            };
            Ok(Checked::after(bytes, self.changed()))
        })
    }

    /// Whether the store keeps what is read of it in the daemon's memory
    /// (an object root's piece cache), so that nothing above needs to keep
    /// it again; a local file's reads go through the kernel's page cache
    /// and are kept by no one in the daemon.
    fn keeps_reads(&self) -> bool {
        false
    }

    /// Whether [`ByteSource::read_blocking`] reads: a local file's do, an
    /// object's GETs are for the runtime.
    fn reads_blocking(&self) -> bool {
        false
    }

    /// Exactly `buf.len()` bytes at `pos` into `buf`, blocking, for a caller
    /// already on the blocking pool (`Unsupported` where
    /// [`ByteSource::reads_blocking`] says no).
    fn read_blocking(&self, _buf: &mut [u8], _pos: u64) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }

    /// `range` in pieces of `piece` bytes, in order, a few read ahead of
    /// the one handed out (an object's `storage.read_ahead` GETs; a local
    /// file's next piece while the caller works on this one). An object's
    /// pieces come from the piece cache where they are, and are kept there
    /// for the send that follows when `keep`. A failed read ends the
    /// stream with "reading N bytes at POS: ...".
    fn pieces(
        self: Arc<Self>,
        range: Range<u64>,
        piece: u64,
        keep: bool,
    ) -> BoxStream<'static, io::Result<Bytes>>;

    /// Finds out now, before a response's headers go out, whether the
    /// version is still there, where its identity cannot tell: reads the
    /// first of `chunks` not held in memory, pinned to the version, and
    /// keeps it for the body. A local file has nothing to read.
    fn confirm(self: Arc<Self>, chunks: Vec<Range<u64>>) -> BoxFuture<'static, Result<(), Gone>>;

    /// Reads one reader keeps in flight.
    fn read_ahead(&self) -> usize;

    /// Whether a response reads it in whole [`super::READ_CHUNK`] pieces
    /// (the pieces its cache keeps), rather than in pieces of any size.
    fn whole_chunks(&self) -> bool {
        false
    }
}

/// What a read found of the version it was pinned to
/// ([`ByteSource::read_checked`]).
#[derive(Debug)]
pub(crate) enum Checked {
    /// The bytes, and the version was still there when they had been read.
    Same(Bytes),
    /// The version had changed by the end of the read (a file rewritten in
    /// place): the bytes may be another version's, and are dropped here.
    Changed,
}

impl Checked {
    /// `bytes`, unless the version had `changed` by the end of their read.
    pub(crate) fn after(bytes: Bytes, changed: bool) -> Self {
        if changed {
            Self::Changed
        } else {
            Self::Same(bytes)
        }
    }
}

/// Where a read's bytes go.
#[derive(Debug)]
pub(crate) enum Buffer {
    /// A pooled buffer, holding the permit until its last [`Bytes`] is
    /// dropped ([`ByteSource::read_async`]).
    Pooled(Option<tokio::sync::OwnedSemaphorePermit>),
    /// A buffer of the bytes' own, for bytes kept long after the read
    /// ([`ByteSource::read_unpooled`]).
    Own,
}

/// The pieces of `range`, `piece` bytes each, read with `read` (`ahead`
/// at once, handed out in order): [`ByteSource::pieces`] for a source
/// whose reads are futures.
pub(super) fn pieces_with<F>(
    range: Range<u64>,
    piece: u64,
    ahead: usize,
    read: impl Fn(Range<u64>) -> F + Send + 'static,
) -> BoxStream<'static, io::Result<Bytes>>
where
    F: std::future::Future<Output = io::Result<Bytes>> + Send + 'static,
{
    use futures_util::StreamExt as _;
    let step = usize::try_from(piece.max(1)).unwrap_or(usize::MAX);
    let end = range.end;
    futures_util::stream::iter((range.start..end).step_by(step))
        .map(move |at| {
            let r = at..at.saturating_add(piece).min(end);
            let got = read(r.clone());
            async move {
                got.await.map_err(|e| {
                    let why = format!("reading {} bytes at {}: {e}", r.end - r.start, r.start);
                    io::Error::new(e.kind(), why)
                })
            }
        })
        .buffered(ahead.max(1))
        .boxed()
}

/// Bytes holding something (a budget's permit, a charge) until the last
/// of them is dropped.
struct Holding<T> {
    bytes: Bytes,
    _held: T,
}

impl<T> AsRef<[u8]> for Holding<T> {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// `bytes` holding `what` until the last of them is dropped.
pub(crate) fn holding<T: Send + 'static>(bytes: Bytes, what: T) -> Bytes {
    Bytes::from_owner(Holding { bytes, _held: what })
}

/// `bytes` holding `permit` until the last of them is dropped: what
/// [`ByteSource::read_async`] hands back for a source whose bytes are not
/// read into a buffer that holds it already, and what ztp/1 sends of a
/// chunk it keeps or takes from memory (`quic/kept.rs`).
pub(crate) fn held(bytes: Bytes, permit: Option<tokio::sync::OwnedSemaphorePermit>) -> Bytes {
    match permit {
        None => bytes,
        Some(permit) => holding(bytes, permit),
    }
}

/// Why [`ByteSource::confirm`] failed.
#[derive(Debug, Clone)]
pub(crate) enum Gone {
    /// The version was replaced or deleted: catalogue it again.
    Changed(String),
    /// The store did not answer.
    Unreachable(String),
}
