//! A manifest rendering past `limits.render_cap`, streamed: written a
//! piece of about 64 KiB at a time ([`render::manifest::Pieces`]), each
//! rendered on the blocking pool when the connection took the one before.
//! Such a request holds one piece of its manifest however many objects the
//! file has, and no thread while its client reads; it is neither shared
//! nor kept (each request renders its own, at the pace its client reads).
//! If the rendering fails after the headers went out, the body ends with
//! an error and the client sees a cut connection, never a short manifest
//! that looks whole.

use std::io;
use std::sync::Arc;

use axum::body::Body;
use bytes::Bytes;

use super::error::AppError;
use crate::server::catalog::Served;
use crate::server::render::renderings::Kind;
use crate::server::render::{self, manifest::Heading};
use crate::server::serve::Refusal;

const CHUNK: usize = 64 * 1024;

/// The rendering's ETag and source, and a body that streams it.
pub(super) async fn manifest(
    served: Arc<Served>,
    kind: Kind,
    select: Vec<String>,
) -> Result<(Heading, Body), AppError> {
    let path = served.path.clone();
    let started =
        tokio::task::spawn_blocking(move || render::manifest::http_pieces(served, kind, &select))
            .await
            .map_err(AppError::internal)?;
    let (heading, pieces) = started.map_err(|r| AppError::from(Refusal::from(r)))?;
    let body = futures_util::stream::try_unfold(pieces, move |mut pieces| {
        let path = path.clone();
        async move {
            let next = tokio::task::spawn_blocking(move || {
                let piece = pieces.next(CHUNK)?;
                Ok::<_, io::Error>(piece.map(|p| (Bytes::from(p), pieces)))
            })
            .await
            .map_err(io::Error::other)?;
            next.inspect_err(|e| {
                tracing::warn!(file = %path, error = %e, "streamed manifest cut short");
            })
        }
    });
    Ok((heading, Body::from_stream(body)))
}
