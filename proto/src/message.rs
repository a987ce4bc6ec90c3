//! The messages of ztp/1.

use ciborium::Value;

use crate::code::Code;
use crate::value::{map, pair, ranges, text, texts, uint, FieldError, Fields};

/// `get`: ask for a file's manifest and components (client to server).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Get {
    /// Chosen by the client, unique among its requests in flight.
    pub id: u64,
    /// The file's path under the server's root, `/`-separated, as decoded
    /// UTF-8 text (never percent-encoded: PROTOCOL.md, section 4).
    pub path: String,
    /// Glob patterns; empty selects every object.
    pub select: Vec<String>,
    /// Object names to send first, in this order; the layer rule orders the rest.
    pub order: Vec<String>,
    /// Bearer token, required when the server has tokens configured.
    pub token: Option<String>,
    /// Fail with `precondition_failed` unless the file's ETag is this one.
    pub if_match: Option<String>,
    /// Send only the manifest, no component streams.
    pub manifest_only: bool,
    /// Half-open byte ranges `[start, end)` of the file to send instead of
    /// components, one stream each, in this order (feature
    /// [`crate::FEATURE_RANGES`]); empty: components. What a byte-identical
    /// copy needs of the bytes between components (a header, padding).
    pub ranges: Vec<(u64, u64)>,
    /// Rows `[start, end)` along dimension 0 of the one raw dense object
    /// `select` names, sent instead of its whole `data` (feature
    /// [`crate::FEATURE_ROWS`]), under a digest of exactly those bytes.
    pub rows: Option<(u64, u64)>,
    /// `[start, end)` per dimension, from the first (fewer than the
    /// object's rank: the rest whole): a rectangular slice of the one raw
    /// dense object `select` names, gathered into one stream instead of
    /// its whole `data` (feature [`crate::FEATURE_SLICES`]), under a
    /// digest of exactly those bytes; empty: none.
    pub slice: Vec<(u64, u64)>,
    /// `[index, count]`: only the components [`crate::share::assign`]
    /// gives share `index` of `count` (feature [`crate::FEATURE_SHARES`]);
    /// one fetch spread over `count` requests, one per connection, each
    /// moving through the order at the same pace in bytes.
    pub share: Option<(u64, u64)>,
}

/// `cancel`: stop sending a request's components, or one of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cancel {
    pub id: u64,
    pub object: Option<String>,
    pub component: Option<String>,
}

/// `manifest`: the answer to `get`, before any component stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestMsg {
    pub id: u64,
    pub etag: String,
    /// The file's size in bytes.
    pub size: u64,
    /// The manifest filtered to the selection, as v1.2 CBOR (shared, not
    /// copied: a server sends the bytes it keeps rendered).
    pub manifest: bytes::Bytes,
    /// How many component streams will follow for this request.
    pub streams: u64,
    /// What the server supports beyond ztp/1 as first published
    /// (PROTOCOL.md section 4, "Features"); absent is empty.
    pub features: Vec<String>,
}

/// `done`: every component stream of a request has finished or been cancelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    pub id: u64,
    pub sent: u64,
    pub cancelled: u64,
}

/// `error`: a request failed (with its id) or the connection is about to close (without).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorMsg {
    pub id: Option<u64>,
    pub code: Code,
    pub message: String,
    /// Present when the refusal is passing (the server is busy, or the
    /// file is being rewritten): the request may be sent again after this
    /// many milliseconds.
    pub retry_after_ms: Option<u64>,
}

/// A control-stream message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Get(Get),
    Cancel(Cancel),
    Manifest(ManifestMsg),
    Done(Done),
    Error(ErrorMsg),
}

/// The header that opens every component stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentHeader {
    pub id: u64,
    pub object: String,
    pub component: String,
    /// Position of this stream in the request's send order, from 0.
    pub seq: u64,
    pub dtype: String,
    pub logical_type: Option<String>,
    pub encoding: String,
    /// Stored bytes that follow the header.
    pub length: u64,
    pub uncompressed_length: Option<u64>,
    /// The file's own digest string, over the stored bytes.
    pub digest: Option<String>,
    /// The component's offset in the file.
    pub offset: u64,
}

