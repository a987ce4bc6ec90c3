//! A served file's manifest rendered for a request: the selection
//! applied, then JSON or CBOR written into a capped buffer
//! ([`crate::server::renderings`] shares and keeps the result).

use std::io::Write;

use zt_format::manifest_json::ManifestDoc;
use zt_format::select::Selection;
use zt_format::Manifest;

use super::catalog::Served;
use super::etag;
use super::renderings::{Capped, Kind, Refused, Rendered};

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

/// The HTTP rendering: JSON (`ztserve.manifest/1`) or CBOR (the file's
/// own bytes when it stores exactly this manifest), with the
/// representation's ETag (the file's, the content type, the objects).
pub(crate) fn http(served: &Served, kind: Kind, select: &[String], w: &mut Capped) -> Rendered {
    let selected = match selected(served, select) {
        Ok(s) => s,
        Err(r) => return Rendered::Refused(r),
    };
    let m = selected.as_ref().unwrap_or(&served.manifest);
    let (written, content_type, source) = match kind {
        Kind::Json => (
            serde_json::to_writer(&mut *w, &ManifestDoc(m)).is_ok(),
            "application/json",
            "json",
        ),
        Kind::Cbor | Kind::Ztp => match served.stored_cbor().filter(|_| selected.is_none()) {
            Some(raw) => (w.write_all(raw).is_ok(), "application/cbor", "file"),
            None => (
                zt_format::write_manifest_cbor(m, &mut *w).is_ok(),
                "application/cbor",
                "re-encoded",
            ),
        },
    };
    if !written || w.over {
        return too_large(served, w);
    }
    let mut parts: Vec<&[u8]> = vec![served.etag.as_bytes(), content_type.as_bytes()];
    if let Some(m) = &selected {
        for n in m.objects.keys() {
            parts.extend([n.as_bytes(), b"\0"]);
        }
    }
    Rendered::Body {
        bytes: w.take(),
        etag: etag::derived("m", &parts),
        source,
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
