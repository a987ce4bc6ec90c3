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
    // An object's chunks are fetched a few at a time (`storage.read_ahead`);
    // a local file's one at a time.
    let ahead = served.file.read_ahead();
    let end = range.end;
    let chunks = (range.start..end)
        .step_by(usize::try_from(CHUNK).unwrap_or(usize::MAX))
        .map(move |pos| pos..(pos + CHUNK).min(end));
    stream::iter(chunks)
        .map(move |span| read_chunk(Arc::clone(&served), Arc::clone(&state), span))
        .buffered(ahead)
        // The first failure ends the body.
        .scan(false, |failed, item| {
            let next = (!*failed).then(|| {
                *failed = item.is_err();
                item
            });
            std::future::ready(next)
        })
}

/// One chunk of a response, checked first.
async fn read_chunk(served: Arc<Served>, state: Arc<State>, span: Range<u64>) -> io::Result<Bytes> {
    let (pos, n) = (span.start, span.end - span.start);
    // Bytes already checked and in the page cache are read here,
    // without a hop to the blocking pool.
    let fast = (n <= CACHED_READ_MAX && served.is_checked_span(&span))
        .then(|| read_cached(served.file.as_file()?, n as usize, pos))
        .flatten();
    if let Some(item) = fast {
        if item.is_ok() {
            state.metrics.add_bytes(n);
        }
        return item;
    }
    let path = served.path.clone();
    let check_state = Arc::clone(&state);
    let read = tokio::task::spawn_blocking(move || {
        if let Err(refusal) = served.check_span(&span) {
            check_state.catalog.digest_metrics().count_abort();
            tracing::error!(file = %served.path, offset = pos, %refusal, "component failed its digest mid-response; connection cut");
            return Err(io::Error::other(refusal.to_string()));
        }
        crate::server::pread::read_shared(&served.file, n as usize, pos)
    })
    .await;
    match read {
        Ok(Ok(buf)) => {
            state.metrics.add_bytes(n);
            Ok(buf)
        }
        Ok(Err(e)) => {
            tracing::warn!(file = %path, error = %e, offset = pos, "read failed mid-response (file truncated or changed?)");
            Err(e)
        }
        Err(e) => Err(io::Error::other(e)),
    }
}

/// A body made of literal parts and file ranges.
pub(crate) fn body(served: Arc<Served>, state: Arc<State>, parts: Vec<Part>) -> Body {
    let s = stream::iter(parts).flat_map(move |p| match p {
        Part::Bytes(b) => stream::once(async move { Ok(b) }).boxed(),
        Part::File(r) => file_stream(Arc::clone(&served), Arc::clone(&state), r).boxed(),
    });
    Body::from_stream(s)
}
