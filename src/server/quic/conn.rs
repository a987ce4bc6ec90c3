//! One QUIC connection: reads the control stream and carries out what the
//! protocol's server session (`ztp_proto::ServerSession`) decides.

use std::sync::{Arc, Mutex};

use quinn::Connection;
use tokio::sync::watch;
use zt_format::rows::Rows;
use ztp_proto::{
    Close, Code, Deframer, Done, ErrorMsg, Get, ManifestMsg, Message, Received, ServerSession,
};

use super::cancel::RequestCtl;
use super::control::{Control, Session};
use super::refused;
use super::send::{self, Item, Streams};
use crate::server::catalog::{Entry, Need};
use crate::server::serve::plan::{self, Plan};
use crate::server::serve::{entry, Refusal};
use crate::server::State;

/// What this server supports beyond ztp/1 as first published (the
/// `features` of every manifest message; PROTOCOL.md section 4).
const FEATURES: &[&str] = &[
    ztp_proto::FEATURE_RANGES,
    ztp_proto::FEATURE_ROWS,
    ztp_proto::FEATURE_SLICES,
    ztp_proto::FEATURE_SHARES,
];

/// A `get` not yet answered in full: counted from its arrival until its
/// last message (`done` or `error`) is queued on the control stream, so
/// that a connection shutting down closes after it (the close follows
/// that message on the stream).
struct Answering(Arc<watch::Sender<usize>>);

impl Answering {
    fn new(count: &Arc<watch::Sender<usize>>) -> Answering {
        count.send_modify(|n| *n += 1);
        Answering(Arc::clone(count))
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// What every request on a connection uses.
#[derive(Clone)]
struct Shared {
    state: Arc<State>,
    conn: Connection,
    control: Control,
    session: Session,
    streams: Streams,
}

/// What the control loop does next.
enum Next {
    Read(Result<Option<usize>, quinn::ReadError>),
    /// The daemon is shutting down: refuse new requests, finish these.
    Drain,
    /// Close with `shutting_down`: nothing is left to answer, or the
    /// shutdown deadline passed.
    Close,
}

/// Serves one connection until it closes. Once `stopping` turns true (the
/// daemon is shutting down), a new `get` is refused with `shutting_down`
/// and the connection is closed with `shutting_down` as soon as every
/// request on it has been answered in full: at once when it is idle.
/// `closing` turns true when the shutdown deadline has passed: the
/// connection is then closed whatever is in flight.
pub(super) async fn handle(
    state: Arc<State>,
    conn: Connection,
    mut stopping: watch::Receiver<bool>,
    mut closing: watch::Receiver<bool>,
) {
    let _open = state.metrics.quic_connection();
    let accepted = tokio::select! {
        s = conn.accept_bi() => s,
        Ok(_) = stopping.wait_for(|s| *s) => {
            // Nothing asked on it, so nothing to announce first.
            close_now(&conn);
            return;
        }
    };
    let (send, mut recv) = match accepted {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "connection closed before its control stream");
            return;
        }
    };
    let session: Session = Arc::new(Mutex::new(ServerSession::new(
        state.config.quic.max_requests,
    )));
    let stall = std::time::Duration::from_secs(state.config.quic.stall_timeout_secs.max(1));
    let (control, writer) = Control::spawn(send, conn.clone(), Arc::clone(&session), stall);
    let streams = Streams::new(state.config.quic.max_streams, state.send_budget.join(&conn));
    let mut deframer = Deframer::new(state.config.quic.max_request_bytes);
    let mut buf = vec![0u8; 16 * 1024];
    let shared = Shared {
        state: Arc::clone(&state),
        conn: conn.clone(),
        control: control.clone(),
        session: Arc::clone(&session),
        streams: streams.clone(),
    };
    let answering = Arc::new(watch::Sender::new(0usize));
    let mut unanswered = answering.subscribe();
    let mut draining = false;
    'read: loop {
        let next = tokio::select! {
            // A shutdown is seen before anything read after it.
            biased;
            Ok(_) = closing.wait_for(|c| *c) => Next::Close,
            Ok(_) = stopping.wait_for(|s| *s), if !draining => Next::Drain,
            Ok(_) = unanswered.wait_for(|n| *n == 0), if draining => Next::Close,
            r = recv.read(&mut buf) => Next::Read(r),
        };
        match next {
            Next::Read(Ok(Some(n))) => deframer.push(buf.get(..n).unwrap_or_default()),
            Next::Read(Ok(None) | Err(_)) => break,
            Next::Drain => {
                draining = true;
                continue;
            }
            Next::Close => {
                let reason = "the server is shutting down".to_owned();
                control
                    .close(Close {
                        code: Code::ShuttingDown,
                        reason,
                    })
                    .await;
                break;
            }
        }
        loop {
            let frame = match deframer.next_message() {
                Ok(Some(m)) => Ok(m),
                Ok(None) => break,
                Err(e) => Err(e),
            };
            let received = match session.lock() {
                Ok(mut s) => s.on_frame(frame),
                Err(_) => break 'read,
            };
            match received {
                Received::Serve(g) if draining => {
                    answered(&session, g.id);
                    let refused = ErrorMsg {
                        id: Some(g.id),
                        code: Code::ShuttingDown,
                        message: "the server is shutting down".to_owned(),
                        retry_after_ms: None,
                    };
                    control.send(Message::Error(refused)).await;
                }
                // The token first: a `get` without one causes no work
                // (no hashing, reading or rendering).
                Received::Serve(g) if !authorized(&state, &g) => {
                    answered(&session, g.id);
                    let refusal = Refusal::Unauthorized("a valid token is required".to_owned());
                    control
                        .send(Message::Error(refused::error(g.id, refusal)))
                        .await;
                }
                Received::Serve(g) if state.catalog.is_pending(&g.path) => {
                    // Its digests are being computed: wait beside the
                    // control loop, which keeps reading (such requests
                    // count against the connection's limit from their
                    // `get`, as every request does).
                    let (shared, answer) = (shared.clone(), Answering::new(&answering));
                    let unanswered = Unanswered::new(&session, &control, &g);
                    // The wait ends with its connection: no task outlives
                    // it to answer nobody (nor holds its `get`).
                    tokio::spawn(async move {
                        let conn = shared.conn.clone();
                        let resolve = shared.state.catalog.resolve(&g.path, need(&g));
                        tokio::select! {
                            resolved = resolve => get(shared, g, resolved, (answer, unanswered)).await,
                            _ = conn.closed() => {}
                        }
                    });
                }
                Received::Serve(g) => {
                    let answer = (
                        Answering::new(&answering),
                        Unanswered::new(&session, &control, &g),
                    );
                    get(shared.clone(), g, None, answer).await;
                }
                Received::Answer(e) => control.send(Message::Error(e)).await,
                Received::Cancel {
                    request,
                    object,
                    component,
                } => request.cancel(object, component),
                Received::Nothing => {}
                Received::Close(c) => {
                    control.close(c).await;
                    break 'read;
                }
            }
        }
    }
    drop((control, shared));
    let _ = writer.await;
    // Let streams in flight finish: the connection closes when the client
    // is done, or, once the daemon is stopping (a client that ended its
    // control stream), when nothing is left to answer, or at the deadline.
    let drained = async {
        if stopping.wait_for(|s| *s).await.is_ok() {
            let _ = unanswered.wait_for(|n| *n == 0).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        _ = conn.closed() => {}
        () = drained => close_now(&conn),
        Ok(_) = closing.wait_for(|c| *c) => close_now(&conn),
    }
}

