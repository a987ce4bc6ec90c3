//! The server's side of a ztp/1 connection as a state machine without
//! I/O: it takes what arrived on the control stream and says what to do.
//! The QUIC driver (ztserve's `server::quic`) reads frames, hands them
//! here, and carries out the answer; every rule of `PROTOCOL.md` that
//! concerns what a client may send is decided here, and unit-tested here.

use std::collections::HashMap;

use crate::code::Code;
use crate::framing::FrameError;
use crate::message::{Cancel, ErrorMsg, Get, Message};

/// Why a connection is being closed, and with which code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Close {
    pub code: Code,
    pub reason: String,
}

impl Close {
    fn violation(reason: String) -> Close {
        Close {
            code: Code::ProtocolViolation,
            reason,
        }
    }
}

/// What the server does with what arrived.
#[derive(Debug, PartialEq, Eq)]
pub enum Received<R> {
    /// Resolve the request and answer it: an `error` for it, or its
    /// `manifest` and then (unless `manifest_only`) [`ServerSession::start`].
    Serve(Get),
    /// Answer with this `error` and nothing else for that id.
    Answer(ErrorMsg),
    /// Stop sending the named components of a request in flight.
    Cancel {
        request: R,
        object: Option<String>,
        component: Option<String>,
    },
    /// Nothing to do (a `cancel` for an id not in flight).
    Nothing,
    /// Close the connection: the client broke the protocol.
    Close(Close),
}

/// The requests of one connection whose component streams are going, each
/// with the driver's handle `R` (how to cancel it).
#[derive(Debug)]
pub struct ServerSession<R> {
    requests: HashMap<u64, R>,
    max_requests: usize,
}

impl<R: Clone> ServerSession<R> {
    /// A session that serves at most `max_requests` requests at once.
    pub fn new(max_requests: usize) -> Self {
        ServerSession {
            requests: HashMap::new(),
            max_requests,
        }
    }

    /// One frame of the control stream, or why it could not be read.
    pub fn on_frame(&mut self, frame: Result<Message, FrameError>) -> Received<R> {
        let msg = match frame {
            Ok(m) => m,
            Err(e @ FrameError::TooLarge { .. }) => {
                return Received::Close(Close {
                    code: Code::MessageTooLarge,
                    reason: e.to_string(),
                })
            }
            Err(e) => return Received::Close(Close::violation(e.to_string())),
        };
        match msg {
            Message::Get(g) => self.on_get(g),
            Message::Cancel(Cancel {
                id,
                object,
                component,
            }) => match self.requests.get(&id) {
                Some(request) => Received::Cancel {
                    request: request.clone(),
                    object,
                    component,
                },
                None => Received::Nothing,
            },
            other => Received::Close(Close::violation(format!(
                "{} is a server message",
                other.kind()
            ))),
        }
    }

    fn on_get(&mut self, g: Get) -> Received<R> {
        if self.requests.contains_key(&g.id) {
            return Received::Close(Close::violation(format!(
                "request id {} is already in flight",
                g.id
            )));
        }
        if let Some((index, count)) = g.share {
            if count == 0 || count > crate::MAX_SHARES || index >= count {
                return Received::Close(Close::violation(format!(
                    "request {}: share [{index}, {count}] is not [index, count] with 0 <= index < count <= {}",
                    g.id,
                    crate::MAX_SHARES
                )));
            }
        }
        if self.requests.len() >= self.max_requests {
            return Received::Answer(ErrorMsg {
                id: Some(g.id),
                code: Code::TooManyRequests,
                message: format!("at most {} requests in flight", self.max_requests),
            });
        }
        Received::Serve(g)
    }

    /// Request `id` was answered with its manifest and its component
    /// streams are starting: it is in flight until [`ServerSession::finish`].
    pub fn start(&mut self, id: u64, request: R) {
        self.requests.insert(id, request);
    }

    /// Request `id`'s `done` went out: its id may be used again.
    pub fn finish(&mut self, id: u64) -> Option<R> {
        self.requests.remove(&id)
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.requests.len()
    }

    /// Every request in flight, for closing the connection.
    pub fn requests(&self) -> impl Iterator<Item = &R> {
        self.requests.values()
    }

