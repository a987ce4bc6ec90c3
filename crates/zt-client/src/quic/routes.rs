//! Requests in flight on one connection, and the control stream's
//! messages (manifests, errors, `done`) handed to them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use quinn::{Connection, RecvStream};
use tokio::sync::{mpsc, oneshot};
use ztp_proto::{Code, Deframer, ManifestMsg, Message};

use crate::budget::Budget;
use crate::error::{quote, Error, Result, Status};
use crate::fetch::{Arrival, Event};

pub(super) type Delivery = mpsc::UnboundedSender<Arrival>;

/// One request in flight: where its manifest, components and errors go.
#[derive(Debug)]
pub(super) struct Route {
    /// The file asked for, to name in errors.
    pub(super) path: String,
    pub(super) manifest: Option<oneshot::Sender<Result<ManifestMsg>>>,
    pub(super) deliver: Delivery,
    /// A bounded request's budget: a stream waits for room before its
    /// bytes are read (and quinn's flow control holds the server back).
    pub(super) budget: Option<Budget>,
}

pub(super) type Routes = Arc<Mutex<HashMap<u64, Route>>>;

/// Hands the error `make` builds (given the request's file) to the
/// request `id`, or to every request when the connection itself failed
/// (no id), each naming its own file.
pub(super) fn route_error(routes: &Routes, id: Option<u64>, make: impl Fn(&str) -> Error) {
    let Ok(mut r) = routes.lock() else { return };
    let ids: Vec<u64> = match id {
        Some(i) => vec![i],
        None => r.keys().copied().collect(),
    };
    for i in ids {
        if let Some(route) = r.get_mut(&i) {
            let e = make(&route.path);
            match route.manifest.take() {
                Some(tx) => {
                    let _ = tx.send(Err(e));
                }
                None => {
                    let _ = route.deliver.send((Event::Component(Err(e)), None));
                }
            }
        }
    }
}

/// Every request on the connection fails with a transport error (resumable).
fn all_lost(routes: &Routes, why: &str) {
    route_error(routes, None, |path| {
        Error::Transport(format!("{path}: {why}"))
    });
}

/// The server's `error` for request `id`: a component it refused as
/// corrupt can never be fetched; anything else is the server's answer.
fn server_error(routes: &Routes, id: Option<u64>, code: Code, message: &str) {
    let text = format!("server error {code}: {}", quote(message));
    match id {
        Some(id) => route_error(routes, Some(id), |_| match code {
            Code::Corrupt => Error::Corrupt {
                at: None,
                message: text.clone(),
            },
            code => Error::Server {
                status: Status::Ztp(code),
                message: text.clone(),
            },
        }),
        // Without an id the server is about to close the connection.
        None => route_error(routes, None, |path| Error::Server {
            status: Status::Ztp(code),
            message: format!("{path}: {text}"),
        }),
    }
}

/// Fails every request on `conn`, which is gone, saying why (the server
/// closing it, a timeout, a reset). A connection this client closed itself
/// is not reported: whoever closed it has already said why (a protocol
/// violation), or nobody is waiting (the client was dropped).
pub(super) fn lost(conn: &Connection, routes: &Routes, why: &quinn::ConnectionError) {
    if *why != quinn::ConnectionError::LocallyClosed {
        let addr = conn.remote_address();
        all_lost(
            routes,
            &format!("the QUIC connection to {addr} was lost: {why}"),
        );
    }
}

/// The server broke the protocol: every request on the connection fails
/// with `why`, and the connection is closed with `protocol_violation`.
pub(super) fn violation(conn: &Connection, routes: &Routes, why: &str) {
    let why = format!("the server broke ztp/1: {why}");
    tracing::warn!(server = %conn.remote_address(), reason = %why, "closing the connection");
    // Closed first, so the server learns why even if the caller, failed
    // at once, drops the client; a connection closed here is not reported
    // again as lost (see `lost`).
    let code = quinn::VarInt::from_u32(Code::ProtocolViolation.value());
    conn.close(code, why.as_bytes());
    route_error(routes, None, |path| {
        Error::Protocol(format!("{path}: {why}"))
    });
}

/// Reads the control stream, handing each server message to its request.
pub(super) async fn read_control(mut recv: RecvStream, routes: Routes, cap: u64, conn: Connection) {
    let mut d = Deframer::new(usize::try_from(cap.saturating_add(4096)).unwrap_or(usize::MAX));
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match recv.read(&mut buf).await {
            Ok(Some(n)) => d.push(buf.get(..n).unwrap_or_default()),
            Ok(None) => {
                // The server answers no more requests on this connection.
                return all_lost(&routes, "the server ended its control stream");
            }
            Err(quinn::ReadError::ConnectionLost(c)) => return lost(&conn, &routes, &c),
            Err(e) => {
                let why = format!("the server broke off the control stream: {e}");
                return all_lost(&routes, &why);
            }
        }
        loop {
            match d.next_message() {
                Ok(Some(Message::Manifest(m))) => {
                    if let Ok(mut r) = routes.lock() {
                        if let Some(tx) = r.get_mut(&m.id).and_then(|route| route.manifest.take()) {
                            let _ = tx.send(Ok(m));
                        }
                    }
                }
                Ok(Some(Message::Error(e))) => server_error(&routes, e.id, e.code, &e.message),
                Ok(Some(Message::Done(d))) => {
                    // Tell the fetch how many components were sent whole:
                    // streams cancelled before they opened never arrive.
                    if let Ok(r) = routes.lock() {
                        if let Some(route) = r.get(&d.id) {
                            let _ = route.deliver.send((Event::Done { sent: d.sent }, None));
                        }
                    }
                }
                Ok(Some(Message::Get(_) | Message::Cancel(_))) => {
                    let why = "a `get` or `cancel` (a client's message) on the control stream";
                    return violation(&conn, &routes, why);
                }
                Ok(None) => break,
                Err(e) => {
                    return violation(&conn, &routes, &format!("malformed message: {e}"));
                }
            }
        }
    }
}
