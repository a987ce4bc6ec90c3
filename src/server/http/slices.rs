//! `GET|HEAD /v1/files/{path}/objects/{name}/data?slice=S`: a rectangular
//! slice of a raw dense object ([`zt_format::slice`]), gathered by the
//! daemon into one contiguous body in row-major order, with the sha256 of
//! exactly those bytes (`Content-Digest`), its shape (`X-Zt-Shape`) and
//! the slice written out whole (`X-Zt-Slice`). The component is checked
//! against its digest before any of it is read for the slice; the body is
//! read a window at a time (runs close together share a read), each
//! charged to the connection's window and the daemon's budget as every
//! body is (`body.rs`). A `Range` header does not apply.

use std::sync::Arc;

use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::Response;
use base64::Engine as _;
use zt_format::slice::Slice;

use super::body::{body, Part};
use super::error::AppError;
use super::flow::Flow;
use super::held::Held;
use crate::server::catalog::etag;
use crate::server::catalog::Served;
use crate::server::serve::gather::gather;
use crate::server::serve::Refusal;
use crate::server::State;

/// The slice `text` of `object`'s data in `served`, as a response.
pub(super) async fn respond(
    state: &Arc<State>,
    method: &Method,
    served: &Arc<Served>,
    object: &str,
    text: &str,
    cache_control: &'static str,
    flow: &Arc<Flow>,
) -> Result<Response, AppError> {
    let slice = Slice::parse(text).map_err(|e| {
        Refusal::Slice(
            e.clone(),
            format!("{}: object {object:?}: {e}", served.path),
        )
    })?;
    let cap = state.config.limits.max_slice_pieces;
    let g = gather(served, object, &slice, cap, &state.catalog, &state.cpu)
        .await
        .map_err(Refusal::from)?;
    let sha = g.digest.sha256().map(|d| d.to_vec()).unwrap_or_default();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&sha);
    let shape: Vec<String> = g.gather.shape.iter().map(u64::to_string).collect();
    let dtype = served
        .manifest
        .objects
        .get(object)
        .and_then(|o| o.components.get("data"))
        .map(|c| c.dtype.name())
        .unwrap_or_default();
    let spec = g.gather.spec();
    let tag = etag::derived(
        "s",
        &[
            served.etag.as_bytes(),
            b"\0",
            object.as_bytes(),
            b"\0",
            spec.as_bytes(),
        ],
    );
    let mut builder = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CONTENT_LENGTH, g.gather.len())
        .header(header::CACHE_CONTROL, cache_control)
        .header(header::ETAG, tag)
        .header("content-digest", format!("sha-256=:{b64}:"))
        .header("x-zt-shape", shape.join(","))
        .header("x-zt-dtype", dtype);
    if let Ok(v) = HeaderValue::from_str(&spec) {
        builder = builder.header("x-zt-slice", v);
    }
    let payload = match method == Method::HEAD {
        true => axum::body::Body::empty(),
        false => {
            let parts = vec![Part::Gathered(g.windows)];
            body(
                Held::Served(g.holder),
                Arc::clone(state),
                Arc::clone(flow),
                parts,
                false,
                None,
            )
        }
    };
    builder.body(payload).map_err(AppError::internal)
}
