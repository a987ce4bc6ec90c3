//! Bytes of an object read to check a component's digest, kept for the
//! request that checked them to send: a request on an object-storage root
//! then reads each component from the store once, not twice (once to
//! verify it before any byte goes out, once to send it). A local file
//! needs none of this: its second read comes from the page cache.
//!
//! Each piece is taken once, by a read of exactly its range (requests
//! read components in the same pieces the check read them). The pieces
//! held are bounded in bytes, daemon-wide (`storage.keep_verified_bytes`);
//! past the bound a piece is not kept and its send reads it again. A piece
//! no read takes within [`KEEP_FOR`] is dropped.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;

/// How long a piece waits for the read that takes it.
const KEEP_FOR: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Piece {
    key: String,
    etag: Option<String>,
    start: u64,
    end: u64,
}

#[derive(Debug, Default)]
struct Held {
    bytes: u64,
    pieces: HashMap<Piece, (Bytes, Instant)>,
}

/// The pieces kept, at most `budget` bytes of them.
#[derive(Debug)]
pub(crate) struct Kept {
    budget: u64,
    held: Mutex<Held>,
}

impl Kept {
    pub(crate) fn new(budget: u64) -> Kept {
        Kept {
            budget,
            held: Mutex::default(),
        }
    }

    /// Keeps `bytes`, the range of version `etag` of `key` starting at
    /// `start`, if they fit the budget (after dropping expired pieces).
    pub(crate) fn keep(&self, key: &str, etag: Option<&str>, start: u64, bytes: &Bytes) {
        let len = bytes.len() as u64;
        let Ok(mut held) = self.held.lock() else {
            return;
        };
        if held.bytes.saturating_add(len) > self.budget {
            let now = Instant::now();
            let mut freed = 0;
            held.pieces.retain(|_, (b, at)| {
                let keep = now.duration_since(*at) < KEEP_FOR;
                if !keep {
                    freed += b.len() as u64;
                }
                keep
            });
            held.bytes = held.bytes.saturating_sub(freed);
            if held.bytes.saturating_add(len) > self.budget {
                return;
            }
        }
        let piece = Piece {
            key: key.to_owned(),
            etag: etag.map(str::to_owned),
            start,
            end: start.saturating_add(len),
        };
        if let Some((old, _)) = held.pieces.insert(piece, (bytes.clone(), Instant::now())) {
            held.bytes = held.bytes.saturating_sub(old.len() as u64);
        }
        held.bytes = held.bytes.saturating_add(len);
    }

    /// The piece that is exactly `range` of version `etag` of `key`, if
    /// one is kept; it is kept no longer.
    pub(crate) fn take(&self, key: &str, etag: Option<&str>, range: &Range<u64>) -> Option<Bytes> {
        let mut held = self.held.lock().ok()?;
        if held.pieces.is_empty() {
            return None;
        }
        let piece = Piece {
            key: key.to_owned(),
            etag: etag.map(str::to_owned),
            start: range.start,
            end: range.end,
        };
        let (bytes, _) = held.pieces.remove(&piece)?;
        held.bytes = held.bytes.saturating_sub(bytes.len() as u64);
        Some(bytes)
    }

    /// Bytes held now.
    pub(crate) fn held(&self) -> u64 {
        self.held.lock().map_or(0, |h| h.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_taken_once_by_their_exact_range_within_the_budget() {
        let kept = Kept::new(10);
        let b = Bytes::from_static(b"abcdef");
        kept.keep("k", Some("e1"), 100, &b);
        assert_eq!(kept.held(), 6);
        // Another version, another range, a range inside: not this piece.
        assert!(kept.take("k", Some("e2"), &(100..106)).is_none());
        assert!(kept.take("k", Some("e1"), &(100..105)).is_none());
        assert!(kept.take("other", Some("e1"), &(100..106)).is_none());
        // Over the budget: not kept.
        kept.keep("k", Some("e1"), 0, &b);
        assert_eq!(kept.held(), 6);
        assert_eq!(kept.take("k", Some("e1"), &(100..106)).unwrap(), b);
        assert!(kept.take("k", Some("e1"), &(100..106)).is_none());
        assert_eq!(kept.held(), 0);
        kept.keep("k", Some("e1"), 0, &b);
        assert_eq!(kept.held(), 6);
    }
}
