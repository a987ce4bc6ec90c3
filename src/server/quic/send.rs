//! Sending one request's components: one unidirectional stream each, at
//! most `quic.max_streams` open at a time per connection, earlier ones
//! with higher send priority.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures_util::StreamExt as _;
use quinn::{Connection, SendStream, VarInt};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use ztp_proto::{frame_header, Close, Code, ComponentHeader, Message, ServerSession};

use super::budget::ConnShare;
use super::cancel::RequestCtl;
use super::control::Control;
use super::refused;
use crate::server::catalog::Served;
use crate::server::serve::plan::{self, Part};
use crate::server::serve::Refusal;
use crate::server::State;

use crate::server::store::source::held;
use crate::server::store::READ_CHUNK as CHUNK;
use crate::server::store::{Buffer, Checked};

/// Components of one request being read into quinn at once. They are
/// handed out in send order by the loop that opens the streams (not by the
/// streams' tasks, which a multi-threaded runtime may start in any order:
/// a later layer then took a writer first and arrived first), so quinn's
/// send buffer holds the earliest components' bytes and its stream
/// priorities have something to choose from: without this, every open
/// stream would refill the buffer in turn and layer 0 would get only its
/// share of it. A share of a fetch spread over several connections gets
/// one writer (`writers`): `n` connections then read `n` components ahead,
/// not `2n`, which kept the first layer sooner and cost no throughput
/// (docs/benchmarks.md, "Connections per fetch").
const WRITERS: usize = 2;

/// Writers for one of `shares` requests that make up a fetch.
pub(super) fn writers(shares: u64) -> usize {
    if shares > 1 {
        1
    } else {
        WRITERS
    }
}

/// One component to send, as its stream's header announces it.
#[derive(Debug, Clone)]
pub(super) struct Item {
    pub(super) header: ComponentHeader,
    /// A synthesized component's bytes ([`Part::memory`]).
    pub(super) memory: Option<bytes::Bytes>,
    /// A gathered slice's reads of the file ([`Part::windows`]).
    pub(super) windows: Option<Arc<[crate::server::serve::gather::Window]>>,
    /// Where it is read and checked ([`Part::from`], [`Part::check`]).
    pub(super) from: Arc<Served>,
    pub(super) check: plan::Check,
}

impl Item {
    /// The `seq`th stream of request `id`: `part`.
    pub(super) fn of(id: u64, seq: u64, part: Part) -> Item {
        let c = part.component;
        Item {
            header: ComponentHeader {
                id,
                object: part.object,
                component: part.role,
                seq,
                dtype: c.dtype.name().to_owned(),
                logical_type: c.logical_type.as_ref().map(|t| t.name().to_owned()),
                encoding: c.encoding.name().to_owned(),
                length: c.length,
                uncompressed_length: c.uncompressed_length,
                digest: c.digest.as_ref().map(|d| d.to_string()),
                offset: c.offset,
            },
            memory: part.memory,
            windows: part.windows,
            from: part.from,
            check: part.check,
        }
    }
}

fn code(c: Code) -> VarInt {
    VarInt::from_u32(c.value())
}

