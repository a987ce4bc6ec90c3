//! An object-storage root's recently read bytes, in memory: what the page
//! cache is to a local root. Each piece is one ranged GET's answer (a
//! component's chunk), keyed by object, version (its ETag) and range, so
//! a replaced object never serves from another version's pieces. A read
//! is served from here when a piece is exactly its range: requests read
//! components in the same pieces the digest check read them, so a
//! component is fetched from the store once to check and send it, and a
//! hot one (a popular layer) not again until it falls out.
//!
//! Bounded in bytes, daemon-wide (`storage.cache_bytes`); the least
//! recently used pieces go first. A piece over a quarter of the bound is
//! not kept.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Mutex;

use bytes::Bytes;

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
    /// Each piece, with its last use.
    pieces: HashMap<Piece, (Bytes, u64)>,
    /// The pieces by last use, oldest first.
    by_use: BTreeMap<u64, Piece>,
    tick: u64,
}

/// The pieces kept, at most `budget` bytes of them.
#[derive(Debug)]
pub(crate) struct PieceCache {
    budget: u64,
    held: Mutex<Held>,
    /// `ztserve_store_cache_bytes`: what `Held::bytes` holds.
    gauge: prometheus::IntGauge,
}

impl PieceCache {
    pub(crate) fn new(budget: u64, gauge: prometheus::IntGauge) -> PieceCache {
        PieceCache {
            budget,
            held: Mutex::default(),
            gauge,
        }
    }

    /// Keeps `bytes`, the range of version `etag` of `key` starting at
    /// `start`, dropping the least recently used pieces to make room.
    pub(crate) fn put(&self, key: &str, etag: Option<&str>, start: u64, bytes: &Bytes) {
        let len = bytes.len() as u64;
        if len > self.budget / 4 {
            return;
        }
        let Ok(mut held) = self.held.lock() else {
            return;
        };
        let piece = Piece {
            key: key.to_owned(),
            etag: etag.map(str::to_owned),
            start,
            end: start.saturating_add(len),
        };
        held.tick += 1;
        let tick = held.tick;
        if let Some((old, used)) = held.pieces.insert(piece.clone(), (bytes.clone(), tick)) {
            held.by_use.remove(&used);
            held.bytes = held.bytes.saturating_sub(old.len() as u64);
        }
        held.by_use.insert(tick, piece);
        held.bytes = held.bytes.saturating_add(len);
        while held.bytes > self.budget {
            let Some((_, oldest)) = held.by_use.pop_first() else {
                break;
            };
            if let Some((b, _)) = held.pieces.remove(&oldest) {
                held.bytes = held.bytes.saturating_sub(b.len() as u64);
            }
        }
        self.gauge
            .set(i64::try_from(held.bytes).unwrap_or(i64::MAX));
    }

    /// The piece that is exactly `range` of version `etag` of `key`, if
    /// one is kept.
    pub(crate) fn get(&self, key: &str, etag: Option<&str>, range: &Range<u64>) -> Option<Bytes> {
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
        held.tick += 1;
        let tick = held.tick;
        let (bytes, used) = held.pieces.get_mut(&piece)?;
        let (bytes, was) = (bytes.clone(), std::mem::replace(used, tick));
        held.by_use.remove(&was);
        held.by_use.insert(tick, piece);
        Some(bytes)
    }

    /// Bytes held now.
    #[cfg(test)]
    fn held(&self) -> u64 {
        self.held.lock().map_or(0, |h| h.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_found_by_exact_range_and_version_and_evicted_least_recent_first() {
        let cache = PieceCache::new(24, prometheus::IntGauge::new("t", "t").unwrap());
        let b = |c: u8| Bytes::from(vec![c; 6]);
        cache.put("k", Some("e1"), 100, &b(1));
        assert_eq!(cache.held(), 6);
        // Another version, another range, a range inside: not this piece.
        assert!(cache.get("k", Some("e2"), &(100..106)).is_none());
        assert!(cache.get("k", Some("e1"), &(100..105)).is_none());
        assert!(cache.get("other", Some("e1"), &(100..106)).is_none());
        assert_eq!(cache.get("k", Some("e1"), &(100..106)).unwrap(), b(1));
        // Found again: a cache, not a hand-off.
        assert_eq!(cache.get("k", Some("e1"), &(100..106)).unwrap(), b(1));
        cache.put("k", Some("e1"), 0, &b(2));
        cache.put("k", Some("e1"), 6, &b(3));
        cache.put("k", Some("e1"), 12, &b(4));
        assert_eq!(cache.held(), 24);
        // Use the first; the next put drops the least recently used (at 0).
        assert!(cache.get("k", Some("e1"), &(100..106)).is_some());
        cache.put("k", Some("e1"), 18, &b(5));
        assert_eq!(cache.held(), 24);
        assert!(cache.get("k", Some("e1"), &(0..6)).is_none());
        assert!(cache.get("k", Some("e1"), &(100..106)).is_some());
        assert!(cache.get("k", Some("e1"), &(18..24)).is_some());
        // Over a quarter of the bound: not kept.
        cache.put("k", Some("e1"), 200, &Bytes::from(vec![0; 7]));
        assert!(cache.get("k", Some("e1"), &(200..207)).is_none());
    }
}
