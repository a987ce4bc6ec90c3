//! The client's side of a ztp/1 connection as a state machine without
//! I/O: it hands out request ids, and judges every server message and
//! component header against the requests it made. The QUIC driver
//! (`zt-client`'s `quic` module) carries out what it decides; the rules of
//! `PROTOCOL.md` about what a server may send are decided here, and
//! unit-tested here.

use std::collections::BTreeMap;

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
        /// The server's word that the refusal is passing: the request may
        /// be sent again after this many milliseconds.
        retry_after_ms: Option<u64>,
    },
    /// After its manifest, one of a request's components failed on the
    /// server (`corrupt`, `read_failed`); the request goes on to its `done`.
    Refused {
        request: &'s mut R,
        code: Code,
        message: String,
    },
    /// Every component stream of a request ended on the server; `sent` went
    /// out whole. The request stays routable: `done` can overtake the
    /// headers of its last streams (the server counts a stream done once
    /// the client's transport acknowledged it, before the client has read
    /// it), so it lives until the caller [`forget`](ClientSession::forget)s it.
    Done { request: &'s mut R, sent: u64 },
    /// The server is about to close the connection, for this reason.
    Closing { code: Code, message: String },
    /// An answer for a request the client has already given up.
    Nothing,
}

#[derive(Debug)]
struct Request<R> {
    /// The driver's handle; `None` once the caller forgot the request while
    /// streams or messages may still come for it.
    handle: Option<R>,
    /// `streams` from the manifest, once it came.
    streams: Option<u64>,
    /// Component headers seen.
    headers: u64,
    /// The request's `share` (`[0, 1]` without one): its streams' `seq`s
    /// are `index`, `index + count`, ...
    share: (u64, u64),
    /// Its `done` came: no more control messages for it.
    done: bool,
}

impl<R> Request<R> {
    /// Nothing more can arrive for it: done, and every announced stream's
    /// header seen (a stream reset before its header never shows one, so a
    /// forgotten request with such a stream is kept, handle dropped, until
    /// [`GHOSTS`] newer ones push it out).
    fn complete(&self) -> bool {
        self.done && self.headers >= self.streams.unwrap_or(0)
    }
}

/// Forgotten requests remembered at most (so that a late stream of one is
/// dropped rather than taken for a violation).
const GHOSTS: usize = 1024;

/// The requests of one connection, each with the driver's handle `R`
/// (where its manifest and components go), from `get` until the caller
/// forgets it.
#[derive(Debug)]
pub struct ClientSession<R> {
    next_id: u64,
    requests: BTreeMap<u64, Request<R>>,
    features: Option<Vec<String>>,
}

impl<R> Default for ClientSession<R> {
    fn default() -> Self {
        ClientSession {
            next_id: 1,
            requests: BTreeMap::new(),
            features: None,
        }
    }
}

impl<R> ClientSession<R> {
    /// A new request: `get` with a fresh id. It is routable from now until
    /// the caller [`forget`](Self::forget)s it, or the server refuses it.
    pub fn request(&mut self, mut get: Get, handle: R) -> Get {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        get.id = id;
        self.requests.insert(
            id,
            Request {
                handle: Some(handle),
                streams: None,
                headers: 0,
                share: get.share.unwrap_or((0, 1)),
                done: false,
            },
        );
        get
    }

    /// The caller is finished with request `id` (it took what it wanted, or
    /// gave up): its handle is dropped. Until nothing more can arrive for
    /// it, what does is dropped rather than taken for a violation.
    pub fn forget(&mut self, id: u64) -> Option<R> {
        let r = self.requests.get_mut(&id)?;
        let handle = r.handle.take();
        if r.complete() {
            self.requests.remove(&id);
        }
        let ghosts: Vec<u64> = self
            .requests
            .iter()
            .filter(|(_, r)| r.handle.is_none())
            .map(|(id, _)| *id)
            .collect();
        for old in ghosts.iter().take(ghosts.len().saturating_sub(GHOSTS)) {
            self.requests.remove(old);
        }
        handle
    }

    /// The handle of request `id`, while the caller has not forgotten it.
    pub fn get(&self, id: u64) -> Option<&R> {
        self.requests.get(&id).and_then(|r| r.handle.as_ref())
    }