/// Sends every item; returns how many went out whole and how many did not
/// (the caller sends `done`).
pub(super) async fn run(
    state: &Arc<State>,
    conn: &Connection,
    items: Vec<Item>,
    ctl: &Arc<RequestCtl>,
    control: &Control,
    streams: Streams,
    writers: usize,
) -> (u64, u64) {
    let mut sent = 0u64;
    let mut tasks = JoinSet::new();
    let writers = Arc::new(Semaphore::new(writers));
    let count = items.len() as u64;
    // Priorities count down from the request's last position (a share's
    // `seq`s are positions in the whole request, not in the share).
    let n = items.last().map_or(0, |i| {
        usize::try_from(i.header.seq)
            .unwrap_or(usize::MAX)
            .saturating_add(1)
    });
    for item in items {
        let h = &item.header;
        if ctl.is_cancelled(&h.object, &h.component) {
            continue;
        }
        let Ok(permit) = Arc::clone(&streams.slots).acquire_owned().await else {
            break;
        };
        let Some(mut stream) = open(state, conn, &streams, control, &item).await else {
            break;
        };
        let opened = Opened::count(&streams.open);
        // Earlier in the order, higher priority: layer 0 finishes first.
        let priority = i32::try_from(n.saturating_sub(usize::try_from(h.seq).unwrap_or(0)))
            .unwrap_or(i32::MAX);
        let _ = stream.set_priority(priority);
        let Ok(writing) = Arc::clone(&writers).acquire_owned().await else {
            break;
        };
        let (state, ctl, control) = (Arc::clone(state), Arc::clone(ctl), control.clone());
        let share = Arc::clone(&streams.budget);
        let open = state.metrics.quic_stream();
        tasks.spawn(async move {
            let (_open, _opened) = (open, opened);
            let sent = send_one(&state, &share, &ctl, &mut stream, &item, writing).await;
            if let Written::Refused(why) = sent.clone() {
                // A component's refusal: the request goes on to its `done`,
                // so it is not one to send again (PROTOCOL.md section 8).
                let error = ztp_proto::ErrorMsg {
                    retry_after_ms: None,
                    ..refused::error(item.header.id, why)
                };
                control.send(Message::Error(error)).await;
            }
            if matches!(sent, Written::Stalled) {
                let reason = format!(
                    "object {:?}, component {:?}: the client accepted no bytes for {} s",
                    item.header.object, item.header.component, state.config.quic.stall_timeout_secs
                );
                control
                    .close(Close {
                        code: Code::Stalled,
                        reason,
                    })
                    .await;
            }
            drop(permit);
            matches!(sent, Written::Whole)
        });
        // Reap finished streams as we go, so counts stay current.
        while let Some(r) = tasks.try_join_next() {
            sent += u64::from(r.unwrap_or(false));
        }
    }
    while let Some(r) = tasks.join_next().await {
        sent += u64::from(r.unwrap_or(false));
    }
    // Everything not sent whole was cancelled: by the client, refused,
    // failed, or never opened because the connection went.
    (sent, count.saturating_sub(sent))
}

/// A connection's component streams: the slots they take (at most
/// `quic.max_streams`, waited for in turn), how many are open now, and
/// the connection's share of the daemon's send budget, which their chunks
/// are charged to.
#[derive(Debug, Clone)]
pub(super) struct Streams {
    pub(super) slots: Arc<Semaphore>,
    pub(super) open: Arc<AtomicUsize>,
    pub(super) budget: Arc<ConnShare>,
}

impl Streams {
    pub(super) fn new(max: usize, budget: Arc<ConnShare>) -> Streams {
        Streams {
            slots: Arc::new(Semaphore::new(max)),
            open: Arc::default(),
            budget,
        }
    }
}

/// One stream counted open in [`Streams::open`] until dropped.
struct Opened(Arc<AtomicUsize>);

impl Opened {
    fn count(open: &Arc<AtomicUsize>) -> Opened {
        open.fetch_add(1, Ordering::SeqCst);
        Opened(Arc::clone(open))
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A new component stream, once the client allows one. Open streams are
/// watched by their own stall timers; a client that allows none while
/// none of the connection's is open (whatever its requests waiting to
/// open one) is closed with `stalled` once the stall timeout passes
/// (`None`: no stream, the request ends).
async fn open(
    state: &Arc<State>,
    conn: &Connection,
    streams: &Streams,
    control: &Control,
    item: &Item,
) -> Option<SendStream> {
    let quic = &state.config.quic;
    let stall = std::time::Duration::from_secs(quic.stall_timeout_secs.max(1));
    loop {
        match tokio::time::timeout(stall, conn.open_uni()).await {
            Ok(Ok(s)) => return Some(s),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "connection lost while opening streams");
                return None;
            }
            // Others are open, and their own timers watch them.
            Err(_) if streams.open.load(Ordering::SeqCst) > 0 => {}
            Err(_) => {
                let h = &item.header;
                let reason = format!(
                    "{}: object {:?}, component {:?}: the client allowed no component stream for {} s",
                    item.from.path, h.object, h.component, quic.stall_timeout_secs
                );
                control
                    .close(Close {
                        code: Code::Stalled,
                        reason,
                    })
                    .await;
                return None;
            }
        }
    }
}

/// How a write ended.
#[derive(Debug, Clone)]
enum Written {
    Whole,
    Gone,
    Cancelled,
    /// No progress within the stall timeout.
    Stalled,
    /// The component failed its digest check (`corrupt`, nothing of it
    /// was sent) or could not be read (`read_failed`): the stream was reset
    /// with the refusal's code, and the reason goes to the client in an
    /// `error`.
    Refused(Refusal),
}

