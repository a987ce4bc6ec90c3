//! What a request sends, transport aside: the components of a selection
//! in send order, byte ranges of a file, or rows of one object, each a
//! [`Part`] described by the manifest the client is sent. ztp/1 sends each
//! part as a stream (`quic/send.rs`); HTTP sends the bytes of a whole file
//! or of one component, a [`Payload`] ([`file`], [`component_bytes`]; or
//! decoded, [`decoding`]), with the headers and ranges it adds.

use std::sync::Arc;

use zt_format::rows::Rows;
use zt_format::select::Selection;
use zt_format::{Component, Manifest, Object};

use super::rows::slice;
use super::Refusal;
use crate::server::catalog::Served;
use crate::server::integrity::checks::CheckFailure;
use crate::server::render::renderings::{Key, Kind, Rendered};
use crate::server::State;

/// One component to send: where its bytes lie (`component.offset`,
/// `length`) and what the client checks them against.
#[derive(Debug, Clone)]
pub(crate) struct Part {
    pub(crate) object: String,
    pub(crate) role: String,
    pub(crate) component: Component,
    /// A synthesized component's bytes, which no range of the file holds
    /// (its `offset` is then 0): the part is sent from them.
    pub(crate) memory: Option<bytes::Bytes>,
    /// A gathered slice's reads of the file, in order, instead of
    /// `offset..offset + length` (whose `offset` is then the first byte's).
    pub(crate) windows: Option<Arc<[super::gather::Window]>>,
    /// The entry whose file holds the bytes (a shard's, for a component
    /// of a sharded checkpoint) and checks them.
    pub(crate) from: Arc<Served>,
    /// What is checked before the part's first byte goes out.
    pub(crate) check: Check,
}

/// What a part is checked as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Its component, against the component's digest.
    Component,
    /// A byte range of the file: every component it overlaps.
    Bytes,
}

/// What a request sends: the manifest that describes it (v1.2 CBOR) and
/// its parts, in order.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) served: Arc<Served>,
    /// Shared with the renderings cache where it came from there.
    pub(crate) manifest: bytes::Bytes,
    pub(crate) parts: Vec<Part>,
}

/// The bytes of an HTTP response, before its headers and ranges: where
/// they lie in the file (or the bytes themselves), the strong ETag that
/// names exactly them, and whether the components they carry whole are
/// hashed again as they are sent (`serve/recheck.rs`).
#[derive(Debug)]
pub(crate) struct Payload {
    pub(crate) served: Arc<Served>,
    pub(crate) span: std::ops::Range<u64>,
    /// A synthesized component's bytes, which no range of the file holds;
    /// `span` is then `0..len`.
    pub(crate) memory: Option<bytes::Bytes>,
    pub(crate) etag: String,
    pub(crate) recheck: bool,
}

/// The whole file, under its ETag; rechecked when the response may be
/// kept for good (`pinned`: a `?v=` URL).
pub(crate) fn file(served: Arc<Served>, pinned: bool) -> Payload {
    Payload {
        span: 0..served.size,
        etag: served.etag.clone(),
        memory: None,
        recheck: pinned,
        served,
    }
}

/// A component's own ETag: its cryptographic digest (sha256, blake3)
/// where it has one (the same bytes under the same tag in every file and
/// on every replica), else one derived from the file's version and the
/// component's name.
pub(crate) fn component_etag(served: &Served, object: &str, role: &str, c: &Component) -> String {
    use crate::server::catalog::etag;
    match c.digest.as_ref().and_then(|d| d.cryptographic()) {
        Some((algorithm, hash)) => etag::quoted(algorithm, hash),
        None => etag::derived(
            "c",
            &[
                served.etag.as_bytes(),
                object.as_bytes(),
                b"\0",
                role.as_bytes(),
            ],
        ),
    }
}