/// A `manifest` message as a CBOR value, with `bytes` as its manifest,
/// which comes last: [`crate::frame_chunks`] sends the bytes as they are
/// after the rest.
pub(crate) fn manifest_value(m: &ManifestMsg, bytes: Vec<u8>) -> Value {
    map(vec![
        ("t", text("manifest")),
        ("id", uint(m.id)),
        ("etag", text(&m.etag)),
        ("size", uint(m.size)),
        ("streams", uint(m.streams)),
        ("features", texts(&m.features)),
        ("manifest", Some(Value::Bytes(bytes))),
    ])
}

impl Message {
    /// The message's type, as `t` spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Get(_) => "get",
            Message::Cancel(_) => "cancel",
            Message::Manifest(_) => "manifest",
            Message::Done(_) => "done",
            Message::Error(_) => "error",
        }
    }

    /// The message as a CBOR value.
    pub fn to_value(&self) -> Value {
        match self {
            Message::Get(g) => map(vec![
                ("t", text("get")),
                ("id", uint(g.id)),
                ("path", text(&g.path)),
                ("select", texts(&g.select)),
                ("order", texts(&g.order)),
                ("token", g.token.as_deref().and_then(text)),
                ("if_match", g.if_match.as_deref().and_then(text)),
                (
                    "manifest_only",
                    g.manifest_only.then_some(Value::Bool(true)),
                ),
                ("ranges", ranges(&g.ranges)),
                ("rows", g.rows.map(|(a, b)| pair(a, b))),
                ("slice", ranges(&g.slice)),
                ("share", g.share.map(|(a, b)| pair(a, b))),
            ]),
            Message::Cancel(c) => map(vec![
                ("t", text("cancel")),
                ("id", uint(c.id)),
                ("object", c.object.as_deref().and_then(text)),
                ("component", c.component.as_deref().and_then(text)),
            ]),
            Message::Manifest(m) => manifest_value(m, m.manifest.to_vec()),
            Message::Done(d) => map(vec![
                ("t", text("done")),
                ("id", uint(d.id)),
                ("sent", uint(d.sent)),
                ("cancelled", uint(d.cancelled)),
            ]),
            Message::Error(e) => map(vec![
                ("t", text("error")),
                ("id", e.id.and_then(uint)),
                ("code", uint(u64::from(e.code.value()))),
                ("message", text(&e.message)),
                ("retry_after_ms", e.retry_after_ms.and_then(uint)),
            ]),
        }
    }

    /// [`Message::from_value`], taking the value: a manifest's bytes move
    /// into the message instead of being copied.
    pub fn from_owned_value(mut v: Value) -> Result<Message, FieldError> {
        let taken = match &mut v {
            Value::Map(entries) => entries
                .iter_mut()
                .find(|(k, _)| k.as_text() == Some("manifest"))
                .and_then(|(_, v)| match v {
                    Value::Bytes(b) => Some(std::mem::take(b)),
                    _ => None,
                }),
            _ => None,
        };
        let mut m = Message::from_value(&v)?;
        if let (Message::Manifest(m), Some(bytes)) = (&mut m, taken) {
            m.manifest = bytes.into();
        }
        Ok(m)
    }

    /// Reads a message from a CBOR value.
    pub fn from_value(v: &Value) -> Result<Message, FieldError> {
        let f = Fields::new(v)?;
        let t = f.text("t")?;
        Ok(match t.as_str() {
            "get" => Message::Get(Get {
                id: f.uint("id")?,
                path: f.text("path")?,
                select: f.texts("select")?,
                order: f.texts("order")?,
                token: f.opt_text("token")?,
                if_match: f.opt_text("if_match")?,
                manifest_only: match v_bool(v, "manifest_only") {
                    Some(Ok(b)) => b,
                    Some(Err(())) => {
                        return Err(FieldError::Type {
                            field: "manifest_only",
                            expected: "a bool",
                        })
                    }
                    None => false,
                },
                ranges: f.ranges("ranges")?,
                rows: f.pair("rows")?,
                slice: f.ranges("slice")?,
                share: f.pair("share")?,
            }),
            "cancel" => Message::Cancel(Cancel {
                id: f.uint("id")?,
                object: f.opt_text("object")?,
                component: f.opt_text("component")?,
            }),
            "manifest" => Message::Manifest(ManifestMsg {
                id: f.uint("id")?,
                etag: f.text("etag")?,
                size: f.uint("size")?,
                manifest: f.bytes("manifest")?.into(),
                streams: f.uint("streams")?,
                features: f.texts("features")?,
            }),
            "done" => Message::Done(Done {
                id: f.uint("id")?,
                sent: f.uint("sent")?,
                cancelled: f.uint("cancelled")?,
            }),
            "error" => Message::Error(ErrorMsg {
                id: f.opt_uint("id")?,
                code: Code::from_value(f.uint("code")?).unwrap_or(Code::Internal),
                message: f.opt_text("message")?.unwrap_or_default(),
                retry_after_ms: f.opt_uint("retry_after_ms")?,
            }),
            other => return Err(FieldError::UnknownType(other.to_owned())),
        })
    }
}

