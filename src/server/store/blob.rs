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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::StreamExt as _;
use zt_format::source::{Loaded, Probe};
use zt_format::{Limits, Source};

use super::descriptors::Held;
use super::local::LocalFile;
use super::object::StoredObject;
use super::source::{Buffer, ByteSource, Checked, Gone};
use super::{Identity, READ_CHUNK};

/// A served file's bytes.
#[derive(Debug, Clone)]
pub(crate) struct Blob(Arc<dyn ByteSource>);

impl Blob {
    /// A local file, opened with the identity it had, holding its place
    /// in the open-file budget.
    pub(crate) fn local(file: File, identity: Identity, held: Held) -> Blob {
        Blob(Arc::new(LocalFile {
            file,
            identity,
            _held: held,
        }))
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

    /// A read into `buf` and whether the version changed, asked where the
    /// read ran ([`ByteSource::read_checked`]).
    pub(crate) async fn read_checked(
        &self,
        len: usize,
        pos: u64,
        buf: Buffer,
    ) -> io::Result<Checked> {
        Arc::clone(&self.0).read_checked(len, pos, buf).await
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
    /// every span (a slice's windows: many short reads), until the caller
    /// goes away; an object's read on the runtime (`storage.read_ahead` at
    /// once) and handed over at most [`READ_CHUNK`] bytes a hop. Stops at the
    /// first error, a read's (a span cut short included) or `v`'s.
    pub(crate) async fn visit_spans<V: Visit>(
        &self,
        spans: Arc<[Range<u64>]>,
        v: V,
    ) -> Result<V, Stop<V::Error>> {
        if let Some((i, s)) = spans
            .iter()
            .enumerate()
            .find(|(_, s)| s.end.saturating_sub(s.start) > READ_CHUNK)
        {
            let why = format!("span {i} ({s:?}) is longer than a read ({READ_CHUNK} bytes)");
            return Err(Stop::Read(io::Error::other(why)));
        }
        if !self.0.reads_blocking() {
            return self.visit_spans_async(&spans, v).await;
        }
        let source = Arc::clone(&self.0);
        let going = Going::default();
        let gone = Arc::clone(&going.0);
        off_runtime(move || {
            let longest = spans.iter().map(|s| s.end - s.start).max().unwrap_or(0);
            let mut buf = vec![0u8; usize::try_from(longest).unwrap_or(0)];
            let mut v = v;
            for span in spans.iter() {
                if gone.load(Ordering::Relaxed) {
                    let why = io::Error::new(io::ErrorKind::Interrupted, "the request went away");
                    return Err(Stop::Read(why));
                }
                let len = usize::try_from(span.end - span.start).unwrap_or(usize::MAX);
                let into = buf.get_mut(..len).unwrap_or_default();
                source
                    .read_blocking(into, span.start)
                    .map_err(|e| Stop::Read(at(len, span.start, e)))?;
                v.piece(into).map_err(Stop::By)?;
            }
            Ok(v)
        })
        .await
        .map_err(Stop::Read)?
    }

    /// [`Blob::visit_spans`] for a source read on the runtime.
    async fn visit_spans_async<V: Visit>(
        &self,
        spans: &[Range<u64>],
        mut v: V,
    ) -> Result<V, Stop<V::Error>> {
        let reads = futures_util::stream::iter(spans.iter().cloned())
            .map(|span| async move {
                let len = usize::try_from(span.end - span.start).unwrap_or(usize::MAX);
                let bytes = match self.read_now(&span) {
                    Some(got) => got,
                    None => self.read_async(len, span.start, None).await,
                }
                .map_err(|e| at(len, span.start, e))?;
                match bytes.len() == len {
                    true => Ok(bytes),
                    false => {
                        let short = io::Error::new(io::ErrorKind::UnexpectedEof, "cut short");
                        Err(at(len, span.start, short))
                    }
                }
            })
            .buffered(self.read_ahead().max(1));
        futures_util::pin_mut!(reads);
        let mut batch = Batch::default();
        while let Some(bytes) = reads.next().await {
            for ready in batch.add(bytes.map_err(Stop::Read)?) {
                v = feed_all(v, ready).await?;
            }
        }
        feed_all(v, batch.pieces).await
    }

    /// Reads one reader keeps in flight: 1 for a local file (reads from
    /// the page cache or the disk gain nothing from more), the store's
    /// `storage.read_ahead` for an object.
    pub(crate) fn read_ahead(&self) -> usize {
        self.0.read_ahead()
    }

    /// Whether the store keeps what is read of it in memory
    /// ([`ByteSource::keeps_reads`]).
    pub(crate) fn keeps_reads(&self) -> bool {
        self.0.keeps_reads()
    }

    /// Whether responses read it in whole chunks
    /// ([`ByteSource::whole_chunks`]).
    pub(crate) fn whole_chunks(&self) -> bool {
        self.0.whole_chunks()
    }
}

/// What [`Blob::visit`] and [`Blob::visit_spans`] hand the pieces to: a
/// hash, a decoder, a sum.
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

/// Hands every piece of `batch` to `v` on the blocking pool, in one hop.
async fn feed_all<V: Visit>(mut v: V, batch: Vec<Bytes>) -> Result<V, Stop<V::Error>> {
    if batch.is_empty() {
        return Ok(v);
    }
    off_runtime(move || {
        for piece in &batch {
            v.piece(piece)?;
        }
        Ok(v)
    })
    .await
    .map_err(Stop::Read)?
    .map_err(Stop::By)
}

/// Pieces read on the runtime, gathered for one hop to the blocking pool:
/// at most [`READ_CHUNK`] bytes in a hop (each piece is at most that).
#[derive(Default)]
struct Batch {
    pieces: Vec<Bytes>,
    bytes: u64,
}

impl Batch {
    /// Adds `piece`; the batches to hand over now, in order: the pieces
    /// gathered before it when it would take the batch past
    /// [`READ_CHUNK`] bytes, and the batch with it once that is full.
    fn add(&mut self, piece: Bytes) -> Vec<Vec<Bytes>> {
        let mut ready = Vec::new();
        let len = piece.len() as u64;
        if self.bytes.saturating_add(len) > READ_CHUNK && !self.pieces.is_empty() {
            ready.push(self.take());
        }
        self.bytes = self.bytes.saturating_add(len);
        self.pieces.push(piece);
        if self.bytes >= READ_CHUNK {
            ready.push(self.take());
        }
        ready
    }

    fn take(&mut self) -> Vec<Bytes> {
        self.bytes = 0;
        std::mem::take(&mut self.pieces)
    }
}

/// Set when dropped: a caller gone (its request dropped) tells the work it
/// started on the blocking pool to stop.
#[derive(Default)]
struct Going(Arc<AtomicBool>);

impl Drop for Going {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Why [`Blob::visit`] or [`Blob::visit_spans`] stopped short.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::store::memory::MemoryRoot;
    use crate::server::store::root::Root as _;

    /// Every piece handed over, in order.
    struct Collect(Vec<u8>);

    impl Visit for Collect {
        type Error = io::Error;

        fn piece(&mut self, bytes: &[u8]) -> io::Result<()> {
            self.0.extend_from_slice(bytes);
            Ok(())
        }
    }

    #[tokio::test]
    async fn spans_come_the_same_from_a_local_file_and_from_a_source_read_on_the_runtime() {
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        let identity = Identity::of(&file.metadata().unwrap());
        let local = Blob::local(
            file,
            identity,
            crate::server::store::descriptors::take(
                crate::server::store::descriptors::Hold::Passing,
            )
            .unwrap(),
        );
        let root = MemoryRoot::default();
        root.put("f", bytes.clone());
        let seen = root.stat("f").await.unwrap().unwrap();
        let memory = root.open(&seen).await.unwrap().blob;
        assert!(local.0.reads_blocking() && !memory.0.reads_blocking());
        assert!(!local.keeps_reads() && !memory.keeps_reads());

        let spans: Arc<[Range<u64>]> = vec![10..20, 500..1500, 99_990..100_000].into();
        let want: Vec<u8> = spans
            .iter()
            .flat_map(|s| bytes[s.start as usize..s.end as usize].to_vec())
            .collect();
        for blob in [&local, &memory] {
            let got = blob
                .visit_spans(Arc::clone(&spans), Collect(Vec::new()))
                .await;
            assert_eq!(got.map(|c| c.0).ok(), Some(want.clone()));
            // Past the end of the file: an error naming the read.
            let past: Arc<[Range<u64>]> = vec![0..4, 99_995..100_005].into();
            let Err(Stop::Read(e)) = blob.visit_spans(past, Collect(Vec::new())).await else {
                panic!("a span past the end was read");
            };
            assert!(e.to_string().contains("reading 10 bytes at 99995"), "{e}");
            // Longer than a read: refused before any.
            let long: Arc<[Range<u64>]> = std::iter::once(0..READ_CHUNK + 1).collect();
            let Err(Stop::Read(e)) = blob.visit_spans(long, Collect(Vec::new())).await else {
                panic!("a span longer than a read was read");
            };
            assert!(e.to_string().contains("longer than a read"), "{e}");
        }
    }

    #[test]
    fn a_hop_carries_at_most_a_reads_worth_of_pieces() {
        const KIB: usize = 1024;
        let sizes = [
            1024 * KIB,
            3072 * KIB,
            1,
            4096 * KIB,
            2048 * KIB,
            2047 * KIB,
            5,
        ];
        let mut batch = Batch::default();
        let mut hops: Vec<Vec<Bytes>> = Vec::new();
        let mut sent = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let piece = Bytes::from(vec![i as u8; n]);
            sent.extend_from_slice(&piece);
            hops.extend(batch.add(piece));
            if i == 1 {
                assert_eq!(hops.len(), 1, "a full batch goes at once");
            }
        }
        hops.push(batch.pieces);
        let totals: Vec<usize> = hops
            .iter()
            .map(|h| h.iter().map(Bytes::len).sum())
            .collect();
        // 1 MiB + 3 MiB fill a read and go; the byte waits, then goes
        // alone before the 4 MiB piece, which fills a read by itself; the
        // rest fit in one.
        assert_eq!(
            totals,
            [4096 * KIB, 1, 4096 * KIB, 4095 * KIB + 5],
            "every hop within the bound, a full one handed over at once"
        );
        assert!(totals.iter().all(|&t| t as u64 <= READ_CHUNK));
        let got: Vec<u8> = hops.iter().flatten().flat_map(|b| b.to_vec()).collect();
        assert!(got == sent, "every byte handed over once, in order");
    }
}