/// A component's stored bytes, under its own ETag, always rechecked as
/// they are sent; one stored in a legacy layout is refused (its bytes
/// are not what its dtype says until decoded).
pub(crate) fn component_bytes(
    served: Arc<Served>,
    object: &str,
    role: &str,
) -> Result<Payload, Refusal> {
    let (_, c) = component(&served, object, role)?;
    if c.is_transformed() {
        return Err(legacy_layout(
            &served,
            object,
            role,
            "is stored in a legacy layout; fetch it with ?decode=1",
        ));
    }
    let etag = component_etag(&served, object, role, c);
    let memory = served.synthesized(object, role);
    let span = match &memory {
        Some(b) => 0..b.len() as u64,
        None => c.offset..c.offset.saturating_add(c.length),
    };
    Ok(Payload {
        span,
        etag,
        memory,
        recheck: true,
        served,
    })
}

/// A zstd component served decoded (`?decode=1`): the tag of its decoded
/// bytes and how many there are.
#[derive(Debug)]
pub(crate) struct Decoding {
    pub(crate) etag: String,
    pub(crate) length: u64,
    /// `path: object …, component …`, for reasons.
    pub(crate) label: String,
}

impl Decoding {
    /// Refused past `cap` (`limits.decompress_cap`).
    pub(crate) fn within(&self, cap: u64) -> Result<(), Refusal> {
        if self.length > cap {
            return Err(Refusal::TooLarge(format!(
                "{} decodes to {} bytes, over the cap of {cap} (decompress-over-cap)",
                self.label, self.length
            )));
        }
        Ok(())
    }
}

/// [`Decoding`] of `object`'s `role`.
pub(crate) fn decoding(served: &Served, object: &str, role: &str) -> Result<Decoding, Refusal> {
    let (_, c) = component(served, object, role)?;
    let etag =
        crate::server::catalog::etag::suffixed(&component_etag(served, object, role, c), "decoded");
    Ok(Decoding {
        etag,
        length: c.uncompressed_length.unwrap_or(u64::MAX),
        label: format!("{}: object {object:?} component {role:?}", served.path),
    })
}

/// A component stored in a legacy layout, refused where stored bytes are
/// sent (`how` says what to do instead).
fn legacy_layout(served: &Served, object: &str, role: &str, how: &str) -> Refusal {
    Refusal::LegacyLayout(format!(
        "{}: object {object:?} component {role:?} {how}",
        served.path
    ))
}

/// Checks what a part sends before its first byte goes out, as the plan
/// said ([`Check`]): the component `object`'s `role` of `from`, or every
/// component of `from` that `span` overlaps.
pub(crate) async fn check_part(
    from: &Arc<Served>,
    check: Check,
    object: &str,
    role: &str,
    span: std::ops::Range<u64>,
) -> Result<(), Refusal> {
    let checked = match check {
        Check::Component => from.check(object, role).await,
        Check::Bytes => from.check_spans(std::slice::from_ref(&span)).await,
    };
    checked.map_err(|failure| refused(from, failure))
}

/// A failed check as the request's refusal, logged once, alike for both
/// transports: the file, and why.
pub(crate) fn refused(from: &Served, failure: CheckFailure) -> Refusal {
    match &failure {
        CheckFailure::Corrupt(why) => {
            tracing::warn!(file = %from.path, reason = %why, "refusing a corrupt component");
        }
        CheckFailure::Unreadable(why) => {
            tracing::warn!(file = %from.path, reason = %why, "component unreadable (file changed?)");
        }
    }
    failure.into()
}

/// The entry whose file holds `object`'s `role` and checks it: a shard's,
/// for a component of a sharded checkpoint, else `served` itself.
pub(crate) fn holder(served: &Arc<Served>, object: &str, role: &str) -> Arc<Served> {
    served
        .owner(object, role)
        .unwrap_or_else(|| Arc::clone(served))
}

/// The object `object` and its component `role` of `served`.
pub(crate) fn component<'a>(
    served: &'a Served,
    object: &str,
    role: &str,
) -> Result<(&'a Object, &'a Component), Refusal> {
    let obj = served
        .manifest
        .objects
        .get(object)
        .ok_or_else(|| Refusal::NotFound(format!("{}: no object {object:?}", served.path)))?;
    let c = obj.components.get(role).ok_or_else(|| {
        Refusal::NotFound(format!(
            "{}: object {object:?} has no component {role:?}",
            served.path
        ))
    })?;
    Ok((obj, c))
}

