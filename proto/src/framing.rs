//! Framing: every message and every component header is a 4-byte
//! big-endian length followed by that many bytes of one CBOR map.

use bytes::Bytes;
use ciborium::Value;

use crate::message::{manifest_value, ComponentHeader, Message};
use crate::value::FieldError;

/// The largest message a server accepts from a client (64 KiB).
pub const MAX_CLIENT_MESSAGE: usize = 64 * 1024;

/// Nesting allowed inside a message; messages nest at most 2 levels.
const MAX_DEPTH: usize = 16;

/// Why bytes could not be read as a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    #[error("frame of {size} bytes exceeds the limit of {limit}")]
    TooLarge { size: u64, limit: usize },
    #[error("empty frame")]
    Empty,
    #[error("frame is not one CBOR item: {0}")]
    Cbor(String),
    #[error("{0}")]
    Field(#[from] FieldError),
}

/// The length prefix and the CBOR body in one buffer: the body is
/// written after a placeholder that its length then replaces.
fn encode(v: &Value) -> Result<Vec<u8>, FrameError> {
    let mut out = vec![0u8; 4];
    ciborium::ser::into_writer(v, &mut out).map_err(|e| FrameError::Cbor(e.to_string()))?;
    let body = out.len().saturating_sub(4);
    set_prefix(&mut out, body)?;
    Ok(out)
}

/// Writes `body` (the length of what follows the prefix) into the first
/// four bytes of `frame`.
fn set_prefix(frame: &mut [u8], body: usize) -> Result<(), FrameError> {
    let len = u32::try_from(body).map_err(|_| FrameError::TooLarge {
        size: body as u64,
        limit: u32::MAX as usize,
    })?;
    if let Some(prefix) = frame.get_mut(..4) {
        prefix.copy_from_slice(&len.to_be_bytes());
    }
    Ok(())
}

/// A message, framed.
pub fn frame(m: &Message) -> Result<Vec<u8>, FrameError> {
    encode(&m.to_value())
}

/// A message, framed, in two pieces to be sent one after the other: for a
/// `manifest` message, everything but its manifest's bytes, then those
/// bytes as they are, shared and not copied (a 10,000-object manifest is
/// 1.3 MB); for any other message, its frame and nothing.
pub fn frame_chunks(m: Message) -> Result<[Bytes; 2], FrameError> {
    let Message::Manifest(mut m) = m else {
        return Ok([Bytes::from(frame(&m)?), Bytes::new()]);
    };
    let manifest = std::mem::take(&mut m.manifest);
    // The message with an empty manifest, which comes last: its head
    // (0x40, a byte string of length 0) is replaced by the real one.
    let mut head = encode(&manifest_value(&m, Vec::new()))?;
    if head.pop() != Some(0x40) {
        return Err(FrameError::Cbor("the manifest is not last".to_owned()));
    }
    byte_string_head(&mut head, manifest.len())?;
    let body = head.len().saturating_sub(4).saturating_add(manifest.len());
    set_prefix(&mut head, body)?;
    Ok([Bytes::from(head), manifest])
}

/// Appends the CBOR head of a byte string of `len` bytes (major type 2,
/// the shortest form).
fn byte_string_head(out: &mut Vec<u8>, len: usize) -> Result<(), FrameError> {
    ciborium_ll::Encoder::from(out)
        .push(ciborium_ll::Header::Bytes(Some(len)))
        .map_err(|e| FrameError::Cbor(e.to_string()))
}

/// A component header, framed.
pub fn frame_header(h: &ComponentHeader) -> Result<Vec<u8>, FrameError> {
    encode(&h.to_value())
}

fn decode_value(body: &[u8]) -> Result<Value, FrameError> {
    let mut r = body;
    let v: Value = ciborium::de::from_reader_with_recursion_limit(&mut r, MAX_DEPTH)
        .map_err(|e| FrameError::Cbor(format!("{e:?}")))?;
    if !r.is_empty() {
        return Err(FrameError::Cbor(format!("{} trailing bytes", r.len())));
    }
    Ok(v)
}

/// Reassembles frames from bytes as they arrive.
#[derive(Debug)]
pub struct Deframer {
    buf: Vec<u8>,
    limit: usize,
}

