//! One version of an object of an object-storage root as a [`ByteSource`]:
//! read with ranged GETs pinned to the ETag it was listed with (so a
//! replaced object fails its reads as "changed on the server" instead of
//! mixing versions), through the root's piece cache.

use std::io;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;

use super::object_root::{ObjectRoot, StoreError};
use super::source::{held, pieces_with, ByteSource, Gone};

/// One version of an object.
#[derive(Debug, Clone)]
pub(crate) struct StoredObject {
    pub(crate) root: Arc<ObjectRoot>,
    /// Its path under the root.
    pub(crate) key: String,
    /// The version listed; `None` for a store that gives no ETags.
    pub(crate) etag: Option<String>,
}

/// A store's answer as an I/O error of the kind a local file gives.
fn io_error(e: StoreError) -> io::Error {
    let kind = match e {
        StoreError::NotFound { .. } => io::ErrorKind::NotFound,
        StoreError::Changed { .. } => io::ErrorKind::UnexpectedEof,
        StoreError::Config(_) | StoreError::Unreachable { .. } => io::ErrorKind::Other,
    };
    io::Error::new(kind, e.to_string())
}

impl ByteSource for StoredObject {
    /// Its pieces are kept by the root's piece cache.
    fn keeps_reads(&self) -> bool {
        true
    }

    fn changed(&self) -> bool {
        self.root.is_stale(&self.key, self.etag.as_deref())
    }

    fn read_now(&self, range: &Range<u64>) -> Option<io::Result<Bytes>> {
        self.root
            .cached(&self.key, self.etag.as_deref(), range)
            .map(Ok)
    }

    fn read_async(
        self: Arc<Self>,
        len: usize,
        pos: u64,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> BoxFuture<'static, io::Result<Bytes>> {
        Box::pin(async move {
            let range = pos..pos.saturating_add(len as u64);
            let bytes = self
                .root
                .read_piece(&self.key, self.etag.as_deref(), range, true)
                .await
                .map_err(io_error)?;
            Ok(held(bytes, permit))
        })
    }

    /// `storage.read_ahead` GETs at once.
    fn pieces(
        self: Arc<Self>,
        range: Range<u64>,
        piece: u64,
        keep: bool,
    ) -> BoxStream<'static, io::Result<Bytes>> {
        let ahead = self.root.read_ahead();
        pieces_with(range, piece, ahead, move |r| {
            let me = Arc::clone(&self);
            async move {
                me.root
                    .read_piece(&me.key, me.etag.as_deref(), r, keep)
                    .await
                    .map_err(io_error)
            }
        })
    }

    fn confirm(self: Arc<Self>, chunks: Vec<Range<u64>>) -> BoxFuture<'static, Result<(), Gone>> {
        Box::pin(async move {
            let etag = self.etag.as_deref();
            let Some(first) = chunks
                .iter()
                .find(|c| self.root.cached(&self.key, etag, c).is_none())
            else {
                return Ok(());
            };
            gone(
                self.root
                    .read_piece(&self.key, etag, first.clone(), true)
                    .await
                    .map(drop),
            )
        })
    }

    /// `storage.read_ahead` GETs.
    fn read_ahead(&self) -> usize {
        self.root.read_ahead()
    }

    /// The piece cache keeps whole chunks, as the digest check read them.
    fn whole_chunks(&self) -> bool {
        true
    }
}

/// A confirming read's answer.
fn gone(read: Result<(), StoreError>) -> Result<(), Gone> {
    match read {
        Ok(()) => Ok(()),
        Err(e @ (StoreError::Changed { .. } | StoreError::NotFound { .. })) => {
            Err(Gone::Changed(e.to_string()))
        }
        Err(e) => Err(Gone::Unreachable(e.to_string())),
    }
}
