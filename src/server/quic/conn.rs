//! One QUIC connection: reads the control stream and carries out what the
//! protocol's server session (`ztp_proto::ServerSession`) decides.

use std::sync::{Arc, Mutex};

use quinn::Connection;
use tokio::sync::{watch, Semaphore};
use ztp_proto::{
    Close, Code, ComponentHeader, Deframer, Done, ErrorMsg, Get, ManifestMsg, Message, Received,
    ServerSession,
};

use super::cancel::RequestCtl;
use super::control::{Control, Session};
use super::send::{self, Item, Plan};
use crate::server::catalog::{Entry, Need, Served};
use crate::server::State;
use zt_format::select::Selection;

/// What this server supports beyond ztp/1 as first published (the
/// `features` of every manifest message; PROTOCOL.md section 4).
const FEATURES: &[&str] = &[ztp_proto::FEATURE_RANGES, ztp_proto::FEATURE_ROWS];

/// Serves one connection until it closes. `closing` turns true when the
/// daemon's shutdown deadline has passed: the connection is then closed
/// with `shutting_down`.
pub(super) async fn handle(
    state: Arc<State>,
    conn: Connection,
    mut closing: watch::Receiver<bool>,
) {
    let _open = state.metrics.quic_connection();
    let (send, mut recv) = match conn.accept_bi().await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "connection closed before its control stream");
            return;
        }
    };
    let session: Session = Arc::new(Mutex::new(ServerSession::new(
        state.config.quic.max_requests,
    )));
    let (control, writer) = Control::spawn(send, conn.clone(), Arc::clone(&session));
    let slots = Arc::new(Semaphore::new(state.config.quic.max_streams));
    let mut deframer = Deframer::new(state.config.quic.max_request_bytes);
    let mut buf = vec![0u8; 16 * 1024];
    'read: loop {
        let read = tokio::select! {
            r = recv.read(&mut buf) => Some(r),
            Ok(_) = closing.wait_for(|c| *c) => None,
        };
        let Some(read) = read else {
            let reason = "the server is shutting down".to_owned();
            control
                .close(Close {
                    code: Code::ShuttingDown,
                    reason,
                })
                .await;
            break;
        };
        match read {
            Ok(Some(n)) => deframer.push(buf.get(..n).unwrap_or_default()),
            Ok(None) | Err(_) => break,
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
                Received::Serve(g) if state.catalog.is_pending(&g.path) => {
                    // Its digests are being computed: wait beside the
                    // control loop, which keeps reading.
                    let (state, conn, control) =
                        (Arc::clone(&state), conn.clone(), control.clone());
                    let (session, slots) = (Arc::clone(&session), Arc::clone(&slots));
                    tokio::spawn(async move {
                        let resolved = state.catalog.resolve(&g.path, need(&g)).await;
                        get(&state, &conn, &control, &session, &slots, g, resolved).await;
                    });
                }
                Received::Serve(g) => get(&state, &conn, &control, &session, &slots, g, None).await,
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
    drop(control);
    let _ = writer.await;
    // Let streams in flight finish; the connection closes when the client is done.
    let _ = conn.closed().await;
}

