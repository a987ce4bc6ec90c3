//! Rectangular slices of a served object ([`zt_format::slice`]): the runs
//! of bytes they gather from the file, and a digest of exactly the
//! gathered bytes. As for row ranges, a slice cannot be checked against
//! the component's digest: the server checks the whole component first
//! (once, as for every component it serves), then hashes the gathered
//! bytes in order; the client checks that digest. It is attested by the
//! server, not by the file.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use zt_format::slice::{Gather, Slice, SliceError};
use zt_format::{Digest, DigestAlgorithm, Hasher};

use crate::server::catalog::Served;
use crate::server::integrity::checks::CheckFailure;
use crate::server::integrity::digests::DigestMetrics;

/// A slice of an object's `data`, ready to send.
#[derive(Debug)]
pub(crate) struct Gathered {
    pub(crate) gather: Gather,
    /// The entry whose file holds the bytes (a shard's, perhaps).
    pub(crate) holder: Arc<Served>,
    /// The runs, as absolute spans of the holder's file, in order.
    pub(crate) spans: Vec<Range<u64>>,
    /// sha256 of exactly the gathered bytes.
    pub(crate) digest: Digest,
}

/// Why a slice is not sent.
#[derive(Debug)]
pub(crate) enum SliceFailure {
    NoObject(String),
    Slice(String, SliceError),
    Refused(CheckFailure),
}

/// Bytes of runs hashed in one hop to the blocking pool.
const HASH_BATCH: usize = 4 << 20;

/// `slice` of `object` in `served`: at most `cap` runs; the whole
/// component checked on first use, then the runs read and hashed in order
/// (on the blocking pool, a batch at a time).
pub(crate) async fn gather(
    served: &Arc<Served>,
    object: &str,
    slice: &Slice,
    cap: u64,
    metrics: &DigestMetrics,
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
    let spans: Vec<Range<u64>> = gather
        .runs()
        .map(|r| c.offset + r.start..c.offset + r.end)
        .collect();
    let unreadable = |e: std::io::Error| {
        SliceFailure::Refused(CheckFailure::Unreadable(format!(
            "{}: object {object:?}, component \"data\": reading slice {}: {e}",
            holder.path,
            gather.spec()
        )))
    };
    let mut hasher = Hasher::new(DigestAlgorithm::Sha256);
    let (mut batch, mut batched) = (Vec::<Bytes>::new(), 0usize);
    for span in &spans {
        let len = usize::try_from(span.end - span.start).unwrap_or(usize::MAX);
        let bytes = match holder.file.read_now(span) {
            Some(read) => read,
            None => holder.file.read_async(len, span.start, None).await,
        }
        .map_err(unreadable)?;
        batched += bytes.len();
        batch.push(bytes);
        if batched >= HASH_BATCH {
            hasher = hash(hasher, std::mem::take(&mut batch)).await?;
            batched = 0;
        }
    }
    let hasher = hash(hasher, batch).await?;
    metrics.rows.inc();
    metrics.row_bytes.inc_by(gather.len());
    Ok(Gathered {
        gather,
        holder,
        spans,
        digest: hasher.finish(),
    })
}

/// `batch` fed to `hasher` on the blocking pool.
async fn hash(mut hasher: Hasher, batch: Vec<Bytes>) -> Result<Hasher, SliceFailure> {
    if batch.is_empty() {
        return Ok(hasher);
    }
    let fed = tokio::task::spawn_blocking(move || {
        for b in &batch {
            hasher.update(b);
        }
        hasher
    });
    fed.await.map_err(|e| {
        SliceFailure::Refused(CheckFailure::Unreadable(format!(
            "hashing a slice: the blocking pool: {e}"
        )))
    })
}
