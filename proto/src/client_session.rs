//! The client's side of a ztp/1 connection as a state machine without
//! I/O: it hands out request ids, and judges every server message and
//! component header against the requests it made. The QUIC driver
//! (`zt-client`'s `quic` module) carries out what it decides; the rules of
//! `PROTOCOL.md` about what a server may send are decided here, and
//! unit-tested here.

use std::collections::HashMap;

use crate::code::Code;
use crate::framing::FrameError;
use crate::message::{ComponentHeader, Done, ErrorMsg, Get, ManifestMsg, Message};

/// The server broke the protocol: the connection is closed with
/// `protocol_violation`, and every request on it fails with this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the server broke ztp/1: {0}")]
pub struct Violation(pub String);

/// What a server message means for the requests.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'s, R> {
    /// A request's manifest: its component streams follow.
    Manifest {
        request: &'s mut R,
        msg: ManifestMsg,
    },
    /// A request failed before its manifest, with the server's code and
    /// message; nothing else comes for it.
    Failed {
        request: R,
        code: Code,
        message: String,
    },
    /// After its manifest, one of a request's components failed on the
    /// server (`corrupt`, `read_failed`); the request goes on to its `done`.
    Refused {
        request: &'s mut R,
        code: Code,
        message: String,
    },
    /// Every component stream of a request ended; `sent` went out whole.
    Done { request: R, sent: u64 },
    /// The server is about to close the connection, for this reason.
    Closing { code: Code, message: String },
    /// An answer for a request the client has already given up.
    Nothing,
}

#[derive(Debug)]
struct Request<R> {
    handle: R,
    /// `streams` from the manifest, once it came.
    streams: Option<u64>,
}

/// The requests in flight on one connection, each with the driver's
/// handle `R` (where its manifest and components go).
#[derive(Debug)]
pub struct ClientSession<R> {
    next_id: u64,
    requests: HashMap<u64, Request<R>>,
    /// Ids the client gave up: their answers are dropped, not violations,
    /// until the `done` or `error` that ends them.
    abandoned: std::collections::HashSet<u64>,
    features: Option<Vec<String>>,
}

impl<R> Default for ClientSession<R> {
    fn default() -> Self {
        ClientSession {
            next_id: 1,
            requests: HashMap::new(),
            abandoned: std::collections::HashSet::new(),
            features: None,
        }
    }
}

impl<R> ClientSession<R> {
    /// A new request: `get` with a fresh id, which is in flight from now
    /// until its `done` or `error`.
    pub fn request(&mut self, mut get: Get, handle: R) -> Get {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        get.id = id;
        self.requests.insert(
            id,
            Request {
                handle,
                streams: None,
            },
        );
        get
    }

    /// The caller no longer waits for request `id`; what still arrives
    /// for it is dropped.
    pub fn abandon(&mut self, id: u64) -> Option<R> {
        let r = self.requests.remove(&id)?;
        self.abandoned.insert(id);
        Some(r.handle)
    }

    /// The handle of request `id`, while it is in flight.
    pub fn get(&self, id: u64) -> Option<&R> {
        self.requests.get(&id).map(|r| &r.handle)
    }

