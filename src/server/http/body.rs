//! Response bodies read from a file with `pread`, in bounded pieces.
//!
//! Each piece is charged to the connection's window and the daemon's
//! budget before it is read, until the connection has written it
//! (`flow.rs`): a client that does not read holds its window at most, and
//! pieces shrink as the budget fills. An object's pieces are whole read
//! chunks, the ones its piece cache keeps. Before a piece is read,
//! every component it touches is checked against its digest (once per
//! component, remembered; see `checks.rs`), so a response spanning many
//! components (a whole-file GET) starts after its first component is
//! checked, not the whole file, and never carries a byte that failed its
//! digest. After a chunk is read, the file's identity is checked
//! (`Served::changed`): a file rewritten in place under a transfer has a
//! new change time, and the bytes just read may be the new version's.
//! Responses that a cache may keep for good, or that carry a component
//! whole, also hash what they send ([`Recheck`]). A component that fails
//! after the headers went out, a file changed or truncated under a
//! transfer, ends the body with an error: the client sees the connection
//! (or, over HTTP/2, the stream) cut before `Content-Length` bytes, never
//! a complete body of other bytes than its ETag names; the daemon logs
//! and counts it, and carries on.

use std::io;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use bytes::Bytes;
use futures_util::stream::{self, Stream, StreamExt};

use super::flow::Flow;
use super::held::Held;
use crate::server::serve::gather::Window;
use crate::server::serve::recheck::Recheck;
use crate::server::State;

use crate::server::store::READ_CHUNK as CHUNK;
use crate::server::store::{Buffer, Checked};

/// A piece of a response body: literal bytes, or a range of the file.
#[derive(Debug, Clone)]
pub(crate) enum Part {
    Bytes(Bytes),
    File(Range<u64>),
    /// A gathered slice: each window read once, its runs sent together.
    Gathered(Arc<[Window]>),
}

/// Bytes of `held` a response reads at once now: a whole chunk of an
/// object, else what the budget allows ([`super::flow::Flows::piece`]).
pub(super) fn piece(held: &Held, state: &State) -> u64 {
    match held.file().whole_chunks() {
        true => CHUNK,
        false => state.flows.piece(),
    }
}

pub(super) fn file_stream(
    served: Held,
    state: Arc<State>,
    flow: Arc<Flow>,
    range: Range<u64>,
    recheck: bool,
    first: Option<Bytes>,
) -> impl Stream<Item = io::Result<Bytes>> + Send {
    // An object's chunks are fetched a few at a time (`storage.read_ahead`);
    // a local file's one at a time.
    let ahead = served.file().read_ahead();
    let recheck = recheck
        .then(|| served.served().and_then(|s| Recheck::new(s, &range)))
        .flatten()
        .map(|r| Arc::new(Mutex::new(r)));
    let end = range.end;
    // The first chunk, when it was read before the headers (`preflight.rs`),
    // is sent as it is; the others are read here.
    let from = match &first {
        Some(b) => range.start.saturating_add(b.len() as u64),
        None => range.start,
    };
    // Each piece's size is chosen as it is reached.
    let (s, st) = (served.clone(), Arc::clone(&state));
    let pieces = stream::unfold(from, move |pos| {
        let next = pos.saturating_add(piece(&s, &st)).min(end);
        std::future::ready((pos < end).then_some((pos..next, next)))
    });
    let (s, st) = (served.clone(), Arc::clone(&state));
    let read = pieces
        .map(move |span| {
            let (served, state, flow) = (s.clone(), Arc::clone(&st), Arc::clone(&flow));
            async move {
                let got = read(&served, &state, &flow, span.clone(), ahead).await?;
                unchanged(&served, &state, &span, got)
            }
        })
        .buffered(ahead);
    stream::iter(first.map(Ok))
        .chain(read)
        // In order, whatever the read-ahead: a component's hash runs
        // over its bytes as they are sent.
        .then(move |item| {
            let (served, state, recheck) = (served.clone(), Arc::clone(&state), recheck.clone());
            async move {
                let item = match (item, recheck) {
                    (Ok(bytes), Some(r)) => rechecked(&served, &state, r, bytes).await,
                    (item, _) => item,
                };
                // Counted once it may go out.
                if let Ok(bytes) = &item {
                    state.metrics.add_bytes(bytes.len() as u64);
                }
                item
            }
        })
        // The first failure ends the body.
        .scan(false, |failed, item| {
            let next = (!*failed).then(|| {
                *failed = item.is_err();
                item
            });
            std::future::ready(next)
        })
}

/// A gathered slice's bytes: each window read (charged to `flow` and the
/// budget, the charge held until its runs are written), its runs picked
/// out, in order; the first failure ends the body.
fn gathered_stream(
    served: Held,
    state: Arc<State>,
    flow: Arc<Flow>,
    windows: Arc<[Window]>,
) -> impl Stream<Item = io::Result<Bytes>> + Send {
    let ahead = served.file().read_ahead();
    stream::iter(0..windows.len())
        .map(move |i| {
            let (served, state, flow) = (served.clone(), Arc::clone(&state), Arc::clone(&flow));
            let w = windows.get(i).cloned();
            async move {
                let Some(w) = w else {
                    return Ok(Bytes::new());
                };
                let got = read(&served, &state, &flow, w.span.clone(), ahead).await?;
                let out = w.pick(unchanged(&served, &state, &w.span, got)?)?;
                state.metrics.add_bytes(out.len() as u64);
                Ok(out)
            }
        })
        .buffered(ahead)
        .scan(false, |failed, item| {
            let next = (!*failed).then(|| {
                *failed = item.is_err();
                item
            });
            std::future::ready(next)
        })
}

