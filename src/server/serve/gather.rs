//! Rectangular slices of a served object ([`zt_format::slice`]): the runs
//! of bytes they gather from the file, and a digest of exactly the
//! gathered bytes. As for row ranges, a slice cannot be checked against
//! the component's digest: the server checks the whole component first
//! (once, as for every component it serves), then hashes the gathered
//! bytes in order (once per slice of a version of the file: the digest is
//! kept, [`SliceDigests`]); the client checks that digest. It is attested by
//! the server, not by the file.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use zt_format::slice::{Gather, Slice, SliceError};
use zt_format::{Digest, DigestAlgorithm, Hasher};

use crate::server::catalog::{Catalog, Served};
use crate::server::cpu::{CpuError, CpuPool, Turn};
use crate::server::integrity::checks::CheckFailure;
use crate::server::integrity::slice_digests::SliceDigests;
use crate::server::store::blob::{Stop, Visit};

/// A slice of an object's `data`, ready to send.
#[derive(Debug)]
pub(crate) struct Gathered {
    pub(crate) gather: Gather,
    /// The entry whose file holds the bytes (a shard's, perhaps).
    pub(crate) holder: Arc<Served>,
    /// The reads that gather the runs, in order.
    pub(crate) windows: Arc<[Window]>,
    /// Where the first gathered byte lies in the holder's file.
    pub(crate) first: u64,
    /// sha256 of exactly the gathered bytes.
    pub(crate) digest: Digest,
}

/// One read of a slice's bytes: a span of the file at most [`WINDOW`]
/// long, and the runs of the slice it holds (relative to its start), in
/// order. Runs closer together than a window share one read, so a column
/// block of a matrix (a short run per row) costs a read per window, not
/// one per row.
#[derive(Debug, Clone)]
pub(crate) struct Window {
    pub(crate) span: Range<u64>,
    pub(crate) runs: Vec<Range<usize>>,
}

/// Runs copied out of a window's read, holding the read (and its charge).
struct Picked {
    out: Vec<u8>,
    _read: Bytes,
}

impl AsRef<[u8]> for Picked {
    fn as_ref(&self) -> &[u8] {
        &self.out
    }
}

/// The most bytes one window reads: a run longer than this is read in
/// pieces of it.
pub(crate) const WINDOW: u64 = 1 << 20;

impl Window {
    /// How many of the slice's bytes it holds.
    pub(crate) fn len(&self) -> usize {
        self.runs.iter().map(|r| r.end - r.start).sum()
    }

    /// The slice's bytes out of `read`, the window's bytes: the read
    /// itself when one run fills it, else the runs copied together, which
    /// keep the read alive with them, so that whatever budget the read
    /// is charged to stays charged until the copy is dropped.
    /// A read shorter than the window (a file cut short under it) is an
    /// error, never a slice with runs missing.
    pub(crate) fn pick(&self, read: Bytes) -> std::io::Result<Bytes> {
        let span = usize::try_from(self.span.end - self.span.start).unwrap_or(usize::MAX);
        if read.len() != span {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("read {} bytes of a {span}-byte window", read.len()),
            ));
        }
        Ok(match self.runs.as_slice() {
            [only] if only.start == 0 && only.end == read.len() => read,
            runs => {
                let mut out = Vec::with_capacity(self.len());
                for r in runs {
                    out.extend_from_slice(read.get(r.clone()).unwrap_or_default());
                }
                Bytes::from_owner(Picked { out, _read: read })
            }
        })
    }
}

/// The windows that read `spans` (absolute runs of the file, in order).
fn windows(spans: impl Iterator<Item = Range<u64>>) -> Vec<Window> {
    let mut out: Vec<Window> = Vec::new();
    for run in spans {
        let mut pos = run.start;
        while pos < run.end {
            let piece_end = run.end.min(pos.saturating_add(WINDOW));
            let joins = out
                .last()
                .is_some_and(|w| piece_end.saturating_sub(w.span.start) <= WINDOW);
            if !joins {
                out.push(Window {
                    span: pos..pos,
                    runs: Vec::new(),
                });
            }
            if let Some(w) = out.last_mut() {
                let base = w.span.start;
                let rel = |x: u64| usize::try_from(x - base).unwrap_or(usize::MAX);
                w.runs.push(rel(pos)..rel(piece_end));
                w.span.end = piece_end;
            }
            pos = piece_end;
        }
    }
    out
}

/// Why a slice is not sent.
#[derive(Debug)]
pub(crate) enum SliceFailure {
    NoObject(String),
    Slice(String, SliceError),
    Refused(CheckFailure),
    /// No turn of the CPU pool to hash them (busy: `limits.cpu_queue`).
    Cpu(CpuError),
}

