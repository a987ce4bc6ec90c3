//! Row ranges of a served object ([`zt_format::rows`]): where they lie
//! in the file, and a digest of exactly their bytes. A row range cannot
//! be checked against the component's digest, so the server checks the
//! whole component first (once, as for every component it serves), then
//! hashes the rows it is about to send; the client checks that digest.
//! It is attested by the server, not by the file.

use zt_format::rows::{Rows, RowsError};
use zt_format::{Digest, DigestAlgorithm, Hasher};

use crate::server::catalog::Served;
use std::sync::atomic::Ordering;

use crate::server::integrity::checks::Refusal;
use crate::server::integrity::digests::DigestMetrics;
use crate::server::store::READ_CHUNK;

/// Rows of an object's `data`, ready to send.
#[derive(Debug, Clone)]
pub(crate) struct Slice {
    /// Where the rows start, relative to the component, and how long they are.
    pub(crate) start: u64,
    pub(crate) len: u64,
    /// Where the component lies in the file.
    pub(crate) component_offset: u64,
    /// sha256 of exactly the rows' bytes.
    pub(crate) digest: Digest,
}

/// Why rows are not sent.
#[derive(Debug)]
pub(crate) enum RowsFailure {
    NoObject(String),
    Rows(String, RowsError),
    Refused(Refusal),
}

/// Rows `rows` of `object` in `served` (blocking: it checks the whole
/// component on first use, then reads the rows to hash them).
pub(crate) fn slice(
    served: &Served,
    object: &str,
    rows: Rows,
    metrics: &DigestMetrics,
) -> Result<Slice, RowsFailure> {
    let obj =
        served.manifest.objects.get(object).ok_or_else(|| {
            RowsFailure::NoObject(format!("{}: no object {object:?}", served.path))
        })?;
    let (start, len) = rows
        .span(obj)
        .map_err(|e| RowsFailure::Rows(format!("{}: object {object:?}: {e}", served.path), e))?;
    let owner = served.owner(object, "data");
    let holder = owner.as_deref().unwrap_or(served);
    served.check(object, "data").map_err(RowsFailure::Refused)?;
    let c = obj.components.get("data").ok_or_else(|| {
        RowsFailure::NoObject(format!("{}: object {object:?} has no data", served.path))
    })?;
    let mut h = Hasher::new(DigestAlgorithm::Sha256);
    let (mut pos, end) = (c.offset + start, c.offset + start + len);
    while pos < end {
        let n = READ_CHUNK.min(end - pos);
        let chunk = holder
            .file
            .read_exact(usize::try_from(n).unwrap_or(0), pos)
            .map_err(|e| {
                RowsFailure::Refused(Refusal::Unreadable(format!(
                    "{}: object {object:?}, component \"data\": reading rows {}:{}: {e}",
                    holder.path, rows.start, rows.end
                )))
            })?;
        h.update(&chunk);
        pos += n;
    }
    metrics.rows.fetch_add(1, Ordering::Relaxed);
    metrics.row_bytes.fetch_add(len, Ordering::Relaxed);
    Ok(Slice {
        start,
        len,
        component_offset: c.offset,
        digest: h.finish(),
    })
}