/// The objects `select` names (all when empty), their manifest from the
/// renderings cache, and, unless `manifest_only`, their components in the
/// send order `order` asks for. A component stored in a legacy layout is
/// refused: a stream carries stored bytes.
pub(crate) async fn selection(
    state: &State,
    served: Arc<Served>,
    select: &[String],
    order: &[String],
    manifest_only: bool,
) -> Result<Plan, Refusal> {
    let key = Key {
        etag: served.etag.clone(),
        kind: Kind::Ztp,
        select: select.to_vec(),
    };
    let (of, wanted) = (Arc::clone(&served), select.to_vec());
    let rendered = state
        .renderings
        .get(key, move |w| crate::server::render::ztp(&of, &wanted, w))
        .await;
    let manifest = match &*rendered {
        Rendered::Body { bytes, .. } => bytes.clone(),
        Rendered::Refused(r) => return Err(r.clone().into()),
    };
    if manifest_only {
        return Ok(Plan {
            served,
            manifest,
            parts: Vec::new(),
        });
    }
    let work = matching_work(&served, select);
    let (of, select, order) = (Arc::clone(&served), select.to_vec(), order.to_vec());
    let parts = state
        .cpu
        .run_sized("planning a selection's send order", work, move || {
            parts_of(&of, &select, &order)
        })
        .await??;
    Ok(Plan {
        served,
        manifest,
        parts,
    })
}

/// What matching `select` against `served`'s objects costs, in
/// name-pattern pairs (for [`crate::server::cpu::CpuPool::run_sized`]).
pub(crate) fn matching_work(served: &Served, select: &[String]) -> usize {
    served
        .manifest
        .objects
        .len()
        .saturating_mul(select.len().saturating_add(1))
}

/// The components of the objects `select` names, in the send order
/// `order` asks for (CPU-heavy for a large manifest: run on the CPU pool).
fn parts_of(
    served: &Arc<Served>,
    select: &[String],
    order: &[String],
) -> Result<Vec<Part>, Refusal> {
    let filtered = selected(served, select)?;
    let mut parts = Vec::new();
    for (name, role, c) in zt_format::send_order(&filtered, order) {
        if c.is_transformed() {
            return Err(legacy_layout(
                served,
                name,
                role,
                "is in a legacy layout; convert the file with zt pack",
            ));
        }
        let from = holder(served, name, role);
        parts.push(Part {
            object: name.to_owned(),
            role: role.to_owned(),
            component: c.clone(),
            memory: from.synthesized(name, role),
            windows: None,
            from,
            check: Check::Component,
        });
    }
    Ok(parts)
}

/// `served`'s manifest restricted to the objects `select` names.
fn selected(served: &Served, select: &[String]) -> Result<Manifest, Refusal> {
    let sel = Selection::new(select).map_err(|e| Refusal::BadSelection(e.to_string()))?;
    sel.filter(&served.manifest)
        .map_err(|e| Refusal::NoMatch(format!("{}: {e}", served.path)))
}

/// Byte ranges of the file, in the order asked for, each described as a
/// `u8` object (`@bytes/START-END`, its `data` at START) so the client
/// checks bounds and lengths as for components. A range past the file's
/// end matches nothing. No digests: the client checks what the bytes mean
/// (a copy's header is read back against the manifest).
pub(crate) fn byte_ranges(served: Arc<Served>, ranges: &[(u64, u64)]) -> Result<Plan, Refusal> {
    let mut m = Manifest {
        source: served.manifest.source,
        ..Manifest::default()
    };
    let mut parts = Vec::with_capacity(ranges.len());
    for &(start, end) in ranges {
        if end > served.size {
            return Err(Refusal::NoMatch(format!(
                "{}: bytes {start}..{end} run past its {} bytes",
                served.path, served.size
            )));
        }
        let name = ztp_proto::range_object(start, end);
        let len = end - start;
        let c = Component::of_file(zt_format::DType::U8, start, len);
        let mut components = zt_format::Components::new();
        components.insert("data".to_owned(), c.clone());
        let object = Object {
            shape: vec![len],
            format: zt_format::Format::Dense,
            attributes: zt_format::Attributes::new(),
            components,
        };
        m.objects.insert(name.clone(), object);
        parts.push(Part {
            object: name,
            role: "data".to_owned(),
            component: c,
            memory: None,
            windows: None,
            from: Arc::clone(&served),
            check: Check::Bytes,
        });
    }
    let manifest = zt_format::manifest_cbor(&m).into();
    Ok(Plan {
        served,
        manifest,
        parts,
    })
}

