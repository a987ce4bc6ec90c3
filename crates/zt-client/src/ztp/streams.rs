//! Component streams: each read into an aligned buffer, hashed from it as
//! its bytes arrive (a stride at a time), and handed to its request once
//! the digest matches.

use std::sync::Arc;

use quinn::{Connection, RecvStream};
use zt_format::{DType, Digest, Encoding, LogicalType};
use ztp_proto::{ClientSession, Code, ComponentHeader, Deframer, Violation};

use super::routes::{lost, violation, Delivery, Routes};
use crate::error::{At, Error, Result};
use crate::fetch::{Arrival, Event};
use crate::options::Options;
use crate::pool::BufPool;
use crate::verify::{Check, Delivered};

/// Accepts component streams until the connection ends, then fails every
/// request still waiting with why.
pub(super) async fn accept_streams(
    conn: Connection,
    routes: Routes,
    options: Arc<Options>,
    pool: Arc<BufPool>,
) {
    let why = loop {
        match conn.accept_uni().await {
            Ok(stream) => {
                let (routes, options, pool) =
                    (Arc::clone(&routes), Arc::clone(&options), Arc::clone(&pool));
                let conn = conn.clone();
                tokio::spawn(async move {
                    match receive(stream, &options, &routes, &pool).await {
                        Outcome::Arrived(deliver, arrival) => {
                            let _ = deliver.send(arrival);
                        }
                        Outcome::Dropped => {}
                        Outcome::Violation(why) => violation(&conn, &routes, &why),
                    }
                });
            }
            Err(e) => break e,
        }
    };
    lost(&conn, &routes, &why);
}

/// Why a component stream broke after `pos` bytes: the server refusing a
/// corrupt component (never resumable), or the network (resumable).
fn stream_error(at: &At, pos: usize, e: quinn::ReadError) -> Error {
    match e {
        quinn::ReadError::Reset(c) => match Code::from_value(c.into_inner()) {
            Some(Code::Corrupt) => Error::corrupt(
                at,
                "digest mismatch found by the server, which refused to send it",
            ),
            Some(code) => Error::Transport(format!(
                "{at}: the server reset the stream after {pos} bytes: {code}"
            )),
            None => Error::Transport(format!(
                "{at}: the server reset the stream after {pos} bytes with code {c}"
            )),
        },
        e => Error::Transport(format!("{at}: stream failed after {pos} bytes: {e}")),
    }
}

/// The typed fields of a component header; a value outside the format's
/// sets fails that component, naming it.
fn typed(
    h: &ComponentHeader,
    at: &At,
) -> Result<(DType, Option<LogicalType>, Encoding, Option<Digest>)> {
    let bad = |what: &str, v: &str| {
        Error::Protocol(format!(
            "{at}: the component header's {what} {v:?} is not a v1.2 value"
        ))
    };
    let dtype = DType::from_name(&h.dtype).ok_or_else(|| bad("dtype", &h.dtype))?;
    let encoding = Encoding::from_name(&h.encoding).ok_or_else(|| bad("encoding", &h.encoding))?;
    let digest = match &h.digest {
        Some(d) => Some(Digest::parse(d).map_err(|r| Error::corrupt(at, r))?),
        None => None,
    };
    let logical = h.logical_type.as_deref().map(LogicalType::parse);
    Ok((dtype, logical, encoding, digest))
}

/// What became of one component stream (one per stream, moved once: its
/// size does not matter).
#[allow(clippy::large_enum_variant)]
enum Outcome {
    /// For a request: its component, or why that component failed.
    Arrived(Delivery, Arrival),
    /// Nothing to deliver: reset before its header, or cut with its
    /// connection (whose loss reaches every request anyway).
    Dropped,
    /// The server broke the protocol; the connection is closed with
    /// `protocol_violation` and every request on it fails.
    Violation(Violation),
}

/// Most bytes taken from quinn at once while a stream's header is read.
const HEADER_READ: usize = 64 * 1024;

/// Bytes hashed at once, from the component's buffer rather than quinn's
/// pieces of a datagram each (1-9 KiB): BLAKE3 hashes many of its 1 KiB
/// chunks together (SIMD) only when given them together (a ztp/1 fetch of
/// a 1 GiB safetensors file with blake3 digests took 1.30 s of client CPU
/// hashing per piece, 0.55 s with crc32c), and every algorithm pays its
/// per-call cost once a stride; small enough to be still in the cache.
const HASH_STRIDE: usize = 256 * 1024;

