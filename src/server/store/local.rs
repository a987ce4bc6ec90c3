//! A local file as a [`ByteSource`]: read with `pread` through the handle
//! the catalog opened, never mapped (a file truncated under the daemon
//! fails its reads, not the daemon); bytes in the page cache read with
//! `RWF_NOWAIT` on the runtime; its identity checked with `fstat`.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;

use super::pread::{read_cached, read_pooled, CACHED_READ_MAX};
use super::source::{ByteSource, Gone, Visitor};
use super::Identity;

/// An open local file and the identity it had when opened.
#[derive(Debug)]
pub(crate) struct LocalFile {
    pub(crate) file: File,
    pub(crate) identity: Identity,
}

impl ByteSource for LocalFile {
    fn changed(&self) -> bool {
        self.file
            .metadata()
            .map_or(true, |m| !self.identity.same_bytes(&Identity::of(&m)))
    }

    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, pos)
    }

    fn read_held(
        &self,
        len: usize,
        pos: u64,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> io::Result<Bytes> {
        read_pooled(&self.file, len, pos, permit)
    }

    /// Reads up to [`CACHED_READ_MAX`] are tried, where zeroing the buffer
    /// costs less than the hop to the blocking pool.
    fn read_now(&self, range: &Range<u64>) -> Option<io::Result<Bytes>> {
        let n = range.end.saturating_sub(range.start);
        (n <= CACHED_READ_MAX)
            .then(|| read_cached(&self.file, usize::try_from(n).ok()?, range.start))
            .flatten()
    }

    fn each_piece(
        &self,
        range: Range<u64>,
        piece: u64,
        _keep: bool,
        f: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        let len = piece.min(range.end.saturating_sub(range.start));
        let mut buf = vec![0u8; usize::try_from(len).unwrap_or(0)];
        let mut pos = range.start;
        while pos < range.end {
            let n = usize::try_from(piece.min(range.end - pos)).unwrap_or(0);
            let part = buf.get_mut(..n).unwrap_or_default();
            self.file
                .read_exact_at(part, pos)
                .map_err(|e| format!("reading {n} bytes at {pos}: {e}"))?;
            f(part)?;
            pos += n as u64;
        }
        Ok(())
    }

    fn visit(
        self: Arc<Self>,
        range: Range<u64>,
        piece: u64,
        keep: bool,
        mut f: Visitor,
    ) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(async move {
            tokio::task::spawn_blocking(move || self.each_piece(range, piece, keep, &mut *f))
                .await
                .unwrap_or_else(|e| Err(e.to_string()))
        })
    }

    /// One: reads from the page cache or the disk gain nothing from more.
    fn read_ahead(&self) -> usize {
        1
    }

    fn read_async(
        self: Arc<Self>,
        len: usize,
        pos: u64,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> BoxFuture<'static, io::Result<Bytes>> {
        Box::pin(async move {
            tokio::task::spawn_blocking(move || read_pooled(&self.file, len, pos, permit))
                .await
                .unwrap_or_else(|e| Err(io::Error::other(e)))
        })
    }

    /// Nothing to confirm: the identity tells.
    fn confirm(self: Arc<Self>, _chunks: Vec<Range<u64>>) -> BoxFuture<'static, Result<(), Gone>> {
        Box::pin(std::future::ready(Ok(())))
    }
}
