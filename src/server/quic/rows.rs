//! A `get` with `rows` (feature `rows`): rows `[start, end)` of the one
//! raw dense object `select` names, sent as one stream. Its manifest
//! describes exactly what is sent: the object with its first dimension
//! cut to the rows, its `data` where the rows lie in the file, and the
//! sha256 of those bytes (`digest_by: "server"`), so the client checks
//! them as it checks any component. Errors are `no_match`, naming the
//! rule (`rows-out-of-bounds`, `rows-not-raw-dense`, or a selection that
//! is not exactly one object).

use std::sync::Arc;

use zt_format::rows::Rows;
use zt_format::select::Selection;
use ztp_proto::{Code, ComponentHeader, Get};

use super::send::{Item, Plan};
use crate::server::catalog::Served;
use crate::server::integrity::checks::Refusal;
use crate::server::integrity::rows::{slice, RowsFailure};
use crate::server::State;

pub(super) async fn plan(
    state: &Arc<State>,
    served: Arc<Served>,
    g: &Get,
) -> Result<Plan, (Code, String)> {
    let Some((start, end)) = g.rows else {
        return Err((Code::Internal, "not a rows request".to_owned()));
    };
    let rows = Rows { start, end };
    let sel = Selection::new(&g.select).map_err(|e| (Code::NoMatch, e.to_string()))?;
    let picked = sel
        .filter(&served.manifest)
        .map_err(|e| (Code::NoMatch, format!("{}: {e}", served.path)))?;
    let name = match picked.objects.keys().collect::<Vec<_>>().as_slice() {
        [one] => (*one).clone(),
        other => {
            return Err((
                Code::NoMatch,
                format!(
                    "{}: rows need a selection of exactly one object; it names {}",
                    served.path,
                    other.len()
                ),
            ))
        }
    };
    let got = slice(&served, &name, rows, state.catalog.digest_metrics()).await;
    let cut = match got {
        Ok(cut) => cut,
        Err(RowsFailure::NoObject(why) | RowsFailure::Rows(why, _)) => {
            return Err((Code::NoMatch, why))
        }
        Err(RowsFailure::Refused(Refusal::Corrupt(why))) => return Err((Code::Corrupt, why)),
        Err(RowsFailure::Refused(Refusal::Unreadable(why))) => return Err((Code::ReadFailed, why)),
    };
    let mut obj = picked.objects.get(&name).cloned().ok_or_else(|| {
        (
            Code::Internal,
            format!("{}: {name:?} vanished", served.path),
        )
    })?;
    if let Some(first) = obj.shape.first_mut() {
        *first = end - start;
    }
    let mut c = obj.components.get("data").cloned().ok_or_else(|| {
        (
            Code::Internal,
            format!("{}: {name:?} has no data", served.path),
        )
    })?;
    c.offset = cut.component_offset + cut.start;
    c.length = cut.len;
    c.digest = Some(cut.digest.clone());
    c.digest_computed = true;
    let header = ComponentHeader {
        id: g.id,
        object: name.clone(),
        component: "data".to_owned(),
        seq: 0,
        dtype: c.dtype.name().to_owned(),
        logical_type: c.logical_type.as_ref().map(|t| t.name().to_owned()),
        encoding: c.encoding.name().to_owned(),
        length: c.length,
        uncompressed_length: None,
        digest: Some(cut.digest.as_str().to_owned()),
        offset: c.offset,
    };
    obj.components = zt_format::Components::new();
    obj.components.insert("data".to_owned(), c);
    let m = zt_format::Manifest {
        source: served.manifest.source,
        // A shard's rows are checked against that shard's size.
        files: served.manifest.files.clone(),
        objects: [(name, obj)].into_iter().collect(),
        ..zt_format::Manifest::default()
    };
    Ok((served, zt_format::manifest_cbor(&m), vec![Item { header }]))
}
