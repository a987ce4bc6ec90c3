//! The server's side of a ztp/1 connection as a state machine without
//! I/O: it takes what arrived on the control stream and says what to do.
//! The QUIC driver (ztserve's `server::quic`) reads frames, hands them
//! here, and carries out the answer; every rule of `PROTOCOL.md` that
//! concerns what a client may send is decided here, and unit-tested here.

use std::collections::{HashMap, HashSet};

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
    /// Resolve the request and answer it: its `error` (after
    /// [`ServerSession::answered`]), or its `manifest` and then either
    /// [`ServerSession::start`] or, for `manifest_only`,
    /// [`ServerSession::answered`] and its `done`.
    Serve(Get),
    /// Answer with this `error` and nothing else for that id.
    Answer(ErrorMsg),
    /// Stop sending the named components of a request in flight.
    Cancel {
        request: R,
        object: Option<String>,
        component: Option<String>,
    },
    /// Nothing to do (a `cancel` for an id not in flight, or one held
    /// until its request starts).
    Nothing,
    /// Close the connection: the client broke the protocol.
    Close(Close),
}

/// Bytes of `cancel`s held for requests whose streams have not started,
/// per connection, each counted as its names plus [`HELD_CANCEL_COST`]
/// (what holding it costs besides). Past it the connection is closed: no
/// honest client names that much of what it has not yet seen a manifest
/// for.
pub const MAX_HELD_CANCEL_BYTES: usize = 64 * 1024;

/// What one held `cancel` is charged besides its names: its place in the
/// set and its strings' allocations.
pub const HELD_CANCEL_COST: usize = 64;

/// The `cancel`s of a request that arrived before its streams started,
/// for the driver to apply once they do ([`ServerSession::start`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// The whole request was cancelled.
    pub all: bool,
    /// Objects (and, where named, one component of each) cancelled.
    pub parts: Vec<(String, Option<String>)>,
}

/// The cancels of a request being answered, each once.
#[derive(Debug, Default)]
struct Holding {
    all: bool,
    parts: HashSet<(String, Option<String>)>,
    /// What they are charged ([`HELD_CANCEL_COST`]).
    bytes: usize,
}

impl Holding {
    fn into_held(self) -> Held {
        let mut parts: Vec<_> = self.parts.into_iter().collect();
        parts.sort();
        Held {
            all: self.all,
            parts,
        }
    }
}

/// A request in flight (PROTOCOL.md section 4: from its `get` until its
/// `done` or `error`).
#[derive(Debug)]
enum Flight<R> {
    /// Being answered: its streams have not started.
    Answering(Holding),
    /// Its component streams are going, cancelled through `R`.
    Started(R),
}

/// The requests of one connection in flight, each whose streams have
/// started with the driver's handle `R` (how to cancel it).
#[derive(Debug)]
pub struct ServerSession<R> {
    requests: HashMap<u64, Flight<R>>,
    max_requests: usize,
    /// What every request's held cancels are charged.
    held_bytes: usize,
}

