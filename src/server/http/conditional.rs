//! The answer a request's preconditions call for before its body is made,
//! for the routes whose representations are computed (a decoded
//! component, the objects table, a summary): 304 with the tag, or 412.
//! Byte ranges and manifests evaluate the same rules
//! ([`etag::preconditions`]) with headers of their own.

use std::time::SystemTime;

use axum::body::Body;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::Response;

use super::error::AppError;
use crate::server::catalog::etag::{self, Precondition};

/// `None` to go on and make the body; otherwise the 304 (tagged `etag`,
/// to revalidate every time) or the 412 naming `what`.
pub(super) fn answer(
    headers: &HeaderMap,
    method: &Method,
    etag: &str,
    modified: SystemTime,
    what: &str,
) -> Option<Result<Response, AppError>> {
    match etag::preconditions(headers, method, etag, modified, |_| false) {
        Precondition::Proceed => None,
        Precondition::NotModified => Some(
            Response::builder()
                .status(StatusCode::NOT_MODIFIED)
                .header(header::ETAG, etag)
                .header(header::CACHE_CONTROL, "no-cache")
                .body(Body::empty())
                .map_err(AppError::internal),
        ),
        Precondition::Failed(h) => Some(Err(AppError::precondition_failed(what, h, etag))),
    }
}
