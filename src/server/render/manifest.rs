//! A served file's manifest rendered for a request: the selection
//! applied, then JSON or CBOR written into a capped buffer
//! ([`crate::server::render::renderings`] shares and keeps the result), or, for
//! an HTTP rendering past the cap, written out as it is made
//! ([`crate::server::http`]'s streamed manifest).

use std::io::Write;
use std::sync::Arc;

use zt_format::chunked::{Chunked, DocForm};
use zt_format::manifest_json::ManifestDoc;
use zt_format::select::Selection;
use zt_format::Manifest;

use crate::server::catalog::etag;
use crate::server::catalog::Served;
use crate::server::render::renderings::{Capped, Kind, Refused, Rendered};

/// The file's manifest restricted to `select` (all of it when empty).
fn selected(served: &Served, select: &[String]) -> Result<Option<Manifest>, Refused> {
    if select.is_empty() {
        return Ok(None);
    }
    let sel = Selection::new(select).map_err(|e| Refused::BadSelect(e.to_string()))?;
    sel.filter(&served.manifest)
        .map(Some)
        .map_err(|e| Refused::NoMatch(format!("{}: {e}", served.path)))
}

fn too_large(served: &Served, w: &Capped) -> Rendered {
    Rendered::Refused(Refused::TooLarge(format!(
        "{}: its manifest renders to more than the per-request cap of {} bytes (limits.render_cap); ask for part of it with ?select=",
        served.path,
        w.cap()
    )))
}

/// Where an HTTP rendering's bytes come from (`json`, `file`: the CBOR
/// the file stores, or `re-encoded`), and its content type.
fn form(served: &Served, kind: Kind, selected: Option<&Manifest>) -> (&'static str, &'static str) {
    match (kind, selected.is_none() && served.stored_cbor().is_some()) {
        (Kind::Json, _) => ("json", "application/json"),
        (Kind::Cbor | Kind::Ztp, true) => ("file", "application/cbor"),
        (Kind::Cbor | Kind::Ztp, false) => ("re-encoded", "application/cbor"),
    }
}

/// Writes the HTTP rendering of the file's manifest, or of `selected`
/// from it, to `w`.
fn write_http(
    served: &Served,
    kind: Kind,
    selected: Option<&Manifest>,
    w: &mut impl Write,
) -> std::io::Result<()> {
    let m = selected.unwrap_or(&served.manifest);
    match (kind, served.stored_cbor().filter(|_| selected.is_none())) {
        (Kind::Json, _) => Ok(serde_json::to_writer(&mut *w, &ManifestDoc(m))?),
        (Kind::Cbor | Kind::Ztp, Some(raw)) => w.write_all(raw),
        (Kind::Cbor | Kind::Ztp, None) => zt_format::write_manifest_cbor(m, &mut *w),
    }
}

/// The representation's ETag: the file's, the content type, the objects.
fn representation_etag(served: &Served, content_type: &str, selected: Option<&Manifest>) -> String {
    let mut parts: Vec<&[u8]> = vec![served.etag.as_bytes(), content_type.as_bytes()];
    if let Some(m) = selected {
        for n in m.objects.keys() {
            parts.extend([n.as_bytes(), b"\0"]);
        }
    }
    etag::derived("m", &parts)
}

/// The HTTP rendering: JSON (`ztserve.manifest/1`) or CBOR (the file's
/// own bytes when it stores exactly this manifest), with the
/// representation's ETag.
pub(crate) fn http(served: &Served, kind: Kind, select: &[String], w: &mut Capped) -> Rendered {
    let selected = match selected(served, select) {
        Ok(s) => s,
        Err(r) => return Rendered::Refused(r),
    };
    if write_http(served, kind, selected.as_ref(), w).is_err() || w.over {
        return too_large(served, w);
    }
    let (source, content_type) = form(served, kind, selected.as_ref());
    Rendered::Body {
        bytes: w.take(),
        etag: representation_etag(served, content_type, selected.as_ref()),
        source,
    }
}

/// What a streamed rendering says before its bytes.
#[derive(Debug)]
pub(crate) struct Heading {
    pub(crate) etag: String,
    pub(crate) source: &'static str,
}

/// The HTTP rendering of one past the cap, to be written a piece at a
/// time ([`Pieces::next`]), with its ETag and source; a selection that
/// fails is refused (it did not fail for the capped rendering that came
/// first). Run on the blocking pool: a selection copies part of the
/// manifest.
pub(crate) fn http_pieces(
    served: Arc<Served>,
    kind: Kind,
    select: &[String],
) -> Result<(Heading, Pieces), Refused> {
    let selected = selected(&served, select)?;
    let (source, content_type) = form(&served, kind, selected.as_ref());
    let etag = representation_etag(&served, content_type, selected.as_ref());
    let doc = match (kind, served.stored_cbor().filter(|_| selected.is_none())) {
        (Kind::Json, _) => Doc::Written(Chunked::new(DocForm::Json)),
        (Kind::Cbor | Kind::Ztp, Some(_)) => Doc::Stored { at: 0 },
        (Kind::Cbor | Kind::Ztp, None) => Doc::Written(Chunked::new(DocForm::Cbor)),
    };
    let pieces = Pieces {
        served,
        selected,
        doc,
    };
    Ok((Heading { etag, source }, pieces))
}

/// An HTTP rendering written a piece at a time: each piece is rendered
/// when the one before was sent, so nothing waits on the client.
pub(crate) struct Pieces {
    served: Arc<Served>,
    selected: Option<Manifest>,
    doc: Doc,
}

enum Doc {
    /// The CBOR the file stores, from this offset on.
    Stored {
        at: usize,
    },
    Written(Chunked),
}

impl Pieces {
    /// The next piece, at least `want` bytes (whole objects) unless the
    /// document ends sooner; `None` once it is all written.
    pub(crate) fn next(&mut self, want: usize) -> std::io::Result<Option<Vec<u8>>> {
        match &mut self.doc {
            Doc::Stored { at } => {
                let rest = self
                    .served
                    .stored_cbor()
                    .and_then(|raw| raw.get(*at..))
                    .unwrap_or_default();
                let piece = rest.get(..want.min(rest.len())).unwrap_or_default();
                *at = at.saturating_add(piece.len());
                Ok((!piece.is_empty()).then(|| piece.to_vec()))
            }
            Doc::Written(doc) => doc.next(
                self.selected.as_ref().unwrap_or(&self.served.manifest),
                want,
            ),
        }
    }
}

/// The ztp/1 manifest message's CBOR for `select` (v1.2, re-encoded).
pub(crate) fn ztp(served: &Served, select: &[String], w: &mut Capped) -> Rendered {
    let selected = match selected(served, select) {
        Ok(s) => s,
        Err(r) => return Rendered::Refused(r),
    };
    let m = selected.as_ref().unwrap_or(&served.manifest);
    if zt_format::write_manifest_cbor(m, &mut *w).is_err() || w.over {
        return too_large(served, w);
    }
    Rendered::Body {
        bytes: w.take(),
        etag: String::new(),
        source: "re-encoded",
    }
}