/// Resolves and answers one `get`: an `error`, or the manifest and then
/// the component streams.
async fn get(
    state: &Arc<State>,
    conn: &Connection,
    control: &Control,
    session: &Session,
    slots: &Arc<Semaphore>,
    g: Get,
    resolved: Option<Entry>,
) {
    let id = g.id;
    let answer =
        if state.tokens.as_ref().is_some_and(|t| {
            !t.allows(g.token.as_deref().map(|t| format!("Bearer {t}")).as_deref())
        }) {
            Err((Code::Unauthorized, "a valid token is required".to_owned()))
        } else {
            match current(state, &g, resolved).await {
                Err(e) => Err(e),
                Ok(served) if g.rows.is_some() => super::rows::plan(state, served, &g).await,
                Ok(served) => plan(state, served, &g).await,
            }
        };
    let (served, manifest, items) = match answer {
        Ok(x) => x,
        Err((code, message)) => {
            let id = Some(id);
            return control
                .send(Message::Error(ErrorMsg { id, code, message }))
                .await;
        }
    };
    let streams = if g.manifest_only {
        0
    } else {
        items.len() as u64
    };
    let msg = Message::Manifest(ManifestMsg {
        id,
        etag: served.etag.clone(),
        size: served.size,
        manifest,
        streams,
        features: FEATURES.iter().map(|f| (*f).to_owned()).collect(),
    });
    // The manifest is in the control stream's buffer, which has priority,
    // before the first component stream opens: it arrives first.
    control.send_queued(msg).await;
    if g.manifest_only {
        let done = Done {
            id,
            sent: 0,
            cancelled: 0,
        };
        return control.send(Message::Done(done)).await;
    }
    let ctl = Arc::new(RequestCtl::default());
    if let Ok(mut s) = session.lock() {
        s.start(id, Arc::clone(&ctl));
    }
    let (state, conn, control, session, slots) = (
        Arc::clone(state),
        conn.clone(),
        control.clone(),
        Arc::clone(session),
        Arc::clone(slots),
    );
    tokio::spawn(async move {
        let (sent, cancelled) =
            send::run(&state, &conn, &served, items, &ctl, &control, slots).await;
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
    });
}

/// A `get` with `ranges`: one stream per byte range of the file, in the
/// order asked for, announced by a manifest of one `u8` object per range
/// (`@bytes/START-END`, its `data` at START) so the client checks bounds
/// and lengths as for components. A range past the file's end is
/// `no_match`. No digests: the client checks what the bytes mean (a
/// copy's header is read back against the manifest).
fn ranges_plan(served: Arc<Served>, g: &Get) -> Result<Plan, (Code, String)> {
    let mut m = zt_format::Manifest {
        source: served.manifest.source,
        ..zt_format::Manifest::default()
    };
    let mut items = Vec::with_capacity(g.ranges.len());
    for &(start, end) in &g.ranges {
        if end > served.size {
            return Err((
                Code::NoMatch,
                format!(
                    "{}: bytes {start}..{end} run past its {} bytes",
                    served.path, served.size
                ),
            ));
        }
        let name = ztp_proto::range_object(start, end);
        let len = end - start;
        let mut components = zt_format::Components::new();
        let c = zt_format::Component::of_file(zt_format::DType::U8, start, len);
        components.insert("data".to_owned(), c);
        m.objects.insert(
            name.clone(),
            zt_format::Object {
                shape: vec![len],
                format: zt_format::Format::Dense,
                attributes: zt_format::Attributes::new(),
                components,
            },
        );
        items.push(Item {
            header: ComponentHeader {
                id: g.id,
                object: name,
                component: "data".to_owned(),
                seq: items.len() as u64,
                dtype: "u8".to_owned(),
                logical_type: None,
                encoding: "raw".to_owned(),
                length: len,
                uncompressed_length: None,
                digest: None,
                offset: start,
            },
        });
    }
    Ok((served, zt_format::manifest_cbor(&m), items))
}

