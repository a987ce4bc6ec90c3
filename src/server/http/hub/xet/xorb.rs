//! A xorb's bytes: the file's, read as every body reads them, each
//! chunk's header put before it.

use std::ops::Range;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use futures_util::stream::{self, StreamExt};

use super::super::super::body::file_stream;
use super::super::super::flow::Flow;
use super::super::super::held::Held;
use super::super::files::{open, Opened};
use super::super::HubError;
use super::cas::{file_range, located, unsatisfiable, Store};
use super::PIECE;
use crate::server::xet::hashes::XetHash;
use crate::server::xet::index::{Index, HEADER};
use crate::server::State;

/// `GET {cas}/xorbs/{hash}/{n}`: the `n`th xorb of the file with that
/// hash, or the chunks of it a `Range` names (whole chunks only, as a
/// reconstruction gives them).
pub(super) async fn xorb(
    state: &Arc<State>,
    store: &Store,
    file: XetHash,
    n: usize,
    headers: &HeaderMap,
    flow: Arc<Flow>,
) -> Result<Response, HubError> {
    let (repo_file, ix) = located(state, store, file).await?;
    let Some(x) = ix.xorbs.get(n) else {
        return Err(HubError::Entry(
            format!("the file with Xet hash {file} has no xorb {n}"),
            None,
        ));
    };
    let stored = ix.stored_len(&x.chunks);
    let asked = match file_range(headers, stored) {
        Ok(r) => r,
        Err(r) => return Ok(r),
    };
    let Some(chunks) = ix.chunks_stored_at(n, &asked) else {
        let what = format!(
            "bytes {}..{} of xorb {n} of {file} are not whole chunks of it",
            asked.start, asked.end
        );
        return Ok(unsatisfiable(what, stored));
    };
    let held = match open(state, &repo_file).await? {
        Opened::Now(held, _) => held,
        Opened::Changed => {
            return Err(HubError::Revision(format!(
                "{}: changed since its Xet index was made; download again",
                repo_file.rel
            )))
        }
    };
    let span = ix.file_span(&chunks);
    if let Err(f) = held
        .check_spans(std::slice::from_ref(
            &(span.start..span.end.min(span.start + PIECE)),
        ))
        .await
    {
        return Err(HubError::Refused(held.refused(f).into()));
    }
    let len = ix.stored_len(&chunks);
    let body = stored_chunks(state, held, flow, &ix, chunks);
    let partial = headers.contains_key(header::RANGE);
    let mut r = Response::builder()
        .status(if partial {
            StatusCode::PARTIAL_CONTENT
        } else {
            StatusCode::OK
        })
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CONTENT_LENGTH, len)
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::ETAG, format!("\"{}\"", x.hash.hex()));
    if partial {
        r = r.header(
            header::CONTENT_RANGE,
            format!("bytes {}-{}/{stored}", asked.start, asked.end - 1),
        );
    }
    Ok(r.body(body).unwrap_or_default())
}

/// The body of a run of chunks: the file's bytes as every body reads them
/// ([`file_stream`]), each chunk's header put before it.
fn stored_chunks(
    state: &Arc<State>,
    held: Held,
    flow: Arc<Flow>,
    ix: &Index,
    chunks: Range<u32>,
) -> Body {
    let span = ix.file_span(&chunks);
    let starts: Vec<u64> = ix.starts(&chunks).to_vec();
    let headers: Vec<[u8; HEADER as usize]> =
        (chunks.start..chunks.end).map(|c| ix.header(c)).collect();
    let file = file_stream(held, Arc::clone(state), flow, span.clone(), false, None);
    // (offset in the file, next chunk whose header is owed)
    let cut = file.scan((span.start, 0usize), move |(at, next), item| {
        let out: Vec<std::io::Result<Bytes>> = match item {
            Err(e) => vec![Err(e)],
            Ok(piece) => {
                let end = *at + piece.len() as u64;
                let mut out = Vec::new();
                let mut from = *at;
                while *next < headers.len() && starts[*next] < end {
                    let s = starts[*next];
                    if s > from {
                        out.push(Ok(piece.slice((from - *at) as usize..(s - *at) as usize)));
                    }
                    out.push(Ok(Bytes::copy_from_slice(&headers[*next])));
                    from = s;
                    *next += 1;
                }
                if end > from {
                    out.push(Ok(piece.slice((from - *at) as usize..)));
                }
                *at = end;
                out
            }
        };
        std::future::ready(Some(stream::iter(out)))
    });
    Body::from_stream(cut.flatten())
}