    /// The code a component stream is reset with after the client's
    /// STOP_SENDING, whatever code the client sent: `cancelled`.
    pub fn stop_sending_reset(_client_code: u64) -> Code {
        Code::Cancelled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(id: u64) -> Result<Message, FrameError> {
        Ok(Message::Get(Get {
            id,
            path: "m.zt".into(),
            ..Get::default()
        }))
    }

    fn closes_with(r: Received<&str>, code: Code, says: &str) {
        match r {
            Received::Close(c) => {
                assert_eq!(c.code, code);
                assert!(c.reason.contains(says), "{:?}", c.reason);
            }
            other => panic!("expected a close, got {other:?}"),
        }
    }

    #[test]
    fn a_get_is_served_and_its_id_is_busy_until_done() {
        let mut s = ServerSession::new(4);
        assert!(matches!(s.on_frame(get(1)), Received::Serve(g) if g.id == 1));
        s.start(1, "one");
        closes_with(
            s.on_frame(get(1)),
            Code::ProtocolViolation,
            "request id 1 is already in flight",
        );
        assert_eq!(s.finish(1), Some("one"));
        assert!(
            matches!(s.on_frame(get(1)), Received::Serve(_)),
            "free again after done"
        );
    }

    #[test]
    fn an_id_answered_without_streams_is_never_busy() {
        // An error answer or a manifest_only answer never starts the request.
        let mut s: ServerSession<&str> = ServerSession::new(1);
        assert!(matches!(s.on_frame(get(7)), Received::Serve(_)));
        assert!(matches!(s.on_frame(get(7)), Received::Serve(_)));
        assert_eq!(s.in_flight(), 0);
    }

    #[test]
    fn requests_past_the_limit_are_answered_not_punished() {
        let mut s = ServerSession::new(2);
        for id in [1, 2] {
            assert!(matches!(s.on_frame(get(id)), Received::Serve(_)));
            s.start(id, "r");
        }
        match s.on_frame(get(3)) {
            Received::Answer(e) => {
                assert_eq!((e.id, e.code), (Some(3), Code::TooManyRequests));
            }
            other => panic!("{other:?}"),
        }
        s.finish(1);
        assert!(matches!(s.on_frame(get(3)), Received::Serve(_)));
    }

    #[test]
    fn cancel_reaches_a_request_in_flight_and_nothing_else() {
        let mut s = ServerSession::new(4);
        s.start(5, "five");
        let cancel = |id, object: Option<&str>| {
            Ok(Message::Cancel(Cancel {
                id,
                object: object.map(str::to_owned),
                component: None,
            }))
        };
        match s.on_frame(cancel(5, Some("w"))) {
            Received::Cancel {
                request, object, ..
            } => assert_eq!((request, object.as_deref()), ("five", Some("w"))),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.on_frame(cancel(6, None)), Received::Nothing);
    }

    #[test]
    fn server_messages_and_bad_frames_close_the_connection() {
        let mut s: ServerSession<&str> = ServerSession::new(4);
        let done = Ok(Message::Done(crate::Done {
            id: 1,
            sent: 0,
            cancelled: 0,
        }));
        closes_with(
            s.on_frame(done),
            Code::ProtocolViolation,
            "done is a server message",
        );
        closes_with(
            s.on_frame(Err(FrameError::TooLarge {
                size: 1 << 20,
                limit: 1 << 16,
            })),
            Code::MessageTooLarge,
            "",
        );
        closes_with(
            s.on_frame(Err(FrameError::Empty)),
            Code::ProtocolViolation,
            "",
        );
    }

    #[test]
    fn a_share_outside_its_count_closes_the_connection() {
        let mut s: ServerSession<&str> = ServerSession::new(4);
        let share = |id, share| {
            Ok(Message::Get(Get {
                id,
                path: "m.zt".into(),
                share: Some(share),
                ..Get::default()
            }))
        };
        for ok in [(0, 1), (3, 4), (63, crate::MAX_SHARES)] {
            assert!(
                matches!(s.on_frame(share(1, ok)), Received::Serve(_)),
                "{ok:?}"
            );
        }
        for bad in [(0, 0), (4, 4), (9, 2), (0, crate::MAX_SHARES + 1)] {
            closes_with(
                s.on_frame(share(2, bad)),
                Code::ProtocolViolation,
                &format!("request 2: share [{}, {}]", bad.0, bad.1),
            );
        }
    }

    #[test]
    fn stop_sending_is_answered_with_cancelled_whatever_its_code() {
        for code in [0, 0x09, 0x17, 0x42, u64::MAX] {
            assert_eq!(
                ServerSession::<()>::stop_sending_reset(code),
                Code::Cancelled
            );
        }
    }
}