fn v_bool(v: &Value, key: &str) -> Option<Result<bool, ()>> {
    let Value::Map(entries) = v else { return None };
    entries
        .iter()
        .find(|(k, _)| k.as_text() == Some(key))
        .map(|(_, v)| match v {
            Value::Bool(b) => Ok(*b),
            Value::Null => Ok(false),
            _ => Err(()),
        })
}

impl ComponentHeader {
    pub fn to_value(&self) -> Value {
        map(vec![
            ("t", text("component")),
            ("id", uint(self.id)),
            ("object", text(&self.object)),
            ("component", text(&self.component)),
            ("seq", uint(self.seq)),
            ("dtype", text(&self.dtype)),
            ("type", self.logical_type.as_deref().and_then(text)),
            ("encoding", text(&self.encoding)),
            ("length", uint(self.length)),
            (
                "uncompressed_length",
                self.uncompressed_length.and_then(uint),
            ),
            ("digest", self.digest.as_deref().and_then(text)),
            ("offset", uint(self.offset)),
        ])
    }

    pub fn from_value(v: &Value) -> Result<Self, FieldError> {
        let f = Fields::new(v)?;
        let t = f.text("t")?;
        if t != "component" {
            return Err(FieldError::UnknownType(t));
        }
        Ok(ComponentHeader {
            id: f.uint("id")?,
            object: f.text("object")?,
            component: f.text("component")?,
            seq: f.uint("seq")?,
            dtype: f.text("dtype")?,
            logical_type: f.opt_text("type")?,
            encoding: f.text("encoding")?,
            length: f.uint("length")?,
            uncompressed_length: f.opt_uint("uncompressed_length")?,
            digest: f.opt_text("digest")?,
            offset: f.uint("offset")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get_with(ranges: Value) -> Result<Message, FieldError> {
        let v = Value::Map(vec![
            (Value::Text("t".into()), Value::Text("get".into())),
            (Value::Text("id".into()), Value::Integer(1.into())),
            (Value::Text("path".into()), Value::Text("m.gguf".into())),
            (Value::Text("ranges".into()), ranges),
        ]);
        Message::from_value(&v)
    }

    fn pair(a: u64, b: u64) -> Value {
        Value::Array(vec![Value::Integer(a.into()), Value::Integer(b.into())])
    }

    #[test]
    fn ranges_are_pairs_that_do_not_run_backwards() {
        match get_with(Value::Array(vec![pair(0, 8), pair(8, 8)])) {
            Ok(Message::Get(g)) => assert_eq!(g.ranges, vec![(0, 8), (8, 8)]),
            other => panic!("{other:?}"),
        }
        for bad in [
            Value::Array(vec![pair(9, 8)]),
            Value::Array(vec![Value::Array(vec![Value::Integer(1.into())])]),
            Value::Array(vec![Value::Text("0-8".into())]),
            Value::Integer(3.into()),
        ] {
            assert!(get_with(bad).is_err());
        }
    }
}
