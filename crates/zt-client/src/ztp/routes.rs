//! Requests in flight on one connection, and the control stream's
//! messages (manifests, errors, `done`) handed to them. Which message
//! belongs to which request, and which breaks the protocol, is the
//! protocol's client session's call (`ztp_proto::ClientSession`).

use std::sync::{Arc, Mutex};

use quinn::{Connection, RecvStream};
use tokio::sync::{mpsc, oneshot};
use ztp_proto::{ClientSession, Code, Deframer, Event as Said, ManifestMsg};

use crate::budget::Budget;
use crate::error::{quote, Error, Result, Status};
use crate::fetch::{Arrival, Event};

pub(super) type Delivery = mpsc::UnboundedSender<Arrival>;

/// One request in flight: where its manifest, components and errors go.
#[derive(Debug)]
pub(super) struct Route {
    /// The file asked for, as a URL (`quic://host:port/path`), to name
    /// in errors.
    pub(super) name: String,
    pub(super) manifest: Option<oneshot::Sender<Result<ManifestMsg>>>,
    pub(super) deliver: Delivery,
    /// A bounded request's budget: a stream waits for room before its
    /// bytes are read (and quinn's flow control holds the server back).
    pub(super) budget: Option<Budget>,
    /// Its turn among the connection's requests
    /// ([`super::REQUESTS`]), given back when the server has answered it
    /// in full (its `done` or `error`, as the server counts it) or the
    /// request is forgotten, whichever comes first.
    pub(super) turn: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Route {
    /// Fails the request: its manifest wait, or its fetch, which gets
    /// nothing more from this connection.
    fn fail(mut self, e: Error) {
        match self.manifest.take() {
            Some(tx) => {
                let _ = tx.send(Err(e));
            }
            None => {
                let _ = self.deliver.send((Event::Lost(e), None));
            }
        }
    }
}

pub(super) type Routes = Arc<Mutex<ClientSession<Route>>>;

/// Fails every request on the connection with the error `make` builds
/// from the request's file; the session is empty afterwards.
fn fail_all(routes: &Routes, make: impl Fn(&str) -> Error) {
    let Ok(mut session) = routes.lock() else {
        return;
    };
    for route in session.drain() {
        let e = make(&route.name);
        route.fail(e);
    }
}

/// Every request on the connection fails with a transport error (resumable).
fn all_lost(routes: &Routes, why: &str) {
    fail_all(routes, |name| Error::Transport(format!("{name}: {why}")));
}

/// The error for a server's `error` message about a request for `name`
/// (its URL): a component it refused as corrupt can never be fetched; a
/// version (`if_match`) the file no longer has is a changed file, as over
/// HTTP; anything else is the server's answer.
fn server_error(name: &str, code: Code, message: &str, retry_after_ms: Option<u64>) -> Error {
    let text = format!("server error {code}: {}", quote(message));
    match code {
        Code::Corrupt => Error::Corrupt {
            at: None,
            message: format!("{name}: {text}"),
        },
        Code::PreconditionFailed => Error::Changed {
            url: name.to_owned(),
            detail: format!("({text})"),
        },
        code => Error::Server {
            status: Status::Ztp(code),
            message: format!("{name}: {text}"),
            retry_after: retry_after_ms.map(std::time::Duration::from_millis),
        },
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
pub(super) fn violation(conn: &Connection, routes: &Routes, why: &ztp_proto::Violation) {
    let why = why.to_string();
    tracing::warn!(server = %conn.remote_address(), reason = %why, "closing the connection");
    // Closed first, so the server learns why even if the caller, failed
    // at once, drops the client; a connection closed here is not reported
    // again as lost (see `lost`).
    let code = quinn::VarInt::from_u32(Code::ProtocolViolation.value());
    conn.close(code, why.as_bytes());
    fail_all(routes, |name| Error::Protocol(format!("{name}: {why}")));
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
            let frame = match d.next_message() {
                Ok(Some(m)) => Ok(m),
                Ok(None) => break,
                Err(e) => Err(e),
            };
            let Ok(mut session) = routes.lock() else {
                return;
            };
            match session.on_frame(frame) {
                Ok(Said::Manifest { request, msg }) => {
                    if let Some(tx) = request.manifest.take() {
                        let _ = tx.send(Ok(msg));
                    }
                }
                Ok(Said::Failed {
                    request,
                    code,
                    message,
                    retry_after_ms,
                }) => {
                    let e = server_error(&request.name, code, &message, retry_after_ms);
                    request.fail(e);
                }
                Ok(Said::Refused {
                    request,
                    code,
                    message,
                }) => {
                    let e = server_error(&request.name, code, &message, None);
                    let _ = request.deliver.send((Event::Component(Err(e)), None));
                }
                Ok(Said::Done { request, sent }) => {
                    // The server has let the request go: so does its turn
                    // (its last streams may still be read).
                    request.turn = None;
                    // Streams cancelled before they opened never arrive:
                    // `sent` says how many will.
                    let _ = request.deliver.send((Event::Done { sent }, None));
                }
                Ok(Said::Closing { code, message }) => {
                    drop(session);
                    let text = format!(
                        "the server is closing the connection: {code}: {}",
                        quote(&message)
                    );
                    fail_all(&routes, |name| Error::Server {
                        status: Status::Ztp(code),
                        message: format!("{name}: {text}"),
                        retry_after: None,
                    });
                }
                Ok(Said::Nothing) => {}
                Err(v) => {
                    drop(session);
                    return violation(&conn, &routes, &v);
                }
            }
        }
    }
}