/// Sends one component: `Whole` when it was delivered whole.
async fn send_one(
    state: &Arc<State>,
    share: &Arc<ConnShare>,
    ctl: &RequestCtl,
    stream: &mut SendStream,
    item: &Item,
    writing: tokio::sync::OwnedSemaphorePermit,
) -> Written {
    let h = &item.header;
    let stall = std::time::Duration::from_secs(state.config.quic.stall_timeout_secs.max(1));
    let head = match frame_header(h) {
        Ok(head) => head,
        Err(e) => {
            let file = &item.from.path;
            tracing::error!(%file, object = %h.object, component = %h.component, error = %e, "a component header could not be framed; stream dropped");
            return Written::Gone;
        }
    };
    match tokio::time::timeout(stall, stream.write_all(&head)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return write_failed(stream, &e),
        Err(_) => return Written::Stalled,
    }
    // Read and checked where the plan says (a shard's component from the
    // shard's entry): its digest once per component, before any of its
    // bytes go out; the header tells the client which component was
    // refused.
    let served = &item.from;
    let span = h.offset..h.offset.saturating_add(h.length);
    let checked = plan::check_part(served, item.check, &h.object, &h.component, span).await;
    if let Err(refusal) = checked {
        return refuse(stream, refusal);
    }
    let memory = &item.memory;
    // Where this file's chunks are kept in memory, if they are.
    let kept = state.kept.key(served);
    let kept = kept.as_deref();
    let end = h.offset.saturating_add(h.length);
    // An object's chunks are fetched a few at a time (`storage.read_ahead`);
    // a local file's, and bytes in memory, one at a time.
    let ahead = match memory {
        Some(_) => 1,
        None => served.file.read_ahead(),
    };
    let chunks = (h.offset..end)
        .step_by(usize::try_from(CHUNK).unwrap_or(usize::MAX))
        .map(|pos| (pos, CHUNK.min(end - pos)));
    let whole = futures_util::stream::iter(chunks)
        .map(|(pos, n)| async move {
            let buf = match memory {
                // A synthesized component: its offset is 0, its bytes are here.
                Some(b) => Ok(b.slice(
                    usize::try_from(pos).unwrap_or(0)..usize::try_from(pos + n).unwrap_or(0),
                )),
                None => read_chunk(state, share, served, kept, h, pos, n).await,
            };
            buf.map(|b| (b, n))
        })
        .buffered(ahead);
    // A gathered slice: each window read once (and charged to the send
    // budget until its runs are acknowledged), its runs sent together.
    let windows = item.windows.as_deref().unwrap_or_default();
    let gathered = futures_util::stream::iter(0..windows.len())
        .map(|i| async move {
            let Some(w) = windows.get(i) else {
                return Ok((bytes::Bytes::new(), 0));
            };
            let (pos, n) = (w.span.start, w.span.end - w.span.start);
            let read = read_chunk(state, share, served, kept, h, pos, n).await?;
            let out = w.pick(read).map_err(|e| {
                Unread::Refused(Refusal::Unreadable(format!(
                    "{}: object {:?}: reading a slice: {e}",
                    served.path, h.object
                )))
            })?;
            let n = out.len() as u64;
            Ok((out, n))
        })
        .buffered(ahead);
    let reads = match item.windows {
        Some(_) => gathered.left_stream(),
        None => whole.right_stream(),
    };
    futures_util::pin_mut!(reads);
    while let Some(read) = reads.next().await {
        if ctl.is_cancelled(&h.object, &h.component) {
            let _ = stream.reset(code(Code::Cancelled));
            return Written::Cancelled;
        }
        let (buf, n) = match read {
            Ok(read) => read,
            Err(Unread::Refused(why)) => return refuse(stream, why),
            Err(Unread::Stopping) => {
                let _ = stream.reset(code(Code::Internal));
                return Written::Gone;
            }
        };
        // The write stays pinned across cancellation checks: dropping a
        // half-done write and starting it again would send bytes twice.
        let outcome = {
            let write = stream.write_chunk(buf);
            tokio::pin!(write);
            let deadline = tokio::time::sleep(stall);
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    r = &mut write => break match r {
                        Ok(()) => Written::Whole,
                        // Reset with `cancelled` below.
                        Err(quinn::WriteError::Stopped(_)) => Written::Cancelled,
                        Err(_) => Written::Gone,
                    },
                    () = &mut deadline => break Written::Stalled,
                    _ = ctl.notify.notified() => {
                        if ctl.is_cancelled(&h.object, &h.component) {
                            break Written::Cancelled;
                        }
                    }
                }
            }
        };
        match outcome {
            Written::Whole => {}
            Written::Gone | Written::Stalled | Written::Refused(..) => return outcome,
            // Cancelled by a `cancel` or by STOP_SENDING: reset (again,
            // harmlessly, after STOP_SENDING) with `cancelled`.
            Written::Cancelled => {
                let _ = stream.reset(code(Code::Cancelled));
                return outcome;
            }
        }
        state.metrics.add_bytes(n);
        state.metrics.add_quic_bytes(n);
    }
    // Every byte is with quinn: the next stream may start while this one
    // waits for the peer's acknowledgements.
    drop(writing);
    if stream.finish().is_err() {
        return Written::Gone;
    }
    match stream.stopped().await {
        Ok(None) => Written::Whole,
        // Stopped before every byte was acknowledged: PROTOCOL.md section 6.
        Ok(Some(_)) => {
            let _ = stream.reset(code(Code::Cancelled));
            Written::Cancelled
        }
        Err(_) => Written::Gone,
    }
}