/// `bytes` fed to the response's [`Recheck`] (on a blocking thread when
/// that hashes sha256); an error once a component ends with other bytes
/// than its version's.
async fn rechecked(
    served: &Held,
    state: &Arc<State>,
    recheck: Arc<Mutex<Recheck>>,
    bytes: Bytes,
) -> io::Result<Bytes> {
    let heavy = bytes.len() > INLINE_HASH || recheck.lock().is_ok_and(|r| r.is_heavy(bytes.len()));
    let b = bytes.clone();
    let feed = move || match recheck.lock() {
        Ok(mut r) => r.feed(&b),
        Err(_) => Err("a response's recheck was poisoned".to_owned()),
    };
    let verdict = if heavy {
        tokio::task::spawn_blocking(feed)
            .await
            .unwrap_or_else(|e| Err(e.to_string()))
    } else {
        feed()
    };
    match verdict {
        Ok(()) => Ok(bytes),
        Err(why) => Err(changed(served, state, why)),
    }
}

/// Bytes hashed with CRC-32C on the runtime itself (tens of microseconds).
const INLINE_HASH: usize = 256 << 10;

/// Logs and counts a response cut because its file changed under it, and
/// has the file catalogued again for the next request.
fn changed(held: &Held, state: &Arc<State>, why: String) -> io::Error {
    state.metrics.count_changed_abort();
    tracing::error!(file = %held.path(), reason = %why, "the file changed under a response; connection cut");
    state.refresh_later(held.path());
    io::Error::other(why)
}

/// One piece of a response, charged to `flow` (one of `ahead` in flight)
/// and the budget first, then the components under it checked (the first
/// check of a component reads it whole); bytes already checked and in the
/// page cache are read on the runtime, without a hop to the blocking pool.
/// The bytes, or that the file had changed from the version served by
/// the end of the read ([`unchanged`] says what to do about it), asked
/// where the read ran (a local file's `fstat` beside its `pread` on the
/// blocking pool; on the runtime only after a read from memory).
pub(super) async fn read(
    served: &Held,
    state: &Arc<State>,
    flow: &Arc<Flow>,
    span: Range<u64>,
    ahead: usize,
) -> io::Result<Checked> {
    let n = span.end - span.start;
    let charge = state.flows.charge(flow, n, ahead).await;
    Ok(match read_uncharged(served, state, span).await? {
        Checked::Same(bytes) => Checked::Same(charge.hold(bytes)),
        Checked::Changed => Checked::Changed,
    })
}

async fn read_uncharged(
    served: &Held,
    state: &Arc<State>,
    span: Range<u64>,
) -> io::Result<Checked> {
    let (pos, n) = (span.start, span.end - span.start);
    if served.is_checked_span(&span) {
        if let Some(read) = served.file().read_now(&span) {
            return read.map(|bytes| Checked::after(bytes, served.changed()));
        }
    } else if let Err(refusal) = served.check_spans(std::slice::from_ref(&span)).await {
        state.catalog.digest_metrics().count_abort();
        tracing::error!(file = %served.path(), offset = span.start, %refusal, "component failed its digest mid-response; connection cut");
        return Err(io::Error::other(refusal.to_string()));
    }
    // A local file's read on the blocking pool, an object's GET awaited
    // here: no thread held across network I/O.
    let len = usize::try_from(n).unwrap_or(0);
    let read = served.file().read_checked(len, pos, Buffer::Pooled(None));
    read.await.inspect_err(|e| {
        tracing::warn!(file = %served.path(), error = %e, offset = pos, "read failed mid-response (file truncated or changed?)");
    })
}

/// The bytes read from `span`, unless the file had changed from the
/// version served by the end of the read ([`read`]).
fn unchanged(
    served: &Held,
    state: &Arc<State>,
    span: &Range<u64>,
    read: Checked,
) -> io::Result<Bytes> {
    if let Checked::Same(bytes) = read {
        return Ok(bytes);
    }
    let why = format!(
        "{}: changed-under-transfer: the file changed (rewritten in place?) while bytes {}..{} were sent",
        served.path(), span.start, span.end
    );
    Err(changed(served, state, why))
}

/// A body made of literal parts and file ranges; `recheck`: hash the
/// components the ranges carry whole as they are sent ([`Recheck`]);
/// `first`: the first file range's first chunk, read before the headers.
pub(crate) fn body(
    served: Held,
    state: Arc<State>,
    flow: Arc<Flow>,
    parts: Vec<Part>,
    recheck: bool,
    first: Option<Bytes>,
) -> Body {
    let mut first = first;
    let s = stream::iter(parts).flat_map(move |p| match p {
        Part::Bytes(b) => stream::once(async move { Ok(b) }).boxed(),
        Part::File(r) => file_stream(
            served.clone(),
            Arc::clone(&state),
            Arc::clone(&flow),
            r,
            recheck,
            first.take(),
        )
        .boxed(),
        Part::Gathered(w) => {
            gathered_stream(served.clone(), Arc::clone(&state), Arc::clone(&flow), w).boxed()
        }
    });
    Body::from_stream(s)
}
