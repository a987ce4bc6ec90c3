//! Serving a byte range of a file as an HTTP entity: conditional requests
//! (`If-Match`, `If-Unmodified-Since`, `If-None-Match`,
//! `If-Modified-Since`: [`etag::preconditions`]; then `If-Range`), single
//! ranges (206), several ranges (`multipart/byteranges`), and 416 for
//! unsatisfiable ones. A `Range` header that does not parse is ignored
//! (200 with the whole entity), as RFC 9110 section 14.2 allows.

use std::ops::Range;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::body::{body, Part};
use super::error::AppError;
use super::flow::Flow;
use super::held::Held;
use super::range::{resolve, Ranges};
use crate::server::catalog::etag::{self, Precondition};
use crate::server::serve::plan;
use crate::server::State;

/// A byte range of a served file, with its validators and headers.
#[derive(Debug)]
pub(crate) struct Entity {
    pub(crate) held: Held,
    /// Where the entity's bytes lie in the file.
    pub(crate) span: Range<u64>,
    /// Strong ETag, quoted.
    pub(crate) etag: String,
    pub(crate) modified: SystemTime,
    pub(crate) content_type: &'static str,
    pub(crate) cache_control: &'static str,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    /// The bytes themselves, for an entity that is not in the file (a
    /// synthesized component); `span` is then `0..len`.
    pub(crate) memory: Option<Bytes>,
    /// Whether the components the response carries whole are hashed
    /// again as they are sent (a response caches may keep for good, or a
    /// component's own URL): see `recheck.rs`.
    pub(crate) recheck: bool,
    /// The connection its pieces are charged to (`flow.rs`).
    pub(crate) flow: Arc<Flow>,
}

fn http_date(t: SystemTime) -> String {
    httpdate::fmt_http_date(t)
}

impl Entity {
    /// `body` as a response entity: its content type, caching and extra
    /// headers are HTTP's, the rest is the plan's.
    pub(crate) fn of(
        body: plan::Payload,
        content_type: &'static str,
        cache_control: &'static str,
        headers: Vec<(HeaderName, HeaderValue)>,
        flow: &Arc<Flow>,
    ) -> Entity {
        Entity {
            modified: body.served.modified,
            held: Held::Served(body.served),
            span: body.span,
            etag: body.etag,
            content_type,
            cache_control,
            headers,
            memory: body.memory,
            recheck: body.recheck,
            flow: Arc::clone(flow),
        }
    }

    /// Whether [`respond`] sends bytes of the file for this request (a GET
    /// whose preconditions hold, for satisfiable ranges of bytes in the
    /// file), and so whether reading them first can find the file changed.
    pub(crate) fn sends_bytes(
        &self,
        method: &Method,
        headers: &HeaderMap,
        ranges: &Ranges,
    ) -> bool {
        method == Method::GET
            && self.memory.is_none()
            && matches!(ranges, Ranges::Full | Ranges::Some(_))
            && etag::preconditions(headers, method, &self.etag, self.modified, |t| {
                self.is_version(t)
            }) == Precondition::Proceed
    }

    /// Whether a strong tag names this entity's bytes: its own tag, or,
    /// for the whole file, any tag the file has had while unchanged (see
    /// [`Served::is_version`]).
    fn is_version(&self, tag: &str) -> bool {
        etag::strong_match(tag, &self.etag)
            || self
                .held
                .served()
                .is_some_and(|s| self.etag == s.etag && s.is_version(tag))
    }
}

/// Whether `If-Range` (if present) allows the Range header to apply:
/// its tag names `entity` (the file's tag names every tag the file has
/// had while unchanged: see [`Served::is_version`]), or its date is the
/// entity's and a strong validator ([`date_validates`]).
fn if_range_allows(headers: &HeaderMap, entity: &Entity) -> bool {
    let Some(v) = headers.get(header::IF_RANGE).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let v = v.trim();
    if v.starts_with('"') || v.starts_with("W/") {
        entity.is_version(v)
    } else {
        httpdate::parse_http_date(v)
            .is_ok_and(|d| date_validates(entity.modified, d, SystemTime::now()))
    }
}

/// Whether an `If-Range` date `date` names a file modified at `modified`,
/// asked at `now`: the same second, and the file at least a second older
/// than now (RFC 9110, 8.8.2.2: a file rewritten within the second of its
/// date would carry the same date, so until the second is over the date
/// is weak, and the whole file is sent).
fn date_validates(modified: SystemTime, date: SystemTime, now: SystemTime) -> bool {
    let secs = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    };
    let settled = now
        .duration_since(modified)
        .is_ok_and(|age| age >= std::time::Duration::from_secs(1));
    settled && secs(modified) == secs(date)
}

/// What the request's Range header asks of `entity` (relative to it),
/// when If-Range allows the header to apply; resolved once per request.
pub(crate) fn ranges(state: &State, headers: &HeaderMap, entity: &Entity) -> Ranges {
    let len = entity.span.end - entity.span.start;
    match headers.get(header::RANGE).and_then(|v| v.to_str().ok()) {
        Some(r) if if_range_allows(headers, entity) => {
            resolve(r, len, state.config.limits.max_ranges)
        }
        _ => Ranges::Full,
    }
}

