//! One version of an object of an object-storage root as a [`ByteSource`]:
//! read with ranged GETs pinned to the ETag it was listed with (so a
//! replaced object fails its reads as "changed on the server" instead of
//! mixing versions), through the root's piece cache.

use std::io;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;

use super::object_root::{ObjectRoot, StoreError};
use super::source::{ByteSource, Gone, Visitor};

/// One version of an object.
#[derive(Debug, Clone)]
pub(crate) struct StoredObject {
    pub(crate) root: Arc<ObjectRoot>,
    /// Its path under the root.
    pub(crate) key: String,
    /// The version listed; `None` for a store that gives no ETags.
    pub(crate) etag: Option<String>,
}

impl StoredObject {
    /// Bytes `range`, all of them (through the piece cache), or the
    /// store's error as an I/O error.
    fn read(&self, range: Range<u64>) -> io::Result<Bytes> {
        self.root
            .read_cached(&self.key, self.etag.as_deref(), range)
            .map_err(io_error)
    }
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

/// Bytes from the store, holding a budget until they are dropped.
struct Held {
    bytes: Bytes,
    _held: tokio::sync::OwnedSemaphorePermit,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl ByteSource for StoredObject {
    fn changed(&self) -> bool {
        self.root.is_stale(&self.key, self.etag.as_deref())
    }

    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        let got = self.read(pos..pos.saturating_add(buf.len() as u64))?;
        buf.copy_from_slice(&got);
        Ok(())
    }

    fn read_held(
        &self,
        len: usize,
        pos: u64,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> io::Result<Bytes> {
        let bytes = self.read(pos..pos.saturating_add(len as u64))?;
        Ok(held(bytes, permit))
    }

    fn read_now(&self, range: &Range<u64>) -> Option<io::Result<Bytes>> {
        self.root
            .cached(&self.key, self.etag.as_deref(), range)
            .map(Ok)
    }

    fn each_piece(
        &self,
        range: Range<u64>,
        piece: u64,
        keep: bool,
        f: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        let etag = self.etag.as_deref();
        self.root.each_piece(&self.key, etag, range, piece, keep, f)
    }

    fn visit(
        self: Arc<Self>,
        range: Range<u64>,
        piece: u64,
        keep: bool,
        f: Visitor,
    ) -> BoxFuture<'static, Result<(), String>> {
        use futures_util::StreamExt as _;
        Box::pin(async move {
            let step = usize::try_from(piece.max(1)).unwrap_or(usize::MAX);
            let end = range.end;
            let me = Arc::clone(&self);
            let mut pieces = futures_util::stream::iter((range.start..end).step_by(step))
                .map(move |at| {
                    let (me, r) = (Arc::clone(&me), at..at.saturating_add(piece).min(end));
                    async move {
                        let etag = me.etag.as_deref();
                        let got = match keep {
                            true => me.root.read_kept(&me.key, etag, r.clone()).await,
                            false => me.root.read(&me.key, etag, r.clone()).await,
                        };
                        got.map_err(|e| {
                            format!("reading {} bytes at {}: {e}", r.end - r.start, r.start)
                        })
                    }
                })
                .buffered(self.root.read_ahead());
            let mut f = Some(f);
            while let Some(bytes) = pieces.next().await {
                let bytes = bytes?;
                let Some(mut g) = f.take() else {
                    break;
                };
                let (g, done) = tokio::task::spawn_blocking(move || {
                    let done = g(&bytes);
                    (g, done)
                })
                .await
                .map_err(|e| e.to_string())?;
                done?;
                f = Some(g);
            }
            Ok(())
        })
    }

    /// `storage.read_ahead` GETs.
    fn read_ahead(&self) -> usize {
        self.root.read_ahead()
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
                .read_kept(&self.key, self.etag.as_deref(), range)
                .await
                .map_err(io_error)?;
            Ok(held(bytes, permit))
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
                    .read_kept(&self.key, etag, first.clone())
                    .await
                    .map(drop),
            )
        })
    }
}

/// `bytes` holding `permit` until the last of them is dropped.
fn held(bytes: Bytes, permit: Option<tokio::sync::OwnedSemaphorePermit>) -> Bytes {
    match permit {
        None => bytes,
        Some(permit) => Bytes::from_owner(Held {
            bytes,
            _held: permit,
        }),
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