    /// Every request's handle, for failing them all when the connection
    /// ends; the session is empty afterwards.
    pub fn drain(&mut self) -> impl Iterator<Item = R> + '_ {
        std::mem::take(&mut self.requests)
            .into_values()
            .filter_map(|r| r.handle)
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
            Message::Error(e) => match e.id {
                None => Ok(Event::Closing {
                    code: e.code,
                    message: e.message,
                }),
                Some(id) => self.on_error(id, e),
            },
            Message::Done(Done { id, sent, .. }) => self.on_done(id, sent),
            other @ (Message::Get(_) | Message::Cancel(_)) => Err(Violation(format!(
                "a `{}` (a client's message) on the control stream",
                other.kind()
            ))),
        }
    }

    fn on_manifest(&mut self, m: ManifestMsg) -> Result<Event<'_, R>, Violation> {
        let id = m.id;
        let Some(r) = self.requests.get_mut(&id) else {
            return Err(Violation(format!(
                "a manifest for request {id}, which was never made"
            )));
        };
        if r.streams.is_some() {
            return Err(Violation(format!("a second manifest for request {id}")));
        }
        r.streams = Some(m.streams);
        // A server without the feature ignored the share and sends the
        // whole selection (PROTOCOL.md, "Features").
        if !m.features.iter().any(|f| f == crate::FEATURE_SHARES) {
            r.share = (0, 1);
        }
        if self.features.is_none() {
            self.features = Some(m.features.clone());
        }
        match r.handle.as_mut() {
            Some(request) => Ok(Event::Manifest { request, msg: m }),
            None => Ok(Event::Nothing),
        }
    }

    /// `error` for request `id`: before its manifest the request failed
    /// (and is gone); after it, one of its components did.
    fn on_error(&mut self, id: u64, e: ErrorMsg) -> Result<Event<'_, R>, Violation> {
        let ErrorMsg {
            code,
            message,
            retry_after_ms,
            ..
        } = e;
        let (done, manifest) = match self.requests.get(&id) {
            Some(r) => (r.done, r.streams.is_some()),
            None => {
                return Err(Violation(format!(
                    "an `error` for request {id}, which is not in flight"
                )))
            }
        };
        if done {
            return Err(Violation(format!(
                "an `error` for request {id} after its `done`"
            )));
        }
        if manifest {
            return Ok(
                match self.requests.get_mut(&id).and_then(|r| r.handle.as_mut()) {
                    Some(request) => Event::Refused {
                        request,
                        code,
                        message,
                    },
                    None => Event::Nothing,
                },
            );
        }
        Ok(match self.requests.remove(&id).and_then(|r| r.handle) {
            Some(request) => Event::Failed {
                request,
                code,
                message,
                retry_after_ms,
            },
            None => Event::Nothing,
        })
    }

    fn on_done(&mut self, id: u64, sent: u64) -> Result<Event<'_, R>, Violation> {
        let (forgotten, complete) = match self.requests.get_mut(&id) {
            None => {
                return Err(Violation(format!(
                    "a `done` for request {id}, which is not in flight"
                )))
            }
            Some(r) if r.done => {
                return Err(Violation(format!("a second `done` for request {id}")))
            }
            Some(r) if r.streams.is_none() => {
                return Err(Violation(format!(
                    "a `done` for request {id} before its manifest"
                )))
            }
            Some(r) => {
                r.done = true;
                (r.handle.is_none(), r.complete())
            }
        };
        if forgotten && complete {
            self.requests.remove(&id);
        }
        Ok(
            match self.requests.get_mut(&id).and_then(|r| r.handle.as_mut()) {
                Some(request) => Event::Done { request, sent },
                None => Event::Nothing,
            },
        )
    }

    /// The header of a component stream: the handle of its request, or the
    /// violation it is. `None`: the caller forgot the request; drop the
    /// stream.
    pub fn on_header(&mut self, h: &ComponentHeader) -> Result<Option<&R>, Violation> {
        let Some(r) = self.requests.get_mut(&h.id) else {
            return Err(Violation(format!(
                "a component stream for request {}, which was never made (object {:?}, component {:?})",
                h.id, h.object, h.component
            )));
        };
        if let Some(n) = r.streams {
            // A share's streams are its own pick of the request's
            // positions (ztp_proto::share): only their number is known.
            let whole = r.share.1 <= 1;
            if (whole && h.seq >= n) || r.headers >= n {
                let (index, count) = r.share;
                let of = if whole {
                    String::new()
                } else {
                    format!(" (share {index} of {count})")
                };
                return Err(Violation(format!(
                    "component stream {} of request {}{of}, which announced {n} (object {:?}, component {:?})",
                    h.seq, h.id, h.object, h.component
                )));
            }
        }
        r.headers = r.headers.saturating_add(1);
        if r.handle.is_none() && r.complete() {
            self.requests.remove(&h.id);
            return Ok(None);
        }
        Ok(self.requests.get(&h.id).and_then(|r| r.handle.as_ref()))
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
        offering(id, streams, &["rows"])
    }

    fn offering(id: u64, streams: u64, features: &[&str]) -> Result<Message, FrameError> {
        Ok(Message::Manifest(ManifestMsg {
            id,
            etag: "\"e\"".into(),
            size: 10,
            manifest: vec![0xa0].into(),
            streams,
            features: features.iter().map(|f| (*f).to_owned()).collect(),
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

    fn done(id: u64, sent: u64) -> Result<Message, FrameError> {
        Ok(Message::Done(Done {
            id,
            sent,
            cancelled: 0,
        }))
    }

    #[test]
    fn ids_are_fresh_and_requests_live_until_forgotten() {
        let (mut s, id) = session();
        let second = s.request(Get::default(), "second");
        assert_ne!(id, second.id);
        assert!(matches!(
            s.on_frame(manifest(id, 2)),
            Ok(Event::Manifest { request, msg }) if *request == "first" && msg.streams == 2
        ));
        assert_eq!(s.features(), Some(&["rows".to_owned()][..]));
        assert_eq!(s.on_header(&header(id, 1)).unwrap(), Some(&"first"));
        assert!(matches!(
            s.on_frame(done(id, 2)),
            Ok(Event::Done { request, sent: 2 }) if *request == "first"
        ));
        violation(s.on_frame(done(id, 2)), "a second `done`");
        assert_eq!(s.forget(id), Some("first"));
        assert_eq!(s.get(id), None);
        assert_eq!(s.get(second.id), Some(&"second"));
    }

    /// The server counts a stream done once the client's transport has
    /// acknowledged it, so `done` can overtake the header of the last
    /// stream (a 66-component fetch once failed this way): that stream
    /// still reaches its request.
    #[test]
    fn a_header_read_after_done_still_reaches_its_request() {
        let (mut s, id) = session();
        s.on_frame(manifest(id, 2)).unwrap();
        assert!(s.on_header(&header(id, 0)).unwrap().is_some());
        assert!(matches!(s.on_frame(done(id, 2)), Ok(Event::Done { .. })));
        assert_eq!(s.on_header(&header(id, 1)).unwrap(), Some(&"first"));
        violation(s.on_header(&header(id, 1)), "which announced 2");
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
    fn a_share_takes_as_many_streams_as_it_announced() {
        let mut s = ClientSession::default();
        let share = |index| Get {
            path: "m.zt".into(),
            share: Some((index, 3)),
            ..Get::default()
        };
        // Its positions are the server's pick: any two, then no more.
        let id = s.request(share(1), "one").id;
        s.on_frame(offering(id, 2, &["shares"])).unwrap();
        assert_eq!(s.on_header(&header(id, 9)).unwrap(), Some(&"one"));
        assert_eq!(s.on_header(&header(id, 1)).unwrap(), Some(&"one"));
        violation(
            s.on_header(&header(id, 4)),
            "(share 1 of 3), which announced 2",
        );
        // A share with nothing in it takes no stream.
        let empty = s.request(share(2), "none").id;
        s.on_frame(offering(empty, 0, &["shares"])).unwrap();
        violation(s.on_header(&header(empty, 2)), "which announced 0");
        // A server without the feature sends the whole selection, whose
        // positions are bounded by their number.
        let whole = s.request(share(1), "whole").id;
        s.on_frame(manifest(whole, 3)).unwrap();
        for seq in [0, 1, 2] {
            assert_eq!(s.on_header(&header(whole, seq)).unwrap(), Some(&"whole"));
        }
        let again = s.request(share(1), "again").id;
        s.on_frame(manifest(again, 3)).unwrap();
        violation(s.on_header(&header(again, 3)), "component stream 3");
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
            retry_after_ms: None,
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
                retry_after_ms: None,
            }))
        };
        assert_eq!(
            s.on_frame(err(Some(id))).unwrap(),
            Event::Failed {
                request: "first",
                code: Code::NotFound,
                message: "no file".into(),
                retry_after_ms: None,
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
    fn answers_for_forgotten_requests_are_dropped_until_nothing_more_can_come() {
        let (mut s, id) = session();
        assert_eq!(s.forget(id), Some("first"));
        assert_eq!(s.on_frame(manifest(id, 2)).unwrap(), Event::Nothing);
        assert_eq!(s.on_header(&header(id, 0)).unwrap(), None);
        assert_eq!(s.on_frame(done(id, 2)).unwrap(), Event::Nothing);
        // Its last stream may still come; after it, nothing can.
        assert_eq!(s.on_header(&header(id, 1)).unwrap(), None);
        violation(s.on_header(&header(id, 1)), "never made");
        assert_eq!(s.drain().count(), 0);
    }

    #[test]
    fn forgotten_requests_are_remembered_within_a_bound() {
        let mut s = ClientSession::default();
        for _ in 0..GHOSTS + 10 {
            let g = s.request(Get::default(), ());
            s.on_frame(manifest(g.id, 1)).unwrap();
            // A stream reset before its header never shows one.
            s.on_frame(done(g.id, 0)).unwrap();
            s.forget(g.id);
        }
        assert_eq!(s.requests.len(), GHOSTS);
    }
}
