//! One QUIC connection: the control stream, requests, cancellation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use quinn::{Connection, VarInt};
use tokio::sync::{mpsc, Semaphore};
use ztp_proto::{
    frame, Cancel, Code, ComponentHeader, Deframer, ErrorMsg, FrameError, Get, ManifestMsg, Message,
};

use super::send::{self, Item, RequestCtl};
use crate::server::catalog::{Entry, Served};
use crate::server::State;
use zt_format::select::Selection;

type Requests = Arc<Mutex<HashMap<u64, Arc<RequestCtl>>>>;

fn close(conn: &Connection, c: Code, why: &str) {
    tracing::info!(code = %c, reason = why, "closing QUIC connection");
    conn.close(VarInt::from_u32(c.value()), why.as_bytes());
}

/// Serves one connection until it closes.
pub(super) async fn handle(state: Arc<State>, conn: Connection) {
    let _open = state.metrics.quic_connection();
    let (mut send, mut recv) = match conn.accept_bi().await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "connection closed before its control stream");
            return;
        }
    };
    let (tx, mut rx) = mpsc::channel::<Message>(64);
    let writer = tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            let Ok(bytes) = frame(&m) else { continue };
            if send.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = send.finish();
    });
    let requests: Requests = Arc::default();
    let slots = Arc::new(Semaphore::new(state.config.quic.max_streams));
    let mut deframer = Deframer::new(state.config.quic.max_request_bytes);
    let mut buf = vec![0u8; 16 * 1024];
    'read: loop {
        match recv.read(&mut buf).await {
            Ok(Some(n)) => deframer.push(buf.get(..n).unwrap_or_default()),
            Ok(None) | Err(_) => break,
        }
        loop {
            let msg = match deframer.next_message() {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e @ FrameError::TooLarge { .. }) => {
                    close(&conn, Code::MessageTooLarge, &e.to_string());
                    break 'read;
                }
                Err(e) => {
                    close(&conn, Code::ProtocolViolation, &e.to_string());
                    break 'read;
                }
            };
            match msg {
                Message::Get(g) => {
                    if let Err((c, why)) = get(&state, &conn, &tx, &requests, &slots, g).await {
                        close(&conn, c, &why);
                        break 'read;
                    }
                }
                Message::Cancel(Cancel {
                    id,
                    object,
                    component,
                }) => {
                    let ctl = requests.lock().ok().and_then(|r| r.get(&id).cloned());
                    if let Some(ctl) = ctl {
                        ctl.cancel(object, component);
                    }
                }
                other => {
                    close(
                        &conn,
                        Code::ProtocolViolation,
                        &format!("{} is a server message", kind(&other)),
                    );
                    break 'read;
                }
            }
        }
    }
    drop(tx);
    let _ = writer.await;
    // Let streams in flight finish; the connection closes when the client is done.
    let _ = conn.closed().await;
}

fn kind(m: &Message) -> &'static str {
    match m {
        Message::Get(_) => "get",
        Message::Cancel(_) => "cancel",
        Message::Manifest(_) => "manifest",
        Message::Done(_) => "done",
        Message::Error(_) => "error",
    }
}

/// Handles one `get`. Request failures are answered with `error`; an
/// `Err` is a protocol violation that closes the connection.
async fn get(
    state: &Arc<State>,
    conn: &Connection,
    tx: &mpsc::Sender<Message>,
    requests: &Requests,
    slots: &Arc<Semaphore>,
    g: Get,
) -> Result<(), (Code, String)> {
    let id = g.id;
    let fail = |code: Code, message: String| {
        Message::Error(ErrorMsg {
            id: Some(id),
            code,
            message,
        })
    };
    let in_flight = requests
        .lock()
        .map(|r| (r.contains_key(&id), r.len()))
        .unwrap_or((false, 0));
    if in_flight.0 {
        return Err((
            Code::ProtocolViolation,
            format!("request id {id} is already in flight"),
        ));
    }
    let answer =
        if in_flight.1 >= state.config.quic.max_requests {
            Err(fail(
                Code::TooManyRequests,
                format!(
                    "at most {} requests in flight",
                    state.config.quic.max_requests
                ),
            ))
        } else if state.tokens.as_ref().is_some_and(|t| {
            !t.allows(g.token.as_deref().map(|t| format!("Bearer {t}")).as_deref())
        }) {
            Err(fail(Code::Unauthorized, "a valid token is required".into()))
        } else {
            plan(state, &g).map_err(|(c, m)| fail(c, m))
        };
    let (served, manifest, items) = match answer {
        Ok(x) => x,
        Err(m) => {
            let _ = tx.send(m).await;
            return Ok(());
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
    });
    let _ = tx.send(msg).await;
    if g.manifest_only {
        let _ = tx
            .send(Message::Done(ztp_proto::Done {
                id,
                sent: 0,
                cancelled: 0,
            }))
            .await;
        return Ok(());
    }
    let ctl = Arc::new(RequestCtl::default());
    if let Ok(mut r) = requests.lock() {
        r.insert(id, Arc::clone(&ctl));
    }
    let (state, conn, tx, requests, slots) = (
        Arc::clone(state),
        conn.clone(),
        tx.clone(),
        Arc::clone(requests),
        Arc::clone(slots),
    );
    tokio::spawn(async move {
        send::run(state, conn, served, id, items, ctl, tx, slots).await;
        if let Ok(mut r) = requests.lock() {
            r.remove(&id);
        }
    });
    Ok(())
}

type Plan = (Arc<Served>, Vec<u8>, Vec<Item>);

/// Resolves the file, the selection and the send order.
fn plan(state: &State, g: &Get) -> Result<Plan, (Code, String)> {
    let snap = state.catalog.snapshot();
    let served = match snap.get(&g.path) {
        Some(Entry::Served(s)) => Arc::clone(s),
        Some(Entry::Unavailable(u)) => return Err((Code::Unavailable, u.reason.clone())),
        None => return Err((Code::NotFound, format!("no file {:?}", g.path))),
    };
    if let Some(want) = &g.if_match {
        if *want != served.etag {
            return Err((
                Code::PreconditionFailed,
                format!("{} has ETag {}, not {want}", served.path, served.etag),
            ));
        }
    }
    let sel = Selection::new(&g.select).map_err(|e| (Code::NoMatch, e.to_string()))?;
    let filtered = sel
        .filter(&served.manifest)
        .map_err(|e| (Code::NoMatch, format!("{}: {e}", served.path)))?;
    let manifest = zt_format::manifest_cbor(&filtered);
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
