//! Row ranges of a served object ([`zt_format::rows`]): where they lie
//! in the file, and a digest of exactly their bytes. A row range cannot
//! be checked against the component's digest, so the server checks the
//! whole component first (once, as for every component it serves), then
//! hashes the rows it is about to send; the client checks that digest.
//! It is attested by the server, not by the file.

use zt_format::rows::{Rows, RowsError};
use zt_format::{Digest, DigestAlgorithm, Hasher};

use std::convert::Infallible;
use std::sync::Arc;

use crate::server::catalog::{Catalog, Served};
use crate::server::cpu::{CpuError, CpuPool, Turn};
use crate::server::integrity::slice_digests::SliceDigests;

use crate::server::integrity::checks::CheckFailure;
use crate::server::store::blob::{Stop, Visit};

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
    Refused(CheckFailure),
    /// No turn of the CPU pool to hash them (busy: `limits.cpu_queue`).
    Cpu(CpuError),
}

/// Rows `rows` of `object` in `served`: the whole component checked on
/// first use, then the rows read (on the runtime) and hashed (on the
/// blocking pool) within one turn of `cpu`, taken before the first read
/// (refused as busy past its queue: a queued request holds no buffer; an
/// object's reads count within the turn), unless the same rows of the
/// same version were hashed before (kept with the slices' digests: ranks
/// restarted, or replicas of a model, ask for the same rows again).
pub(crate) async fn slice(
    served: &Arc<Served>,
    object: &str,
    rows: Rows,
    catalog: &Catalog,
    cpu: &CpuPool,
) -> Result<Slice, RowsFailure> {
    let obj =
        served.manifest.objects.get(object).ok_or_else(|| {
            RowsFailure::NoObject(format!("{}: no object {object:?}", served.path))
        })?;
    let (start, len) = rows
        .span(obj)
        .map_err(|e| RowsFailure::Rows(format!("{}: object {object:?}: {e}", served.path), e))?;
    let c = obj.components.get("data").ok_or_else(|| {
        RowsFailure::NoObject(format!("{}: object {object:?} has no data", served.path))
    })?;
    served
        .check(object, "data")
        .await
        .map_err(RowsFailure::Refused)?;
    let owner = served.owner(object, "data");
    let holder = owner.as_ref().unwrap_or(served);
    let span = c.offset + start..c.offset + start + len;
    // Keyed by where the bytes lie in the file's version, not only by
    // the object's name (two packs may give one name to two tensors of
    // the same file).
    let spec = format!("bytes {}-{}", span.start, span.end);
    let key = SliceDigests::key(&holder.version_key(), object, &spec);
    let kept = key.as_deref().and_then(|k| catalog.slice_digests().get(k));
    let digest = match kept {
        Some(digest) => digest,
        None => {
            let what = format!(
                "{}: object {object:?}: hashing rows {}:{}",
                served.path, rows.start, rows.end
            );
            let turn = cpu.turn(&what).await.map_err(RowsFailure::Cpu)?;
            let digest = hash(holder, object, rows, span, turn).await?;
            catalog.slice_digests().computed(key, digest.clone());
            let metrics = catalog.digest_metrics();
            metrics.rows.inc();
            metrics.row_bytes.inc_by(len);
            digest
        }
    };
    Ok(Slice {
        start,
        len,
        component_offset: c.offset,
        digest,
    })
}

/// The sha256 of `span` of `holder`'s file (rows `rows` of `object`),
/// hashed in `turn`.
async fn hash(
    holder: &Served,
    object: &str,
    rows: Rows,
    span: std::ops::Range<u64>,
    turn: Turn,
) -> Result<Digest, RowsFailure> {
    let hashed = holder.file.visit(span, false, Sha256::new(turn)).await;
    let h = hashed.map_err(|stop| {
        let why = match stop {
            Stop::Read(why) => why,
            Stop::By(never) => match never {},
        };
        RowsFailure::Refused(CheckFailure::Unreadable(format!(
            "{}: object {object:?}, component \"data\": reading rows {}:{}: {why}",
            holder.path, rows.start, rows.end
        )))
    })?;
    Ok(h.hasher.finish())
}

/// The sha256 of rows as they are read, and the CPU pool's turn they are
/// hashed in (carried into each hop to the blocking pool, so a request
/// that goes away mid-hash keeps its turn taken until the hop ends).
struct Sha256 {
    hasher: Hasher,
    _turn: Turn,
}

impl Sha256 {
    fn new(turn: Turn) -> Sha256 {
        Sha256 {
            hasher: Hasher::new(DigestAlgorithm::Sha256),
            _turn: turn,
        }
    }
}

impl Visit for Sha256 {
    type Error = Infallible;

    fn piece(&mut self, bytes: &[u8]) -> Result<(), Infallible> {
        self.hasher.update(bytes);
        Ok(())
    }
}