impl Deframer {
    /// A deframer refusing frames larger than `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Deframer {
            buf: Vec::new(),
            limit,
        }
    }

    /// Appends received bytes.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Bytes received but not yet consumed.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The length of the next frame's body if the whole frame is
    /// buffered. Refuses an oversized frame as soon as its length is
    /// known, before buffering it.
    fn complete(&self) -> Result<Option<usize>, FrameError> {
        let Some(len) = self.buf.get(..4) else {
            return Ok(None);
        };
        let mut l = [0u8; 4];
        l.copy_from_slice(len);
        let len = u32::from_be_bytes(l) as usize;
        if len == 0 {
            return Err(FrameError::Empty);
        }
        if len > self.limit {
            return Err(FrameError::TooLarge {
                size: len as u64,
                limit: self.limit,
            });
        }
        Ok((self.buf.len() >= len.saturating_add(4)).then_some(len))
    }

    /// Reads the next complete frame's body with `read`, straight from
    /// the buffer (a manifest's megabytes are not copied out first), and
    /// consumes the frame.
    fn next_with<T>(
        &mut self,
        read: impl FnOnce(&[u8]) -> Result<T, FrameError>,
    ) -> Result<Option<T>, FrameError> {
        let Some(len) = self.complete()? else {
            return Ok(None);
        };
        let end = len.saturating_add(4);
        let out = read(self.buf.get(4..end).unwrap_or_default());
        self.buf.drain(..end);
        out.map(Some)
    }

    /// The body of the next complete frame, if one is buffered. Refuses an
    /// oversized frame as soon as its length is known, before buffering it.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        self.next_with(|body| Ok(body.to_vec()))
    }

    /// The next complete message, if one is buffered.
    pub fn next_message(&mut self) -> Result<Option<Message>, FrameError> {
        self.next_with(|body| Ok(Message::from_owned_value(decode_value(body)?)?))
    }

    /// The next complete component header, if one is buffered.
    pub fn next_header(&mut self) -> Result<Option<ComponentHeader>, FrameError> {
        self.next_with(|body| Ok(ComponentHeader::from_value(&decode_value(body)?)?))
    }

    /// Takes what is buffered past the frames read so far (the start of a
    /// component's bytes, after its header).
    pub fn take_rest(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::{Cancel, Code, Done, ErrorMsg, Get, ManifestMsg};

    fn all_messages() -> Vec<Message> {
        vec![
            Message::Get(Get {
                id: 7,
                path: "a/b.zt".into(),
                select: vec!["x.*".into()],
                order: vec!["x.1".into()],
                token: Some("t".into()),
                if_match: Some("\"e\"".into()),
                manifest_only: true,
                ranges: vec![(0, 8), (16, 16)],
                rows: Some((3, 9)),
                slice: vec![(0, 4), (2, 6)],
                share: Some((1, 4)),
            }),
            Message::Get(Get {
                id: 1,
                path: "m.zt".into(),
                ..Get::default()
            }),
            Message::Cancel(Cancel {
                id: 7,
                object: Some("x.1".into()),
                component: None,
            }),
            Message::Manifest(ManifestMsg {
                id: 7,
                etag: "\"e\"".into(),
                size: 99,
                manifest: vec![0xa0].into(),
                streams: 3,
                features: Vec::new(),
            }),
            Message::Done(Done {
                id: 7,
                sent: 2,
                cancelled: 1,
            }),
            Message::Error(ErrorMsg {
                id: None,
                code: Code::Unauthorized,
                message: "no token".into(),
                retry_after_ms: None,
            }),
            Message::Error(ErrorMsg {
                id: Some(4),
                code: Code::Unavailable,
                message: "busy".into(),
                retry_after_ms: Some(1000),
            }),
        ]
    }

    /// The keys each map rule of `ztp.cddl` lists, by rule name.
    fn cddl_keys() -> std::collections::HashMap<String, std::collections::BTreeSet<String>> {
        let mut rules = std::collections::HashMap::new();
        let mut rule: Option<String> = None;
        for line in include_str!("../ztp.cddl").lines() {
            let line = line.split(';').next().unwrap_or_default().trim();
            if let Some(name) = line.strip_suffix("= {") {
                rule = Some(name.trim().to_owned());
            } else if line.starts_with('}') {
                rule = None;
            } else if let (Some(r), Some((key, _))) =
                (&rule, line.trim_start_matches("? ").split_once(':'))
            {
                rules
                    .entry(r.clone())
                    .or_insert_with(std::collections::BTreeSet::new)
                    .insert(key.trim().to_owned());
            }
        }
        rules
    }

    /// The keys `v` (a map) holds.
    fn keys(v: &ciborium::Value) -> std::collections::BTreeSet<String> {
        v.as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_text().unwrap().to_owned())
            .collect()
    }

    /// What the encoder writes and what ztp.cddl specifies agree: every
    /// key written is listed under its rule, and a `get` with every field
    /// set writes every key its rule lists (a new field must reach the
    /// specification, and the other way round).
    #[test]
    fn the_cddl_lists_every_key_the_encoder_writes() {
        let rules = cddl_keys();
        for m in all_messages() {
            let written = keys(&m.to_value());
            let listed = &rules[m.kind()];
            assert!(
                written.is_subset(listed),
                "{}: {written:?} against {listed:?}",
                m.kind()
            );
        }
        let full = keys(&all_messages()[0].to_value());
        assert_eq!(&full, &rules["get"], "a get with every field set");
        let header = crate::ComponentHeader {
            id: 1,
            object: "w".into(),
            component: "data".into(),
            seq: 0,
            dtype: "u8".into(),
            logical_type: Some("bf16".into()),
            encoding: "raw".into(),
            length: 1,
            uncompressed_length: Some(1),
            digest: Some("crc32c:0x00000000".into()),
            offset: 64,
        };
        assert_eq!(keys(&header.to_value()), rules["component-header"]);
    }

    #[test]
    fn messages_round_trip_in_pieces() {
        let mut d = Deframer::new(MAX_CLIENT_MESSAGE);
        let mut wire = Vec::new();
        for m in all_messages() {
            wire.extend(frame(&m).unwrap());
        }
        let mut got = Vec::new();
        for b in wire.chunks(3) {
            d.push(b);
            while let Some(m) = d.next_message().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, all_messages());
        assert_eq!(d.buffered(), 0);
    }

    /// A message framed in two pieces is, byte for byte, the frame
    /// `frame` writes, and reads back as itself; a manifest's bytes are
    /// the very bytes given (not a copy), whatever the length of their
    /// CBOR head (1, 2, 3, 5 bytes; 9 in the test after).
    #[test]
    fn manifests_are_framed_without_copying_their_bytes() {
        let mut messages = all_messages();
        for len in [0usize, 23, 24, 255, 256, 65_535, 65_536, 300_000] {
            messages.push(Message::Manifest(ManifestMsg {
                id: len as u64,
                etag: "\"e\"".into(),
                size: 1 << 40,
                manifest: (0..len).map(|i| i as u8).collect::<Vec<u8>>().into(),
                streams: 0,
                features: vec!["ranges".into()],
            }));
        }
        for m in messages {
            let given = match &m {
                Message::Manifest(mm) => Some(mm.manifest.clone()),
                _ => None,
            };
            let [head, tail] = frame_chunks(m.clone()).unwrap();
            match &given {
                Some(b) => assert_eq!(tail.as_ptr(), b.as_ptr(), "{}", b.len()),
                None => assert!(tail.is_empty()),
            }
            let wire = [&head[..], &tail[..]].concat();
            assert_eq!(wire, frame(&m).unwrap());
            let mut d = Deframer::new(1 << 20);
            d.push(&wire);
            assert_eq!(d.next_message().unwrap(), Some(m));
            assert_eq!(d.buffered(), 0);
        }
    }

    /// A byte string's head is the shortest, up to a 9-byte one (a frame
    /// of that size cannot be built to compare whole).
    #[test]
    fn byte_string_heads_are_the_shortest() {
        for (len, head) in [
            (23usize, vec![0x57]),
            (24, vec![0x58, 24]),
            (256, vec![0x59, 1, 0]),
            (65_536, vec![0x5a, 0, 1, 0, 0]),
            (1 << 32, vec![0x5b, 0, 0, 0, 1, 0, 0, 0, 0]),
        ] {
            let mut out = Vec::new();
            byte_string_head(&mut out, len).unwrap();
            assert_eq!(out, head, "{len}");
        }
    }

    #[test]
    fn headers_round_trip_and_leave_the_data() {
        let h = ComponentHeader {
            id: 1,
            object: "o".into(),
            component: "data".into(),
            seq: 0,
            dtype: "f32".into(),
            logical_type: None,
            encoding: "raw".into(),
            length: 4,
            uncompressed_length: None,
            digest: Some("crc32c:0x00000000".into()),
            offset: 64,
        };
        let mut d = Deframer::new(1024);
        let mut wire = frame_header(&h).unwrap();
        wire.extend_from_slice(&[1, 2, 3, 4]);
        d.push(&wire);
        assert_eq!(d.next_header().unwrap(), Some(h));
        assert_eq!(d.take_rest(), [1, 2, 3, 4]);
    }

    #[test]
    fn hostile_frames_are_refused() {
        let mut d = Deframer::new(100);
        d.push(&[0, 0, 1, 0]);
        assert!(matches!(
            d.next_frame(),
            Err(FrameError::TooLarge { size: 256, .. })
        ));
        let mut d = Deframer::new(100);
        d.push(&[0, 0, 0, 0]);
        assert_eq!(d.next_frame(), Err(FrameError::Empty));
        for body in [
            &b"\xff"[..],
            b"\xa1\x61t\x63get",
            b"\x80",
            b"\xa1\x61t\x65hello",
            b"\xa2\x61t\x63get\x61t\x63get",
        ] {
            let mut d = Deframer::new(100);
            let mut f = (body.len() as u32).to_be_bytes().to_vec();
            f.extend_from_slice(body);
            d.push(&f);
            assert!(d.next_message().is_err(), "{body:?}");
            // The bad frame is consumed, not read again.
            assert_eq!(d.buffered(), 0, "{body:?}");
        }
        // A manifest message whose bytes are given twice, or are not bytes.
        let manifest = |fields: Vec<(&str, Value)>| {
            let mut entries = vec![
                (Value::Text("t".into()), Value::Text("manifest".into())),
                (Value::Text("id".into()), Value::Integer(1.into())),
                (Value::Text("etag".into()), Value::Text("\"e\"".into())),
                (Value::Text("size".into()), Value::Integer(1.into())),
                (Value::Text("streams".into()), Value::Integer(0.into())),
            ];
            entries.extend(fields.into_iter().map(|(k, v)| (Value::Text(k.into()), v)));
            encode(&Value::Map(entries)).unwrap()
        };
        for (fields, want) in [
            (
                vec![
                    ("manifest", Value::Bytes(vec![1])),
                    ("manifest", Value::Bytes(vec![2])),
                ],
                FieldError::Duplicate("manifest".into()),
            ),
            (
                vec![("manifest", Value::Text("x".into()))],
                FieldError::Type {
                    field: "manifest",
                    expected: "a byte string",
                },
            ),
        ] {
            let mut d = Deframer::new(100);
            d.push(&manifest(fields));
            assert_eq!(d.next_message(), Err(FrameError::Field(want)));
        }
        let mut d = Deframer::new(100);
        d.push(&manifest(vec![("manifest", Value::Bytes(vec![7, 8]))]));
        match d.next_message() {
            Ok(Some(Message::Manifest(m))) => assert_eq!(m.manifest, &[7u8, 8][..]),
            other => panic!("{other:?}"),
        }
        let mut deep = vec![0x81u8; 40];
        deep.push(0);
        let mut f = (deep.len() as u32).to_be_bytes().to_vec();
        f.extend(deep);
        let mut d = Deframer::new(100);
        d.push(&f);
        assert!(d.next_message().is_err());
    }

    #[test]
    fn codes_are_stable() {
        for c in Code::ALL {
            assert_eq!(Code::from_value(u64::from(c.value())), Some(c));
        }
        assert_eq!(Code::Unauthorized.value(), 3);
        assert_eq!(Code::from_value(999), None);
    }
}
