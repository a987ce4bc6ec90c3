//! The body of the `ztp_message` fuzz target, shared with the corpus replay
//! test: arbitrary bytes through the deframer as control messages and as
//! component headers, fed in pieces. Whatever decodes must survive a round
//! trip unchanged; nothing may panic or buffer past the frame limit.

use crate::{frame, frame_header, Deframer, Message};

/// The frame limit the target uses (smaller than the protocol's, to reach
/// the limit checks quickly).
const LIMIT: usize = 4096;

fn pieces(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    // The first byte picks the piece size, so the fuzzer explores frames
    // split anywhere.
    let step = usize::from(data.first().copied().unwrap_or(1)).max(1);
    data.get(1..).unwrap_or_default().chunks(step)
}

/// Feeds `data` to a deframer as control messages and as component
/// headers, checking every decoded value round-trips.
pub fn decode_everything(data: &[u8]) {
    let mut d = Deframer::new(LIMIT);
    'messages: for piece in pieces(data) {
        d.push(piece);
        loop {
            match d.next_message() {
                Ok(Some(m)) => round_trip_message(&m),
                Ok(None) => break,
                Err(_) => break 'messages,
            }
        }
        assert!(
            d.buffered() <= LIMIT + 4 + piece.len(),
            "deframer buffered past its limit"
        );
    }
    let mut d = Deframer::new(LIMIT);
    'headers: for piece in pieces(data) {
        d.push(piece);
        loop {
            match d.next_header() {
                Ok(Some(h)) => {
                    let bytes = frame_header(&h).expect("a decoded header re-frames");
                    let mut again = Deframer::new(usize::MAX);
                    again.push(&bytes);
                    assert_eq!(again.next_header().expect("re-decodes"), Some(h));
                }
                Ok(None) => break,
                Err(_) => break 'headers,
            }
        }
    }
}

fn round_trip_message(m: &Message) {
    let bytes = frame(m).expect("a decoded message re-frames");
    let mut again = Deframer::new(usize::MAX);
    again.push(&bytes);
    assert_eq!(again.next_message().expect("re-decodes").as_ref(), Some(m));
}