/// Request `id` is answered without streams: its id is free again.
fn answered(session: &Session, id: u64) {
    if let Ok(mut s) = session.lock() {
        s.answered(id);
    }
}

/// A request accepted and not yet answered or started: its id and its
/// place among the connection's requests are given back however its
/// answering ends, and a panic is answered with `internal` (where the
/// control queue has room) rather than left for the client to wait on.
struct Unanswered {
    session: Session,
    control: Control,
    id: u64,
    /// The file asked for, to name in the `internal` error.
    path: String,
    armed: bool,
}

impl Unanswered {
    fn new(session: &Session, control: &Control, g: &Get) -> Unanswered {
        Unanswered {
            session: Arc::clone(session),
            control: control.clone(),
            id: g.id,
            path: g.path.clone(),
            armed: true,
        }
    }

    /// Answered without streams (an `error`, a `manifest_only` `done`).
    fn answered(mut self) {
        self.armed = false;
        answered(&self.session, self.id);
    }

    /// Its streams start under `ctl`: the cancels held for it meanwhile.
    fn start(mut self, ctl: &Arc<RequestCtl>) -> Option<ztp_proto::Held> {
        self.armed = false;
        let mut s = self.session.lock().ok()?;
        Some(s.start(self.id, Arc::clone(ctl)))
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if self.armed {
            answered(&self.session, self.id);
            let error = Message::Error(ErrorMsg {
                id: Some(self.id),
                code: Code::Internal,
                message: format!(
                    "{}: the server failed while answering this request (its log says why)",
                    self.path
                ),
                retry_after_ms: None,
            });
            // Queued without waiting here (a `Drop`), however full the
            // queue: the client must not wait on a request nobody answers.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let control = self.control.clone();
                runtime.spawn(async move { control.send(error).await });
            }
        }
    }
}

/// Closes `conn` with `shutting_down`, without announcing it on the
/// control stream (never opened, or already ended).
fn close_now(conn: &Connection) {
    let code = quinn::VarInt::from_u32(Code::ShuttingDown.value());
    conn.close(code, b"the server is shutting down");
}