/// [`served_for`], as the file is now: an entry whose local file (or a
/// shard of it) changed under it, rewritten in place, is catalogued again
/// first, as over HTTP, and a file that changed again meanwhile is
/// `unavailable` for now.
async fn current(
    state: &Arc<State>,
    g: &Get,
    resolved: Option<Entry>,
) -> Result<Arc<Served>, (Code, String)> {
    let served = served_for(state, g, resolved)?;
    let Some(stale) = served.stale().map(str::to_owned) else {
        return Ok(served);
    };
    tracing::info!(file = %stale, "the file changed under its catalog entry; catalogued again");
    state.metrics.count_changed_refresh();
    state.refresh(&stale).await;
    let need = need(g);
    let resolved = state.catalog.resolve(&g.path, need).await;
    let served = served_for(state, g, resolved)?;
    match served.stale() {
        None => Ok(served),
        Some(path) => Err((
            Code::Unavailable,
            format!("{path}: the file is changing (being written in place); retry"),
        )),
    }
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

/// The served file a `get` names, at the version it asks for:
/// `resolved` is the entry [`crate::server::Catalog::resolve`] gave, for
/// a file that needed it; others are looked up now.
fn served_for(
    state: &State,
    g: &Get,
    resolved: Option<Entry>,
) -> Result<Arc<Served>, (Code, String)> {
    let entry = resolved.or_else(|| state.catalog.snapshot().get(&g.path).cloned());
    let served = match &entry {
        Some(Entry::Served(s)) => Arc::clone(s),
        Some(Entry::Unavailable(u)) => return Err((Code::Unavailable, u.reason.clone())),
        Some(Entry::Pending(_) | Entry::Index(_)) => {
            return Err((
                Code::Unavailable,
                format!("{}: its digests are still being computed", g.path),
            ))
        }
        None => return Err((Code::NotFound, format!("no file {:?}", g.path))),
    };
    if let Some(want) = &g.if_match {
        if !served.is_version(want) {
            return Err((
                Code::PreconditionFailed,
                format!("{} has ETag {}, not {want}", served.path, served.etag),
            ));
        }
    }
    Ok(served)
}

/// Resolves the selection and the send order; the manifest's CBOR comes
/// from the renderings cache, and a `manifest_only` get plans no streams.
async fn plan(state: &State, served: Arc<Served>, g: &Get) -> Result<Plan, (Code, String)> {
    use crate::server::render::renderings::{Key, Kind, Refused, Rendered};
    if !g.ranges.is_empty() {
        return ranges_plan(served, g);
    }
    let key = Key {
        etag: served.etag.clone(),
        kind: Kind::Ztp,
        select: g.select.clone(),
    };
    let (of, select) = (Arc::clone(&served), g.select.clone());
    let rendered = state
        .renderings
        .get(key, move |w| crate::server::render::ztp(&of, &select, w))
        .await;
    let manifest = match &*rendered {
        Rendered::Body { bytes, .. } => bytes.to_vec(),
        Rendered::Refused(Refused::BadSelect(m) | Refused::NoMatch(m)) => {
            return Err((Code::NoMatch, m.clone()))
        }
        Rendered::Refused(Refused::TooLarge(m)) => return Err((Code::MessageTooLarge, m.clone())),
        Rendered::Refused(Refused::Failed(m)) => return Err((Code::Internal, m.clone())),
    };
    if g.manifest_only {
        return Ok((served, manifest, Vec::new()));
    }
    let sel = Selection::new(&g.select).map_err(|e| (Code::NoMatch, e.to_string()))?;
    let filtered = sel
        .filter(&served.manifest)
        .map_err(|e| (Code::NoMatch, format!("{}: {e}", served.path)))?;
    let mut items = Vec::new();
    for (name, role, c) in zt_format::send_order(&filtered, &g.order) {
        if c.is_transformed() {
            return Err((
                Code::Unavailable,
                format!("{}: object {name:?} component {role:?} is in a legacy layout; convert the file with zt pack", served.path),
            ));
        }
        items.push(Item {
            header: ComponentHeader {
                id: g.id,
                object: name.to_owned(),
                component: role.to_owned(),
                seq: items.len() as u64,
                dtype: c.dtype.name().to_owned(),
                logical_type: c.logical_type.as_ref().map(|t| t.name().to_owned()),
                encoding: c.encoding.name().to_owned(),
                length: c.length,
                uncompressed_length: c.uncompressed_length,
                digest: c.digest.as_ref().map(|d| d.as_str().to_owned()),
                offset: c.offset,
            },
        });
    }
    Ok((served, manifest, items))
}