/// Reads one component stream: header, then exactly `length` bytes into an
/// aligned buffer, hashed from it a stride at a time as they arrive.
async fn receive(
    mut stream: RecvStream,
    options: &Options,
    routes: &Routes,
    pool: &BufPool,
) -> Outcome {
    let mut d = Deframer::new(ztp_proto::MAX_CLIENT_MESSAGE);
    let header = loop {
        match d.next_header() {
            Ok(Some(h)) => break h,
            Ok(None) => {}
            Err(e) => return Outcome::Violation(ClientSession::<()>::on_bad_header(&e)),
        }
        match stream.read_chunk(HEADER_READ, true).await {
            Ok(Some(c)) => d.push(&c.bytes),
            Ok(None) => {
                let n = d.buffered();
                return Outcome::Violation(ClientSession::<()>::on_truncated_header(n));
            }
            // Reset before its header (a component cancelled as it opened)
            // or cut with the connection, which reports that itself.
            Err(_) => return Outcome::Dropped,
        }
    };
    let route = match routes.lock() {
        Ok(mut session) => session.on_header(&header).map(|r| {
            r.map(|route| {
                (
                    route.deliver.clone(),
                    route.budget.clone(),
                    route.name.clone(),
                )
            })
        }),
        Err(_) => return Outcome::Dropped,
    };
    let (deliver, budget, name) = match route {
        Ok(Some(r)) => r,
        // A request the client gave up: nobody wants the bytes.
        Ok(None) => return Outcome::Dropped,
        Err(v) => return Outcome::Violation(v),
    };
    // Room in a bounded request's budget comes before the buffer (and
    // before reading on: until then quinn's flow control holds the server).
    let held = match budget {
        Some(b) => b.reserve(header.length).await,
        None => None,
    };
    let at = At {
        object: header.object.clone(),
        component: header.component.clone(),
    };
    let result = async {
        let cap = options.component_cap;
        if header.length > cap {
            let why = format!("{} bytes exceed the cap of {cap}", header.length);
            return Err(Error::corrupt(&at, why));
        }
        let (dtype, logical_type, encoding, digest) = typed(&header, &at)?;
        // Raw byte ranges (a copy's header and padding) carry no digest by
        // design; the copy checks them against the manifest instead.
        let require = options.require_digest && !ztp_proto::is_range_object(&at.object);
        let mut check = Check::new(digest.as_ref(), options.allow_unverified, require, &at)?;
        // Filled in order as the bytes arrive (never zeroed first), hashed
        // from the buffer a stride behind; nothing is delivered before
        // the digest matches.
        let mut data = pool
            .filling(header.length)
            .map_err(|r| Error::corrupt(&at, r))?;
        let more = || Error::corrupt(&at, "stream carries more bytes than its header announces");
        let rest = d.take_rest();
        if data.extend(&rest) < rest.len() {
            return Err(more());
        }
        let length = header.length;
        // Many of quinn's buffers a turn, copied in; hashed from the
        // buffer a stride at a time (`hashed` bytes so far).
        let mut got: [bytes::Bytes; 32] = std::array::from_fn(|_| bytes::Bytes::new());
        let mut hashed = 0;
        while data.remaining() > 0 {
            let pos = data.filled().len();
            match stream.read_chunks(&mut got).await {
                Ok(Some(k)) => {
                    for b in got.iter_mut().take(k) {
                        if data.extend(b) < b.len() {
                            return Err(more());
                        }
                        // Quinn's buffer goes back as soon as it is copied.
                        *b = bytes::Bytes::new();
                    }
                    if let Some(fresh) = data.filled().get(hashed..) {
                        if fresh.len() >= HASH_STRIDE {
                            check.update(fresh);
                            hashed += fresh.len();
                        }
                    }
                }
                Ok(None) => {
                    return Err(Error::Transport(format!(
                        "{at}: stream ended after {pos} of {length} bytes"
                    )))
                }
                Err(e) => return Err(stream_error(&at, pos, e)),
            }
        }
        check.update(data.filled().get(hashed..).unwrap_or_default());
        let pos = data.filled().len();
        match stream.read_chunk(1, true).await {
            Ok(None) => {}
            Ok(Some(_)) => return Err(more()),
            Err(e) => return Err(stream_error(&at, pos, e)),
        }
        // Whole: the loop above ran until nothing remained.
        let data = data
            .finish()
            .map_err(|f| Error::corrupt(&at, format!("{} bytes missing", f.remaining())))?;
        let verification = check.finish(&at)?;
        Ok(Delivered {
            object: header.object.clone(),
            component: header.component.clone(),
            seq: header.seq,
            dtype,
            logical_type,
            encoding,
            uncompressed_length: header.uncompressed_length,
            digest,
            data,
            verification,
        })
    }
    .await
    .map_err(|e| e.within(&name));
    Outcome::Arrived(deliver, (Event::Component(result), held))
}
