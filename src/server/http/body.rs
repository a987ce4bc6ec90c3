//! Response bodies read from a file with `pread`, in bounded chunks.
//!
//! Memory per response is one chunk at a time. Before a chunk is read,
//! every component it touches is checked against its digest (once per
//! component, remembered; see `checks.rs`), so a response spanning many
//! components (a whole-file GET) starts after its first component is
//! checked, not the whole file, and never carries a byte that failed its
//! digest. A component that fails after the headers went out, or a file
//! truncated under a transfer, ends the body with an error: the client
//! sees the connection cut before `Content-Length` bytes (never wrong
//! bytes), the daemon logs and counts it, and carries on.

use std::io;
use std::ops::Range;
use std::sync::Arc;

use axum::body::Body;
use bytes::Bytes;
use futures_util::stream::{self, Stream, StreamExt};

use crate::server::catalog::Served;
use crate::server::State;

use crate::server::pread::{read_cached, CACHED_READ_MAX, READ_CHUNK as CHUNK};

/// A piece of a response body: literal bytes, or a range of the file.
#[derive(Debug, Clone)]
pub(crate) enum Part {
    Bytes(Bytes),
    File(Range<u64>),
}

fn file_stream(
    served: Arc<Served>,
    state: Arc<State>,
    range: Range<u64>,
) -> impl Stream<Item = io::Result<Bytes>> + Send {
    stream::unfold(range.start, move |pos| {
        let served = Arc::clone(&served);
        let state = Arc::clone(&state);
        let end = range.end;
        let path = served.path.clone();
        async move {
            if pos >= end {
                return None;
            }
            let n = CHUNK.min(end - pos);
            // Bytes already checked and in the page cache are read here,
            // without a hop to the blocking pool.
            let fast = (n <= CACHED_READ_MAX && served.is_checked_span(&(pos..pos + n)))
                .then(|| read_cached(served.file.as_file()?, n as usize, pos))
                .flatten();
            if let Some(item) = fast {
                if item.is_ok() {
                    state.metrics.add_bytes(n);
                }
                let next = if item.is_ok() { pos + n } else { end };
                return Some((item, next));
            }
            let check_state = Arc::clone(&state);
            let read = tokio::task::spawn_blocking(move || {
                if let Err(refusal) = served.check_span(&(pos..pos + n)) {
                    check_state.catalog.digest_metrics().count_abort();
                    tracing::error!(file = %served.path, offset = pos, %refusal, "component failed its digest mid-response; connection cut");
                    return Err(io::Error::other(refusal.to_string()));
                }
                crate::server::pread::read_shared(&served.file, n as usize, pos)
            })
            .await;
            let item = match read {
                Ok(Ok(buf)) => {
                    state.metrics.add_bytes(n);
                    Ok(buf)
                }
                Ok(Err(e)) => {
                    tracing::warn!(file = %path, error = %e, offset = pos, "read failed mid-response (file truncated?)");
                    Err(e)
                }
                Err(e) => Err(io::Error::other(e)),
            };
            let next = if item.is_ok() { pos + n } else { end };
            Some((item, next))
        }
    })
}

/// A body made of literal parts and file ranges.
pub(crate) fn body(served: Arc<Served>, state: Arc<State>, parts: Vec<Part>) -> Body {
    let s = stream::iter(parts).flat_map(move |p| match p {
        Part::Bytes(b) => stream::once(async move { Ok(b) }).boxed(),
        Part::File(r) => file_stream(Arc::clone(&served), Arc::clone(&state), r).boxed(),
    });
    Body::from_stream(s)
}