    /// Every request in flight, for failing them all when the connection
    /// ends; the session is empty afterwards.
    pub fn drain(&mut self) -> impl Iterator<Item = R> + '_ {
        self.requests.drain().map(|(_, r)| r.handle)
    }

    /// What the server supports beyond the base protocol, once a manifest
    /// has said it (`None` before the first manifest).
    pub fn features(&self) -> Option<&[String]> {
        self.features.as_deref()
    }

    /// One frame of the control stream, or why it could not be read.
    pub fn on_frame(
        &mut self,
        frame: Result<Message, FrameError>,
    ) -> Result<Event<'_, R>, Violation> {
        let msg = frame.map_err(|e| Violation(format!("malformed message: {e}")))?;
        match msg {
            Message::Manifest(m) => self.on_manifest(m),
            Message::Error(ErrorMsg {
                id: None,
                code,
                message,
            }) => Ok(Event::Closing { code, message }),
            Message::Error(ErrorMsg {
                id: Some(id),
                code,
                message,
            }) => match self.requests.get(&id).map(|r| r.streams.is_some()) {
                Some(true) => match self.requests.get_mut(&id) {
                    Some(r) => Ok(Event::Refused {
                        request: &mut r.handle,
                        code,
                        message,
                    }),
                    None => Ok(Event::Nothing),
                },
                Some(false) => match self.requests.remove(&id) {
                    Some(r) => Ok(Event::Failed {
                        request: r.handle,
                        code,
                        message,
                    }),
                    None => Ok(Event::Nothing),
                },
                None => self.unknown(id, "error"),
            },
            Message::Done(Done { id, sent, .. }) => match self.requests.remove(&id) {
                Some(r) if r.streams.is_some() => Ok(Event::Done {
                    request: r.handle,
                    sent,
                }),
                Some(_) => Err(Violation(format!(
                    "a `done` for request {id} before its manifest"
                ))),
                None => self.unknown(id, "done"),
            },
            other @ (Message::Get(_) | Message::Cancel(_)) => Err(Violation(format!(
                "a `{}` (a client's message) on the control stream",
                other.kind()
            ))),
        }
    }

    fn on_manifest(&mut self, m: ManifestMsg) -> Result<Event<'_, R>, Violation> {
        let id = m.id;
        if self.abandoned.contains(&id) {
            return Ok(Event::Nothing);
        }
        let Some(r) = self.requests.get_mut(&id) else {
            return Err(Violation(format!(
                "a manifest for request {id}, which was never made"
            )));
        };
        if r.streams.is_some() {
            return Err(Violation(format!("a second manifest for request {id}")));
        }
        r.streams = Some(m.streams);
        if self.features.is_none() {
            self.features = Some(m.features.clone());
        }
        Ok(Event::Manifest {
            request: &mut r.handle,
            msg: m,
        })
    }

    /// A `done` or `error` for an id not in flight: the last word on a
    /// request the client gave up (forgotten now), or a violation.
    fn unknown(&mut self, id: u64, what: &str) -> Result<Event<'_, R>, Violation> {
        if self.abandoned.remove(&id) {
            Ok(Event::Nothing)
        } else {
            Err(Violation(format!(
                "a `{what}` for request {id}, which is not in flight"
            )))
        }
    }

    /// The header of a component stream: the handle of its request, or the
    /// violation it is. `None`: the request was abandoned, drop the stream.
    pub fn on_header(&self, h: &ComponentHeader) -> Result<Option<&R>, Violation> {
        match self.requests.get(&h.id) {
            Some(r) => match r.streams {
                Some(n) if h.seq >= n => Err(Violation(format!(
                    "component stream {} of request {}, which announced {n} (object {:?}, component {:?})",
                    h.seq, h.id, h.object, h.component
                ))),
                _ => Ok(Some(&r.handle)),
            },
            None if self.abandoned.contains(&h.id) => Ok(None),
            None => Err(Violation(format!(
                "a component stream for request {}, which was never made (object {:?}, component {:?})",
                h.id, h.object, h.component
            ))),
        }
    }

    /// A component stream whose header could not be read.
    pub fn on_bad_header(e: &FrameError) -> Violation {
        Violation(format!("malformed component header: {e}"))
    }

    /// A component stream that ended inside its header, after `buffered`
    /// bytes. (One reset before its header is not a violation: the server
    /// cancelled it as it opened, and `done` counts it.)
    pub fn on_truncated_header(buffered: usize) -> Violation {
        Violation(format!(
            "a component stream ended inside its header ({buffered} bytes)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> (ClientSession<&'static str>, u64) {
        let mut s = ClientSession::default();
        let g = s.request(
            Get {
                path: "m.zt".into(),
                ..Get::default()
            },
            "first",
        );
        (s, g.id)
    }

    fn manifest(id: u64, streams: u64) -> Result<Message, FrameError> {
        Ok(Message::Manifest(ManifestMsg {
            id,
            etag: "\"e\"".into(),
            size: 10,
            manifest: vec![0xa0],
            streams,
            features: vec!["rows".into()],
        }))
    }

    fn header(id: u64, seq: u64) -> ComponentHeader {
        ComponentHeader {
            id,
            object: "w".into(),
            component: "data".into(),
            seq,
            dtype: "u8".into(),
            logical_type: None,
            encoding: "raw".into(),
            length: 1,
            uncompressed_length: None,
            digest: None,
            offset: 8,
        }
    }

    fn violation<T: std::fmt::Debug>(r: Result<T, Violation>, says: &str) {
        match r {
            Err(Violation(why)) => assert!(why.contains(says), "{why:?}"),
            Ok(x) => panic!("expected a violation saying {says:?}, got {x:?}"),
        }
    }

    #[test]
    fn ids_are_fresh_and_requests_live_until_done() {
        let (mut s, id) = session();
        let second = s.request(Get::default(), "second");
        assert_ne!(id, second.id);
        assert!(matches!(
            s.on_frame(manifest(id, 2)),
            Ok(Event::Manifest { request, msg }) if *request == "first" && msg.streams == 2
        ));
        assert_eq!(s.features(), Some(&["rows".to_owned()][..]));
        assert_eq!(s.on_header(&header(id, 1)).unwrap(), Some(&"first"));
        let done = Ok(Message::Done(Done {
            id,
            sent: 2,
            cancelled: 0,
        }));
        assert_eq!(
            s.on_frame(done).unwrap(),
            Event::Done {
                request: "first",
                sent: 2
            }
        );
        violation(s.on_header(&header(id, 0)), "which was never made");
    }

    #[test]
    fn a_component_stream_must_belong_to_a_request_and_fit_its_count() {
        let (mut s, id) = session();
        violation(s.on_header(&header(id + 7, 0)), "which was never made");
        // Before its manifest is read, a stream of a known request is fine
        // (the two arrive on different streams and may be read in either order).
        assert!(s.on_header(&header(id, 5)).is_ok());
        s.on_frame(manifest(id, 2)).unwrap();
        violation(s.on_header(&header(id, 2)), "which announced 2");
    }

    #[test]
    fn the_server_may_not_speak_out_of_turn() {
        let (mut s, id) = session();
        violation(s.on_frame(manifest(id + 1, 0)), "never made");
        s.on_frame(manifest(id, 1)).unwrap();
        violation(s.on_frame(manifest(id, 1)), "a second manifest");
        let get = Ok(Message::Get(Get::default()));
        violation(s.on_frame(get), "a `get` (a client's message)");
        violation(s.on_frame(Err(FrameError::Empty)), "malformed message");
        let mut s2 = ClientSession::default();
        let g = s2.request(Get::default(), ());
        let done = Ok(Message::Done(Done {
            id: g.id,
            sent: 0,
            cancelled: 0,
        }));
        violation(s2.on_frame(done), "before its manifest");
        let stray = Ok(Message::Done(Done {
            id: 99,
            sent: 0,
            cancelled: 0,
        }));
        violation(s2.on_frame(stray), "not in flight");
        assert!(ClientSession::<()>::on_bad_header(&FrameError::Empty)
            .0
            .contains("malformed component header"));
        assert!(ClientSession::<()>::on_truncated_header(3)
            .0
            .contains("3 bytes"));
    }

    #[test]
    fn an_error_after_the_manifest_fails_a_component_not_the_request() {
        let (mut s, id) = session();
        s.on_frame(manifest(id, 2)).unwrap();
        let corrupt = Ok(Message::Error(ErrorMsg {
            id: Some(id),
            code: Code::Corrupt,
            message: "object \"w\": digest mismatch".into(),
        }));
        assert!(matches!(
            s.on_frame(corrupt),
            Ok(Event::Refused {
                code: Code::Corrupt,
                ..
            })
        ));
        assert!(
            s.on_header(&header(id, 1)).is_ok(),
            "its other streams go on"
        );
        let done = Ok(Message::Done(Done {
            id,
            sent: 1,
            cancelled: 1,
        }));
        assert!(matches!(s.on_frame(done), Ok(Event::Done { sent: 1, .. })));
    }

    #[test]
    fn errors_fail_one_request_or_announce_the_close() {
        let (mut s, id) = session();
        let err = |id| {
            Ok(Message::Error(ErrorMsg {
                id,
                code: Code::NotFound,
                message: "no file".into(),
            }))
        };
        assert_eq!(
            s.on_frame(err(Some(id))).unwrap(),
            Event::Failed {
                request: "first",
                code: Code::NotFound,
                message: "no file".into()
            }
        );
        violation(s.on_frame(err(Some(id))), "not in flight");
        assert_eq!(
            s.on_frame(err(None)).unwrap(),
            Event::Closing {
                code: Code::NotFound,
                message: "no file".into()
            }
        );
    }

    #[test]
    fn answers_for_abandoned_requests_are_dropped() {
        let (mut s, id) = session();
        assert_eq!(s.abandon(id), Some("first"));
        assert_eq!(s.on_frame(manifest(id, 1)).unwrap(), Event::Nothing);
        assert_eq!(s.on_header(&header(id, 0)).unwrap(), None);
        let done = Ok(Message::Done(Done {
            id,
            sent: 1,
            cancelled: 0,
        }));
        assert_eq!(s.on_frame(done).unwrap(), Event::Nothing);
        assert_eq!(s.drain().count(), 0);
    }
}