/// `slice` of `object` in `served`: at most `cap` runs; the whole
/// component checked on first use, then the runs read and hashed in order
/// on the blocking pool ([`Blob::visit_spans`](crate::server::store::Blob::visit_spans): a
/// local file's windows read into one buffer in one hop) within one turn
/// of `cpu`, taken before the first read (refused as busy past its queue;
/// an object's reads count within the turn), unless kept from before.
pub(crate) async fn gather(
    served: &Arc<Served>,
    object: &str,
    slice: &Slice,
    cap: u64,
    catalog: &Catalog,
    cpu: &CpuPool,
) -> Result<Gathered, SliceFailure> {
    let path = &served.path;
    let obj = served
        .manifest
        .objects
        .get(object)
        .ok_or_else(|| SliceFailure::NoObject(format!("{path}: no object {object:?}")))?;
    let gather = slice
        .gather(obj, cap)
        .map_err(|e| SliceFailure::Slice(format!("{path}: object {object:?}: {e}"), e))?;
    let c = obj
        .components
        .get("data")
        .ok_or_else(|| SliceFailure::NoObject(format!("{path}: object {object:?} has no data")))?;
    served
        .check(object, "data")
        .await
        .map_err(SliceFailure::Refused)?;
    let holder = served
        .owner(object, "data")
        .unwrap_or_else(|| Arc::clone(served));
    let windows: Arc<[Window]> =
        windows(gather.runs().map(|r| c.offset + r.start..c.offset + r.end)).into();
    let unreadable = |e: std::io::Error| {
        SliceFailure::Refused(CheckFailure::Unreadable(format!(
            "{}: object {object:?}, component \"data\": reading slice {}: {e}",
            holder.path,
            gather.spec()
        )))
    };
    // The slice of the component where it lies in the file's version
    // (two packs may give one name to two tensors of the same file).
    let spec = format!("{} at {}", gather.spec(), c.offset);
    let key = SliceDigests::key(&holder.version_key(), object, &spec);
    let kept = key.as_deref().and_then(|k| catalog.slice_digests().get(k));
    let digest = match kept {
        Some(digest) => digest,
        None => {
            let what = format!("{path}: object {object:?}: hashing slice {}", gather.spec());
            let turn = cpu.turn(&what).await.map_err(SliceFailure::Cpu)?;
            let digest = hash_runs(&holder, &windows, turn)
                .await
                .map_err(unreadable)?;
            catalog.slice_digests().computed(key, digest.clone());
            let metrics = catalog.digest_metrics();
            metrics.rows.inc();
            metrics.row_bytes.inc_by(gather.len());
            digest
        }
    };
    let first = windows
        .first()
        .and_then(|w| w.runs.first().map(|r| w.span.start + r.start as u64))
        .unwrap_or(c.offset);
    Ok(Gathered {
        gather,
        holder,
        windows,
        first,
        digest,
    })
}

/// The sha256 of the runs of `windows`, read from `holder`'s file and
/// hashed in `turn`.
async fn hash_runs(
    holder: &Served,
    windows: &Arc<[Window]>,
    turn: Turn,
) -> std::io::Result<Digest> {
    let spans: Arc<[Range<u64>]> = windows.iter().map(|w| w.span.clone()).collect();
    let hashed = RunHasher {
        windows: Arc::clone(windows),
        next: 0,
        hasher: Hasher::new(DigestAlgorithm::Sha256),
        _turn: turn,
    };
    match holder.file.visit_spans(spans, hashed).await {
        Ok(hashed) => Ok(hashed.hasher.finish()),
        Err(Stop::Read(e) | Stop::By(e)) => Err(e),
    }
}

/// The gathered bytes' digest: fed each window's read in order, it hashes
/// the window's runs. It carries the CPU pool's turn it hashes in into
/// each hop to the blocking pool (a request that goes away mid-hash keeps
/// the turn taken until the hop ends).
struct RunHasher {
    windows: Arc<[Window]>,
    next: usize,
    hasher: Hasher,
    _turn: Turn,
}

impl Visit for RunHasher {
    type Error = std::io::Error;

    fn piece(&mut self, read: &[u8]) -> std::io::Result<()> {
        let runs = self
            .windows
            .get(self.next)
            .map(|w| w.runs.as_slice())
            .ok_or_else(|| std::io::Error::other("more reads than the slice has windows"))?;
        self.next += 1;
        for run in runs {
            let bytes = read.get(run.clone()).ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "a window read short")
            })?;
            self.hasher.update(bytes);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_closer_than_a_window_share_one_read() {
        // A column block: 4 rows of 8,192 bytes, 1,024 of each.
        let runs = (0..4u64).map(|r| 100 + r * 8192 + 3072..100 + r * 8192 + 4096);
        let w = windows(runs);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].span, 100 + 3072..100 + 3 * 8192 + 4096);
        assert_eq!(w[0].len(), 4096);
        let read = Bytes::from(
            (0..w[0].span.end - w[0].span.start)
                .map(|i| i as u8)
                .collect::<Vec<_>>(),
        );
        let picked = w[0].pick(read.clone()).unwrap();
        assert_eq!(&picked[..1024], &read[..1024]);
        assert!(
            w[0].pick(read.slice(..100)).is_err(),
            "a short read is refused"
        );
        assert_eq!(&picked[1024..2048], &read[8192..9216]);
    }

    #[test]
    fn a_long_run_is_read_in_windows_without_a_copy() {
        let w = windows(std::iter::once(10..10 + 2 * WINDOW + 5));
        assert_eq!(w.len(), 3);
        assert_eq!(w[2].span, 10 + 2 * WINDOW..10 + 2 * WINDOW + 5);
        let read = Bytes::from(vec![7u8; WINDOW as usize]);
        let picked = w[0].pick(read.clone()).unwrap();
        assert_eq!(
            picked.as_ptr(),
            read.as_ptr(),
            "one run filling the window is the read itself"
        );
        // Runs far apart: a window each.
        let w = windows([0..4, 3 * WINDOW..3 * WINDOW + 4].into_iter());
        assert_eq!(w.len(), 2);
    }
}
