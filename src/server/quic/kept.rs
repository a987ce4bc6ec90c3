//! Chunks of local files recently sent over ztp/1, kept in memory
//! (`quic.piece_cache_bytes`). QUIC has no `sendfile`: every chunk a
//! stream sends is first copied from the page cache into the daemon's
//! memory, then into packets, and under many clients asking for the same
//! layers that first copy was a fifth of the daemon's CPU
//! (docs/benchmarks.md). A chunk kept here is handed to quinn from memory
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
//! windows would fill the bound with entries. An object-storage root's
//! reads are kept by its store (`storage.cache_bytes`), so its chunks are
//! not kept twice. Concurrent first reads of a chunk each read it (no
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
    cache: PieceCache,
    /// `ztserve_quic_piece_cache_bytes`, set by the cache as it changes.
    bytes: prometheus::IntGauge,
    hits: IntCounter,
    on: bool,
}

impl Kept {
    /// At most `budget` bytes of chunks, as charged; none at 0. A chunk
    /// over a quarter of `budget` is not kept.
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
            on: budget > 0,
        }
    }

    /// The key `served`'s chunks are kept under, where they are kept: a
    /// local file's version key ([`Served::version_key`]); `None` for an
    /// object's (its store keeps them) or when nothing is kept.
    pub(crate) fn key(&self, served: &Served) -> Option<String> {
        (self.on && served.file.is_local()).then(|| served.version_key())
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
    /// of their own ([`Blob::read_unpooled`](crate::server::store::Blob)),
    /// unless they are too small to be worth it.
    pub(crate) fn keep(&self, key: &str, pos: u64, bytes: &Bytes) {
        if bytes.len() >= SMALLEST {
            self.cache.put(key, None, pos, bytes);
        }
    }

    pub(crate) fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        register(registry, &[&self.bytes, &self.hits])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_chunks_are_not_kept_and_nothing_is_kept_at_zero() {
        let kept = Kept::new(64 << 20);
        let small = Bytes::from(vec![1u8; SMALLEST - 1]);
        kept.keep("v", 0, &small);
        assert!(kept.get("v", &(0..small.len() as u64)).is_none());
        assert_eq!(kept.bytes.get(), 0);
        let tail = Bytes::from(vec![2u8; SMALLEST]);
        kept.keep("v", 0, &tail);
        assert_eq!(kept.get("v", &(0..SMALLEST as u64)), Some(tail));
        assert!(kept.bytes.get() > SMALLEST as i64);
        assert!(!Kept::new(0).on);
    }
}
