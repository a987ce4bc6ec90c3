//! What a served file's bytes are to everything above the store: a byte
//! source that knows whether it is still the version opened, read whole or in pieces, from memory when they
//! are there. Implemented for a local file (`local.rs`) and for one
//! version of an object (`object.rs`); [`super::Blob`] is the handle the
//! rest of the daemon holds.

use std::fmt;
use std::io;
use std::ops::Range;

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;

/// A served file's bytes, one version of them.
pub(crate) trait ByteSource: Send + Sync + fmt::Debug {
    /// Whether the bytes may no longer be that version: a local file
    /// written since (its identity moved), an object a read found
    /// replaced or gone in the store.
    fn changed(&self) -> bool;

    /// Fills `buf` with the bytes at `pos` (blocking); `UnexpectedEof` if
    /// they end first or the version is gone.
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()>;

    /// `len` bytes at `pos` (blocking), in a buffer that holds `permit`
    /// until the last [`Bytes`] of it is dropped.
    fn read_held(
        &self,
        len: usize,
        pos: u64,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> io::Result<Bytes>;

    /// `range`, if every byte of it is in memory now (the page cache, the
    /// piece cache), without blocking: the caller may stay on the async
    /// runtime. `None` when they are not, or cannot be told.
    fn read_now(&self, range: &Range<u64>) -> Option<io::Result<Bytes>>;

    /// `len` bytes at `pos`, on the runtime: a local file's read on the
    /// blocking pool (disk I/O), an object's GET awaited on the runtime (no
    /// thread held across network I/O); the buffer holds `permit` as
    /// [`ByteSource::read_held`]'s does.
    fn read_async(
        self: Arc<Self>,
        len: usize,
        pos: u64,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> BoxFuture<'static, io::Result<Bytes>>;

    /// Finds out now, before a response's headers go out, whether the
    /// version is still there, where its identity cannot tell: reads the
    /// first of `chunks` not held in memory, pinned to the version, and
    /// keeps it for the body. A local file has nothing to read.
    fn confirm(self: Arc<Self>, chunks: Vec<Range<u64>>) -> BoxFuture<'static, Result<(), Gone>>;

    /// Reads `range` in pieces of `piece` bytes, in order, handing each to
    /// `f` (blocking), keeping them for the send that follows when `keep`;
    /// stops at the first error, a read's ("reading N bytes at POS: ...")
    /// or `f`'s.
    fn each_piece(
        &self,
        range: Range<u64>,
        piece: u64,
        keep: bool,
        f: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String>;

    /// [`ByteSource::each_piece`] on the runtime: a local file's pieces
    /// read (and handed to `f`) on the blocking pool in one go, an
    /// object's GETs awaited here with `f` run on the blocking pool for
    /// each piece (it hashes), so no thread is held across network I/O.
    fn visit(
        self: Arc<Self>,
        range: Range<u64>,
        piece: u64,
        keep: bool,
        f: Visitor,
    ) -> BoxFuture<'static, Result<(), String>>;

    /// Reads one reader keeps in flight.
    fn read_ahead(&self) -> usize;
}

/// What [`ByteSource::visit`] hands each piece to.
pub(crate) type Visitor = Box<dyn FnMut(&[u8]) -> Result<(), String> + Send>;

/// Why [`ByteSource::confirm`] failed.
#[derive(Debug, Clone)]
pub(crate) enum Gone {
    /// The version was replaced or deleted: catalogue it again.
    Changed(String),
    /// The store did not answer.
    Unreachable(String),
}
