//! Chunks of local files recently sent over ztp/1, kept in memory
//! (`quic.piece_cache_bytes`). QUIC has no `sendfile`: every chunk a
//! stream sends is first copied from the page cache into the daemon's
//! memory, then into packets, and under many clients asking for the same
//! layers that first copy was about a sixth of the daemon's CPU (16.5 %,
//! docs/benchmarks.md). A chunk kept here is handed to quinn from memory
//! instead of being read from its file again.
//!
//! A chunk is kept under its file's version key (path and identity:
//! device, inode, size, modification and change times), so a file
//! replaced or rewritten in place is a new key and never answered from
//! another version's chunks; a hit is handed out only while the file
//! still has the identity it was catalogued with, as a read is. Bounded in
//! bytes, least recently used out first ([`PieceCache`], which charges
//! each chunk for its keeping too). Chunks under [`SMALLEST`] are not
//! kept: reading them costs little, and a gathered slice's many small
//! windows would fill the bound with entries; nor are chunks over a
//! quarter of the bound. Chunks not to be kept are read as without this
//! cache, into the read pool's buffers. An object-storage root's reads
//! are kept by its store (`storage.cache_bytes`), so its chunks are not
//! kept twice. Concurrent first reads of a chunk each read it (no
//! single flight): the cost is a read each, as without this cache.

use std::ops::Range;

use bytes::Bytes;
use prometheus::{IntCounter, Registry};

use crate::server::catalog::Served;
use crate::server::families::{counter, gauge, register};
use crate::server::store::piece_cache::PieceCache;

/// The smallest chunk kept.
pub(crate) const SMALLEST: usize = 64 << 10;

/// The chunks kept, and how often one was sent from here.
#[derive(Debug)]
pub(crate) struct Kept {
    /// The chunks, by version key and range.
    cache: PieceCache,
    /// `ztserve_quic_piece_cache_bytes`, set by the cache as it changes.
    bytes: prometheus::IntGauge,
    /// `ztserve_quic_piece_cache_hits_total`.
    hits: IntCounter,
    /// The largest chunk kept (a quarter of the bound); under
    /// [`SMALLEST`], none is.
    largest: u64,
}

impl Kept {
    /// At most `budget` bytes of chunks, as charged; none at 0, or when
    /// a quarter of `budget` is under [`SMALLEST`].
    pub(crate) fn new(budget: u64) -> Kept {
        let bytes = gauge(
            "ztserve_quic_piece_cache_bytes",
            "Bytes of recently sent chunks of local files kept in memory for ztp/1, with what keeping them costs (quic.piece_cache_bytes bounds it).",
        );
        Kept {
            cache: PieceCache::new(budget, bytes.clone()),
            bytes,
            hits: counter(
                "ztserve_quic_piece_cache_hits_total",
                "ztp/1 chunks sent from memory instead of read from their file (quic.piece_cache_bytes).",
            ),
            largest: budget / 4,
        }
    }

    /// Whether a chunk of `len` bytes is kept (and looked for).
    pub(crate) fn keeps(&self, len: u64) -> bool {
        (SMALLEST as u64..=self.largest).contains(&len)
    }

    /// The key `served`'s chunks are kept under, where they are kept: a
    /// local file's version key ([`Served::version_key`]); `None` for an
    /// object's (its store keeps them) or when nothing is kept.
    pub(crate) fn key(&self, served: &Served) -> Option<String> {
        let on = self.largest >= SMALLEST as u64;
        (on && !served.file.keeps_reads()).then(|| served.version_key())
    }

    /// The chunk that is exactly `range` of the version `key`, if kept.
    /// The caller counts it as [`Kept::sent`] once the file proved still
    /// that version.
    pub(crate) fn get(&self, key: &str, range: &Range<u64>) -> Option<Bytes> {
        self.cache.get(key, None, range)
    }

    /// One chunk went out from memory.
    pub(crate) fn sent(&self) {
        self.hits.inc();
    }

    /// Keeps `bytes`, read at `pos` of the version `key` into a buffer
    /// of their own ([`Buffer::Own`](crate::server::store::Buffer)),
    /// if a chunk of their length is kept ([`Kept::keeps`]).
    pub(crate) fn keep(&self, key: &str, pos: u64, bytes: &Bytes) {
        if self.keeps(bytes.len() as u64) {
            self.cache.put(key, None, pos, bytes);
        }
    }

    /// Registers the gauge and the counter in the daemon's registry.
    pub(crate) fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        register(registry, &[&self.bytes, &self.hits])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_too_small_or_too_large_are_not_kept_and_nothing_is_kept_at_zero() {
        let kept = Kept::new(1 << 20);
        let small = Bytes::from(vec![1u8; SMALLEST - 1]);
        kept.keep("v", 0, &small);
        assert!(kept.get("v", &(0..small.len() as u64)).is_none());
        assert_eq!(kept.bytes.get(), 0);
        // Over a quarter of the bound.
        let large = Bytes::from(vec![3u8; (1 << 18) + 1]);
        assert!(!kept.keeps(large.len() as u64));
        kept.keep("v", 0, &large);
        assert_eq!(kept.bytes.get(), 0);
        let chunk = Bytes::from(vec![2u8; SMALLEST]);
        kept.keep("v", 0, &chunk);
        assert_eq!(kept.get("v", &(0..SMALLEST as u64)), Some(chunk));
        assert!(kept.bytes.get() > SMALLEST as i64);
        // A bound whose quarter is under the smallest chunk keeps none.
        for budget in [0, 4 * SMALLEST as u64 - 1] {
            assert!(!Kept::new(budget).keeps(SMALLEST as u64));
        }
    }
}
