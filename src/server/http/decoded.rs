//! `?decode=1`: a zstd component served decoded, as a stream. Its stored
//! pieces are read in turn (an object's GETs awaited) and decoded on the
//! CPU pool one decoded piece ([`PIECE`]) per turn, as the client takes
//! them: a response holds one stored piece and one decoded piece (and
//! zstd's window), whatever the component decodes to, and a client that
//! stops reading stops the decoding. Each decoded piece is charged to the
//! connection and the budget (`flow.rs`) before it is made. The first piece is decoded before
//! the headers, so a busy pool or a corrupt frame is a clean refusal; a
//! frame that decodes to other than its claimed length later, or a file
//! that changes under the response, ends the body short (the client sees
//! it cut, never a complete body of other bytes). `HEAD` decodes nothing.

use std::io;
use std::sync::Arc;

use axum::body::Body;
use bytes::{Buf as _, Bytes};
use futures_util::stream::{self, BoxStream, StreamExt as _};
use zt_format::codec::Decoder;
use zt_format::{Component, Rule};

use super::flow::Flow;
use super::preflight::Stop;
use crate::server::catalog::Served;
use crate::server::serve::Refusal;
use crate::server::State;

/// Decoded bytes one turn of the CPU pool makes, and a response holds.
const PIECE: usize = 1 << 20;

/// A component being decoded for one response.
struct Decoding {
    state: Arc<State>,
    /// The connection its pieces are charged to.
    flow: Arc<Flow>,
    served: Arc<Served>,
    /// `path: object …, component …`, for reasons.
    label: String,
    /// `None` once the last piece is out.
    decoder: Option<Decoder>,
    stored: BoxStream<'static, io::Result<Bytes>>,
    /// What is left of the stored piece being decoded.
    pending: Bytes,
    /// Every stored piece has been read.
    read_all: bool,
    /// A read found the file shorter than listed, or gone from the store.
    gone: bool,
}

/// The decoded bytes of `c` (exactly `expected`, at most `cap`) as a
/// body; its first piece decoded now. A file found changed by then is
/// [`Stop::Changed`]: the request is answered from what is there now.
pub(super) async fn body(
    state: &Arc<State>,
    flow: &Arc<Flow>,
    served: &Arc<Served>,
    c: &Component,
    expected: u64,
    cap: u64,
    label: String,
) -> Result<Body, Stop> {
    let decoder = Decoder::new(expected, cap, PIECE)
        .map_err(|rule| Refusal::TooLarge(format!("{label}: {}: {rule}", rule.name())))?;
    let range = c.offset..c.offset.saturating_add(c.length);
    let mut d = Decoding {
        state: Arc::clone(state),
        flow: Arc::clone(flow),
        served: Arc::clone(served),
        label,
        decoder: Some(decoder),
        stored: served.file.pieces(range, false),
        pending: Bytes::new(),
        read_all: false,
        gone: false,
    };
    let first = match d.next(true).await {
        Ok(first) => first,
        Err(Refusal::Unreadable(why)) if d.gone || served.changed() => {
            return Err(Stop::Changed {
                path: served.path.clone(),
                why,
            })
        }
        Err(refusal) => return Err(refusal.into()),
    };
    let rest = stream::unfold(first.is_some().then_some(d), |d| async move {
        let mut d = d?;
        match d.next(false).await {
            Ok(Some(piece)) => Some((Ok(piece), Some(d))),
            Ok(None) => None,
            Err(refusal) => {
                tracing::error!(file = %d.served.path, reason = %refusal, "a decoded response failed mid-body; connection cut");
                Some((Err(io::Error::other(refusal.to_string())), None))
            }
        }
    });
    Ok(Body::from_stream(stream::iter(first.map(Ok)).chain(rest)))
}

impl Decoding {
    /// The next decoded piece, `None` once the component is out whole;
    /// `first`: refused at once when the CPU pool's queue is full (a later
    /// piece waits for its turn instead).
    async fn next(&mut self, first: bool) -> Result<Option<Bytes>, Refusal> {
        let mut charge = None;
        loop {
            let Some(decoder) = self.decoder.take() else {
                return Ok(None);
            };
            if self.pending.is_empty() && !self.read_all {
                match self.stored.next().await {
                    Some(Ok(bytes)) => self.pending = bytes,
                    Some(Err(e)) => {
                        use io::ErrorKind::{NotFound, UnexpectedEof};
                        self.gone = matches!(e.kind(), UnexpectedEof | NotFound);
                        return Err(self.unreadable(&e.to_string()));
                    }
                    None => self.read_all = true,
                }
                if self.served.changed() {
                    return Err(self.unreadable(
                        "changed-under-transfer: the file changed while it was decoded",
                    ));
                }
            }
            let (stored, last) = (
                self.pending.clone(),
                self.read_all && self.pending.is_empty(),
            );
            if charge.is_none() {
                let flows = &self.state.flows;
                charge = Some(flows.charge(&self.flow, PIECE as u64, 1).await);
            }
            let job = move || step(decoder, &stored, last);
            let cpu = &self.state.cpu;
            let done = match first {
                true => cpu.run("decoding a component", job).await?,
                false => cpu.wait_turn("decoding a component", job).await?,
            };
            let (decoder, stepped) = done;
            self.decoder = decoder;
            let (took, piece) = stepped.map_err(|rule| {
                Refusal::Corrupt(format!("{}: {}: {rule}", self.label, rule.name()))
            })?;
            self.pending.advance(took);
            if let Some(piece) = piece {
                self.state.metrics.add_bytes(piece.len() as u64);
                return Ok(Some(match charge {
                    Some(c) => c.hold(piece),
                    None => piece,
                }));
            }
            if last {
                return Ok(None);
            }
        }
    }

    fn unreadable(&self, why: &str) -> Refusal {
        Refusal::Unreadable(format!("{}: {why}", self.label))
    }
}

/// One turn's work: at most one decoded piece from `stored`, or, when
/// the stored bytes are all in (`last`), the end of the frame and its
/// last, shorter piece. Gives the decoder back unless it is done.
#[allow(clippy::type_complexity)]
fn step(
    mut decoder: Decoder,
    stored: &[u8],
    last: bool,
) -> (Option<Decoder>, Result<(usize, Option<Bytes>), Rule>) {
    if last {
        let mut tail = None;
        let ended = decoder.finish(|p| {
            tail = Some(Bytes::copy_from_slice(p));
            Ok::<(), Rule>(())
        });
        return (None, ended.map(|()| (0, tail)));
    }
    let stepped = decoder
        .fill(stored)
        .map(|(took, piece)| (took, piece.map(Bytes::copy_from_slice)));
    (Some(decoder), stepped)
}
