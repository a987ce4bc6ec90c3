//! Chunks of local files recently sent over ztp/1, kept in memory
//! (`quic.piece_cache_bytes`). QUIC has no `sendfile`: every chunk a
//! stream sends is first copied from the page cache into the daemon's
//! memory, then into packets, and under many clients asking for the same
//! layers that first copy was a fifth of the daemon's CPU
//! (docs/benchmarks.md). A chunk kept here is read from its file once and
//! handed to quinn from memory after that.
//!
//! A chunk is kept under its file's version key (path and identity:
//! device, inode, size, modification and change times), so a file
//! replaced or rewritten in place is a new key and never answered from
//! another version's chunks; a hit is handed out only while the file
//! still has the identity it was catalogued with, as a read is. Bounded in
//! bytes, least recently used out first ([`PieceCache`]). An
//! object-storage root's reads are kept by its store
//! (`storage.cache_bytes`), so its chunks are not kept twice.

use std::ops::Range;

use bytes::Bytes;
use prometheus::{IntCounter, Registry};

use crate::server::catalog::Served;
use crate::server::families::{counter, gauge, register};
use crate::server::store::piece_cache::PieceCache;

/// The chunks kept, and how often one answered a read.
#[derive(Debug)]
pub(crate) struct Kept {
    cache: PieceCache,
    /// `ztserve_quic_piece_cache_bytes`, set by the cache as it changes.
    bytes: prometheus::IntGauge,
    hits: IntCounter,
    on: bool,
}

impl Kept {
    /// At most `budget` bytes of chunks; none at 0.
    pub(crate) fn new(budget: u64) -> Kept {
        let bytes = gauge(
            "ztserve_quic_piece_cache_bytes",
            "Bytes of recently sent chunks of local files kept in memory for ztp/1 (quic.piece_cache_bytes bounds it).",
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
    pub(crate) fn get(&self, key: &str, range: &Range<u64>) -> Option<Bytes> {
        let hit = self.cache.get(key, None, range)?;
        self.hits.inc();
        Some(hit)
    }

    /// Keeps `bytes`, read at `pos` of the version `key`.
    pub(crate) fn keep(&self, key: &str, pos: u64, bytes: &Bytes) {
        self.cache.put(key, None, pos, bytes);
    }

    pub(crate) fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        register(registry, &[&self.bytes, &self.hits])
    }
}