/// A failed write: the client's STOP_SENDING, which the stream answers with
/// a reset carrying `cancelled` whatever code the client sent (quinn would
/// echo the client's code when the stream is dropped), or a lost connection.
/// Why a chunk was not read.
enum Unread {
    /// The daemon is stopping (the send budget closed), or the connection
    /// is closed.
    Stopping,
    /// The read failed or found the file changed: the stream is refused.
    Refused(Refusal),
}

/// `n` bytes of the file at `pos`, or why not: the chunk kept in memory
/// under `kept` where there is one ([`Kept`](super::kept::Kept)), else
/// read (and kept, where `kept` names the file's version).
async fn read_chunk(
    state: &Arc<State>,
    share: &Arc<ConnShare>,
    served: &Arc<Served>,
    kept: Option<&str>,
    h: &ComponentHeader,
    pos: u64,
    n: u64,
) -> Result<bytes::Bytes, Unread> {
    // The chunk holds its share of the daemon's send budget, and of its
    // connection's window, until quinn drops the last of it, after the
    // client acknowledged it: a kept one too, which would otherwise
    // outlive its eviction unaccounted.
    let (total, charge) = share.charge(n).await.ok_or(Unread::Stopping)?;
    let mut permit = Some(total);
    let len = usize::try_from(n).unwrap_or(0);
    // Chunks of a length never kept are read as without the cache.
    let kept = kept.filter(|_| state.kept.keeps(n));
    let hit = kept.and_then(|k| state.kept.get(k, &(pos..pos.saturating_add(n))));
    let from_memory = hit.is_some();
    // Whether the file changed is asked after the read, where it ran (a
    // local file's `fstat` beside its `pread` on the blocking pool; on the
    // runtime only after a chunk from memory).
    let read = match (hit, kept) {
        (Some(b), _) => Ok(Checked::after(b, served.changed())),
        (None, Some(_)) => served.file.read_checked(len, pos, Buffer::Own).await,
        (None, None) => {
            let buf = Buffer::Pooled(permit.take());
            served.file.read_checked(len, pos, buf).await
        }
    };
    match read {
        // Read from a file rewritten in place since it was catalogued (or
        // kept from it while it was that version): the bytes may be the
        // new version's (the client would refuse them by their digest;
        // they are not sent at all).
        Ok(Checked::Changed) => {
            let why = format!(
                "{}: object {:?}, component {:?}: changed-under-transfer: the file changed (rewritten in place?) while it was sent",
                served.path, h.object, h.component
            );
            state.metrics.count_changed_abort();
            tracing::error!(file = %served.path, reason = %why, "the file changed under a component stream; stream reset");
            state.refresh_later(&served.path);
            Err(Unread::Refused(Refusal::Unreadable(why)))
        }
        Ok(Checked::Same(b)) => {
            match (kept, from_memory) {
                (_, true) => state.kept.sent(),
                (Some(k), false) => state.kept.keep(k, pos, &b),
                (None, false) => {}
            }
            share.handed();
            Ok(charge.hold(held(b, permit)))
        }
        Err(e) => {
            let why = format!(
                "{}: object {:?}, component {:?}: reading {n} bytes at {pos}: {e}",
                served.path, h.object, h.component
            );
            tracing::warn!(file = %served.path, reason = %why, "read failed mid-stream (file changed?)");
            Err(Unread::Refused(Refusal::Unreadable(why)))
        }
    }
}

/// Resets the stream with the refusal's code; its reason goes to the
/// client in an `error`.
fn refuse(stream: &mut SendStream, why: Refusal) -> Written {
    let _ = stream.reset(code(refused::code(&why)));
    Written::Refused(why)
}

fn write_failed(stream: &mut SendStream, e: &quinn::WriteError) -> Written {
    match e {
        quinn::WriteError::Stopped(c) => {
            let _ = stream.reset(code(ServerSession::<()>::stop_sending_reset(
                c.into_inner(),
            )));
            Written::Cancelled
        }
        _ => Written::Gone,
    }
}