/// Resolves and answers one `get`: an `error`, or the manifest and then
/// the component streams.
async fn get(c: Shared, g: Get, resolved: Option<Entry>, answer: (Answering, Unanswered)) {
    let (answer, unanswered) = answer;
    let Shared {
        state,
        conn,
        control,
        session,
        streams: open,
    } = c;
    let id = g.id;
    let Plan {
        served,
        manifest,
        parts,
    } = match plan(&state, &g, resolved).await {
        Ok(plan) => plan,
        Err(r) => {
            unanswered.answered();
            return control.send(Message::Error(refused::error(id, r))).await;
        }
    };
    // A share's components (balanced by bytes: ztp_proto::share) keep
    // their positions in the whole request's order as `seq`.
    let count = g.share.map_or(1, |(_, count)| count);
    let mine: Option<Vec<bool>> = g.share.map(|(index, count)| {
        let lengths = parts.iter().map(|p| p.component.length);
        let shares = ztp_proto::share::assign(lengths, count);
        shares.into_iter().map(|s| s == index).collect()
    });
    let items: Vec<Item> = (0u64..)
        .zip(parts)
        .enumerate()
        .filter(|(i, _)| mine.as_ref().is_none_or(|m| m.get(*i) == Some(&true)))
        .map(|(_, (seq, part))| Item::of(id, seq, part))
        .collect();
    let streams = if g.manifest_only {
        0
    } else {
        items.len() as u64
    };
    let msg = Message::Manifest(ManifestMsg {
        id,
        etag: served.answered_as(g.if_match.as_deref()).to_owned(),
        size: served.size,
        manifest,
        streams,
        features: FEATURES.iter().map(|f| (*f).to_owned()).collect(),
    });
    // Answered (its id free, no `internal` error left to send) before the
    // manifest goes out: nothing may follow a manifest but its streams and
    // `done`.
    if g.manifest_only {
        unanswered.answered();
        control.send_queued(msg).await;
        let done = Done {
            id,
            sent: 0,
            cancelled: 0,
        };
        return control.send(Message::Done(done)).await;
    }
    let sends = items
        .iter()
        .map(|i| (i.header.object.as_str(), i.header.component.as_str()));
    let ctl = Arc::new(RequestCtl::new(sends));
    // Cancels that came while it was being answered take effect now,
    // before its first stream opens.
    if let Some(held) = unanswered.start(&ctl) {
        for (object, component) in held.parts {
            ctl.cancel(Some(object), component);
        }
        if held.all {
            ctl.cancel(None, None);
        }
    }
    // The manifest is in the control stream's buffer, which has priority,
    // before the first component stream opens: it arrives first.
    control.send_queued(msg).await;
    tokio::spawn(async move {
        let writers = send::writers(count);
        let (sent, cancelled) =
            send::run(&state, &conn, items, &ctl, &control, open, writers).await;
        // The id is free before `done` says so: a client may reuse it at once.
        if let Ok(mut s) = session.lock() {
            s.finish(id);
        }
        let done = Done {
            id,
            sent,
            cancelled,
        };
        control.send(Message::Done(done)).await;
        drop(answer);
    });
}

/// Whether a `get` carries a token the daemon accepts (any, when it
/// requires none).
fn authorized(state: &State, g: &Get) -> bool {
    let token = g.token.as_deref().map(|t| format!("Bearer {t}"));
    state
        .tokens
        .as_ref()
        .is_none_or(|t| t.allows(token.as_deref()))
}

/// What an authorized `get` is sent (`serve`): the file as it is now, at
/// the version `if_match` names; then rows, a slice, byte ranges or the
/// selection's components. `resolved` is the entry
/// [`crate::server::Catalog::resolve`] gave, for a file that needed it.
async fn plan(state: &Arc<State>, g: &Get, resolved: Option<Entry>) -> Result<Plan, Refusal> {
    let served = entry::current(state, &g.path, need(g), resolved).await?;
    let served = entry::matching(served, g.if_match.as_deref())?;
    if g.rows.is_some() && !g.slice.is_empty() {
        return Err(Refusal::NoMatch(format!(
            "{}: a get carries rows or a slice, not both",
            g.path
        )));
    }
    if let Some((start, end)) = g.rows {
        return plan::rows(state, served, &g.select, Rows { start, end }).await;
    }
    if !g.slice.is_empty() {
        return plan::gathered(state, served, &g.select, &g.slice).await;
    }
    if !g.ranges.is_empty() {
        return plan::byte_ranges(served, &g.ranges);
    }
    plan::selection(state, served, &g.select, &g.order, g.manifest_only).await
}

/// What a `get` needs of its file's digests.
fn need(g: &Get) -> Need<'_> {
    if !g.ranges.is_empty() {
        Need::Bytes
    } else if g.select.is_empty() {
        Need::Everything
    } else {
        Need::Select(&g.select)
    }
}