/// Rows `rows` of the one raw dense object `select` names, as one part:
/// the object with its first dimension cut to the rows, its `data` where
/// the rows lie in the file and the sha256 of those bytes (computed now,
/// `digest_by: "server"`), so the client checks them as any component.
pub(crate) async fn rows(
    state: &State,
    served: Arc<Served>,
    select: &[String],
    rows: Rows,
) -> Result<Plan, Refusal> {
    let (name, mut obj) = one_object(state, &served, select, "rows").await?;
    let cut = slice(&served, &name, rows, &state.catalog, &state.cpu).await?;
    if let Some(first) = obj.shape.first_mut() {
        *first = rows.end.saturating_sub(rows.start);
    }
    let offset = cut.component_offset.saturating_add(cut.start);
    cut_part(served, name, obj, offset, cut.len, cut.digest, None)
}

/// Slice `ranges` (a `[start, end)` per dimension from the first) of the
/// one raw dense object `select` names, as one part: the object shaped as
/// the slice, its `data` the gathered runs (read in order when sent) under
/// the sha256 of exactly those bytes (`digest_by: "server"`).
pub(crate) async fn gathered(
    state: &State,
    served: Arc<Served>,
    select: &[String],
    ranges: &[(u64, u64)],
) -> Result<Plan, Refusal> {
    let (name, mut obj) = one_object(state, &served, select, "a slice").await?;
    let ranges: Vec<std::ops::Range<u64>> = ranges.iter().map(|&(a, b)| a..b).collect();
    let slice = zt_format::slice::Slice::of(&ranges);
    let cap = state.config.limits.max_slice_pieces;
    let g = super::gather::gather(&served, &name, &slice, cap, &state.catalog, &state.cpu).await?;
    obj.shape.clone_from(&g.gather.shape);
    let len = g.gather.len();
    cut_part(served, name, obj, g.first, len, g.digest, Some(g.windows))
}

/// The one object `select` names, for a request of `what` (rows, a
/// slice) that cuts one object.
async fn one_object(
    state: &State,
    served: &Arc<Served>,
    select: &[String],
    what: &str,
) -> Result<(String, zt_format::Object), Refusal> {
    let work = matching_work(served, select);
    let (of, wanted) = (Arc::clone(served), select.to_vec());
    let picked = state
        .cpu
        .run_sized("matching a selection", work, move || selected(&of, &wanted))
        .await??;
    match picked.objects.into_iter().collect::<Vec<_>>().as_slice() {
        [(name, obj)] => Ok((name.clone(), obj.clone())),
        other => Err(Refusal::NoMatch(format!(
            "{}: {what} need a selection of exactly one object; it names {}",
            served.path,
            other.len()
        ))),
    }
}

/// `obj` (already shaped as the cut) sent as one part: its `data` the
/// `len` bytes at `offset` of the file (or the reads `windows`, in order),
/// under `digest`, computed by the server.
fn cut_part(
    served: Arc<Served>,
    name: String,
    mut obj: zt_format::Object,
    offset: u64,
    len: u64,
    digest: zt_format::Digest,
    windows: Option<Arc<[super::gather::Window]>>,
) -> Result<Plan, Refusal> {
    let (_, c) = component(&served, &name, "data")?;
    let mut c = c.clone();
    c.offset = offset;
    c.length = len;
    c.uncompressed_length = None;
    c.digest = Some(digest);
    c.digest_computed = true;
    obj.components = zt_format::Components::new();
    obj.components.insert("data".to_owned(), c.clone());
    let m = Manifest {
        source: served.manifest.source,
        // A shard's cut is checked against that shard's size.
        files: served.manifest.files.clone(),
        objects: [(name.clone(), obj)].into_iter().collect(),
        ..Manifest::default()
    };
    let manifest = zt_format::manifest_cbor(&m).into();
    let part = Part {
        from: holder(&served, &name, "data"),
        object: name,
        role: "data".to_owned(),
        component: c,
        memory: None,
        windows,
        check: Check::Component,
    };
    Ok(Plan {
        served,
        manifest,
        parts: vec![part],
    })
}
