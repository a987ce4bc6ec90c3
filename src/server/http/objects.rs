//! `GET /v1/files/{path}/objects[?select=GLOB...]`: the file's objects as
//! a table (what the web page shows), filtered on the server by the same
//! globs as everything else (`zt_format::select`); a glob that matches
//! nothing gives an empty table, not an error. Each row: name, format,
//! shape, the data component's dtype, type, encoding and digest, the bytes
//! stored, and the layer; then bytes and objects per layer, and totals.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::{header, HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use zt_format::select::Selection;

use super::error::AppError;
use crate::server::catalog::etag;
use crate::server::catalog::Served;

pub(super) fn respond(
    served: &Arc<Served>,
    globs: &[String],
    method: &Method,
    headers: &HeaderMap,
) -> Result<Response, AppError> {
    let tag = etag::suffixed(&served.etag, "objects");
    let what = format!("{}: the objects table", served.path);
    if let Some(answer) = super::conditional::answer(headers, method, &tag, served.modified, &what)
    {
        return answer;
    }
    let selection = if globs.is_empty() {
        Selection::all()
    } else {
        Selection::new(globs).map_err(|e| AppError::bad_request(e.to_string()))?
    };
    let mut rows = Vec::new();
    let mut layers: BTreeMap<Option<u64>, (u64, u64)> = BTreeMap::new();
    let (mut objects, mut bytes) = (0u64, 0u64);
    for (name, o) in &served.manifest.objects {
        if !selection.matches(name) {
            continue;
        }
        let data = o
            .components
            .get("data")
            .or_else(|| o.components.values().next());
        let layer = zt_format::layer_index(name);
        let stored = o.stored_bytes();
        rows.push(json!({
            "name": name,
            "format": o.format.name(),
            "shape": o.shape,
            "dtype": data.map(|c| c.dtype.name()),
            "type": data.and_then(|c| c.logical_type.as_ref().map(|t| t.name().to_owned())),
            "encoding": data.map(|c| c.encoding.name()),
            "digest": data.and_then(|c| c.digest.as_ref().map(|d| d.to_string())),
            "components": o.components.len(),
            // A byte range of this file (for `curl -r`), when it is one.
            "offset": data.filter(|c| !c.synthesized && c.file.is_none()).map(|c| c.offset),
            "length": data.map(|c| c.length),
            "bytes": stored,
            "layer": layer,
        }));
        let l = layers.entry(layer).or_default();
        l.0 += stored;
        l.1 += 1;
        objects += 1;
        bytes += stored;
    }
    // In layer order, the objects of no layer last.
    let (numbered, other): (Vec<_>, Vec<_>) = layers.into_iter().partition(|(l, _)| l.is_some());
    let layers: Vec<Value> = numbered
        .into_iter()
        .chain(other)
        .map(|(layer, (b, n))| json!({ "layer": layer, "bytes": b, "objects": n }))
        .collect();
    let body = json!({
        "path": served.path,
        "objects": rows,
        "layers": layers,
        "total": { "objects": objects, "bytes": bytes },
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/json".to_owned()),
            (header::ETAG, tag),
            (header::CACHE_CONTROL, "no-cache".to_owned()),
        ],
        body.to_string(),
    )
        .into_response())
}
