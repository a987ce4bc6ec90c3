//! A local file as a [`ByteSource`]: read with `pread` through the handle
//! the catalog opened, never mapped (a file truncated under the daemon
//! fails its reads, not the daemon); bytes in the page cache read with
//! `RWF_NOWAIT` on the runtime; its identity checked with `fstat`.

use std::fs::File;
use std::io;
use std::ops::Range;

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;

use super::pread::{read_cached, read_pooled, read_unpooled, CACHED_READ_MAX};
use super::source::{pieces_with, Buffer, ByteSource, Checked, Gone};
use super::Identity;

/// An open local file, the identity it had when opened, and its place in
/// the open-file budget.
#[derive(Debug)]
pub(crate) struct LocalFile {
    pub(crate) file: File,
    pub(crate) identity: Identity,
    pub(crate) _held: super::descriptors::Held,
}

impl ByteSource for LocalFile {
    fn changed(&self) -> bool {
        self.file
            .metadata()
            .map_or(true, |m| !self.identity.same_bytes(&Identity::of(&m)))
    }

    /// Reads up to [`CACHED_READ_MAX`] are tried, where zeroing the buffer
    /// costs less than the hop to the blocking pool.
    fn read_now(&self, range: &Range<u64>) -> Option<io::Result<Bytes>> {
        let n = range.end.saturating_sub(range.start);
        (n <= CACHED_READ_MAX)
            .then(|| read_cached(&self.file, usize::try_from(n).ok()?, range.start))
            .flatten()
    }

    fn read_async(
        self: Arc<Self>,
        len: usize,
        pos: u64,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> BoxFuture<'static, io::Result<Bytes>> {
        on_pool(move || read_pooled(&self.file, len, pos, permit))
    }

    fn read_unpooled(
        self: Arc<Self>,
        len: usize,
        pos: u64,
    ) -> BoxFuture<'static, io::Result<Bytes>> {
        on_pool(move || read_unpooled(&self.file, len, pos))
    }

    /// The read and the `fstat` in one trip to the blocking pool.
    fn read_checked(
        self: Arc<Self>,
        len: usize,
        pos: u64,
        buf: Buffer,
    ) -> BoxFuture<'static, io::Result<Checked>> {
        on_pool(move || {
            let bytes = match buf {
                Buffer::Pooled(permit) => read_pooled(&self.file, len, pos, permit)?,
                Buffer::Own => read_unpooled(&self.file, len, pos)?,
            };
            Ok(Checked::after(bytes, self.changed()))
        })
    }

    fn reads_blocking(&self) -> bool {
        true
    }

    fn read_blocking(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&self.file, buf, pos)
    }

    /// Two at once: the next piece is read while the caller works on
    /// this one (hashes it, decodes it).
    fn pieces(
        self: Arc<Self>,
        range: Range<u64>,
        piece: u64,
        _keep: bool,
    ) -> BoxStream<'static, io::Result<Bytes>> {
        pieces_with(range, piece, 2, move |r| {
            let len = usize::try_from(r.end - r.start).unwrap_or(usize::MAX);
            Arc::clone(&self).read_async(len, r.start, None)
        })
    }

    /// Nothing to confirm: the identity tells.
    fn confirm(self: Arc<Self>, _chunks: Vec<Range<u64>>) -> BoxFuture<'static, Result<(), Gone>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// One: reads from the page cache or the disk gain nothing from more.
    fn read_ahead(&self) -> usize {
        1
    }
}

/// `read` on the blocking pool (disk I/O), awaited from the runtime.
fn on_pool<T: Send + 'static>(
    read: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> BoxFuture<'static, io::Result<T>> {
    Box::pin(async move {
        tokio::task::spawn_blocking(read)
            .await
            .unwrap_or_else(|e| Err(io::Error::other(e)))
    })
}
