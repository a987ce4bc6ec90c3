//! Recently read bytes, in memory, keyed by where they came from: the
//! file or object, its version and the range. An object-storage root's
//! store keeps each ranged GET's answer (a component's chunk) here, keyed
//! by object and ETag: what the page cache is to a local root, so a
//! component is fetched from the store once to check and send it, and a
//! hot one (a popular layer) not again until it falls out
//! (`storage.cache_bytes`). ztp/1 keeps the chunks it sends of local
//! files in one too, keyed by the file's version (`quic.piece_cache_bytes`,
//! `quic/kept.rs`). A read is served from here when a piece is exactly its
//! range, so a replaced version never serves from another's pieces.
//!
//! Bounded in bytes; the least recently used pieces go first. Each piece
//! is charged its bytes and what keeping it costs (its key twice, the
//! entries of the two maps): a flood of tiny pieces fills the bound with
//! entries, not past it with bookkeeping. A piece over a quarter of the
//! bound is not kept.

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

/// What keeping a piece costs besides its bytes and its key's (counted
/// twice: both maps hold the key): the two maps' entries (a `Piece` in
/// each, about 90 bytes, and the maps' slack), the [`Bytes`] handle and
/// the buffer's owner, rounded up.
const PER_PIECE: u64 = 512;

/// What `piece` holding `len` bytes is charged.
fn charge(piece: &Piece, len: u64) -> u64 {
    let key = piece.key.len() + piece.etag.as_ref().map_or(0, String::len);
    len.saturating_add(2 * key as u64).saturating_add(PER_PIECE)
}

/// The pieces kept, at most `budget` bytes of them, as [`charge`]d.
#[derive(Debug)]
pub(crate) struct PieceCache {
    budget: u64,
    held: Mutex<Held>,
    /// What `Held::bytes` holds (`ztserve_store_cache_bytes`,
    /// `ztserve_quic_piece_cache_bytes`).
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
        let cost = charge(&piece, len);
        held.tick += 1;
        let tick = held.tick;
        if let Some((_, used)) = held.pieces.insert(piece.clone(), (bytes.clone(), tick)) {
            held.by_use.remove(&used);
            held.bytes = held.bytes.saturating_sub(cost);
        }
        held.by_use.insert(tick, piece);
        held.bytes = held.bytes.saturating_add(cost);
        while held.bytes > self.budget {
            let Some((_, oldest)) = held.by_use.pop_first() else {
                break;
            };
            if let Some((b, _)) = held.pieces.remove(&oldest) {
                let freed = charge(&oldest, b.len() as u64);
                held.bytes = held.bytes.saturating_sub(freed);
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
        // Room for four pieces of 6 bytes under key "k", version "e1".
        let one = 6 + 2 * 3 + PER_PIECE;
        let cache = PieceCache::new(4 * one, prometheus::IntGauge::new("t", "t").unwrap());
        let b = |c: u8| Bytes::from(vec![c; 6]);
        cache.put("k", Some("e1"), 100, &b(1));
        assert_eq!(cache.held(), one);
        // Another version, another range, a range inside: not this piece.
        assert!(cache.get("k", Some("e2"), &(100..106)).is_none());
        assert!(cache.get("k", Some("e1"), &(100..105)).is_none());
        assert!(cache.get("other", Some("e1"), &(100..106)).is_none());
        assert_eq!(cache.get("k", Some("e1"), &(100..106)).unwrap(), b(1));
        // Found again: a cache, not a hand-off.
        assert_eq!(cache.get("k", Some("e1"), &(100..106)).unwrap(), b(1));
        // Kept again: charged once.
        cache.put("k", Some("e1"), 100, &b(1));
        assert_eq!(cache.held(), one);
        cache.put("k", Some("e1"), 0, &b(2));
        cache.put("k", Some("e1"), 6, &b(3));
        cache.put("k", Some("e1"), 12, &b(4));
        assert_eq!(cache.held(), 4 * one);
        // Use the first; the next put drops the least recently used (at 0).
        assert!(cache.get("k", Some("e1"), &(100..106)).is_some());
        cache.put("k", Some("e1"), 18, &b(5));
        assert_eq!(cache.held(), 4 * one);
        assert!(cache.get("k", Some("e1"), &(0..6)).is_none());
        assert!(cache.get("k", Some("e1"), &(100..106)).is_some());
        assert!(cache.get("k", Some("e1"), &(18..24)).is_some());
        // Over a quarter of the bound: not kept.
        let big = Bytes::from(vec![0; usize::try_from(one + 1).unwrap()]);
        cache.put("k", Some("e1"), 200, &big);
        assert!(cache.get("k", Some("e1"), &(200..201 + one)).is_none());
        assert_eq!(cache.held(), 4 * one);
    }

    /// A flood of one-byte pieces under long keys holds the bound, as
    /// charged for what each entry costs, not for its one byte.
    #[test]
    fn tiny_pieces_are_charged_for_their_keeping() {
        let cache = PieceCache::new(64 << 10, prometheus::IntGauge::new("t", "t").unwrap());
        let key = "k".repeat(100);
        for at in 0..100_000u64 {
            cache.put(&key, None, at, &Bytes::from_static(b"x"));
        }
        assert!(cache.held() <= 64 << 10, "{}", cache.held());
        let kept = cache.held.lock().unwrap().pieces.len() as u64;
        assert_eq!(kept, (64 << 10) / (1 + 200 + PER_PIECE), "pieces kept");
    }
}