/// The absolute byte spans of the file that `ranges` of `entity` send.
pub(crate) fn spans(entity: &Entity, ranges: &Ranges) -> Vec<Range<u64>> {
    let base = entity.span.start;
    match ranges {
        Ranges::Full => vec![entity.span.clone()],
        Ranges::Some(rs) => rs
            .iter()
            .map(|r| (base + r.start)..(base + r.end))
            .collect(),
        Ranges::Unsatisfiable | Ranges::TooMany => Vec::new(),
    }
}

/// The response for `entity` given the request's method and headers and
/// the [`ranges`] resolved from them; `first`: the first range's first
/// chunk, when it was read before the headers.
pub(crate) fn respond(
    state: &Arc<State>,
    method: &Method,
    headers: &HeaderMap,
    entity: Entity,
    ranges: Ranges,
    first: Option<Bytes>,
) -> Response {
    let len = entity.span.end - entity.span.start;
    let mut builder = Response::builder()
        .header(header::ETAG, &entity.etag)
        .header(header::LAST_MODIFIED, http_date(entity.modified))
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::CACHE_CONTROL, entity.cache_control);
    for (k, v) in &entity.headers {
        builder = builder.header(k, v);
    }
    let checked = etag::preconditions(headers, method, &entity.etag, entity.modified, |t| {
        entity.is_version(t)
    });
    match checked {
        Precondition::Proceed => {}
        Precondition::NotModified => {
            return builder
                .status(StatusCode::NOT_MODIFIED)
                .body(Body::empty())
                .unwrap_or_default()
        }
        Precondition::Failed(header) => {
            return AppError::precondition_failed(entity.held.path(), header, &entity.etag)
                .into_response()
        }
    }
    let head = method == Method::HEAD;
    let base = entity.span.start;
    let shift = |r: &Range<u64>| (base + r.start)..(base + r.end);
    let (status, parts, content_len, content_type) = match ranges {
        Ranges::Full => (
            StatusCode::OK,
            vec![Part::File(entity.span.clone())],
            len,
            entity.content_type.to_owned(),
        ),
        Ranges::Unsatisfiable | Ranges::TooMany => {
            let detail = if ranges == Ranges::TooMany {
                format!(
                    "more than {} ranges after merging",
                    state.config.limits.max_ranges
                )
            } else {
                format!("no range lies within the {len} bytes")
            };
            let body =
                serde_json::json!({"error": "range_not_satisfiable", "detail": detail}).to_string();
            return builder
                .status(StatusCode::RANGE_NOT_SATISFIABLE)
                .header(header::CONTENT_RANGE, format!("bytes */{len}"))
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body))
                .unwrap_or_default();
        }
        Ranges::Some(rs) if rs.len() == 1 => {
            let r = rs.first().cloned().unwrap_or(0..0);
            builder = builder.header(
                header::CONTENT_RANGE,
                format!("bytes {}-{}/{len}", r.start, r.end - 1),
            );
            (
                StatusCode::PARTIAL_CONTENT,
                vec![Part::File(shift(&r))],
                r.end - r.start,
                entity.content_type.to_owned(),
            )
        }
        Ranges::Some(rs) => {
            let boundary = format!("zt-{}", &entity.etag.trim_matches('"').replace('"', ""));
            let mut parts = Vec::with_capacity(rs.len() * 2 + 1);
            let mut total = 0u64;
            for r in &rs {
                let head = format!(
                    "\r\n--{boundary}\r\nContent-Type: {}\r\nContent-Range: bytes {}-{}/{len}\r\n\r\n",
                    entity.content_type,
                    r.start,
                    r.end - 1
                );
                total += head.len() as u64 + (r.end - r.start);
                parts.push(Part::Bytes(Bytes::from(head)));
                parts.push(Part::File(shift(r)));
            }
            let tail = format!("\r\n--{boundary}--\r\n");
            total += tail.len() as u64;
            parts.push(Part::Bytes(Bytes::from(tail)));
            (
                StatusCode::PARTIAL_CONTENT,
                parts,
                total,
                format!("multipart/byteranges; boundary={boundary}"),
            )
        }
    };
    let builder = builder
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CONTENT_LENGTH, content_len);
    let body = if head {
        Body::empty()
    } else {
        let parts = match &entity.memory {
            Some(bytes) => parts
                .into_iter()
                .map(|p| match p {
                    Part::File(r) => Part::Bytes(bytes.slice(r.start as usize..r.end as usize)),
                    other => other,
                })
                .collect(),
            None => parts,
        };
        body(
            entity.held.clone(),
            Arc::clone(state),
            Arc::clone(&entity.flow),
            parts,
            entity.recheck,
            first.filter(|_| entity.memory.is_none()),
        )
    };
    builder.body(body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_if_range_date_validates_only_a_file_a_second_old() {
        let at = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
        let modified = at(10_200);
        // Its own second, asked a second or more later.
        assert!(date_validates(modified, at(10_000), at(11_200)));
        assert!(date_validates(modified, at(10_000), at(99_000)));
        // Within the second of its writing: weak (a rewrite at 10.8 s
        // would carry the same date).
        assert!(!date_validates(modified, at(10_000), at(10_900)));
        assert!(!date_validates(modified, at(10_000), at(11_100)));
        // Another second, or a file dated after now.
        assert!(!date_validates(modified, at(9_000), at(99_000)));
        assert!(!date_validates(at(99_500), at(99_000), at(10_000)));
    }
}
