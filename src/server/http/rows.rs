//! `?rows=START:END` on a component URL: rows `[START, END)` along
//! dimension 0 of a raw dense object's `data`, answered as `206 Partial
//! Content` of the component (`Content-Range: bytes ...` relative to it,
//! with the component's own `Repr-Digest`), plus `Content-Digest`, the
//! sha256 of exactly the bytes sent (RFC 9530), and `X-Zt-Rows:
//! START:END/ROWS`. A `Range` header is ignored with `rows`.
//!
//! Errors: `rows` that is not `START:END` is 400 `rows_malformed`; empty,
//! backwards or past the first dimension is 416 `rows_out_of_bounds`; an
//! object that is not raw dense (zstd, sparse, quantized, GGUF blocks,
//! ragged, a scalar) is 409 `rows_not_raw_dense`.

use std::sync::Arc;

use axum::http::{HeaderName, HeaderValue};
use base64::Engine as _;
use zt_format::rows::{Rows, RowsError};

use super::error::AppError;
use super::range::Ranges;
use super::serve::Entity;
use crate::server::catalog::Served;
use crate::server::integrity::checks;
use crate::server::serve::rows::{slice, RowsFailure};
use crate::server::serve::Refusal;
use crate::server::State;

/// The range of `entity` (a component of `served`) that rows `text` of
/// `object` cover, with their digest headers added to `entity`.
pub(super) async fn ranges(
    state: &Arc<State>,
    served: &Arc<Served>,
    entity: &mut Entity,
    object: &str,
    text: &str,
) -> Result<Ranges, AppError> {
    let path = &served.path;
    let rows = Rows::parse(text).map_err(|e| {
        let at = format!("{path}: object {object:?}: {e}");
        Refusal::Rows(e, at)
    })?;
    if entity.memory.is_some() {
        let e = RowsError::NotRawDense("a component built by the server has no rows".into());
        let at = format!("{path}: object {object:?}: {e}");
        return Err(Refusal::Rows(e, at).into());
    }
    let got = slice(served, object, rows, &state.catalog, &state.cpu).await;
    let s = got.map_err(|failure| {
        if let RowsFailure::Refused(checks::CheckFailure::Corrupt(why)) = &failure {
            tracing::warn!(file = %path, reason = %why, "refusing a corrupt component");
        }
        Refusal::from(failure)
    })?;
    let count = served
        .manifest
        .objects
        .get(object)
        .and_then(|o| o.shape.first().copied())
        .unwrap_or(0);
    let b64 = base64::engine::general_purpose::STANDARD
        .encode(s.digest.sha256().map(|d| &d[..]).unwrap_or_default());
    let mut push = |k: &'static str, v: String| {
        if let Ok(v) = HeaderValue::from_str(&v) {
            entity.headers.push((HeaderName::from_static(k), v));
        }
    };
    push("content-digest", format!("sha-256=:{b64}:"));
    push("x-zt-rows", format!("{}:{}/{count}", rows.start, rows.end));
    let span = s.start..s.start + s.len;
    Ok(Ranges::Some(Vec::from([span])))
}