impl<R: Clone> ServerSession<R> {
    /// A session that serves at most `max_requests` requests at once,
    /// counted from their `get`.
    pub fn new(max_requests: usize) -> Self {
        ServerSession {
            requests: HashMap::new(),
            max_requests,
            held_bytes: 0,
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
            Message::Cancel(c) => self.on_cancel(c),
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
                message: format!(
                    "{}: request {} refused: at most {} requests in flight on a connection",
                    g.path, g.id, self.max_requests
                ),
                retry_after_ms: None,
            });
        }
        self.requests
            .insert(g.id, Flight::Answering(Holding::default()));
        Received::Serve(g)
    }

    fn on_cancel(&mut self, c: Cancel) -> Received<R> {
        let Cancel {
            id,
            object,
            component,
        } = c;
        let held = match self.requests.get_mut(&id) {
            None => return Received::Nothing,
            Some(Flight::Started(request)) => {
                return Received::Cancel {
                    request: request.clone(),
                    object,
                    component,
                }
            }
            Some(Flight::Answering(held)) => held,
        };
        let Some(object) = object else {
            self.held_bytes -= held.bytes;
            *held = Holding {
                all: true,
                ..Holding::default()
            };
            return Received::Nothing;
        };
        let part = (object, component);
        if held.all || held.parts.contains(&part) {
            return Received::Nothing;
        }
        let size = part.0.len() + part.1.as_ref().map_or(0, String::len) + HELD_CANCEL_COST;
        if self.held_bytes + size > MAX_HELD_CANCEL_BYTES {
            return Received::Close(Close::violation(format!(
                "more than {MAX_HELD_CANCEL_BYTES} bytes of cancels held for requests not yet started"
            )));
        }
        self.held_bytes += size;
        held.bytes += size;
        held.parts.insert(part);
        Received::Nothing
    }

    /// Request `id` was answered with its manifest and its component
    /// streams are starting: it is in flight until
    /// [`ServerSession::finish`]. Returns the `cancel`s that came for it
    /// meanwhile, to apply through `request`.
    pub fn start(&mut self, id: u64, request: R) -> Held {
        match self.requests.insert(id, Flight::Started(request)) {
            Some(Flight::Answering(held)) => {
                self.held_bytes -= held.bytes;
                held.into_held()
            }
            _ => Held::default(),
        }
    }

    /// Request `id` was answered without streams (its `error`, or a
    /// `manifest_only` request's `done`, is being sent): its id may be
    /// used again.
    pub fn answered(&mut self, id: u64) {
        self.finish(id);
    }

    /// Request `id`'s `done` went out: its id may be used again.
    pub fn finish(&mut self, id: u64) -> Option<R> {
        match self.requests.remove(&id)? {
            Flight::Started(r) => Some(r),
            Flight::Answering(held) => {
                self.held_bytes -= held.bytes;
                None
            }
        }
    }

    /// Requests in flight, from their `get`.
    pub fn in_flight(&self) -> usize {
        self.requests.len()
    }

    /// Every request whose streams have started, for closing the
    /// connection.
    pub fn requests(&self) -> impl Iterator<Item = &R> {
        self.requests.values().filter_map(|f| match f {
            Flight::Started(r) => Some(r),
            Flight::Answering(_) => None,
        })
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
    fn an_id_is_in_flight_from_its_get_until_answered() {
        // An error answer or a manifest_only answer never starts the
        // request, but until it is sent the id is taken.
        let mut s: ServerSession<&str> = ServerSession::new(1);
        assert!(matches!(s.on_frame(get(7)), Received::Serve(_)));
        assert_eq!(s.in_flight(), 1);
        closes_with(
            s.on_frame(get(7)),
            Code::ProtocolViolation,
            "request id 7 is already in flight",
        );
        s.answered(7);
        assert_eq!(s.in_flight(), 0);
        assert!(matches!(s.on_frame(get(7)), Received::Serve(_)));
    }

    #[test]
    fn requests_being_answered_count_against_the_limit() {
        // However long a request takes to answer (a file still hashing),
        // the limit counts it from its get.
        let mut s: ServerSession<&str> = ServerSession::new(2);
        for id in [1, 2] {
            assert!(matches!(s.on_frame(get(id)), Received::Serve(_)));
        }
        match s.on_frame(get(3)) {
            Received::Answer(e) => assert_eq!(e.code, Code::TooManyRequests),
            other => panic!("{other:?}"),
        }
        s.answered(1);
        assert!(matches!(s.on_frame(get(3)), Received::Serve(_)));
    }

    fn cancel(
        id: u64,
        object: Option<&str>,
        component: Option<&str>,
    ) -> Result<Message, FrameError> {
        Ok(Message::Cancel(Cancel {
            id,
            object: object.map(str::to_owned),
            component: component.map(str::to_owned),
        }))
    }

    #[test]
    fn cancels_before_the_streams_start_are_held_and_handed_over() {
        let mut s = ServerSession::new(4);
        assert!(matches!(s.on_frame(get(1)), Received::Serve(_)));
        assert_eq!(s.on_frame(cancel(1, Some("a"), None)), Received::Nothing);
        assert_eq!(s.on_frame(cancel(1, Some("a"), None)), Received::Nothing);
        assert_eq!(
            s.on_frame(cancel(1, Some("b"), Some("data"))),
            Received::Nothing
        );
        let held = s.start(1, "one");
        assert!(!held.all);
        assert_eq!(
            held.parts,
            [
                ("a".to_owned(), None),
                ("b".to_owned(), Some("data".to_owned()))
            ],
            "each once"
        );
        assert!(matches!(
            s.on_frame(cancel(1, Some("c"), None)),
            Received::Cancel { request: "one", .. }
        ));
        // A cancel of the whole request replaces what was held.
        assert!(matches!(s.on_frame(get(2)), Received::Serve(_)));
        assert_eq!(s.on_frame(cancel(2, Some("a"), None)), Received::Nothing);
        assert_eq!(s.on_frame(cancel(2, None, None)), Received::Nothing);
        assert_eq!(s.on_frame(cancel(2, Some("b"), None)), Received::Nothing);
        assert_eq!(
            s.start(2, "two"),
            Held {
                all: true,
                parts: Vec::new()
            }
        );
        assert_eq!(s.held_bytes, 0);
    }

    #[test]
    fn held_cancels_are_bounded_per_connection() {
        let mut s: ServerSession<&str> = ServerSession::new(4);
        let name = "x".repeat(1000);
        for id in [1, 2] {
            assert!(matches!(s.on_frame(get(id)), Received::Serve(_)));
        }
        let mut n = 0;
        let closed = loop {
            let object = format!("{name}{n}");
            match s.on_frame(cancel(1 + n % 2, Some(&object), None)) {
                Received::Nothing => n += 1,
                other => break other,
            }
        };
        closes_with(closed, Code::ProtocolViolation, "bytes of cancels held");
        assert!(s.held_bytes <= MAX_HELD_CANCEL_BYTES);
        let each = 1004 + HELD_CANCEL_COST;
        assert!(n as usize >= MAX_HELD_CANCEL_BYTES / each - 1, "{n}");
        // Short names are charged for their holding too: a flood of them
        // stops at the same bound.
        assert!(matches!(s.on_frame(get(3)), Received::Serve(_)));
        s.answered(1);
        s.answered(2);
        let mut short = 0usize;
        while let Received::Nothing = s.on_frame(cancel(3, Some(&short.to_string()), None)) {
            short += 1;
        }
        assert!(short <= MAX_HELD_CANCEL_BYTES / HELD_CANCEL_COST, "{short}");
        s.answered(3);
        // Answering a request gives its bytes back.
        assert_eq!(s.held_bytes, 0);
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
        assert!(matches!(s.on_frame(get(5)), Received::Serve(_)));
        s.start(5, "five");
        match s.on_frame(cancel(5, Some("w"), None)) {
            Received::Cancel {
                request, object, ..
            } => assert_eq!((request, object.as_deref()), ("five", Some("w"))),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.on_frame(cancel(6, None, None)), Received::Nothing);
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
            s.answered(1);
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
